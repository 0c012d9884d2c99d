"""aten operations per optimizer step (`benchmarks/op_counts.py`): no recipe's count grows by more than 10% over the
number recorded in `benchmarks/op_counts.json` (on a GPU each one is a kernel launch; small models are launch-bound).
After a change meant to add operations, re-record: `python benchmarks/op_counts.py --write`."""

from __future__ import annotations

import importlib.util
import json

import pytest

from hf_bertology.recipes import VARIANTS
from platform_support import REPO


def _op_counts():
    spec = importlib.util.spec_from_file_location("op_counts", REPO / "benchmarks" / "op_counts.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def op_counts():
    return _op_counts()


@pytest.fixture(scope="module")
def corpus(op_counts):
    return op_counts.synthetic_corpus()


RECORDED = json.loads((REPO / "benchmarks" / "op_counts.json").read_text())


def test_every_variant_is_recorded():
    assert set(RECORDED) == set(VARIANTS)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_op_count_does_not_grow(op_counts, corpus, variant):
    counted = op_counts.measure(variant, corpus, plain=False)
    recorded = RECORDED[variant]["ours"]
    assert counted["ours"] <= 1.10 * recorded, f"{variant}: {counted['ours']} aten ops per step, recorded {recorded}"


def test_the_counter_counts_views_apart(op_counts):
    import torch

    x = torch.ones(4, 4)
    with op_counts.OpCounter() as counter:
        x.view(16) + 1
    assert dict(counter.ops) == {"aten.view": 1, "aten.add": 1}
    assert counter.total == 2 and counter.non_view == 1


@pytest.mark.parametrize("variant", ["bert", "electra"])
def test_no_more_operations_than_plain(op_counts, corpus, variant):
    """BERT with NSP and ELECTRA, a step the Trainer does not log: no more operations than plain
    `BertForPreTraining` / `ElectraForMaskedLM` + `ElectraForPreTraining` with the stock Trainer's label count, in
    total (views included: each is still a dispatch on the host) and not counting views (each of the others is a
    kernel launch on a GPU), even on CPU, where our attention re-pads every layer (the CUDA path runs one
    variable-length kernel instead) and ELECTRA hashes its sampling noise from per-token keys."""
    counted = op_counts.measure(variant, corpus)
    assert counted["ours_non_view"] <= counted["plain_non_view"], counted
    assert counted["ours"] <= counted["plain"], counted
