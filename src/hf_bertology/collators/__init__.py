from .base import pad_features
from .masking import DataCollatorForMaskedLM
from .permutation import DataCollatorForPermutationLM
from .spans import DataCollatorForSpanMasking
from .windows import DataCollatorForWindowMasking

__all__ = [
    "DataCollatorForMaskedLM",
    "DataCollatorForPermutationLM",
    "DataCollatorForSpanMasking",
    "DataCollatorForWindowMasking",
    "pad_features",
]
