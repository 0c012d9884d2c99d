"""The language-model loss, written once: the summed cross-entropy of `(M, V)` logits against their tokens.

Every prediction of a vocabulary token goes through it, by the model's hook `token_loss` (`token_loss.TokenLoss`):
each masked-LM head (BERT's fused head chunk by chunk, `fused_cross_entropy`; Liger-Kernel's kernel computes this
same function), each RTD generator, XLNet's PLM and SpanBERT's SBO. The sentence tasks and RTD's binary loss are not
language-model losses and are never smoothed, as transformers' `LabelSmoother` smooths only the language-model logits.
"""

import torch
import torch.nn.functional as F


def language_model_loss(logits: torch.Tensor, targets: torch.Tensor, label_smoothing: float = 0.0) -> torch.Tensor:
    """Sum over the targets that are not -100 of `(1 - eps) * -log p(target) + eps * mean_v -log p(v)`, in fp32:
    torch's `cross_entropy` with `label_smoothing`, the value of transformers' `LabelSmoother`
    (`trainer_pt_utils.py`); eps = 0 is the plain cross-entropy (BERT §3.1, `run_pretraining.py`). fp32 at least
    (half-precision logits are raised; float64 stays)."""
    logits = logits if logits.dtype == torch.float64 else logits.float()
    return F.cross_entropy(logits, targets, reduction="sum", label_smoothing=label_smoothing)
