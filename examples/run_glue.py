"""Fine-tune a checkpoint on a GLUE task, as transformers' examples/pytorch/text-classification/run_glue.py does.

    python examples/run_glue.py --model_name_or_path runs/electra-small --task_name sst2 \
        --data_dir ../shared/data/glue/SST-2 --output_dir runs/glue-sst2 --do_train --do_eval

Every flag of run_glue.py and of TrainingArguments works (or one JSON/YAML file of them); see
`python examples/run_glue.py --help`. The logic lives in hf_bertology.evaluation.glue.
"""

import sys

from hf_bertology.evaluation.glue import main
from hf_bertology.utils import run_command

if __name__ == "__main__":
    sys.exit(run_command(main))
