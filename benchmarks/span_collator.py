"""Span collator speed: `DataCollatorForSpanMasking` (SpanBERT spans + SBO targets) vs transformers' whole-word MLM.

    python benchmarks/span_collator.py [--batch_size 256] [--seq_len 128] [--repeats 20]

Both collate the same 256 blocks of 128 tokens of WikiText-2 (shared/data), tokenized with a cased WordPiece
vocabulary trained on the same text. The reference is `transformers.DataCollatorForLanguageModeling` with
`whole_word_mask=True`, the closest thing transformers has to span masking; it needs fast-tokenizer
`offset_mapping` features pre-padded to one length (ARCHITECTURE.md pitfalls), so it gets those. Ours gets the
features `hf_bertology.data` makes (`input_ids`, `word_starts`). Prints the median and minimum time per batch
(the machine is shared: the minimum is the least disturbed run) and the ratio ours / reference.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from pathlib import Path

import torch
from transformers import DataCollatorForLanguageModeling

from hf_bertology.collators import DataCollatorForSpanMasking
from hf_bertology.data.corpus import read_documents, split_sentences
from hf_bertology.data.tokenize import _word_starts
from hf_bertology.data.vocab import train_tokenizer

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "wikitext-2-raw" / "wiki.valid.raw"


def blocks(tokenizer, texts: list[str], seq_len: int, count: int) -> list[dict]:
    """`count` blocks of `seq_len` tokens ([CLS] ... [SEP]) with ids, word starts and character offsets."""
    features, ids, starts, offsets = [], [], [], []
    for text in texts:
        for sentence in split_sentences(text):
            enc = tokenizer(sentence, add_special_tokens=False, return_offsets_mapping=True)
            ids += enc["input_ids"]
            starts += _word_starts(enc.word_ids())
            # Offsets only need to tell word pieces apart: shift each sentence so pieces never touch across it.
            base = offsets[-1][1] + 2 if offsets else 0
            offsets += [(base + a, base + b) for a, b in enc["offset_mapping"]]
            while len(ids) >= seq_len - 2 and len(features) < count:
                n = seq_len - 2
                features.append(
                    {
                        "input_ids": [tokenizer.cls_token_id, *ids[:n], tokenizer.sep_token_id],
                        "word_starts": [1, *starts[:n], 1],
                        "offset_mapping": [(0, 0), *offsets[:n], (0, 0)],
                    }
                )
                ids, starts, offsets = ids[n:], starts[n:], offsets[n:]
            if len(features) == count:
                return features
    raise SystemExit(f"{DATA} is too short for {count} blocks of {seq_len}")


def timed(fn, repeats: int) -> list[float]:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch_size", type=int, default=256)
    parser.add_argument("--seq_len", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if not DATA.is_file():
        raise SystemExit(f"needs {DATA} (the shared test data next to the repository)")
    texts = list(read_documents(DATA))
    tokenizer = train_tokenizer(texts, "wordpiece", 28996, do_lower_case=False)
    features = blocks(tokenizer, texts, args.seq_len, args.batch_size)
    ours_features = [{"input_ids": f["input_ids"], "word_starts": f["word_starts"]} for f in features]
    reference_features = [{"input_ids": f["input_ids"], "offset_mapping": f["offset_mapping"]} for f in features]

    ours = DataCollatorForSpanMasking(tokenizer, sbo_max_targets=15, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "random replacement not supported with whole words"
        reference = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15, whole_word_mask=True, seed=0)
    # Interleave the two so that load from other users hits both alike.
    ours_times, reference_times = [], []
    for _ in range(3):
        reference_times += timed(lambda: reference(reference_features), args.repeats // 3 + 1)
        ours_times += timed(lambda: ours(ours_features), args.repeats // 3 + 1)
    batch = ours(ours_features)
    share = (batch["labels"] != -100).sum() / (batch["attention_mask"].sum() - 2 * args.batch_size)
    ms = {
        name: (1000 * statistics.median(t), 1000 * min(t))
        for name, t in (("ours", ours_times), ("ref", reference_times))
    }
    print(f"batch {args.batch_size} x {args.seq_len}, masked share {share:.3f}, torch threads 1")
    print(
        f"transformers DataCollatorForLanguageModeling(whole_word_mask): median {ms['ref'][0]:.1f} ms, min {ms['ref'][1]:.1f} ms"
    )
    print(
        f"hf_bertology DataCollatorForSpanMasking (spans + SBO targets):  median {ms['ours'][0]:.1f} ms, min {ms['ours'][1]:.1f} ms"
    )
    print(f"ratio ours / reference: median {ms['ours'][0] / ms['ref'][0]:.3f}, min {ms['ours'][1] / ms['ref'][1]:.3f}")


if __name__ == "__main__":
    main()
