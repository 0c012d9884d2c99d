"""`benchmarks/gpu_slot.py`: the one-command GPU-slot plan, run as written in its smoke form on this CPU, so that it
cannot rot between the rare slots (docs/speed.md, benchmarks/gpu_slot.md)."""

from __future__ import annotations

import importlib.util
import json
import subprocess

from platform_support import PYTHON, REPO, subprocess_env

SLOT = REPO / "benchmarks" / "gpu_slot.py"


def load_slot():
    spec = importlib.util.spec_from_file_location("gpu_slot", SLOT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_slot(out, *flags: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [PYTHON, str(SLOT), str(out), *flags, "--smoke"],
        cwd=REPO,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done


def brought_back(out) -> list:
    """What a slot would bring back: at most 8 files, directly under OUT_DIR, none over 16 MiB."""
    files = sorted(out.rglob("*"))
    assert all(f.parent == out and f.is_file() for f in files), files
    assert len(files) <= 8 and all(f.stat().st_size <= 16 * 2**20 for f in files), files
    return files


def test_speed_part_smoke(tmp_path, shared_data):
    """A row per family (ours), plain transformers beside ours where transformers has the class, the fixed-shape
    run where the family has it, the profile of the two targets, each family's set-up once, nothing skipped."""
    run_slot(tmp_path, "--part", "speed", "--text", str(shared_data / "wikitext-2-raw" / "wiki.valid.raw"))
    assert [f.name for f in brought_back(tmp_path)] == ["speed.json", "speed.log", "speed.md"]
    record = json.loads((tmp_path / "speed.json").read_text())
    rows = record["rows"]
    assert not [row for row in rows if "error" in row] and not record["skipped"]
    families = {name.rsplit("-", 1)[0] for name in load_slot().FAMILIES}
    assert {row["recipe"].rsplit("-", 1)[0] for row in rows if row["which"] == "ours"} == families
    assert {row["recipe"] for row in rows if row["which"] == "plain"} == {
        "bert-tiny",
        "roberta-tiny",
        "modernbert-tiny",
    }
    fixed = {row["recipe"] for row in rows if row["which"] == "ours (fixed shape)"}
    assert fixed == {"bert-tiny", "roberta-tiny", "spanbert-tiny", "albert-tiny", "electra-tiny", "modernbert-tiny"}
    assert sorted(record["setup_s"]) == sorted(f"{family}-tiny" for family in families)  # once per family
    assert all(row["tokens_per_s"] > 0 and row["flops_per_token"] > 0 for row in rows)
    assert {row["recipe"] for row in rows if row.get("profile")} == {"bert-tiny", "electra-tiny"}
    table = (tmp_path / "speed.md").read_text()
    assert "| bert-tiny | plain | no |" in table and "× plain eager" in table and "Set-up once per family" in table


def test_learn_part_smoke(tmp_path, shared_data):
    """Pretrained at a FLOP budget, then the shipped GLUE tasks for it and a random-init floor of the same run."""
    run_slot(tmp_path, "--part", "learn", "--train_file", str(shared_data / "wikitext-2-raw" / "wiki.valid.raw"),
             "--glue_data_dir", str(shared_data / "glue"), "--work_dir", str(tmp_path.parent / "work"))  # fmt: skip
    assert [f.name for f in brought_back(tmp_path)] == ["learn.json", "learn.log", "learn.md"]
    results = json.loads((tmp_path / "learn.json").read_text())["results"]
    models = results["models"]
    assert sorted(models) == ["electra-tiny", "random-init"]
    assert models["electra-tiny"]["pretrain"]["flops"] >= 3e10 and models["random-init"]["pretrain"] is None
    for model in models.values():
        assert sorted(model["glue"]) == ["cola", "sst2", "stsb", "wnli"]
    table = (tmp_path / "learn.md").read_text()
    assert "| **electra-tiny** |" in table and "| random-init (electra-tiny arch) |" in table


def test_speed_plan_order():
    """The slot's priorities: bert-base compiled against plain and electra-small compiled before any other run; a
    row per family (eager) before the compilations of the others; every run at most once."""
    slot = load_slot()
    plan = slot.speed_plan(slot.FAMILIES, fixed={"bert-base", "electra-small", "roberta-base"}, plain={"bert-base"})
    assert plan[:3] == [("bert-base", "ours", True), ("bert-base", "plain", False), ("electra-small", "ours", True)]
    eager = [i for i, (_, _, compiled) in enumerate(plan) if not compiled]
    assert len(eager) == len(slot.FAMILIES) + 1 and max(eager) == len(slot.FAMILIES) + 2
    assert plan[max(eager) + 1 : max(eager) + 4] == [
        ("bert-base", "plain", True),
        ("bert-base", "fixed", True),
        ("electra-small", "fixed", True),
    ]
    assert len(plan) == len(set(plan)) and ("deberta-v3-small", "fixed", True) not in plan
    assert ("roberta-base", "plain", True) not in plan and ("roberta-base", "fixed", True) in plan


def test_speed_part_keeps_to_its_budget(tmp_path, shared_data):
    """A run starts only if the time its kind last took (before any: a first guess) still fits in `--budget_s`:
    with no budget nothing runs, nothing is set up, and every run of the plan is listed as skipped."""
    text = str(shared_data / "wikitext-2-raw" / "wiki.valid.raw")
    run_slot(tmp_path, "--part", "speed", "--text", text, "--budget_s", "1", "--recipes", "bert-base,electra-small")
    record = json.loads((tmp_path / "speed.json").read_text())
    assert record["rows"] == [] and record["setup_s"] == {}
    assert {(s["recipe"], s["run"]) for s in record["skipped"]} >= {("bert-tiny", "ours"), ("electra-tiny", "fixed")}
    assert "Skipped (would not fit in 1.0 s)" in (tmp_path / "speed.md").read_text()
