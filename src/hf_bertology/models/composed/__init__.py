from .configuration_composed import (
    COMPOSED_CONFIGS,
    BertologyComposedAlbertConfig,
    BertologyComposedBertConfig,
    BertologyComposedDebertaV2Config,
    BertologyComposedElectraConfig,
    BertologyComposedModernBertConfig,
    BertologyComposedRobertaConfig,
)
from .modeling_composed import COMPOSED_MODELS, BertologyComposedForPreTrainingOutput

__all__ = [
    "COMPOSED_CONFIGS",
    "COMPOSED_MODELS",
    "BertologyComposedAlbertConfig",
    "BertologyComposedBertConfig",
    "BertologyComposedDebertaV2Config",
    "BertologyComposedElectraConfig",
    "BertologyComposedForPreTrainingOutput",
    "BertologyComposedModernBertConfig",
    "BertologyComposedRobertaConfig",
]
