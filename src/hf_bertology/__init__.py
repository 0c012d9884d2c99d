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
from .joint import export_part
from .models.configuration_albert import BertologyAlbertConfig
from .models.configuration_bert import BertologyBertConfig
from .models.configuration_deberta_v3 import BertologyDebertaV3Config
from .models.configuration_electra import BertologyElectraConfig
from .models.configuration_modernbert import BertologyModernBertConfig
from .models.configuration_roberta import BertologyRobertaConfig
from .models.configuration_spanbert import BertologySpanBertConfig
from .models.configuration_xlnet import BertologyXLNetConfig
from .models.modeling_albert import BertologyAlbertForPreTraining
from .models.modeling_bert import BertologyBertForPreTraining
from .models.modeling_deberta_v3 import BertologyDebertaV3ForPreTraining
from .models.modeling_electra import BertologyElectraForPreTraining
from .models.modeling_modernbert import BertologyModernBertForPreTraining
from .models.modeling_roberta import BertologyRobertaForPreTraining
from .models.modeling_spanbert import BertologySpanBertForPreTraining
from .models.modeling_xlnet import BertologyXLNetForPreTraining
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
    "export_part",
    "get_recipe",
    "list_recipes",
]
