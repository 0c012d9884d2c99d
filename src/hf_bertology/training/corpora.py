"""Corpus -> examples: the training and held-out corpora (`load_corpora`) and the recipe's examples made of them
(`build_datasets`), prepared once by rank 0 and kept (`data.prepared`) for every rank and every later run."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
from transformers import TrainingArguments

from ..data import build_pretraining_dataset, data_settings, default_corpus
from ..data.corpus import expand_paths, load_corpus
from ..data.prepared import PreparedStore, files_identity, prepared_key, tokenizer_identity
from ..data.tokenize import tokenize_corpus
from ..recipes.recipe import Recipe
from ..utils import BertologyError, logger
from .arguments import DataArguments


def load_corpora(data_args: DataArguments, training_args: TrainingArguments) -> tuple:
    """The training corpus and, with `--do_eval --validation_file`, the held-out one (else None): documents as
    `datasets` rows of `text` (`IterableDataset`s with `--streaming`)."""
    if data_args.streaming and training_args.max_steps <= 0:
        raise BertologyError("--streaming needs --max_steps (a stream has no length)")
    corpus_kwargs = dict(
        dataset_name=data_args.dataset_name,
        dataset_config_name=data_args.dataset_config_name,
        text_column=data_args.text_column,
        doc_separator=data_args.doc_separator,
        streaming=data_args.streaming,
    )
    train_files, validation_files = data_args.train_file, data_args.validation_file
    with training_args.main_process_first(desc="reading the corpus"):
        if not train_files and not data_args.dataset_name:  # no corpus given: the embedded one, offline
            train_files, embedded_validation = default_corpus.default_corpus_files()
            validation_files = validation_files or embedded_validation
            logger.info("no corpus given (--train_file, --dataset_name): training on %s", default_corpus.NAME)
        corpus = load_corpus(train_files=train_files, **corpus_kwargs)
        eval_corpus = None
        if training_args.do_eval and validation_files:
            eval_corpus = load_corpus(train_files=validation_files, **{**corpus_kwargs, "dataset_name": None})
    return corpus, eval_corpus


def corpus_identity(corpus, data_args: DataArguments) -> str:
    """What a corpus is, for the prepared data's keys: `datasets`' fingerprint of a loaded corpus (it follows the
    files' sizes and modification times, or the Hub dataset's files), or for a stream the files' (or the Hub name's)."""
    if isinstance(corpus, datasets.Dataset):
        return corpus._fingerprint
    files = data_args.train_file or ([] if data_args.dataset_name else default_corpus.default_corpus_files()[0])
    return json.dumps(
        [
            files_identity(expand_paths(files)) if files else None,
            data_args.dataset_name,
            data_args.dataset_config_name,
            data_args.text_column,
            data_args.doc_separator,
        ]
    )


def prepared_store(data_args: DataArguments | None) -> PreparedStore:
    """Where prepared data is kept: `--prepared_data_dir`, else `HF_DATASETS_CACHE/hf_bertology/prepared`."""
    return PreparedStore(data_args.prepared_data_dir if data_args is not None else None)


def find_prepared(store: PreparedStore, kind: str, key: str, training_args, overwrite: bool) -> Path | None:
    """The complete entry to reuse (None: this process prepares it: rank 0, under `main_process_first`). A rank
    that is not the first and finds none cannot see rank 0's folder: one error line, not a second preparation."""
    first = training_args.process_index == 0
    folder = None if overwrite and first else store.find(kind, key)
    if folder is None and not first:
        raise BertologyError(
            f"process {training_args.process_index} cannot see the {kind} that process 0 prepared in {store.root}: "
            "every process must share that folder (set --prepared_data_dir to one on a shared file system)"
        )
    if folder is not None:
        logger.info("reusing the prepared %s: %s", kind, folder)
    return folder


def build_datasets(
    corpus, eval_corpus, tokenizer, recipe: Recipe, data_args: DataArguments, training_args: TrainingArguments
) -> tuple:
    """Training and evaluation examples in the recipe's input format (NSP/SOP pairs, packed blocks, ...) at its
    length (`recipe`: the settled one, `settle_recipe`); with `--do_eval` and no validation file,
    `--validation_split_percentage` of the examples are held out. A map-style corpus's examples are prepared once
    (`prepared_examples`), a stream's as it is read."""
    with training_args.main_process_first(local=False, desc="building examples"):
        if isinstance(corpus, datasets.Dataset):
            train_dataset, eval_dataset = prepared_examples(
                corpus, eval_corpus, tokenizer, recipe, data_args, training_args
            )
        else:
            train_dataset = make_examples(corpus, tokenizer, recipe, data_args, training_args.seed)
            eval_dataset = None
            if eval_corpus is not None:
                eval_dataset = make_examples(eval_corpus, tokenizer, recipe, data_args, training_args.seed)
    if isinstance(train_dataset, datasets.Dataset):
        if training_args.do_eval and eval_dataset is None:
            if len(train_dataset) < 2:
                raise BertologyError(
                    "--do_eval holds out examples, and the corpus made only one: pass --validation_file"
                )
            held_out = max(1, len(train_dataset) * data_args.validation_split_percentage // 100)
            split = train_dataset.train_test_split(test_size=held_out, seed=training_args.seed)
            train_dataset, eval_dataset = split["train"], split["test"]
        if data_args.max_train_samples is not None:
            train_dataset = train_dataset.select(range(min(data_args.max_train_samples, len(train_dataset))))
        logger.info("%d training examples of at most %d tokens", len(train_dataset), recipe.max_seq_length)
    else:
        train_dataset = train_dataset.shuffle(buffer_size=10_000, seed=training_args.seed)
    if eval_dataset is not None and data_args.max_eval_samples is not None:
        eval_dataset = eval_dataset.select(range(min(data_args.max_eval_samples, len(eval_dataset))))
    return train_dataset, eval_dataset


def make_examples(source, tokenizer, recipe: Recipe, data_args: DataArguments, seed: int):
    """A corpus's examples: tokenized (`datasets.map`, with progress bars), then built in the recipe's format."""
    num_proc = data_args.preprocessing_num_workers
    tokenized = tokenize_corpus(
        source, tokenizer, num_proc=num_proc, load_from_cache_file=not data_args.overwrite_cache
    )
    return build_pretraining_dataset(tokenized, tokenizer, recipe.config, recipe.max_seq_length, seed, num_proc)


def prepared_examples(corpus, eval_corpus, tokenizer, recipe: Recipe, data_args: DataArguments, training_args):
    """The examples of a map-style corpus (and of the held-out one), read from the entry keyed by the corpora, the
    tokenizer, the recipe's data fields (`data.data_settings`), the length, the seed and the worker count; made and
    written first
    when there is none (or with `--overwrite_cache`). Every rank reads the same entry."""
    store = prepared_store(data_args)
    key = prepared_key(
        "examples",
        steps=__file__,  # `make_examples`: how the builders are called
        corpus=corpus_identity(corpus, data_args),
        eval_corpus=corpus_identity(eval_corpus, data_args) if eval_corpus is not None else None,
        tokenizer=tokenizer_identity(tokenizer),
        settings=data_settings(recipe.config),
        max_seq_length=recipe.max_seq_length,
        seed=training_args.seed,
        # a builder's map batch never spans two workers' shards: blocks and draws follow the worker count
        workers=data_args.preprocessing_num_workers or 1,
    )
    folder = find_prepared(store, "examples", key, training_args, data_args.overwrite_cache)
    if folder is None:
        made = {"train": make_examples(corpus, tokenizer, recipe, data_args, training_args.seed)}
        if len(made["train"]) == 0:
            raise BertologyError("the corpus produced no training examples (is it empty?)")
        if eval_corpus is not None:
            made["eval"] = make_examples(eval_corpus, tokenizer, recipe, data_args, training_args.seed)

        def fill(scratch: Path) -> None:
            for split, dataset in made.items():
                dataset.save_to_disk(scratch / split, num_proc=data_args.preprocessing_num_workers)

        manifest = {
            "recipe": recipe.name,
            "input_format": data_settings(recipe.config)["input_format"],
            "max_seq_length": recipe.max_seq_length,
            "examples": {split: len(dataset) for split, dataset in made.items()},
        }
        folder = store.write("examples", key, fill, manifest, replace=data_args.overwrite_cache)
    train_dataset = datasets.load_from_disk(str(folder / "train"))
    eval_dataset = datasets.load_from_disk(str(folder / "eval")) if (folder / "eval").is_dir() else None
    return train_dataset, eval_dataset


def describe_corpus(data_args: DataArguments) -> str:
    if not data_args.train_file and not data_args.dataset_name:
        return f"{default_corpus.NAME}, the Hub's `{default_corpus.HUB_ID}` ({default_corpus.HUB_CONFIG})"
    if data_args.train_file:
        return ", ".join(f"`{Path(f).name}`" for f in data_args.train_file)
    return f"`{data_args.dataset_name}` ({data_args.dataset_config_name or 'default'})"


def card_dataset(data_args: DataArguments) -> str | None:
    """The Hub dataset a model card's `datasets:` names: the embedded WikiText-2's Hub id, `--dataset_name` when it is
    a Hub id, none for local files or a local folder given as `--dataset_name DIR` (a path is not a dataset id)."""
    if not data_args.train_file and not data_args.dataset_name:
        return default_corpus.HUB_ID
    if data_args.train_file or Path(data_args.dataset_name).exists():
        return None
    return data_args.dataset_name
