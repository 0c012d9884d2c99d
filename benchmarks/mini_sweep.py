"""A mini recipe's settings swept at one budget, each candidate judged on its own held-out objective (issue 52).

Every candidate is one `bertology pretrain` run of the recipe with some flags changed (learning rate, warmup,
config overrides), evaluated on held-out text before training and every `--eval_steps` steps; the script writes
one JSON line per candidate to `--output` (the run's evaluations over the run) and prints a table. A candidate whose
line is already in the output file is not run again, so an interrupted sweep goes on where it stopped.

    python benchmarks/mini_sweep.py --recipe electra-mini --max_steps 600 \
        --candidate lr=5e-4 --candidate lr=2e-4 --candidate "lr=2e-4 warmup=0.2 overrides=disc_weight=20" \
        --output docs/recipes/sweeps/electra-mini.jsonl

A candidate is `key=value` words: `lr`, `warmup` (a fraction of the steps, or a step count), `overrides` (the
recipe's `--config_overrides`), `args` (further flags, `;`-separated). Not a test: minutes a candidate on a CPU.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def parse_candidate(text: str) -> dict:
    words = dict(word.split("=", 1) for word in shlex.split(text))
    unknown = set(words) - {"lr", "warmup", "overrides", "args"}
    if unknown:
        raise SystemExit(f"error: unknown candidate key(s) {sorted(unknown)}; known: lr, warmup, overrides, args")
    return words


def candidate_flags(words: dict) -> list[str]:
    flags = []
    if "lr" in words:
        flags += ["--learning_rate", words["lr"]]
    if "warmup" in words:
        flags += ["--warmup_steps", words["warmup"]]
    if "overrides" in words:
        flags += ["--config_overrides", words["overrides"]]
    for arg in filter(None, words.get("args", "").split(";")):
        flags += shlex.split(arg)
    return flags


EVAL_LINE = re.compile(r"\{'eval_loss'[^}]*\}")


def evaluations(log_text: str, eval_steps: int) -> list[dict]:
    """Every held-out evaluation the run printed, in step order (the k-th at step k * eval_steps; the Trainer prints
    an evaluation's metrics as one dict), with its step."""
    rows = [ast.literal_eval(match) for match in EVAL_LINE.findall(log_text)]
    return [{"step": k * eval_steps, **{key: float(v) for key, v in row.items()}} for k, row in enumerate(rows)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", required=True)
    parser.add_argument("--candidate", action="append", required=True)
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--max_steps", type=int, default=600)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--eval_steps", type=int, default=100)
    parser.add_argument("--max_eval_samples", type=int, default=512)
    parser.add_argument("--train_file", nargs="*", default=[])
    parser.add_argument("--pretrain_args", default="", help="flags every candidate gets")
    parser.add_argument("--work_dir", type=Path, default=None)
    parser.add_argument(
        "--stop_after",
        type=int,
        default=None,
        help="stop a candidate after its evaluation at this step (a screening run: the schedule is still --max_steps')",
    )
    args = parser.parse_args(argv)

    args.output.parent.mkdir(parents=True, exist_ok=True)
    done = {}
    if args.output.exists():
        for line in args.output.read_text().splitlines():
            row = json.loads(line)
            done[row["candidate"]] = row
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="mini_sweep_"))
    work.mkdir(parents=True, exist_ok=True)
    for text in args.candidate:
        if text in done:
            continue
        run_dir = work / f"{args.recipe}-{args.candidate.index(text)}"
        command = [
            sys.executable, "-m", "hf_bertology", "pretrain", "--recipe", args.recipe, "--output_dir", str(run_dir),
            "--max_steps", str(args.max_steps), "--per_device_train_batch_size", str(args.batch_size),
            "--do_eval", "--eval_on_start", "--eval_strategy", "steps", "--eval_steps", str(args.eval_steps),
            "--max_eval_samples", str(args.max_eval_samples), "--per_device_eval_batch_size", "64",
            "--logging_steps", "50", "--save_strategy", "no", "--report_to", "none",
            *(["--train_file", *args.train_file] if args.train_file else []),
            *shlex.split(args.pretrain_args), *candidate_flags(parse_candidate(text)),
        ]  # fmt: skip
        start = time.time()
        log = run_dir.with_suffix(".log")
        returncode = run(command, log, args.stop_after and args.stop_after // args.eval_steps + 1)
        if returncode != 0:
            print(f"{text}: failed (rc {returncode}), see {log}", file=sys.stderr)
            continue
        evals = evaluations(log.read_text(), args.eval_steps)
        row = {"recipe": args.recipe, "candidate": text, "max_steps": args.max_steps, "batch_size": args.batch_size,
               "stop_after": args.stop_after, "seconds": round(time.time() - start, 1), "evaluations": evals}  # fmt: skip
        with args.output.open("a") as out:
            out.write(json.dumps(row) + "\n")
        print(summary(row), flush=True)


def run(command: list[str], log: Path, stop_at_evaluations: int | None) -> int:
    """Run one candidate, its output to `log`; with `stop_at_evaluations`, kill it once it has printed that many."""
    with log.open("w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        while process.poll() is None:
            time.sleep(5)
            if stop_at_evaluations and len(EVAL_LINE.findall(log.read_text())) >= stop_at_evaluations:
                process.kill()  # not terminate: a stopped run would save a checkpoint first
                process.wait()
                return 0
    return process.returncode


def summary(row: dict) -> str:
    last = row["evaluations"][-1]
    keys = [k for k in ("eval_disc_auc", "eval_rtd_accuracy", "eval_replaced_fraction", "eval_loss") if k in last]
    return f"{row['candidate']:<60s} step {last['step']} " + " ".join(f"{k[5:]}={last[k]:.4f}" for k in keys)


if __name__ == "__main__":
    main()
