"""The language-model loss, written once: the summed cross-entropy of `(M, V)` logits against their tokens.

Every prediction of a vocabulary token goes through it: each masked-LM head (BERT's fused head chunk by chunk,
`fused_cross_entropy`), each RTD generator, XLNet's PLM and SpanBERT's SBO. A model reaches it through one hook,
`self.loss_function` (transformers' name for its own swappable loss, `modeling_utils.PreTrainedModel.loss_function`),
which a subclass overrides or a user assigns; `label_smoothing` (`--label_smoothing_factor`, set by
`BertologyTrainer`) is handed to it. The sentence tasks and RTD's binary loss are not language-model losses and are
never smoothed, as transformers' `LabelSmoother` smooths only the language-model logits.
"""

from collections.abc import Callable

import torch
import torch.nn.functional as F


def language_model_loss(logits: torch.Tensor, targets: torch.Tensor, label_smoothing: float = 0.0) -> torch.Tensor:
    """Sum over the targets that are not -100 of `(1 - eps) * -log p(target) + eps * mean_v -log p(v)`, in fp32:
    torch's `cross_entropy` with `label_smoothing`, the value of transformers' `LabelSmoother`
    (`trainer_pt_utils.py`); eps = 0 is the plain cross-entropy (BERT §3.1, `run_pretraining.py`). fp32 at least
    (half-precision logits are raised; float64 stays)."""
    logits = logits if logits.dtype == torch.float64 else logits.float()
    return F.cross_entropy(logits, targets, reduction="sum", label_smoothing=label_smoothing)


class LanguageModelLoss:
    """The hook of every model with a language-model loss, mixed in before its `PreTrainedModel`.

    `loss_function(logits (M, V), targets (M,), label_smoothing=eps) -> summed loss` is `language_model_loss` unless
    a subclass overrides it or a user assigns another (`model.loss_function = fn`). `lm_loss_sum` is the one call.
    """

    label_smoothing: float = 0.0  # `--label_smoothing_factor`: `BertologyTrainer` sets it on the model it trains

    @property
    def loss_function(self) -> Callable:
        return self.__dict__.get("_loss_function", language_model_loss)

    @loss_function.setter
    def loss_function(self, value: Callable) -> None:
        self.__dict__["_loss_function"] = value

    def lm_loss_sum(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The summed language-model loss of `(M, V)` logits against their `(M,)` tokens (-100: ignored)."""
        return self.loss_function(logits, targets, label_smoothing=self.label_smoothing)

    def predict(self, states: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def mlm_head(self, states, targets, return_logits: bool | None = None, with_argmax: bool = True):
        """`(logits, summed loss, predicted ids or None)` of the LM head (`predict`) at the `(M, H)` states of the
        targets; BERT's fuses the output layer with the loss (`fused_cross_entropy.sparse_mlm_loss`)."""
        logits = self.predict(states)  # (M, V)
        return logits, self.lm_loss_sum(logits, targets), logits.argmax(-1) if with_argmax else None
