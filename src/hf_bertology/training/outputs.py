"""The end of a run: the Hub-format folder, its model card, `all_results.json` and the push.

The folder is written aside (`OUTPUT_DIR/.final-partial`) and moved into place once whole, as checkpoints are
marked once whole: a write stopped by a full disk leaves no `config.json` without weights looking like a model, and
the previous final folder, if any, stays as it was."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from ..hub.cards import write_model_card
from ..hub.folders import save_folder
from ..hub.push import push_from_training_args
from ..joint import write_part_folders
from ..recipes.recipe import Recipe
from ..utils import BertologyError, logger
from .arguments import DataArguments
from .checkpoints import apply_umask, fsync_dir, last_complete_checkpoint, write_failure
from .corpora import card_dataset, describe_corpus
from .global_batch import BatchPlan

ASIDE = ".final-partial"
LAST = ("config.json", "model.safetensors", "all_results.json")  # moved in last: what makes the folder look finished


def write_outputs(trainer, recipe: Recipe, data_args: DataArguments, metrics: dict, push_args=None) -> None:
    """The Hub-format folder, its model card and `all_results.json`, pushed with `--push_to_hub`: one process
    writes them, the others wait until they are complete."""
    if trainer.is_world_process_zero():
        output_dir = Path(trainer.args.output_dir)
        aside = output_dir / ASIDE
        shutil.rmtree(aside, ignore_errors=True)  # an earlier run's, stopped while writing
        try:
            write_final_folder(trainer, recipe, data_args, metrics, push_args, aside, output_dir)
        except Exception as err:
            if write_failure(err) is None:
                raise
            shutil.rmtree(aside, ignore_errors=True)
            raise final_write_failed(output_dir, err) from None
        move_into_place(aside, output_dir)
        logger.info("wrote %s", output_dir)
        pushing = push_args is not None and push_args.push_to_hub
        commit_url = push_from_training_args(output_dir, push_args) if pushing else None
        if commit_url:
            logger.info("pushed to %s", commit_url)
    trainer.accelerator.wait_for_everyone()


def write_final_folder(trainer, recipe, data_args, metrics, push_args, folder: Path, shown_as: Path) -> None:
    """Every file of the final folder, written into `folder`: a joint model's part folders, then the folder itself
    and its card, which names them; the cards name `shown_as`, where it will be."""
    continued = getattr(trainer.model, "continued_from", ())  # run_recipe.build_model: the card's base_model
    card = dict(
        recipe=recipe.name, variant=recipe.variant_name, corpus=describe_corpus(data_args), base_model=continued
    )
    write_part_folders(
        trainer.model,
        recipe.networks,
        trainer.processing_class,
        folder,
        shown_in=shown_as,
        **card,
        dataset_name=card_dataset(data_args),
    )
    save_folder(trainer.model, trainer.processing_class, folder, recipe.networks)
    train_logs = [log for log in trainer.state.log_history if "loss" in log]
    final_losses = {k: v for k, v in (train_logs[-1] if train_logs else {}).items() if k.endswith("loss")}
    if not final_losses and "train_loss" in metrics:  # a run shorter than --logging_steps: its mean loss
        final_losses = {"train_loss (mean)": metrics["train_loss"]}
    pushing = push_args is not None and push_args.push_to_hub
    write_model_card(
        folder,
        trainer.model,
        recipe=recipe.name,
        variant=recipe.variant_name,
        corpus=describe_corpus(data_args),
        steps=trainer.state.global_step,
        tokens_seen=int(trainer.state.num_input_tokens_seen or 0),
        final_losses=final_losses,
        plain_auto_class=recipe.plain_auto_class,
        dataset_name=card_dataset(data_args),
        repo_id=(push_args.hub_model_id or shown_as.absolute().name) if pushing else None,
        shown_as=shown_as,
        networks=recipe.networks,
        base_model=continued,
        batch=run_batch(trainer.args).line(),
    )
    # the run's arguments, global batch included, readable without unpickling (tokens masked by `to_json_string`)
    (folder / "training_args.json").write_text(trainer.args.to_json_string())
    with open(folder / "all_results.json", "w") as handle:
        json.dump(metrics, handle, indent=2)
        handle.flush()
        os.fsync(handle.fileno())
    apply_umask(folder)  # safetensors writes 0600


def run_batch(args) -> BatchPlan:
    """The global batch the run's steps had: per-device micro-batch x processes x accumulation."""
    return BatchPlan(args.per_device_train_batch_size, args.world_size, args.gradient_accumulation_steps)


def move_into_place(aside: Path, output_dir: Path) -> None:
    """Move every entry of `aside` into `output_dir` (renames: no data is written), the files that make a folder
    look finished last; an older final folder's entries are replaced, its subfolders removed once replaced."""
    fsync_dir(aside)
    names = sorted(os.listdir(aside), key=lambda name: (name in LAST, LAST.index(name) if name in LAST else 0, name))
    for name in names:
        target = output_dir / name
        if target.is_dir() and not target.is_symlink():
            old = output_dir / f"{ASIDE}-old-{name}"
            shutil.rmtree(old, ignore_errors=True)
            os.replace(target, old)
            os.replace(aside / name, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(aside / name, target)
    aside.rmdir()
    fsync_dir(output_dir)


def final_write_failed(output_dir: Path, err: BaseException) -> BertologyError:
    """The one line for a final folder that could not be written (disk full, quota, permissions)."""
    checkpoint = last_complete_checkpoint(output_dir)
    kept = (
        f"the trained weights are in {checkpoint} (complete)"
        if checkpoint is not None
        else "no checkpoint holds the trained weights (--save_strategy)"
    )
    return BertologyError(
        f"could not write the final model to {output_dir} ({write_failure(err)}); nothing of it was left there and "
        f"any earlier final model there is untouched; {kept}: free some space and run again"
    )
