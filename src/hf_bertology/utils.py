"""Small shared helpers: the library's error type and its logger.

Every user-facing failure (bad file, bad flag, bad checkpoint) raises :class:`BertologyError` with one line that
names the culprit; the command line prints that line and exits with status 2 instead of a traceback.
"""

from __future__ import annotations

import logging
import sys

logger = logging.getLogger("hf_bertology")


class BertologyError(Exception):
    """A user-facing error: one clear line, no traceback on the command line."""


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
