"""docs/ARCHITECTURE.md's checklist for a new variant and a new objective, held by two that no module of the package
knows, each defined in this file alone and registered where the checklist says.

- A two-network objective is one `Variant` row plus its model code ("Two networks"): a tiny joint model (a
  `BertModel` discriminator at `bert.*` with a head of its own, a `BertForMaskedLM` generator at `mlm.*`, not at
  `generator.*`) and its row, with its `networks`. Registered in `VARIANTS` and nowhere else, it is exported, written
  as part folders that plain `transformers` loads, carded, started from its released parts and given the two-stage
  callback as the paper joint models are, with no edit to export.py, joint.py, hub/ or training/.
- A third objective (random-token detection: a new loss, head, output and collator key on BERT's encoder),
  registered in the places the checklist quotes (`VARIANTS`, `PRESETS`) and nowhere else, is pretrained by
  `bertology pretrain`: counted, logged, saved, carded and read back.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch import nn
from transformers import (
    AutoModel,
    AutoModelForMaskedLM,
    BertConfig,
    BertForMaskedLM,
    BertModel,
    BertPreTrainedModel,
    TrainerCallback,
)

from hf_bertology import cli
from hf_bertology.collators import DataCollatorForMaskedLM
from hf_bertology.collators.base import pad_features
from hf_bertology.hub import plain_class_of, save_folder, write_model_card
from hf_bertology.joint import export_part, joint_config, load_parts, write_part_folders
from hf_bertology.models.outputs import BertologyForPreTrainingOutput, step_mean
from hf_bertology.recipes import VARIANTS, Network, Recipe, Variant, is_joint, kind_of, networks_of
from hf_bertology.recipes import recipe as recipe_module
from hf_bertology.recipes.base import make_preset
from hf_bertology.training.callbacks import ElectraTwoStageCallback, callbacks_for
from hf_bertology.training.pretrain import main as pretrain
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


# -- a third objective: docs/ARCHITECTURE.md, "Adding a variant or an objective" ------------------------------------
# Random-token detection on BERT's encoder: the collator swaps a share of the tokens for random ones and labels every
# real token (1: swapped), a linear head scores each token, the loss is the binary cross-entropy over the real tokens.
# It is written here alone, with its config, model, output, collator and row, and registered where the checklist
# says a new objective registers: nowhere else in the package learns of it.


class SwapDetectionConfig(BertConfig):
    """BERT's config (`model_type` "bert") and the objective's fields: the swapped share, the examples' format."""

    def __init__(self, swap_probability: float = 0.15, input_format: str = "full_sentences", **kwargs):
        self.swap_probability = swap_probability
        self.input_format = input_format
        super().__init__(**kwargs)


@dataclass
class SwapDetectionOutput(BertologyForPreTrainingOutput):
    """The shared output and the objective's own fields: the Trainer logs every scalar field."""

    swap_loss: torch.Tensor | None = None
    swap_accuracy: torch.Tensor | None = None
    swap_logits: torch.Tensor | None = None


class SwapDetectionForPreTraining(BertPreTrainedModel):
    config_class = SwapDetectionConfig

    def __init__(self, config):
        super().__init__(config)
        self.bert = BertModel(config, add_pooling_layer=False)
        self.swap_head = nn.Linear(config.hidden_size, 1)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, *, swap_labels=None, num_items_in_batch=None, **inputs):
        """The objective's step, top to bottom: encode, score every token, the loss over the labelled tokens as a
        sum over the step's count (`step_mean`: the Trainer counts `swap_labels`' labelled tokens)."""
        inputs = {key: value for key, value in inputs.items() if key != "return_metrics"}
        states = self.bert(input_ids, attention_mask=attention_mask, **inputs).last_hidden_state
        logits = self.swap_head(states).squeeze(-1)  # (B, L)
        if swap_labels is None:
            return SwapDetectionOutput(swap_logits=logits)
        labelled = swap_labels.ne(-100)
        summed = F.binary_cross_entropy_with_logits(logits[labelled], swap_labels[labelled].float(), reduction="sum")
        count = step_mean(num_items_in_batch, "swap_labels", labelled.sum(), labelled.sum())
        loss = summed / count
        accuracy = ((logits[labelled] > 0) == swap_labels[labelled].bool()).float().mean()
        return SwapDetectionOutput(loss=loss, swap_loss=loss.detach(), swap_accuracy=accuracy, swap_logits=logits)


@dataclass
class DataCollatorForSwapDetection:
    """Pads the examples (`pad_features`) and swaps `swap_probability` of the real non-special tokens for random
    ones, drawn from the collator's own generator; `swap_labels` 1 where swapped, 0 elsewhere, -100 on padding."""

    tokenizer: Any
    swap_probability: float = 0.15
    seed: int = 0

    @classmethod
    def from_config(cls, config, tokenizer, **overrides):
        return cls(tokenizer=tokenizer, swap_probability=config.swap_probability, **overrides)

    def __post_init__(self):
        self.generator = torch.Generator().manual_seed(self.seed)

    def __call__(self, features):
        batch = pad_features(features, self.tokenizer.pad_token_id)
        batch.pop("special_tokens_mask", None)
        batch.pop("word_starts", None)
        ids, real = batch["input_ids"], batch["attention_mask"].bool()
        special = torch.isin(ids, torch.tensor(self.tokenizer.all_special_ids))
        swapped = (torch.rand(ids.shape, generator=self.generator) < self.swap_probability) & real & ~special
        random_ids = torch.randint(len(self.tokenizer), ids.shape, generator=self.generator)
        batch["input_ids"] = torch.where(swapped, random_ids, ids)
        batch["swap_labels"] = torch.where(real, swapped.long(), -100)
        return batch


SWAP = Variant(
    "swap-detection",
    SwapDetectionConfig,
    SwapDetectionForPreTraining,
    DataCollatorForSwapDetection,
    "wordpiece",
    padding_free=False,
    card_objective="random-token detection: 15% of the tokens swapped for random ones, BCE over every real token",
)
# Where docs/ARCHITECTURE.md says a new objective registers (the names its checklist quotes, in `recipes/recipe.py`).
REGISTRIES = {"VARIANTS": {"swap-detection": SWAP}, "PRESETS": {"swap-detection-tiny": None}}


def checklist() -> str:
    """docs/ARCHITECTURE.md's "Adding a variant or an objective" section."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    return text.split("## Adding a variant or an objective", 1)[1].split("\n## ", 1)[0]


def test_the_checklist_names_where_a_new_objective_registers():
    """The sentence of the checklist that says where a new objective registers quotes exactly the registries the toy
    objective below registers in (and every one of them is a table of `recipes/recipe.py`)."""
    (sentence,) = [line for line in checklist().splitlines() if "registers itself in" in line]
    quoted = set(re.findall(r"`([A-Z_]+)`", sentence))
    assert quoted == set(REGISTRIES)
    assert all(isinstance(getattr(recipe_module, name), dict) for name in quoted)


@pytest.fixture
def swap_objective(monkeypatch):
    """The objective's row and its tiny preset, registered as a family module's `VARIANT` and `PRESETS` are (undone
    after the test)."""
    preset = make_preset("swap-detection", "tiny", training={"logging_steps": 1})
    registries = {"VARIANTS": {"swap-detection": SWAP}, "PRESETS": {"swap-detection-tiny": preset}}
    assert registries.keys() == REGISTRIES.keys()
    for name, entries in registries.items():
        for key, value in entries.items():
            monkeypatch.setitem(getattr(recipe_module, name), key, value)
    return SWAP


def test_a_new_objective_pretrains_touching_only_the_checklists_places(swap_objective, corpus_file, tmp_path):
    """`bertology pretrain --recipe swap-detection-tiny` trains the new objective: its collator's key is counted
    (`step_mean` over the step's labelled tokens), its loss and accuracy logged, the folder and its card written
    (the row's `card_objective`), and the folder reads back as this objective's model."""
    out, history = tmp_path / "run", []
    recorder = type("Recorder", (TrainerCallback,), {"on_log": lambda self, *_, logs=None, **k: history.append(logs)})
    metrics = pretrain(
        ["--recipe", "swap-detection-tiny", "--train_file", str(corpus_file), "--output_dir", str(out)]
        + ["--max_steps", "3", "--per_device_train_batch_size", "4", "--logging_steps", "1", "--disable_tqdm", "true"],
        callbacks=[recorder()],
    )
    assert metrics["train_loss"] > 0 and torch.isfinite(torch.tensor(metrics["train_loss"]))
    logged = [entry for entry in history if "swap_loss" in entry]
    assert len(logged) == 3 and all(0 <= entry["swap_accuracy"] <= 1 for entry in logged)
    assert SWAP.card_objective in (out / "README.md").read_text()
    model = SwapDetectionForPreTraining.from_pretrained(out)
    assert isinstance(model.config, SwapDetectionConfig) and model.config.swap_probability == 0.15
    assert kind_of(model).variant is SWAP and not is_joint(model)
    assert "swap_loss" not in BertologyForPreTrainingOutput.__dataclass_fields__  # outputs.py was not touched
