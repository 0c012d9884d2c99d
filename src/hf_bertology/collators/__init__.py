from .base import pad_features
from .masking import DataCollatorForMaskedLM
from .permutation import DataCollatorForPermutationLM

__all__ = ["DataCollatorForMaskedLM", "DataCollatorForPermutationLM", "pad_features"]
