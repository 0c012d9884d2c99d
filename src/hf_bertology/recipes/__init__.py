"""Named presets: the papers' model sizes, objective hyperparameters and training settings, as data.

    recipe = get_recipe("roberta-base", hidden_dropout_prob=0.0)
    recipe.config              # BertologyRobertaConfig with the paper's sizes and objective
    recipe.training_defaults   # TrainingArguments values from the paper (lr, warmup, betas, ...)
    model, collator = recipe.build_model(), recipe.build_collator(recipe.train_tokenizer(texts))

A variant (BERT, RoBERTa, ...) is one `Variant` row: its config, model and collator classes, its tokenizer family
and, for two networks trained together, their `Network`s. A preset is one `PRESETS` entry: sizes, objective settings,
training defaults. Adding either needs no branch anywhere else. The modules, bottom up: base.py (`Variant`, sizes),
one a paper family (its row, its presets, the sources of their numbers), backbones.py (`BACKBONES`), recipe.py
(`VARIANTS`, `PRESETS`, `Recipe`), composed.py (an objective on another encoder), networks.py (`is_joint`: does a
model hold two networks), registry.py (`get_recipe`); docs/ARCHITECTURE.md, "Layout".
"""

from .backbones import BACKBONE_ALIASES, BACKBONES, SIZE_FIELDS, Backbone
from .base import CONFIG_ERRORS, SIZES, SMALL_DATA, Network, Variant, check_override_keys, parse_overrides
from .bert import bert_max_predictions
from .composed import compose
from .deberta_v3 import deberta_max_predictions
from .electra import electra_max_predictions
from .modernbert import modernbert_rope
from .networks import Kind, is_joint, kind_of, network, networks_of
from .recipe import PRESETS, VARIANTS, Recipe
from .registry import get_recipe, list_recipes
from .xlnet import xlnet_num_predict

__all__ = [
    "BACKBONES",
    "BACKBONE_ALIASES",
    "CONFIG_ERRORS",
    "PRESETS",
    "SIZES",
    "SIZE_FIELDS",
    "SMALL_DATA",
    "VARIANTS",
    "Backbone",
    "Kind",
    "Network",
    "Recipe",
    "Variant",
    "bert_max_predictions",
    "check_override_keys",
    "compose",
    "deberta_max_predictions",
    "electra_max_predictions",
    "get_recipe",
    "is_joint",
    "kind_of",
    "list_recipes",
    "modernbert_rope",
    "network",
    "networks_of",
    "parse_overrides",
    "xlnet_num_predict",
]
