"""One pretraining step for every model, top to bottom (as cramming's ELECTRA forward reads).

The backbone's inputs (the packed check and RoBERTa's positions, once) -> each objective's corruption of the input
(RTD's generator) -> the union of the rows every objective reads, asked of the backbone once (the last layer on those
rows only, `last_layer`) -> the backbone -> each objective's loss and diagnostics -> their weighted sum -> one
output. A model is its backbone, its heads (the plain transformers names) and its `objectives` (`objective.py`);
this is the only place that knows about the last-layer subset.
"""

import inspect

import torch

from .configuration_recipe import first_position
from .last_layer import LastLayerSubset, install_subset, subset_inputs
from .objective import EVERY_ROW, Batch
from .outputs import BertologyForPreTrainingOutput
from .token_loss import TokenLossHook

# Attention implementations that keep a padding-free batch's examples apart (they read `cu_seq_lens_q`).
PACKED_IMPLEMENTATIONS = ("sdpa_packed", "flash_attention_2", "flash_attention_3", "flash_attention_4")


def is_packed(config, inputs: dict) -> bool:
    """Whether the batch is padding-free (one `(1, T)` row whose examples `cu_seq_lens_q` keeps apart; the encoder
    then gets no attention mask), refused under an attention that does not read the boundaries."""
    packed = inputs.get("cu_seq_lens_q") is not None
    if packed and config._attn_implementation not in PACKED_IMPLEMENTATIONS:
        raise ValueError(f"a padding-free batch needs attn_implementation in {PACKED_IMPLEMENTATIONS}")
    return packed


_TAKES_TOKEN_TYPES: dict[type, bool] = {}  # a dict, not `functools.cache`, which dynamo does not trace through


def _takes_token_types(backbone_class: type) -> bool:
    """Whether the family's own forward (not `last_layer`'s subclass's) takes token types: ModernBERT's does not."""
    if backbone_class not in _TAKES_TOKEN_TYPES:
        own = next(cls for cls in backbone_class.__mro__ if not issubclass(cls, LastLayerSubset))
        _TAKES_TOKEN_TYPES[backbone_class] = "token_type_ids" in inspect.signature(own.forward).parameters
    return _TAKES_TOKEN_TYPES[backbone_class]


def backbone_inputs(backbone, attention_mask, inputs: dict, corrupted: bool = False) -> dict:
    """The backbone's keyword inputs: a padding-free batch (`cu_seq_lens_q`) drops the mask and, on RoBERTa, starts
    its positions after the padding index; a padded `corrupted` one counts them on its mask (RoBERTa numbers a row's
    positions from its ids, where an RTD sample can be the pad id; the mask gives
    `create_position_ids_from_input_ids`'s values for any row without a pad id inside); token types only for a
    backbone that has them."""
    packed = is_packed(backbone.config, inputs)
    inputs = {"attention_mask": None if packed else attention_mask, **inputs}
    offset = first_position(getattr(backbone, "embeddings", None))
    if packed and offset:
        inputs["position_ids"] = inputs["position_ids"] + offset
    elif corrupted and offset and inputs.get("position_ids") is None and attention_mask is not None:
        inputs["position_ids"] = attention_mask.long().cumsum(-1) * attention_mask.long() + (offset - 1)
    if not _takes_token_types(type(backbone)):
        inputs.pop("token_type_ids", None)
    return inputs


def encoder_rows(encode, backbone, input_ids, at, inputs: dict):
    """`(outputs, rows, subset)`: `encode(input_ids, inputs)`'s outputs and the `(M, H)` states at the flat positions
    `at`, the last layer run on those rows only where `backbone` can (`subset`; `last_layer.subset_inputs`: its
    `last_hidden_state` is then `(1, M, H)`, those rows in that order); `at` None: every row, `rows` None."""
    subset = {} if at is None else subset_inputs(backbone, at, inputs=inputs)
    outputs = encode(input_ids, {**inputs, **subset})
    if at is None:
        return outputs, None, False
    rows = outputs.last_hidden_state.flatten(0, 1)  # (M, H), or (B * T, H) without a subset
    return outputs, rows if subset else rows.index_select(0, at), bool(subset)


def _each_objectives_states(model, input_ids, inputs: dict, wanted: list, batch: Batch):
    """The backbone's outputs and each objective's states: its rows `(M_i, H)` (one gather for all), the whole
    `(B, T, H)` for `EVERY_ROW`, None where it reads none; the backbone does not run where none reads a row."""
    if all(part is None for part in wanted):
        return None, wanted
    every = any(isinstance(part, str) and part == EVERY_ROW for part in wanted)
    parts = [] if every else [part for part in wanted if part is not None]
    at = None if not parts else parts[0] if len(parts) == 1 else torch.cat(parts)
    outputs, rows, subset = encoder_rows(model.encode, model.base_model, input_ids, at, inputs)
    if not subset and batch.cu_seq_lens is None:  # BERT's pooler ran on each padded row's first token
        batch.pooler_output = getattr(outputs, "pooler_output", None)
    if rows is None:
        states = outputs.last_hidden_state  # (B, T, H)
        return outputs, [None if part is None else states if isinstance(part, str) else states.flatten(0, 1)
                         .index_select(0, part) for part in wanted]  # fmt: skip
    pieces = iter([rows] if len(parts) == 1 else rows.split([len(part) for part in parts]))  # (a split costs a cat)
    return outputs, [None if part is None else next(pieces) for part in wanted]


def pretraining_step(
    model, input_ids, attention_mask, labels: dict, num_items_in_batch=None, return_metrics=True, return_logits=None,
    **inputs,
) -> BertologyForPreTrainingOutput:  # fmt: skip
    """`model(**batch)` of every pretraining model: `labels` are the forward's named labels, `inputs` the rest of
    the batch (each objective takes the keys it `reads`; the backbone takes the others)."""
    objectives = [o for o in model.objectives if model.training_stage in o.stages]
    read = {key for objective in model.objectives for key in objective.reads}
    keys = {**{key: inputs.pop(key) for key in read & inputs.keys()}, **labels, "attention_mask": attention_mask}
    # 1. the backbone's inputs, and the batch as the objectives read it
    inputs = backbone_inputs(model.base_model, attention_mask, inputs, any(o.corrupts for o in objectives))
    batch = Batch(keys, num_items_in_batch, return_metrics, return_logits, inputs.get("cu_seq_lens_q"), input_ids)
    out, terms = {}, []
    # 2. corruptions of the input (RTD's generator samples the chosen tokens): the backbone's input ids
    for objective in objectives:
        input_ids, outputs = objective.corrupt(model, batch, input_ids, inputs)
        terms.append((objective, outputs.pop("loss", None)))
        out.update(outputs)
    # 3. the backbone on the rows every objective reads, asked once
    outputs, states = _each_objectives_states(model, input_ids, inputs, [o.rows(batch) for o in objectives], batch)
    if outputs is not None:
        out.update({key: getattr(outputs, key, None) for key in ("hidden_states", "attentions", "mems")})
    # 4. each objective's loss and diagnostics, 5. their weighted sum
    for objective, rows in zip(objectives, states):
        if rows is not None:
            result = objective(model, rows, batch)
            terms.append((objective, result.pop("loss", None)))
            out.update(result)
    loss = None
    for objective, term in terms:
        if term is not None and model.training_stage in objective.counted_in:
            term = term if objective.weight == 1.0 else objective.weight * term  # (weight 1: one operation fewer)
            loss = term if loss is None else loss + term
    return BertologyForPreTrainingOutput(loss=loss, **out)


class PreTrainingModel(TokenLossHook):
    """Mixed in before a family's `PreTrainedModel` by every pretraining model: the step's class data. A model sets
    `objectives` (a tuple, not registered: its heads are the model's own modules) in `__init__`; its `forward`
    names its labels and calls `pretraining_step`."""

    accepts_loss_kwargs = True  # each loss is normalised by its `num_items_in_batch` count (`outputs.step_mean`)
    # Listed under AutoModelForPreTraining, not AutoModelForMaskedLM: a masked-LM folder plain transformers derives
    # from ours inherits auto_map without our files, and AutoModelForMaskedLM must then pick the plain class.
    _auto_class = "AutoModelForPreTraining"
    takes_return_metrics = True  # `BertologyTrainer` asks for the metrics at the steps it logs only
    training_stage = "joint"  # ELECTRA's two-stage training: "generator", then "discriminator" (§3.2)
    objectives: tuple = ()

    def encode(self, input_ids, inputs: dict):
        return self.base_model(input_ids, return_dict=True, **inputs)

    def post_init(self):
        super().post_init()
        # the last layer on the rows a loss reads (`last_layer`): the generator's, and the model's own unless an
        # objective reads every row of it (an RTD discriminator)
        generator = getattr(self, "generator", None)
        if generator is not None:
            install_subset(generator, generator.base_model_prefix)
        if not any(objective.reads_every_row for objective in self.objectives):
            install_subset(self, self.base_model_prefix)
