from .configuration_deberta_v3 import BertologyDebertaV3Config, discriminator_config, generator_config
from .modeling_deberta_v3 import BertologyDebertaV3ForPreTraining, BertologyDebertaV3ForPreTrainingOutput

__all__ = [
    "BertologyDebertaV3Config",
    "BertologyDebertaV3ForPreTraining",
    "BertologyDebertaV3ForPreTrainingOutput",
    "discriminator_config",
    "generator_config",
]
