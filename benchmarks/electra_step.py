"""Training-step time of joint ELECTRA-Small against an MLM step of the same discriminator size, on CPU.

    python benchmarks/electra_step.py [--batch 8] [--length 128] [--steps 16]

One step = forward + backward + AdamW step, on the same collated batch (electra-small's masking: 15%, at most 19
predictions). Compared in the same run, steps interleaved so that load from other processes hits both alike:

- `electra-small` joint: discriminator L12/H256/E128 + generator L12/H64 (1 head), sampling, RTD over all tokens.
- reference `mlm`: the discriminator's network trained as a masked LM (the paper's BERT-Small baseline): transformers'
  `ElectraForMaskedLM` with the discriminator's config (L12/H256/E128), its head run on the masked positions only
  (sparse, as our MLM models do). The primary reference: the same encoder, MLM instead of RTD.
- reference `bert-mlm`: `BertologyBertForPreTraining` of the discriminator's size (L12/H256/A4/FFN1024, vocab
  30522, so E = H = 256), sparse MLM loss only (no NSP label).
- reference `electra-mlm`: transformers' `ElectraForMaskedLM` with the discriminator's config (E128), whose head
  projects every position onto the vocabulary (what one would get from run_mlm.py).

Prints the median seconds per step and the ratio ELECTRA / reference (median over steps of the paired ratio); the
target is <= 1.35x the `mlm` step. Run with OMP_NUM_THREADS=1 on a shared machine: fewer stalls between threads.
"""

from __future__ import annotations

import argparse
import statistics
import time
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from transformers import ElectraForMaskedLM

import hf_bertology as hb
from hf_bertology.models.configuration_bert import BertologyBertConfig
from hf_bertology.models.modeling_bert import BertologyBertForPreTraining


class SparseElectraForMaskedLM(ElectraForMaskedLM):
    """`ElectraForMaskedLM` whose head runs only on the labelled positions (mean CE over them)."""

    def forward(self, input_ids, attention_mask=None, labels=None, **kwargs):
        hidden = self.electra(input_ids, attention_mask=attention_mask).last_hidden_state
        chosen = labels.ne(-100)  # (B, T)
        logits = self.generator_lm_head(self.generator_predictions(hidden[chosen]))  # (M, V)
        return SimpleNamespace(loss=F.cross_entropy(logits, labels[chosen]))


def make_batch(batch: int, length: int, vocab: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random non-special ids framed by [CLS]/[SEP]; 19 chosen positions per row (15% of 128, capped), 85% [MASK]."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (batch, length), generator=gen)
    ids[:, 0], ids[:, -1] = 2, 3
    n_predict = min(19, round(length * 0.15))
    scores = torch.rand(batch, length - 2, generator=gen)
    chosen = torch.zeros(batch, length, dtype=torch.bool)
    chosen[:, 1:-1] = scores.argsort(1).argsort(1) < n_predict
    labels = torch.where(chosen, ids, -100)
    masked = chosen & (torch.rand(batch, length, generator=gen) < 0.85)
    return {"input_ids": ids.masked_fill(masked, 4), "attention_mask": torch.ones_like(ids), "labels": labels}


def step_fn(model: torch.nn.Module, batch: dict[str, torch.Tensor]):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, eps=1e-6, weight_decay=0.01)

    def step() -> float:
        start = time.perf_counter()
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - start

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()

    torch.manual_seed(0)
    electra_config = hb.get_recipe("electra-small").config
    bert_config = BertologyBertConfig(
        vocab_size=electra_config.vocab_size,
        hidden_size=electra_config.hidden_size,
        num_hidden_layers=electra_config.num_hidden_layers,
        num_attention_heads=electra_config.num_attention_heads,
        intermediate_size=electra_config.intermediate_size,
    )
    models = {
        "electra-small": hb.BertologyElectraForPreTraining(electra_config),
        "mlm": SparseElectraForMaskedLM(electra_config.discriminator_config()),
        "bert-mlm": BertologyBertForPreTraining(bert_config),
        "electra-mlm": ElectraForMaskedLM(electra_config.discriminator_config()),
    }
    batch = make_batch(args.batch, args.length, electra_config.vocab_size)
    steps = {name: step_fn(model.train(), batch) for name, model in models.items()}
    times: dict[str, list[float]] = {name: [] for name in models}
    for i in range(args.warmup + args.steps):
        for name, step in steps.items():  # interleaved: machine load hits every model alike
            elapsed = step()
            if i >= args.warmup:
                times[name].append(elapsed)

    medians = {name: statistics.median(values) for name, values in times.items()}
    print(f"batch {args.batch}x{args.length}, {args.steps} steps, {torch.get_num_threads()} threads (CPU)")
    for name, model in models.items():
        params = sum(p.numel() for p in model.parameters())
        print(
            f"  {name:<14} {medians[name] * 1000:8.1f} ms/step (median; min {min(times[name]) * 1000:.1f})  "
            f"{params / 1e6:.1f}M parameters"
        )
    # Paired ratio: each ELECTRA step against the reference step run right after it (same machine load).
    for reference in ("mlm", "bert-mlm", "electra-mlm"):
        paired = statistics.median(a / b for a, b in zip(times["electra-small"], times[reference]))
        best = min(times["electra-small"]) / min(times[reference])
        target = " (target <= 1.35x)" if reference == "mlm" else ""
        print(
            f"ratio electra-small / {reference:<11} = {paired:.2f}x (median of paired steps), {best:.2f}x min{target}"
        )


if __name__ == "__main__":
    main()
