"""One lent GPU slot's work in one command: every family's speed, or one recipe's learning at a FLOP budget.

    python benchmarks/gpu_slot.py OUT_DIR --part speed [--budget_s 510] [--recipes bert-base,electra-small]
    python benchmarks/gpu_slot.py OUT_DIR --part learn --recipe electra-small [--flops 1e16]
    python benchmarks/gpu_slot.py OUT_DIR --part speed --smoke      # the same code at tiny size, on a CPU (a test)

A slot is one machine for about 15 minutes, one command of at most 10, at most 8 files of 16 MiB back
(benchmarks/gpu_slot.md says how to carry the wheels and data there). So each part writes 3 files directly under
OUT_DIR (`<part>.json`, `<part>.md`, `<part>.log`), rewritten after every run: a part stopped by the slot's limit
keeps what it measured.

`--part speed`: the Trainer runs of `benchmarks/step_cost.py` (ours compiled, dynamic and fixed-shape; ours eager;
plain transformers eager and compiled where transformers has the family's class), all in this one process: each
family's set-up (tokenizer, examples) and FLOP counts are made once and shared by its runs, and compilation caches
are reset between runs. Runs go in order of what the slot most needs to know (`speed_plan`) and each is started only
if the time it is expected to take (the last run of its kind) still fits in `--budget_s`; the rest are listed as
skipped, for the next slot's `--recipes`. bert-base and electra-small are profiled (device busy, time by kernel kind).

`--part learn`: `bertology compare` with one recipe and its random-init floor: pretrained to `--flops` counted
training FLOPs, then fine-tuned on the GLUE tasks found in `--glue_data_dir`; the report and results come back.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import step_cost  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
# every family's paper-size recipe, in the order the slot needs them; the smoke run swaps in the tiny sizes
FAMILIES = [
    "bert-base",
    "electra-small",
    "roberta-base",
    "electra-base",
    "spanbert-base",
    "albert-base",
    "deberta-v3-small",
    "modernbert-base",
    "xlnet-base",
]
PROFILED = ("bert-base", "electra-small")
GLUE_FOLDERS = {
    "sst2": "SST-2", "cola": "CoLA", "stsb": "STS-B", "mrpc": "MRPC", "rte": "RTE", "qnli": "QNLI", "wnli": "WNLI"
}  # fmt: skip
FIRST_GUESS_S = {True: 75.0, False: 20.0}  # a compiled / eager run before any was measured (H200, 06eb778)


def tiny(name: str) -> str:
    return name.rsplit("-", 1)[0] + "-tiny"


def speed_plan(recipes: list[str], fixed: set[str], plain: set[str]) -> list[tuple[str, str, bool]]:
    """(recipe, run, compiled) in priority order: the issue's targets first (bert-base compiled against plain eager,
    electra-small compiled), then a row per family (ours eager, plain eager: cheap, nothing to compile), then plain
    compiled and the fixed-shape steps of the targets, then every other family compiled (ours, fixed shape, plain)."""
    head = [r for r in recipes if r in PROFILED]
    plan = [(head[0], "ours", True), (head[0], "plain", False)] if head else []
    plan += [(r, "ours", True) for r in head[1:]]
    plan += [(r, "ours", False) for r in recipes] + [(r, "plain", False) for r in recipes]
    plan += [(r, "plain", True) for r in head] + [(r, "fixed", True) for r in head]
    for r in recipes:
        plan += [(r, "ours", True), (r, "fixed", True), (r, "plain", True)]
    seen, ordered = set(), []
    for run in plan:
        recipe, which, _ = run
        if run not in seen and (which != "fixed" or recipe in fixed) and (which != "plain" or recipe in plain):
            seen.add(run)
            ordered.append(run)
    return ordered


def release_memory() -> None:
    """Between runs in one process: no compiled graph, CUDA graph pool or cached block carried into the next."""
    import torch

    gc.collect()
    torch._dynamo.reset()  # also stops `cache_size_limit` from sending a later model's forward to eager
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


class Report:
    """`<part>.json` / `.md` / `.log` under OUT_DIR, rewritten whole after every run."""

    def __init__(self, out: Path, part: str, settings: dict):
        self.out, self.part, self.started = out, part, time.perf_counter()
        self.record = {"part": part, "date": datetime.date.today().isoformat(), "settings": settings}
        out.mkdir(parents=True, exist_ok=True)
        self.log_file = open(out / f"{part}.log", "a", buffering=1)  # noqa: SIM115 - open for the whole part

    def log(self, message: str) -> None:
        line = f"[{time.perf_counter() - self.started:6.1f}s] {message}"
        print(line, file=sys.stderr, flush=True)
        self.log_file.write(line + "\n")

    def write(self, markdown: str) -> None:
        self.record["elapsed_s"] = round(time.perf_counter() - self.started, 1)
        (self.out / f"{self.part}.json").write_text(json.dumps(self.record, indent=2, default=str) + "\n")
        (self.out / f"{self.part}.md").write_text(markdown)


def environment() -> dict:
    import torch
    import transformers

    cuda = torch.cuda.is_available()
    return {
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": sys.version.split()[0],
    }


def speed(args: argparse.Namespace) -> int:
    import torch

    from hf_bertology.recipes import get_recipe

    cuda = torch.cuda.is_available()
    recipes = args.recipes.split(",") if args.recipes else FAMILIES
    variants = {r: get_recipe(r) for r in recipes}
    fixed = {r for r, recipe in variants.items() if recipe.variant.padding_free}
    plain = {r for r, recipe in variants.items() if recipe.variant_name in step_cost.PLAIN_CLASSES}
    plan = speed_plan(recipes, fixed, plain)
    if args.smoke or not cuda:  # compiling on a CPU would only time the compiler: the same runs, eager
        plan = list(dict.fromkeys((r, which, False) for r, which, _ in plan))
    if args.smoke:
        plan = list(dict.fromkeys((tiny(r), which, compiled) for r, which, compiled in plan))
    profiled = {tiny(r) if args.smoke else r for r in PROFILED}
    settings = {
        "seq_len": args.seq_len,
        "batch_size": args.batch_size,
        "steps": args.steps,
        "vocab_size": None,
        "text": args.text,
        "device": "auto",
        "compile": False,
        "padded_only": False,
        "workers": args.workers,
        "count_syncs": False,
        "profile": 0,
    }
    report = Report(args.out, "speed", {**settings, "budget_s": args.budget_s, "smoke": args.smoke})
    report.record.update(environment(), rows=[], skipped=[], setup_s={}, run_s=[])
    prepared, flops_cache, last_s = {}, {}, dict(FIRST_GUESS_S)
    deadline = report.started + args.budget_s
    for recipe, which, compiled in plan:
        expected = last_s[compiled]
        if time.perf_counter() + expected > deadline:
            report.record["skipped"].append({"recipe": recipe, "run": which, "compiled": compiled})
            continue
        started = time.perf_counter()
        if recipe not in prepared:
            report.log(f"set-up {recipe}")
            prepared[recipe] = step_cost.prepare(recipe, settings)
            report.record["setup_s"][recipe] = round(time.perf_counter() - started, 1)
        run_settings = {**settings, "profile": args.profile if recipe in profiled and which == "ours" else 0}
        report.log(f"run {recipe} {which}{' compiled' if compiled else ''}")
        run_started = time.perf_counter()
        try:
            row = step_cost.measure_trainer(
                recipe, run_settings, which, compiled, prepared=prepared[recipe], flops_cache=flops_cache
            )
        except Exception as err:  # noqa: BLE001 - one failed run must not end the slot: its error is a result
            row = {"recipe": recipe, "which": which + (" (compiled)" if compiled else ""), "error": repr(err)[:500]}
            report.log(f"error {recipe} {which}: {err!r}"[:2000])
        seconds = time.perf_counter() - run_started
        last_s[compiled] = seconds
        row["run_s"] = round(seconds, 1)
        report.record["rows"].append(row)
        release_memory()
        report.write(speed_markdown(report.record))
    report.log(f"done: {len(report.record['rows'])} runs, {len(report.record['skipped'])} skipped")
    report.write(speed_markdown(report.record))
    return 1 if any("error" in row for row in report.record["rows"]) else 0


def speed_markdown(record: dict) -> str:
    rows = record["rows"]
    lines = [
        f"# Speed, {record['device']}, {record['date']} (torch {record['torch']}, transformers "
        f"{record['transformers']}; {record['settings']['batch_size']}×{record['settings']['seq_len']}, bf16 on "
        f"CUDA, {record['settings']['steps']} timed steps through the Trainer)",
        "",
        "| recipe | run | padding-free | real tokens/s | × plain eager | MFU | peak MiB (allocated / reserved) | run s |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    plain = {r["recipe"]: r["tokens_per_s"] for r in rows if r.get("which") == "plain" and "error" not in r}
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['recipe']} | {r['which']} | | error: {r['error'][:120]} | | | | {r['run_s']} |")
            continue
        ratio = f"{r['tokens_per_s'] / plain[r['recipe']]:.2f}" if r["recipe"] in plain else "—"
        mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "n/a"
        peak = f"{r['peak_mib']:,.0f} / {r['peak_reserved_mib']:,.0f}" if r["peak_mib"] is not None else "n/a"
        lines.append(
            f"| {r['recipe']} | {r['which']} | {'yes' if r['padding_free'] else 'no'} | {r['tokens_per_s']:,.0f} "
            f"| {ratio} | {mfu} | {peak} | {r['run_s']} |"
        )
    profiled = [r for r in rows if r.get("profile")]
    if profiled:
        kinds = list(profiled[0]["profile"]["kinds"])
        lines += ["", f"| recipe | run | ms/step | device busy | {' | '.join(kinds)} | costliest |"]
        lines.append("|---|---|---:|---:|" + "---:|" * len(kinds) + "---|")
        for r in profiled:
            p = r["profile"]
            busy = f"{100 * p['device_busy']:.0f}%" if p["device_busy"] is not None else "n/a"
            shares = " | ".join(f"{100 * share:.0f}%" for share in p["kinds"].values())
            top = "; ".join(f"{name} {100 * share:.0f}%" for name, _, share in p["top"][:3])
            lines.append(f"| {r['recipe']} | {r['which']} | {p['ms_per_step']:.1f} | {busy} | {shares} | {top} |")
    setup = ", ".join(f"{k} {v} s" for k, v in record["setup_s"].items())
    runs = sum(r["run_s"] for r in rows)
    lines += ["", f"Set-up once per family: {setup}. Runs: {runs:.0f} s. Whole part: {record.get('elapsed_s')} s."]
    if record["skipped"]:
        skipped = ", ".join(
            f"{s['recipe']} {s['run']}{' compiled' if s['compiled'] else ''}" for s in record["skipped"]
        )
        lines.append(f"Skipped (would not fit in {record['settings']['budget_s']} s): {skipped}.")
    return "\n".join(lines) + "\n"


def learn(args: argparse.Namespace) -> int:
    from hf_bertology.evaluation import compare

    recipe = tiny(args.recipe) if args.smoke else args.recipe
    tasks = [t for t, folder in GLUE_FOLDERS.items() if (Path(args.glue_data_dir) / folder / "train.tsv").is_file()]
    work = Path(args.work_dir) / "compare"
    # eager by default, as `bertology compare` runs; `--compile` where the recipe compiles on the slot's torch
    pretrain_args = f"--dataloader_num_workers {args.workers}" + (" --torch_compile true" if args.compile else "")
    if args.pretrain_batch_size:  # the three recipes of the equal-compute question train on one batch size
        pretrain_args += f" --per_device_train_batch_size {args.pretrain_batch_size}"
    argv = [
        "--recipes", recipe,
        "--output_dir", str(work),
        "--train_file", *args.train_file,
        "--budget_flops", str(args.flops),
        "--glue_tasks", ",".join(tasks),
        "--glue_data_dir", args.glue_data_dir,
        "--glue_epochs", str(args.glue_epochs),
        "--glue_max_train_samples", str(args.glue_max_train_samples),
        "--pretrain_args", pretrain_args,
        "--checkpoint_steps", "0",
    ]  # fmt: skip
    if args.glue_max_eval_samples:
        argv += ["--glue_max_eval_samples", str(args.glue_max_eval_samples)]
    if args.smoke:
        argv += ["--max_train_samples", "256", "--tokenizer_train_samples", "500", "--glue_batch_size", "8"]
    argv += ["--max_seq_length", str(64 if args.smoke else args.max_seq_length)]
    if args.preprocessing_num_workers:
        argv += ["--preprocessing_num_workers", str(args.preprocessing_num_workers)]
    report = Report(args.out, "learn", {"recipe": recipe, "argv": argv, "smoke": args.smoke})
    report.record.update(environment())
    # Pretraining first, written back at once: a slot that ends during fine-tuning still returns it. The second
    # call finds the pretrained model (compare resumes from its results files) and fine-tunes it and the floor.
    glue_tasks = argv.index("--glue_tasks") + 1
    for stage, tasks_now in (("pretraining", ""), ("fine-tuning", argv[glue_tasks])):
        stage_argv = [*argv[:glue_tasks], tasks_now, *argv[glue_tasks + 1 :]]
        report.log(f"{stage}: bertology compare " + " ".join(stage_argv))
        report.record["results"] = compare.main(stage_argv)
        report.write((work / "report.md").read_text())
    report.log("done")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="folder the part's 3 files are written to (directly under it)")
    parser.add_argument("--part", required=True, choices=["speed", "learn"])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, a few steps: runs on a CPU in minutes")
    parser.add_argument("--recipes", help="speed: comma-separated (default: every family's paper-size recipe)")
    parser.add_argument("--budget_s", type=float, default=None, help="speed: seconds of runs (default 510; smoke 900)")
    parser.add_argument("--steps", type=int, default=None, help="speed: timed steps a run (default 20; smoke 2)")
    parser.add_argument("--profile", type=int, default=3, help="speed: profiled steps of bert-base, electra-small")
    parser.add_argument("--batch_size", type=int, default=None, help="speed: default 256 (smoke 8)")
    parser.add_argument("--seq_len", type=int, default=None, help="speed: default 128 (smoke 64)")
    parser.add_argument("--text", default=str(SHARED / "wikitext-2-raw" / "wiki.valid.raw"), help="speed: text")
    parser.add_argument("--workers", type=int, default=None, help="DataLoader workers (default 4; smoke 0)")
    parser.add_argument("--recipe", default="electra-small", help="learn: the recipe pretrained")
    parser.add_argument("--flops", type=float, default=None, help="learn: counted training FLOPs (default 1e16)")
    parser.add_argument("--compile", action="store_true", help="learn: pretrain with --torch_compile (default eager)")
    parser.add_argument("--max_seq_length", type=int, default=128, help="learn: pretraining length (ELECTRA-small's)")
    parser.add_argument("--pretrain_batch_size", type=int, default=None, help="learn: default the recipe's")
    parser.add_argument("--train_file", nargs="+", default=[str(SHARED / "corpus")], help="learn: corpus")
    parser.add_argument("--glue_data_dir", default=str(SHARED / "glue"), help="learn: GLUE root folder")
    parser.add_argument("--glue_epochs", type=float, default=None, help="learn: default 2 (smoke 1)")
    parser.add_argument("--glue_max_train_samples", type=int, default=None, help="learn: default 20000 (smoke 32)")
    parser.add_argument("--glue_max_eval_samples", type=int, default=None, help="learn: default all (smoke 32)")
    parser.add_argument("--preprocessing_num_workers", type=int, default=None, help="learn: processes for map")
    parser.add_argument("--work_dir", default="/tmp/gpu_slot", help="learn: where the models go (not brought back)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    smoke = args.smoke
    defaults = {
        "budget_s": 900 if smoke else 510,
        "steps": 2 if smoke else 20,
        "batch_size": 8 if smoke else 256,
        "seq_len": 64 if smoke else 128,
        "workers": 0 if smoke else 4,
        "flops": 3e10 if smoke else 1e16,
        "glue_epochs": 1 if smoke else 2,
        "glue_max_train_samples": 32 if smoke else 20000,
        "glue_max_eval_samples": 32 if smoke else None,
    }
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.part == "speed" and not Path(args.text).is_file():
        raise SystemExit(f"gpu_slot.py: text file not found: {args.text} (pass --text)")
    return speed(args) if args.part == "speed" else learn(args)


if __name__ == "__main__":
    sys.exit(main())
