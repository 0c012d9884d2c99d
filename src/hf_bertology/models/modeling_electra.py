"""ELECTRA pretraining: a generator (masked LM) and a discriminator (replaced-token detection), trained jointly.

Follows google-research/electra `run_pretraining.py` (docs/recipes/electra.md): the generator predicts the chosen
tokens, every chosen token is replaced by a sample of its softmax, and the discriminator tells every real token
original or replaced; `loss = generator_weight * mlm + discriminator_weight * rtd` (1 and 50). The step's parts are
`replaced_token_detection`'s. Both networks keep plain `transformers` names: the discriminator is
`ElectraForPreTraining`'s (`electra.*`, `discriminator_predictions.*`), the generator an `ElectraForMaskedLM` at
`generator.*`; the embeddings are the same `Parameter`s in both (official: shared `electra/embeddings`).
"""

import torch
from transformers import ElectraForMaskedLM, ElectraModel, ElectraPreTrainedModel
from transformers import initialization as init
from transformers.models.electra.modeling_electra import ElectraDiscriminatorPredictions

from .configuration_electra import BertologyElectraConfig
from .configuration_recipe import generator_config
from .replaced_token_detection import Generator, rtd_objective
from .step import PreTrainingModel, pretraining_step

# Parameters the two networks share (paper §3.2 "tie token embeddings"; official: shared `electra/embeddings`).
SHARED_EMBEDDINGS = (
    "embeddings.word_embeddings.weight",
    "embeddings.position_embeddings.weight",
    "embeddings.token_type_embeddings.weight",
    "embeddings.LayerNorm.weight",
    "embeddings.LayerNorm.bias",
)
# Dense layers the official code builds without `kernel_initializer`: TensorFlow's default Glorot uniform.
GLOROT_UNIFORM_LAYERS = (
    "electra.embeddings_project",
    "generator.electra.embeddings_project",
    "discriminator_predictions.dense_prediction",
)


class BertologyElectraForPreTraining(PreTrainingModel, ElectraPreTrainedModel):
    config_class = BertologyElectraConfig
    # target -> source: the generator's embeddings (and its output layer) are the discriminator's.
    _tied_weights_keys = {
        **{f"generator.electra.{name}": f"electra.{name}" for name in SHARED_EMBEDDINGS},
        "generator.generator_lm_head.weight": "electra.embeddings.word_embeddings.weight",
    }

    def __init__(self, config: BertologyElectraConfig):
        if not isinstance(config, BertologyElectraConfig):
            # e.g. a plain ElectraConfig from AutoConfig under trust_remote_code: recipe fields are attributes.
            config = BertologyElectraConfig(**config.to_dict())
        super().__init__(config)
        self.electra = ElectraModel(config)
        self.discriminator_predictions = ElectraDiscriminatorPredictions(config)
        gen_config = generator_config(config)
        # Tied at this level (to the discriminator's table); ElectraForMaskedLM's own tie would point at a target.
        gen_config.tie_word_embeddings = False
        self.generator = ElectraForMaskedLM(gen_config)
        self.training_stage = "joint" if config.two_stage_generator_steps is None else "generator"
        self.objectives = (Generator(config, "electra"), rtd_objective(config))
        self.post_init()  # after every submodule exists: expands the tied keys and ties the shared embeddings

    def _initialize_weights(self, module, is_custom_code: bool = False):
        # transformers skips a custom-code module without parameters of its own (this top model): ours must run.
        super()._initialize_weights(module, is_custom_code=is_custom_code and module is not self)

    def _init_weights(self, module):
        super()._init_weights(module)
        # Last in `initialize_weights` (depth-first), after the sub-models `electra` and `generator` set their own.
        if module is self:
            for name, layer in self.named_modules():
                if name in GLOROT_UNIFORM_LAYERS:
                    init.xavier_uniform_(layer.weight)  # skips weights `from_pretrained` loaded
                    init.zeros_(layer.bias)

    def get_output_embeddings(self):
        return self.generator.generator_lm_head

    def set_output_embeddings(self, new_embeddings):
        self.generator.generator_lm_head = new_embeddings

    # -- two-stage training (paper §3.2) ---------------------------------------------------------------------
    def start_discriminator_stage(self, initialize: bool = True) -> None:
        """Switch from training the generator alone to training the discriminator with the generator frozen.

        `initialize=True` copies the generator's transformer weights into the discriminator (the embeddings are
        already shared); `False` only freezes (resuming from a checkpoint taken after the switch). The shared
        embeddings stay trainable: they are the discriminator's input layer.
        """
        sizes = ("hidden_size", "intermediate_size", "num_attention_heads", "num_hidden_layers")
        generator_sizes = [getattr(self.generator.config, name) for name in sizes]
        discriminator_sizes = [getattr(self.config, name) for name in sizes]
        if generator_sizes != discriminator_sizes:
            raise ValueError(
                "two-stage training initialises the discriminator from the generator, so both must have the same "
                f"size ({', '.join(sizes)}: generator {generator_sizes}, discriminator {discriminator_sizes}); "
                "set generator_hidden_fraction=1.0"
            )
        if initialize:
            source = {k: v for k, v in self.generator.electra.state_dict().items() if k not in SHARED_EMBEDDINGS}
            with torch.no_grad():
                missing, unexpected = self.electra.load_state_dict(source, strict=False)
            if unexpected or set(missing) - set(SHARED_EMBEDDINGS):
                raise ValueError(f"generator and discriminator differ: missing {missing}, unexpected {unexpected}")
        shared = {id(p) for p in self.electra.embeddings.parameters()}
        for param in self.generator.parameters():
            if id(param) not in shared:
                param.requires_grad_(False)
        self.training_stage = "discriminator"

    def forward(self, input_ids=None, attention_mask=None, *, labels=None, **inputs):
        """`input_ids`: the generator's input, `[MASK]` at 85% of the chosen positions; `labels`: the originals
        there. Without labels only the discriminator runs (as `ElectraForPreTraining`). `step.pretraining_step`."""
        return pretraining_step(self, input_ids, attention_mask, {"labels": labels}, **inputs)
