from .base import pad_features
from .masking import DataCollatorForMaskedLM
from .permutation import DataCollatorForPermutationLM
from .spans import DataCollatorForSpanMasking

__all__ = ["DataCollatorForMaskedLM", "DataCollatorForPermutationLM", "DataCollatorForSpanMasking", "pad_features"]
