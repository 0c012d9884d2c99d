"""The heads a composed model adds to its backbone, and the backbone's embedding tables they tie to.

Each repeats a family's own head with that family's parameter names (see the class docstrings), so that a composed
checkpoint reads like the family's; a modeling file may import only torch, transformers and its own folder.
"""

import torch
import torch.nn.functional as F
from torch import nn
from transformers.activations import ACT2FN

# model_type -> the family's masked-LM head on `(M, H)` states of a `*ForMaskedLM` (or a model holding its modules).
MLM_HEADS = {
    "bert": lambda m, h: m.cls(h),
    "roberta": lambda m, h: m.lm_head(h),
    "albert": lambda m, h: m.predictions(h),
    "electra": lambda m, h: m.generator_lm_head(m.generator_predictions(h)),
    "deberta-v2": lambda m, h: (
        m.cls(h) if hasattr(m, "cls") else m.lm_predictions(h, m.deberta.embeddings.word_embeddings)
    ),
    "modernbert": lambda m, h: m.decoder(m.head(h)),
}

# parameter names of the backbones' embedding tables (ModernBERT's word table is `tok_embeddings`)
WORD_TABLES = ("embeddings.word_embeddings.weight", "embeddings.tok_embeddings.weight")
POSITION_TABLE = "embeddings.position_embeddings.weight"
OTHER_TABLES = (POSITION_TABLE, "embeddings.token_type_embeddings.weight")


def _has(module: nn.Module, name: str) -> bool:
    try:
        _get(module, name)
    except AttributeError:
        return False
    return True


def _get(module: nn.Module, name: str) -> torch.Tensor:
    return module.get_parameter(name)


def _activation(config):
    name = getattr(config, "hidden_act", None) or getattr(config, "hidden_activation", "gelu")
    return ACT2FN[name] if isinstance(name, str) else name


def _layer_norm_eps(config) -> float:
    return getattr(config, "layer_norm_eps", None) or getattr(config, "norm_eps", 1e-12)


class SpanBoundaryHead(nn.Module):
    """SpanBERT's `BertPairTargetPredictionHead` (see `models/spanbert`): `[h_{s-1}; h_{e+1}; p_{i-s}]` -> MLP ->
    the tied word table. The MLP's second layer maps to the table's width (the hidden size, or ALBERT's/ELECTRA's
    smaller embedding size)."""

    def __init__(self, config, embedding_size: int):
        super().__init__()
        hidden, positions = config.hidden_size, config.sbo_position_embedding_size
        self.position_embeddings = nn.Embedding(config.sbo_max_targets, positions)
        self.linear1 = nn.Linear(2 * hidden + positions, hidden)
        self.layer_norm1 = nn.LayerNorm(hidden, eps=_layer_norm_eps(config))
        self.linear2 = nn.Linear(hidden, embedding_size)
        self.layer_norm2 = nn.LayerNorm(embedding_size, eps=_layer_norm_eps(config))
        self.act = _activation(config)
        self.decoder = nn.Linear(embedding_size, config.vocab_size, bias=False)  # tied to the word embeddings
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, left: torch.Tensor, right: torch.Tensor, relative_positions: torch.Tensor) -> torch.Tensor:
        hidden = torch.cat([left, right, self.position_embeddings(relative_positions)], -1)  # (M, 2H + P)
        hidden = self.layer_norm1(self.act(self.linear1(hidden)))
        hidden = self.layer_norm2(self.act(self.linear2(hidden)))
        return self.decoder(hidden) + self.bias  # (M, V)


class DiscriminatorHead(nn.Module):
    """ELECTRA's `ElectraDiscriminatorPredictions` (same names): dense -> activation -> one logit per token."""

    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = _activation(config)
        self.dense_prediction = nn.Linear(config.hidden_size, 1)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.dense_prediction(self.activation(self.dense(hidden_states))).squeeze(-1)  # (B, T)


class ClsReplacedTokenDetectionHead(nn.Module):
    """DeBERTa-v3's `LMMaskPredictionHead` (see `models/deberta_v3`; microsoft/DeBERTa
    `replaced_token_detection_model.py:30-49`): LayerNorm(h_[CLS] + h_i) -> dense -> act -> one logit per token."""

    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.transform_act_fn = _activation(config)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=_layer_norm_eps(config))
        self.classifier = nn.Linear(config.hidden_size, 1)

    def forward(self, hidden_states: torch.Tensor, first: torch.Tensor | None = None) -> torch.Tensor:
        """`first`: `(B, T)` index of each token's [CLS] (a padding-free row holds several examples)."""
        cls = hidden_states[:, :1] if first is None else hidden_states[0, first][None]  # (B, 1 or T, H)
        states = self.LayerNorm(cls + hidden_states)  # every token sees its example's [CLS]
        return self.classifier(self.transform_act_fn(self.dense(states))).squeeze(-1)  # (B, T)


class GradientDisentangledEmbedding(nn.Module):
    """GDES (DeBERTa-v3 §3.3; see `models/deberta_v3`): E_D = sg(E_G) + Δ with Δ zero-initialised."""

    def __init__(self, num_embeddings: int, embedding_dim: int):
        super().__init__()
        self.delta = nn.Parameter(torch.zeros(num_embeddings, embedding_dim))

    def forward(self, input_ids: torch.Tensor, generator_table: torch.Tensor) -> torch.Tensor:
        return F.embedding(input_ids, generator_table).detach() + F.embedding(input_ids, self.delta)
