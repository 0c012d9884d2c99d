from .configuration_albert import BertologyAlbertConfig
from .modeling_albert import BertologyAlbertForPreTraining, BertologyAlbertForPreTrainingOutput

__all__ = ["BertologyAlbertConfig", "BertologyAlbertForPreTraining", "BertologyAlbertForPreTrainingOutput"]
