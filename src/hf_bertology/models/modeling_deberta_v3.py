"""DeBERTa-v3 pretraining: ELECTRA-style replaced-token detection with gradient-disentangled embedding sharing.

Follows microsoft/DeBERTa `apps/tasks/rtd_task.py` and the paper (He et al., 2021, §3; docs/recipes/deberta_v3.md).
The generator, a `DebertaV2ForMaskedLM` at half depth, predicts the chosen tokens through the enhanced mask decoder;
`replaced_token_detection` samples the fake tokens and scores the discriminator, a `DebertaV2Model` + the official
`mask_predictions` head; embedding sharing is `config.embedding_sharing` (GDES, ES or NES). Names: `deberta.*` +
`mask_predictions.*` as the released discriminators, the generator at `generator.*`; under GDES every state dict
writes E_G + Δ as the discriminator's table, so a saved checkpoint is a complete plain `DebertaV2Model`.
"""

import torch
from torch import nn
from transformers import DebertaV2ForMaskedLM, DebertaV2Model, DebertaV2PreTrainedModel

from .configuration_deberta_v3 import BertologyDebertaV3Config
from .configuration_recipe import generator_config
from .last_layer import deberta_below_last, deberta_rows, scatter_rows, subset_inputs
from .replaced_token_detection import (
    POSITION_TABLE,
    ClsReplacedTokenDetectionHead,
    Generator,
    GradientDisentangledEmbedding,
    add_gdes,
    clipping_groups,
    discriminate,
    freeze_gdes_slots,
    gdes_pairs,
    last_layer_states,
    rtd_objective,
)
from .step import PreTrainingModel, pretraining_step

WORD_EMBEDDINGS = "embeddings.word_embeddings.weight"


def enhanced_mask_decoder(
    deberta: DebertaV2Model,
    keys: torch.Tensor,
    attention_mask: torch.Tensor | None,
    positions: torch.Tensor,
    at: torch.Tensor | None = None,
) -> torch.Tensor:
    """EMD (paper DeBERTa §3.2; official `EnhancedMaskDecoder.emd_context_layer`, `masked_language_model.py:51-82`).

    `keys`: the input of the last layer (`encoder_layers[-2]`, line 59), its keys and values; `positions`: `(B, T, H)`
    absolute position embeddings. The last layer is applied twice more (`range(2)`, line 61), the first query the keys
    plus the positions (line 62), the next the previous output (line 71). Returns `(B, T, H)`; the caller gathers the
    chosen tokens (line 76). `at`: the chosen tokens' flat positions; each pass's feed-forward block then runs on those
    rows only (`last_layer.deberta_rows`; a query's output depends on its own query alone), and the `(M, H)` rows are
    returned.
    """
    encoder = deberta.encoder
    mask = torch.ones(keys.shape[:2], device=keys.device) if attention_mask is None else attention_mask
    mask = encoder.get_attention_mask(mask)  # (B, 1, T, T)
    relative_pos = encoder.get_rel_pos(keys)
    rel_embeddings = encoder.get_rel_embedding()
    query = positions + keys
    for step in range(2):
        if at is None:
            query = encoder.layer[-1](
                keys, mask, query_states=query, relative_pos=relative_pos, rel_embeddings=rel_embeddings
            )[0]
        else:
            rows = deberta_rows(encoder.layer[-1], keys, at, mask, query, relative_pos, rel_embeddings)  # (M, H)
            query = rows if step == 1 else scatter_rows(rows, at, keys.shape[:-1])  # the next pass's queries
    return query


def generator_states(deberta: DebertaV2Model, input_ids, at, inputs) -> torch.Tensor:
    """`(M, H)` states the generator's head reads at the chosen tokens (`at`): EMD's where the input carries no
    absolute positions (officially only then, `masked_language_model.py:60,73-74`), else the last layer's; where
    the last layer runs on a subset (`last_layer`), on the chosen rows only."""
    if deberta.config.position_biased_input:
        return last_layer_states(deberta, input_ids, at, inputs)
    subset = subset_inputs(deberta, at, inputs=inputs)
    if subset:  # the last layer's own output is never read under EMD: it does not run
        keys = deberta_below_last(deberta, input_ids, **inputs)[0]
    else:
        keys = deberta(input_ids, **{**inputs, "output_hidden_states": True}).hidden_states[-2]
    position_ids = inputs.get("position_ids")
    if position_ids is None:
        position_ids = torch.arange(input_ids.shape[1], device=input_ids.device)[None]  # (1, T)
    positions = deberta.embeddings.position_embeddings(position_ids.long())  # z_states, raw (`bert.py:253`)
    states = enhanced_mask_decoder(deberta, keys, inputs.get("attention_mask"), positions, at if subset else None)
    return states if subset else states.flatten(0, 1).index_select(0, at)


class BertologyDebertaV3ForPreTraining(PreTrainingModel, DebertaV2PreTrainedModel):
    config_class = BertologyDebertaV3Config

    def __init__(self, config: BertologyDebertaV3Config):
        if not isinstance(config, BertologyDebertaV3Config):
            # e.g. a plain DebertaV2Config from AutoConfig under trust_remote_code: recipe fields are attributes.
            config = BertologyDebertaV3Config(**config.to_dict())
        super().__init__(config)
        self.deberta = DebertaV2Model(config)
        self.mask_predictions = ClsReplacedTokenDetectionHead(config)
        self.generator = DebertaV2ForMaskedLM(generator_config(config))
        embeddings = self.generator.deberta.embeddings
        if embeddings.position_embeddings is None:
            # EMD's absolute positions: every official DeBERTa has this table (`bert.py:232`), used by EMD only
            embeddings.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        # -- embedding sharing: the only lines where GDES, ES and NES differ ------------------------------------
        shared = [WORD_EMBEDDINGS] + ([POSITION_TABLE] if config.position_biased_input else [])
        self._tied_weights_keys = {}
        if config.embedding_sharing == "es":  # one table, trained by both losses (`rtd_task.py:123-130`)
            self._tied_weights_keys = {f"generator.deberta.{name}": f"deberta.{name}" for name in shared}
        if config.embedding_sharing == "gdes":  # the position table too where the input adds one (`rtd_task.py:59-64`)
            add_gdes(self, WORD_EMBEDDINGS, share_positions=config.position_biased_input)
        # the generator's states: EMD's; its head; the discriminator's [CLS]-reading head; each network clipped apart
        generator = Generator(config, "deberta-v2", generator_states, clips_apart=True)
        self.objectives = (generator, rtd_objective(config, "mask_predictions"))
        self.post_init()  # after every submodule exists: expands the tied keys and ties the shared table
        freeze_gdes_slots(self)

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        loaded = super().from_pretrained(*args, **kwargs)
        freeze_gdes_slots(loaded[0] if isinstance(loaded, tuple) else loaded)  # loading makes new Parameters
        return loaded

    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, GradientDisentangledEmbedding):
            nn.init.zeros_(module.delta)

    def gradient_clipping_groups(self) -> list[list[nn.Parameter]]:
        """The parameters whose gradient norms are clipped apart (`BertologyTrainer`): the generator's, then the
        discriminator's (with `mask_predictions` and GDES's Δ). Officially each network has its own optimizer, which
        clips its own global norm (`rtd_task.py:265,351`, `DeBERTa/optims/args.py:69-72`). A table shared under
        "es" goes with the generator, whose parameter it is officially (`rtd_task.py:126`)."""
        return clipping_groups(self)

    def gdes_pairs(self) -> list[tuple[nn.Parameter, nn.Parameter, nn.Parameter]]:
        return gdes_pairs(self)

    def discriminate(self, input_ids, **inputs):
        return discriminate(self, input_ids, **inputs)  # under GDES, on sg(E_G) + Δ

    def encode(self, input_ids, inputs):
        return self.discriminate(input_ids, **inputs)

    def forward(self, input_ids=None, attention_mask=None, *, labels=None, **inputs):
        """`input_ids`: the generator's input, `[MASK]` at the chosen positions; `labels`: the originals there.
        Without labels only the discriminator runs. `step.pretraining_step`."""
        return pretraining_step(self, input_ids, attention_mask, {"labels": labels}, **inputs)
