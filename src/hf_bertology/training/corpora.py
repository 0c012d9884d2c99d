"""Corpus -> examples: the training and held-out corpora (`load_corpora`) and the recipe's examples made of them
(`build_datasets`)."""

from __future__ import annotations

from pathlib import Path

import datasets
from transformers import TrainingArguments

from ..data import build_pretraining_dataset, default_corpus
from ..data.corpus import load_corpus
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


def build_datasets(
    corpus, eval_corpus, tokenizer, recipe: Recipe, data_args: DataArguments, training_args: TrainingArguments
) -> tuple:
    """Training and evaluation examples in the recipe's input format (NSP/SOP pairs, packed blocks, ...) at its
    length (`recipe`: the settled one, `settle_recipe`); with `--do_eval` and no validation file,
    `--validation_split_percentage` of the examples are held out."""
    num_proc = data_args.preprocessing_num_workers
    max_seq_length = recipe.max_seq_length

    def examples(source):
        tokenized = tokenize_corpus(
            source, tokenizer, num_proc=num_proc, load_from_cache_file=not data_args.overwrite_cache
        )
        return build_pretraining_dataset(
            tokenized, tokenizer, recipe.config, max_seq_length, training_args.seed, num_proc
        )

    with training_args.main_process_first(desc="building examples"):
        train_dataset = examples(corpus)
        eval_dataset = examples(eval_corpus) if eval_corpus is not None else None
    if isinstance(train_dataset, datasets.Dataset):
        if len(train_dataset) == 0:
            raise BertologyError("the corpus produced no training examples (is it empty?)")
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
        logger.info("%d training examples of at most %d tokens", len(train_dataset), max_seq_length)
    else:
        train_dataset = train_dataset.shuffle(buffer_size=10_000, seed=training_args.seed)
    if eval_dataset is not None and data_args.max_eval_samples is not None:
        eval_dataset = eval_dataset.select(range(min(data_args.max_eval_samples, len(eval_dataset))))
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
