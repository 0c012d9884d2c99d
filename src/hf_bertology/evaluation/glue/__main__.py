"""``python -m hf_bertology.evaluation.glue …``, the same as ``bertology glue …``."""

import sys

from ...utils import run_command
from .run import main

sys.exit(run_command(main))
