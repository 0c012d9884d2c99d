"""The checks every pretraining model passes, one parametrized test per check over the seven MLM families
(XLNet and the composed cells have their own inputs: tests/test_xlnet.py, tests/test_composed.py)."""

from __future__ import annotations

import pytest
import torch

from model_tester import LABELLED, OUTPUT_FIELDS, VOCAB, tiny_family_batch, tiny_family_model

FAMILIES = list(OUTPUT_FIELDS)


@pytest.mark.parametrize("family", FAMILIES)
def test_without_labels_the_logits_are_dense(family):
    model = tiny_family_model(family)
    inputs = tiny_family_batch(family)
    with torch.no_grad():
        out = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
    _, dense_field, per_token = OUTPUT_FIELDS[family]
    expected = (2, 12) if per_token else (2, 12, VOCAB)
    assert getattr(out, dense_field).shape == expected
    assert out.loss is None


@pytest.mark.parametrize("family", FAMILIES)
def test_with_labels_the_loss_is_finite_and_the_logits_sparse(family):
    model = tiny_family_model(family)
    with torch.no_grad():
        out = model(**tiny_family_batch(family))
    mlm_field, _, _ = OUTPUT_FIELDS[family]
    assert getattr(out, mlm_field).shape == (2 * len(LABELLED), VOCAB)  # only the labelled positions
    assert out.loss.ndim == 0 and torch.isfinite(out.loss) and out.loss > 0
    assert torch.isfinite(out.mlm_loss)


@pytest.mark.parametrize("family", FAMILIES)
def test_save_and_reload_give_equal_logits(family, tmp_path):
    model = tiny_family_model(family)
    inputs = tiny_family_batch(family, seed=1)
    model.save_pretrained(tmp_path)
    reloaded = type(model).from_pretrained(tmp_path).eval()
    with torch.no_grad():
        before, after = model(**inputs), reloaded(**inputs)
    mlm_field, _, _ = OUTPUT_FIELDS[family]
    torch.testing.assert_close(getattr(after, mlm_field), getattr(before, mlm_field), rtol=0, atol=1e-6)
    if family in ("electra", "deberta_v3"):  # the sampled replacements are random: compare the discriminator alone
        plain = {"input_ids": inputs["input_ids"], "attention_mask": inputs["attention_mask"]}
        with torch.no_grad():
            torch.testing.assert_close(reloaded(**plain).rtd_logits, model(**plain).rtd_logits, rtol=0, atol=1e-6)
    else:
        torch.testing.assert_close(after.loss, before.loss, rtol=0, atol=1e-6)
