"""The output folder of a run: resume its newest complete checkpoint, refuse an old run under a new one, stop a run
that is already finished."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from transformers import TrainingArguments

from ..recipes.backbones import SIZE_FIELDS
from ..recipes.networks import kind_of
from ..recipes.recipe import Recipe
from ..utils import BertologyError, logger
from .arguments import DataArguments
from .checkpoints import check_checkpoint, finished_step, list_checkpoints, newest_complete
from .run_recipe import check_family

RESUME_LAST = ("true", "last", "latest", "yes")
FINAL_FILES = ("model.safetensors", "all_results.json")  # a finished run's folder holds these at its top


def resolve_resume(value: str | None, output_dir: str, world_size: int | None = None) -> str | None:
    """`--resume_from_checkpoint`: a checkpoint folder, or `true`/`last` for the newest *complete* checkpoint in
    output_dir (none yet: start from scratch, so one command line both starts and resumes a preemptible job).
    Completeness, damage and the process count are `checkpoints`' to judge; the folders `last` skips are named."""
    if value is None or str(value).lower() in ("", "false", "none", "no"):
        return None
    if str(value).lower() in RESUME_LAST:
        checkpoint, skipped = newest_complete(output_dir)
        if skipped:
            logger.warning("skipped %s", "; ".join(f"{path.name}: {reason}" for path, reason in skipped))
        if checkpoint is None:
            if not any((Path(output_dir) / name).exists() for name in FINAL_FILES):  # else check_output_dir refuses
                logger.warning("no complete checkpoint in %s yet: training from scratch", output_dir)
            return None
        check_checkpoint(checkpoint, world_size)
        logger.info("resuming from %s", checkpoint)
        return str(checkpoint)
    if not Path(value).is_dir():
        raise BertologyError(f"--resume_from_checkpoint {value}: no such checkpoint folder")
    if not (Path(value) / "trainer_state.json").exists() and (
        (Path(value) / "all_results.json").exists() or list_checkpoints(value)
    ):
        raise BertologyError(
            f"--resume_from_checkpoint {value}: a run's output folder, not a checkpoint; pass one of its "
            f"checkpoint-N folders, `last` with --output_dir {value}, or --model_name_or_path {value} to start a "
            "new run from its weights"
        )
    check_checkpoint(value, world_size)
    return value


def already_finished(resume_from: str | None, training_args: TrainingArguments) -> dict | None:
    """A finished run asked to resume with the same (or a smaller) `--max_steps`: nothing to train. Says so, and
    returns the run's metrics (its `all_results.json`); None when there is training to do, or when the final folder
    of that step is missing (its writing was stopped, e.g. by a full disk): the Trainer then trains nothing and it
    is written."""
    step = finished_step(resume_from, training_args.max_steps) if resume_from else None
    if step is None:
        return None
    try:
        results = json.loads((Path(training_args.output_dir) / "all_results.json").read_text())
    except (OSError, ValueError):
        results = None
    # no final folder of this step (a full disk stopped its writing): the Trainer resumes, trains nothing, writes it
    if not isinstance(results, dict) or results.get("global_step", step) < step:
        logger.warning("%s is at step %d: nothing to train; writing the final folder of that step", resume_from, step)
        return None
    logger.warning(
        "%s is at step %d and --max_steps is %d: nothing to train (raise --max_steps to continue)",
        resume_from,
        step,
        training_args.max_steps,
    )
    return results


def check_resume(checkpoint: str, recipe: Recipe) -> None:
    """The checkpoint to resume holds this recipe's model: another family, objective or size would fail deep in
    `load_state_dict` or the optimizer's state (`parameter group that doesn't match`)."""
    check_family(checkpoint, recipe, kind_of(checkpoint))
    saved = json.loads((Path(checkpoint) / "config.json").read_text())
    for key in SIZE_FIELDS:
        if key in saved and saved[key] != getattr(recipe.config, key, None):
            raise BertologyError(
                f"{checkpoint} holds another model ({key}={saved[key]}, --recipe {recipe.name} has "
                f"{getattr(recipe.config, key, None)}): resume it with the recipe and --config_overrides it was "
                "started with"
            )


def check_output_dir(data_args: DataArguments, training_args: TrainingArguments, resume_from: str | None) -> None:
    """A new run (not resuming) in a folder that holds a run is refused, as run_mlm.py does: its checkpoints would
    sit beside the new ones, and `--resume_from_checkpoint last` could later pick the old run's. With
    `--overwrite_output_dir` the old checkpoints are removed (the final files are written over)."""
    output_dir = Path(training_args.output_dir)
    old = [p.name for p in list_checkpoints(output_dir)]
    final = [name for name in FINAL_FILES if (output_dir / name).exists()]
    old += final
    asked_last = str(training_args.resume_from_checkpoint).lower() in RESUME_LAST
    # `--resume_from_checkpoint last` with no complete checkpoint starts over by design (one command line starts and
    # restarts a job); the checkpoints it could mix with are incomplete ones, which `last` never picks. But never
    # over a finished model: after an upgrade or a damaged disk, the documented line would train it away.
    if resume_from is not None or not old or (asked_last and not final):
        return
    if not data_args.overwrite_output_dir and asked_last:
        raise finished_model_refusal(output_dir, final)
    if not data_args.overwrite_output_dir:
        raise BertologyError(
            f"{output_dir} already holds a run ({', '.join(old[:3])}): resume it with --resume_from_checkpoint last, "
            "or pass --overwrite_output_dir to start over"
        )
    with training_args.main_process_first(desc="clearing the old run"):
        if training_args.process_index == 0:
            for checkpoint in list_checkpoints(output_dir):
                shutil.rmtree(checkpoint)
            logger.warning("--overwrite_output_dir: removed the old run's checkpoints in %s", output_dir)


def finished_model_refusal(output_dir: Path, final: list[str]) -> BertologyError:
    """`last` in a folder whose run finished, with no checkpoint that verifies: the one line naming what was skipped
    (an older hf_bertology's checkpoints named as such) and how to go on."""
    _, skipped = newest_complete(output_dir)
    older = [
        path.name for path, reason in skipped if "older hf_bertology" in reason or "no completion marker" in reason
    ]
    found = "; ".join(f"{path.name}: {reason}" for path, reason in skipped) or "no checkpoint-N folder"
    hint = (
        f"; {', '.join(older)} may be an older hf_bertology's (no digests): resume with that version, or start from "
        f"its weights with --model_name_or_path {output_dir / older[0]}"
        if older
        else ""
    )
    return BertologyError(
        f"{output_dir} holds a finished model ({', '.join(final)}) and no checkpoint that can be resumed ({found}): "
        "--resume_from_checkpoint last would train from scratch and write over it. Pass --overwrite_output_dir to "
        f"start over, or --model_name_or_path {output_dir} with another --output_dir to go on from the model{hint}"
    )
