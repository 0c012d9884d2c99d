"""The one loss hook of every vocabulary prediction: `model.token_loss`, a `TokenLoss`.

Every objective that predicts tokens (masked LM, an RTD generator, Replace MLM, XLNet's PLM, SBO) calls
`model.token_loss(logits (M, V), targets (M,))`, the summed loss (-100 ignored); BERT's head, which fuses its output
layer with the loss, calls `model.token_loss.linear(hidden, decoder, targets)`, which chooses the unfused head,
Liger-Kernel's fused kernel or the chunked one (`fused_cross_entropy`) behind the hook. Its knobs are attributes
(`label_smoothing`, which `BertologyTrainer` sets from `--label_smoothing_factor`); a new loss or knob is a subclass,
assigned as `model.token_loss = MyLoss()`, and reaches every path. Not transformers' `loss_function` (a mean over
the batch's labels, with another signature).
"""

from collections.abc import Callable

import torch

from .fused_cross_entropy import sparse_mlm_loss
from .lm_loss import language_model_loss


class TokenLoss:
    """`token_loss(logits, targets)`: `language_model_loss` at `label_smoothing` (BERT §3.1; transformers'
    `LabelSmoother` value). A subclass overrides `__call__` (and may add knobs); `linear` follows it."""

    def __init__(self, label_smoothing: float = 0.0):
        self.label_smoothing = label_smoothing

    def __call__(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return language_model_loss(logits, targets, self.label_smoothing)

    def chunk_loss(self) -> Callable:
        """The function the fused paths compute chunk by chunk: `language_model_loss` itself where `__call__` is
        this class's (then Liger's kernel, which computes exactly it, may run), else this hook's own `__call__`."""
        if type(self).__call__ is TokenLoss.__call__:
            return language_model_loss
        return lambda logits, targets, label_smoothing: self(logits, targets)

    def linear(self, hidden, decoder: torch.nn.Linear, targets, return_logits: bool | None = None,
               with_argmax: bool = True) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor | None]:  # fmt: skip
        """`(logits or None, summed loss, argmax or None)` of `self(decoder(hidden), targets)`, the output layer
        fused with the loss where that saves memory (`fused_cross_entropy.sparse_mlm_loss`)."""
        return sparse_mlm_loss(hidden, decoder, targets, return_logits, with_argmax, self.chunk_loss(),
                               self.label_smoothing)  # fmt: skip


class TokenLossHook:
    """Mixed in before a family's `PreTrainedModel`: the model's `token_loss` (a `TokenLoss` of its own unless one
    is assigned), and its masked-LM head's `(logits, summed loss, argmax)` through it (`mlm_head`)."""

    @property
    def token_loss(self) -> TokenLoss:
        return self.__dict__.setdefault("_token_loss", TokenLoss())

    @token_loss.setter
    def token_loss(self, value: TokenLoss) -> None:
        self.__dict__["_token_loss"] = value

    def predict(self, states: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def mlm_head(self, states, targets, return_logits: bool | None = None, with_argmax: bool = True):
        """`(logits, summed loss, predicted ids or None)` of the LM head (`predict`) at the `(M, H)` states of the
        targets; BERT's fuses the output layer with the loss (`token_loss.linear`)."""
        logits = self.predict(states)  # (M, V)
        return logits, self.token_loss(logits, targets), logits.argmax(-1) if with_argmax else None
