"""The last encoder layer on the positions a loss reads only (flash-attn's BERT `last_layer_subset`, MLPerf BERT's
`dense_seq_output`), exact: its attention module on every token, its feed-forward block on those rows.

`install_subset` puts a subclass of the family's module in the last layer's place (`SubsetBertLayer` for a
`BertLayer`, ...; ALBERT: its encoder, its one layer being shared; DeBERTa: its model, whose keywords do not reach its
layers), holding the same parameters under the same names; called with `last_layer_positions` (flat `(M,)` indices
into the `(B, T)` batch), which transformers hands down to every layer, the backbone returns those rows as a
`(1, M, H)` `last_hidden_state`, in that order. Without it, the subclass is transformers' own forward.
tests/test_last_layer_subset.py runs each on every row against the installed transformers' module. docs/internals.md.
"""

import functools
from collections.abc import Callable

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


def scatter_rows(rows: torch.Tensor, at: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """`(B, T, H)` of a `(B, T)` `shape`: `rows` at their flat positions `at` (each once), zero elsewhere."""
    return rows.new_zeros(shape.numel(), rows.shape[-1]).index_copy(0, at, rows).view(*shape, -1)


class LastLayerSubset:
    """Mixed in before a transformers module (the last layer, ALBERT's encoder, DeBERTa's model): its own forward,
    unless called with `last_layer_positions` while `last_layer_subset` is on; then `rows_forward`'s."""

    last_layer_subset = True  # `use_last_layer_subset` switches it

    def forward(self, *args, **kwargs):
        at = kwargs.pop(KEY, None)
        if at is None or not self.last_layer_subset:
            return super().forward(*args, **kwargs)
        return self.rows_forward(at, *args, **kwargs)

    @classmethod
    def adopt(cls, module: nn.Module) -> nn.Module:
        """A `cls` (a subclass of `module`'s class) holding `module`'s parameters, buffers and settings, to take its
        place; `module` itself is left as it was."""
        subset = cls.__new__(cls)
        subset.__dict__.update(module.__dict__)
        return subset


class _LayerRows(LastLayerSubset):
    rows_function: Callable  # (layer, hidden, at, *args, **kwargs) -> (M, H)

    def rows_forward(self, at, hidden_states, *args, **kwargs):
        return type(self).rows_function(self, hidden_states, at, *args, **kwargs)[None]  # (1, M, H): in order


class _AlbertEncoderRows(LastLayerSubset):
    def rows_forward(self, at, hidden_states, attention_mask=None, **kwargs):
        """`AlbertTransformer.forward` with the last application of its shared layer on the rows."""
        hidden_states = self.embedding_hidden_mapping_in(hidden_states)
        depth, groups = self.config.num_hidden_layers, self.config.num_hidden_groups
        for i in range(depth):
            layers = self.albert_layer_groups[int(i / (depth / groups))].albert_layers
            for j, layer in enumerate(layers):
                if i == depth - 1 and j == len(layers) - 1:
                    hidden_states = _albert_layer(layer, hidden_states, at, attention_mask, **kwargs)[None]
                else:
                    hidden_states = layer(hidden_states, attention_mask, **kwargs)
        return BaseModelOutput(last_hidden_state=hidden_states)  # (1, M, H)


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


class _DebertaModelRows(LastLayerSubset):
    def rows_forward(self, at, input_ids=None, attention_mask=None, *args, **kwargs):
        """`DebertaV2Model.forward`, whose keywords do not reach its layers: below the last layer as it runs, the
        last on the rows."""
        hidden, *context = deberta_below_last(self, input_ids, attention_mask, *args, **kwargs)
        rows = deberta_rows(self.encoder.layer[-1], hidden, at, context[0], None, *context[1:])
        return BaseModelOutput(last_hidden_state=rows[None])  # (1, M, H)


def _last_of_layers(parent: nn.Module, name: str) -> tuple[nn.Module, str]:
    """(the list, the index) of the last layer of a BERT-like encoder or ModernBERT's."""
    backbone = getattr(parent, name)
    layers = backbone.encoder.layer if hasattr(backbone, "encoder") else backbone.layers
    return layers, str(len(layers) - 1)


def _deberta_itself(parent: nn.Module, name: str) -> tuple[nn.Module, str] | None:
    """DeBERTa's model itself, unless it runs EMD-like passes of its own (`z_steps`) or its convolution follows the
    first layer when that is the last (then not exact: None)."""
    backbone = getattr(parent, name)
    conv_last = backbone.encoder.conv is not None and len(backbone.encoder.layer) == 1
    return None if getattr(backbone, "z_steps", 0) > 1 or conv_last else (parent, name)


# model_type -> (where the module that takes the subset is, `(parent, name) -> (its owner, its name)`, None where not
# exact; the subset's behaviour, mixed in before the module's own class; its rows function)
SUBSETS = {
    "bert": (_last_of_layers, _LayerRows, _bert_layer),
    "roberta": (_last_of_layers, _LayerRows, _bert_layer),
    "electra": (_last_of_layers, _LayerRows, _bert_layer),
    "modernbert": (_last_of_layers, _LayerRows, _modernbert_layer),
    "albert": (lambda parent, name: (getattr(parent, name), "encoder"), _AlbertEncoderRows, None),  # one shared layer
    "deberta-v2": (_deberta_itself, _DebertaModelRows, None),  # its keywords do not reach its layers
}


@functools.cache
def subset_class(module_class: type, rows: type, rows_function: Callable | None) -> type:
    """`Subset<Class>`: `rows` mixed in before `module_class`, the transformers module it takes the place of."""
    namespace = {"__module__": __name__, "__qualname__": f"Subset{module_class.__name__}"}
    if rows_function is not None:
        namespace["rows_function"] = staticmethod(rows_function)
    return type(f"Subset{module_class.__name__}", (rows, module_class), namespace)


def install_subset(parent: nn.Module, name: str) -> None:
    """Let the backbone at `parent.<name>` (a transformers base model) take `last_layer_positions`: the module that
    runs the subset put in its place, once, where it is exact."""
    backbone = getattr(parent, name, None)
    entry = None if backbone is None else SUBSETS.get(backbone.config.model_type)
    place = None if entry is None else entry[0](parent, name)
    if place is None:
        return
    owner, slot = place
    module = owner._modules[slot]
    if not isinstance(module, LastLayerSubset):
        owner._modules[slot] = subset_class(type(module), *entry[1:]).adopt(module)


def use_last_layer_subset(model: nn.Module, enabled: bool = True) -> nn.Module:
    """Switch the subset on or off in every backbone of `model` (on by default where installed)."""
    for module in model.modules():
        if isinstance(module, LastLayerSubset):
            module.last_layer_subset = enabled
    return model


def _last_layer(backbone: nn.Module) -> nn.Module | None:
    """The module that takes the subset: the last layer, ALBERT's encoder or DeBERTa's model (None: none)."""
    encoder = getattr(backbone, "encoder", None)
    layers = getattr(encoder, "layer", None) or getattr(backbone, "layers", None)
    candidates = (backbone, encoder, layers[-1] if layers else None)
    return next((module for module in candidates if isinstance(module, LastLayerSubset)), None)


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
