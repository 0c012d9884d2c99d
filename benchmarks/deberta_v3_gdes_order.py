"""DeBERTa-v3's two updates in the official order against ours, on `deberta-v3-mini` (issue 37; CPU).

    nice python benchmarks/deberta_v3_gdes_order.py OUT_DIR [--steps 300] [--batch 8] [--text FILE] [--arms ...]
    [--tokenizer_name DIR] (train one first with --save_tokenizer, then run the arms in parallel processes)

Officially (microsoft/DeBERTa `apps/tasks/rtd_task.py`, decoupled training) the generator's optimizer steps first,
and the discriminator's forward then reads the *updated* generator table (GDES: sg(E_G) + Δ). Ours computes both
losses in one forward and steps once, so the discriminator reads the table before the step. Each run trains the same
model (seed 0), on the same examples in the same order with the same masks, with the recipe's optimizer (XAdam's
update, `warmup_linear`, each network clipped to 1 on its own), in a loop written here:

- `joint (ours)`: one forward, MLM + λ·RTD backward, both networks stepped: what `BertologyTrainer` does;
- `official order`: the generator's MLM backward and step, then the discriminator's forward on the same sampled
  tokens with the updated table, its backward and step;
- `joint, seed 1`: ours with another initialisation and data order, for the size of run-to-run noise.

Writes `OUT_DIR/gdes_order.json` (per-step losses, held-out losses) and prints a markdown table: means over the last
50 steps and the held-out MLM and RTD losses (5% of the examples, fixed masks).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from hf_bertology.training.arguments import parse_args, training_arguments
from hf_bertology.training.corpora import build_datasets, load_corpora
from hf_bertology.training.optimizers import AdamWNoBiasCorrection, official_schedule
from hf_bertology.training.run_recipe import build_model, build_recipe, build_tokenizer, settle_recipe
from hf_bertology.training.trainer import EVAL_EPOCH, BertologyTrainer, ExampleIds

ROOT = Path(__file__).resolve().parents[1]
TEXT = ROOT.parent / "shared" / "data" / "wikitext-2-raw" / "wiki.valid.raw"
ARMS = {
    "joint (ours)": (False, 0),
    "official order": (True, 0),
    "joint, seed 1": (False, 1),
    "official order, seed 1": (True, 1),
}


def setting_up(args):
    """The recipe's tokenizer, collator and examples, as `bertology pretrain` builds them."""
    argv = ["--recipe", "deberta-v3-mini", "--train_file", str(args.text), "--output_dir", str(args.out_dir)]
    argv += ["--do_eval", "true", "--max_steps", str(args.steps), "--use_cpu", "true", "--seed", "0"]
    argv += ["--tokenizer_name", str(args.tokenizer_name)] if args.tokenizer_name else []
    model_args, data_args, training_args, explicit = parse_args(argv)
    recipe = build_recipe(model_args)
    training_args = training_arguments(training_args, recipe, explicit)
    corpus, eval_corpus = load_corpora(data_args, training_args)
    tokenizer = build_tokenizer(model_args, recipe, corpus, training_args, None)
    recipe = settle_recipe(recipe, tokenizer, data_args, model_args)
    train, held_out = build_datasets(corpus, eval_corpus, tokenizer, recipe, data_args, training_args)
    return recipe, model_args, tokenizer, train, held_out, training_args


def batches(dataset, collator, batch: int, seed: int, epoch: int = 0):
    collator.set_epoch(epoch)
    order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed)).tolist()
    examples = ExampleIds(dataset)
    for start in range(0, len(order) - batch + 1, batch):
        yield collator([examples[i] for i in order[start : start + batch]])


def rtd_loss(model, batch, replaced_input_ids, rtd_labels):
    """The discriminator's loss on `replaced_input_ids` (the forward's own: BCE over the real tokens, mean)."""
    real = batch["attention_mask"].bool()
    hidden = model.discriminate(replaced_input_ids, attention_mask=batch["attention_mask"]).last_hidden_state
    logits = model.mask_predictions(hidden)
    summed = F.binary_cross_entropy_with_logits(
        logits.float(), rtd_labels.float(), weight=real.float(), reduction="sum"
    )
    return summed / real.sum()


def train_arm(official_order: bool, seed: int, setup, args) -> dict:
    recipe, model_args, tokenizer, train, held_out, training_args = setup
    torch.manual_seed(seed)
    model = build_model(recipe, model_args).train()
    decay = set(BertologyTrainer.get_decay_parameter_names(None, model))
    groups = [
        {"params": [p for n, p in model.named_parameters() if p.requires_grad and n in decay], "weight_decay": 0.01},
        {
            "params": [p for n, p in model.named_parameters() if p.requires_grad and n not in decay],
            "weight_decay": 0.0,
        },
    ]
    optimizer = AdamWNoBiasCorrection(groups, lr=training_args.learning_rate, betas=(0.9, 0.999), eps=1e-6)
    warmup = training_args.get_warmup_steps(args.steps)
    scheduler = official_schedule(optimizer, warmup, args.steps, decay_from_start=True)
    generator, discriminator = model.gradient_clipping_groups()
    collator = recipe.build_collator(tokenizer)
    collator.set_run_seed(seed)
    weight = recipe.config.discriminator_weight
    logs, step, epoch = [], 0, 0
    while step < args.steps:
        for batch in batches(train, collator, args.batch, seed + 1000 * epoch, epoch):
            out = model(**batch)
            if official_order:  # the generator steps, then the discriminator reads its updated table
                (recipe.config.generator_weight * out.mlm_loss).backward()
                torch.nn.utils.clip_grad_norm_(generator, 1.0)
                optimizer.step()  # the discriminator's parameters have no gradient yet: skipped
                optimizer.zero_grad(set_to_none=True)
                rtd = rtd_loss(model, batch, out.replaced_input_ids, out.rtd_labels.bool())
                (weight * rtd).backward()
                torch.nn.utils.clip_grad_norm_(discriminator, 1.0)
            else:
                rtd = out.rtd_loss
                out.loss.backward()
                torch.nn.utils.clip_grad_norm_(generator, 1.0)
                torch.nn.utils.clip_grad_norm_(discriminator, 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            scheduler.step()
            step += 1
            logs.append({"step": step, "mlm_loss": out.mlm_loss.item(), "rtd_loss": rtd.item()})
            if step == args.steps:
                break
        epoch += 1
    model.eval()
    sums = {"mlm_loss": 0.0, "rtd_loss": 0.0, "rtd_accuracy": 0.0}
    count = 0
    with torch.no_grad():
        for batch in batches(held_out, collator, args.batch, 0, EVAL_EPOCH):
            out = model(**batch)
            for key in sums:
                sums[key] += getattr(out, key).item()
            count += 1
    return {"train": logs, "held_out": {key: value / count for key, value in sums.items()}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--text", type=Path, default=TEXT)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--tokenizer_name", type=Path, help="a tokenizer folder (runs in parallel share one)")
    parser.add_argument("--save_tokenizer", action="store_true", help="only train the tokenizer into OUT_DIR")
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS), help="runs to train (all)")
    args = parser.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    setup = setting_up(args)
    if args.save_tokenizer:
        setup[2].save_pretrained(args.out_dir)
        return
    results = {}
    for name in args.arms:
        official_order, seed = ARMS[name]
        start = time.perf_counter()
        results[name] = train_arm(official_order, seed, setup, args)
        print(f"{name}: {args.steps} steps in {time.perf_counter() - start:.0f} s", flush=True)
        (args.out_dir / "gdes_order.json").write_text(json.dumps(results, indent=1))
    print(
        f"| run | mlm_loss | rtd_loss (means of steps {args.steps - 49}-{args.steps}) | held-out mlm | held-out rtd |"
    )
    print("|---|---|---|---|---|")
    for name, result in results.items():
        tail = result["train"][-50:]
        means = [sum(log[key] for log in tail) / len(tail) for key in ("mlm_loss", "rtd_loss")]
        held = result["held_out"]
        print(f"| {name} | {means[0]:.4f} | {means[1]:.4f} | {held['mlm_loss']:.4f} | {held['rtd_loss']:.4f} |")


if __name__ == "__main__":
    main()
