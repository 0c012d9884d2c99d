"""Multi-process pretraining on CPU: `torchrun --nproc_per_node 2` (gloo) runs BertologyTrainer's step and
`bertology pretrain` for every variant family; one step's loss and gradients equal one process on the same global
batch. One launch for all families (each launch costs ~10 s); `accelerate launch` is the slow variant.

docs/pretraining.md's own `torchrun` and `accelerate launch` lines, as written (only the recipe, corpus and folder made
tiny), must run one job: the two ranks together see what one process sees with twice the batch, and one process
writes the folder. Launchers run as `sys.executable -m ...`, so no test depends on what is on PATH."""

from __future__ import annotations

import contextlib
import io
import json
import shlex
import socket
import subprocess
from pathlib import Path

import pytest

import hf_bertology as hb
from hf_bertology.training import pretrain
from hf_bertology.training.arguments import has_accelerator, launcher_defaults
from platform_support import PYTHON, REPO, no_dropout, subprocess_env, tiny_recipes, write_corpus

TOLERANCE = 1e-5


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_worker(launcher: list[str], worker: str, spec, tmp_path, timeout: int) -> subprocess.CompletedProcess:
    """`launcher` (torchrun, accelerate) running tests/`worker` on `spec`; it must exit 0."""
    done = subprocess.run(
        [*launcher, str(REPO / "tests" / worker), str(spec)],
        env=subprocess_env(MASTER_ADDR="127.0.0.1"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-6000:])
    return done


def launch(launcher: list[str], tmp_path, recipes: list[str] | None = None, wrap: str = "ddp") -> list[dict]:
    corpus = write_corpus(tmp_path / "corpus.txt", n_docs=30)
    cases = []
    for recipe in recipes or tiny_recipes():
        tokenizer_dir = tmp_path / f"tok-{recipe}"  # trained once here: every process must use the same one
        hb.get_recipe(recipe).train_tokenizer([corpus.read_text()], vocab_size=300).save_pretrained(tokenizer_dir)
        out = tmp_path / f"run-{recipe}"
        cases.append(
            {"recipe": recipe, "tokenizer": str(tokenizer_dir), "train_file": str(corpus), "output_dir": str(out)}
        )
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"cases": cases, "result": str(tmp_path / "result.json"), "wrap": wrap}))
    run_worker(launcher, "ddp_worker.py", spec, tmp_path, timeout=900)
    ranks = json.loads((tmp_path / "result.json").read_text())
    assert len(ranks) == 2
    for case in cases:
        assert (tmp_path / f"run-{case['recipe']}" / "model.safetensors").is_file(), case
    return [result for rank in ranks for result in rank]


def check(results: list[dict], recipes: list[str] | None = None) -> None:
    assert {r["recipe"] for r in results} == set(recipes or tiny_recipes())
    for result in results:
        assert result["count_diff"] == 0, result
        assert result["missing_grads"] == [], result
        assert result["loss_diff"] <= TOLERANCE * max(1.0, abs(result["loss"])), result
        assert result["grad_diff"] <= TOLERANCE, result
        assert result["pretrain_status"] == 0, result
        assert result["sampling_temperature"] in (None, 1.0), result  # RTD at the real temperature


def test_torchrun_two_processes_equal_one(tmp_path):
    # --standalone: a local rendezvous on a free port (`--master_port 0` would hang the processes).
    launcher = [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    check(launch(launcher, tmp_path))


def test_fsdp2_two_processes_equal_one(tmp_path):
    # torch's FSDP2 (`fully_shard`) on 2 CPU processes over gloo: one BERT step's loss and gradients equal one
    # process on the whole batch. accelerate itself shards only on GPU-type process groups: `bertology pretrain
    # --fsdp full_shard` trains with DDP on CPUs and must say so.
    launcher = [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    results = launch(launcher, tmp_path, ["bert-tiny"], wrap="fsdp2")
    check(results, ["bert-tiny"])
    assert all(result["fsdp_ignored_warned"] for result in results), results


@pytest.mark.slow
def test_accelerate_launch_two_processes_equal_one(tmp_path):
    # `--cpu --num_processes 2` silently runs one process; `--multi_gpu` on a CPU machine runs two (gloo).
    launcher = [PYTHON, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
                "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_ip", "127.0.0.1", "--main_process_port", str(free_port())]  # fmt: skip
    check(launch(launcher, tmp_path))


def readme_command(launcher: str) -> list[str]:
    """The command line of docs/pretraining.md ("Several processes") that starts with `launcher` (`torchrun`,
    `accelerate launch`)."""
    page = (REPO / "docs" / "pretraining.md").read_text()
    lines = [line for line in page.splitlines() if line.startswith(launcher + " ")]
    assert len(lines) == 1, (launcher, lines)
    return shlex.split(lines[0].split("#")[0])


def tiny_pretrain_flags(words: list[str], corpus, output_dir) -> list[str]:
    """The README's `pretrain` flags with a tiny recipe, corpus and folder in place of bert-mini, wiki_00, runs/."""
    flags = words[words.index("pretrain") + 1 :]
    if flags[-1] == "...":  # the README's `--recipe bert-mini ...`: the torchrun line's corpus and folder flags
        flags = [*flags[:-1], "--train_file", "CORPUS", "--output_dir", "OUT"]
    tiny = {"--recipe": "bert-tiny", "--train_file": str(corpus), "--output_dir": str(output_dir)}
    assert set(flags[::2]) == set(tiny), flags  # no other flag: the command is tested as written
    return [tiny.get(flags[i - 1], word) if i % 2 else word for i, word in enumerate(flags)]


def check_one_job(done: subprocess.CompletedProcess, tmp_path, corpus, output_dir) -> None:
    """Two ranks are one job holding the recipe's global batch B: B/2 per device, said in one line; tokens seen
    equal one process's with batch B (same seed, so the same order of examples), and one process wrote the folder;
    rank 0 trained the tokenizer and built the examples, rank 1 reused them (docs/pretraining.md, "Prepared once").
    Independent ranks would each say one process, and both would write."""
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-6000:])
    assert (output_dir / "model.safetensors").is_file()
    assert done.stderr.count(f"wrote {output_dir}") == 1, done.stderr[-6000:]
    batch = hb.get_recipe("bert-tiny").training_defaults["global_batch_size"]
    line = f"global batch {batch} = {batch // 2} per device x 2 processes x 1 accumulation step"
    assert done.stderr.count(line) == 1, done.stderr[-6000:]
    for kind in ("tokenizer", "examples"):  # rank 0 prepared the data once, rank 1 read what it wrote
        assert done.stderr.count(f"prepared {kind} once") == 1, done.stderr[-6000:]
        assert done.stderr.count(f"reusing the prepared {kind}") == 1, done.stderr[-6000:]
    job = json.loads((output_dir / "all_results.json").read_text())
    single = tmp_path / "single"
    argv = ["--recipe", "bert-tiny", "--train_file", str(corpus), "--output_dir", str(single),
            "--tokenizer_name", str(output_dir)]  # fmt: skip
    reference = pretrain.main(argv)
    assert job["epoch"] < 1  # no epoch boundary, where the ranks' last batches would differ
    assert job["tokens_seen"] == reference["tokens_seen"], (job, reference)
    assert job["epoch"] == pytest.approx(reference["epoch"]), (job, reference)


def test_readme_torchrun_command_is_one_job(tmp_path):
    words = readme_command("torchrun")
    corpus, output_dir = write_corpus(tmp_path / "corpus.txt", n_docs=120), tmp_path / "run"
    launcher = [PYTHON, "-m", "torch.distributed.run", *words[1 : words.index("-m")]]
    done = subprocess.run(
        [*launcher, "-m", "hf_bertology", "pretrain", *tiny_pretrain_flags(words, corpus, output_dir)],
        env=subprocess_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    check_one_job(done, tmp_path, corpus, output_dir)


def test_readme_accelerate_command_is_one_job(tmp_path):
    words = readme_command("accelerate launch")
    corpus, output_dir = write_corpus(tmp_path / "corpus.txt", n_docs=120), tmp_path / "run"
    # A free port (the default, 29500, may be taken by another run on the machine); otherwise the README's line.
    launcher = [PYTHON, "-m", "accelerate.commands.launch", "--main_process_port", "0", *words[2 : words.index("-m")]]
    done = subprocess.run(
        [*launcher, "-m", "hf_bertology", "pretrain", *tiny_pretrain_flags(words, corpus, output_dir)],
        env=subprocess_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    check_one_job(done, tmp_path, corpus, output_dir)


def test_launcher_on_cpu_defaults_to_one_gloo_job(monkeypatch):
    gloo = {} if has_accelerator() else {"use_cpu": True, "ddp_backend": "gloo"}
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert launcher_defaults(set()) == gloo
    assert launcher_defaults({"ddp_backend"}) == {k: v for k, v in gloo.items() if k == "use_cpu"}
    assert launcher_defaults({"use_cpu"}) == {}  # the user's `--use_cpu true|false` decides alone
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert launcher_defaults(set()) == {}


def test_launcher_with_one_process_a_rank_stops_before_training(tmp_path, monkeypatch, capsys):
    # `--use_cpu false` on a CPU machine: each rank would train alone; one error line names the flags instead.
    from hf_bertology import cli

    corpus = write_corpus(tmp_path / "corpus.txt", n_docs=5)
    monkeypatch.setenv("WORLD_SIZE", "2")
    if has_accelerator():
        pytest.skip("a GPU machine runs the launcher's job on its GPUs")
    argv = ["pretrain", "--recipe", "bert-tiny", "--train_file", str(corpus), "--output_dir", str(tmp_path / "o"),
            "--use_cpu", "false"]  # fmt: skip
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and "--use_cpu true --ddp_backend gloo" in err[-1], err
    assert not (tmp_path / "o" / "model.safetensors").exists()


def run_example(launcher: list[str], tmp_path, *flags: str) -> tuple[subprocess.CompletedProcess, Path]:
    """`bertology pretrain` of bert-tiny on a tiny corpus under `launcher`, with the shipped example's `flags`."""
    corpus, output_dir = write_corpus(tmp_path / "corpus.txt", n_docs=40), tmp_path / "run"
    argv = ["--recipe", "bert-tiny", "--train_file", str(corpus), "--output_dir", str(output_dir)]
    argv += ["--vocab_size", "300", "--per_device_train_batch_size", "4", "--max_steps", "2", "--report_to", "none"]
    done = subprocess.run(
        [*launcher, "-m", "hf_bertology", "pretrain", *argv, *flags],
        env=subprocess_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-6000:]
    assert done.stderr.count(f"wrote {output_dir}") == 1, done.stderr[-6000:]
    return done, output_dir


def test_the_fsdp_example_asks_for_no_precision_and_two_processes():
    """Issue 27 item 15: the shipped file asked for 8 processes and bf16, which accelerate applied on a CPU without
    a word. Precision is `bertology pretrain`'s (bf16 on capable GPUs only); the process count runs on the README's
    machine (`--num_processes` overrides it on GPUs)."""
    import yaml

    config = yaml.safe_load((REPO / "examples" / "accelerate_fsdp.yaml").read_text())
    assert (config["mixed_precision"], config["num_processes"], config["distributed_type"]) == ("no", 2, "FSDP")


@pytest.mark.slow
def test_the_fsdp_example_runs_as_written(tmp_path):
    """`accelerate launch --config_file examples/accelerate_fsdp.yaml -m hf_bertology pretrain ...` as the README
    writes it: two processes, one job, and on CPUs the warning that FSDP falls back to DDP."""
    launcher = [PYTHON, "-m", "accelerate.commands.launch", "--main_process_port", str(free_port())]
    launcher += ["--config_file", str(REPO / "examples" / "accelerate_fsdp.yaml")]
    done, _ = run_example(launcher, tmp_path)
    if not has_accelerator():
        assert done.stderr.count("FSDP was asked for, but accelerate shards models only on GPUs") == 2


@pytest.mark.slow
def test_the_deepspeed_example_runs(tmp_path):
    """`--deepspeed examples/deepspeed_zero2.json` under torchrun (2 processes): ZeRO-2 trains and checkpoints on
    CPUs too (DeepSpeed's CPU accelerator; the first run compiles its shared-memory op, minutes). Needs the
    `deepspeed` extra."""
    pytest.importorskip("deepspeed")
    launcher = [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    flags = ["--deepspeed", str(REPO / "examples" / "deepspeed_zero2.json"), "--save_steps", "2"]
    _, output_dir = run_example(launcher, tmp_path, *flags)
    assert (output_dir / "checkpoint-2" / "global_step2").is_dir()  # DeepSpeed's own sharded optimizer state


HELD_RECIPES = ["bert-tiny", "electra-tiny", "modernbert-tiny"]


def held_runs(tmp_path, processes: int, corpus, tokenizers: dict) -> dict[str, Path]:
    """3 steps of each of HELD_RECIPES on `processes` processes (one launch for all), micro-batches of 2 holding
    the recipe's global batch 8 (accumulation 4, 2, 1 on 1, 2, 4 processes), dropout off (it draws per row and
    process); returns each run's folder."""
    folders = {recipe: tmp_path / f"{recipe}-{processes}" for recipe in HELD_RECIPES}
    runs = []
    for recipe, folder in folders.items():
        overrides = ",".join(f"{key}=0.0" for key in no_dropout(recipe))
        runs.append(["--recipe", recipe, "--train_file", str(corpus), "--output_dir", str(folder),
                     "--tokenizer_name", str(tokenizers[recipe]), "--config_overrides", overrides,
                     "--per_device_train_batch_size", "2", "--max_steps", "3", "--logging_steps", "1",
                     "--save_strategy", "no", "--seed", "0", "--report_to", "none", "--disable_tqdm", "true",
                     "--use_cpu", "true", "--dataloader_num_workers", "0"])  # fmt: skip
    accumulation = 4 // processes
    line = f"global batch 8 = 2 per device x {processes} process{'es' * (processes > 1)} x {accumulation}"
    if processes == 1:  # in this process: a launch costs seconds
        from hf_bertology import cli

        with contextlib.redirect_stderr(io.StringIO()) as err:
            assert [cli.main(["pretrain", *argv]) for argv in runs] == [0] * len(runs)
        assert err.getvalue().count(line) == len(runs), err.getvalue()[-6000:]
        return folders
    spec = tmp_path / f"spec-{processes}.json"
    spec.write_text(json.dumps({"runs": runs, "result": str(tmp_path / f"result-{processes}.json")}))
    launcher = [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(processes)]
    done = run_worker(launcher, "runs_worker.py", spec, tmp_path, timeout=600)
    assert json.loads((tmp_path / f"result-{processes}.json").read_text()) == [0] * len(runs)
    assert done.stderr.count(line) == len(runs), done.stderr[-6000:]
    return folders


def test_the_global_batch_is_held_on_one_two_and_four_processes(tmp_path):
    """Issue 51: the same recipe on 1, 2 or 4 processes (gloo) trains the same 3 steps, the global batch held by
    the accumulation: the logged losses and the weights agree to 1e-5 (masks and ELECTRA's sampling are keyed by
    example, losses normalised by counts over processes and micro-batches)."""
    from safetensors.torch import load_file

    corpus = write_corpus(tmp_path / "corpus.txt", n_docs=60)
    tokenizers = {}
    for recipe in HELD_RECIPES:
        tokenizers[recipe] = tmp_path / f"tok-{recipe}"
        hb.get_recipe(recipe).train_tokenizer([corpus.read_text()], vocab_size=300).save_pretrained(tokenizers[recipe])
    runs = {processes: held_runs(tmp_path, processes, corpus, tokenizers) for processes in (1, 2, 4)}
    for recipe in HELD_RECIPES:
        folder = runs[1][recipe]
        reference = load_file(folder / "model.safetensors")
        logs = json.loads((folder / "all_results.json").read_text())
        for processes in (2, 4):
            other = runs[processes][recipe]
            weights = load_file(other / "model.safetensors")
            assert weights.keys() == reference.keys()
            worst = max((weights[name] - reference[name]).abs().max().item() for name in reference)
            assert worst <= TOLERANCE, (recipe, processes, worst)
            results = json.loads((other / "all_results.json").read_text())
            assert results["tokens_seen"] == logs["tokens_seen"], (recipe, processes)
            assert results["train_loss"] == pytest.approx(logs["train_loss"], rel=TOLERANCE), (recipe, processes)


def test_resume_on_another_process_count_continues_the_run(tmp_path):
    """Issue 51: a checkpoint of 2 processes resumed on 1, and one of 1 resumed on 2, end with the weights of the
    uninterrupted run (fp32 tolerance): the global batch 8 is held (micro-batches of 2, accumulation 4 or 2), so
    every step trains the same examples with the same masks. Dropout off (it draws per row and process), a
    constant rate (a schedule is rebuilt from --max_steps)."""
    from safetensors.torch import load_file

    from hf_bertology import cli

    corpus, tokenizer = write_corpus(tmp_path / "corpus.txt", n_docs=120), tmp_path / "tok"
    hb.get_recipe("bert-tiny").train_tokenizer([corpus.read_text()], vocab_size=300).save_pretrained(tokenizer)
    overrides = ",".join(f"{key}=0.0" for key in no_dropout("bert-tiny"))

    def run(out: str, steps: int, *extra: str) -> list[str]:
        return ["--recipe", "bert-tiny", "--train_file", str(corpus), "--output_dir", str(tmp_path / out),
                "--tokenizer_name", str(tokenizer), "--config_overrides", overrides, "--max_steps", str(steps),
                "--per_device_train_batch_size", "2", "--lr_scheduler_type", "constant", "--save_steps", "2",
                "--seed", "0", "--report_to", "none", "--disable_tqdm", "true", "--use_cpu", "true",
                "--dataloader_num_workers", "0", *extra]  # fmt: skip

    resume = ("--resume_from_checkpoint", "last")
    assert cli.main(["pretrain", *run("whole", 4)]) == 0
    assert cli.main(["pretrain", *run("one-then-two", 2)]) == 0
    spec = tmp_path / "spec.json"
    runs = [run("two-then-one", 2), run("one-then-two", 4, *resume)]
    spec.write_text(json.dumps({"runs": runs, "result": str(tmp_path / "result.json")}))
    launcher = [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    done = run_worker(launcher, "runs_worker.py", spec, tmp_path, timeout=600)
    assert json.loads((tmp_path / "result.json").read_text()) == [0, 0]
    assert "saved by 1 process, on 2 processes: the global batch 8 is held" in done.stderr, done.stderr[-6000:]
    assert cli.main(["pretrain", *run("two-then-one", 4, *resume)]) == 0
    whole = load_file(tmp_path / "whole" / "model.safetensors")
    for name in ("two-then-one", "one-then-two"):
        assert json.loads((tmp_path / name / "checkpoint-4" / "trainer_state.json").read_text())["global_step"] == 4
        resumed = load_file(tmp_path / name / "model.safetensors")
        worst = max((resumed[key] - whole[key]).abs().max().item() for key in whole)
        assert worst <= TOLERANCE, (name, worst)


def test_two_nodes_hold_the_global_batch_and_resume_on_one(tmp_path):
    """Issue 51: `torchrun --nnodes 2 --nproc_per_node 1 --rdzv_backend c10d` started twice on this machine, as
    two nodes would start it (examples/slurm_pretrain.sh): one job of 2 processes holding the global batch, rank 0
    alone writing the folder, its checkpoint marked by 2 processes; that checkpoint then resumes on one node."""
    from hf_bertology import cli

    corpus, out, tokenizer = write_corpus(tmp_path / "corpus.txt", n_docs=60), tmp_path / "run", tmp_path / "tok"
    hb.get_recipe("bert-tiny").train_tokenizer([corpus.read_text()], vocab_size=300).save_pretrained(tokenizer)
    argv = ["--recipe", "bert-tiny", "--train_file", str(corpus), "--output_dir", str(out), "--tokenizer_name",
            str(tokenizer), "--per_device_train_batch_size", "2", "--save_steps", "2", "--seed", "0",
            "--report_to", "none", "--disable_tqdm", "true", "--dataloader_num_workers", "0"]  # fmt: skip
    launcher = [PYTHON, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "1",
                "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{free_port()}", "--rdzv_id", "nodes",
                "--local_addr", "127.0.0.1"]  # fmt: skip
    nodes = [
        subprocess.Popen(
            [*launcher, "-m", "hf_bertology", "pretrain", *argv, "--max_steps", "2"],
            env=subprocess_env(),
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    said = [node.communicate(timeout=600) for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], [err[-4000:] for _, err in said]
    err = "".join(err for _, err in said)
    assert err.count(f"wrote {out}") == 1, err[-6000:]  # rank 0 alone
    assert err.count("global batch 8 = 2 per device x 2 processes x 2 accumulation steps") == 1, err[-6000:]
    assert json.loads((out / "checkpoint-2" / "checkpoint_complete.json").read_text())["world_size"] == 2
    resume = [*argv, "--max_steps", "4", "--resume_from_checkpoint", "last", "--use_cpu", "true"]
    assert cli.main(["pretrain", *resume]) == 0
    assert json.loads((out / "all_results.json").read_text())["global_step"] == 4


def test_the_slurm_example_launches_what_the_two_node_test_runs():
    """examples/slurm_pretrain.sh: valid bash, one torchrun per node over a c10d rendezvous (the flags the two-node
    test runs), resuming the newest checkpoint when requeued, and the environment it expects named at its top."""
    script = REPO / "examples" / "slurm_pretrain.sh"
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    text = script.read_text()
    for words in ("--nnodes", "--rdzv_backend c10d", "--rdzv_endpoint", "--resume_from_checkpoint last",
                  "#SBATCH --ntasks-per-node=1", "OUTPUT_DIR", "TRAIN_FILE"):  # fmt: skip
        assert words in text, words
