"""Recipes: the registry, the papers' numbers, and how defaults meet user flags."""

from __future__ import annotations

import pytest
import torch
from transformers import BertModel, RobertaModel, TrainingArguments

import hf_bertology as hb
from hf_bertology.recipes.backbones import BACKBONES
from hf_bertology.recipes.base import parse_overrides
from hf_bertology.training.arguments import apply_defaults, explicit_keys


def test_registry_lists_every_size_of_each_variant():
    names = hb.list_recipes()
    for variant in ("bert", "roberta"):
        for size in ("base", "large", "mini", "tiny"):
            assert f"{variant}-{size}" in names
    recipe = hb.get_recipe("roberta-mini", num_hidden_layers=2)
    assert recipe.variant_name == "roberta" and recipe.tokenizer_type == "bpe"
    assert recipe.config.num_hidden_layers == 2 and recipe.config.hidden_size == 256
    assert isinstance(recipe.config, hb.BertologyRobertaConfig)
    with pytest.raises(hb.BertologyError, match="unknown recipe"):
        hb.get_recipe("bert-gigantic")


FAMILY = {
    "bert": "bert",
    "roberta": "roberta",
    "spanbert": "bert",
    "albert": "albert",
    "electra": "electra",
    "xlnet": "xlnet",
    "deberta-v3": "deberta-v2",
    "modernbert": "modernbert",
    "electra-15": "electra",
    "replace-mlm": "electra",
}


@pytest.mark.parametrize("variant", sorted(hb.VARIANTS))
def test_every_variant_has_the_readme_mini_and_tiny_sizes(variant):
    """README "Recipes": `-mini` is 4 layers, hidden 256, 4 heads, FFN 1024, vocab 8000, length 128; `-tiny` is
    2 layers, hidden 32, vocab 1000, length 64. Every preset builds its variant's config with the family's model_type."""
    sizes = {"mini": (4, 256, 4, 1024, 8000, 128), "tiny": (2, 32, 4, 37, 1000, 64)}
    for size, expected in sizes.items():
        recipe = hb.get_recipe(f"{variant}-{size}")
        c = recipe.config
        layout = (
            c.num_hidden_layers,
            c.hidden_size,
            c.num_attention_heads,
            getattr(c, "intermediate_size", None) or c.d_inner,
        )  # XLNet: d_inner
        assert (*layout, recipe.vocab_size, recipe.max_seq_length) == expected
    names = [name for name, preset in hb.PRESETS.items() if preset["variant"] == variant]
    assert len(names) >= 4  # the paper sizes, mini and tiny
    for name in names:
        recipe = hb.get_recipe(name)
        assert type(recipe.config) is hb.VARIANTS[variant].config_class
        assert recipe.config.model_type == FAMILY[variant] and recipe.variant_name == variant


@pytest.mark.parametrize(
    "name,backbone,expected",
    # docs/recipes/bert.md and roberta.md ("Sizes"), computed from transformers' classes
    [
        ("bert-base", BertModel, 109_482_240),
        ("bert-large", BertModel, 335_141_888),
        ("roberta-base", RobertaModel, 124_645_632),
    ],
)
def test_paper_sizes_have_the_papers_parameter_counts(name, backbone, expected):
    config = hb.get_recipe(name).config
    if name.startswith("roberta"):
        config.pad_token_id = 1
    with torch.device("meta"):
        model = backbone(config)
    assert sum(p.numel() for p in model.parameters()) == expected


def test_training_defaults_follow_the_papers():
    bert = hb.get_recipe("bert-base").training_defaults
    assert (bert["learning_rate"], bert["adam_beta2"], bert["adam_epsilon"], bert["weight_decay"]) == (
        1e-4,
        0.999,
        1e-6,
        0.01,
    )
    assert bert["warmup_steps"] == 10_000 and bert["max_steps"] == 1_000_000
    roberta = hb.get_recipe("roberta-base").training_defaults
    assert (roberta["learning_rate"], roberta["adam_beta2"], roberta["warmup_steps"]) == (6e-4, 0.98, 24_000)
    assert roberta["max_grad_norm"] == 0.0
    assert hb.get_recipe("roberta-large").training_defaults["learning_rate"] == 4e-4
    assert hb.get_recipe("bert-base").config.max_predictions_per_seq == 20
    assert hb.get_recipe("roberta-base").config.input_format == "full_sentences"
    assert hb.get_recipe("bert-base").config.input_format == "nsp_pairs"


def test_user_flags_win_over_recipe_defaults(tmp_path):
    argv = ["--output_dir", str(tmp_path), "--learning_rate", "3e-3", "--weight_decay=0.5"]
    assert explicit_keys(argv) == {"output_dir", "learning_rate", "weight_decay"}
    args = TrainingArguments(output_dir=str(tmp_path), learning_rate=3e-3, weight_decay=0.5)
    merged = apply_defaults(
        args, {"learning_rate": 1e-4, "weight_decay": 0.01, "adam_beta2": 0.98}, explicit_keys(argv)
    )
    assert (merged.learning_rate, merged.weight_decay, merged.adam_beta2) == (3e-3, 0.5, 0.98)


def test_config_overrides_are_typed():
    assert parse_overrides("a=1,b=0.5,c=true,d=gelu,e=null") == {"a": 1, "b": 0.5, "c": True, "d": "gelu", "e": None}
    with pytest.raises(hb.BertologyError):
        parse_overrides("num_hidden_layers")


def _value(args: TrainingArguments, key: str, expected):
    got = getattr(args, key)
    if isinstance(expected, dict) and not isinstance(got, dict):  # accelerator_config: a dataclass
        return {name: getattr(got, name) for name in expected}
    return got.value if hasattr(got, "value") else got  # optim, lr_scheduler_type: str enums


@pytest.mark.parametrize("recipe_name", [*hb.list_recipes(), "modernbert-tiny@bert", "roberta-tiny@modernbert"])
def test_recipe_settings_win_over_cuda_defaults_and_flags_over_both(recipe_name, monkeypatch, tmp_path):
    """Issue 40, item 3: the step the command uses (`training_arguments`) merges our defaults, the CUDA device's
    (fused AdamW, workers, non-blocking copies), the recipe's and the user's flags. On CUDA, faked here, a recipe
    setting the device defaults also touch keeps the recipe's value (ModernBERT's StableAdamW is not replaced by
    fused AdamW), every other device default applies, and a flag wins over both. (tf32 and bf16 cannot be built
    into TrainingArguments on a CPU: they are checked in the merged defaults.)"""
    from hf_bertology.training import arguments

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    cuda = arguments.device_defaults(set())
    monkeypatch.undo()
    assert {"optim", "tf32", "bf16", "dataloader_num_workers", "accelerator_config"} <= set(cuda)
    buildable = {key: value for key, value in cuda.items() if key not in ("tf32", "bf16")}
    monkeypatch.setattr(arguments, "device_defaults", lambda explicit, streaming=False: dict(buildable))
    recipe = hb.get_recipe(recipe_name)
    args = arguments.training_arguments(TrainingArguments(output_dir=str(tmp_path)), recipe, set())
    for key, value in {**buildable, **recipe.training_defaults}.items():
        assert _value(args, key, value) == value, (key, getattr(args, key))
    if recipe.variant_name == "modernbert" and recipe.backbone is None:
        assert args.optim == "stable_adamw"
    flag = TrainingArguments(output_dir=str(tmp_path), optim="adamw_torch", dataloader_num_workers=0)
    args = arguments.training_arguments(flag, recipe, {"optim", "dataloader_num_workers"})
    assert args.optim == "adamw_torch" and args.dataloader_num_workers == 0


@pytest.mark.parametrize("name", sorted(BACKBONES))
def test_backbone_row_states_its_first_position(name):
    """`Backbone.first_position` (read by the recipes and the run's length checks) says what the family's embeddings
    do (`configuration_recipe.first_position`, read by the models): RoBERTa's positions start after the padding."""
    from hf_bertology.models.configuration_recipe import first_position

    recipe = hb.get_recipe("roberta-tiny", backbone=name)
    pad = recipe.config.pad_token_id
    assert first_position(recipe.build_model().base_model.embeddings) == BACKBONES[name].first_position(pad)
    assert BACKBONES[name].first_position(pad) == (pad + 1 if name == "roberta" else 0)


@pytest.mark.parametrize("name", ["bert-tiny", "roberta-tiny", "spanbert-tiny", "albert-tiny", "electra-tiny"])
@pytest.mark.parametrize(
    "field, needle",
    [
        ({"mlm_probability": 1.5}, "mlm_probability must be in"),
        ({"mask_replace_prob": 0.9, "random_replace_prob": 0.2}, "sum to at most 1"),
        ({"max_predictions_per_seq": 0}, "max_predictions_per_seq must be >= 1"),
    ],
)
def test_every_recipe_config_refuses_bad_masking_fields(name, field, needle):
    """The masking checks are written once (`configuration_recipe.check_masking`) and every recipe config runs them
    (`set_fields`), its own encoder's or another's (`ComposedObjectiveConfig`)."""
    from hf_bertology.utils import BertologyError

    for backbone in (None, "roberta"):
        with pytest.raises(BertologyError, match=needle):
            hb.get_recipe(name, backbone=backbone, **field)
