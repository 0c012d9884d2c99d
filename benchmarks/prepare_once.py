"""A run's set-up before its first step, cold and on a second identical run, against run_mlm.py's preprocessing.

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/prepare_once.py --workers 1 2

Each measurement is one fresh process with `HF_DATASETS_CACHE` in a scratch folder (empty for a cold run, the cold
run's for the second one), timed twice: from its start to its end (imports included, as a user waits for them), and
its data set-up alone (from reading the corpus to the examples ready, as the process prints it).

- ours: `bertology prepare` (what `bertology pretrain` does before its first step: read the corpus, train the
  family's tokenizer, tokenize, build the recipe's examples, keep them), cold and warm (the same command again);
  also cold with the tokenizer given (`--tokenizer_name`, the one ours trained), which is what run_mlm does.
- run_mlm: transformers' examples/pytorch/language-modeling/run_mlm.py's preprocessing, written again here (the
  example is not an installable package): the `text` loader (one row a line, line breaks kept, 5% held out as its
  validation split), `tokenizer(text, return_special_tokens_mask=True)` in a batched `map`, then its
  `group_texts` (every row of a map batch concatenated and cut into `max_seq_length` blocks, the rest dropped), both
  with `num_proc` = the workers; cold, then warm (the `datasets` cache of the same maps).

The same files, the same tokenizer (ours, trained in the first cold run), the same length. Measured interleaved:
ours cold, run_mlm cold, ours warm, run_mlm warm, ours cold with the tokenizer given, per worker count. Prints the
table docs/benchmarks.md holds, and writes it as JSON (`--out`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from itertools import chain
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "data" / "corpus" / "enwiki-2015-wikiextractor" / "AA"


def run_mlm_preprocessing(files: list[str], tokenizer_dir: str, workers: int, max_seq_length: int) -> int:
    """run_mlm.py's data path (line_by_line off, no validation file): returns the number of training blocks."""
    import datasets
    from transformers import AutoTokenizer

    start = time.perf_counter()
    data_files = {"train": files}
    raw = datasets.DatasetDict(
        validation=datasets.load_dataset("text", data_files=data_files, split="train[:5%]", keep_linebreaks=True),
        train=datasets.load_dataset("text", data_files=data_files, split="train[5%:]", keep_linebreaks=True),
    )
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    max_seq_length = min(max_seq_length, tokenizer.model_max_length)

    def tokenize(rows):
        return tokenizer(rows["text"], return_special_tokens_mask=True)

    tokenized = raw.map(
        tokenize, batched=True, num_proc=workers, remove_columns=["text"], desc="Running tokenizer on every text"
    )

    def group_texts(rows):
        joined = {name: list(chain(*values)) for name, values in rows.items()}
        total = len(joined["input_ids"]) // max_seq_length * max_seq_length
        return {
            name: [values[i : i + max_seq_length] for i in range(0, total, max_seq_length)]
            for name, values in joined.items()
        }

    grouped = tokenized.map(group_texts, batched=True, num_proc=workers, desc=f"Grouping texts in {max_seq_length}")
    print(f"prepared {len(grouped['train']):,} blocks in {time.perf_counter() - start:.1f} s")
    return len(grouped["train"])


def timed(command: list[str], cache: Path, log: Path) -> tuple[float, float]:
    """(wall seconds of the process, seconds of its data set-up: from reading the corpus to the examples ready, as
    the process itself printed them: `... in N s`)."""
    env = dict(os.environ, HF_DATASETS_CACHE=str(cache), PYTHONPATH=str(ROOT / "src"), TOKENIZERS_PARALLELISM="true")
    start = time.perf_counter()
    with open(log, "w") as out:
        done = subprocess.run(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed (exit {done.returncode}); see {log}")
    setup = re.findall(r" in ([0-9.]+) s\b", log.read_text(errors="replace"))
    return seconds, float(setup[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default=str(CORPUS), help="the folder of the files (default: shared 100 MB)")
    parser.add_argument("--recipe", default="roberta-base")
    parser.add_argument("--max_seq_length", type=int, default=512)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--scratch", default="/tmp/bertology-prepare-bench")
    parser.add_argument("--out", default=None, help="write the figures as JSON here")
    parser.add_argument("--run_mlm", nargs=3, metavar=("TOKENIZER", "WORKERS", "LENGTH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    files = sorted(str(p) for p in Path(args.corpus).iterdir() if p.is_file() and not p.name.isupper())
    if args.run_mlm:  # one measured process of the run_mlm side
        tokenizer_dir, workers, length = args.run_mlm
        print("blocks:", run_mlm_preprocessing(files, tokenizer_dir, int(workers), int(length)))
        return
    scratch = Path(args.scratch)
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    size = sum(os.path.getsize(f) for f in files)
    print(f"{len(files)} files, {size / 1e6:.1f} MB; recipe {args.recipe}, length {args.max_seq_length}")
    ours = [sys.executable, "-m", "hf_bertology", "prepare", "--recipe", args.recipe, "--train_file", *files]
    ours += ["--max_seq_length", str(args.max_seq_length)]
    rows = []
    for workers in args.workers:
        caches = {name: scratch / f"{name}-w{workers}" for name in ("ours", "mlm", "given")}
        flags = ["--preprocessing_num_workers", str(workers)]
        row = {"workers": workers}
        row["ours_cold"] = timed([*ours, *flags], caches["ours"], scratch / f"ours-cold-w{workers}.log")
        tokenizer_dir = next((caches["ours"] / "hf_bertology" / "prepared").glob("tokenizer-*"))
        mlm = [sys.executable, __file__, "--corpus", args.corpus, "--run_mlm", str(tokenizer_dir), str(workers)]
        mlm.append(str(args.max_seq_length))
        row["mlm_cold"] = timed(mlm, caches["mlm"], scratch / f"mlm-cold-w{workers}.log")
        row["ours_warm"] = timed([*ours, *flags], caches["ours"], scratch / f"ours-warm-w{workers}.log")
        row["mlm_warm"] = timed(mlm, caches["mlm"], scratch / f"mlm-warm-w{workers}.log")
        given = [*ours, *flags, "--tokenizer_name", str(tokenizer_dir)]
        row["ours_cold_given"] = timed(given, caches["given"], scratch / f"ours-given-w{workers}.log")
        rows.append(row)
        print(json.dumps(row))
    print()
    print("wall seconds of the process (imports included) / seconds of the data set-up alone (corpus to examples)")
    print("| workers | ours cold | ours cold, tokenizer given | ours second run | ratio | run_mlm cold | run_mlm second "
          "run | ratio |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        cells = [f"{r[k][0]:.1f} / {r[k][1]:.1f} s" for k in ("ours_cold", "ours_cold_given", "ours_warm")]
        ours_ratio = f"**{r['ours_warm'][0] / r['ours_cold'][0]:.3f} / {r['ours_warm'][1] / r['ours_cold'][1]:.3f}**"
        mlm = [f"{r[k][0]:.1f} / {r[k][1]:.1f} s" for k in ("mlm_cold", "mlm_warm")]
        mlm_ratio = f"{r['mlm_warm'][0] / r['mlm_cold'][0]:.3f} / {r['mlm_warm'][1] / r['mlm_cold'][1]:.3f}"
        print(f"| {r['workers']} | {' | '.join(cells)} | {ours_ratio} | {' | '.join(mlm)} | {mlm_ratio} |")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
