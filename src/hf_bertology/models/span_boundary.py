"""SpanBERT's span boundary objective (Joshi et al., 2020, §3.2), written once: the head and its loss.

Each token x_i of a masked span (s..e) is predicted from the boundary states h_{s-1}, h_{e+1} and its position
p_{i-s} in the span. Used by SpanBERT and by every cell that adds SBO (`modeling_composed`).
"""

import torch
from torch import nn
from transformers.activations import ACT2FN

from .objective import Batch, Objective


def activation(config):
    """The config's hidden activation (`hidden_act`, ModernBERT's `hidden_activation`) as a module."""
    name = getattr(config, "hidden_act", None) or getattr(config, "hidden_activation", "gelu")
    return ACT2FN[name] if isinstance(name, str) else name


def layer_norm_eps(config) -> float:
    return getattr(config, "layer_norm_eps", None) or getattr(config, "norm_eps", 1e-12)


class MLPWithLayerNorm(nn.Module):
    """SpanBERT's two-layer MLP (official `MLPWithLayerNorm`): Linear, activation, LayerNorm, twice; the second
    maps to `output_size` (the word table's width: the hidden size, or ALBERT's and ELECTRA's embedding size)."""

    def __init__(self, config, input_size: int, output_size: int):
        super().__init__()
        self.linear1 = nn.Linear(input_size, config.hidden_size)
        self.non_lin1 = activation(config)
        self.layer_norm1 = nn.LayerNorm(config.hidden_size, eps=layer_norm_eps(config))
        self.linear2 = nn.Linear(config.hidden_size, output_size)
        self.non_lin2 = activation(config)
        self.layer_norm2 = nn.LayerNorm(output_size, eps=layer_norm_eps(config))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        hidden = self.layer_norm1(self.non_lin1(self.linear1(hidden)))
        return self.layer_norm2(self.non_lin2(self.linear2(hidden)))


class SpanBoundaryHead(nn.Module):
    """The official `BertPairTargetPredictionHead`: `[h_{s-1}; h_{e+1}; p_{i-s}]` -> MLP -> the tied word table."""

    def __init__(self, config, embedding_size: int | None = None):
        super().__init__()
        embedding_size = embedding_size or config.hidden_size
        positions = config.sbo_position_embedding_size
        self.position_embeddings = nn.Embedding(config.sbo_max_targets, positions)
        self.mlp_layer_norm = MLPWithLayerNorm(config, 2 * config.hidden_size + positions, embedding_size)
        self.decoder = nn.Linear(embedding_size, config.vocab_size, bias=False)  # tied to the word embeddings
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, left: torch.Tensor, right: torch.Tensor, relative_positions: torch.Tensor) -> torch.Tensor:
        """`left`, `right`: `(M, H)` boundary states; `relative_positions`: `(M,)` -> `(M, V)` logits."""
        hidden = torch.cat([left, right, self.position_embeddings(relative_positions)], -1)  # (M, 2H + P)
        return self.decoder(self.mlp_layer_norm(hidden)) + self.bias


def grow_bias(sbo: SpanBoundaryHead | None, vocab_size: int) -> None:
    """After `resize_token_embeddings` (the decoder is tied to the word table, resized with it): the head's own
    output bias grown too, new words at 0, its initial value."""
    if sbo is not None and sbo.bias.shape[0] != vocab_size:
        bias = sbo.bias.new_zeros(vocab_size)
        keep = min(len(bias), len(sbo.bias))
        bias[:keep] = sbo.bias.detach()[:keep]
        sbo.bias = nn.Parameter(bias)


class SpanBoundary(Objective):
    """Reads `sbo_labels` (`(B, T)`, the span tokens' ids, -100 elsewhere), `sbo_boundaries` (each target's
    `(s-1, e+1)` in its row, `(B, T, 2)`; the flat row when packed), `sbo_relative_positions` (`i - s`) and
    `sbo_target_positions`; the rows of the boundaries; returns `sbo_loss`, `sbo_accuracy`, `sbo_logits` `(N, V)`
    (the head: the model's `sbo`, the loss its hook: SBO predicts vocabulary tokens)."""

    name = "sbo"
    reads = ("sbo_labels", "sbo_boundaries", "sbo_relative_positions", "sbo_target_positions")

    def __init__(self, weight: float = 1.0):
        super().__init__()
        self.weight = weight  # `sbo_loss_weight`: loss = mlm + weight * sbo

    def rows(self, batch: Batch):
        """The flat positions of every target's two boundaries, `(2N,)`, in target order."""
        if batch.get("sbo_labels") is None:
            return None
        if batch.get("sbo_boundaries") is None or batch.get("sbo_relative_positions") is None:
            raise ValueError("sbo_labels need sbo_boundaries and sbo_relative_positions (the span collator's)")
        at, width = batch.labelled("sbo_labels").at, batch.get("sbo_labels").shape[1]
        boundaries = batch.get("sbo_boundaries").flatten(0, 1).index_select(0, at) + (at // width * width)[:, None]
        return boundaries.flatten()  # (2N,)

    def forward(self, model, states, batch: Batch) -> dict:
        at, sbo_targets = batch.labelled("sbo_labels")
        ends = states.unflatten(0, (-1, 2))  # (N, 2, H): the boundary states (s-1, e+1) of every target
        logits = model.sbo(ends[:, 0], ends[:, 1], batch.get("sbo_relative_positions").flatten().index_select(0, at))
        n_sbo = batch.count("sbo_labels")
        n_masked = n_sbo if batch.get("labels") is None else batch.count()
        loss = model.token_loss(logits, sbo_targets) / batch.step_mean("sbo_labels", n_sbo, n_masked)
        accuracy = (logits.argmax(-1) == sbo_targets).sum() / n_sbo
        return {"loss": loss, "sbo_loss": loss, "sbo_accuracy": accuracy, "sbo_logits": logits}
