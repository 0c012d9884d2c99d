"""Small shared helpers: the library's error type, its logger and the commands' argument parsing.

Every user-facing failure (bad file, bad flag, bad checkpoint) raises :class:`BertologyError` with one line that
names the culprit; the command line prints that line and exits with status 2 instead of a traceback.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

logger = logging.getLogger("hf_bertology")


class BertologyError(Exception):
    """A user-facing error: one clear line, no traceback on the command line."""


def run_command(main, argv: list[str] | None = None) -> int:
    """Run a command's `main(argv)` and return its exit status: the one place where our errors become one
    `error: ...` line on stderr and exit status 2 (the `bertology` command and every `python -m` module use it).

    Foreign exceptions that mean bad input are translated into BertologyError where they are raised (the reader,
    the check), not here: anything else is a bug and keeps its traceback. Ctrl-C is `interrupted` and 130, the
    shell's status for SIGINT."""
    try:
        result = main(argv)
    except BertologyError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return result if isinstance(result, int) else 0


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever `sys.stderr` is at the time (pytest and notebooks swap it), not the one at set-up."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):  # StreamHandler.__init__ assigns it; the property always follows sys.stderr
        pass


def set_verbosity(level: int = logging.INFO) -> None:
    """Log our messages at ``level`` to stderr, once."""
    if not logger.handlers:
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
        logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False


def accelerator_defaults() -> dict:
    """TrainingArguments defaults for the machine: without an accelerator to copy batches to, no pinned memory (the
    DataLoader would only warn, "no accelerator is found", at every epoch)."""
    import torch

    return {} if torch.cuda.is_available() or torch.accelerator.is_available() else {"dataloader_pin_memory": False}


def refuse_same_folder(source, output_dir, command: str) -> None:
    """A command that writes a model into `output_dir` must not write over the model it reads (`source`)."""
    if source and Path(source).is_dir() and Path(source).resolve() == Path(output_dir).resolve():
        raise BertologyError(f"{command}: --output_dir is the model it reads ({source}); give another folder")


ARGUMENT_FILES = (".json", ".yaml", ".yml")


def argument_file(argv: list[str]) -> str | None:
    """The one JSON/YAML file a command line consists of (`bertology pretrain args.json`), or None for flags."""
    return argv[0] if len(argv) == 1 and argv[0].endswith(ARGUMENT_FILES) else None


def read_argument_file(path: str) -> dict:
    """The keys and values of a JSON or YAML argument file; a missing or unreadable one is one BertologyError."""
    import yaml

    if not Path(path).is_file():
        raise BertologyError(f"arguments file not found: {path}")
    try:
        text = Path(path).read_text(encoding="utf-8")
        values = json.loads(text) if path.endswith(".json") else yaml.safe_load(text) or {}
    except (UnicodeDecodeError, ValueError, yaml.YAMLError) as err:  # JSONDecodeError is a ValueError
        kind = "JSON" if path.endswith(".json") else "YAML"
        raise BertologyError(f"{path}: not valid {kind}: {' '.join(str(err).split())}") from None
    if not isinstance(values, dict):
        raise BertologyError(f"{path}: expected keys and values (a mapping), found a {type(values).__name__}")
    return values


def argument_parser(dataclass_types, prog: str, **defaults):
    """transformers' `HfArgumentParser` for a command. Abbreviated flags are refused: argparse would accept
    `--max_step 2` for `--max_steps`, but the names the user set are read from the command line itself (so that a
    recipe's defaults never replace them), and the abbreviation would then lose to the recipe's value."""
    from transformers import HfArgumentParser

    parser = HfArgumentParser(dataclass_types, prog=prog, allow_abbrev=False)
    parser.set_defaults(**defaults)
    return parser


def parse_arguments(parser, argv: list[str], file_defaults: dict | None = None) -> tuple:
    """The parser's dataclasses from flags or from one JSON/YAML file (its values over `file_defaults`; flags get
    the parser's defaults). Unknown keys, wrong types and TrainingArguments' own checks are one BertologyError
    (argparse itself prints its usage and exits for a bad flag)."""
    path = argument_file(argv)
    try:
        if path:
            return parser.parse_dict({**(file_defaults or {}), **read_argument_file(path)})
        return parser.parse_args_into_dataclasses(argv)
    except (ValueError, TypeError) as err:
        raise BertologyError(f"{path + ': ' if path else ''}{str(err).strip().splitlines()[0]}") from None
