from .base import pad_features
from .masking import DataCollatorForMaskedLM

__all__ = ["DataCollatorForMaskedLM", "pad_features"]
