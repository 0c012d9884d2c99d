"""Masked-LM loss without the `(M, V)` logits: the output layer and the cross-entropy fused, in chunks of targets.

At BERT-base sizes the unfused head keeps about 600 MB of logits and as much of their gradient; the chunked version
keeps one chunk (`CHUNK_BYTES`), computing each chunk's gradient at once (`softmax - one_hot`). On CUDA,
Liger-Kernel's `fused_linear_cross_entropy` is used where installed (`hf_bertology[liger]`); torch has no fused op.
`sparse_mlm_loss` chooses the unfused head where logits are asked for, without gradient, under `torch.compile` or
where the logits fit one chunk. docs/recipes/bert.md ("In the code").
"""

import importlib
import importlib.util

import torch
import torch.nn.functional as F

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


class ChunkedLinearCrossEntropy(torch.autograd.Function):
    """`(sum over rows with target != -100 of cross_entropy(hidden @ weight.T + bias, target), argmax)`, `rows`
    targets at a time; the gradients are computed in the forward (as Liger-Kernel's) and scaled in the backward.
    The argmax (`(M,)`, only if `with_argmax`, else empty) is the predicted token, for accuracies."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, rows: int, with_argmax: bool):
        need_hidden, need_weight, need_bias = ctx.needs_input_grad[:3]
        acc = torch.promote_types(hidden.dtype, torch.float32)  # fp32 at least, as the unfused `logits.float()`
        total = torch.zeros((), dtype=acc, device=hidden.device)
        argmax = torch.empty(len(targets) if with_argmax else 0, dtype=torch.long, device=hidden.device)
        grad_hidden = torch.empty_like(hidden) if need_hidden else None
        grad_weight = torch.zeros_like(weight, dtype=acc) if need_weight else None
        grad_bias = torch.zeros_like(bias, dtype=acc) if need_bias and bias is not None else None
        for start in range(0, len(targets), rows):
            h, target = hidden[start : start + rows], targets[start : start + rows]
            logits = F.linear(h, weight, bias).to(acc)  # (c, V): the only logits alive
            valid = target.ne(-100)
            safe = target.clamp(min=0)
            lse = logits.logsumexp(-1)
            total += torch.where(valid, lse - logits.gather(1, safe[:, None]).squeeze(1), 0.0).sum()
            if with_argmax:
                argmax[start : start + rows] = logits.argmax(-1)
            if need_hidden or need_weight or need_bias:
                grad = logits.sub_(lse[:, None]).exp_()  # softmax, in place of the logits
                grad[torch.arange(len(target), device=grad.device), safe] -= 1.0
                grad.mul_(valid[:, None])  # ignored targets: no gradient
                if need_hidden:
                    grad_hidden[start : start + rows] = (grad.to(weight.dtype) @ weight).to(hidden.dtype)
                if need_weight:
                    grad_weight += grad.t() @ h.to(acc)
                if grad_bias is not None:
                    grad_bias += grad.sum(0)
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
        )


def sparse_mlm_loss(
    hidden: torch.Tensor,
    decoder: torch.nn.Linear,
    targets: torch.Tensor,
    return_logits: bool | None = None,
    with_argmax: bool = True,
) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor | None]:
    """`(logits or None, summed fp32 cross-entropy, argmax or None)` of `decoder(hidden)` (`(M, E)` states of the
    M targets) against `targets` (-100: ignored). `return_logits`: True always returns the logits (unfused), None
    lets the choice above decide, False asks for the fused loss wherever there is a gradient to compute."""
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
        loss = F.cross_entropy(logits.float(), targets, reduction="sum")
        return logits, loss, logits.argmax(-1) if with_argmax else None
    liger = liger_linear_cross_entropy(hidden.device)
    if liger is not None:
        out = liger(hidden, decoder.weight, targets, bias=decoder.bias, reduction="sum", return_predicted_tokens=True)
        return None, out.loss.float(), out.predicted_tokens if with_argmax else None
    loss, argmax = ChunkedLinearCrossEntropy.apply(
        hidden, decoder.weight, decoder.bias, targets, chunk_rows(vocab), with_argmax
    )
    return None, loss, argmax if with_argmax else None
