from .configuration_electra import BertologyElectraConfig, discriminator_config, generator_config
from .modeling_electra import BertologyElectraForPreTraining, BertologyElectraForPreTrainingOutput

__all__ = [
    "BertologyElectraConfig",
    "BertologyElectraForPreTraining",
    "BertologyElectraForPreTrainingOutput",
    "discriminator_config",
    "generator_config",
]
