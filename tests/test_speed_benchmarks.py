"""The speed benchmarks of issue 28 run as written (tiny settings) and print their ratios; no timing is asserted."""

from __future__ import annotations

import subprocess

from platform_support import PYTHON, REPO, subprocess_env


def _run(*command: str) -> str:
    done = subprocess.run(
        [PYTHON, *command], cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_trainer_overhead_prints_three_ratios(corpus_file):
    out = _run("benchmarks/trainer_overhead.py", "--text", str(corpus_file), "--steps", "8", "--warmup", "2",
               "--repeats", "1")  # fmt: skip
    rows = [line for line in out.splitlines() if line.startswith("| ") and line.endswith("x |")]
    assert [row.split("|")[1].strip() for row in rows] == ["bare loop", "plain Trainer", "ours"], out
    assert rows[0].split("|")[2].strip() == "1.00x"


def test_collator_throughput_prints_every_recipe(corpus_file):
    out = _run("benchmarks/collator_throughput.py", "--recipes", "bert-tiny,spanbert-tiny", "--text",
               str(corpus_file), "--batches", "2", "--batch_size", "4", "--documents", "60")  # fmt: skip
    rows = [line for line in out.splitlines() if line.startswith("| ") and "-tiny" in line]
    assert [row.split("|")[1].strip() for row in rows] == ["bert-tiny", "spanbert-tiny"], out
