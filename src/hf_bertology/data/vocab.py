"""Training a family tokenizer on the corpus with `tokenizers`, saved as the family's `transformers` class.

`TokenizersBackend.train_new_from_iterator` keeps the family's pipeline (normaliser, pre-tokenizer, post-processor,
special tokens) and learns a new vocabulary: BERT's uncased (or cased) WordPiece, RoBERTa's byte-level BPE, the
SentencePiece-style Unigram of ALBERT and XLNet. The starting vocabulary fixes the special tokens' ids (e.g.
RoBERTa's `<s>`=0, `<pad>`=1, `</s>`=2, `<unk>`=3, as in the released checkpoints).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import transformers
from transformers import PreTrainedTokenizerBase

from ..utils import BertologyError, logger

# tokenizer_type -> (transformers class name, default special vocabulary in id order)
# (None: the class's own defaults, e.g. AlbertTokenizer's <pad>=0, <unk>=1, [CLS]=2, [SEP]=3, [MASK]=4.)
FAMILY_TOKENIZERS: dict[str, tuple[str, dict[str, int] | None]] = {
    "wordpiece": ("BertTokenizer", {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}),
    "bpe": ("RobertaTokenizer", {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "<mask>": 4}),
    "unigram": ("AlbertTokenizer", None),  # SentencePiece-style Unigram, lower-cased, "▁" word starts (ALBERT)
}


def _batches(texts: Iterable[str], batch_size: int = 1000) -> Iterator[list[str]]:
    batch = []
    for text in texts:
        if text and text.strip():
            batch.append(text)
            if len(batch) == batch_size:
                yield batch
                batch = []
    if batch:
        yield batch


def train_tokenizer(
    texts: Iterable[str],
    tokenizer_type: str,
    vocab_size: int,
    tokenizer_class: str | None = None,
    length: int | None = None,
    **init_kwargs,
) -> PreTrainedTokenizerBase:
    """Train a `tokenizer_type` tokenizer ("wordpiece", "bpe", "unigram", ...) of `vocab_size` on `texts`.

    `tokenizer_class` overrides the family class (e.g. "AlbertTokenizer"); `init_kwargs` go to its constructor
    (e.g. `do_lower_case=False` for a cased WordPiece). `length` (number of texts) only sizes the progress bar.
    """
    if tokenizer_type not in FAMILY_TOKENIZERS and tokenizer_class is None:
        raise BertologyError(f"unknown tokenizer type {tokenizer_type!r}; known: {', '.join(FAMILY_TOKENIZERS)}")
    class_name, specials = FAMILY_TOKENIZERS.get(tokenizer_type, (tokenizer_class, None))
    cls = getattr(transformers, tokenizer_class or class_name)
    if specials is not None and "vocab" not in init_kwargs:
        init_kwargs["vocab"] = dict(specials)
        if tokenizer_type == "bpe":
            init_kwargs.setdefault("merges", [])
    base = cls(**init_kwargs)
    if vocab_size <= len(base):
        raise BertologyError(f"vocab_size {vocab_size} is too small: the special tokens alone take {len(base)}")
    logger.info("training a %s tokenizer (%s) with %d tokens", tokenizer_type, cls.__name__, vocab_size)
    tokenizer = base.train_new_from_iterator(_batches(texts), vocab_size=vocab_size, length=length)
    if len(tokenizer) <= len(base):
        raise BertologyError("the corpus is empty or whitespace-only: nothing to train a tokenizer on")
    return tokenizer
