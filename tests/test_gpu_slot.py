"""`benchmarks/gpu_slot.py`: the one-command GPU-slot plan, run as written in its smoke form on this CPU, so that it
cannot rot between the rare slots (docs/speed.md, benchmarks/gpu_slot.md)."""

from __future__ import annotations

import importlib.util
import json
import subprocess

import pytest

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
    """Issue 44's done-when: a measured row of plain transformers compiled (run_mlm's blocks) beside ours for BERT,
    on Wikipedia text and on WikiText-2; every family's default on Wikipedia; each row two runs with their spread,
    real tokens per step, padding waste, FLOPs per real token; the profile of the two targets."""
    # the first 200 kB of each (whole documents, whole lines): each family's tokenizer trains in seconds
    wiki = (shared_data / "corpus" / "enwiki-2015-wikiextractor" / "AA" / "wiki_00").read_text(encoding="utf-8")
    texts = tmp_path.parent / f"{tmp_path.name}-texts"  # beside OUT_DIR, which holds what a slot brings back only
    texts.mkdir()
    wikipedia = texts / "wiki_00"
    wikipedia.write_text("".join(doc + "</doc>\n" for doc in wiki.split("</doc>\n")[:5]), encoding="utf-8")
    lines = (shared_data / "wikitext-2-raw" / "wiki.valid.raw").read_text(encoding="utf-8")[:200_000]
    text = texts / "wiki.valid.raw"
    text.write_text(lines[: lines.rindex("\n") + 1], encoding="utf-8")
    run_slot(tmp_path, "--part", "speed", "--wikipedia", str(wikipedia), "--text", str(text))
    assert [f.name for f in brought_back(tmp_path)] == ["speed.json", "speed.log", "speed.md"]
    record = json.loads((tmp_path / "speed.json").read_text())
    rows = record["rows"]
    assert not [row for row in rows if "error" in row] and not record["skipped"]
    families = {name.rsplit("-", 1)[0] for name in load_slot().FAMILIES}
    ours = {row["recipe"].rsplit("-", 1)[0] for row in rows if row["run"] == "ours" and row["text"] == "Wikipedia"}
    assert ours == families
    for text in ("Wikipedia", "WikiText-2"):
        bert = {row["run"]: row for row in rows if row["recipe"] == "bert-tiny" and row["text"] == text}
        assert set(bert) == {"ours", "plain", "plain eager"}, text
        assert bert["plain"]["compiled"] and not bert["plain eager"]["compiled"]
        assert bert["plain"]["waste"] == 1.0 and bert["plain"]["real_tokens_per_step"] == 8 * 64  # no padding
        assert bert["ours"]["padding_free"] and bert["ours"]["waste"] == pytest.approx(1.0)
    for row in rows:
        assert len(row["runs"]) == 2 and row["spread"] >= 0, row
        assert row["tokens_per_s"] > 0 and row["flops_per_token"] > 0 and row["real_tokens_per_step"] > 0
        assert row["waste"] >= 1.0
    assert {row["recipe"] for row in rows if row["runs"][0].get("profile")} == {"bert-tiny", "electra-tiny"}
    assert sorted(record["setup_s"]) == sorted(
        [f"{family}-tiny Wikipedia" for family in families] + ["bert-tiny WikiText-2"]
    )  # once per recipe and text
    table = (tmp_path / "speed.md").read_text()
    assert "| bert-tiny | Wikipedia | plain | compiled (default), run_mlm blocks |" in table
    assert "× plain compiled" in table and "Set-up once per recipe and text" in table


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
    """The issue's priorities: BERT-base on Wikipedia (ours, plain compiled, plain eager), ELECTRA-small's default,
    every family's default, then BERT-base on WikiText-2; every run at most once; plain only where transformers has
    the masked-LM class, the flipped fixed shapes for every family (static padded where it cannot pack); on a CPU, ours eager is ours."""
    slot = load_slot()
    texts = ["Wikipedia", "WikiText-2"]
    plan = slot.speed_plan(slot.FAMILIES, texts, plain={"bert-base", "roberta-base"})
    assert plan[:4] == [
        ("bert-base", "Wikipedia", "ours"),
        ("bert-base", "Wikipedia", "plain"),
        ("bert-base", "Wikipedia", "plain eager"),
        ("electra-small", "Wikipedia", "ours"),
    ]
    defaults = len(slot.FAMILIES) + 2
    assert [run for _, text, run in plan[:defaults]].count("ours") == len(slot.FAMILIES)
    assert plan[defaults : defaults + 3] == [
        ("bert-base", "WikiText-2", run) for run in ("ours", "plain", "plain eager")
    ]
    assert len(plan) == len(set(plan)) and ("deberta-v3-small", "Wikipedia", "ours flipped") in plan  # static padded
    assert ("electra-small", "Wikipedia", "plain") not in plan and ("roberta-base", "Wikipedia", "plain") in plan
    assert ("roberta-base", "Wikipedia", "ours flipped") in plan
    on_cpu = slot.speed_plan(slot.FAMILIES, texts, {"bert-base"}, cuda=False)
    assert not [run for run in on_cpu if run[2] in ("ours eager", "ours flipped")]


def test_speed_part_keeps_to_its_budget(tmp_path, shared_data):
    """A run starts only if the time its kind last took (before any: a first guess) still fits in `--budget_s`:
    with no budget nothing runs, nothing is set up, and every run of the plan is listed as skipped."""
    text = str(shared_data / "wikitext-2-raw" / "wiki.valid.raw")
    run_slot(tmp_path, "--part", "speed", "--text", text, "--budget_s", "1", "--recipes", "bert-base,electra-small")
    record = json.loads((tmp_path / "speed.json").read_text())
    assert record["rows"] == [] and record["setup_s"] == {}
    assert {(s["recipe"], s["run"]) for s in record["skipped"]} >= {("bert-tiny", "plain"), ("electra-tiny", "ours")}
    assert "Skipped (would not fit in 1.0 s)" in (tmp_path / "speed.md").read_text()
