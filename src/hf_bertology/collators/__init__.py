from .base import pad_features
from .masking import DataCollatorForMaskedLM
from .spans import DataCollatorForSpanMasking

__all__ = ["DataCollatorForMaskedLM", "DataCollatorForSpanMasking", "pad_features"]
