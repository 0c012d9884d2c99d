"""Trainer callbacks that a recipe's config asks for (`callbacks_for(model)` picks them).

- `ElectraTwoStageCallback`: ELECTRA's two-stage training (Clark et al. 2020, §3.2 "Two-Stage ELECTRA"): train only
  the generator (masked LM) for `config.two_stage_generator_steps` optimizer steps, then initialise the
  discriminator from the generator's weights and train the discriminator with the generator frozen. The paper
  reports it below joint training; it is here to reproduce that comparison.
"""

from __future__ import annotations

from transformers import TrainerCallback


class ElectraTwoStageCallback(TrainerCallback):
    """Switches a `BertologyElectraForPreTraining` from the generator stage to the discriminator stage.

    The switch happens at the start of optimizer step `two_stage_generator_steps` (counted from 0). A run resumed
    from a checkpoint taken after the switch only freezes the generator again: the discriminator's trained weights
    in the checkpoint must not be overwritten by a second copy.
    """

    @staticmethod
    def _unwrap(model):
        return getattr(model, "module", model)

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        model = self._unwrap(model)
        switch_at = model.config.two_stage_generator_steps
        if state.global_step > switch_at and model.training_stage != "discriminator":
            model.start_discriminator_stage(initialize=False)

    def on_step_begin(self, args, state, control, model=None, **kwargs):
        model = self._unwrap(model)
        if state.global_step == model.config.two_stage_generator_steps and model.training_stage != "discriminator":
            model.start_discriminator_stage(initialize=True)


def callbacks_for(model) -> list[TrainerCallback]:
    """The callbacks `model`'s config asks for (none for most recipes)."""
    callbacks: list[TrainerCallback] = []
    if getattr(model.config, "two_stage_generator_steps", None) is not None and hasattr(
        model, "start_discriminator_stage"
    ):
        callbacks.append(ElectraTwoStageCallback())
    return callbacks
