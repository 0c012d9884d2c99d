"""The end of a run: the Hub-format folder, its model card, `all_results.json` and the push."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from ..export import write_part_folders
from ..hub import push_from_training_args, save_folder, write_model_card
from ..recipes import Recipe
from ..utils import logger
from .arguments import DataArguments
from .checkpoints import apply_umask
from .corpora import describe_corpus


def write_outputs(trainer, recipe: Recipe, data_args: DataArguments, metrics: dict, push_args=None) -> None:
    """The Hub-format folder, its model card and `all_results.json`, pushed with `--push_to_hub`: one process
    writes them, the others wait until they are complete."""
    if trainer.is_world_process_zero():
        output_dir = trainer.args.output_dir
        save_folder(trainer.model, trainer.processing_class, output_dir)
        card = dict(recipe=recipe.name, variant=recipe.variant, corpus=describe_corpus(data_args))
        write_part_folders(
            trainer.model, trainer.processing_class, output_dir, **card, dataset_name=data_args.dataset_name
        )
        apply_umask(output_dir)  # safetensors writes 0600
        shutil.rmtree(Path(output_dir) / "tokenizer-trained", ignore_errors=True)  # the ranks' hand-over copy
        train_logs = [log for log in trainer.state.log_history if "loss" in log]
        final_losses = {k: v for k, v in (train_logs[-1] if train_logs else {}).items() if k.endswith("loss")}
        if not final_losses and "train_loss" in metrics:  # a run shorter than --logging_steps: its mean loss
            final_losses = {"train_loss (mean)": metrics["train_loss"]}
        pushing = push_args is not None and push_args.push_to_hub
        write_model_card(
            output_dir,
            trainer.model,
            recipe=recipe.name,
            variant=recipe.variant,
            corpus=describe_corpus(data_args),
            steps=trainer.state.global_step,
            tokens_seen=int(trainer.state.num_input_tokens_seen or 0),
            final_losses=final_losses,
            plain_auto_class=recipe.plain_auto_class,
            dataset_name=data_args.dataset_name,
            repo_id=(push_args.hub_model_id or Path(output_dir).absolute().name) if pushing else None,
        )
        with open(os.path.join(output_dir, "all_results.json"), "w") as handle:
            json.dump(metrics, handle, indent=2)
        logger.info("wrote %s", output_dir)
        commit_url = push_from_training_args(output_dir, push_args) if pushing else None
        if commit_url:
            logger.info("pushed to %s", commit_url)
    trainer.accelerator.wait_for_everyone()
