"""ELECTRA's efficiency ablations (Clark et al. 2020, §3.2, Table 5) as objectives of their own, on every encoder:
"ELECTRA 15%" (the discriminator's loss over the chosen tokens only) and "Replace MLM" (the chosen tokens replaced
by generator samples instead of [MASK], trained with masked LM). Each trains as `NAME@BACKBONE` on the bert,
roberta, albert, electra, modernbert and deberta backbones; its loss reads what the paper says and nothing else; no
example sees another. The composed-cell matrix (tests/test_composed.py) and the digests hold them too.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from hf_bertology.collators.flatten import add_target_positions
from hf_bertology.data import build_pretraining_dataset, load_corpus, tokenize_corpus
from hf_bertology.recipes import get_recipe
from platform_support import no_dropout

BACKBONES = ["bert", "roberta", "albert", "electra", "modernbert", "deberta"]
LENGTH = 48


@pytest.fixture(scope="module")
def corpus(corpus_file):
    return load_corpus(train_files=[str(corpus_file)])


_SETUPS: dict = {}


def setup(objective: str, backbone: str, corpus):
    """(model in training mode, padded batch of 6 examples with target positions) of `objective-tiny@backbone`
    (the objective's own encoder: its paper recipe), seed 0, no dropout."""
    name = f"{objective}-tiny" + ("" if backbone == "electra" else f"@{backbone}")
    if name not in _SETUPS:
        recipe = get_recipe(name, **no_dropout(name))
        tokenizer = recipe.train_tokenizer(corpus["text"], 300)
        recipe.adapt_to_tokenizer(tokenizer)
        recipe.fit_to_length(LENGTH)
        examples = build_pretraining_dataset(tokenize_corpus(corpus, tokenizer), tokenizer, recipe.config, LENGTH, 0)
        features = [examples[i] for i in range(len(examples) - 6, len(examples))]  # unequal lengths
        batch = add_target_positions(recipe.build_collator(tokenizer, seed=3)(features))
        _SETUPS[name] = (recipe, tokenizer, batch)
    recipe, tokenizer, batch = _SETUPS[name]
    torch.manual_seed(0)
    return recipe.build_model().train(), tokenizer, batch


def trains(model, batch, term: str, steps: int = 8) -> tuple[float, float]:
    """(first, last) value of the loss term `term` over `steps` AdamW steps on one batch (the sampling seeded)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    values = []
    for step in range(steps):
        torch.manual_seed(step)
        out = model(**batch)
        values.append(out[term].item())
        out.loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return values[0], values[-1]


def no_example_sees_another(model, batch, logits_of) -> None:
    """Gradient leakage through the whole step (the generator's samples included): `logits_of(output)`'s rows of
    example 0 have a zero gradient on every other example's input embeddings of the model's own encoder."""
    captured = {}

    def keep(module, args, output):
        output.retain_grad()
        captured["embeddings"] = output

    table = model.base_model.get_input_embeddings()
    handle = table.register_forward_hook(keep)
    try:
        torch.manual_seed(0)
        output = model(**batch)
    finally:
        handle.remove()
    logits, rows = logits_of(output, batch)
    logits[rows == 0].sum().backward()
    grad = captured["embeddings"].grad  # (B, T, E)
    assert grad[0].abs().sum() > 0
    assert grad[1:].abs().sum() == 0


@pytest.mark.parametrize("backbone", BACKBONES)
@pytest.mark.parametrize("objective,term", [("electra-15", "rtd_loss"), ("replace-mlm", "mlm_loss")])
def test_it_trains_on_every_encoder(objective, term, backbone, corpus):
    """8 optimizer steps on one batch: the objective's own term falls (the discriminator's, the masked LM's)."""
    model, _, batch = setup(objective, backbone, corpus)
    first, last = trains(model, batch, term)
    assert last < first - 0.05, (first, last)


# -- "ELECTRA 15%" ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backbone", BACKBONES)
def test_electra_15_loss_reads_the_chosen_tokens_only(backbone, corpus):
    """The discriminator's loss is the mean BCE over the chosen tokens (15% of the real ones), from the model's own
    logits and labels; its gradient is zero on every other token; the Trainer's count is the chosen tokens'
    (`labels`), and ELECTRA's own loss on the same logits differs (it reads every real token)."""
    model, _, batch = setup("electra-15", backbone, corpus)
    torch.manual_seed(0)
    out = model(**batch)
    chosen = batch["labels"].ne(-100)
    assert 0 < chosen.sum() < batch["attention_mask"].sum() / 4
    reference = F.binary_cross_entropy_with_logits(out.rtd_logits[chosen].double(), out.rtd_labels[chosen].double())
    torch.testing.assert_close(out.rtd_loss.double(), reference, rtol=1e-5, atol=1e-6)
    (grad,) = torch.autograd.grad(out.rtd_loss, out.rtd_logits, retain_graph=True)
    assert grad[~chosen].abs().sum() == 0 and grad[chosen].abs().sum() > 0
    every_real = F.binary_cross_entropy_with_logits(
        out.rtd_logits[batch["attention_mask"].bool()].double(),
        out.rtd_labels[batch["attention_mask"].bool()].double(),
    )
    assert not torch.isclose(out.rtd_loss.double(), every_real)
    counts = {"labels": chosen.sum() * 2, "attention_mask": batch["attention_mask"].sum()}  # this batch, twice over
    torch.manual_seed(0)
    halved = model(**batch, num_items_in_batch=counts).rtd_loss
    torch.testing.assert_close(halved, out.rtd_loss / 2)


@pytest.mark.parametrize("backbone", BACKBONES)
def test_electra_15_no_example_sees_another(backbone, corpus):
    model, _, batch = setup("electra-15", backbone, corpus)

    def rtd_logits(output, batch):
        rows = torch.arange(len(batch["input_ids"]))[:, None].expand_as(output.rtd_logits)
        return output.rtd_logits, rows

    no_example_sees_another(model, batch, rtd_logits)


# -- "Replace MLM" ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backbone", BACKBONES)
def test_replace_mlm_predicts_the_chosen_tokens_from_the_generator_samples(backbone, corpus):
    """The main network reads the generator's samples at every chosen token (the collator's [MASK]s are gone, every
    other token is the input's), and its masked LM is the mean NLL of the originals there: recomputed from the
    backbone on the replaced ids alone. The generator's loss is its own mean NLL; `loss` = MLM + generator."""
    model, tokenizer, batch = setup("replace-mlm", backbone, corpus)
    model.eval()
    with torch.no_grad():
        out = model(**batch)
        chosen = batch["labels"].ne(-100)
        masked = batch["input_ids"].eq(tokenizer.mask_token_id) & chosen
        assert masked.float().sum() > 0.5 * chosen.sum()  # 85% [MASK] in the generator's input
        replaced = out.replaced_input_ids
        assert torch.equal(replaced[~chosen], batch["input_ids"][~chosen])
        assert replaced[masked].eq(tokenizer.mask_token_id).float().mean() < 0.1  # samples, not [MASK]
        inputs = {k: batch[k] for k in ("attention_mask", "token_type_ids") if k in batch}
        if backbone == "modernbert":
            inputs.pop("token_type_ids", None)
        if backbone == "roberta":  # the step counts a corrupted row's positions on its mask
            mask = batch["attention_mask"].long()
            inputs["position_ids"] = mask.cumsum(-1) * mask + model.config.pad_token_id
        states = model.base_model(replaced, **inputs).last_hidden_state  # the full layer, every row
        logits = model.predict(states.flatten(0, 1)[batch["target_positions"]])
    torch.testing.assert_close(out.logits, logits, rtol=1e-4, atol=1e-5)
    targets = batch["labels"].flatten()[batch["target_positions"]]
    close = {"rtol": 1e-5, "atol": 1e-6}  # float32 losses against float64 references
    torch.testing.assert_close(out.mlm_loss.double(), F.cross_entropy(out.logits.double(), targets), **close)
    reference = F.cross_entropy(out.generator_logits.double(), targets)
    torch.testing.assert_close(out.generator_loss.double(), reference, **close)
    torch.testing.assert_close(out.loss, out.mlm_loss + out.generator_loss)


@pytest.mark.parametrize("backbone", BACKBONES)
def test_replace_mlm_no_example_sees_another(backbone, corpus):
    model, _, batch = setup("replace-mlm", backbone, corpus)
    width = batch["input_ids"].shape[1]

    def mlm_logits(output, batch):
        rows = (batch["target_positions"] // width)[:, None].expand_as(output.logits)
        return output.logits, rows

    no_example_sees_another(model, batch, mlm_logits)
