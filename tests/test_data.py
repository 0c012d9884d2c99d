"""The data path: reading corpora, sentence splitting, NSP pairs, FULL-/DOC-SENTENCES packing, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import make_documents, write_corpus
from hf_bertology import BertologyError, get_recipe
from hf_bertology.data import (
    build_pretraining_dataset,
    load_corpus,
    pack_sentences,
    read_documents,
    split_sentences,
    tokenize_corpus,
)
from hf_bertology.data.pairs import build_nsp_pairs

# -- reading ---------------------------------------------------------------------------------------------------


def test_plain_text_blank_line_and_line_modes(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("First doc line one.\nline two.\n\n\n  \nSecond doc.\n", encoding="utf-8")
    assert list(read_documents(path)) == ["First doc line one.\nline two.", "Second doc."]
    assert list(read_documents(path, doc_separator="line")) == ["First doc line one.", "line two.", "Second doc."]


def test_wikiextractor_and_jsonl(tmp_path):
    wiki = tmp_path / "wiki_00"
    wiki.write_text(
        '<doc id="1" url="u" title="Cat">\nCat\n\nCats purr. They sleep.\n</doc>\n'
        '<doc id="2" url="u" title="Dog">\nDog\n\nDogs bark.\n</doc>\n',
        encoding="utf-8",
    )
    assert list(read_documents(wiki)) == ["Cats purr. They sleep.", "Dogs bark."]
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text(json.dumps({"text": "One."}) + "\n\n" + json.dumps({"body": "x", "text": "Two."}) + "\n")
    assert list(read_documents(jsonl)) == ["One.", "Two."]


def test_truncated_and_odd_records(tmp_path):
    """A WikiExtractor file cut off inside its last article keeps that article; a JSON Lines record whose text is
    null has none (not the string "None"); a number for text or a JSON array is one line naming the place."""
    wiki = tmp_path / "wiki_01"
    wiki.write_text('<doc id="1" title="Cat">\nCat\n\nCats purr.\n</doc>\n<doc id="2" title="Dog">\nDog\n\nDogs ba')
    assert list(read_documents(wiki)) == ["Cats purr.", "Dogs ba"]
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text(json.dumps({"text": None}) + "\n" + json.dumps({"text": "Two."}) + "\n")
    assert list(read_documents(jsonl)) == ["Two."]
    jsonl.write_text(json.dumps({"text": "One."}) + "\n" + json.dumps({"text": 7}) + "\n")
    with pytest.raises(BertologyError, match=r"c.jsonl:2: 'text' is a int, not a string"):
        list(read_documents(jsonl))
    array = tmp_path / "a.json"
    array.write_text(json.dumps([{"text": "One."}]))
    with pytest.raises(BertologyError, match=r"a.json:1: a JSON list, not an object"):
        list(read_documents(array))


def test_globs_and_directories(tmp_path):
    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "a.txt").write_text("Alpha.\n")
    (tmp_path / "d" / "sub" / "b.txt").write_text("Beta.\n")
    assert load_corpus(train_files=[str(tmp_path / "d")])["text"] == ["Alpha.", "Beta."]
    assert load_corpus(train_files=str(tmp_path / "d" / "*.txt"))["text"] == ["Alpha."]


def test_real_wikiextractor_file(shared_data):
    path = shared_data / "corpus" / "enwiki-2015-wikiextractor" / "AA" / "wiki_00"
    documents = list(read_documents(path))
    assert len(documents) == 38  # every <doc> of the file (README: ~38 articles a file)
    assert not any(d.startswith("<doc") for d in documents)


def test_split_sentences_bounds_long_lines():
    assert split_sentences("It rained. The U.S. is big! Is it? yes.\nNext line") == [
        "It rained.",
        "The U.S. is big!",
        "Is it? yes.",
        "Next line",
    ]
    pieces = split_sentences("word " * 10_000, max_chars=100)
    assert max(map(len, pieces)) <= 100 and sum(len(p.split()) for p in pieces) == 10_000


# -- bad input -------------------------------------------------------------------------------------------------


def test_missing_file():
    with pytest.raises(BertologyError, match="not found: /no/such/file.txt"):
        load_corpus(train_files=["/no/such/file.txt"])


@pytest.mark.parametrize("content", ["", "   \n\n \t\n"])
def test_empty_or_whitespace_corpus(tmp_path, content):
    path = tmp_path / "empty.txt"
    path.write_text(content)
    with pytest.raises(BertologyError, match="empty"):
        load_corpus(train_files=[str(path)])


def test_non_utf8_names_file_and_offset(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("Good line.\nCaf\xe9 au lait.\n".encode("latin-1"))
    with pytest.raises(BertologyError, match=r"latin1.txt is not valid UTF-8: byte 14"):
        load_corpus(train_files=[str(path)])


def test_binary_file(tmp_path):
    path = tmp_path / "model.bin"
    path.write_bytes(b"\x00\x01\x02binary" * 100)
    with pytest.raises(BertologyError, match="binary"):
        load_corpus(train_files=[str(path)])


def test_fifty_megabyte_line_has_bounded_memory(tmp_path):
    """One 50 MB line is read and split into bounded sentences without holding many copies of it."""
    path = tmp_path / "big.txt"
    with open(path, "w") as handle:
        handle.write(("lorem ipsum dolor sit amet " * 1_900_000)[:50_000_000] + "\n")
    script = textwrap.dedent(
        f"""
        import resource
        from pathlib import Path
        from hf_bertology.data import read_documents, split_sentences
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        docs = list(read_documents(Path({str(path)!r})))
        pieces = split_sentences(docs[0])
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(len(docs), max(map(len, pieces)), (after - before) // 1024)
        """
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    n_docs, longest, grown_mb = map(int, run.stdout.split())
    assert n_docs == 1 and longest <= 2000
    assert grown_mb < 1000  # a few copies of 50 MB at most, never quadratic


# -- building examples -----------------------------------------------------------------------------------------


def tokenized_documents(tmp_path, tokenizer, documents):
    corpus = load_corpus(train_files=[str(write_corpus(tmp_path / "c.txt", documents))])
    return tokenize_corpus(corpus, tokenizer)


def test_tokenize_keeps_sentences_and_word_starts(tmp_path, bert_tokenizer, documents):
    tokenized = tokenized_documents(tmp_path, bert_tokenizer, documents[:5])
    assert len(tokenized) == 5
    first = tokenized[0]
    assert len(first["input_ids"]) == len(documents[0])  # one entry per sentence
    for ids, starts in zip(first["input_ids"], first["word_starts"]):
        assert len(ids) == len(starts) and starts[0] == 1
        tokens = bert_tokenizer.convert_ids_to_tokens(ids)
        assert [int(not t.startswith("##")) for t in tokens] == starts


def test_nsp_pairs_balanced_and_real(tmp_path, bert_tokenizer):
    documents = make_documents(n_docs=300, seed=1, min_sentences=6, max_sentences=14)
    tokenized = tokenized_documents(tmp_path, bert_tokenizer, documents)
    pairs = build_nsp_pairs(tokenized, bert_tokenizer, max_seq_length=64, seed=0)
    labels = pairs["next_sentence_label"]
    assert len(labels) > 800
    assert sum(labels) / len(labels) == pytest.approx(0.5, abs=0.03)
    streams = [key(sum(doc, [])) for doc in tokenized["input_ids"]]
    cls, sep = bert_tokenizer.cls_token_id, bert_tokenizer.sep_token_id
    n_checked_random = 0
    for example in pairs.select(range(300)):
        ids, types = example["input_ids"], example["token_type_ids"]
        assert len(ids) <= 64 and ids[0] == cls and ids[-1] == sep
        first_sep = ids.index(sep)
        a, b = ids[1:first_sep], ids[first_sep + 1 : -1]
        assert types == [0] * (len(a) + 2) + [1] * (len(b) + 1)
        homes_a = {i for i, s in enumerate(streams) if key(a) in s}
        homes_b = {i for i, s in enumerate(streams) if key(b) in s}
        assert homes_a and homes_b  # both segments are real text of the corpus
        if example["next_sentence_label"] == 0:
            # B continues A in the same document (truncation may trim A's end or B's start)
            assert any(streams[i].find(key(b), streams[i].find(key(a)) + len(key(a)) - 1) >= 0 for i in homes_a)
        elif len(homes_a) == 1 and len(homes_b) == 1:
            assert homes_a != homes_b  # a random next segment comes from another document
            n_checked_random += 1
    assert n_checked_random > 50


def key(tokens: list[int]) -> str:
    """Token ids as a string in which `in` means "contiguous sub-sequence"."""
    return "," + ",".join(map(str, tokens)) + ","


def test_doc_sentences_never_cross_documents(tmp_path, bert_tokenizer):
    documents = make_documents(n_docs=40, seed=2)
    tokenized = tokenized_documents(tmp_path, bert_tokenizer, documents)
    streams = [key(sum(doc, [])) for doc in tokenized["input_ids"]]
    blocks = pack_sentences(tokenized, bert_tokenizer, max_seq_length=48, cross_documents=False)
    for block in blocks["input_ids"]:
        assert len(block) <= 48
        assert any(key(block[1:-1]) in stream for stream in streams)  # contiguous text of a single document
    # FULL-SENTENCES packs across documents, with a separator between them
    full = pack_sentences(tokenized, bert_tokenizer, max_seq_length=48, cross_documents=True)
    assert len(full) < len(blocks)
    assert any(bert_tokenizer.sep_token_id in block[1:-1] for block in full["input_ids"])
    assert all(len(block) <= 48 for block in full["input_ids"])


def test_input_format_comes_from_the_recipe(tmp_path, bert_tokenizer, roberta_tokenizer, documents):
    bert = get_recipe("bert-tiny")
    tokenized = tokenized_documents(tmp_path, bert_tokenizer, documents[:20])
    examples = build_pretraining_dataset(tokenized, bert_tokenizer, bert.config, max_seq_length=64)
    assert set(examples.column_names) == {"input_ids", "token_type_ids", "word_starts", "next_sentence_label"}
    roberta = get_recipe("roberta-tiny")
    tokenized = tokenized_documents(tmp_path, roberta_tokenizer, documents[:20])
    examples = build_pretraining_dataset(tokenized, roberta_tokenizer, roberta.config, max_seq_length=64)
    assert set(examples.column_names) == {"input_ids", "word_starts"}
    assert examples[0]["input_ids"][0] == roberta_tokenizer.bos_token_id == 0


def test_streaming_corpus(tmp_path, bert_tokenizer, documents):
    path = write_corpus(tmp_path / "s.txt", documents[:10])
    stream = load_corpus(train_files=[str(path)], streaming=True)
    tokenized = tokenize_corpus(stream, bert_tokenizer)
    blocks = list(pack_sentences(tokenized, bert_tokenizer, max_seq_length=32))
    assert blocks and all(len(b["input_ids"]) <= 32 for b in blocks)


def test_wikitext_articles_are_documents(tmp_path):
    """WikiText's raw layout: an article per ` = Title = ` line, headings dropped, paragraphs kept as lines."""
    from hf_bertology.data.corpus import detect_format, read_documents

    text = (
        " \n = First Article = \n \n Para one of the first . \n \n = = A section = = \n \n Para two . \n"
        " \n = = = Deeper = = = \n Para three .\n \n = Second = \n \n Only para .\n"
    )
    path = tmp_path / "wiki.test.raw"
    path.write_text(text, encoding="utf-8")
    assert detect_format(path) == "wikitext"
    assert list(read_documents(path)) == ["Para one of the first .\nPara two .\nPara three .", "Only para ."]


def test_embedded_corpus_is_wikitext2_checked(tmp_path, monkeypatch):
    """The embedded WikiText-2 decompresses to the official members (sha256 checked) and reads as articles; a
    damaged copy in the cache is replaced, not trained on."""
    from hf_bertology.data import default_corpus
    from hf_bertology.data.corpus import read_documents

    monkeypatch.setenv("HF_BERTOLOGY_CACHE", str(tmp_path))
    train, validation = default_corpus.default_corpus_files()
    assert Path(train[0]).name == "wiki.test.raw" and Path(validation[0]).name == "wiki.valid.raw"
    assert len(list(read_documents(Path(train[0])))) == 62 and len(list(read_documents(Path(validation[0])))) == 60
    Path(train[0]).write_text("damaged")
    assert (
        default_corpus._sha256(default_corpus.default_corpus_file("wiki.test.raw"))
        == default_corpus.SHA256["wiki.test.raw"]
    )
