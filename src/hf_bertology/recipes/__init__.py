"""Named presets: the papers' model sizes, objective hyperparameters and training settings, as data.

    recipe = get_recipe("roberta-base", hidden_dropout_prob=0.0)
    recipe.config              # BertologyRobertaConfig with the paper's sizes and objective
    recipe.training_defaults   # TrainingArguments values from the paper (lr, warmup, betas, ...)
    tokenizer = recipe.train_tokenizer(texts)
    model = recipe.build_model()
    collator = recipe.build_collator(tokenizer)

A variant (BERT, RoBERTa, ...) is one `Variant` row: its config, model and collator classes and its tokenizer
family. A preset is one `PRESETS` entry: sizes + objective settings + training defaults. Adding either needs no
branch anywhere else. The package, bottom up:

- `base.py`: `Variant`, the shared sizes (`SIZES`, the small presets' settings) and `make_preset`; override checks.
- one module a paper family, holding its `VARIANT` row, its `PRESETS` and the sources of every number:
  `bert.py`, `roberta.py`, `spanbert.py`, `albert.py`, `xlnet.py`, `electra.py`, `deberta_v3.py`, `modernbert.py`
  (its numbers with their official files and lines: docs/recipes/modernbert.md).
- `backbones.py`: the encoders an objective can run on (`BACKBONES`).
- `recipe.py`: the tables `VARIANTS` and `PRESETS` (the families' rows and presets) and `Recipe`.
- `composed.py`: an objective on another encoder (`compose`).
- `registry.py`: `get_recipe` and `list_recipes`.
"""

from .backbones import BACKBONE_ALIASES, BACKBONES, SIZE_FIELDS, Backbone, backbone_of_model_class
from .base import CONFIG_ERRORS, SIZES, SMALL_DATA, Variant, check_override_keys, parse_overrides
from .bert import bert_max_predictions
from .composed import compose
from .deberta_v3 import deberta_max_predictions
from .electra import electra_max_predictions
from .modernbert import modernbert_rope
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
    "Recipe",
    "Variant",
    "backbone_of_model_class",
    "bert_max_predictions",
    "check_override_keys",
    "compose",
    "deberta_max_predictions",
    "electra_max_predictions",
    "get_recipe",
    "list_recipes",
    "modernbert_rope",
    "parse_overrides",
    "xlnet_num_predict",
]
