from .configuration_xlnet import BertologyXLNetConfig
from .modeling_xlnet import BertologyXLNetForPreTraining, BertologyXLNetForPreTrainingOutput

__all__ = ["BertologyXLNetConfig", "BertologyXLNetForPreTraining", "BertologyXLNetForPreTrainingOutput"]
