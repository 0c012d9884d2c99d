"""DeBERTa's choice of mask positions: one per window, windows taken left to right until the count is reached.

microsoft/DeBERTa `DeBERTa/apps/tasks/mlm_task.py:41-99` (`NGramMaskGenerator.mask_tokens`), with the RTD task's
settings (`rtd_task.py:145`: `max_gram=1`): the candidates (tokens other than [CLS], [SEP], [PAD], [UNK], [MASK])
are cut into windows of `int(1 / mask_lm_prob)` tokens (6 at 0.15, line 57; the last window may be shorter, line
80); one position is drawn uniformly in each window (line 81); windows are taken from the left until
`min(max_preds_per_seq, max(1, round(len(tokens) * mask_lm_prob)))` positions are chosen (lines 74, 95). So the
masks are spread evenly (never two in one window), and where a sequence has more windows than the count, its last
windows are never masked: at 512 tokens, 77 masks fill the first 77 × 6 = 462 candidates and the last 48 are never
predicted; at 128, the last 12 of 126.

Written as a subclass of our `DataCollatorForMaskedLM` (same padding, treatment, counter-based draws); only
`choose` differs, vectorised over the batch. `mask_positions="uniform"` gives the parent's uniform choice.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase

from .base import Draws
from .masking import CHOOSE, DataCollatorForMaskedLM

MASK_POSITIONS = ("window", "uniform")


@dataclass
class DataCollatorForWindowMasking(DataCollatorForMaskedLM):
    """`DataCollatorForMaskedLM` whose positions are chosen one per window of `int(1 / mlm_probability)` candidates,
    from the left, until the count (`mask_positions="window"`, DeBERTa's `NGramMaskGenerator`); whole-word masking
    and `mask_positions="uniform"` choose as the parent does.

    Expected statistics at length 64 (62 candidates, count 10): each of the first 60 candidates is chosen with
    probability 1/6, exactly one per window, the last 2 never.
    """

    mask_positions: str = "window"

    def __post_init__(self):
        super().__post_init__()
        if self.mask_positions not in MASK_POSITIONS:
            raise ValueError(f"mask_positions must be one of {MASK_POSITIONS}, got {self.mask_positions!r}")

    @classmethod
    def from_config(cls, config, tokenizer: PreTrainedTokenizerBase, **overrides) -> DataCollatorForWindowMasking:
        overrides.setdefault("mask_positions", getattr(config, "mask_positions", "window"))
        return super().from_config(config, tokenizer, **overrides)

    @property
    def window(self) -> int:
        return int(1 / self.mlm_probability)  # `mask_window`, mlm_task.py:57

    def choose(
        self,
        input_ids: torch.Tensor,
        attention: torch.Tensor,
        candidates: torch.Tensor,
        word_starts: torch.Tensor | None = None,
        draws: Draws | None = None,
    ) -> torch.Tensor:
        if self.mask_positions != "window" or self.whole_word_mask:
            return super().choose(input_ids, attention, candidates, word_starts, draws)
        draws = self._draws_or_fresh(draws, len(input_ids))
        budget = self.num_to_predict(attention.sum(1), candidates.sum(1))  # (B,)
        rank = candidates.long().cumsum(1) - 1  # (B, L): index among the row's candidates
        window = rank.clamp(min=0) // self.window  # (B, L): its window
        start = window * self.window
        size = (candidates.sum(1, keepdim=True) - start).clamp(max=self.window)  # (B, L): the last may be shorter
        draw = draws.uniform(CHOOSE, input_ids.shape[1]).gather(1, window)  # (B, L): column w is window w's draw
        offset = (draw * size).long().clamp(max=self.window - 1)  # uniform in [0, size)
        return candidates & (rank - start == offset) & (window < budget[:, None])
