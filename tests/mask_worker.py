"""Multi-process half of tests/test_reproducible_masks.py: under `torchrun --nproc_per_node 2`, train a tiny recipe
for two epochs through BertologyTrainer and record what each process's collator made of each example.

    torchrun --nproc_per_node 2 tests/mask_worker.py SPEC.json

SPEC: {"recipe", "tokenizer", "train_file", "output_dir", "batch_size", "examples", "result"}. Rank 0 writes every
rank's records to SPEC["result"]. `train` is also called in-process by the test (one process, another batch size).
"""

from __future__ import annotations

import json
import os
import sys

import torch
from transformers import AutoTokenizer, TrainingArguments

import hf_bertology as hb
from hf_bertology.data import build_pretraining_dataset, load_corpus, tokenize_corpus
from hf_bertology.training.trainer import BertologyTrainer


class Recording:
    """Wraps a collator: records each row it makes (by example id and epoch); forwards everything else."""

    def __init__(self, collator):
        self.collator = collator
        self.rows: list[dict] = []

    def __call__(self, features):
        batch = self.collator(features)
        for row, feature in enumerate(features):
            self.rows.append(
                {"id": feature["example_id"], "epoch": self.collator._random.epoch, **one_row(batch, row)}
            )
        return batch

    def __getattr__(self, name):
        return getattr(self.__dict__["collator"], name)


def one_row(batch: dict, row: int) -> dict:
    """A row's labels and model inputs on its real tokens, as lists (independent of the batch's padding)."""
    real = batch["attention_mask"][row].bool()
    return {"input_ids": batch["input_ids"][row][real].tolist(), "labels": batch["labels"][row][real].tolist()}


def examples(spec: dict, tokenizer, recipe):
    dataset = build_pretraining_dataset(
        tokenize_corpus(load_corpus(spec["train_file"]), tokenizer), tokenizer, recipe.config, 32, seed=0
    )
    return dataset.select(range(spec["examples"]))


def train(spec: dict) -> list[dict]:
    recipe = hb.get_recipe(spec["recipe"])
    tokenizer = AutoTokenizer.from_pretrained(spec["tokenizer"])
    recipe.adapt_to_tokenizer(tokenizer)
    collator = Recording(recipe.build_collator(tokenizer))
    args = TrainingArguments(
        spec["output_dir"],
        use_cpu=True,
        report_to="none",
        ddp_backend="gloo" if "WORLD_SIZE" in os.environ else None,  # launched by torchrun, else one process
        seed=3,
        num_train_epochs=2,
        per_device_train_batch_size=spec["batch_size"],
        save_strategy="no",
        remove_unused_columns=False,
    )
    torch.manual_seed(0)
    trainer = BertologyTrainer(
        model=recipe.build_model(), args=args, train_dataset=examples(spec, tokenizer, recipe), data_collator=collator
    )
    trainer.train()
    return collator.rows


def main() -> None:
    import torch.distributed as dist

    spec = json.loads(open(sys.argv[1]).read())
    rows = train(spec)
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, rows)
    if dist.get_rank() == 0:
        with open(spec["result"], "w") as handle:
            json.dump(gathered, handle)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
