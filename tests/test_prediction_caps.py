"""Prediction caps follow the run's sequence length, unless set explicitly.

BERT's README sets `max_predictions_per_seq` "to around max_seq_length * masked_lm_prob" (20 at 128, 80 at 512);
ELECTRA's `configure_pretraining.py` derives `int((mask_prob + 0.005) * max_seq_length)`; XLNet's README pairs
`num_predict=85` with `seq_len=512`. A cap fixed at the preset's length masks ~4% at 512 instead of 15%.
"""

from __future__ import annotations

import json

import pytest

import hf_bertology as hb
from hf_bertology.training.pretrain import main

FAST = ["--max_steps", "1", "--per_device_train_batch_size", "2", "--disable_tqdm", "true", "--report_to", "none"]


@pytest.mark.parametrize(
    "name, length, cap",
    [
        ("bert-base", 128, 20),
        ("bert-base", 512, 80),
        ("bert-tiny", 64, 10),
        ("electra-small", 128, 19),
        ("electra-small", 512, 79),
        ("electra-base", 128, 19),
        ("electra-large", 512, 130),
        ("electra-tiny", 64, 9),
        ("xlnet-base", 512, 85),
        ("xlnet-large", 1024, 171),
    ],
)
def test_caps_follow_the_length_by_the_official_rules(name, length, cap):
    recipe = hb.get_recipe(name)
    config = recipe.fit_to_length(length)
    field = "num_predict" if recipe.variant_name == "xlnet" else "max_predictions_per_seq"
    assert getattr(config, field) == cap and recipe.max_seq_length == length


def test_caps_follow_the_masking_rate_too():
    assert hb.get_recipe("electra-small", mlm_probability=0.25).fit_to_length(128).max_predictions_per_seq == 32
    assert hb.get_recipe("bert-base", mlm_probability=0.2).fit_to_length(128).max_predictions_per_seq == 30


def test_explicit_caps_are_kept():
    recipe = hb.get_recipe("electra-small", max_predictions_per_seq=7)  # as `--config_overrides` passes it
    assert recipe.fit_to_length(512).max_predictions_per_seq == 7
    assert recipe.config.predictions_follow_length is False  # saved, so a continued run keeps it too
    recipe = hb.get_recipe("bert-base")
    recipe.config.max_predictions_per_seq = 33  # a checkpoint's config with the cap overridden
    assert recipe.fit_to_length(512, explicit={"max_predictions_per_seq"}).max_predictions_per_seq == 33
    assert hb.get_recipe("bert-base", max_predictions_per_seq=None).fit_to_length(512).max_predictions_per_seq is None
    assert hb.get_recipe("xlnet-tiny").fit_to_length(512).num_predict is None  # no cap stays no cap
    assert hb.get_recipe("roberta-base", max_predictions_per_seq=20).fit_to_length(128).max_predictions_per_seq == 20


def test_xlnet_memory_and_permutation_follow_the_length():
    """reuse = perm = half the length and mem = three quarters: the README's 256/256/384 at 512, in proportion at
    other lengths; explicit values and "off" (0, None) are kept."""
    for length, expected in [(512, (256, 256, 384)), (128, (64, 64, 96)), (64, (32, 32, 48))]:
        config = hb.get_recipe("xlnet-base").fit_to_length(length)
        assert (config.reuse_len, config.perm_size, config.mem_len) == expected, length
    config = hb.get_recipe("xlnet-base", reuse_len=100, mem_len=0, perm_size=None).fit_to_length(128)
    assert (config.reuse_len, config.perm_size, config.mem_len) == (100, None, 0)
    assert hb.get_recipe("xlnet-base").fit_to_length(128, explicit={"mem_len"}).mem_len == 384


def test_xlnet_pretrains_at_a_length_other_than_its_presets(tmp_path, corpus_file):
    """`--max_seq_length 32` on xlnet-tiny (preset 64, reuse 32): before the memory followed the length there was no
    room left for the segments."""
    from hf_bertology.training.pretrain import main

    out = tmp_path / "xlnet"
    main(["--recipe", "xlnet-tiny", "--train_file", str(corpus_file), "--output_dir", str(out), "--max_steps", "2",
          "--max_seq_length", "32"])  # fmt: skip
    config = json.loads((out / "config.json").read_text())
    assert (config["reuse_len"], config["perm_size"], config["mem_len"], config["num_predict"]) == (16, 16, 24, None)


_TOKENIZERS: dict = {}


def family_tokenizer(variant: str, texts: list[str]):
    if variant not in _TOKENIZERS:
        _TOKENIZERS[variant] = hb.get_recipe(f"{variant}-tiny").train_tokenizer(texts * 3, vocab_size=300)
    return _TOKENIZERS[variant]


@pytest.mark.parametrize("name", hb.list_recipes())
def test_masked_share_at_512_is_the_recipe_rate(name, texts):
    """Built as `pretrain` builds it (`fit_to_length`, `adapt_to_tokenizer`, `build_collator`); 8 full rows."""
    recipe = hb.get_recipe(name)
    recipe.fit_to_length(512)
    tokenizer = family_tokenizer(recipe.variant_name, texts)
    recipe.adapt_to_tokenizer(tokenizer)
    collator = recipe.build_collator(tokenizer, seed=0)
    words = " ".join(texts).split()
    rows = [" ".join(words[k::8] * 3) for k in range(8)]  # each row longer than 512 tokens, cut to exactly 512
    features = [{"input_ids": ids} for ids in tokenizer(rows, truncation=True, max_length=512)["input_ids"]]
    batch = collator(features)
    assert batch["attention_mask"].sum() == 8 * 512
    share = (batch["labels"] != -100).sum().item() / (8 * 512)
    config = recipe.config
    rate = config.mask_beta / config.mask_alpha if recipe.variant_name == "xlnet" else config.mlm_probability
    assert share == pytest.approx(rate, abs=0.01)  # before: 20/512 = 0.039 (BERT), 19/512 = 0.037 (ELECTRA-Small)


def test_compare_at_512_and_continued_runs_keep_the_cap(tmp_path, corpus_file):
    from hf_bertology.evaluation import compare

    out = tmp_path / "compare"
    argv = ["--recipes", "bert-tiny", "--train_file", str(corpus_file), "--budget_flops", "1e6", "--glue_tasks", ""]
    argv += ["--baseline", "none", "--output_dir", str(out), "--vocab_size", "300", "--max_seq_length", "512"]
    compare.main(argv + ["--pretrain_args", "--per_device_train_batch_size 2"])
    saved = out / "pretrain" / "bert-tiny"
    config = json.loads((saved / "config.json").read_text())
    assert config["max_predictions_per_seq"] == 80 and config["predictions_follow_length"] is True

    # Continue pretraining from the checkpoint saved at 512: its length (the default for a checkpoint) and its cap.
    data = ["--train_file", str(corpus_file), *FAST]
    main(["--model_name_or_path", str(saved), "--output_dir", str(tmp_path / "continued"), *data])
    assert json.loads((tmp_path / "continued" / "config.json").read_text())["max_predictions_per_seq"] == 80

    # An explicit cap is kept at 512, and by a continued run at another length.
    explicit = tmp_path / "explicit"
    main(["--recipe", "bert-tiny", "--output_dir", str(explicit), "--vocab_size", "300", "--max_seq_length", "512"]
         + ["--config_overrides", "max_predictions_per_seq=50", *data])  # fmt: skip
    assert json.loads((explicit / "config.json").read_text())["max_predictions_per_seq"] == 50
    again = tmp_path / "explicit-128"
    main(["--model_name_or_path", str(explicit), "--output_dir", str(again), "--max_seq_length", "128", *data])
    config = json.loads((again / "config.json").read_text())
    assert config["max_predictions_per_seq"] == 50 and config["predictions_follow_length"] is False


def test_continued_run_keeps_the_length_it_was_trained_at(tmp_path, corpus_file):
    """README "Continue pretraining": `--model_name_or_path runs/bert-mini` with no `--recipe` trains at the saved
    run's length (`max_seq_length` in config.json), not at the position table's 512: the cap and the examples'
    length stay those of the first run."""
    data = ["--train_file", str(corpus_file), *FAST]
    first = tmp_path / "first"
    main(["--recipe", "bert-tiny", "--output_dir", str(first), "--vocab_size", "300", *data])
    config = json.loads((first / "config.json").read_text())
    assert config["max_seq_length"] == hb.get_recipe("bert-tiny").max_seq_length == 64
    assert config["max_position_embeddings"] == 512 and config["max_predictions_per_seq"] == 10
    continued = tmp_path / "continued"
    main(["--model_name_or_path", str(first), "--output_dir", str(continued), *data])
    config = json.loads((continued / "config.json").read_text())
    assert config["max_seq_length"] == 64 and config["max_predictions_per_seq"] == 10
