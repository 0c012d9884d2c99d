"""`--streaming`: pretraining reads the corpus lazily, so memory does not grow with the corpus. The slow test
streams a generated multi-GB file and compares the child's peak RSS with the same run on a small file."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

import hf_bertology as hb
from hf_bertology import cli
from hf_bertology.training import pretrain
from platform_support import PYTHON, REPO, pretrain_argv, subprocess_env, write_corpus

# Runs `bertology pretrain ARGV` as a child and prints the child's peak RSS (KiB on Linux): a fresh process, so
# no earlier child of the test process counts.
PEAK_RSS = (
    "import json, resource, subprocess, sys\n"
    "status = subprocess.run([sys.executable, '-m', 'hf_bertology', 'pretrain', *json.loads(sys.argv[1])]).returncode\n"
    "print('PEAK', status, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
)


def test_streaming_smoke(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus.txt", n_docs=30)
    argv = pretrain_argv("bert-tiny", corpus, tmp_path / "out", "--streaming", "--max_steps", "2")
    assert cli.main(["pretrain", *argv]) == 0, capsys.readouterr().err[-3000:]
    assert json.loads((tmp_path / "out" / "all_results.json").read_text())["tokens_seen"] > 0


def write_big_corpus(path, gigabytes: float) -> None:
    block = write_corpus(path.with_suffix(".block"), n_docs=2000, seed=1).read_bytes()  # ~1 MB
    with open(path, "wb") as handle:
        for _ in range(int(gigabytes * 1e9 / len(block)) + 1):
            handle.write(block)


def peak_rss_mib(argv: list[str]) -> float:
    done = subprocess.run(
        [PYTHON, "-c", PEAK_RSS, json.dumps(argv)],
        env=subprocess_env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    line = next(line for line in done.stdout.splitlines() if line.startswith("PEAK "))
    _, status, kib = line.split()
    assert status == "0", done.stderr[-3000:]
    return int(kib) / 1024


@pytest.mark.slow
def test_streaming_a_multi_gb_corpus_keeps_memory_flat(tmp_path):
    gigabytes = float(os.environ.get("BERTOLOGY_STREAM_GB", "3"))
    big, small = tmp_path / "big.txt", write_corpus(tmp_path / "small.txt", n_docs=2000, seed=1)
    write_big_corpus(big, gigabytes)
    tokenizer = tmp_path / "tokenizer"
    hb.get_recipe("roberta-tiny").train_tokenizer([small.read_text()], vocab_size=1000).save_pretrained(tokenizer)
    flags = [
        "--streaming",
        "--max_steps",
        "300",
        "--per_device_train_batch_size",
        "64",
        "--global_batch_size",
        "64",
        "--tokenizer_name",
        str(tokenizer),
    ]
    flags += ["--save_strategy", "no", "--logging_steps", "100"]
    peaks = {}
    for name, corpus in (("small", small), ("big", big)):
        peaks[name] = peak_rss_mib(pretrain_argv("roberta-tiny", corpus, tmp_path / f"out-{name}", *flags))
    print(f"peak RSS: {gigabytes:g} GB corpus {peaks['big']:.0f} MiB, 1 MB corpus {peaks['small']:.0f} MiB")
    assert peaks["big"] < 1.25 * peaks["small"] + 200, peaks  # flat: independent of the corpus size
    assert peaks["big"] < big.stat().st_size / 2**20 / 2, peaks  # and far below the corpus


def test_two_processes_stream_any_corpus(tmp_path):
    """Issue 27 item 11: with accelerate's default dispatch, process 0 concatenated one batch per process, and batches
    padded to different lengths (any corpus whose examples are not all full-length; WikiText-2 at step 6) crashed
    the job. Each process now reads its own share: the job runs, and the two processes of batch B together see the
    tokens one process sees with batch 2B (disjoint shares, nothing skipped)."""
    corpus = write_corpus(tmp_path / "corpus.txt", n_docs=40)  # NSP pairs of many lengths: the first step crashed
    out = tmp_path / "job"
    flags = ["--streaming", "--max_steps", "3", "--logging_steps", "1"]
    launcher = [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    done = subprocess.run(
        [*launcher, "-m", "hf_bertology", "pretrain", *pretrain_argv("bert-tiny", corpus, out, *flags)],
        env=subprocess_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stderr.count(f"wrote {out}") == 1, done.stderr[-4000:]
    job = json.loads((out / "all_results.json").read_text())
    single = pretrain_argv("bert-tiny", corpus, tmp_path / "single", *flags, "--tokenizer_name", str(out))
    single[single.index("--per_device_train_batch_size") + 1] = "8"
    reference = pretrain.main(single)
    assert job["tokens_seen"] == reference["tokens_seen"] > 0, (job, reference)


def test_stream_ids_are_distinct_across_processes_that_count_their_own_shares():
    """Two processes reading their own shares of a stream both count positions from 0 (`scale_out`): the example
    ids that key the masks must still differ, else example k of each process is masked alike."""
    from hf_bertology.collators.base import EXAMPLE_ID
    from hf_bertology.training.trainer import stream_position

    ids = [stream_position({}, index, rank, 2)[EXAMPLE_ID] for rank in (0, 1) for index in range(50)]
    assert len(set(ids)) == len(ids)
    assert [stream_position({}, index)[EXAMPLE_ID] for index in range(5)] == list(range(5))  # one process: positions
