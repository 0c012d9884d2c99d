"""Documents -> sentences of token ids, with the word starts that whole-word, span and n-gram masking need.

Runs as a batched, cached `datasets.map` (`num_proc` workers). Word starts come from the fast tokenizer's
`word_ids()`, which is right for WordPiece ("##"), byte-level BPE (a sentence's first word has no "Ġ") and
Unigram ("▁") alike.
"""

from __future__ import annotations

import datasets
from transformers import PreTrainedTokenizerBase

from .corpus import split_sentences

TOKENIZED_FEATURES = datasets.Features(
    {
        "input_ids": datasets.Sequence(datasets.Sequence(datasets.Value("int32"))),
        "word_starts": datasets.Sequence(datasets.Sequence(datasets.Value("int8"))),
    }
)


def _word_starts(word_ids: list[int | None]) -> list[int]:
    starts, previous = [], None
    for word in word_ids:
        starts.append(int(word is None or word != previous))
        previous = word
    return starts


def tokenize_batch(batch: dict[str, list], tokenizer: PreTrainedTokenizerBase) -> dict[str, list]:
    """`{"text": [doc, ...]}` -> `{"input_ids": [[sentence ids, ...], ...], "word_starts": [...]}`; documents
    without any token are dropped."""
    sentences, owners = [], []
    for index, document in enumerate(batch["text"]):
        pieces = split_sentences(document)
        sentences.extend(pieces)
        owners.extend([index] * len(pieces))
    encoded = tokenizer(
        sentences,
        add_special_tokens=False,
        return_attention_mask=False,
        return_token_type_ids=False,
        verbose=False,
    )
    documents: dict[int, tuple[list, list]] = {}
    for position, (owner, ids) in enumerate(zip(owners, encoded["input_ids"])):
        if not ids:
            continue
        ids_list, starts_list = documents.setdefault(owner, ([], []))
        ids_list.append(ids)
        starts_list.append(_word_starts(encoded.word_ids(position)))
    kept = [documents[i] for i in sorted(documents)]
    return {"input_ids": [d[0] for d in kept], "word_starts": [d[1] for d in kept]}


def tokenize_corpus(
    corpus: datasets.Dataset | datasets.IterableDataset,
    tokenizer: PreTrainedTokenizerBase,
    num_proc: int | None = None,
    batch_size: int = 256,
    load_from_cache_file: bool = True,
) -> datasets.Dataset | datasets.IterableDataset:
    """Tokenize a `text` corpus (one document per row) into sentences of ids and word starts."""
    kwargs = {"fn_kwargs": {"tokenizer": tokenizer}, "batched": True, "batch_size": batch_size}
    kwargs["remove_columns"] = corpus.column_names
    if isinstance(corpus, datasets.IterableDataset):
        return corpus.map(tokenize_batch, features=TOKENIZED_FEATURES, **kwargs)
    return corpus.map(
        tokenize_batch,
        features=TOKENIZED_FEATURES,
        num_proc=num_proc,
        load_from_cache_file=load_from_cache_file,
        desc="Tokenizing documents",
        **kwargs,
    )
