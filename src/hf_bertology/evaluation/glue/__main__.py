"""``python -m hf_bertology.evaluation.glue …``, the same as ``bertology glue …``."""

import sys

from . import main

sys.exit(main())
