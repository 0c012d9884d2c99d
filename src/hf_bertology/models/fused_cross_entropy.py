"""Masked-LM loss without the `(M, V)` logits: the output layer and the language-model loss fused, in chunks.

At BERT-base sizes the unfused head keeps about 600 MB of logits and as much of their gradient; the chunked version
keeps one chunk (`CHUNK_BYTES`), computing each chunk's gradient at once through the model's own loss hook
(`token_loss.TokenLoss`, label smoothing and any knob of its own included: exact, not bypassed). On CUDA,
Liger-Kernel's `fused_linear_cross_entropy` is used where installed (`hf_bertology[liger]`) for the hook's own
`language_model_loss` only (its kernel computes that function); torch has no fused op.
`sparse_mlm_loss` chooses the unfused head where logits are asked for, without gradient, under `torch.compile` or
where the logits fit one chunk. docs/recipes/bert.md ("In the code").
"""

import importlib
import importlib.util
from collections.abc import Callable

import torch
import torch.nn.functional as F

from .lm_loss import language_model_loss

# fp32 logits of one chunk: 64 MiB (550 targets of BERT's 30,522 words).
CHUNK_BYTES = 64 * 2**20


def chunk_rows(vocab_size: int) -> int:
    return max(1, CHUNK_BYTES // (4 * vocab_size))


def liger_linear_cross_entropy(device: torch.device):
    """Liger-Kernel's fused linear cross-entropy on a CUDA device where the package is installed, else None."""
    if device.type != "cuda" or importlib.util.find_spec("liger_kernel") is None:
        return None
    # optional, so imported by name: this file needs only torch (a model folder's rule, tests/test_layout.py)
    return importlib.import_module("liger_kernel.transformers.functional").liger_fused_linear_cross_entropy


class ChunkedLinearLoss(torch.autograd.Function):
    """`(loss_function(hidden @ weight.T + bias, targets, label_smoothing=eps), argmax)` summed over chunks of
    `rows` targets, so one chunk's logits are alive at a time; each chunk's gradients are taken in the forward (as
    Liger-Kernel's) by autograd through the same loss function, and scaled in the backward. The argmax (`(M,)`, only
    if `with_argmax`, else empty) is the predicted token, for accuracies."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, rows: int, with_argmax: bool, loss_function, label_smoothing):
        needs = ctx.needs_input_grad[:3]
        acc = torch.promote_types(hidden.dtype, torch.float32)  # fp32 at least, as the unfused loss
        total = torch.zeros((), dtype=acc, device=hidden.device)
        argmax = torch.empty(len(targets) if with_argmax else 0, dtype=torch.long, device=hidden.device)
        grad_hidden = torch.empty_like(hidden) if needs[0] else None
        grad_weight = torch.zeros_like(weight, dtype=acc) if needs[1] else None
        grad_bias = torch.zeros_like(bias, dtype=acc) if needs[2] and bias is not None else None
        weight_, bias_ = weight.detach().requires_grad_(needs[1]), None
        if bias is not None:
            bias_ = bias.detach().requires_grad_(needs[2])
        for start in range(0, len(targets), rows):
            with torch.enable_grad():
                h = hidden[start : start + rows].detach().requires_grad_(needs[0])
                logits = F.linear(h, weight_, bias_)  # (c, V): the only logits alive
                loss = loss_function(logits, targets[start : start + rows], label_smoothing=label_smoothing)
            total += loss.detach()
            if with_argmax:
                argmax[start : start + rows] = logits.detach().argmax(-1)
            wanted = [
                (t, g) for t, g in ((h, grad_hidden), (weight_, grad_weight), (bias_, grad_bias)) if g is not None
            ]
            if wanted:
                grads = torch.autograd.grad(loss, [t for t, _ in wanted])
                for (t, g), grad in zip(wanted, grads):
                    if t is h:
                        g[start : start + rows] = grad
                    else:
                        g += grad
        ctx.save_for_backward(grad_hidden, grad_weight, grad_bias)
        ctx.dtypes = (weight.dtype, None if bias is None else bias.dtype)
        ctx.mark_non_differentiable(argmax)
        return total, argmax

    @staticmethod
    def backward(ctx, grad_total, grad_argmax):
        grad_hidden, grad_weight, grad_bias = ctx.saved_tensors
        weight_dtype, bias_dtype = ctx.dtypes
        return (
            None if grad_hidden is None else grad_hidden * grad_total.to(grad_hidden.dtype),
            None if grad_weight is None else (grad_weight * grad_total).to(weight_dtype),
            None if grad_bias is None else (grad_bias * grad_total).to(bias_dtype),
            None,
            None,
            None,
            None,
            None,
        )


def sparse_mlm_loss(
    hidden: torch.Tensor,
    decoder: torch.nn.Linear,
    targets: torch.Tensor,
    return_logits: bool | None = None,
    with_argmax: bool = True,
    loss_function: Callable = language_model_loss,
    label_smoothing: float = 0.0,
) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor | None]:
    """`(logits or None, summed loss, argmax or None)` of `loss_function(decoder(hidden), targets,
    label_smoothing=...)` (the model's hook, `token_loss.TokenLoss.linear`; `hidden`: `(M, E)` states of the M
    targets, -100: ignored). `return_logits`: True always returns the logits (unfused), None lets the choice above
    decide, False asks for the fused loss wherever there is a gradient to compute. Liger computes the default loss
    only (a swapped loss runs chunked)."""
    vocab = decoder.weight.shape[0]
    fused = (
        not return_logits
        and torch.is_grad_enabled()
        and hidden.requires_grad
        and not torch.compiler.is_compiling()
        and (return_logits is False or len(targets) * vocab * 4 > CHUNK_BYTES)
    )
    if not fused:
        logits = decoder(hidden)
        loss = loss_function(logits, targets, label_smoothing=label_smoothing)
        return logits, loss, logits.argmax(-1) if with_argmax else None
    liger = liger_linear_cross_entropy(hidden.device) if loss_function is language_model_loss else None
    if liger is not None:  # the same loss: Liger's label smoothing is torch's (eps * mean_v -log p)
        out = liger(
            hidden, decoder.weight, targets, bias=decoder.bias, reduction="sum", label_smoothing=label_smoothing,
            return_predicted_tokens=True,
        )  # fmt: skip
        return None, out.loss.float(), out.predicted_tokens if with_argmax else None
    loss, argmax = ChunkedLinearLoss.apply(
        hidden, decoder.weight, decoder.bias, targets, chunk_rows(vocab), with_argmax, loss_function, label_smoothing
    )
    return None, loss, argmax if with_argmax else None
