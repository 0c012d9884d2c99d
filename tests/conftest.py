"""Shared fixtures: tiny corpora written by the tests, tiny family tokenizers, the path of ../shared/data."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

torch.set_num_threads(max(1, min(2, torch.get_num_threads())))

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

WORDS = (
    "the a cat dog bird fish tree house river mountain city country people time year day way man woman child "
    "world life hand part place case week company system program question work government number night point "
    "home water room mother area money story fact month lot right study book eye job word business issue side "
    "kind head service friend father power hour game line end member law car name president team minute idea "
    "kid body information back parent face others level office door health person art war history party result "
    "change morning reason research girl guy moment air teacher force education unbelievable extraordinary "
    "runs walked sings is was has made said went saw took came thinks looked wanted gave used found told "
    "big small old new good bad long great little own other right high different large next early young"
).split()


def make_documents(n_docs: int = 60, seed: int = 0, min_sentences: int = 3, max_sentences: int = 9) -> list[list[str]]:
    """Documents as lists of sentences of random words (capitalised, ending with a period)."""
    rng = random.Random(seed)
    documents = []
    for _ in range(n_docs):
        sentences = []
        for _ in range(rng.randint(min_sentences, max_sentences)):
            words = [rng.choice(WORDS) for _ in range(rng.randint(4, 14))]
            sentences.append(" ".join(words).capitalize() + ".")
        documents.append(sentences)
    return documents


def write_corpus(path: Path, documents: list[list[str]]) -> Path:
    """Plain text: one document per blank-line-separated block, its sentences on one line."""
    path.write_text("\n\n".join(" ".join(doc) for doc in documents) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def documents() -> list[list[str]]:
    return make_documents()


@pytest.fixture(scope="session")
def corpus_file(tmp_path_factory, documents) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus") / "corpus.txt", documents)


@pytest.fixture(scope="session")
def texts(documents) -> list[str]:
    return [" ".join(doc) for doc in documents]


@pytest.fixture(scope="session")
def bert_tokenizer(texts):
    from hf_bertology.data import train_tokenizer

    return train_tokenizer(texts * 3, "wordpiece", vocab_size=300)


@pytest.fixture(scope="session")
def roberta_tokenizer(texts):
    from hf_bertology.data import train_tokenizer

    return train_tokenizer(texts * 3, "bpe", vocab_size=400)


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not found at {SHARED_DATA} (the repo is expected next to shared/)")
    return SHARED_DATA
