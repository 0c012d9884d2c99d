"""One lent GPU slot's work in one command: every family's speed, or one recipe's learning at a FLOP budget.

    python benchmarks/gpu_slot.py OUT_DIR --part speed [--budget_s 510] [--recipes bert-base,electra-small] \
        [--wikipedia /tmp/corpus/wiki_00] [--text wiki.valid.raw]
    python benchmarks/gpu_slot.py OUT_DIR --part learn --recipe electra-small [--flops 1e16]
    python benchmarks/gpu_slot.py OUT_DIR --part speed --smoke      # the same code at tiny size, on a CPU (a test)

A slot is one machine for about 15 minutes, one command of at most 10, at most 8 files of 16 MiB back
(benchmarks/gpu_slot.md says how to carry the wheels and data there). So each part writes 3 files directly under
OUT_DIR (`<part>.json`, `<part>.md`, `<part>.log`), rewritten after every run: a part stopped by the slot's limit
keeps what it measured.

`--part speed` (issue 44): real tokens per second through the Trainer, on packed Wikipedia (`--wikipedia`, the
primary text) and WikiText-2 (`--text`). A row is one recipe, text and run, measured `--repeats` times (2: the
spread is reported), each run a fresh Trainer: warm-up steps, then `--steps` timed ones (100) whose times come from
CUDA events on the device's stream (no sync inside them). The runs (`RUNS`): ours exactly as `bertology pretrain`
sets itself up on the device (on CUDA compiled, with fixed shapes and CUDA graphs where the defaults say), ours
eager (`--torch_compile false`), ours with the fixed-shape default flipped, and plain transformers at its best:
run_mlm.py's pipeline (`group_texts`: no padding) with `BertForMaskedLM` / `RobertaForMaskedLM` /
`ModernBertForMaskedLM` and the stock Trainer (bf16, TF32, fused AdamW, workers), compiled and eager. Every row
reports its real tokens per step and its padding waste (computed / real), and its counted FLOPs per real token
beside the MFU. Rows go in the issue's priority order (`speed_plan`); each starts only if the time its kind last
took still fits in `--budget_s`, and the rest are listed as skipped, for the next slot's `--recipes`. Each recipe's
set-up (tokenizer, examples, run_mlm's blocks) is made once per text; compilation caches are reset between runs;
bert-base and electra-small are profiled (device busy, time by kernel kind) after their first timed run.

`--part learn`: `bertology compare` with one recipe and its random-init floor: pretrained to `--flops` counted
training FLOPs, then fine-tuned on the GLUE tasks found in `--glue_data_dir`; the report and results come back.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import step_cost  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
WIKIPEDIA = SHARED / "corpus" / "enwiki-2015-wikiextractor" / "AA" / "wiki_00"
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
# The runs of a row: ours as `bertology pretrain` sets itself up on the device (`ours`), ours with
# `--torch_compile false` (`ours eager`), ours with `--fixed_shape_batches` flipped (`ours flipped`: what the slot
# needs to flip that default), and plain transformers at its best, run_mlm's pipeline (`plain`, compiled;
# `plain eager`).
RUNS = ("ours", "ours eager", "ours flipped", "plain", "plain eager")
# transformers' masked-LM class of a family that run_mlm.py trains as is
PLAIN_MLM = {"bert": "BertForMaskedLM", "roberta": "RobertaForMaskedLM", "modernbert": "ModernBertForMaskedLM"}


def tiny(name: str) -> str:
    return name.rsplit("-", 1)[0] + "-tiny"


def speed_plan(recipes: list[str], texts: list[str], plain: set[str], cuda: bool = True) -> list[tuple[str, str, str]]:
    """(recipe, text, run) in the issue's priority order: BERT-base on the first text (Wikipedia) ours, plain
    compiled, plain eager; ELECTRA-small ours; every other family's default; BERT-base's three on the other texts;
    then ours eager, ours with fixed shapes flipped (static padded for DeBERTa-v3 and XLNet), plain of the other families, and the other texts' rows. On a
    CPU ours is eager by default, so neither `ours eager` nor `ours flipped` (fixed shapes pay only as a CUDA
    graph) is run."""
    first, rest = texts[0], texts[1:]
    plan = []
    for recipe in recipes:
        plan.append((recipe, first, "ours"))
        if recipe == recipes[0]:
            plan += [(recipe, first, "plain"), (recipe, first, "plain eager")]
    plan += [(recipes[0], text, run) for text in rest for run in ("ours", "plain", "plain eager")]
    if cuda:
        plan += [(recipe, first, "ours eager") for recipe in recipes]
        plan += [(recipe, first, "ours flipped") for recipe in recipes]
    plan += [(recipe, first, run) for recipe in recipes for run in ("plain", "plain eager")]
    plan += [(recipe, text, "ours") for text in rest for recipe in recipes]
    seen, ordered = set(), []
    for run in plan:
        recipe, _, which = run
        wanted = not which.startswith("plain") or recipe in plain  # flipped: token budgets, or static padding
        if run not in seen and wanted:
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


def grouped_blocks(text: str, tokenizer, seq_len: int):
    """run_mlm.py's pipeline (transformers examples/pytorch/language-modeling/run_mlm.py, `tokenize_function` and
    `group_texts`): every document tokenized with its special tokens, all concatenated and cut into blocks of
    `seq_len`, the remainder dropped: no padding at all."""
    from hf_bertology.data import load_corpus

    corpus = load_corpus(train_files=[text])
    tokenized = corpus.map(
        lambda batch: tokenizer(batch["text"], return_special_tokens_mask=True), batched=True, remove_columns=["text"]
    )

    def group_texts(examples):
        joined = {k: sum(examples[k], []) for k in examples}
        total = len(joined["input_ids"]) // seq_len * seq_len
        return {k: [v[i : i + seq_len] for i in range(0, total, seq_len)] for k, v in joined.items()}

    return tokenized.map(group_texts, batched=True, batch_size=1000)


class Clock:
    """Per-step times between the ends of consecutive optimizer steps: CUDA events on the device's stream (no sync
    inside the timed steps; read once after training), else the host's clock."""

    def __init__(self, cuda: bool):
        import torch

        self.cuda, self.marks = cuda, []
        self.event = (lambda: torch.cuda.Event(enable_timing=True)) if cuda else None

    def mark(self) -> None:
        if self.cuda:
            event = self.event()
            event.record()
            self.marks.append(event)
        else:
            self.marks.append(time.perf_counter())

    def step_ms(self, first: int, last: int) -> list[float]:
        """Milliseconds of each step between mark `first` and mark `last`."""
        if self.cuda:
            self.marks[last].synchronize()
            return [self.marks[i].elapsed_time(self.marks[i + 1]) for i in range(first, last)]
        return [1e3 * (self.marks[i + 1] - self.marks[i]) for i in range(first, last)]


def counting(trainer_class: type) -> type:
    """`trainer_class` that keeps each micro-batch's computed tokens (the shape: host metadata) and real tokens (the
    attention mask's sum, left on the device: no sync), read after training."""

    class Counting(trainer_class):
        def training_step(self, model, inputs, num_items_in_batch=None):
            computed = inputs["input_ids"].numel()
            mask = inputs.get("attention_mask")
            self.step_tokens.append((computed, computed if mask is None else mask.sum()))
            return super().training_step(model, inputs, num_items_in_batch)

    return Counting


def ours_arguments(recipe, out: str, run: str, settings: dict, steps: int):
    """TrainingArguments and fixed-shape choice exactly as `bertology pretrain` settles them on this machine
    (`training.arguments`): ours is what a user gets, the CUDA defaults included; `ours eager` opts out of
    compilation, `ours flipped` flips the fixed-shape default."""
    from hf_bertology.training.arguments import fast_path, parse_args, training_arguments

    argv = ["--recipe", recipe.name, "--output_dir", out, "--max_steps", str(steps), "--seed", "0"]
    argv += ["--per_device_train_batch_size", str(settings["batch_size"]), "--gradient_accumulation_steps", "1"]
    argv += ["--save_strategy", "no", "--report_to", "none", "--logging_steps", str(10**9), "--disable_tqdm", "true"]
    argv += ["--dataloader_num_workers", str(settings["workers"])]
    if run == "ours eager":
        argv += ["--torch_compile", "false"]
    model_args, data_args, training_args, explicit = parse_args(argv)
    training_args = training_arguments(training_args, recipe, explicit)
    fast_path(recipe, model_args, data_args, training_args, explicit)
    if run == "ours flipped":
        argv += ["--fixed_shape_batches", str(not data_args.fixed_shape_batches).lower()]
        model_args, data_args, training_args, explicit = parse_args(argv)
        training_args = training_arguments(training_args, recipe, explicit)
        if data_args.fixed_shape_batches and training_args.torch_compile and training_args.torch_compile_mode is None:
            training_args.torch_compile_mode = "reduce-overhead"  # as the default pairs them
    return training_args, bool(data_args.fixed_shape_batches)


def plain_arguments(out: str, run: str, settings: dict, steps: int, cuda: bool):
    """The stock Trainer as a user who cares about speed sets it: bf16, TF32, fused AdamW, workers, compiled."""
    from transformers import TrainingArguments

    return TrainingArguments(
        output_dir=out,
        max_steps=steps,
        seed=0,
        per_device_train_batch_size=settings["batch_size"],
        learning_rate=1e-4,
        bf16=cuda,
        tf32=cuda or None,
        optim="adamw_torch_fused",
        torch_compile=run == "plain",
        save_strategy="no",
        logging_steps=10**9,
        report_to="none",
        remove_unused_columns=False,  # run_mlm's special_tokens_mask goes to the collator
        dataloader_num_workers=settings["workers"],
        use_cpu=not cuda,
        disable_tqdm=True,
    )


def measure_run(recipe_name: str, text: str, run: str, settings: dict, prepared: dict, flops_cache: dict) -> dict:
    """One run of a row: a Trainer built for it, `warmup` steps, `steps` timed ones (CUDA events), `profile` more
    under the profiler where asked. Tokens per step, padding waste, FLOPs per real token (counted once per model and
    text), MFU, peak memory."""
    import tempfile

    import torch
    import transformers
    from transformers import DataCollatorForLanguageModeling, Trainer, TrainerCallback

    from hf_bertology.training.batches import configure_attention
    from hf_bertology.training.run_trainer import send_only_what_attention_reads, trainer_class

    torch.manual_seed(0)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    recipe, tokenizer, examples, seq_len, batch_size = prepared["ours"]
    batch_size = settings["batch_size"]
    plain = run.startswith("plain")
    compiled_guess = run in ("ours", "ours flipped", "plain") and (cuda or plain)
    warmup, steps, profiled = settings["warmup"][compiled_guess], settings["steps"], settings["profile"]
    last = warmup + steps + (1 + profiled if profiled else 0)
    with tempfile.TemporaryDirectory() as tmp:
        if plain:
            training_args, fixed = plain_arguments(tmp, run, settings, last, cuda), False
            model_class = getattr(transformers, PLAIN_MLM[recipe.variant_name])
            config_class = transformers.AutoConfig.for_model(recipe.config.model_type).__class__
            config = config_class(**{k: v for k, v in recipe.config.to_dict().items() if k != "auto_map"})
            config._attn_implementation = "sdpa"
            model = model_class(config)
            dataset = prepared["plain"]
            rate = getattr(recipe.build_collator(tokenizer), "mlm_probability", 0.15)  # ModernBERT's 30%
            collator, cls = DataCollatorForLanguageModeling(tokenizer, mlm_probability=rate), Trainer
        else:
            training_args, fixed = ours_arguments(recipe, tmp, run, settings, last)
            model = recipe.build_model()
            model, collator = configure_attention(
                model, recipe.build_collator(tokenizer), None, None, recipe.variant.padding_free
            )
            dataset, cls = examples, trainer_class(recipe.variant.trainer_class)
        # batches to spare: the DataLoader must not run dry inside a measured step
        needed = (last + 2 * max(1, settings["workers"])) * batch_size * (4 if fixed else 1)
        dataset = dataset.select([i % len(dataset) for i in range(needed)])  # a small text repeats
        key = (recipe_name, text, "plain" if plain else "ours")
        if key not in flops_cache:  # one batch's counted FLOPs per real token, on the device that trains
            batch = collator([dataset[i] for i in range(batch_size)])
            batch = {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
                flops, tokens = step_cost.count_flops(model.to(device), [batch])
            flops_cache[key] = flops / tokens
        clock, profiles, marks = Clock(cuda), [], {}

        class Timing(TrainerCallback):
            def on_step_end(self, targs, state, control, **kwargs):
                clock.mark()
                if state.global_step == warmup and cuda:
                    torch.cuda.reset_peak_memory_stats()
                if state.global_step == warmup + steps:
                    marks["peak_mib"] = torch.cuda.max_memory_allocated() / 2**20 if cuda else None
                    marks["peak_reserved_mib"] = torch.cuda.max_memory_reserved() / 2**20 if cuda else None
                    if profiled:
                        profiles.append(step_cost.StepProfile(cuda, profiled))
                elif profiled and state.global_step > warmup + steps:
                    profiles[0].step()

        trainer = counting(cls)(model=model, args=training_args, train_dataset=dataset, data_collator=collator)
        trainer.step_tokens = []
        if not plain:  # as `run_trainer.build_trainer` does
            send_only_what_attention_reads(trainer)
        if fixed:
            from hf_bertology.training.fixed_shape import use_fixed_shape

            use_fixed_shape(trainer, seq_len, packable=recipe.padding_free)
        trainer.add_callback(Timing())
        trainer.train()
    step_ms = clock.step_ms(warmup - 1, warmup + steps - 1)  # marks[i]: the end of step i + 1
    timed = trainer.step_tokens[warmup : warmup + steps]
    computed = sum(c for c, _ in timed) / steps
    real = sum(int(r) for _, r in timed) / steps
    seconds = sum(step_ms) / 1e3
    peak = step_cost.device_peak(torch.cuda.get_device_name()) if cuda else None
    flops_per_token = flops_cache[key]
    args = training_args
    return {
        "tokens_per_s": real * steps / seconds,
        "ms_per_step": statistics.median(step_ms),
        "real_tokens_per_step": real,
        "computed_tokens_per_step": computed,
        "waste": computed / real,
        "flops_per_token": flops_per_token,
        "mfu": flops_per_token * real * steps / seconds / peak if peak else None,
        "compiled": bool(args.torch_compile),
        "mode": args.torch_compile_mode if args.torch_compile else None,
        "fixed_shape": fixed,
        "padding_free": not plain and type(collator).__name__ != "TargetPositionsCollator",
        "bf16": bool(args.bf16),
        "peak_mib": marks.get("peak_mib"),
        "peak_reserved_mib": marks.get("peak_reserved_mib"),
        "profile": profiles[0].summary() if profiles else None,
    }


def speed(args: argparse.Namespace) -> int:
    import torch

    from hf_bertology.recipes import get_recipe

    cuda = torch.cuda.is_available()
    recipes = args.recipes.split(",") if args.recipes else FAMILIES
    if args.smoke:
        recipes = list(dict.fromkeys(tiny(r) for r in recipes))
    texts = {"Wikipedia": args.wikipedia, "WikiText-2": args.text}
    texts = {name: path for name, path in texts.items() if path}
    variants = {r: get_recipe(r) for r in recipes}
    plain = {r for r, recipe in variants.items() if recipe.variant_name in PLAIN_MLM and recipe.backbone is None}
    plan = speed_plan(recipes, list(texts), plain, cuda)
    if args.smoke:  # CI's minutes: every family's default on the first text, BERT's three rows on every text
        plan = [(r, text, run) for r, text, run in plan if r == recipes[0] or (text == plan[0][1] and run == "ours")]
    profiled = {tiny(r) if args.smoke else r for r in PROFILED}
    settings = {"seq_len": args.seq_len, "batch_size": args.batch_size, "steps": args.steps, "vocab_size": None}
    settings.update(workers=args.workers, repeats=args.repeats, texts=texts, device="auto")
    settings["warmup"] = {True: 2, False: 1} if args.smoke else {True: 6, False: 3}  # compiled / eager
    report = Report(args.out, "speed", {**settings, "budget_s": args.budget_s, "smoke": args.smoke})
    report.record.update(environment(), rows=[], skipped=[], setup_s={})
    prepared, flops_cache, last_s = {}, {}, dict(FIRST_GUESS_S)
    deadline = report.started + args.budget_s
    for recipe, text, run in plan:
        compiled_guess = run in ("ours", "ours flipped", "plain") and (cuda or run == "plain")
        expected = last_s[compiled_guess] * args.repeats
        if time.perf_counter() + expected > deadline:
            report.record["skipped"].append({"recipe": recipe, "text": text, "run": run})
            continue
        started = time.perf_counter()
        if (recipe, text) not in prepared:
            report.log(f"set-up {recipe} on {text}")
            path_settings = {**settings, "text": texts[text]}
            ours = step_cost.prepare(recipe, path_settings)
            plain_blocks = grouped_blocks(texts[text], ours[1], ours[3]) if recipe in plain else None
            prepared[(recipe, text)] = {"ours": ours, "plain": plain_blocks}
            report.record["setup_s"][f"{recipe} {text}"] = round(time.perf_counter() - started, 1)
        row = {"recipe": recipe, "text": text, "run": run, "runs": []}
        for repeat in range(args.repeats):
            report.log(f"run {recipe} {text} {run} ({repeat + 1}/{args.repeats})")
            run_started = time.perf_counter()
            # where the time goes: ours, on the first text, in its first run
            where = recipe in profiled and run == "ours" and text == next(iter(texts)) and repeat == 0
            settings_now = {**settings, "profile": args.profile if where else 0}
            try:
                measured = measure_run(recipe, text, run, settings_now, prepared[(recipe, text)], flops_cache)
            except Exception as err:  # noqa: BLE001 - one failed run must not end the slot: its error is a result
                measured = {"error": repr(err)[:500]}
                report.log(f"error {recipe} {text} {run}: {err!r}"[:2000])
            measured["run_s"] = round(time.perf_counter() - run_started, 1)
            row["runs"].append(measured)
            release_memory()
            if "error" in measured:
                break
        last_s[compiled_guess] = sum(r["run_s"] for r in row["runs"]) / args.repeats  # the first run compiles cold
        report.record["rows"].append(summarise(row))
        report.write(speed_markdown(report.record))
    report.log(f"done: {len(report.record['rows'])} rows, {len(report.record['skipped'])} skipped")
    report.write(speed_markdown(report.record))
    return 1 if any("error" in row for row in report.record["rows"]) else 0


def summarise(row: dict) -> dict:
    """A row from its runs: the mean tokens/s and the spread (max - min over the mean); the rest from the first."""
    runs = row["runs"]
    if any("error" in r for r in runs):
        return {**row, "error": next(r["error"] for r in runs if "error" in r)}
    rates = [r["tokens_per_s"] for r in runs]
    mean = statistics.fmean(rates)
    summary = {k: v for k, v in runs[0].items() if k not in ("tokens_per_s", "run_s", "profile")}
    mfus = [r["mfu"] for r in runs if r["mfu"] is not None]
    summary["mfu"] = statistics.fmean(mfus) if mfus else None
    return {**row, **summary, "tokens_per_s": mean, "spread": (max(rates) - min(rates)) / mean}


def describe(row: dict) -> str:
    """How a run trained: compiled (mode), fixed shapes, padding-free or padded, bf16."""
    parts = [f"compiled ({row['mode'] or 'default'})" if row["compiled"] else "eager"]
    if row["run"].startswith("plain"):
        parts.append("run_mlm blocks")
    else:
        parts.append("fixed shapes" if row["fixed_shape"] else "padding-free" if row["padding_free"] else "padded")
    return ", ".join(parts + (["bf16"] if row["bf16"] else []))


def speed_markdown(record: dict) -> str:
    rows, settings = record["rows"], record["settings"]
    lines = [
        f"# Speed, {record['device']}, {record['date']} (torch {record['torch']}, transformers "
        f"{record['transformers']}; batches of {settings['batch_size']} × {settings['seq_len']}, "
        f"{settings['steps']} timed steps a run ({'CUDA events' if record['device'] != 'cpu' else 'host clock'}), "
        f"{settings['repeats']} runs a row)",
        "",
        "Real tokens/s: the mean of the runs; spread: (max - min) / mean. Waste: tokens computed / real tokens. "
        "FLOPs/token: counted training FLOPs per real token (`hf_bertology.training.budget.FlopCounter`, as "
        "`bertology compare` counts: 3 × the forward's matmuls and attention on real tokens; ELECTRA and DeBERTa-v3 "
        "with their generator), MFU: those FLOPs per second over the device's dense bf16 peak. Plain: run_mlm.py's "
        "pipeline (`group_texts`, no padding), transformers' `*ForMaskedLM`, the stock Trainer.",
        "",
        "| recipe | text | run | how | real tokens/s | spread | × plain compiled | real tokens/step | waste "
        "| FLOPs/token | MFU | ms/step | peak MiB (alloc. / reserved) |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    plain = {(r["recipe"], r["text"]): r["tokens_per_s"] for r in rows if r["run"] == "plain" and "error" not in r}
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['recipe']} | {r['text']} | {r['run']} | | error: {r['error'][:120]} |" + " |" * 8)
            continue
        base = plain.get((r["recipe"], r["text"]))
        ratio = f"{r['tokens_per_s'] / base:.2f}" if base else "—"
        mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "n/a"
        peak = f"{r['peak_mib']:,.0f} / {r['peak_reserved_mib']:,.0f}" if r["peak_mib"] is not None else "n/a"
        lines.append(
            f"| {r['recipe']} | {r['text']} | {r['run']} | {describe(r)} | {r['tokens_per_s']:,.0f} "
            f"| {100 * r['spread']:.1f}% | {ratio} | {r['real_tokens_per_step']:,.0f} | {r['waste']:.3f} "
            f"| {r['flops_per_token'] / 1e6:,.1f}M | {mfu} | {r['ms_per_step']:.1f} | {peak} |"
        )
    profiled = [(r, run["profile"]) for r in rows if "error" not in r for run in r["runs"][:1] if run.get("profile")]
    if profiled:
        kinds = list(profiled[0][1]["kinds"])
        lines += ["", f"| recipe | run | ms/step | device busy | {' | '.join(kinds)} | costliest |"]
        lines.append("|---|---|---:|---:|" + "---:|" * len(kinds) + "---|")
        for r, p in profiled:
            busy = f"{100 * p['device_busy']:.0f}%" if p["device_busy"] is not None else "n/a"
            shares = " | ".join(f"{100 * share:.0f}%" for share in p["kinds"].values())
            top = "; ".join(f"{name} {100 * share:.0f}%" for name, _, share in p["top"][:3])
            lines.append(f"| {r['recipe']} | {r['run']} | {p['ms_per_step']:.1f} | {busy} | {shares} | {top} |")
    setup = ", ".join(f"{k} {v} s" for k, v in record["setup_s"].items())
    runs = sum(run["run_s"] for r in rows for run in r["runs"])
    lines += [
        "",
        f"Set-up once per recipe and text: {setup}. Runs: {runs:.0f} s. Whole part: {record.get('elapsed_s')} s.",
    ]
    if record["skipped"]:
        skipped = ", ".join(f"{s['recipe']} {s['text']} {s['run']}" for s in record["skipped"])
        lines.append(f"Skipped (would not fit in {settings['budget_s']} s): {skipped}.")
    return "\n".join(lines) + "\n"


def learn(args: argparse.Namespace) -> int:
    from hf_bertology.evaluation import compare

    recipe = tiny(args.recipe) if args.smoke else args.recipe
    tasks = [t for t, folder in GLUE_FOLDERS.items() if (Path(args.glue_data_dir) / folder / "train.tsv").is_file()]
    work = Path(args.work_dir) / "compare"
    # eager unless `--compile`, as the learn slots so far ran (`bertology pretrain` compiles by default on CUDA)
    pretrain_args = f"--dataloader_num_workers {args.workers} --torch_compile {str(args.compile).lower()}"
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
    parser.add_argument(
        "--budget_s", type=float, default=None, help="speed: seconds of runs (default 510; smoke 3600)"
    )
    parser.add_argument("--steps", type=int, default=None, help="speed: timed steps a run (default 100; smoke 3)")
    parser.add_argument("--repeats", type=int, default=2, help="speed: runs a row (the spread is reported)")
    parser.add_argument("--profile", type=int, default=3, help="speed: profiled steps of bert-base, electra-small")
    parser.add_argument("--batch_size", type=int, default=None, help="speed: default 256 (smoke 8)")
    parser.add_argument("--seq_len", type=int, default=None, help="speed: default 128 (smoke 64)")
    parser.add_argument("--wikipedia", default=str(WIKIPEDIA), help="speed: the primary text (a Wikipedia file)")
    parser.add_argument("--text", default=str(SHARED / "wikitext-2-raw" / "wiki.valid.raw"), help="speed: WikiText-2")
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
        "budget_s": 3600 if smoke else 510,  # smoke: everything runs (a cold CPU compilation takes minutes)
        "steps": 3 if smoke else 100,
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
    for flag, path in (("--text", args.text), ("--wikipedia", args.wikipedia)):
        if args.part == "speed" and path and not Path(path).is_file():
            raise SystemExit(f"gpu_slot.py: text file not found: {path} (pass {flag})")
    return speed(args) if args.part == "speed" else learn(args)


if __name__ == "__main__":
    sys.exit(main())
