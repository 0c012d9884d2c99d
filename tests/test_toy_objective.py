"""A two-network objective is one `Variant` row plus its model code (docs/ARCHITECTURE.md, "Two networks").

This file defines one that no module of the package knows: a tiny joint model (a `BertModel` discriminator at
`bert.*` with a head of its own, a `BertForMaskedLM` generator at `mlm.*`, not at `generator.*`) and its row, with
its `networks`. Registered in `VARIANTS` and nowhere else, it is exported, written as part folders that plain
`transformers` loads, carded, started from its released parts and given the two-stage callback as the paper joint
models are, with no edit to export.py, joint.py, hub.py or training/.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file
from torch import nn
from transformers import (
    AutoModel,
    AutoModelForMaskedLM,
    BertConfig,
    BertForMaskedLM,
    BertModel,
    BertPreTrainedModel,
)

from hf_bertology import cli
from hf_bertology.collators import DataCollatorForMaskedLM
from hf_bertology.hub import plain_class_of, save_folder, write_model_card
from hf_bertology.joint import export_part, joint_config, load_parts, write_part_folders
from hf_bertology.recipes import VARIANTS, Network, Recipe, Variant, is_joint, networks_of
from hf_bertology.training.callbacks import ElectraTwoStageCallback, callbacks_for
from hf_bertology.training.run_recipe import build_model

PLAIN_FIELDS = set(BertConfig().to_dict()) - {"architectures", "model_type"}


class ToyJointConfig(BertConfig):
    """BERT's config (`model_type` "bert") and two fields of the objective's."""

    def __init__(self, generator_hidden_size: int = 16, two_stage_generator_steps: int | None = None, **kwargs):
        self.generator_hidden_size = generator_hidden_size
        self.two_stage_generator_steps = two_stage_generator_steps
        super().__init__(**kwargs)


def discriminator_config(config) -> BertConfig:
    return BertConfig(**{key: value for key, value in config.to_dict().items() if key in PLAIN_FIELDS})


def generator_config(config) -> BertConfig:
    generator = discriminator_config(config)
    generator.hidden_size = config.generator_hidden_size
    generator.intermediate_size = 2 * generator.hidden_size
    return generator


class ToyJointForPreTraining(BertPreTrainedModel):
    """The model code: a generator fills the masked tokens, the discriminator tells which tokens were replaced."""

    config_class = ToyJointConfig

    def __init__(self, config):
        super().__init__(config)
        self.bert = BertModel(config)
        self.replaced = nn.Linear(config.hidden_size, 1)  # a head only the joint model has
        self.mlm = BertForMaskedLM(generator_config(config))
        self.training_stage = "joint"
        self.post_init()

    def forward(self, input_ids, attention_mask=None, labels=None):
        logits = self.mlm(input_ids=input_ids, attention_mask=attention_mask).logits
        filled = torch.where(labels >= 0, logits.argmax(-1), input_ids) if labels is not None else input_ids
        scores = self.replaced(self.bert(input_ids=filled, attention_mask=attention_mask).last_hidden_state)
        return scores.squeeze(-1)

    def start_discriminator_stage(self, initialize: bool = True) -> None:
        self.training_stage = "discriminator"


# The row: the classes, and what each network is in plain transformers.
TOY = Variant(
    "toy",
    ToyJointConfig,
    ToyJointForPreTraining,
    DataCollatorForMaskedLM,
    "wordpiece",
    networks=(
        Network("discriminator", BertModel, "bert.", lambda joint: discriminator_config(joint.config)),
        Network("generator", BertForMaskedLM, "mlm.", lambda joint: generator_config(joint.config)),
    ),
)
TINY = dict(
    hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, max_position_embeddings=64
)


def toy_model(vocab_size: int, seed: int = 0, **fields) -> ToyJointForPreTraining:
    torch.manual_seed(seed)
    return ToyJointForPreTraining(ToyJointConfig(vocab_size=vocab_size, **TINY, **fields)).eval()


@pytest.fixture
def toy(monkeypatch):
    """The row registered, as a family module's `VARIANT` is (undone after the test)."""
    monkeypatch.setitem(VARIANTS, "toy", TOY)
    return TOY


def tensors(folder):
    return load_file(folder / "model.safetensors")


def test_the_row_alone_makes_the_model_joint(bert_tokenizer, monkeypatch, tmp_path):
    model = toy_model(len(bert_tokenizer))
    assert not is_joint(model)  # unknown until its row is registered
    monkeypatch.setitem(VARIANTS, "toy", TOY)
    assert is_joint(model) and is_joint(model.config)
    assert [network.name for network in networks_of(model)] == ["discriminator", "generator"]
    model.save_pretrained(tmp_path / "checkpoint")  # a Trainer checkpoint: our class under `architectures`
    assert is_joint(tmp_path / "checkpoint") and type(joint_config(tmp_path / "checkpoint")) is ToyJointConfig
    assert not is_joint(BertModel(BertConfig(**TINY))) and not is_joint(tmp_path / "missing")


def test_a_run_folder_writes_both_networks_as_plain_transformers_folders(toy, bert_tokenizer, tmp_path):
    """What `bertology pretrain` writes at the end of the run (training/outputs.py), in its order."""
    model, run = toy_model(len(bert_tokenizer)), tmp_path / "run"
    assert plain_class_of(model) is BertModel  # a one-network model would be written as a BertModel ...
    networks = Recipe("toy-tiny", "toy", model.config, {}, len(bert_tokenizer), 64).networks  # the row's, as a run's
    save_folder(model, bert_tokenizer, run, networks)
    assert json.loads((run / "config.json").read_text())["architectures"] == ["ToyJointForPreTraining"]  # ... not so
    folders = write_part_folders(model, networks, bert_tokenizer, run, recipe="toy-tiny", variant="toy", corpus="c")
    assert folders == [run / "discriminator", run / "generator"]
    write_model_card(run, model, recipe="toy-tiny", variant="toy", corpus="c", networks=networks)
    card = (run / "README.md").read_text()
    assert "**two networks**" in card and "the discriminator, `BertModel`" in card
    assert "the generator, `BertForMaskedLM`" in card

    ids = torch.randint(5, len(bert_tokenizer), (2, 9), generator=torch.Generator().manual_seed(1))
    discriminator, info = AutoModel.from_pretrained(run / "discriminator", output_loading_info=True)
    assert type(discriminator) is BertModel and not any(info.values()), info
    generator, info = AutoModelForMaskedLM.from_pretrained(run / "generator", output_loading_info=True)
    assert type(generator) is BertForMaskedLM and not info["missing_keys"]
    assert all(".pooler." in key for key in info["unexpected_keys"])  # the seeded pooler its AutoModel builds
    with torch.no_grad():
        torch.testing.assert_close(
            discriminator.eval()(input_ids=ids).last_hidden_state, model.bert(input_ids=ids).last_hidden_state
        )
        torch.testing.assert_close(generator.eval()(input_ids=ids).logits, model.mlm(input_ids=ids).logits)
    for part in ("discriminator", "generator"):
        config = json.loads((run / part / "config.json").read_text())
        assert "auto_map" not in config and "generator_hidden_size" not in config
        assert (run / part / "tokenizer_config.json").is_file() and (run / part / "README.md").is_file()
    assert json.loads((run / "generator" / "config.json").read_text())["hidden_size"] == 16


def test_export_and_the_released_parts_read_back(toy, bert_tokenizer, tmp_path, capfd):
    """`bertology export --part` (and its old name) writes each network; `--generator_name_or_path` starts a joint
    model from the two folders (`build_model`), every weight of theirs in place and only the joint head new."""
    model, run = toy_model(len(bert_tokenizer)), tmp_path / "run"
    save_folder(model, bert_tokenizer, run, networks_of(model))
    for part in ("discriminator", "generator"):
        export_part(run, tmp_path / part, part)
    assert cli.main(["export", "--electra-part", "generator", str(run), str(tmp_path / "old-flag")]) == 0
    assert "--electra-part is the old name of --part" in capfd.readouterr().err
    assert tensors(tmp_path / "old-flag").keys() == tensors(tmp_path / "generator").keys()

    config = ToyJointConfig(vocab_size=len(bert_tokenizer), **TINY)
    recipe = Recipe("toy-tiny", "toy", config, {}, config.vocab_size, 64)
    paths = SimpleNamespace(
        model_name_or_path=str(tmp_path / "discriminator"), generator_name_or_path=str(tmp_path / "generator")
    )
    torch.manual_seed(1)
    joint = build_model(recipe, paths)
    original, started = model.state_dict(), joint.state_dict()
    assert [key for key in started if not torch.equal(started[key], original[key])] == ["replaced.weight"]  # new
    fresh = toy_model(len(bert_tokenizer), seed=2)
    assert load_parts(fresh, recipe.networks, {"discriminator": model.bert, "generator": model.mlm}) == [
        "replaced.bias",
        "replaced.weight",
    ]
    assert all(torch.equal(fresh.state_dict()[key], value) for key, value in started.items() if "replaced." not in key)


def test_the_two_stage_callback_follows_the_declaration(toy, bert_tokenizer):
    model = toy_model(len(bert_tokenizer), two_stage_generator_steps=2)
    callbacks = callbacks_for(model, networks_of(model))
    assert [type(callback) for callback in callbacks] == [ElectraTwoStageCallback]
    callbacks[0].on_step_begin(None, SimpleNamespace(global_step=2), None, model=model)
    assert model.training_stage == "discriminator"
    one = BertForMaskedLM(BertConfig(**TINY))
    one.config.two_stage_generator_steps = 2
    assert callbacks_for(one, networks_of(one)) == []  # one network: nothing to switch
