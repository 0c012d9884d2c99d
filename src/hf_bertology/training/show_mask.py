"""`bertology show-mask`: print example i of the training set as the model saw it in epoch e.

    bertology show-mask --recipe bert-mini --train_file wiki_00 --tokenizer_name runs/bert-mini --seed 42 \
        --example 5 --epoch 1

Takes the flags of `bertology pretrain` (the same corpus, tokenizer, `--max_seq_length`, `--seed`/`--data_seed`,
`--config_overrides`, `--do_eval` split and `--max_train_samples` rebuild the same examples) plus `--example` and
`--epoch`. Pass the run's tokenizer (`--tokenizer_name OUTPUT_DIR` or a checkpoint): a tokenizer trained anew on the
corpus may differ. Every mask is a function of (seed, epoch, example id) (`collators.base.RandomSource`), so the
printed masks are those of the training run, whatever its batch size, dataloader workers or processes.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

import torch
from transformers import TrainingArguments

from ..collators.base import EXAMPLE_ID
from ..utils import BertologyError, argument_parser, parse_arguments, run_command
from .arguments import DataArguments, ModelArguments, check_sizes
from .corpora import build_datasets, load_corpora
from .input_checks import check_counts
from .run_recipe import build_recipe, load_tokenizer, settle_recipe
from .trainer import ExampleIds


@dataclass
class ShowMaskArguments:
    example: int = field(default=0, metadata={"help": "Index of the training example (its `example_id`)."})
    epoch: int = field(default=0, metadata={"help": "Epoch whose masks to show (0 = the first)."})


def masked_example(collator, dataset, index: int, epoch: int = 0, seed: int = 42) -> dict[str, torch.Tensor]:
    """The batch `collator` makes of example `index` of `dataset` in `epoch` of a run seeded with `seed` (the
    Trainer's `data_seed`, else `seed`): one row, exactly the row the model saw in that run."""
    if not 0 <= index < len(dataset):
        raise BertologyError(f"--example {index} is outside the {len(dataset)} training examples")
    collator.set_run_seed(seed)
    collator.set_epoch(epoch)
    feature = ExampleIds(dataset)[index]
    if feature[EXAMPLE_ID] != index:
        raise BertologyError(f"row {index} carries example_id {feature[EXAMPLE_ID]}; pass the row of that id")
    return collator([feature])


def predicted_positions(batch: dict[str, torch.Tensor]) -> dict[int, int]:
    """{position: original token} of the predicted tokens of a one-row batch (MLM labels or XLNet's target rows)."""
    labels = batch["labels"][0]
    if "target_mapping" in batch:  # XLNet: one row per target
        rows = labels.ne(-100)
        positions = batch["target_mapping"][0][rows].argmax(-1)
        return dict(zip(positions.tolist(), labels[rows].tolist()))
    where = labels.ne(-100).nonzero().flatten()
    return dict(zip(where.tolist(), labels[where].tolist()))


def describe(batch: dict[str, torch.Tensor], tokenizer) -> str:
    """The tokens the model reads, predicted ones as `seen{original}`, then the per-example labels."""
    real = batch["attention_mask"][0].bool()
    ids = batch["input_ids"][0]
    targets = predicted_positions(batch)
    words = []
    for position in real.nonzero().flatten().tolist():
        token = tokenizer.convert_ids_to_tokens(int(ids[position]))
        if position in targets:
            token = f"{token}{{{tokenizer.convert_ids_to_tokens(targets[position])}}}"
        words.append(token)
    lines = [" ".join(words), f"{len(targets)} of {int(real.sum())} tokens predicted"]
    for key, value in batch.items():
        if value.dim() == 1:  # per-example labels: next_sentence_label, sentence_order_label, ...
            lines.append(f"{key}: {int(value[0])}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argument_parser(
        (ModelArguments, DataArguments, TrainingArguments, ShowMaskArguments), "bertology show-mask"
    )
    model_args, data_args, training_args, show = parse_arguments(parser, argv)
    check_sizes(model_args, data_args, training_args)
    check_counts({"--example": show.example, "--epoch": show.epoch}, minimum=0)
    if data_args.streaming:
        raise BertologyError("show-mask needs a map-style dataset: a streamed example has no index")
    recipe = build_recipe(model_args)
    source = model_args.tokenizer_name or model_args.model_name_or_path
    if source is None:
        raise BertologyError("pass the run's tokenizer (--tokenizer_name OUTPUT_DIR): one trained anew may differ")
    tokenizer = load_tokenizer(source)
    recipe = settle_recipe(recipe, tokenizer, data_args, model_args)  # the run's length and caps too
    collator = recipe.build_collator(tokenizer)
    corpus, eval_corpus = load_corpora(data_args, training_args)
    train_dataset, _ = build_datasets(corpus, eval_corpus, tokenizer, recipe, data_args, training_args)
    seed = training_args.data_seed if training_args.data_seed is not None else training_args.seed
    batch = masked_example(collator, train_dataset, show.example, show.epoch, seed)
    print(f"example {show.example}, epoch {show.epoch}, seed {seed} ({recipe.name}):")
    print(describe(batch, tokenizer))
    return 0


if __name__ == "__main__":
    sys.exit(run_command(main))
