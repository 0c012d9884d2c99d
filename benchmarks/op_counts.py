"""aten operations in one optimizer step, per recipe: ours (as `bertology pretrain` builds it) and plain
`transformers`, counted at the dispatcher (`TorchDispatchMode`) on CPU at tiny shapes.

    python benchmarks/op_counts.py [--write]     # print the table; --write records it in benchmarks/op_counts.json
    python benchmarks/op_counts.py --time 50     # and the CPU step time of ours over plain's (medians, interleaved)

One step = forward with labels, backward, fused AdamW step, zero_grad, on a batch of 8 examples of at most 64 tokens
from a seeded synthetic corpus (the recipe's `-tiny` preset, a 300-token vocabulary). Ours: the recipe's model and
collator as `pretrain` configures them (padding-free where the variant allows it, target positions), at a step the
Trainer does not log (`return_metrics=False` where the model takes it: no accuracies). Plain: the
family's `transformers` pretraining class on the padded batch, as a `run_mlm.py` user would run it (ELECTRA and
DeBERTa-v3: `*ForMaskedLM` generator and a discriminator joined by hand, sampling with `torch.multinomial`), with the
count of labels the stock `Trainer` makes for models that take `num_items_in_batch` (3 operations; ours counts the
same way, per objective, in `BertologyTrainer`).
"non-view": operations that are not views (a view launches no kernel). On a GPU every operation that is not a view
is at least one kernel launch, which is what caps small models there (issue 28).

`tests/test_op_counts.py` fails when a recipe's count grows by more than 10% over the recorded one; after a change
that is meant to add operations, run this script with `--write` and commit the JSON.
"""

from __future__ import annotations

import argparse
import inspect
import json
import random
import statistics
import time
from collections import Counter
from pathlib import Path

import datasets
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from hf_bertology.data import build_pretraining_dataset, tokenize_corpus
from hf_bertology.recipes import VARIANTS, get_recipe
from hf_bertology.training.batches import configure_attention

RECORD = Path(__file__).with_name("op_counts.json")
LENGTH, BATCH, VOCAB = 64, 8, 300
WORDS = "the a cat dog bird fish tree house river city people time year day man woman child world life hand".split()


class OpCounter(TorchDispatchMode):
    """Counts every aten operation dispatched inside it, and those that are not views."""

    def __init__(self):
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.non_view = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func.overloadpacket)] += 1
        if not func.is_view:
            self.non_view += 1
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        return sum(self.ops.values())


def synthetic_corpus(n_docs: int = 40, seed: int = 0) -> datasets.Dataset:
    rng = random.Random(seed)
    docs = []
    for _ in range(n_docs):
        sentences = [
            " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 14))).capitalize() + "."
            for _ in range(rng.randint(3, 9))
        ]
        docs.append(" ".join(sentences))
    return datasets.Dataset.from_dict({"text": docs})


def _counts(batch: dict) -> dict:
    """`BertologyTrainer`'s counts per objective (one process, one micro-batch)."""
    from hf_bertology.training.trainer import is_count_key

    keys = [k for k in batch if is_count_key(k)]
    counts = {k: batch[k].ne(-100).sum() for k in keys}
    if "attention_mask" in batch:
        counts["attention_mask"] = batch["attention_mask"].sum()
    return counts


def count_step(model: torch.nn.Module, batch: dict, loss_fn, steps: list | None = None) -> OpCounter:
    """Ops of one optimizer step (after one warm-up step, so lazy state such as AdamW's is made); the step function
    is appended to `steps` (for timing)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)

    def step():
        loss_fn(model, batch).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    torch.manual_seed(0)
    step()
    counter = OpCounter()
    torch.manual_seed(0)
    with counter:
        step()
    if steps is not None:
        steps.append(step)
    return counter


def time_ratio(ours, plain, repeats: int) -> float:
    """Median step time of `ours` over that of `plain`, steps interleaved (machine noise hits both alike)."""
    times: dict = {ours: [], plain: []}
    for _ in range(repeats):
        for step in (ours, plain):
            start = time.perf_counter()
            step()
            times[step].append(time.perf_counter() - start)
    return statistics.median(times[ours]) / statistics.median(times[plain])


def _plain_mlm(cls, config):
    model = cls(config)
    takes_loss_kwargs = any(p.kind == p.VAR_KEYWORD for p in inspect.signature(model.forward).parameters.values())

    def loss(model, batch, num_items_in_batch=None):
        keep = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids", "labels") if k in batch}
        if takes_loss_kwargs:  # as the stock Trainer passes it (`model_accepts_loss_kwargs`)
            keep["num_items_in_batch"] = num_items_in_batch
        for extra in ("next_sentence_label", "sentence_order_label", "perm_mask", "target_mapping"):
            if extra in batch:
                keep["sentence_order_label" if extra == "sentence_order_label" else extra] = batch[extra]
        return model(**keep).loss

    return model, loss


def _plain_rtd(generator_cls, generator_config, discriminator_cls, discriminator_config):
    """ELECTRA's step with plain classes joined by hand (the generator's logits on every position, multinomial
    sampling at the masked ones, the discriminator's BCE over the real tokens)."""
    generator, discriminator = generator_cls(generator_config), discriminator_cls(discriminator_config)
    model = torch.nn.ModuleDict({"generator": generator, "discriminator": discriminator})

    def loss(model, batch, num_items_in_batch=None):  # the joint loss divides by its own counts (means)
        ids, mask, labels = batch["input_ids"], batch["attention_mask"], batch["labels"]
        out = model["generator"](input_ids=ids, attention_mask=mask, labels=labels)
        chosen = labels.ne(-100)
        with torch.no_grad():
            sampled = torch.multinomial(out.logits[chosen].softmax(-1), 1).squeeze(1)
            original = torch.where(chosen, labels, ids)
            replaced = original.clone()
            replaced[chosen] = sampled
        logits = model["discriminator"](input_ids=replaced, attention_mask=mask).logits.squeeze(-1)
        rtd = F.binary_cross_entropy_with_logits(logits[mask.bool()], (replaced != original)[mask.bool()].float())
        return out.loss + 50 * rtd

    return model, loss


def plain_step(variant: str, config):
    """(model, loss function) of plain transformers for the variant, or None."""
    import transformers as tf

    if variant == "bert":
        return _plain_mlm(tf.BertForPreTraining, config)
    if variant == "spanbert":
        return _plain_mlm(tf.BertForMaskedLM, config)
    if variant == "roberta":
        return _plain_mlm(tf.RobertaForMaskedLM, config)
    if variant == "albert":
        return _plain_mlm(tf.AlbertForPreTraining, config)
    if variant == "xlnet":
        return _plain_mlm(tf.XLNetLMHeadModel, config)
    if variant == "modernbert":
        return _plain_mlm(tf.ModernBertForMaskedLM, config)
    if variant == "electra":
        from hf_bertology.models.configuration_recipe import generator_config

        return _plain_rtd(
            tf.ElectraForMaskedLM,
            generator_config(config),
            tf.ElectraForPreTraining,
            config.discriminator_config(),
        )
    if variant == "deberta-v3":
        from hf_bertology.models.configuration_recipe import generator_config

        discriminator = tf.DebertaV2Config(**{**config.to_dict(), "num_labels": 1})
        return _plain_rtd(
            tf.DebertaV2ForMaskedLM, generator_config(config), tf.DebertaV2ForTokenClassification, discriminator
        )
    return None


def measure(variant: str, corpus: datasets.Dataset | None = None, plain: bool = True, repeats: int = 0) -> dict:
    corpus = corpus if corpus is not None else synthetic_corpus()
    recipe = get_recipe(f"{variant}-tiny")
    tokenizer = recipe.train_tokenizer(corpus["text"], VOCAB)
    recipe.adapt_to_tokenizer(tokenizer)
    examples = build_pretraining_dataset(tokenize_corpus(corpus, tokenizer), tokenizer, recipe.config, LENGTH, 0)
    features = [examples[i] for i in range(BATCH)]
    torch.manual_seed(0)
    padded_collator = recipe.build_collator(tokenizer, seed=0)
    padded = padded_collator(features)
    model, collator = configure_attention(recipe.build_model(), padded_collator, None, None, recipe.padding_free)
    ours_batch = collator(features)

    # a step `BertologyTrainer` does not log: no accuracies where the model can leave them out
    quiet = {"return_metrics": False} if getattr(model, "takes_return_metrics", False) else {}

    def ours_loss(model, batch):
        return model(**batch, num_items_in_batch=_counts(batch), **quiet).loss

    steps: list = []
    ours = count_step(model.train(), ours_batch, ours_loss, steps)
    row = {"ours": ours.total, "ours_non_view": ours.non_view}
    plain = plain_step(variant, recipe.config) if plain else None
    if plain is not None:
        plain_model, plain_model_loss = plain

        def plain_loss(model, batch):  # the stock Trainer counts the labels (`_get_num_items_in_batch`) too
            return plain_model_loss(model, batch, sum(b["labels"].ne(-100).sum() for b in [batch]))

        counted = count_step(plain_model.train(), padded, plain_loss, steps)
        row.update(plain=counted.total, plain_non_view=counted.non_view)
        if repeats:
            row["time_ratio"] = time_ratio(*steps, repeats)
    return row


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help=f"record the counts in {RECORD.name}")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--time", type=int, default=0, help="also time this many steps each: ours / plain step time")
    args = parser.parse_args(argv)
    corpus = synthetic_corpus()
    recorded = json.loads(RECORD.read_text()) if RECORD.is_file() else {}
    rows = {}
    timed = " step time ours / plain (CPU, median) |" if args.time else ""
    print(f"| recipe | ours (non-view) | plain transformers (non-view) | ours / plain | recorded |{timed}")
    print("|---|---|---|---|---|" + ("---|" if args.time else ""))
    for variant in args.variants.split(","):
        row = rows[variant] = measure(variant, corpus, repeats=args.time)
        plain = f"{row['plain']} ({row['plain_non_view']})" if "plain" in row else "—"
        ratio = f"{row['ours'] / row['plain']:.2f}x" if "plain" in row else "—"
        before = recorded.get(variant, {}).get("ours", "—")
        seconds = f" {row['time_ratio']:.2f}x |" if "time_ratio" in row else (" — |" if args.time else "")
        print(f"| {variant}-tiny | {row['ours']} ({row['ours_non_view']}) | {plain} | {ratio} | {before} |{seconds}")
    if args.write:
        counts = {variant: {k: v for k, v in row.items() if k != "time_ratio"} for variant, row in rows.items()}
        RECORD.write_text(json.dumps({**recorded, **counts}, indent=1, sort_keys=True) + "\n")
    return rows


if __name__ == "__main__":
    main()
