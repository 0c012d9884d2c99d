"""`--low_precision_layernorm` (`training.low_precision`): under bf16 autocast the residual stream stays bf16 through
every LayerNorm, the loss stays within bf16's reach of the fp32-LayerNorm one, and nothing else changes."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from transformers import TrainerCallback

import hf_bertology as hb
from hf_bertology.collators.flatten import add_target_positions
from hf_bertology.data import load_corpus
from hf_bertology.training.low_precision import LowPrecisionLayerNorm, use_low_precision_layernorm
from hf_bertology.training.pretrain import main
from platform_support import no_dropout, tiny_examples

# relative; measured at initialisation, one bf16 step: 9e-6 (bert-tiny), 7e-5 (roberta), 6e-6 (electra), 9e-6 (albert)
LOSS_TOLERANCE = 1e-3


@pytest.fixture(scope="module")
def bert(corpus_file):
    recipe, tokenizer, examples = tiny_examples("bert", load_corpus(train_files=[str(corpus_file)]), 48)
    batch = add_target_positions(recipe.build_collator(tokenizer, seed=3)([examples[i] for i in range(4)]))
    return recipe, batch


def _bf16_step(model, batch):
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(**batch, output_hidden_states=True)
    out.loss.backward()
    return out


def test_the_residual_stream_stays_bf16_and_the_loss_within_tolerance(bert):
    recipe, batch = bert
    torch.manual_seed(0)
    model = recipe.build_model().train()
    reference = _bf16_step(model, batch)
    assert all(states.dtype == torch.float32 for states in reference.hidden_states[1:])  # autocast's LayerNorm
    use_low_precision_layernorm(model)
    out = _bf16_step(model, batch)
    assert all(states.dtype == torch.bfloat16 for states in out.hidden_states), [s.dtype for s in out.hidden_states]
    torch.testing.assert_close(out.loss.float(), reference.loss.float(), rtol=LOSS_TOLERANCE, atol=0.0)
    assert out.loss.float() != reference.loss.float()  # it did run in bf16
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(g.dtype == torch.float32 and g.isfinite().all() for g in grads)  # fp32 master weights


@pytest.mark.parametrize("variant", ["electra", "modernbert", "deberta-v3"])
def test_every_layernorm_is_swapped_and_the_checkpoint_is_the_same(variant):
    vocabulary = {"vocab_size": 50368} if variant == "modernbert" else {}  # its special ids are above 1000
    recipe = hb.get_recipe(f"{variant}-tiny", **vocabulary, **no_dropout(f"{variant}-tiny"))
    torch.manual_seed(0)
    model = recipe.build_model().eval()
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    input_ids = torch.randint(5, 900, (2, 12))
    with torch.no_grad():
        expected = model(input_ids=input_ids).rtd_logits if variant != "modernbert" else model(input_ids).logits
    parameters = {id(p) for p in model.parameters()}
    use_low_precision_layernorm(model)
    norms = [m for m in model.modules() if isinstance(m, nn.LayerNorm)]
    assert norms and all(type(m) is LowPrecisionLayerNorm for m in norms)
    assert {id(p) for p in model.parameters()} == parameters  # ties and an optimizer's references hold
    after = model.state_dict()
    assert after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)
    with torch.no_grad():  # without autocast: nn.LayerNorm exactly
        got = model(input_ids=input_ids).rtd_logits if variant != "modernbert" else model(input_ids).logits
    assert torch.equal(got, expected)


def test_pretrain_flag(corpus_file, tmp_path):
    """`bertology pretrain --low_precision_layernorm` trains with it (a CPU bf16 run)."""
    seen = {}

    class Record(TrainerCallback):
        def on_train_begin(self, args, state, control, model=None, **kwargs):
            seen["norms"] = {type(m).__name__ for m in model.modules() if isinstance(m, nn.LayerNorm)}

    argv = ["--recipe", "bert-tiny", "--train_file", str(corpus_file), "--output_dir", str(tmp_path / "run"),
            "--vocab_size", "300", "--max_steps", "2", "--per_device_train_batch_size", "4", "--use_cpu", "true",
            "--bf16", "true", "--report_to", "none", "--low_precision_layernorm", "true"]  # fmt: skip
    metrics = main(argv, callbacks=[Record()])
    assert seen["norms"] == {"LowPrecisionLayerNorm"}
    assert torch.isfinite(torch.tensor(metrics["train_loss"]))
