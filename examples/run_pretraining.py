"""Pretrain a BERTology recipe with the transformers Trainer (the library's `bertology pretrain`).

    python examples/run_pretraining.py --recipe roberta-mini --train_file corpus.txt --output_dir runs/roberta-mini \\
        --max_steps 2000

Every flag of `bertology pretrain --help` works (all `TrainingArguments` flags included), and so does a single JSON
or YAML file with the same keys.
"""

import sys

from hf_bertology.training.pretrain import main
from hf_bertology.utils import run_command

if __name__ == "__main__":
    sys.exit(run_command(main))
