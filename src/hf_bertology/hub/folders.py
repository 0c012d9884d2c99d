"""Hub-format folders: `save_folder` writes the model (safetensors, modeling code for remote code), the tokenizer,
the plain backbone's untrained parts (`complete_backbone`) and `architectures` naming the plain `transformers` class
(`plain_class_of`)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..utils import BertologyError


def plain_classes(model_type: str) -> list[str]:
    """transformers' own classes for `model_type`, most complete first: the pretraining class, the masked LM, the
    base model."""
    from transformers.models.auto import modeling_auto

    mappings = ("MODEL_FOR_PRETRAINING_MAPPING_NAMES", "MODEL_FOR_MASKED_LM_MAPPING_NAMES", "MODEL_MAPPING_NAMES")
    names = [getattr(modeling_auto, mapping).get(model_type) for mapping in mappings]
    return list(dict.fromkeys(name for name in names if isinstance(name, str)))


def plain_class_of(model: PreTrainedModel) -> type[PreTrainedModel] | None:
    """The most complete plain `transformers` class whose every trained parameter `model` holds under the same name
    (e.g. `BertForPreTraining`, `RobertaForMaskedLM`; `DebertaV2Model` for a joint DeBERTa-v3): what `architectures`
    names, so the Hub and pipelines pick a class plain `transformers` has."""
    import transformers

    ours = set(model.state_dict())
    for name in plain_classes(model.config.model_type):
        plain_class = getattr(transformers, name)
        with torch.device("meta"):
            plain = plain_class(model.config)
        prefix = f"{model.base_model_prefix}." if plain.base_model is plain else ""  # a base model: no prefix
        if {prefix + key for key in plain.state_dict() if ".pooler." not in f".{key}"} <= ours:
            return plain_class
    return None


def complete_backbone(model: PreTrainedModel, folder: Path) -> list[str]:
    """Add to `folder`'s weights what the family's plain base model has and `model` lacks (RoBERTa's pooler:
    `RobertaForMaskedLM` has none, `RobertaForMultipleChoice` uses it). The values are the plain
    class's own initialisation under a fixed seed, so every `AutoModelFor*` load gets the same backbone and only the
    new task head is random; the released roberta-base ships such a pooler too."""
    import transformers
    from safetensors.torch import load_file, save_file

    weights = folder / "model.safetensors"
    base_name = (plain_classes(model.config.model_type) or [None])[-1]
    if base_name is None or not weights.is_file():
        return []
    state = load_file(weights)
    prefix = "" if model.base_model is model else f"{model.base_model_prefix}."  # a base model: no prefix
    with torch.device("meta"):
        names = getattr(transformers, base_name)(model.config).state_dict()
    missing = [name for name in names if prefix + name not in state]
    if not missing:
        return []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        base = getattr(transformers, base_name)(model.config)
    fresh = base.state_dict()
    state.update({prefix + name: fresh[name].contiguous() for name in missing})
    save_file(state, weights, metadata={"format": "pt"})
    return [prefix + name for name in missing]


def save_folder(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, output_dir: str | Path, networks: tuple = ()
) -> Path:
    """`save_pretrained` for model (safetensors only, modeling code copied) and tokenizer; the weights completed
    with the plain backbone's untrained parts (`complete_backbone`) and `architectures` naming the plain
    `transformers` class (`plain_class_of`; ours stays under `auto_map`, which remote code reads). `networks`: the
    model's when it holds two (`Recipe.networks`): the folder then keeps our class."""
    if not networks and getattr(model.config, "writes_joint_type", False):  # a joint config (JointConfig)
        raise ValueError("a model with two networks is saved with them (`networks=recipe.networks`)")
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(output_dir, safe_serialization=True)
    tokenizer.save_pretrained(output_dir)
    if not (output_dir / "model.safetensors").exists() and not list(output_dir.glob("model-*.safetensors")):
        raise BertologyError(f"no safetensors weights were written to {output_dir}")
    complete_backbone(model, output_dir)
    # a joint run's folder keeps our class (a class plain transformers has would let its pipelines load the
    # discriminator for any task under trust_remote_code); its parts are plain folders (`joint.write_part_folders`)
    plain_class = None if networks else plain_class_of(model)
    if plain_class is not None:
        config_path = output_dir / "config.json"
        config = json.loads(config_path.read_text())
        config["architectures"] = [plain_class.__name__]
        config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return output_dir
