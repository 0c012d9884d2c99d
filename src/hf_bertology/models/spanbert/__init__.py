from .configuration_spanbert import BertologySpanBertConfig
from .modeling_spanbert import BertologySpanBertForPreTraining, BertologySpanBertForPreTrainingOutput

__all__ = ["BertologySpanBertConfig", "BertologySpanBertForPreTraining", "BertologySpanBertForPreTrainingOutput"]
