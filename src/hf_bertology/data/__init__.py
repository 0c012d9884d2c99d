"""Text -> datasets of token ids, ready for a collator.

    corpus = load_corpus(train_files=["wiki_00"])             # one document per row ("text")
    tokenized = tokenize_corpus(corpus, tokenizer)             # sentences of ids + word starts
    dataset = build_pretraining_dataset(tokenized, tokenizer, config, max_seq_length=128)

`build_pretraining_dataset` picks the builder named by `config.input_format` from `INPUT_FORMATS`: a recipe says
how its examples are made, and a new format is one more entry here, not a branch elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable

import datasets
from transformers import PreTrainedTokenizerBase

from ..utils import BertologyError
from .corpus import expand_paths, load_corpus, read_documents, split_sentences
from .packing import pack_documents, pack_sentences, pack_tokens
from .pairs import build_nsp_pairs, build_sop_pairs
from .segments import build_electra_segments
from .tokenize import tokenize_corpus
from .vocab import train_tokenizer
from .xlnet import build_xlnet_segments


def _full_sentences(tokenized, tokenizer, settings, max_seq_length, seed, num_proc):
    return pack_sentences(tokenized, tokenizer, max_seq_length, cross_documents=True, num_proc=num_proc)


def _doc_sentences(tokenized, tokenizer, settings, max_seq_length, seed, num_proc):
    return pack_sentences(tokenized, tokenizer, max_seq_length, cross_documents=False, num_proc=num_proc)


def _token_stream(tokenized, tokenizer, settings, max_seq_length, seed, num_proc):
    return pack_tokens(tokenized, tokenizer, max_seq_length, num_proc=num_proc)


def _packed_documents(tokenized, tokenizer, settings, max_seq_length, seed, num_proc):
    return pack_documents(tokenized, tokenizer, max_seq_length, num_proc=num_proc)


def _segment_pairs(build: Callable, coin: str, config_field: str) -> Callable:
    """The builder of a segment-pair format: `short_seq_prob` and the pair's own coin (argument `coin` of `build`,
    read from `config_field`) come from the recipe's settings, so NSP and SOP read them alike."""

    def builder(tokenized, tokenizer, settings, max_seq_length, seed, num_proc):
        return build(
            tokenized,
            tokenizer,
            max_seq_length,
            short_seq_prob=settings["short_seq_prob"],
            seed=seed,
            num_proc=num_proc,
            **{coin: settings[config_field]},
        )

    return builder


def _xlnet_segments(tokenized, tokenizer, settings, max_seq_length, seed, num_proc):
    return build_xlnet_segments(
        tokenized, tokenizer, max_seq_length, settings["reuse_len"] or 0, seed=seed, num_proc=num_proc
    )


def _electra_segments(tokenized, tokenizer, settings, max_seq_length, seed, num_proc):
    return build_electra_segments(tokenized, tokenizer, max_seq_length, seed=seed, num_proc=num_proc)


# input_format -> builder(tokenized, tokenizer, settings, max_seq_length, seed, num_proc); `settings`:
# `data_settings(config)`, every config field a builder reads (and so the prepared data's key)
INPUT_FORMATS: dict[str, Callable] = {
    "full_sentences": _full_sentences,
    "doc_sentences": _doc_sentences,
    "nsp_pairs": _segment_pairs(build_nsp_pairs, "random_next_prob", "nsp_random_prob"),
    "sop_pairs": _segment_pairs(build_sop_pairs, "swap_prob", "sop_swap_prob"),
    "xlnet_segments": _xlnet_segments,
    "electra_segments": _electra_segments,
    "token_stream": _token_stream,
    "packed_documents": _packed_documents,
}


# the config fields the builders read, with their defaults for a config without them
DATA_FIELDS = {
    "input_format": "full_sentences",
    "short_seq_prob": 0.1,
    "nsp_random_prob": 0.5,
    "sop_swap_prob": 0.5,
    "reuse_len": None,
}


def data_settings(config) -> dict:
    """The fields of `config` that decide its examples (`DATA_FIELDS`): what a builder reads, and what the
    prepared examples' key holds."""
    return {field: getattr(config, field, default) for field, default in DATA_FIELDS.items()}


def build_pretraining_dataset(
    tokenized: datasets.Dataset | datasets.IterableDataset,
    tokenizer: PreTrainedTokenizerBase,
    config,
    max_seq_length: int,
    seed: int = 42,
    num_proc: int | None = None,
) -> datasets.Dataset | datasets.IterableDataset:
    """The examples `config.input_format` describes, from a tokenized corpus."""
    settings = data_settings(config)
    input_format = settings["input_format"]
    if input_format not in INPUT_FORMATS:
        raise BertologyError(f"unknown input_format {input_format!r}; known: {', '.join(INPUT_FORMATS)}")
    return INPUT_FORMATS[input_format](tokenized, tokenizer, settings, max_seq_length, seed, num_proc)


__all__ = [
    "DATA_FIELDS",
    "INPUT_FORMATS",
    "build_electra_segments",
    "build_nsp_pairs",
    "build_sop_pairs",
    "build_pretraining_dataset",
    "build_xlnet_segments",
    "data_settings",
    "expand_paths",
    "load_corpus",
    "pack_documents",
    "pack_sentences",
    "pack_tokens",
    "read_documents",
    "split_sentences",
    "tokenize_corpus",
    "train_tokenizer",
]
