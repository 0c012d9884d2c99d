"""The ``bertology`` command: one sub-command per task, each a module with a ``main(argv)``.

    bertology pretrain --recipe roberta-mini --train_file corpus.txt --output_dir out
    bertology glue --model_name_or_path out --task_name sst2 --data_dir glue/SST-2 --output_dir glue_out

A :class:`~hf_bertology.utils.BertologyError` is printed as one ``error:`` line (exit status 2), never a traceback:
:func:`~hf_bertology.utils.run_command` does it, for this command and for every ``python -m`` sub-command module.
"""

from __future__ import annotations

import importlib
import sys

from .utils import run_command

# sub-command -> (module, one-line help); modules are imported only when their command runs.
COMMANDS: dict[str, tuple[str, str]] = {
    "pretrain": ("hf_bertology.training.pretrain", "pretrain a recipe on a corpus and write a Hub-format folder"),
    "prepare": ("hf_bertology.training.prepare", "train the tokenizer and build the examples once, for later runs"),
    "glue": ("hf_bertology.evaluation.glue.run", "fine-tune a checkpoint on a GLUE task and report its dev metric"),
    "export": ("hf_bertology.export", "write a vanilla transformers folder (e.g. an ELECTRA discriminator/generator)"),
    "compare": ("hf_bertology.evaluation.compare", "pretrain recipes at equal compute, fine-tune on GLUE, report"),
    "push": (
        "hf_bertology.hub.command",
        "push a Hub-format folder (weights, tokenizer, code, card) to the Hugging Face Hub",
    ),
    "show-mask": ("hf_bertology.training.show_mask", "print training example i as the model saw it in epoch e"),
}


def _usage() -> str:
    lines = ["usage: bertology <command> [options]", "", "commands:"]
    lines += [f"  {name:<10} {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += ["", "Run `bertology <command> --help` for the options of a command."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"error: unknown command {command!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    return run_command(importlib.import_module(COMMANDS[command][0]).main, rest)


if __name__ == "__main__":
    sys.exit(main())
