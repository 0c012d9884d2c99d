"""`benchmarks/step_cost.py`: docs/speed.md's host-sync command as written, and the Trainer runs' measurements (real
tokens/s of ours and plain transformers, where the time goes)."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import subprocess

import pytest

from platform_support import PYTHON, REPO, subprocess_env

COMMAND = re.compile(r"^python (benchmarks/step_cost\.py --vs_plain --count_syncs .*)$", re.MULTILINE)
# transformers' own modeling code: the only files where a step of ours may still sync
TRANSFORMERS_SITES = {"xlnet-mini": "modeling_xlnet.py"}


def readme_command() -> list[str]:
    (line,) = COMMAND.findall((REPO / "docs" / "speed.md").read_text())
    return [PYTHON, *shlex.split(line)]


def test_readme_host_sync_command_as_written(shared_data):
    """docs/speed.md's line, from the repo root: no sync in our steps but the two in transformers' XLNet code, and
    plain transformers' steps with theirs (the NaN filter, the token count, the mask check)."""
    done = subprocess.run(
        readme_command(), cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=1200
    )
    assert done.returncode == 0, done.stderr[-4000:]
    for row in measured_rows(done.stderr):  # timed too: every run counted its real tokens
        assert row["tokens_per_s"] > 0, row
    rows = {}
    for line in done.stdout.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) == 6 and cells[1] in ("ours", "plain"):
            rows[cells[0], cells[1]] = (float(cells[4]), cells[5])
    recipes = {recipe for recipe, _ in rows}
    assert len(recipes) == 8 and rows.keys() >= {("bert-mini", "plain"), ("roberta-mini", "plain")}, rows
    for (recipe, run), (syncs, where) in rows.items():
        if run == "plain":
            assert syncs >= 3 and "_track_num_input_tokens" in where and "_run_epoch" in where, (recipe, where)
        elif recipe in TRANSFORMERS_SITES:
            assert syncs == 2 and where.count(TRANSFORMERS_SITES[recipe]) == 1 and ";" not in where, (recipe, where)
        else:
            assert syncs == 0 and where == "—", (recipe, where)


def measured_rows(stderr: str) -> list[dict]:
    """The rows step_cost.py reports on stderr as it measures them (`measured NAME: {row}`)."""
    return [json.loads(line.split(": ", 1)[1]) for line in stderr.splitlines() if line.startswith("measured ")]


def run_step_cost(*flags: str, text) -> subprocess.CompletedProcess:
    command = [PYTHON, "benchmarks/step_cost.py", "--text", str(text), "--batch_size", "8", "--seq_len", "64"]
    done = subprocess.run(
        [*command, *flags], cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done


PROFILE_COMMAND = re.compile(r"`python (benchmarks/step_cost\.py [^`]*--vs_plain [^`]*--profile 3)`")


def test_readme_profile_command_as_written(shared_data):
    """docs/speed.md's `--profile` line, from the repo root. Ours keeps its token count on the device between logs;
    the benchmark reads it at its marks, so ours reports real tokens/s (it reported 0 before) and a ratio to plain
    transformers. The profile table covers both runs, and its shares add up to the whole."""
    (line,) = PROFILE_COMMAND.findall((REPO / "docs" / "speed.md").read_text())
    done = subprocess.run(
        [PYTHON, *shlex.split(line)], cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=1200
    )
    assert done.returncode == 0, done.stderr[-4000:]
    rows = {row["which"]: row for row in measured_rows(done.stderr)}
    assert rows.keys() == {"ours", "plain"}
    assert rows["ours"]["tokens_per_s"] > 0 and rows["plain"]["tokens_per_s"] > 0
    for which, row in rows.items():
        profile = row["profile"]
        assert profile["steps"] == 3 and profile["ms_per_step"] > 0, which
        assert profile["device_busy"] is None  # CPU: no device to be idle
        assert sum(profile["kinds"].values()) == pytest.approx(1.0), (which, profile["kinds"])
        assert profile["kinds"]["matmul"] > 0 and profile["kinds"]["optimizer"] > 0, (which, profile["kinds"])
    table = [line for line in done.stdout.splitlines() if line.startswith("| bert-mini |")]
    assert len(table) == 4, done.stdout  # two in the throughput table, two in the profile table


def test_step_loop_profile_per_layout(corpus_file):
    done = run_step_cost("--recipes", "bert-tiny", "--steps", "2", "--profile", "1", text=corpus_file)
    rows = measured_rows(done.stderr)
    assert [row["layout"] for row in rows] == ["padded", "padding-free"]
    assert all(row["profile"]["steps"] == 1 and row["profile"]["top"] for row in rows), rows
    assert "where the time goes on cpu" in done.stdout


def test_busy_time_is_the_union_of_the_intervals():
    spec = importlib.util.spec_from_file_location("step_cost", REPO / "benchmarks" / "step_cost.py")
    step_cost = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(step_cost)
    assert step_cost.busy_time([]) == 0
    assert step_cost.busy_time([(0, 2), (1, 3), (5, 6), (5.5, 5.8)]) == 4  # overlaps counted once
    assert step_cost.busy_time([(4, 5), (0, 1)]) == 2  # any order
    assert step_cost.time_kind("void cutlass::Kernel<sm90_xmma_gemm_bf16>") == "matmul"
    assert step_cost.time_kind("pytorch_flash::flash_fwd_kernel") == "attention"
    assert step_cost.time_kind("fmha_cutlassF_bf16_aligned_64x64_rf_sm80") == "attention"  # not a cutlass GEMM
    assert step_cost.time_kind("multi_tensor_apply_kernel<FusedAdamMathFunctor>") == "optimizer"
    assert step_cost.time_kind("Memcpy HtoD (Pinned -> Device)") == "copies"
    assert step_cost.time_kind("vectorized_elementwise_kernel<GeluCUDAKernelImpl>") == "other"


def test_gpu_plan_runs_as_written():
    """`benchmarks/gpu.sh` runs on a lent GPU, a few device minutes at a time: a typo there costs a whole call. Every
    part named in its plan exists, every `bench` line is a valid step_cost.py command on recipes that exist, no two
    write the same files, and each planned call brings back at most the 8 files a device command may return (3 per
    bench, 1 for the CUDA tests)."""
    spec = importlib.util.spec_from_file_location("step_cost", REPO / "benchmarks" / "step_cost.py")
    step_cost = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(step_cost)
    from hf_bertology.recipes import PRESETS

    script = (REPO / "benchmarks" / "gpu.sh").read_text()
    arms = dict(re.findall(r"^ {4}(\w+)\) (.*?);;$", script, re.MULTILINE | re.DOTALL))
    assert set(re.search(r"parts=\$\{\*:-([\w ]+)\}", script).group(1).split()) == set(arms)
    assert set(re.search(r"#   PART: ([\w ]+) \(default", script).group(1).split()) == set(arms)
    names, files = set(), {}
    for part, body in arms.items():
        benches = re.findall(r"bench (\w+) (.*)", body)
        files[part] = 3 * len(benches) + (part == "tests")
        assert benches or part == "tests", part
        for name, flags in benches:
            assert name not in names, f"two parts write {name}.*"
            names.add(name)
            args = step_cost.build_parser().parse_args(shlex.split(flags))
            assert set(args.recipes.split(",")) <= set(PRESETS), args.recipes
    calls = re.findall(r"^#   gpu\.sh OUT TEXT ([\w ]+?) +\(", script, re.MULTILINE)
    assert len(calls) >= 3
    for call in calls:
        assert sum(files[part] for part in call.split()) <= 8, call
