"""Sparse MLM prediction and the masking collator against transformers, measured in one run.

1. Step time (forward + backward) of `BertologyBertForPreTraining` against `transformers.BertForPreTraining`:
   BERT-base config, sequence length 128, batch 8, CPU fp32, the same weights and batch (15% of tokens labelled,
   NSP labels). Target: ratio <= 0.85.
2. Collator time per 256 x 128 batch: our `DataCollatorForMaskedLM` against transformers'
   `DataCollatorForLanguageModeling` (target <= 1.0x), and whole-word masking against transformers' whole-word mode
   (target <= 0.1x).

    python benchmarks/sparse_mlm.py [--steps 10] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import BertForPreTraining, DataCollatorForLanguageModeling

from hf_bertology import BertologyBertConfig, BertologyBertForPreTraining, DataCollatorForMaskedLM
from hf_bertology.data import train_tokenizer


def timed(fn, repeats: int, warmup: int = 2) -> float:
    """Median wall time of `fn()` in seconds."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def step_benchmark(steps: int) -> tuple[float, float]:
    torch.manual_seed(0)
    config = BertologyBertConfig()  # BERT-base: 12 layers, hidden 768, vocab 30522
    ours = BertologyBertForPreTraining(config).train()
    reference = BertForPreTraining(config).train()
    reference.load_state_dict(ours.state_dict())
    g = torch.Generator().manual_seed(0)
    input_ids = torch.randint(1000, config.vocab_size, (8, 128), generator=g)
    labels = torch.where(torch.rand(8, 128, generator=g) < 0.15, input_ids, -100)
    batch = {
        "input_ids": input_ids,
        "attention_mask": torch.ones_like(input_ids),
        "token_type_ids": (torch.arange(128) >= 64).long().expand(8, -1),
        "labels": labels,
        "next_sentence_label": torch.randint(0, 2, (8,), generator=g),
    }

    def step(model):
        model.zero_grad(set_to_none=True)
        model(**batch).loss.backward()

    # interleave the two models so that load on the machine affects both alike
    ours_times, reference_times = [], []
    for _ in range(steps):
        ours_times.append(timed(lambda: step(ours), 1, warmup=0 if ours_times else 1))
        reference_times.append(timed(lambda: step(reference), 1, warmup=0 if reference_times else 1))
    return statistics.median(ours_times), statistics.median(reference_times)


def collator_benchmark(repeats: int) -> dict[str, float]:
    texts = [line for line in WIKI_SAMPLE.split("\n") if line.strip()]
    tokenizer = train_tokenizer(texts * 20, "wordpiece", vocab_size=2000)
    encoded = tokenizer(texts * (256 // len(texts) + 1), truncation=True, max_length=128, padding="max_length")
    features = [{"input_ids": ids} for ids in encoded["input_ids"][:256]]
    ours = DataCollatorForMaskedLM(tokenizer, seed=0)
    ours_wwm = DataCollatorForMaskedLM(tokenizer, whole_word_mask=True, seed=0)
    reference = DataCollatorForLanguageModeling(tokenizer, seed=0)
    # transformers' whole-word mode needs offsets, pre-padded to a fixed length
    with_offsets = tokenizer(
        texts * (256 // len(texts) + 1),
        truncation=True,
        max_length=128,
        padding="max_length",
        return_offsets_mapping=True,
    )
    wwm_features = [
        {"input_ids": ids, "offset_mapping": offsets}
        for ids, offsets in zip(with_offsets["input_ids"][:256], with_offsets["offset_mapping"][:256])
    ]
    reference_wwm = DataCollatorForLanguageModeling(
        tokenizer, whole_word_mask=True, mask_replace_prob=1.0, random_replace_prob=0.0, seed=0
    )
    return {
        "ours": timed(lambda: ours(features), repeats),
        "transformers": timed(lambda: reference(features), repeats),
        "ours_wwm": timed(lambda: ours_wwm(features), repeats),
        "transformers_wwm": timed(lambda: reference_wwm(wwm_features), repeats),
    }


WIKI_SAMPLE = """
Anarchism is a political philosophy that advocates stateless societies often defined as self-governed voluntary institutions, but that several authors have defined as more specific institutions based on non-hierarchical free associations.
Anarchism holds the state to be undesirable, unnecessary, or harmful. While anti-statism is central, anarchism entails opposing authority or hierarchical organisation in the conduct of human relations, including, but not limited to, the state system.
The word "anarchism" is composed from the word "anarchy" and the suffix -ism, themselves derived respectively from the Greek, i.e. anarchy (from anarchos, meaning "one without rulers"; from the privative prefix ἀν- (an-, i.e. "without") and ἀρχός, archos, i.e. "leader", "ruler").
Autism is a neurodevelopmental disorder characterized by impaired social interaction, verbal and non-verbal communication, and restricted and repetitive behavior. Parents usually notice signs in the first two years of their child's life.
Albedo, or reflection coefficient, is the diffuse reflectivity or reflecting power of a surface. It is the ratio of reflected radiation from the surface to incident radiation upon it. Its dimensionless nature lets it be expressed as a percentage and is measured on a scale from zero for no reflection of a perfectly black surface to 1 for perfect reflection of a white surface.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10, help="timed training steps per model")
    parser.add_argument("--repeats", type=int, default=20, help="timed collator calls")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    ours, reference = step_benchmark(args.steps)
    print(
        f"BERT-base step (fwd+bwd, 8x128, fp32 CPU): ours {ours * 1000:.0f} ms, transformers {reference * 1000:.0f} ms"
    )
    print(f"  ratio ours/transformers = {ours / reference:.3f}  (target <= 0.85)")
    times = collator_benchmark(args.repeats)
    print(
        f"collator 256x128: ours {times['ours'] * 1000:.1f} ms, transformers {times['transformers'] * 1000:.1f} ms, "
        f"ratio {times['ours'] / times['transformers']:.3f} (target <= 1.0)"
    )
    print(
        f"whole-word 256x128: ours {times['ours_wwm'] * 1000:.1f} ms, transformers "
        f"{times['transformers_wwm'] * 1000:.1f} ms, ratio {times['ours_wwm'] / times['transformers_wwm']:.3f} "
        "(target <= 0.1)"
    )


if __name__ == "__main__":
    main()
