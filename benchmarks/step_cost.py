"""Per-step training cost of each recipe, side by side: tokens/s, time per token, peak memory, FLOPs/token, MFU.

    python benchmarks/step_cost.py                                   # every *-mini recipe in the registry
    python benchmarks/step_cost.py --recipes bert-base,electra-small,electra-base --seq_len 128 --batch_size 32
    python benchmarks/step_cost.py --recipes bert-base,roberta-base --vs_plain --compile --batch_size 256  # GPU

Each recipe runs in its own process (so peak memory is its own) on real batches: its family tokenizer trained on
a text file (default ../shared/data/wikitext-2-raw/wiki.valid.raw), its input format and its collator, the preset's
vocabulary size. A step is forward + backward + AdamW step. On a CUDA device the step runs under bf16 autocast with
SDPA attention where the model supports it (XLNet runs eager attention), and MFU = achieved FLOP/s ÷ the device's
dense bf16 peak (table below). FLOPs per step are the counted training FLOPs of `hf_bertology.training.budget`
(3 × forward matmuls on real tokens + attention), measured once per batch with the counter's hooks, which are then
removed for timing. On a CPU the MFU column is n/a (no meaningful peak to compare against).

The ratio column is each recipe's tokens/s over the first recipe's, measured in the same run.
Reference MFU (BERT-base class models, seq 128): transformers' BERT baseline ≈24% on A100, MosaicBERT ≤31%,
NVIDIA's BERT-large 45%.

**Padded vs padding-free.** Every recipe that supports it is timed twice on the same batches in the same process,
padded and flattened (`hf_bertology.collators.flatten`), steps interleaved so that machine noise hits both alike:
the `waste` column is tokens computed / real tokens of the padded layout (1.00 when flattened), and `×padded` the
real tokens/s of the flattened layout over the padded one. `--compile` wraps the model in `torch.compile` with dynamic
shapes (both layouts, one compilation each, as `bertology pretrain --torch_compile` does; the first steps, which
compile, are warm-up).

**Ours vs plain transformers** (`--vs_plain`, meant for a GPU): each recipe trains `--steps` steps through a
Trainer twice: ours (`BertologyTrainer`, our collator, padding-free, sparse heads, `--compile` if given) and plain
transformers (`BertForPreTraining` / `RobertaForMaskedLM` + `DataCollatorForLanguageModeling` + the stock
`Trainer`), on the same examples, same batch, bf16, SDPA, fused AdamW, TF32. Real tokens/s and MFU (each model's
counted FLOPs) are compared in the same run. Ours runs with `bertology pretrain`'s own defaults (no NaN filter,
non-blocking batch copies on a GPU). With `--fixed_shape` ours runs twice: `ours` as before (padding-free, dynamic
shapes: the old default) and `ours (fixed shape)` (`--fixed_shape_batches`: a token budget of about the batch size in
examples, static shapes; with `--compile` on a GPU, `torch_compile_mode="reduce-overhead"`: CUDA graphs).

**Where the time goes** (`--profile N`, either mode): N more steps after the timed ones, under `torch.profiler` (so
the timing is not disturbed; one more step before them warms the profiler up): the share of the wall time the GPU is
busy (the union of its kernels' intervals; well under 100% means the device waits for the host: Python, launches,
data, syncs) and the device time by kind (matmuls, attention, optimizer, copies, the rest: elementwise, norms,
reductions), with the costliest kernels. Set the step loop against the Trainer run of the same recipe: what the
Trainer adds shows as idle device time or as kernels the loop does not run. On a CPU the same table splits the CPU
time of the aten ops (busy: n/a). The profiler's own overhead (a few µs an op) makes a host-bound step look a little
more idle than it is.

**Host syncs** (`--vs_plain --count_syncs`, any machine): the same two Trainer runs under
`hf_bertology.testing.HostSyncs`, untimed: the operations per optimizer step that make the host wait for the device
(`.item()`, boolean indexing, `nonzero`, ...), and where they are. On a GPU each one stops the host from queueing the
next kernels while the device works, so the Trainer's Python, the data loading and the launches land on the
critical path.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import re
import resource
import statistics
import sys
import time
from pathlib import Path

# Dense bf16 tensor-core peaks, FLOP/s (vendor data sheets); the first name found in the device name is used.
BF16_PEAK = {"H100 PCIe": 756e12, "H100": 989e12, "H200": 989e12, "GH200": 989e12, "A100": 312e12, "L4": 121e12}
DEFAULT_TEXT = Path(__file__).resolve().parents[2] / "shared" / "data" / "wikitext-2-raw" / "wiki.valid.raw"


def device_peak(name: str) -> float | None:
    return next((peak for key, peak in BF16_PEAK.items() if key in name), None)


# Kinds of device time (`--profile`), by kernel name (CUDA) or aten op name (CPU); the first match wins (attention
# first: the memory-efficient SDPA kernels are named `fmha_cutlass...`).
TIME_KINDS = {
    "attention": r"flash|fmha|attention|sdpa|aten::_safe_softmax",
    "matmul": r"gemm|cutlass|xmma|nvjet|cublas|aten::(addmm|mm|bmm|baddbmm)$",
    "optimizer": r"adam|multi_tensor|aten::_foreach",
    "copies": r"memcpy|memset|aten::(copy_|_to_copy|index_copy|index_select|clone)$",
}


def time_kind(name: str) -> str:
    return next((kind for kind, pattern in TIME_KINDS.items() if re.search(pattern, name, re.IGNORECASE)), "other")


def busy_time(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of `(start, end)` intervals: the time at least one of them runs."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


class StepProfile:
    """`torch.profiler` over `steps` steps (module docstring, "Where the time goes"), after one warm-up step under
    the profiler (its start-up, CUPTI's on a GPU, takes a second or more and is not the step's). Call `step()` at
    the end of each step; after `1 + steps` calls, `summary()`. The device is waited for at the two ends of the
    recorded window only, so its steps overlap as in training."""

    def __init__(self, cuda: bool, steps: int):
        from torch.profiler import ProfilerActivity, profile, schedule

        self.cuda, self.steps, self.ended = cuda, steps, 0
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        self.profiler = profile(activities=activities, schedule=schedule(wait=0, warmup=1, active=steps, repeat=1))
        self.profiler.__enter__()

    def _sync(self):
        import torch

        if self.cuda:
            torch.cuda.synchronize()

    def step(self) -> None:
        self.ended += 1
        if self.ended == 1:  # the warm-up step: the recorded window starts
            self._sync()
            self.started = time.perf_counter()
        elif self.ended == 1 + self.steps:
            self._sync()
            self.wall_us = 1e6 * (time.perf_counter() - self.started)
        self.profiler.step()
        if self.ended == 1 + self.steps:
            self.profiler.__exit__(None, None, None)

    def summary(self, top: int = 6) -> dict:
        from collections import Counter

        from torch.autograd import DeviceType

        events = self.profiler.events()
        spent, kinds = Counter(), Counter()
        if self.cuda:  # every kernel, copy and memset the device ran (not the ranges annotated on its timeline)
            timed = [e for e in events if e.device_type == DeviceType.CUDA and not e.is_user_annotation]
            busy = busy_time([(e.time_range.start, e.time_range.end) for e in timed]) / self.wall_us
            for e in timed:
                spent[e.name] += e.time_range.end - e.time_range.start
                kinds[time_kind(e.name)] += e.time_range.end - e.time_range.start
        else:  # the aten ops' own CPU time (children not counted twice); the optimizer's by its enclosing range
            busy = None
            for e in events:
                if e.device_type == DeviceType.CPU and e.name.startswith("aten::"):
                    spent[e.name] += e.self_cpu_time_total
                    parent = e.cpu_parent
                    while parent is not None and not parent.name.startswith("Optimizer.step"):
                        parent = parent.cpu_parent
                    kinds["optimizer" if parent is not None else time_kind(e.name)] += e.self_cpu_time_total
        total = sum(spent.values()) or 1.0
        return {
            "steps": self.steps,
            "ms_per_step": self.wall_us / 1e3 / self.steps,
            "device_busy": busy,
            "kinds": {kind: kinds[kind] / total for kind in [*TIME_KINDS, "other"]},
            "top": [(name[:60], us / 1e3 / self.steps, us / total) for name, us in spent.most_common(top)],
        }


def prepare(name: str, args: dict):
    """Recipe (its config at the preset's vocabulary size), tokenizer and examples of one recipe."""
    from hf_bertology.data import build_pretraining_dataset, load_corpus, tokenize_corpus
    from hf_bertology.recipes import get_recipe

    recipe = get_recipe(name)
    corpus = load_corpus(train_files=[args["text"]])
    tokenizer = recipe.train_tokenizer(corpus["text"], args["vocab_size"])
    recipe.adapt_to_tokenizer(tokenizer)
    recipe.config.vocab_size = max(len(tokenizer), args["vocab_size"] or recipe.vocab_size)  # the preset's size
    seq_len = args["seq_len"] or recipe.max_seq_length
    recipe.fit_to_length(seq_len)  # prediction caps follow the length, as in `bertology pretrain`
    examples = build_pretraining_dataset(tokenize_corpus(corpus, tokenizer), tokenizer, recipe.config, seq_len, 0)
    batch_size = args["batch_size"] or recipe.training_defaults.get("per_device_train_batch_size", 32)
    return recipe, tokenizer, examples.shuffle(seed=0), seq_len, batch_size


def count_flops(model, batches) -> tuple[int, int]:
    """Counted training FLOPs and real tokens of `batches` (forward only, hooks removed afterwards)."""
    import torch

    from hf_bertology.training.budget import FlopCounter

    counter = FlopCounter(model)
    with counter, torch.no_grad():
        for batch in batches:
            model(**batch)
    return counter.training_flops, counter.tokens


def measure(name: str, args: dict) -> list[dict]:
    """Runs in a fresh process: one recipe's model on real batches, padded and (where supported) padding-free,
    timed step by step with the layouts interleaved."""
    import torch

    from hf_bertology.collators.flatten import add_target_positions, flatten_batch
    from hf_bertology.training.attention import default_attention, set_attention

    torch.manual_seed(0)
    cuda = torch.cuda.is_available() and args["device"] != "cpu"
    device = torch.device("cuda" if cuda else "cpu")
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # MiB (Linux: KiB)
    recipe, tokenizer, examples, seq_len, batch_size = prepare(name, args)
    collator = recipe.build_collator(tokenizer)
    n_batches = 4
    if len(examples) < n_batches * batch_size:
        raise SystemExit(f"{name}: {args['text']} gives {len(examples)} examples, fewer than {n_batches}×{batch_size}")
    padded = [collator([examples[i] for i in range(b * batch_size, (b + 1) * batch_size)]) for b in range(n_batches)]
    # as `bertology pretrain` makes them: with the target positions the sparse heads gather (no host sync)
    layouts = {"padded": [add_target_positions(dict(batch)) for batch in padded]}
    if recipe.variant.padding_free and not args["padded_only"]:
        layouts["padding-free"] = [add_target_positions(flatten_batch(batch)) for batch in padded]

    def to_device(batch):
        return {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}

    layouts = {layout: [to_device(b) for b in batches] for layout, batches in layouts.items()}
    model = recipe.build_model()
    attention = default_attention(padding_free=len(layouts) > 1) if recipe.variant.padding_free else None
    if attention:
        set_attention(model, attention)
    attention = getattr(model.config, "_attn_implementation", None) or "default"
    model.to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda)
    # dynamic shapes at once: every batch has its own token and target counts (one compilation per layout, not two)
    forward = torch.compile(model, dynamic=True) if args["compile"] else model

    def step(batch):
        with autocast:
            loss = forward(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    counted = {layout: count_flops(model, batches) for layout, batches in layouts.items()}
    for _ in range(2 if args["compile"] else 1):  # warm-up (compiles): every batch of every layout
        for batches in layouts.values():
            for batch in batches:
                step(batch)
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()

    times: dict[str, list[float]] = {layout: [] for layout in layouts}
    for i in range(args["steps"]):
        for layout, batches in layouts.items():  # interleaved: noise hits both layouts alike
            start = time.perf_counter()
            step(batches[i % n_batches])
            if cuda:
                torch.cuda.synchronize()
            times[layout].append(time.perf_counter() - start)
    if cuda:
        peak_mib = torch.cuda.max_memory_allocated() / 2**20
        device_name = torch.cuda.get_device_name()
    else:
        peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - rss_before
        device_name = "cpu"
    profiles = {}
    for layout, batches in layouts.items() if args["profile"] else ():  # after the timing: it does not disturb it
        profile = StepProfile(cuda, args["profile"])
        for i in range(1 + args["profile"]):
            step(batches[i % n_batches])
            profile.step()
        profiles[layout] = profile.summary()
    peak = device_peak(device_name) if cuda else None
    real_tokens = sum(int(b["attention_mask"].sum()) for b in padded)
    computed = sum(int(b["input_ids"].numel()) for b in padded)
    rows = []
    for layout in layouts:
        flops, tokens = counted[layout]  # FLOPs and real tokens of all n_batches
        seconds = statistics.median(times[layout]) * n_batches  # the median step, once per batch
        rows.append(
            {
                "recipe": name,
                "layout": layout,
                "device": device_name,
                "attention": attention if layout == "padding-free" or attention != "sdpa_packed" else "sdpa",
                "compiled": bool(args["compile"]),
                "parameters": model.num_parameters(),
                "batch": f"{batch_size}×{seq_len}",
                "waste": computed / real_tokens if layout == "padded" else 1.0,
                "tokens_per_s": tokens / seconds,
                "us_per_token": 1e6 * seconds / tokens,
                "median_step_s": statistics.median(times[layout]),
                "peak_mib": peak_mib,
                "flops_per_token": flops / tokens,
                "tflops": flops / seconds / 1e12,
                "mfu": flops / seconds / peak if peak else None,
                "profile": profiles.get(layout),
            }
        )
    return rows


# transformers' own class for a family whose objective it trains as is (MLM, with NSP for BERT)
PLAIN_CLASSES = {"bert": "BertForPreTraining", "roberta": "RobertaForMaskedLM", "modernbert": "ModernBertForMaskedLM"}


def measure_trainer(
    name: str, args: dict, which: str, compiled: bool | None = None, prepared=None, flops_cache: dict | None = None
) -> dict:
    """`args["steps"]` Trainer steps of ours (`which="ours"`; `"fixed"`: fixed-shape token-budget steps) or of
    plain transformers (`"plain"`: the family's transformers class + `DataCollatorForLanguageModeling` + `Trainer`),
    same examples. Run alone it is a fresh process's work; `benchmarks/gpu_slot.py` runs many in one process and
    passes what they share: `prepared` (`prepare`'s recipe, tokenizer and examples) and `flops_cache` (counted
    FLOPs per token of ours and of plain, by recipe). `compiled`: default `--compile`, for ours only."""
    import tempfile

    import torch
    import transformers
    from transformers import DataCollatorForLanguageModeling, Trainer, TrainerCallback, TrainingArguments

    from hf_bertology.collators.flatten import PaddingFreeCollator
    from hf_bertology.testing import HostSyncs
    from hf_bertology.training.arguments import PRETRAIN_DEFAULTS, device_defaults
    from hf_bertology.training.batches import configure_attention
    from hf_bertology.training.run_trainer import trainer_class

    torch.manual_seed(0)
    cuda = torch.cuda.is_available() and args.get("device") != "cpu"
    compiled = bool(args["compile"]) and which != "plain" if compiled is None else compiled
    recipe, tokenizer, examples, seq_len, batch_size = prepared or prepare(name, args)
    warmup, steps, profiled = 3 if not compiled else 6, args["steps"], args["profile"]
    profile_from = warmup + steps + 1  # the step after the timed ones warms the profiler up (StepProfile)
    last = profile_from + profiled if profiled else warmup + steps
    # Batches to spare: the DataLoader must not run dry inside a measured step (its workers' shutdown is not a step).
    needed = (last + 2 * max(1, args["workers"])) * batch_size
    examples = examples.select([i % len(examples) for i in range(needed)])  # repeat a small text if needed
    if which == "plain":
        plain_class = getattr(transformers, PLAIN_CLASSES[recipe.variant_name])
        config_class = transformers.AutoConfig.for_model(recipe.config.model_type).__class__
        config = config_class(**{k: v for k, v in recipe.config.to_dict().items() if k != "auto_map"})
        config._attn_implementation = "sdpa"
        model = plain_class(config)
        keep = {"input_ids", "token_type_ids"} | ({"next_sentence_label"} if recipe.variant_name == "bert" else set())
        examples = examples.remove_columns([c for c in examples.column_names if c not in keep])
        # the recipe's own masking rate (ModernBERT's 30%), so both runs predict as many tokens
        rate = getattr(recipe.build_collator(tokenizer), "mlm_probability", 0.15)
        collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=rate)
        trainer_cls = Trainer
    else:
        model = recipe.build_model()
        model, collator = configure_attention(
            model, recipe.build_collator(tokenizer), None, None, recipe.variant.padding_free
        )
        trainer_cls = trainer_class(recipe.variant.trainer_class)  # BertologyTrainer (XLNet: its subclass)

    key = (name, "plain" if which == "plain" else "ours")
    if flops_cache is not None and key in flops_cache:
        flops_per_token = flops_cache[key]
    else:  # one batch's counted FLOPs, on the device that trains (a CPU forward of a base model takes seconds)
        batch = collator([examples[i] for i in range(batch_size)])
        device = torch.device("cuda" if cuda else "cpu")
        batch = {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            flops, tokens = count_flops(model.to(device), [batch])
        flops_per_token = flops / tokens
        if flops_cache is not None:
            flops_cache[key] = flops_per_token
    marks: dict[str, float] = {}
    profiles: list[StepProfile] = []  # made after the timed steps

    # Operations run in the DataLoader touch host tensors on a GPU machine too: not syncs.
    syncs = HostSyncs(ignore=("hf_bertology/collators/", "torch/utils/data/", "accelerate/data_loader.py"))

    class Clock(TrainerCallback):
        def on_step_end(self, targs, state, control, **kwargs):
            if state.global_step in (warmup, warmup + steps):
                if cuda:
                    torch.cuda.synchronize()
                marks[f"t{state.global_step}"] = time.perf_counter()
                # Ours keeps the count on the device between logs (no sync a step): bring it up to date here, the
                # read outside the window whose syncs are counted (after its start, before its end).
                sync = getattr(trainer, "sync_tokens_seen", lambda: state.num_input_tokens_seen)
                if state.global_step == warmup:
                    marks[f"n{state.global_step}"] = sync()
                marks[f"s{state.global_step}"] = syncs.sites.copy()
                if state.global_step == warmup + steps:
                    marks[f"n{state.global_step}"] = sync()
                marks["peak_mib"] = torch.cuda.max_memory_allocated() / 2**20 if cuda else None
                # CUDA-graph replays allocate nothing through the allocator: their activations live in the graph's
                # private pool, counted as reserved, not allocated (docs/speed.md, the peak-memory figure)
                marks["peak_reserved_mib"] = torch.cuda.max_memory_reserved() / 2**20 if cuda else None
            if state.global_step == warmup and cuda:
                torch.cuda.reset_peak_memory_stats()
            if profiled and state.global_step == warmup + steps:  # after the timed steps: it does not disturb them
                profiles.append(StepProfile(cuda, profiled))
            elif profiled and state.global_step > warmup + steps:
                profiles[0].step()

    # `bertology pretrain`'s defaults that bear on speed (the count of real tokens is already set below)
    ours_defaults = {"logging_nan_inf_filter": PRETRAIN_DEFAULTS["logging_nan_inf_filter"]}
    ours_defaults.update({k: v for k, v in device_defaults(set()).items() if k == "accelerator_config"})
    with tempfile.TemporaryDirectory() as tmp:
        training_args = TrainingArguments(
            output_dir=tmp,
            max_steps=last,
            per_device_train_batch_size=batch_size,
            learning_rate=1e-4,
            bf16=cuda,
            tf32=cuda or None,
            optim="adamw_torch_fused",  # on a CPU too (torch >= 2.4): the stock default
            torch_compile=compiled,
            # static shapes: the compiled step is captured as CUDA graphs
            **({"torch_compile_mode": "reduce-overhead"} if which == "fixed" and compiled and cuda else {}),
            save_strategy="no",
            logging_steps=10**9,
            report_to="none",
            remove_unused_columns=False,
            include_num_input_tokens_seen="non_padding",
            dataloader_num_workers=args["workers"],
            use_cpu=not cuda,
            disable_tqdm=True,
            **(ours_defaults if which != "plain" else {}),
        )
        trainer = trainer_cls(model=model, args=training_args, train_dataset=examples, data_collator=collator)
        if which == "fixed":
            from hf_bertology.training.fixed_shape import use_fixed_shape

            use_fixed_shape(trainer, seq_len)
        trainer.add_callback(Clock())
        if args["count_syncs"]:
            with syncs:
                trainer.train()
        else:
            trainer.train()
    seconds = marks[f"t{warmup + steps}"] - marks[f"t{warmup}"]
    real = marks[f"n{warmup + steps}"] - marks[f"n{warmup}"]
    per_step = marks[f"s{warmup + steps}"] - marks[f"s{warmup}"]
    device_name = torch.cuda.get_device_name() if cuda else "cpu"
    peak = device_peak(device_name) if cuda else None
    return {
        "recipe": name,
        "which": {"fixed": "ours (fixed shape)"}.get(which, which) + (" (compiled)" if compiled else ""),
        "device": device_name,
        "batch": f"{batch_size}×{seq_len}",
        "padding_free": isinstance(collator, PaddingFreeCollator),
        "tokens_per_s": real / seconds,
        "tflops": flops_per_token * real / seconds / 1e12,
        "mfu": flops_per_token * real / seconds / peak if peak else None,
        "peak_mib": marks["peak_mib"],
        "peak_reserved_mib": marks["peak_reserved_mib"],
        "flops_per_token": flops_per_token,
        "syncs_per_step": sum(per_step.values()) / steps if args["count_syncs"] else None,
        "sync_sites": {site: n / steps for site, n in per_step.most_common()} if args["count_syncs"] else None,
        "profile": profiles[0].summary() if profiled else None,
    }


def _child(queue, function, args):
    try:
        queue.put(("ok", function(*args)))
    except BaseException as err:  # noqa: B036 - reported to the parent, which raises
        import traceback

        queue.put(("error", f"{type(err).__name__}: {err}\n{traceback.format_exc()}"))


def run_in_fresh_process(function, *args):
    """`function(*args)` in a fresh process: its own peak memory, no allocator state carried over. Not a Pool
    worker: those are daemonic and may not start the DataLoader's worker processes."""
    context = mp.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_child, args=(queue, function, args))
    process.start()
    status, result = queue.get()
    process.join()
    if status != "ok":
        raise RuntimeError(result)
    return result


def print_layouts(rows: list[dict]) -> None:
    device = rows[0]["device"]
    on_gpu = device != "cpu"
    print(f"\nper-step training cost on {device}" + (" (bf16 autocast)" if on_gpu else " (fp32)"))
    if on_gpu and device_peak(device) is None:
        print(f"MFU: n/a (no bf16 peak known for {device}; add it to BF16_PEAK)")
    elif on_gpu:
        print(f"MFU against a dense bf16 peak of {device_peak(device) / 1e12:.0f} TFLOP/s")
    else:
        print("MFU: n/a on CPU (no GPU in this run; MFU needs a device with a known bf16 peak)")
    header = "| recipe | layout | attn | compiled | params | batch | waste | real tokens/s | ×padded | µs/token"
    header += " | median step | peak MiB | FLOPs/token | TFLOP/s | MFU |"
    print(header)
    print("|---|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    padded = {row["recipe"]: row["tokens_per_s"] for row in rows if row["layout"] == "padded"}
    for row in rows:
        mfu = f"{100 * row['mfu']:.1f}%" if row["mfu"] is not None else "n/a"
        print(
            f"| {row['recipe']} | {row['layout']} | {row['attention']} | {'yes' if row['compiled'] else 'no'} "
            f"| {row['parameters'] / 1e6:.2f}M | {row['batch']} | {row['waste']:.2f} | {row['tokens_per_s']:,.0f} "
            f"| {row['tokens_per_s'] / padded[row['recipe']]:.2f} | {row['us_per_token']:.2f} "
            f"| {1000 * row['median_step_s']:.1f} ms | {row['peak_mib']:,.0f} "
            f"| {row['flops_per_token'] / 1e6:.2f}M | {row['tflops']:.3f} | {mfu} |"
        )
    if not on_gpu:
        print("peak MiB on CPU: growth of the process's peak RSS while building and training the model")


def print_vs_plain(rows: list[dict]) -> None:
    cuda = rows[0]["device"] != "cpu"
    settings = "bf16, SDPA, fused AdamW, TF32" if cuda else "fp32, SDPA, fused AdamW"  # bf16 and TF32: CUDA only
    print(f"\nours vs plain transformers through a Trainer on {rows[0]['device']} ({settings})")
    print("| recipe | run | batch | padding-free | real tokens/s | ×plain | TFLOP/s | MFU | peak MiB |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|")
    plain = {row["recipe"]: row["tokens_per_s"] for row in rows if row["which"] == "plain"}
    for row in rows:
        ratio = f"{row['tokens_per_s'] / plain[row['recipe']]:.2f}" if row["recipe"] in plain else "—"
        mfu = f"{100 * row['mfu']:.1f}%" if row["mfu"] is not None else "n/a"
        peak = f"{row['peak_mib']:,.0f}" if row["peak_mib"] is not None else "n/a"
        print(
            f"| {row['recipe']} | {row['which']} | {row['batch']} | {'yes' if row['padding_free'] else 'no'} "
            f"| {row['tokens_per_s']:,.0f} | {ratio} | {row['tflops']:.1f} | {mfu} | {peak} |"
        )


def print_profiles(rows: list[dict]) -> None:
    device = rows[0]["device"]
    what = "device time (kernels)" if device != "cpu" else "CPU time of the aten ops"
    print(f"\nwhere the time goes on {device}: profiled steps after the timed ones, shares of the {what}")
    print(f"| recipe | run | steps | ms/step | device busy | {' | '.join([*TIME_KINDS, 'other'])} | costliest |")
    print("|---|---|---:|---:|---:|" + "---:|" * (len(TIME_KINDS) + 1) + "---|")
    for row in rows:
        profile = row.get("profile")
        if not profile:
            continue
        busy = f"{100 * profile['device_busy']:.0f}%" if profile["device_busy"] is not None else "n/a"
        shares = " | ".join(f"{100 * share:.0f}%" for share in profile["kinds"].values())
        costliest = "; ".join(f"{name} {100 * share:.0f}%" for name, _, share in profile["top"][:3])
        run = row.get("which") or f"{row['layout']}{' (compiled)' if row['compiled'] else ''}"
        print(
            f"| {row['recipe']} | {run} | {profile['steps']} | {profile['ms_per_step']:.1f} | {busy} | {shares} "
            f"| {costliest} |"
        )


def print_syncs(rows: list[dict]) -> None:
    print(f"\nhost syncs per optimizer step through a Trainer on {rows[0]['device']} (steps after warm-up)")
    print("| recipe | run | batch | padding-free | syncs per step | where |")
    print("|---|---|---|---|---:|---|")
    for row in rows:
        where = "; ".join(f"{n:g}× {site}" for site, n in row["sync_sites"].items()) or "—"
        print(
            f"| {row['recipe']} | {row['which']} | {row['batch']} | {'yes' if row['padding_free'] else 'no'} "
            f"| {row['syncs_per_step']:g} | {where} |"
        )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipes", help="comma-separated (default: every *-mini recipe in the registry)")
    parser.add_argument("--seq_len", type=int, default=None, help="default: each recipe's max_seq_length")
    parser.add_argument("--batch_size", type=int, default=None, help="default: each recipe's batch size")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per recipe and layout (after warm-up)")
    parser.add_argument("--vocab_size", type=int, default=None, help="default: each preset's")
    parser.add_argument("--text", default=str(DEFAULT_TEXT), help="text the tokenizers and batches come from")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu"])
    parser.add_argument("--compile", action="store_true", help="torch.compile the model (ours)")
    parser.add_argument("--padded_only", action="store_true", help="time the padded layout only")
    parser.add_argument("--vs_plain", action="store_true", help="Trainer runs: ours vs plain transformers")
    parser.add_argument("--workers", type=int, default=4, help="DataLoader workers of --vs_plain runs")
    parser.add_argument("--fixed_shape", action="store_true", help="--vs_plain: also ours with fixed-shape steps")
    parser.add_argument("--count_syncs", action="store_true", help="--vs_plain: count host syncs per step (untimed)")
    parser.add_argument("--profile", type=int, default=0, help="profile this many more steps (where the time goes)")
    parser.add_argument("--json", help="also write the rows to this file")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)

    from hf_bertology.recipes import PRESETS

    recipes = args.recipes.split(",") if args.recipes else [name for name in PRESETS if name.endswith("-mini")]
    if not Path(args.text).is_file():
        raise SystemExit(f"text file not found: {args.text} (pass --text)")
    if args.count_syncs and not args.vs_plain:
        raise SystemExit("--count_syncs counts the syncs of the Trainer runs: pass --vs_plain too")
    keys = ("seq_len", "batch_size", "steps", "vocab_size", "text", "device", "compile", "padded_only", "workers")
    keys += ("count_syncs", "profile")
    settings = {k: getattr(args, k) for k in keys}
    rows = []
    for name in recipes:
        if args.vs_plain:
            from hf_bertology.recipes import get_recipe

            runs = ["ours"] + (["fixed"] if args.fixed_shape else [])
            runs += ["plain"] if get_recipe(name).variant_name in PLAIN_CLASSES else []
            measured = [run_in_fresh_process(measure_trainer, name, settings, which) for which in runs]
        else:
            measured = run_in_fresh_process(measure, name, settings)
        for row in measured:
            print(f"measured {name}: {json.dumps(row)}", file=sys.stderr, flush=True)
        rows += measured
        if args.json:  # after every recipe: a run stopped part-way keeps what it measured
            Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    if args.count_syncs:
        print_syncs(rows)
    else:
        print_vs_plain(rows) if args.vs_plain else print_layouts(rows)
    if args.profile:
        print_profiles(rows)


if __name__ == "__main__":
    main()
