"""What every family module builds on: the `Variant` row (and the `Network`s of a two-network objective), the shared
encoder sizes and `make_preset`, and the checks every recipe's config goes through (unknown override keys, a config
class's errors as one line)."""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from huggingface_hub.errors import StrictDataclassError
from transformers import PretrainedConfig

from ..utils import BertologyError


@dataclass(frozen=True)
class Network:
    """One network of a joint model (ELECTRA's, DeBERTa-v3's, RTD's generator and discriminator, trained together),
    as plain `transformers` holds it alone: what `bertology export --part NAME`, a run's `NAME/` folder and
    `--generator_name_or_path` read and write (`hf_bertology.joint`, docs/ARCHITECTURE.md "Two networks")."""

    name: str  # "discriminator" | "generator": its folder and `--part`
    plain_class: type  # the transformers class whose parameter names it has (e.g. ElectraForMaskedLM)
    prefix: str  # where its weights sit in the joint model's state dict ("generator."; "": at the top)
    plain_config: Callable[[Any], PretrainedConfig]  # its plain config (no recipe fields), from the joint model
    # {start of a plain weight name: the joint model's} where the names differ (DeBERTa-v3's generator head)
    rename: dict[str, str] = field(default_factory=dict)
    # its weights (names under `prefix`) that checkpoints of an earlier version lack: they load without them
    may_lack: tuple[str, ...] = ()


@dataclass(frozen=True)
class Variant:
    """One pretraining method: which classes implement it and which tokenizer family it uses."""

    name: str
    config_class: type
    model_class: type
    collator_class: type
    tokenizer_type: str  # "wordpiece" | "bpe" | "unigram"
    tokenizer_class: str | None = None  # transformers class name when the family default is not right
    plain_auto_class: str = "AutoModelForPreTraining"  # the plain-transformers class that loads the checkpoint
    trainer_class: str = "trainer.BertologyTrainer"  # module.Class under hf_bertology.training (no upward import)
    padding_free: bool = True  # batches can be flattened (collators/flatten.py); XLNet's permutation inputs cannot
    # (config field, rule(config, max_seq_length)): the prediction cap the official code derives from the length
    prediction_cap: tuple[str, Callable[[PretrainedConfig, int], int]] | None = None
    # {config field: rule(config, max_seq_length)}: other settings the paper sizes by the length (XLNet's memory)
    length_rules: dict[str, Callable[[PretrainedConfig, int], int]] = field(default_factory=dict)
    # The paper's encoder (a key of BACKBONES; None: the objective works on no other, as XLNet's) and the objective's
    # parts other than masking (fields of the composed config, see models/composed) when it runs on another encoder.
    backbone: str | None = None
    parts: dict[str, Any] = field(default_factory=dict)
    # Two networks trained together, each also written as a plain folder; the first is the one fine-tuned, whose
    # values a table both share takes. Empty: one network. (An RTD objective on another encoder: composed.py.)
    networks: tuple[Network, ...] = ()
    card_objective: str = ""  # the objective in one line, as the model card's "objective" row shows it
    # config fields and values that tell this row's checkpoints from those of another row on the same classes
    identified_by: dict[str, Any] = field(default_factory=dict)


# Encoder sizes: the papers' base/large, a CPU demo (mini) and a test size (tiny).
SIZES: dict[str, dict[str, int]] = {
    "base": {"num_hidden_layers": 12, "hidden_size": 768, "num_attention_heads": 12, "intermediate_size": 3072},
    "large": {"num_hidden_layers": 24, "hidden_size": 1024, "num_attention_heads": 16, "intermediate_size": 4096},
    "mini": {"num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4, "intermediate_size": 1024},
    "tiny": {"num_hidden_layers": 2, "hidden_size": 32, "num_attention_heads": 4, "intermediate_size": 37},
}

# Small presets train fast on a CPU: small vocabulary, short sequences, a short schedule with 6% warmup. Their global
# batch is one micro-batch of one process (the paper presets state only the paper's global batch).
SMALL_TRAINING = {
    "mini": {"global_batch_size": 32, "per_device_train_batch_size": 32, "learning_rate": 5e-4, "warmup_steps": 0.06,
             "max_steps": 2000},
    "tiny": {"global_batch_size": 8, "per_device_train_batch_size": 8, "learning_rate": 1e-3, "warmup_steps": 0.06,
             "max_steps": 10},
}  # fmt: skip
SMALL_DATA = {"mini": {"vocab_size": 8000, "max_seq_length": 128}, "tiny": {"vocab_size": 1000, "max_seq_length": 64}}


def make_preset(
    variant: str,
    size: str,
    config: dict | None = None,
    training: dict | None = None,
    tuned: dict | None = None,
    **data,
) -> dict:
    """A preset's row. `tuned`: a small size's training settings chosen by the family's sweep (issue 52, the family
    page's "Mini sweep"), over `SMALL_TRAINING`'s shared ones."""
    small = size in SMALL_DATA
    return {
        "variant": variant,
        "config": {**SIZES[size], **(config or {})},
        "training": {**(training or {}), **(SMALL_TRAINING[size] if small else {}), **(tuned or {})},
        "data": {**data, **(SMALL_DATA[size] if small else {})},
    }


def _fields(config_class: type) -> set[str]:
    return set(config_class().to_dict())


def _family_config(config_class: type) -> type:
    """The `transformers` config a hf_bertology config class extends (`BertConfig` for ours and composed ones)."""
    return next(base for base in config_class.__mro__[1:] if base.__module__.startswith("transformers."))


# What a config class raises for a bad value: its own checks, and transformers' strict dataclass validation.
CONFIG_ERRORS = (ValueError, TypeError, StrictDataclassError)


def _one_line(err: Exception) -> str:
    """The error's message as one line (a strict dataclass error puts its reason on a second line)."""
    return " ".join(str(err).split()) or type(err).__name__


def check_override_keys(recipe: str, overrides: dict[str, Any], known: set[str]) -> None:
    """A config override must name a field of the recipe's config: `PretrainedConfig` keeps any unknown keyword as an
    attribute, so a misspelt `num_hidden_layer=1` would otherwise train the default depth without a word."""
    for key in overrides:
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise BertologyError(f"{recipe}: {key!r} is not a field of its config{hint}")


def parse_overrides(text: str | None, separator: str = ",", flag: str = "--config_overrides") -> dict:
    """`"a=1,b=0.5,c=true,d=gelu"` -> `{"a": 1, "b": 0.5, "c": True, "d": "gelu"}`."""
    overrides = {}
    for item in filter(None, (text or "").split(separator)):
        if "=" not in item:
            raise BertologyError(f"{flag} expects key=value pairs, got {item!r}")
        key, raw = (part.strip() for part in item.split("=", 1))
        try:
            overrides[key] = json.loads(raw.lower() if raw.lower() in ("true", "false", "null") else raw)
        except json.JSONDecodeError:
            overrides[key] = raw
    return overrides
