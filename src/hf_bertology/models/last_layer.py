"""The last encoder layer on the positions a loss reads only (flash-attn's BERT `last_layer_subset`, MLPerf BERT's
`dense_seq_output`), exact: its attention module on every token, its feed-forward block on those rows.

`install_subset` wraps the last layer's forward in place (ALBERT: its encoder, its one layer being shared; DeBERTa: its
model, whose keywords do not reach its layers); the backbone, called with `last_layer_positions` (flat `(M,)` indices
into the `(B, T)` batch), which transformers hands down to every layer, returns those rows as a `(1, M, H)`
`last_hidden_state`, in that order. How, and where not: docs/internals.md.
"""

from collections.abc import Callable
from types import MethodType

import torch
from torch import nn
from transformers.modeling_outputs import BaseModelOutput

KEY = "last_layer_positions"  # the backbone keyword that asks for the subset
EVERY_TOKEN = ("output_hidden_states", "output_attentions")  # a caller asking for these gets the full layer


def _rows(states: torch.Tensor, at: torch.Tensor) -> torch.Tensor:
    return states.flatten(0, -2).index_select(0, at)  # (M, H)


def _bert_layer(layer, hidden, at, attention_mask=None, *args, **kwargs):
    """BERT, RoBERTa, ELECTRA (`BertLayer`): `BertAttention` (with its output dense, residual and LayerNorm) on every
    token, the feed-forward chunk on the rows."""
    kwargs = {k: v for k, v in kwargs.items() if k not in ("encoder_attention_mask", "cache")}
    return layer.feed_forward_chunk(_rows(layer.attention(hidden, attention_mask, **kwargs)[0], at))


def _albert_layer(layer, hidden, at, attention_mask=None, **kwargs):
    """ALBERT (`AlbertLayer`): its attention on every token, the feed-forward block and last LayerNorm on the rows."""
    attention = _rows(layer.attention(hidden, attention_mask, **kwargs)[0], at)  # (M, H)
    return layer.full_layer_layer_norm(layer.ff_chunk(attention) + attention)


def _modernbert_layer(layer, hidden, at, attention_mask=None, position_embeddings=None, **kwargs):
    """ModernBERT (pre-norm): attention and its residual on every token, the MLP and its residual on the rows."""
    attention, _ = layer.attn(
        layer.attn_norm(hidden), position_embeddings=position_embeddings, attention_mask=attention_mask, **kwargs
    )
    hidden = _rows(hidden + attention, at)  # (M, H)
    return hidden + layer.mlp(layer.mlp_norm(hidden))


def scatter_rows(rows: torch.Tensor, at: torch.Tensor, shape: torch.Size, repeats: bool = False) -> torch.Tensor:
    """`(B, T, H)` of a `(B, T)` `shape`: `rows` at their flat positions `at`, zero elsewhere. A position given twice
    gets its gradient twice through `index_copy`; where a loss reads it (`repeats`: SBO's span boundaries, shared by a
    span's tokens) each copy is weighted by its count's inverse and summed instead (within an ulp of the value)."""
    flat = rows.new_zeros(shape.numel(), rows.shape[-1])
    if not repeats:
        return flat.index_copy(0, at, rows).view(*shape, -1)
    count = torch.zeros(flat.shape[0], dtype=rows.dtype, device=rows.device).index_add_(0, at, rows.new_ones(len(at)))
    return flat.index_add(0, at, rows / count.take(at)[:, None]).view(*shape, -1)


def _wrapped_layer(layer_forward: Callable) -> Callable:
    def forward(self, hidden_states, *args, **kwargs):
        at = kwargs.pop(KEY, None)
        if at is None or not self.last_layer_subset:
            return self._full_forward(hidden_states, *args, **kwargs)
        return layer_forward(self, hidden_states, at, *args, **kwargs)[None]  # (1, M, H): the rows, in order

    return forward


def _albert_encoder(self, hidden_states, attention_mask=None, **kwargs):
    """`AlbertTransformer.forward` (transformers 5.x) with the last application of its shared layer on the rows."""
    at = kwargs.pop(KEY, None)
    if at is None or not self.last_layer_subset:
        return self._full_forward(hidden_states, attention_mask, **kwargs)
    hidden_states = self.embedding_hidden_mapping_in(hidden_states)
    depth, groups = self.config.num_hidden_layers, self.config.num_hidden_groups
    for i in range(depth):
        layers = self.albert_layer_groups[int(i / (depth / groups))].albert_layers
        for j, layer in enumerate(layers):
            if i == depth - 1 and j == len(layers) - 1:
                hidden_states = _albert_layer(layer, hidden_states, at, attention_mask, **kwargs)[None]  # (1, M, H)
            else:
                hidden_states = layer(hidden_states, attention_mask, **kwargs)
    return BaseModelOutput(last_hidden_state=hidden_states)


def deberta_rows(layer, keys, at, attention_mask, query_states=None, relative_pos=None, rel_embeddings=None):
    """DeBERTa (`DebertaV2Layer`), `(M, H)`: its attention (every query, so every relative position as before, and
    `DebertaV2SelfOutput`) on every token, the feed-forward block on the rows; `query_states` as EMD passes them."""
    attention = layer.attention(
        keys, attention_mask, query_states=query_states, relative_pos=relative_pos, rel_embeddings=rel_embeddings
    )[0]
    attention = _rows(attention, at)  # (M, H)
    return layer.output(layer.intermediate(attention), attention)


def deberta_below_last(deberta, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                       inputs_embeds=None, **_) -> tuple:  # fmt: skip
    """`DebertaV2Model.forward` (transformers 5.x) up to its last layer: `(that layer's input (B, T, H), the layers'
    attention mask, relative positions, relative embeddings)`."""
    shape = input_ids.shape if input_ids is not None else inputs_embeds.shape[:-1]
    device = input_ids.device if input_ids is not None else inputs_embeds.device
    mask = torch.ones(shape, device=device) if attention_mask is None else attention_mask
    types = torch.zeros(shape, dtype=torch.long, device=device) if token_type_ids is None else token_type_ids
    hidden = deberta.embeddings(
        input_ids=input_ids, token_type_ids=types, position_ids=position_ids, mask=mask, inputs_embeds=inputs_embeds
    )
    encoder = deberta.encoder
    layer_mask, relative_pos = encoder.get_attention_mask(mask), encoder.get_rel_pos(hidden)
    rel_embeddings = encoder.get_rel_embedding()
    for i, layer in enumerate(encoder.layer[:-1]):
        out = layer(hidden, layer_mask, relative_pos=relative_pos, rel_embeddings=rel_embeddings)[0]
        hidden = encoder.conv(hidden, out, mask) if i == 0 and encoder.conv is not None else out
    return hidden, layer_mask, relative_pos, rel_embeddings


def _deberta_model(self, input_ids=None, attention_mask=None, *args, **kwargs):
    """`DebertaV2Model.forward`, whose keywords do not reach its layers: below the last layer as it runs, the last
    on the rows."""
    at = kwargs.pop(KEY, None)
    if at is None or not self.last_layer_subset:
        return self._full_forward(input_ids, attention_mask, *args, **kwargs)
    hidden, *context = deberta_below_last(self, input_ids, attention_mask, *args, **kwargs)
    rows = deberta_rows(self.encoder.layer[-1], hidden, at, context[0], None, *context[1:])
    return BaseModelOutput(last_hidden_state=rows[None])  # (1, M, H)


def _deberta_wrapped(backbone: nn.Module) -> nn.Module | None:
    """DeBERTa's model, unless it runs EMD-like passes of its own (`z_steps`) or its convolution follows the first
    layer when that is the last."""
    conv_last = backbone.encoder.conv is not None and len(backbone.encoder.layer) == 1
    return backbone if getattr(backbone, "z_steps", 0) <= 1 and not conv_last else None


def _encoder_last(backbone: nn.Module) -> nn.Module:
    return backbone.encoder.layer[-1]


# model_type -> (the module `install_subset` wraps, read off the backbone; its forward taking `last_layer_positions`)
SUBSETS = {
    "bert": (_encoder_last, _wrapped_layer(_bert_layer)),
    "roberta": (_encoder_last, _wrapped_layer(_bert_layer)),
    "electra": (_encoder_last, _wrapped_layer(_bert_layer)),
    "albert": (lambda backbone: backbone.encoder, _albert_encoder),  # its one layer is shared across depths
    "deberta-v2": (_deberta_wrapped, _deberta_model),  # its keywords do not reach its layers
    "modernbert": (lambda backbone: backbone.layers[-1], _wrapped_layer(_modernbert_layer)),
}


def _last_layer(backbone: nn.Module) -> nn.Module | None:
    """The module `install_subset` wraps: the last layer, ALBERT's encoder or DeBERTa's model (None: not exact)."""
    entry = SUBSETS.get(backbone.config.model_type)
    return None if entry is None else entry[0](backbone)


def install_subset(backbone: nn.Module | None) -> None:
    """Let `backbone` (a transformers base model) take `last_layer_positions`; on, once, where it is exact."""
    module = None if backbone is None else _last_layer(backbone)
    if module is None or hasattr(module, "_full_forward"):
        return
    module._full_forward = module.forward
    module.last_layer_subset = True
    module.forward = MethodType(SUBSETS[backbone.config.model_type][1], module)


def use_last_layer_subset(model: nn.Module, enabled: bool = True) -> nn.Module:
    """Switch the subset on or off in every backbone of `model` (on by default where installed)."""
    for module in model.modules():
        if hasattr(module, "_full_forward"):
            module.last_layer_subset = enabled
    return model


def _subsets(backbone: nn.Module, inputs: dict) -> bool:
    module = _last_layer(backbone)
    if module is None or not getattr(module, "last_layer_subset", False):
        return False
    return not any(inputs.get(key, getattr(backbone.config, key, False)) for key in EVERY_TOKEN)


def subset_inputs(backbone: nn.Module, *positions: torch.Tensor | None, inputs: dict | None = None) -> dict:
    """`{"last_layer_positions": (M,)}`, the positions' concatenation, where `backbone` runs its last layer on a
    subset and no caller asked for every token's states (`output_hidden_states`, `output_attentions`); else `{}`.
    With it the backbone's `last_hidden_state` is `(1, M, H)`: those rows, in that order."""
    if not _subsets(backbone, inputs or {}):
        return {}
    parts = [p for p in positions if p is not None]
    at = parts[0] if len(parts) == 1 else torch.cat(parts)
    # no row to read (a batch with no labelled token): the full layer, whose pooler reads a first token (a shape, no sync)
    return {KEY: at} if at.numel() else {}


def first_tokens(labels: torch.Tensor, cu_seq_lens: torch.Tensor | None) -> torch.Tensor:
    """Flat positions of each example's first token (NSP / SOP read them) in the `(B, T)` batch of `labels`:
    `cu_seq_lens[:-1]` in a padding-free row, the first column of every padded row."""
    if cu_seq_lens is not None:
        return cu_seq_lens[:-1]  # int32 is promoted by the `cat` with the targets
    return torch.arange(0, labels.numel(), labels.shape[1], device=labels.device)


def sbo_boundaries(sbo_boundaries: torch.Tensor, at: torch.Tensor, width: int) -> torch.Tensor:
    """Flat positions of the span boundaries SBO reads (`span_boundary.span_boundary_loss`'s), `(2N,)`."""
    return (sbo_boundaries.flatten(0, 1).index_select(0, at) + (at // width * width)[:, None]).flatten()


def _labelled(labels: torch.Tensor, positions: torch.Tensor | None) -> torch.Tensor:
    return labels.flatten().ne(-100).nonzero().squeeze(1) if positions is None else positions  # (M,)


def masked_lm_rows(backbone, labels, target_positions, reads_first: bool, sbo: tuple, inputs: dict):
    """`(subset_inputs, sizes)` of a masked-LM step (`masked_lm.MaskedLMPreTraining`): the labelled tokens, each
    example's first token where NSP / SOP reads it, SBO's span boundaries where `sbo` = `(sbo_labels, sbo_boundaries,
    sbo_target_positions)` has labels; `sizes`: how many rows of each, in that order (`({}, None)`: no subset)."""
    if not _subsets(backbone, inputs):
        return {}, None
    first = first_tokens(labels, inputs.get("cu_seq_lens_q")) if reads_first else None
    sbo_labels, boundaries, sbo_positions = sbo
    ends = None
    if sbo_labels is not None and boundaries is not None:
        ends = sbo_boundaries(boundaries, _labelled(sbo_labels, sbo_positions), labels.shape[1])
    at = _labelled(labels, target_positions)
    sizes = [len(part) if part is not None else 0 for part in (at, first, ends)]
    return subset_inputs(backbone, at, first, ends, inputs=inputs), sizes
