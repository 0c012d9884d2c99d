"""`bertology prepare`: a run's data set-up alone (the tokenizer trained, the examples built), kept for later runs.

    bertology prepare --recipe bert-base --train_file corpus/ --preprocessing_num_workers 8
    bertology pretrain --recipe bert-base --train_file corpus/ --output_dir runs/bert-base   # reuses it

Takes the flags of `bertology pretrain` and runs its steps up to the examples (`load_corpora`, `build_tokenizer`,
`settle_recipe`, `build_datasets`), so the entries it writes are the ones that `pretrain` with the same flags looks
up (keyed by corpus, recipe and tokenizer: `data.prepared`): on a CPU machine before a GPU job, or once before many
runs. Prints where they are. `--output_dir` is not needed.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from ..utils import run_command, set_verbosity
from .arguments import check_sizes, parse_args, training_arguments
from .corpora import build_datasets, load_corpora
from .run_recipe import build_recipe, build_tokenizer, settle_recipe


def main(argv: list[str] | None = None) -> dict:
    """Prepare what `bertology pretrain ARGS` would, and return {"train_examples", "examples_dir", ...}."""
    argv = list(sys.argv[1:] if argv is None else argv)
    model_args, data_args, training_args, explicit = parse_args(argv)
    set_verbosity()
    recipe = build_recipe(model_args)
    training_args = training_arguments(training_args, recipe, explicit, data_args.streaming)
    check_sizes(model_args, data_args, training_args)
    start = time.perf_counter()
    corpus, eval_corpus = load_corpora(data_args, training_args)
    tokenizer = build_tokenizer(model_args, recipe, corpus, training_args, None, data_args)
    settled = settle_recipe(recipe, tokenizer, data_args, model_args)
    train_dataset, eval_dataset = build_datasets(corpus, eval_corpus, tokenizer, settled, data_args, training_args)
    seconds = time.perf_counter() - start
    result = {"tokenizer_dir": tokenizer.name_or_path}
    if hasattr(train_dataset, "cache_files") and not data_args.streaming:
        result.update(train_examples=len(train_dataset), examples_dir=prepared_folder(train_dataset))
        print(
            f"prepared {len(train_dataset):,} training examples in {result['examples_dir']} (tokenizer: "
            f"{result['tokenizer_dir']}) in {seconds:.1f} s; `bertology pretrain` with the same flags reuses them"
        )
    else:
        print("--streaming: the examples are made as the stream is read; only a trained tokenizer is kept")
    return result


def prepared_folder(dataset) -> str:
    """The prepared entry holding `dataset` (its Arrow files' `train/` folder's parent)."""
    return str(Path(dataset.cache_files[0]["filename"]).parents[1])


if __name__ == "__main__":
    sys.exit(run_command(main))
