"""Padding-free batches: the same loss, gradients and counts as the padded batch, and no attention across examples."""

from __future__ import annotations

import pytest
import torch

from hf_bertology.collators.flatten import PaddingFreeCollator, flatten_batch
from hf_bertology.data import load_corpus
from hf_bertology.recipes import VARIANTS
from hf_bertology.training.attention import PACKED_ATTENTION, set_attention, use_padding_free
from hf_bertology.training.trainer import BertologyTrainer, is_count_key
from platform_support import assert_same_step, loss_and_grads, tiny_examples

PACKABLE = [name for name, spec in VARIANTS.items() if spec.padding_free]


def test_every_paper_variant_but_xlnet_is_padding_free():
    # XLNet's and DeBERTa's attention are their own code (no AttentionInterface). ModernBERT's rows of packed
    # documents flatten into one attention unit per document (tests/test_modernbert_recipe.py).
    assert sorted(PACKABLE) == sorted(set(VARIANTS) - {"xlnet", "deberta-v3"})


@pytest.fixture(scope="module")
def setups(corpus_file):
    """variant -> (recipe, collator, a batch of 6 real examples of unequal lengths)."""
    out = {}
    corpus = load_corpus(train_files=[str(corpus_file)])
    for variant in PACKABLE:
        recipe, tokenizer, examples = tiny_examples(variant, corpus, 48)
        collator = recipe.build_collator(tokenizer, seed=3)
        features = [examples[i] for i in range(6)]
        if len({len(f["input_ids"]) for f in features}) == 1:  # rows packed best-fit come longest first
            features = [examples[i] for i in range(len(examples) - 6, len(examples))]
        out[variant] = (recipe, collator, features)
    return out


@pytest.mark.parametrize("variant", PACKABLE)
def test_padding_free_equals_padded(setups, variant):
    recipe, collator, features = setups[variant]
    padded = collator(features)
    lengths = padded["attention_mask"].sum(1)
    assert lengths.min() < padded["attention_mask"].shape[1], "the batch must hold padding to test anything"
    flat = flatten_batch(padded)
    assert flat["input_ids"].shape == (1, int(lengths.sum()))

    torch.manual_seed(0)
    model = set_attention(recipe.build_model(), PACKED_ATTENTION).train()  # dropout is 0: deterministic
    # the Trainer's counts of both layouts are equal (masked tokens, sequences, real tokens)
    count = BertologyTrainer._get_num_items_in_batch

    class _Args:
        average_tokens_across_devices, world_size = False, 1

    host = type("Host", (), {"model_accepts_loss_kwargs": True, "args": _Args()})()
    counts_padded = count(host, [padded], torch.device("cpu"))
    counts_flat = count(host, [flat], torch.device("cpu"))
    assert {k: int(v) for k, v in counts_padded.items()} == {k: int(v) for k, v in counts_flat.items()}
    assert any(is_count_key(k) for k in counts_flat)

    expected = loss_and_grads(model, padded, counts_padded)
    assert_same_step(expected, loss_and_grads(model, flat, counts_flat), label=variant)


@pytest.mark.parametrize("variant", PACKABLE)
def test_no_example_sees_another_in_a_packed_row(setups, variant):
    """Leakage by gradient: the outputs at example j's tokens do not depend on example i's input embeddings."""
    recipe, collator, features = setups[variant]
    flat = flatten_batch(collator(features))
    torch.manual_seed(0)
    model = use_padding_free(recipe.build_model()).eval()
    backbone = model.base_model
    cu = flat["cu_seq_lens_q"].long()
    embeds = backbone.get_input_embeddings()(flat["input_ids"]).detach().requires_grad_(True)  # (1, T, E)
    hidden = backbone(
        inputs_embeds=embeds,
        token_type_ids=flat.get("token_type_ids"),
        position_ids=flat["position_ids"] + (recipe.config.pad_token_id + 1 if variant == "roberta" else 0),
        cu_seq_lens_q=flat["cu_seq_lens_q"],
        cu_seq_lens_k=flat["cu_seq_lens_k"],
        max_length_q=flat["max_length_q"],
        max_length_k=flat["max_length_k"],
    ).last_hidden_state  # (1, T, H)
    probe = torch.randn(hidden.shape[1:], generator=torch.Generator().manual_seed(0))
    for j in range(len(cu) - 1):
        # a random projection, not `.sum()`: the final LayerNorm makes the sum's gradient vanish (to rounding)
        probed = (hidden[0, cu[j] : cu[j + 1]] * probe[cu[j] : cu[j + 1]]).sum()
        (grad,) = torch.autograd.grad(probed, embeds, retain_graph=True)
        touched = grad[0].abs().sum(-1) > 0  # (T,)
        inside = torch.zeros_like(touched)
        inside[cu[j] : cu[j + 1]] = True
        assert touched[inside].all(), f"{variant}: example {j} does not depend on all its own tokens"
        assert not touched[~inside].any(), f"{variant}: example {j} depends on another example's tokens"


def test_packed_heads_read_their_own_example(setups):
    """NSP/SOP read each example's first token: permuting the examples permutes the sentence logits."""
    for variant, key in (("bert", "seq_relationship_logits"), ("albert", "sop_logits")):
        recipe, collator, features = setups[variant]
        torch.manual_seed(0)
        model = use_padding_free(recipe.build_model()).eval()
        padded = collator(features)
        flat = flatten_batch(padded)
        flat_reversed = flatten_batch({k: v.flip(0) for k, v in padded.items()})  # the same examples, reversed
        with torch.no_grad():
            logits = model(**{k: v for k, v in flat.items() if "label" not in k})[key]
            reversed_logits = model(**{k: v for k, v in flat_reversed.items() if "label" not in k})[key]
        torch.testing.assert_close(reversed_logits, logits.flip(0), rtol=1e-5, atol=1e-5)


def test_packed_batch_under_plain_sdpa_is_refused(setups):
    recipe, collator, features = setups["bert"]
    model = set_attention(recipe.build_model(), "sdpa")
    with pytest.raises(ValueError, match="padding-free batch needs attn_implementation"):
        model(**flatten_batch(collator(features)))


def test_wrapper_and_refusals(setups):
    recipe, collator, features = setups["roberta"]
    wrapped = PaddingFreeCollator(collator)
    assert wrapped.mlm_probability == collator.mlm_probability  # settings read through
    assert wrapped(features)["input_ids"].shape[0] == 1
    with pytest.raises(ValueError, match="cannot be flattened"):
        flatten_batch({"input_ids": torch.ones(2, 3), "attention_mask": torch.ones(2, 3), "perm_mask": torch.ones(1)})
    with pytest.raises(ValueError, match="right padding"):
        flatten_batch({"input_ids": torch.ones(1, 3), "attention_mask": torch.tensor([[0, 1, 1]])})
