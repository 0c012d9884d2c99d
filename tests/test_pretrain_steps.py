"""`bertology pretrain` from Python: the step functions that `hf_bertology.training.pretrain` runs, imported from
their own modules and called one by one as docs/pretraining.md shows, give the run the command line gives (same
weights, bit for bit, and the same metrics), and the command line runs through the same steps."""

from __future__ import annotations

import copy
import json

import torch
from safetensors.torch import load_file
from transformers import set_seed

from hf_bertology.training import pretrain
from hf_bertology.training.arguments import parse_args, training_arguments
from hf_bertology.training.batches import configure_batches
from hf_bertology.training.corpora import build_datasets, load_corpora
from hf_bertology.training.outputs import write_outputs
from hf_bertology.training.run_recipe import build_model, build_recipe, build_tokenizer, settle_recipe
from hf_bertology.training.run_trainer import build_trainer, train_and_evaluate


def test_steps_from_python_equal_the_command_line(tmp_path, corpus_file, bert_tokenizer, monkeypatch):
    bert_tokenizer.save_pretrained(tmp_path / "tok")  # one tokenizer for both runs (training one is not bitwise)
    flags = ["--recipe", "bert-tiny", "--train_file", str(corpus_file), "--tokenizer_name", str(tmp_path / "tok"),
             "--max_steps", "3", "--per_device_train_batch_size", "4", "--seed", "0", "--save_strategy", "no",
             "--report_to", "none", "--use_cpu", "true", "--dataloader_num_workers", "0"]  # fmt: skip

    called = []
    for step in ("build_recipe", "settle_recipe", "build_datasets", "build_trainer", "write_outputs"):
        original = getattr(pretrain, step)
        monkeypatch.setattr(pretrain, step, lambda *a, _f=original, _n=step, **k: called.append(_n) or _f(*a, **k))
    cli_metrics = pretrain.main([*flags, "--output_dir", str(tmp_path / "cli")])
    assert called == ["build_recipe", "settle_recipe", "build_datasets", "build_trainer", "write_outputs"]
    monkeypatch.undo()

    # docs/pretraining.md's "step by step" block.
    model_args, data_args, training_args, explicit = parse_args([*flags, "--output_dir", str(tmp_path / "py")])
    recipe = build_recipe(model_args)
    training_args = training_arguments(training_args, recipe, explicit)
    set_seed(training_args.seed)
    corpus, eval_corpus = load_corpora(data_args, training_args)
    tokenizer = build_tokenizer(model_args, recipe, corpus, training_args, resume_from=None)
    recipe = settle_recipe(recipe, tokenizer, data_args, model_args)
    collator = recipe.build_collator(tokenizer)
    model = build_model(recipe, model_args)
    model, collator = configure_batches(recipe, model, collator, model_args, data_args)  # padding-free
    train_dataset, eval_dataset = build_datasets(corpus, eval_corpus, tokenizer, recipe, data_args, training_args)
    trainer, push_args = build_trainer(recipe, model, tokenizer, collator, train_dataset, eval_dataset, training_args)
    metrics = train_and_evaluate(trainer)
    write_outputs(trainer, recipe, data_args, metrics, push_args)

    assert metrics["tokens_seen"] == cli_metrics["tokens_seen"] > 0
    assert metrics["train_loss"] == cli_metrics["train_loss"]
    written = json.loads((tmp_path / "py" / "all_results.json").read_text())
    assert written["tokens_seen"] == metrics["tokens_seen"]
    cli_weights = load_file(tmp_path / "cli" / "model.safetensors")
    py_weights = load_file(tmp_path / "py" / "model.safetensors")
    assert cli_weights.keys() == py_weights.keys()
    assert all(torch.equal(cli_weights[key], py_weights[key]) for key in cli_weights)
    assert (tmp_path / "py" / "README.md").is_file()


def test_the_run_values_are_settled_once(tmp_path, corpus_file, bert_tokenizer):
    """`settle_recipe` returns a new recipe holding the run's vocabulary and length (in the recipe and its config, the
    prediction cap sized by it) and leaves the recipe it was given as it was; `build_datasets` reads that length."""
    tokenizer = copy.deepcopy(bert_tokenizer)  # the session's fixture keeps its own model_max_length
    model_args, data_args, training_args, _ = parse_args(
        ["--recipe", "bert-tiny", "--train_file", str(corpus_file), "--max_seq_length", "40", "--output_dir",
         str(tmp_path), "--use_cpu", "true"]
    )  # fmt: skip
    recipe = build_recipe(model_args)
    before = recipe.config.to_dict()
    settled = settle_recipe(recipe, tokenizer, data_args, model_args)

    assert recipe.config.to_dict() == before and recipe.max_seq_length == 64  # bert-tiny's own length, untouched
    assert settled.config is not recipe.config
    assert settled.max_seq_length == settled.config.max_seq_length == 40
    assert settled.config.max_predictions_per_seq == 10  # BERT's README rule: 0.15 * 40 = 6, up to a multiple of 5
    assert settled.config.vocab_size == len(tokenizer) == 300
    assert tokenizer.model_max_length == 512  # bert-tiny's position table
    corpus, eval_corpus = load_corpora(data_args, training_args)
    train_dataset, _ = build_datasets(corpus, eval_corpus, tokenizer, settled, data_args, training_args)
    assert max(len(ids) for ids in train_dataset["input_ids"]) == 40


def test_config_overrides_are_parsed_once_and_kept_by_the_recipe(tmp_path, corpus_file, bert_tokenizer, monkeypatch):
    """`--config_overrides` is read in one place, `build_recipe`, and the recipe keeps the keys it set
    (`Recipe.explicit`), a checkpoint's recipe as a preset's: `settle_recipe` then keeps those values instead of
    deriving them from the run's length."""
    from hf_bertology.training import run_recipe

    bert_tokenizer.save_pretrained(tmp_path / "tok")
    common = ["--train_file", str(corpus_file), "--tokenizer_name", str(tmp_path / "tok"), "--max_seq_length", "40",
              "--use_cpu", "true"]  # fmt: skip
    parsed = []
    original = run_recipe.parse_overrides
    monkeypatch.setattr(run_recipe, "parse_overrides", lambda text, *a: parsed.append(text) or original(text, *a))
    first = tmp_path / "first"
    pretrain.main(["--recipe", "bert-tiny", "--config_overrides", "hidden_dropout_prob=0.2", "--max_steps", "1",
                   "--save_strategy", "no", "--report_to", "none", "--dataloader_num_workers", "0", "--output_dir",
                   str(first), *common])  # fmt: skip
    assert parsed == ["hidden_dropout_prob=0.2"]
    saved = json.loads((first / "config.json").read_text())
    assert saved["hidden_dropout_prob"] == 0.2 and saved["predictions_follow_length"] is True

    # Continued from that checkpoint with a cap of its own: kept at a length whose rule would give 10.
    model_args, data_args, _, _ = parse_args(
        ["--model_name_or_path", str(first), "--config_overrides", "max_predictions_per_seq=9", "--output_dir",
         str(tmp_path / "second"), *common]
    )  # fmt: skip
    recipe = build_recipe(model_args)
    assert "max_predictions_per_seq" in recipe.explicit
    settled = settle_recipe(recipe, copy.deepcopy(bert_tokenizer), data_args, model_args)
    assert settled.config.max_predictions_per_seq == 9 and settled.config.predictions_follow_length is False
