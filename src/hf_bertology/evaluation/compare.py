"""`bertology compare`: which pretraining objective learns the most per unit of compute, on your corpus.

    bertology compare --recipes electra-mini,bert-mini,roberta-mini --train_file corpus/ --budget_minutes 15 \\
        --glue_tasks sst2,cola,stsb --glue_data_dir glue_data --output_dir runs/compare

Every recipe is pretrained (`training.pretrain.main`) on the same corpus, tokenizer settings and seed for the same
budget (`--budget_flops`, counted by `training.budget`, or `--budget_minutes`), with a schedule that follows the
budget; each model and a random-init baseline is then fine-tuned on the GLUE tasks with the same settings
(`evaluation.glue.run.main`), and `report.md`, `results.json` and two plots are written (`compare_report`).
Finished work is found from its results file and not run again; a recipe stopped mid-budget resumes from its newest
complete checkpoint. Settings, output and what it measured: docs/compare.md.
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..recipes.registry import get_recipe
from ..training.input_checks import MIN_SEQ_LENGTH, SEED_LIMIT, check_counts, check_range
from ..utils import BertologyError, argument_parser, logger, parse_arguments, run_command, set_verbosity
from .compare_report import BASELINE, make_plots, report_markdown
from .glue import run as glue_run
from .glue.results import task_score
from .glue.tasks import GLUE_TASKS, get_task

PRETRAIN_RESULTS = "compare_pretrain.json"
PRETRAIN_STARTED = "compare_started.json"  # settings of a pretraining run that has not finished yet
FINETUNE_SETTINGS = "compare_finetune.json"


@dataclass
class CompareArguments:
    recipes: str = field(metadata={"help": "Comma-separated recipes to compare, e.g. `electra-mini,bert-mini`."})
    output_dir: str = field(metadata={"help": "Where the models, fine-tuning runs, report and plots go."})
    train_file: list[str] | None = field(
        default=None,
        metadata={"help": "Pretraining corpus: text, WikiExtractor or .jsonl files, globs, dirs.", "nargs": "+"},
    )
    dataset_name: str | None = field(default=None, metadata={"help": "Hub dataset for pretraining, e.g. `wikitext`."})
    dataset_config_name: str | None = field(default=None, metadata={"help": "e.g. `wikitext-2-raw-v1`."})
    budget_flops: float | None = field(
        default=None, metadata={"help": "Training FLOPs per recipe (e.g. 1e15), counted from real tokens."}
    )
    budget_minutes: float | None = field(default=None, metadata={"help": "Wall minutes of training per recipe."})
    glue_tasks: str = field(default="sst2,cola,stsb", metadata={"help": "Comma-separated GLUE tasks ('' for none)."})
    glue_data_dir: str | None = field(
        default=None, metadata={"help": "GLUE root folder (glue_data/) holding SST-2/, CoLA/, STS-B/, ..."}
    )
    baseline: str | None = field(
        default=None,
        metadata={
            "help": "Recipe (one of --recipes) whose architecture and tokenizer the random-init baseline uses; "
            "default the first recipe; `none` for no baseline."
        },
    )
    vocab_size: int | None = field(
        default=None, metadata={"help": "Vocabulary size of every recipe's tokenizer (default: the first recipe's)."}
    )
    max_seq_length: int | None = field(
        default=None, metadata={"help": "Pretraining sequence length of every recipe (default: the first recipe's)."}
    )
    tokenizer_train_samples: int | None = field(
        default=None, metadata={"help": "Train each tokenizer on at most this many documents."}
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Keep this many pretraining examples."})
    preprocessing_num_workers: int | None = field(default=None, metadata={"help": "Processes for `datasets.map`."})
    seed: int = field(default=42, metadata={"help": "Seed of every pretraining and fine-tuning run."})
    glue_seeds: str | None = field(
        default=None,
        metadata={
            "help": "Comma-separated fine-tuning seeds, e.g. `42,43,44` (default: --seed). With more than one, each "
            "model is fine-tuned once per seed and the report gives each task's mean ± standard error over them."
        },
    )
    logging_steps: int = field(default=10, metadata={"help": "Pretraining loss is logged (and plotted) this often."})
    warmup_fraction: float = field(default=0.06, metadata={"help": "Share of the budget spent warming up the lr."})
    budget_schedule: bool = field(
        default=True,
        metadata={"help": "Warmup/decay the lr over the budget; with False the recipes' own step schedules apply."},
    )
    pretrain_max_steps: int = field(
        default=1_000_000, metadata={"help": "Safety cap on optimizer steps (the budget normally stops first)."}
    )
    pretrain_args: str | None = field(
        default=None, metadata={"help": "Extra `bertology pretrain` flags for every recipe, as one quoted string."}
    )
    checkpoint_steps: int = field(
        default=200,
        metadata={"help": "Checkpoint pretraining every N steps so an interrupted recipe resumes (0: never)."},
    )
    glue_epochs: float = field(default=3.0, metadata={"help": "Fine-tuning epochs."})
    glue_learning_rate: float = field(
        default=1e-4, metadata={"help": "Fine-tuning lr (small models fine-tune best higher than BERT-base's 2e-5)."}
    )
    glue_batch_size: int = field(default=32, metadata={"help": "Fine-tuning batch size."})
    glue_max_seq_length: int = field(default=128, metadata={"help": "Fine-tuning max length."})
    glue_max_train_samples: int | None = field(default=None, metadata={"help": "Fine-tune on the first N examples."})
    glue_max_eval_samples: int | None = field(default=None, metadata={"help": "Evaluate on the first N examples."})
    glue_args: str | None = field(
        default=None, metadata={"help": "Extra `bertology glue` flags for every run, as one quoted string."}
    )


def parse_args(argv: list[str]) -> CompareArguments:
    (args,) = parse_arguments(argument_parser(CompareArguments, "bertology compare"), argv)
    return args


def _split(text: str | None) -> list[str]:
    return [item.strip() for item in (text or "").split(",") if item.strip()]


def check_ranges(args: CompareArguments) -> None:
    """Every count and rate in range (docs/bad_input.md); a budget that is not finite is refused too."""
    check_range("--budget_flops", args.budget_flops, 0, low_open=True)
    check_range("--budget_minutes", args.budget_minutes, 0, low_open=True)
    check_counts(
        {
            "--pretrain_max_steps": args.pretrain_max_steps,
            "--logging_steps": args.logging_steps,
            "--glue_batch_size": args.glue_batch_size,
            "--vocab_size": args.vocab_size,
            "--tokenizer_train_samples": args.tokenizer_train_samples,
            "--max_train_samples": args.max_train_samples,
            "--glue_max_train_samples": args.glue_max_train_samples,
            "--glue_max_eval_samples": args.glue_max_eval_samples,
        }
    )
    check_range("--max_seq_length", args.max_seq_length, MIN_SEQ_LENGTH)
    check_range("--glue_max_seq_length", args.glue_max_seq_length, 4)
    check_range("--checkpoint_steps", args.checkpoint_steps, 0, hint=" (0: never)")
    check_range("--preprocessing_num_workers", args.preprocessing_num_workers, 0)
    check_range("--seed", args.seed, 0, SEED_LIMIT, high_open=True)
    for seed in glue_seeds(args):
        check_range("--glue_seeds", seed, 0, SEED_LIMIT, high_open=True)
    check_range("--warmup_fraction", args.warmup_fraction, 0, 1, high_open=True)
    check_range("--glue_epochs", args.glue_epochs, 0, low_open=True)
    check_range("--glue_learning_rate", args.glue_learning_rate, 0, low_open=True)
    for flag in ("pretrain_args", "glue_args"):
        if "--hub_token" in (getattr(args, flag) or ""):
            raise BertologyError(
                f"--{flag} holds a --hub_token, which the comparison's settings files would keep: set HF_TOKEN or "
                "run `hf auth login` instead"
            )


def glue_seeds(args: CompareArguments) -> list[int]:
    """The fine-tuning seeds: `--glue_seeds`, or `--seed` alone."""
    if args.glue_seeds is None:
        return [args.seed]
    try:
        seeds = [int(seed) for seed in _split(args.glue_seeds)]
    except ValueError:
        raise BertologyError(f"--glue_seeds takes comma-separated integers, got {args.glue_seeds!r}") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise BertologyError(f"--glue_seeds needs distinct seeds, got {args.glue_seeds!r}")
    return seeds


def check_args(args: CompareArguments) -> tuple[list[str], list[str], str | None]:
    """(recipes, GLUE tasks, baseline recipe or None), with every user mistake as one BertologyError."""
    recipes = _split(args.recipes)
    if not recipes:
        raise BertologyError("--recipes needs at least one recipe")
    if len(set(recipes)) != len(recipes):
        raise BertologyError(f"--recipes lists a recipe twice: {args.recipes}")
    for name in recipes:
        get_recipe(name)  # unknown names fail here, before any work
    if (args.budget_flops is None) == (args.budget_minutes is None):
        raise BertologyError("give exactly one budget: --budget_flops F or --budget_minutes M")
    if (args.budget_flops or args.budget_minutes) <= 0:
        raise BertologyError("the budget must be positive")
    check_ranges(args)
    if not (args.train_file or args.dataset_name):
        raise BertologyError("give the pretraining corpus: --train_file FILE… or --dataset_name NAME")
    tasks = [get_task(name).name for name in _split(args.glue_tasks)]
    if tasks:
        if not args.glue_data_dir:
            raise BertologyError("--glue_tasks needs --glue_data_dir (the GLUE root folder)")
        for name in tasks:
            folder = Path(args.glue_data_dir) / GLUE_TASKS[name].folder
            if not folder.is_dir():
                raise BertologyError(f"GLUE task folder not found: {folder}")
    baseline = args.baseline or recipes[0]
    if baseline.lower() != "none" and baseline not in recipes:
        raise BertologyError(f"--baseline {baseline} must be one of --recipes ({', '.join(recipes)}) or `none`")
    if baseline.lower() == "none" or not tasks:  # the random-init baseline is a GLUE score: none without tasks
        baseline = None
    return recipes, tasks, baseline


# --------------------------------------------------------------------------------------------------------------------
# Pretraining one recipe at the budget
# --------------------------------------------------------------------------------------------------------------------
def pretrain_recipe(args: CompareArguments, name: str, vocab_size: int, max_seq_length: int) -> dict[str, Any]:
    """Pretrain `name` until the budget is spent; returns (and writes) its compare_pretrain.json record."""
    import time

    from ..training import pretrain
    from ..training.budget import ComputeBudgetCallback

    out = Path(args.output_dir) / "pretrain" / name
    budget = ComputeBudgetCallback(
        budget_flops=args.budget_flops,
        budget_seconds=None if args.budget_minutes is None else 60 * args.budget_minutes,
        schedule=args.budget_schedule,
        warmup_fraction=args.warmup_fraction,
        description=f"pretraining {name}",
    )
    argv = ["--recipe", name, "--output_dir", str(out)]
    if args.train_file:
        argv += ["--train_file", *args.train_file]
    for flag in ("dataset_name", "dataset_config_name", "tokenizer_train_samples", "max_train_samples"):
        if getattr(args, flag) is not None:
            argv += [f"--{flag}", str(getattr(args, flag))]
    if args.preprocessing_num_workers:
        argv += ["--preprocessing_num_workers", str(args.preprocessing_num_workers)]
    argv += ["--vocab_size", str(vocab_size), "--max_seq_length", str(max_seq_length), "--seed", str(args.seed)]
    argv += ["--max_steps", str(args.pretrain_max_steps), "--logging_steps", str(args.logging_steps)]
    if args.checkpoint_steps > 0:  # the newest one only: the budget's state travels in its trainer_state.json
        argv += ["--save_strategy", "steps", "--save_steps", str(args.checkpoint_steps), "--save_total_limit", "1"]
    else:
        argv += ["--save_strategy", "no"]
    argv += ["--report_to", "none", "--disable_tqdm", "true"]
    if resume_checkpoint(args, out, vocab_size, max_seq_length):
        logger.info("resuming %s from its last complete checkpoint in %s", name, out)
        argv += ["--resume_from_checkpoint", "last"]
    if args.budget_schedule:  # the callback turns this constant schedule into warmup + decay over the budget
        argv += ["--lr_scheduler_type", "constant", "--warmup_steps", "0"]
    argv += shlex.split(args.pretrain_args or "")
    out.mkdir(parents=True, exist_ok=True)
    (out / PRETRAIN_STARTED).write_text(
        json.dumps(pretrain_settings(args, vocab_size, max_seq_length), indent=2) + "\n"
    )
    started = time.perf_counter()
    metrics = pretrain.main(argv, callbacks=[budget])
    record = {
        "recipe": name,
        "variant": get_recipe(name).variant_name,
        "budget": {"flops": args.budget_flops, "minutes": args.budget_minutes},
        "settings": pretrain_settings(args, vocab_size, max_seq_length),
        **budget.summary(),
        "total_seconds": round(time.perf_counter() - started, 2),
        "final_losses": {k: v for k, v in (budget.curve[-1] if budget.curve else {}).items() if k.endswith("loss")},
        "train_loss": metrics.get("train_loss"),
        "curve": budget.curve,
    }
    (out / PRETRAIN_RESULTS).write_text(json.dumps(record, indent=2) + "\n")
    for checkpoint in out.glob("checkpoint-*"):  # the finished model is `out` itself
        shutil.rmtree(checkpoint, ignore_errors=True)
    (out / PRETRAIN_STARTED).unlink(missing_ok=True)
    return record


def resume_checkpoint(args: CompareArguments, out: Path, vocab_size: int, max_seq_length: int) -> bool:
    """Whether `out` holds an unfinished pretraining run of this comparison with a complete checkpoint to go on from.

    A run started with other settings is refused, like a finished one, rather than silently continued or lost.
    """
    from ..training.checkpoints import last_complete_checkpoint

    if not out.is_dir() or last_complete_checkpoint(out) is None:
        return False
    started = out / PRETRAIN_STARTED
    recorded = json.loads(started.read_text()) if started.is_file() else None
    settings = pretrain_settings(args, vocab_size, max_seq_length)
    require_same_settings(out, recorded, settings, "holds an unfinished pretraining run with")
    return True


def require_same_settings(path: Path, recorded: dict | None, settings: dict[str, Any], what: str) -> None:
    """Refuse to mix work made with other settings into this comparison, naming the settings that differ."""
    differ = sorted(k for k in settings if (recorded or {}).get(k) != settings[k])
    if differ:
        was = ", ".join(f"{k}={(recorded or {}).get(k)!r}" for k in differ)
        raise BertologyError(f"{path} {what} other settings ({was}); use another --output_dir or delete that folder")


def pretrain_settings(args: CompareArguments, vocab_size: int, max_seq_length: int) -> dict[str, Any]:
    """What a finished pretraining run must share with this comparison to be reused."""
    keys = ("train_file", "dataset_name", "dataset_config_name", "budget_flops", "budget_minutes", "seed")
    keys += ("tokenizer_train_samples", "max_train_samples", "budget_schedule", "warmup_fraction", "pretrain_args")
    return {**{k: getattr(args, k) for k in keys}, "vocab_size": vocab_size, "max_seq_length": max_seq_length}


def load_pretrain_record(args: CompareArguments, name: str, vocab_size: int, max_seq_length: int) -> dict | None:
    """The record of a finished pretraining run of `name` with these settings, or None if there is none."""
    path = Path(args.output_dir) / "pretrain" / name / PRETRAIN_RESULTS
    if not path.is_file():
        return None
    record = json.loads(path.read_text())
    require_same_settings(
        path, record.get("settings"), pretrain_settings(args, vocab_size, max_seq_length), "was made with"
    )
    return record


def make_baseline(args: CompareArguments, arch: str) -> Path:
    """A randomly initialised model of recipe `arch` (its config and tokenizer as pretrained), in Hub format."""
    from transformers import AutoTokenizer, set_seed

    from ..hub.folders import save_folder
    from ..joint import joint_config, write_part_folders
    from ..recipes.networks import kind_of

    out = Path(args.output_dir) / "pretrain" / BASELINE
    if (out / "config.json").is_file() and (out / "model.safetensors").is_file():
        logger.info("skipping the random-init baseline: found %s", out)
        return out
    source = Path(args.output_dir) / "pretrain" / arch
    kind = kind_of(source)  # asked once: what the pretrained checkpoint is made of
    variant = kind.variant if kind is not None else None
    if variant is None:
        raise BertologyError(f"{source} is not a hf_bertology checkpoint; cannot build the baseline from it")
    set_seed(args.seed)
    model = variant.model_class(variant.config_class.from_pretrained(source))
    tokenizer = AutoTokenizer.from_pretrained(source, config=joint_config(source))  # a joint run's: read by ours
    save_folder(model, tokenizer, out, variant.networks)
    write_part_folders(model, variant.networks, tokenizer, out)  # a joint model: the discriminator GLUE fine-tunes
    (out / "BASELINE.txt").write_text(
        f"Randomly initialised {arch} architecture (seed {args.seed}), not pretrained.\n"
    )
    return out


# --------------------------------------------------------------------------------------------------------------------
# Fine-tuning
# --------------------------------------------------------------------------------------------------------------------
def finetune(args: CompareArguments, model_dir: Path, model_name: str, task: str, seed: int) -> dict[str, float]:
    """GLUE dev metrics of `model_dir` on `task` with fine-tuning seed `seed` (`glue/<model>/<task>/all_results.json`,
    or `glue/<model>/<task>/seed-<seed>/` with several --glue_seeds; reused when the run finished:
    `compare_finetune.json` beside it)."""
    out = Path(args.output_dir) / "glue" / model_name / task
    if len(glue_seeds(args)) > 1:
        out = out / f"seed-{seed}"
    results, settings = out / "all_results.json", out / FINETUNE_SETTINGS
    argv = [
        "--model_name_or_path", str(model_dir),
        "--task_name", task,
        "--data_dir", str(Path(args.glue_data_dir) / GLUE_TASKS[task].folder),
        "--output_dir", str(out),
        "--num_train_epochs", str(args.glue_epochs),
        "--learning_rate", str(args.glue_learning_rate),
        "--per_device_train_batch_size", str(args.glue_batch_size),
        "--per_device_eval_batch_size", str(max(64, args.glue_batch_size)),
        "--max_seq_length", str(args.glue_max_seq_length),
        "--seed", str(seed),
        "--save_strategy", "no",
        "--report_to", "none",
    ]  # fmt: skip
    for flag in ("max_train_samples", "max_eval_samples"):
        if getattr(args, f"glue_{flag}") is not None:
            argv += [f"--{flag}", str(getattr(args, f"glue_{flag}"))]
    argv += shlex.split(args.glue_args or "")
    if settings.is_file() and json.loads(settings.read_text()) != argv:
        raise BertologyError(
            f"{out} was fine-tuned with other settings ({settings}); use another --output_dir or delete it"
        )
    # Done only once the settings are written, after the run: the Trainer writes all_results.json with the training
    # metrics before it evaluates, so a run stopped during evaluation leaves one without a dev score.
    if results.is_file() and settings.is_file():
        logger.info("skipping %s on %s: found %s", model_name, task, results)
        return json.loads(results.read_text())
    glue_run.main(argv)
    settings.write_text(json.dumps(argv, indent=2) + "\n")
    if not results.is_file():
        raise BertologyError(f"fine-tuning {model_name} on {task} wrote no {results}")
    return json.loads(results.read_text())


def finetuned_from(model_dir: Path) -> str:
    """The folder a GLUE run of `model_dir` starts from, by the GLUE command's own rule (a joint run's folder: its
    `discriminator/`), so the report shows what each score measured."""
    from .glue.arguments import ModelArguments
    from .glue.run import discriminator_of_joint_run

    model_args = ModelArguments(model_name_or_path=str(model_dir))
    discriminator_of_joint_run(model_args)
    return model_args.model_name_or_path


def summarise_glue(runs: dict[str, dict[int, dict[str, float]]]) -> dict[str, Any]:
    """A model's GLUE figures from its runs (task -> seed -> all_results.json): each metric's mean over the seeds
    (`glue`), each task's score (mean of its metrics) and the GLUE average over tasks (WNLI excluded, as glue_table
    does), and with several seeds their standard errors over seeds (sample standard deviation / √seeds)."""
    glue = {task: _mean_metrics(list(by_seed.values())) for task, by_seed in runs.items()}
    per_seed = {task: [task_score(task, res) for res in by_seed.values()] for task, by_seed in runs.items()}
    counted = [task for task in runs if task != "wnli" and None not in per_seed[task]]
    averages = [float(np.mean(scores)) for scores in zip(*(per_seed[t] for t in counted))] if counted else []
    return {
        "glue_runs": {task: {str(seed): res for seed, res in by_seed.items()} for task, by_seed in runs.items()},
        "glue": glue,
        "glue_scores": {task: task_score(task, res) for task, res in glue.items()},
        "glue_scores_se": {task: _standard_error(scores) for task, scores in per_seed.items()},
        "glue_average": float(np.mean(averages)) if averages else None,
        "glue_average_se": _standard_error(averages),
    }


def _mean_metrics(results: list[dict[str, float]]) -> dict[str, float]:
    """Each numeric metric's mean over runs (one run: its own values, unchanged)."""
    if len(results) == 1:
        return results[0]
    keys = [k for k, v in results[0].items() if isinstance(v, (int, float)) and all(k in r for r in results)]
    return {k: float(np.mean([r[k] for r in results])) for k in keys}


def _standard_error(values: list[float | None]) -> float | None:
    """Standard error of the mean of `values` over seeds; None with fewer than two values or a missing one."""
    if len(values) < 2 or None in values:
        return None
    return float(np.std(values, ddof=1) / np.sqrt(len(values)))


# --------------------------------------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run (or resume) the comparison; returns the results also written to `output_dir/results.json`."""
    from tqdm.auto import tqdm

    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    set_verbosity()
    recipes, tasks, baseline = check_args(args)
    first = get_recipe(recipes[0])
    vocab_size = args.vocab_size or first.vocab_size  # the same tokenizer settings for every recipe
    max_seq_length = args.max_seq_length or first.max_seq_length
    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)

    names = recipes + ([BASELINE] if baseline else [])
    seeds = glue_seeds(args)
    units = len(recipes) + len(names) * len(tasks) * len(seeds) + (1 if baseline else 0)
    progress = tqdm(total=units, desc="compare", unit="run", dynamic_ncols=True)
    models: dict[str, dict[str, Any]] = {}
    for name in recipes:
        progress.set_postfix_str(f"pretraining {name}")
        record = load_pretrain_record(args, name, vocab_size, max_seq_length)
        if record is not None:
            logger.info("skipping pretraining of %s: found %s", name, Path("pretrain") / name / PRETRAIN_RESULTS)
        else:
            shutil.rmtree(output_dir / "glue" / name, ignore_errors=True)  # fine-tuned from an older model
            record = pretrain_recipe(args, name, vocab_size, max_seq_length)
        models[name] = {"pretrain": record, "model_dir": str(output_dir / "pretrain" / name)}
        progress.update()
    if baseline:
        models[BASELINE] = {"pretrain": None, "model_dir": str(make_baseline(args, baseline))}
        progress.update()

    for name in names:
        models[name]["finetuned_from"] = finetuned_from(Path(models[name]["model_dir"]))
        runs: dict[str, dict[int, dict[str, float]]] = {task: {} for task in tasks}
        for task in tasks:
            for seed in seeds:
                progress.set_postfix_str(f"{name} on {task}" + (f", seed {seed}" if len(seeds) > 1 else ""))
                runs[task][seed] = finetune(args, Path(models[name]["model_dir"]), name, task, seed)
                progress.update()
        models[name].update(summarise_glue(runs))
    progress.close()

    settings = {
        **asdict(args),
        "recipes": recipes,
        "glue_tasks": tasks,
        "baseline": baseline,
        "glue_seeds": seeds,
        "vocab_size": vocab_size,
        "max_seq_length": max_seq_length,
        "corpus": ", ".join(args.train_file or []) or f"{args.dataset_name} ({args.dataset_config_name or 'default'})",
    }
    results = {"settings": settings, "models": models}
    (output_dir / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    make_plots(results, output_dir)
    report = report_markdown(results)
    (output_dir / "report.md").write_text(report)
    print(report)
    return results


if __name__ == "__main__":
    sys.exit(run_command(main))
