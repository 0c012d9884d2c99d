"""hf_bertology: pretrain the BERTology family with the transformers Trainer; checkpoints plain transformers reads.

import hf_bertology as hb
recipe = hb.get_recipe("roberta-mini")
tokenizer = recipe.train_tokenizer(texts)
model = recipe.build_model()
collator = recipe.build_collator(tokenizer)
"""

from .collators import DataCollatorForMaskedLM
from .export import export_electra
from .models.bert import BertologyBertConfig, BertologyBertForPreTraining
from .models.electra import BertologyElectraConfig, BertologyElectraForPreTraining
from .models.roberta import BertologyRobertaConfig, BertologyRobertaForPreTraining
from .recipes import PRESETS, VARIANTS, Recipe, get_recipe, list_recipes
from .utils import BertologyError

__version__ = "0.1.0"

__all__ = [
    "PRESETS",
    "VARIANTS",
    "BertologyBertConfig",
    "BertologyBertForPreTraining",
    "BertologyElectraConfig",
    "BertologyElectraForPreTraining",
    "BertologyError",
    "BertologyRobertaConfig",
    "BertologyRobertaForPreTraining",
    "DataCollatorForMaskedLM",
    "Recipe",
    "export_electra",
    "get_recipe",
    "list_recipes",
]
