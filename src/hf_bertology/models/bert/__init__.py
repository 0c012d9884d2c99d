from .configuration_bert import BertologyBertConfig
from .modeling_bert import BertologyBertForPreTraining, BertologyBertForPreTrainingOutput

__all__ = ["BertologyBertConfig", "BertologyBertForPreTraining", "BertologyBertForPreTrainingOutput"]
