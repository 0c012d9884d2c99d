"""`python -m hf_bertology.hub`: `bertology push`."""

import sys

from ..utils import run_command
from .command import main

if __name__ == "__main__":
    sys.exit(run_command(main))
