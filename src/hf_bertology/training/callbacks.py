"""Trainer callbacks that a recipe's config asks for (`callbacks_for(model, networks)` picks them).

- `ElectraTwoStageCallback`: ELECTRA's two-stage training (Clark et al. 2020, §3.2 "Two-Stage ELECTRA"; reported
  below joint training, here to reproduce that comparison): a joint model trains only its generator for
  `config.two_stage_generator_steps` optimizer steps, then its discriminator, initialised from the generator, with
  the generator frozen (docs/recipes/electra.md).
- `SaveOnInterrupt`: Ctrl-C (SIGINT) or a scheduler's SIGTERM ends training at the end of the current step with a
  complete checkpoint, so that `--resume_from_checkpoint last` goes on from there instead of from the last
  `save_steps` multiple (`bertology pretrain` adds it to every single-process run).
"""

from __future__ import annotations

import signal
import threading

from transformers import TrainerCallback

from ..utils import logger


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


class SaveOnInterrupt(TrainerCallback):
    """The first SIGINT/SIGTERM during training asks the Trainer to save a checkpoint at the end of the current step
    and stop (`interrupted` then holds the step); a second SIGINT interrupts at once, as without this callback.

    Single-process runs only: the ranks of a multi-process job would see the signal at different steps and save at
    different ones (agreeing would cost a collective every step); they keep `save_steps`.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.interrupted: int | None = None
        self.signal_name: str | None = None
        self._previous: dict = {}

    def _handle(self, signum, frame):
        if self.signal_name is not None and signum == signal.SIGINT:  # the second Ctrl-C: stop now
            raise KeyboardInterrupt
        self.signal_name = signal.Signals(signum).name
        logger.warning("%s: saving a checkpoint at the end of this step (Ctrl-C again to stop now)", self.signal_name)

    def on_train_begin(self, args, state, control, **kwargs):
        if args.world_size == 1 and threading.current_thread() is threading.main_thread():
            self._previous = {signum: signal.signal(signum, self._handle) for signum in self.SIGNALS}

    def on_step_end(self, args, state, control, **kwargs):
        if self.signal_name is not None and self.interrupted is None:
            self.interrupted = state.global_step
            control.should_save = True
            control.should_training_stop = True

    def restore(self) -> None:
        """Put the previous handlers back (at the end of training, and after a training that raised)."""
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def on_train_end(self, args, state, control, **kwargs):
        self.restore()


def callbacks_for(model, networks: tuple = ()) -> list[TrainerCallback]:
    """The callbacks `model`'s config asks for (none for most recipes); `networks`: the model's when it holds two
    (`Recipe.networks`)."""
    callbacks: list[TrainerCallback] = []
    if getattr(model.config, "two_stage_generator_steps", None) is not None and networks:
        callbacks.append(ElectraTwoStageCallback())
    return callbacks
