from .configuration_roberta import BertologyRobertaConfig
from .modeling_roberta import BertologyRobertaForPreTraining, BertologyRobertaForPreTrainingOutput

__all__ = ["BertologyRobertaConfig", "BertologyRobertaForPreTraining", "BertologyRobertaForPreTrainingOutput"]
