"""Every mask is a function of (seed, epoch, example id): the same whatever the batch size, the dataloader workers
or the processes, new in every epoch, and printable with `bertology show-mask` (README, "Reproducible masks")."""

from __future__ import annotations

import json
import random
import re
import subprocess

import pytest
import torch

import hf_bertology as hb
from hf_bertology import cli
from hf_bertology.collators.base import Draws
from hf_bertology.data import build_pretraining_dataset, load_corpus, tokenize_corpus
from hf_bertology.training.show_mask import describe, masked_example
from hf_bertology.training.trainer import ExampleIds
from mask_worker import Recording, one_row, train
from platform_support import PYTHON, REPO, subprocess_env, write_corpus

ROWS = 24


@pytest.fixture(scope="module")
def tokenizers(texts):
    from hf_bertology.data import train_tokenizer

    return {kind: train_tokenizer(texts * 3, kind, vocab_size=300) for kind in ("wordpiece", "unigram")}


def collators(tokenizers) -> dict:
    wordpiece, unigram = tokenizers["wordpiece"], tokenizers["unigram"]
    return {
        "token": hb.DataCollatorForMaskedLM(wordpiece, seed=1),
        "whole_word": hb.DataCollatorForMaskedLM(wordpiece, whole_word_mask=True, seed=1),
        "spanbert": hb.DataCollatorForSpanMasking(wordpiece, sbo_max_targets=10, seed=1),
        "albert_unigram": hb.DataCollatorForSpanMasking(
            wordpiece,
            scheme="albert",
            span_distribution="ngram",
            span_upper=3,
            replacement_level="token",
            random_token_distribution="unigram",
            seed=1,
        ),  # fmt: skip
        "xlnet": hb.DataCollatorForPermutationLM(unigram, num_predict=None, perm_size=8, seed=1),
    }


def make_features(tokenizer, texts) -> list[dict]:
    """ROWS ragged examples with word starts and ids 100, 101, ... (not their positions)."""
    rng = random.Random(0)
    features = []
    for i in range(ROWS):
        encoded = tokenizer(texts[i], truncation=True, max_length=rng.randint(12, 48))
        starts = [int(w is None or w != p) for w, p in zip(encoded.word_ids(), [None, *encoded.word_ids()[:-1]])]
        features.append({"input_ids": encoded["input_ids"], "word_starts": starts, "example_id": 100 + i})
    return features


def rows_of(batch: dict, size: int) -> list[dict]:
    """Every per-example output on the example's real tokens (padding, and XLNet's empty target rows, removed)."""
    out = []
    for row in range(size):
        real = batch["attention_mask"][row].bool()
        targets = batch["labels"][row].ne(-100)  # XLNet: the used target rows
        entry = {}
        for key, value in batch.items():
            value = value[row]
            if key == "perm_mask":
                value = value[real][:, real]
            elif key == "target_mapping":
                value = value[targets][:, real]
            elif key == "labels" and "target_mapping" in batch:
                value = value[targets]
            elif value.dim() >= 1 and value.shape[0] == real.shape[0]:
                value = value[real]
            entry[key] = value.tolist()
        out.append(entry)
    return out


def collate_in_batches(collator, features, sizes, order) -> dict[int, dict]:
    by_id, start = {}, 0
    shuffled = [features[i] for i in order]
    for size in sizes:
        chunk = shuffled[start : start + size]
        start += size
        batch = collator(chunk)
        assert "example_id" not in batch  # never passed to the model
        for feature, entry in zip(chunk, rows_of(batch, len(chunk))):
            by_id[feature["example_id"]] = entry
    return by_id


@pytest.mark.parametrize("kind", ["token", "whole_word", "spanbert", "albert_unigram", "xlnet"])
def test_masks_do_not_depend_on_the_batch(tokenizers, texts, kind):
    collator = collators(tokenizers)[kind]
    features = make_features(collator.tokenizer, texts)
    whole = collate_in_batches(collator, features, [ROWS], range(ROWS))
    order = random.Random(1).sample(range(ROWS), ROWS)
    pieces = collate_in_batches(collator, features, [1, 3, 7, 2, 11], order)
    assert pieces == whole
    # a new epoch, a new mask; the same epoch, the same mask; the seed matters
    collator.set_epoch(1)
    epoch_1 = collate_in_batches(collator, features, [ROWS], range(ROWS))
    key = "perm_mask" if kind == "xlnet" else "labels"
    assert sum(epoch_1[i][key] != whole[i][key] for i in whole) >= ROWS // 2
    assert collate_in_batches(collator, features, [5, 19], order) == epoch_1
    collator.set_epoch(0)
    collator._random.seed = 2
    assert collate_in_batches(collator, features, [ROWS], range(ROWS)) != whole


def test_draws_are_uniform_and_keyed():
    draws = Draws.for_examples(seed=0, epoch=0, example_ids=range(2000))
    uniform = draws.uniform(1, 64)  # (2000, 64)
    assert uniform.shape == (2000, 64) and uniform.dtype == torch.float64
    assert abs(uniform.mean().item() - 0.5) < 0.005 and abs(uniform.var().item() - 1 / 12) < 0.002
    assert torch.histc(uniform.float(), 10, 0, 1).div(uniform.numel()).sub(0.1).abs().max() < 0.005
    assert abs(torch.corrcoef(torch.stack([uniform[:, 0], uniform[:, 1]]))[0, 1]) < 0.05  # positions
    assert abs(torch.corrcoef(torch.stack([uniform[:, 0], draws.uniform(2, 1)[:, 0]]))[0, 1]) < 0.05  # streams
    again = Draws.for_examples(seed=0, epoch=0, example_ids=[1999, 5])
    assert torch.equal(again.uniform(1, 64), uniform[[1999, 5]])
    assert not torch.equal(Draws.for_examples(0, 1, [5]).uniform(1, 64), uniform[[5]])


def test_draws_at_positions_are_the_batch_draws_there():
    """`uniform_at` (the collators' 80/10/10 draws at the masked positions only) = `uniform` indexed there."""
    draws = Draws.for_examples(seed=3, epoch=1, example_ids=[7, 8, 9])
    rows, columns = torch.tensor([0, 2, 2, 1]), torch.tensor([5, 0, 63, 17])
    assert torch.equal(draws.uniform_at(2, rows, columns), draws.uniform(2, 64)[rows, columns])
    assert not torch.equal(draws.uniform_at(3, rows, columns), draws.uniform(2, 64)[rows, columns])


class WithIds:
    """A collate function that also returns the ids (picklable, for DataLoader workers)."""

    def __init__(self, collator):
        self.collator = collator

    def __call__(self, features):
        return [f["example_id"] for f in features], self.collator(features)


@pytest.mark.parametrize("kind", ["whole_word", "xlnet"])
def test_masks_do_not_depend_on_dataloader_workers(tokenizers, texts, kind):
    collator = collators(tokenizers)[kind]
    collator.set_epoch(3)
    features = [{k: v for k, v in f.items() if k != "example_id"} for f in make_features(collator.tokenizer, texts)]
    results = []
    for workers, batch_size in ((0, ROWS), (2, 5)):
        loader = torch.utils.data.DataLoader(
            ExampleIds(features), batch_size=batch_size, num_workers=workers, collate_fn=WithIds(collator)
        )
        by_id = {}
        for ids, batch in loader:
            by_id.update(zip(ids, rows_of(batch, len(ids))))
        results.append(by_id)
    assert results[0] == results[1] and len(results[0]) == ROWS


@pytest.fixture(scope="module")
def run_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("masks")
    corpus = write_corpus(root / "corpus.txt", n_docs=12)
    tokenizer_dir = root / "tokenizer"
    hb.get_recipe("bert-tiny").train_tokenizer([corpus.read_text()], vocab_size=200).save_pretrained(tokenizer_dir)
    return root, corpus, tokenizer_dir


def expected_rows(recipe_name: str, corpus, tokenizer_dir, count: int, seed: int, epochs: int) -> dict:
    """What `masked_example` says every example is in every epoch."""
    from transformers import AutoTokenizer

    recipe = hb.get_recipe(recipe_name)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    recipe.adapt_to_tokenizer(tokenizer)
    collator = recipe.build_collator(tokenizer)
    dataset = build_pretraining_dataset(
        tokenize_corpus(load_corpus(str(corpus)), tokenizer), tokenizer, recipe.config, 32, seed=0
    )
    return {
        (i, epoch): one_row(masked_example(collator, dataset, i, epoch, seed), 0)
        for i in range(count)
        for epoch in range(epochs)
    }


def check_records(records: list[dict], expected: dict, count: int) -> None:
    seen = {(r["id"], r["epoch"]) for r in records}
    assert seen == set(expected), sorted(seen)  # every example, once per epoch
    for record in records:
        assert {k: record[k] for k in ("input_ids", "labels")} == expected[(record["id"], record["epoch"])], record


def test_trainer_masks_are_those_of_masked_example(run_files):
    """One process, batch 3: the Trainer passes ids, its seed and each epoch to the collator."""
    root, corpus, tokenizer_dir = run_files
    spec = {"recipe": "bert-tiny", "tokenizer": str(tokenizer_dir), "train_file": str(corpus), "examples": 8}
    records = train({**spec, "output_dir": str(root / "one"), "batch_size": 3})
    check_records(records, expected_rows("bert-tiny", corpus, tokenizer_dir, 8, seed=3, epochs=2), 8)


def test_two_processes_mask_as_one(run_files, tmp_path):
    root, corpus, tokenizer_dir = run_files
    spec = {
        "recipe": "bert-tiny", "tokenizer": str(tokenizer_dir), "train_file": str(corpus), "examples": 8,
        "output_dir": str(tmp_path / "two"), "batch_size": 2, "result": str(tmp_path / "result.json"),
    }  # fmt: skip
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    done = subprocess.run(
        [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         str(REPO / "tests" / "mask_worker.py"), str(tmp_path / "spec.json")],
        env=subprocess_env(MASTER_ADDR="127.0.0.1"), cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    # a worker's own error lines (a C++ `terminate called ...` before a SIGABRT) first: the tails alone cut them off
    errors = [line for line in done.stderr.splitlines() if re.search(r"terminate|what\(\)|Error|Exception", line)]
    assert done.returncode == 0, (errors[:40], done.stdout[-2000:], done.stderr[-4000:])
    ranks = json.loads((tmp_path / "result.json").read_text())
    assert len(ranks) == 2 and all(ranks)
    records = [record for rank in ranks for record in rank]
    check_records(records, expected_rows("bert-tiny", corpus, tokenizer_dir, 8, seed=3, epochs=2), 8)


def test_show_mask_prints_the_masked_example(run_files, capsys):
    root, corpus, tokenizer_dir = run_files
    argv = ["--recipe", "bert-tiny", "--train_file", str(corpus), "--tokenizer_name", str(tokenizer_dir),
            "--max_seq_length", "32", "--seed", "3", "--output_dir", str(root / "show")]  # fmt: skip
    assert cli.main(["show-mask", *argv, "--example", "5", "--epoch", "1"]) == 0
    printed = capsys.readouterr().out
    from transformers import AutoTokenizer

    recipe = hb.get_recipe("bert-tiny")
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    recipe.adapt_to_tokenizer(tokenizer)
    dataset = build_pretraining_dataset(
        tokenize_corpus(load_corpus(str(corpus)), tokenizer), tokenizer, recipe.config, 32, seed=3
    )
    batch = masked_example(recipe.build_collator(tokenizer), dataset, 5, epoch=1, seed=3)
    assert printed.splitlines()[0] == "example 5, epoch 1, seed 3 (bert-tiny):"
    assert describe(batch, tokenizer) in printed and "{" in printed and "next_sentence_label" in printed
    assert cli.main(["show-mask", *argv, "--example", "100000"]) == 2  # outside the data: one error line
    assert "outside" in capsys.readouterr().err


def test_collator_without_ids_draws_anew(tokenizers, texts):
    """Features without an example id (a streaming dataset, stand-alone use) keep the old behaviour."""
    collator = hb.DataCollatorForMaskedLM(tokenizers["wordpiece"], seed=0)
    features = [{"input_ids": f["input_ids"]} for f in make_features(collator.tokenizer, texts)]
    assert not torch.equal(collator(features)["labels"], collator(features)["labels"])
    assert Recording(collator).set_epoch(2) is None and collator._random.epoch == 2  # the wrapper forwards


def test_every_evaluation_masks_alike(tmp_path, corpus_file):
    """The README's command with held-out examples, an unchanged model (lr 0, no dropout at evaluation) and
    evaluations in three epochs: the same eval loss every time, as evaluation draws its masks from an epoch of its
    own (`EVAL_EPOCH`), not from the training epoch of the moment."""
    from transformers import TrainerCallback

    from hf_bertology.training import pretrain

    evaluations = []

    class Record(TrainerCallback):
        def on_evaluate(self, args, state, control, metrics=None, **kwargs):
            evaluations.append((state.epoch, metrics["eval_loss"]))

    flags = ["--recipe", "bert-tiny", "--train_file", str(corpus_file), "--output_dir", str(tmp_path / "run"),
             "--do_train", "--do_eval", "--eval_strategy", "steps", "--eval_steps", "2", "--num_train_epochs", "3",
             "--per_device_train_batch_size", "32", "--global_batch_size", "32", "--learning_rate", "0",
             "--weight_decay", "0"]  # fmt: skip
    pretrain.main(flags, callbacks=[Record()])
    epochs = {int(epoch - 1e-9) for epoch, _ in evaluations}
    assert len(evaluations) >= 4 and epochs == {0, 1, 2}, evaluations
    assert len({loss for _, loss in evaluations}) == 1, evaluations
