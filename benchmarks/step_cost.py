"""Per-step training cost of each recipe, side by side: tokens/s, time per token, peak memory, FLOPs/token, MFU.

    python benchmarks/step_cost.py                                   # every *-mini recipe in the registry
    python benchmarks/step_cost.py --recipes bert-base,electra-small,electra-base --seq_len 128 --batch_size 32

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
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
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


def measure(name: str, args: dict) -> dict:
    """Runs in a fresh process: build one recipe's model and batches, time training steps."""
    import torch

    from hf_bertology.data import build_pretraining_dataset, load_corpus, tokenize_corpus
    from hf_bertology.recipes import get_recipe
    from hf_bertology.training.budget import FlopCounter

    torch.manual_seed(0)
    cuda = torch.cuda.is_available() and args["device"] != "cpu"
    device = torch.device("cuda" if cuda else "cpu")
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # MiB (Linux: KiB)

    recipe = get_recipe(name)
    corpus = load_corpus(train_files=[args["text"]])
    tokenizer = recipe.train_tokenizer(corpus["text"], args["vocab_size"])
    recipe.adapt_to_tokenizer(tokenizer)
    recipe.config.vocab_size = max(len(tokenizer), args["vocab_size"] or recipe.vocab_size)  # the preset's size
    seq_len = args["seq_len"] or recipe.max_seq_length
    recipe.fit_to_length(seq_len)  # prediction caps follow the length, as in `bertology pretrain`
    examples = build_pretraining_dataset(tokenize_corpus(corpus, tokenizer), tokenizer, recipe.config, seq_len, 0)
    collator = recipe.build_collator(tokenizer)
    batch_size = args["batch_size"] or recipe.training_defaults.get("per_device_train_batch_size", 32)
    examples = examples.shuffle(seed=0)
    n_batches = 4
    if len(examples) < n_batches * batch_size:
        raise SystemExit(f"{name}: {args['text']} gives {len(examples)} examples, fewer than {n_batches}×{batch_size}")
    batches = [collator([examples[i] for i in range(b * batch_size, (b + 1) * batch_size)]) for b in range(n_batches)]
    batches = [{k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()} for batch in batches]

    attn = "eager"
    if cuda:
        try:
            recipe.config._attn_implementation = "sdpa"
            model = recipe.build_model()
            attn = "sdpa"
        except (ValueError, ImportError):  # a model without SDPA support (XLNet)
            recipe.config._attn_implementation = "eager"
            model = recipe.build_model()
    else:
        model = recipe.build_model()
        attn = getattr(model.config, "_attn_implementation", None) or "default"
    model.to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda)

    def step(batch):
        with autocast:
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    # FLOPs and real tokens of each batch (hooks on), which also warms up
    counted = []
    for batch in batches:
        counter = FlopCounter(model)
        with counter:
            step(batch)
        counted.append((counter.training_flops, counter.tokens))
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()

    times = []
    for i in range(args["steps"]):
        start = time.perf_counter()
        step(batches[i % n_batches])
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    flops = sum(counted[i % n_batches][0] for i in range(args["steps"]))
    tokens = sum(counted[i % n_batches][1] for i in range(args["steps"]))
    seconds = sum(times)
    if cuda:
        peak_mib = torch.cuda.max_memory_allocated() / 2**20
        device_name = torch.cuda.get_device_name()
    else:
        peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - rss_before
        device_name = "cpu"
    peak = device_peak(device_name) if cuda else None
    return {
        "recipe": name,
        "device": device_name,
        "attention": attn,
        "parameters": model.num_parameters(),
        "batch": f"{batch_size}×{seq_len}",
        "tokens_per_s": tokens / seconds,
        "us_per_token": 1e6 * seconds / tokens,
        "median_step_s": statistics.median(times),
        "peak_mib": peak_mib,
        "flops_per_token": flops / tokens,
        "tflops": flops / seconds / 1e12,
        "mfu": flops / seconds / peak if peak else None,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipes", help="comma-separated (default: every *-mini recipe in the registry)")
    parser.add_argument("--seq_len", type=int, default=None, help="default: each recipe's max_seq_length")
    parser.add_argument("--batch_size", type=int, default=None, help="default: each recipe's batch size")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per recipe (after 4 warm-up steps)")
    parser.add_argument("--vocab_size", type=int, default=None, help="default: each preset's")
    parser.add_argument("--text", default=str(DEFAULT_TEXT), help="text the tokenizers and batches come from")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu"])
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)

    from hf_bertology.recipes import PRESETS

    recipes = args.recipes.split(",") if args.recipes else [name for name in PRESETS if name.endswith("-mini")]
    if not Path(args.text).is_file():
        raise SystemExit(f"text file not found: {args.text} (pass --text)")
    settings = {k: getattr(args, k) for k in ("seq_len", "batch_size", "steps", "vocab_size", "text", "device")}
    rows = []
    context = mp.get_context("spawn")
    for name in recipes:
        with context.Pool(1) as pool:  # a fresh process: its own peak memory, no allocator state carried over
            rows.append(pool.apply(measure, (name, settings)))
        print(f"measured {name}", file=sys.stderr, flush=True)

    device = rows[0]["device"]
    on_gpu = device != "cpu"
    print(f"\nper-step training cost on {device}" + (" (bf16 autocast)" if on_gpu else " (fp32)"))
    if on_gpu and device_peak(device) is None:
        print(f"MFU: n/a (no bf16 peak known for {device}; add it to BF16_PEAK)")
    elif on_gpu:
        print(f"MFU against a dense bf16 peak of {device_peak(device) / 1e12:.0f} TFLOP/s")
    else:
        print("MFU: n/a on CPU (no GPU in this run; MFU needs a device with a known bf16 peak)")
    header = "| recipe | attn | params | batch | tokens/s | ×first | µs/token | median step | peak MiB | FLOPs/token"
    header += " | TFLOP/s | MFU |"
    print(header)
    print("|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        mfu = f"{100 * row['mfu']:.1f}%" if row["mfu"] is not None else "n/a"
        print(
            f"| {row['recipe']} | {row['attention']} | {row['parameters'] / 1e6:.2f}M | {row['batch']} "
            f"| {row['tokens_per_s']:,.0f} | {row['tokens_per_s'] / rows[0]['tokens_per_s']:.2f} "
            f"| {row['us_per_token']:.1f} | {1000 * row['median_step_s']:.0f} ms | {row['peak_mib']:,.0f} "
            f"| {row['flops_per_token'] / 1e6:.2f}M | {row['tflops']:.3f} | {mfu} |"
        )
    if not on_gpu:
        print("peak MiB on CPU: growth of the process's peak RSS while building and training the model")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
