"""hf_bertology: pretrain the BERTology family with the transformers Trainer; checkpoints plain transformers reads.

import hf_bertology as hb
recipe = hb.get_recipe("roberta-mini")
tokenizer = recipe.train_tokenizer(texts)
model = recipe.build_model()
collator = recipe.build_collator(tokenizer)
"""

from .collators import (
    DataCollatorForMaskedLM,
    DataCollatorForPermutationLM,
    DataCollatorForSpanMasking,
    DataCollatorForWindowMasking,
)
from .export import export_composed, export_deberta_v3, export_electra, export_part
from .models.albert import BertologyAlbertConfig, BertologyAlbertForPreTraining
from .models.bert import BertologyBertConfig, BertologyBertForPreTraining
from .models.deberta_v3 import BertologyDebertaV3Config, BertologyDebertaV3ForPreTraining
from .models.electra import BertologyElectraConfig, BertologyElectraForPreTraining
from .models.modernbert import BertologyModernBertConfig, BertologyModernBertForPreTraining
from .models.roberta import BertologyRobertaConfig, BertologyRobertaForPreTraining
from .models.spanbert import BertologySpanBertConfig, BertologySpanBertForPreTraining
from .models.xlnet import BertologyXLNetConfig, BertologyXLNetForPreTraining
from .recipes import BACKBONES, PRESETS, VARIANTS, Recipe, get_recipe, list_recipes
from .utils import BertologyError

__version__ = "0.1.0"

__all__ = [
    "BACKBONES",
    "PRESETS",
    "VARIANTS",
    "BertologyAlbertConfig",
    "BertologyAlbertForPreTraining",
    "BertologyBertConfig",
    "BertologyBertForPreTraining",
    "BertologyDebertaV3Config",
    "BertologyDebertaV3ForPreTraining",
    "BertologyElectraConfig",
    "BertologyElectraForPreTraining",
    "BertologyError",
    "BertologyModernBertConfig",
    "BertologyModernBertForPreTraining",
    "BertologyRobertaConfig",
    "BertologyRobertaForPreTraining",
    "BertologySpanBertConfig",
    "BertologySpanBertForPreTraining",
    "DataCollatorForMaskedLM",
    "DataCollatorForSpanMasking",
    "DataCollatorForWindowMasking",
    "BertologyXLNetConfig",
    "BertologyXLNetForPreTraining",
    "DataCollatorForPermutationLM",
    "Recipe",
    "export_composed",
    "export_deberta_v3",
    "export_electra",
    "export_part",
    "get_recipe",
    "list_recipes",
]
