"""`bertology export`: write one network of a joint checkpoint as a vanilla `transformers` folder.

    bertology export --electra-part discriminator runs/electra-small runs/electra-small-discriminator
    bertology export --electra-part generator runs/electra-small runs/electra-small-generator
    bertology export --deberta_v3_part generator runs/deberta-v3-base runs/deberta-v3-base-generator
    bertology export --part generator runs/electra-small-roberta runs/electra-small-roberta-generator

`--part` reads which joint model a checkpoint holds from its `config.json`: ELECTRA, DeBERTa-v3, or an RTD
objective on another encoder (`--backbone`, `models/composed`), whose generator is written as the family's
`*ForMaskedLM` (e.g. `RobertaForMaskedLM`) and discriminator as the family's base model (`RobertaModel`).

The folders have the layout of the released `google/electra-*-discriminator` / `-generator` checkpoints: a plain
`config.json` (`ElectraConfig` fields only: no `auto_map`, no recipe fields), `model.safetensors` with the names of
`ElectraForPreTraining` / `ElectraForMaskedLM`, and the tokenizer. Nothing of hf_bertology is needed to load them.
DeBERTa-v3 the same way: the discriminator as a `DebertaV2Model` (its word table the merged E_G + Δ under GDES),
the generator as a `DebertaV2ForMaskedLM` (`lm_predictions.lm_head.*`, as the released `pytorch_model.generator.bin`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import torch
from transformers import AutoTokenizer, DebertaV2ForMaskedLM, DebertaV2Model, ElectraForMaskedLM, ElectraForPreTraining

from .hub import complete_backbone, write_part_card
from .models import configuration_deberta_v3, modeling_deberta_v3
from .models.configuration_composed import COMPOSED_CONFIGS, JOINT_MODEL_TYPE
from .models.configuration_deberta_v3 import JOINT_MODEL_TYPE as DEBERTA_V3_JOINT_MODEL_TYPE
from .models.configuration_deberta_v3 import BertologyDebertaV3Config
from .models.configuration_electra import JOINT_MODEL_TYPE as ELECTRA_JOINT_MODEL_TYPE
from .models.configuration_electra import BertologyElectraConfig, discriminator_config, generator_config
from .models.modeling_composed import COMPOSED_MODELS
from .models.modeling_electra import BertologyElectraForPreTraining
from .utils import BertologyError, logger, refuse_same_folder, run_command, set_verbosity

ELECTRA_PARTS = {
    # part -> (vanilla class, config builder, prefix of its weights in the joint model)
    "discriminator": (ElectraForPreTraining, discriminator_config, ""),
    "generator": (ElectraForMaskedLM, generator_config, "generator."),
}


MODEL_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "config.json")


def check_target(output_dir: str | Path, overwrite: bool = False) -> None:
    """The folder to export into: a path that is a file, or a folder that already holds a model, is refused before
    any work (`save_pretrained` would replace its weights silently); `overwrite` allows the second."""
    output_dir = Path(output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise BertologyError(f"{output_dir} is a file, not a folder: give a folder to export into")
    held = [name for name in MODEL_FILES if (output_dir / name).is_file()]
    if held and not overwrite:
        raise BertologyError(
            f"{output_dir} already holds a model ({', '.join(held)}): choose another folder, or pass --overwrite "
            "to replace it"
        )


def _write(model, checkpoint: Path, output_dir: Path, tokenizer=None) -> Path:
    output_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(output_dir, safe_serialization=True)
    # a masked-LM generator (RoBERTa's, BERT's, ALBERT's) has no pooler and its family's AutoModel has one: the
    # seeded pooler the discriminator ships too, so that every load gives the same network
    complete_backbone(model, output_dir)
    try:
        tokenizer = tokenizer or AutoTokenizer.from_pretrained(checkpoint, config=joint_config(checkpoint))
        tokenizer.save_pretrained(output_dir)
    except (OSError, ValueError):
        logger.warning("no tokenizer in %s: %s holds only the model", checkpoint, output_dir)
    return output_dir


def _card(output_dir: Path, part: str, checkpoint: Path, variant: str) -> None:
    """The exported folder's model card: what it holds and what to use it for (`hub.write_part_card`)."""
    write_part_card(output_dir, part, recipe=checkpoint.name, variant=variant, corpus=f"see `{checkpoint}`")


def _read_config(checkpoint: Path) -> dict:
    try:
        return json.loads((checkpoint / "config.json").read_text())
    except (OSError, ValueError):
        raise BertologyError(f"{checkpoint} is not a checkpoint folder (no readable config.json)") from None


# Parameters a plain class has and the pretraining objective never trains (a pooler no loss reaches): kept at the
# plain class's own initialisation, drawn from a fixed seed, so every load of the folder gives the same network.
UNTRAINED = (".pooler.",)


def fill_by_name(model, state: dict, prefix: str, rename: dict[str, str] | None = None) -> list[str]:
    """Load every parameter of the plain `model` from `state[prefix + name]` (`rename` maps the plain class's names
    to the joint model's where they differ). Driven by the plain class's names, so modules that only the joint
    model has (an extra generator head, GDES's Δ) are left out and returned; a parameter the plain class needs and
    the joint model lacks stops the export, unless the objective never trains it (`UNTRAINED`): that one keeps the
    model's (seeded) initialisation."""

    def source(name: str) -> str:
        return _joint_name(name, prefix, rename)

    wanted = {name: state[source(name)] for name in model.state_dict() if source(name) in state}
    absent = [n for n in model.state_dict() if n not in wanted and not any(u in f".{n}" for u in UNTRAINED)]
    if absent:
        raise BertologyError(f"the joint model has no weights for the plain {type(model).__name__}: {absent[:3]}")
    model.load_state_dict(wanted, strict=False)
    used = {source(name) for name in wanted}
    return sorted(k for k in state if k.startswith(prefix) and k not in used)


def _seeded(build):
    """`build()` under a fixed seed, leaving the global random state as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return build()


# The released DeBERTa-v3 generator's head, in the layout every transformers version resizes correctly:
# `legacy=True` names it `cls.predictions.*` with a decoder tied to the word table. (With `legacy=False`,
# `DebertaV2ForMaskedLM.get_output_embeddings` returns the head's hidden x hidden `dense`, so
# `resize_token_embeddings`, which run_mlm.py calls, reshapes that layer and the forward fails on the LayerNorm.)
DEBERTA_V3_LEGACY_HEAD = {
    "cls.predictions.transform.dense.": "lm_predictions.lm_head.dense.",
    "cls.predictions.transform.LayerNorm.": "lm_predictions.lm_head.LayerNorm.",
    "cls.predictions.bias": "lm_predictions.lm_head.bias",
    "cls.predictions.decoder.bias": "lm_predictions.lm_head.bias",
    "cls.predictions.decoder.weight": "deberta.embeddings.word_embeddings.weight",
}


def part_layout(joint, part: str):
    """(plain class, plain config, prefix of its weights in the joint model, renames) of network `part`
    ("discriminator" or "generator") of a joint model: the one map by which `plain_part` writes a part and
    `load_parts` reads one."""
    if part not in PARTS:
        raise BertologyError(f"unknown part {part!r}; choose one of {', '.join(PARTS)}")
    rename = None
    if isinstance(joint, BertologyElectraForPreTraining):
        model_class, config_builder, prefix = ELECTRA_PARTS[part]
        config = config_builder(joint.config)
    elif isinstance(joint, modeling_deberta_v3.BertologyDebertaV3ForPreTraining):
        model_class, config_builder, prefix = DEBERTA_V3_PARTS[part]
        config = config_builder(joint.config)
        if part == "generator":
            config.legacy, rename = True, DEBERTA_V3_LEGACY_HEAD
    elif type(joint) in COMPOSED_MODELS.values() and joint.config.replaced_token_detection:
        family_config = type(joint.base_model).config_class  # e.g. RobertaConfig
        if part == "generator":  # the family's *ForMaskedLM
            model_class, config, prefix = type(joint.generator), joint.generator.config, "generator."
        else:  # the family's base model
            model_class, config, prefix = type(joint.base_model), joint.config, f"{joint.base_model_prefix}."
        config = _plain_config(config, family_config)
        if part == "generator":  # its output layer is its word table (untied in the joint only to tie it there)
            config.tie_word_embeddings = True
        if part == "generator" and config.model_type == "deberta-v2":
            config.legacy = True  # see DEBERTA_V3_LEGACY_HEAD (a composed generator is built with the default)
    else:
        raise BertologyError(f"{type(joint).__name__} has no generator and discriminator")
    return model_class, config, prefix, rename


def _joint_name(name: str, prefix: str, rename: dict[str, str] | None) -> str:
    """Where the plain part's weight `name` lives in the joint model."""
    old = next((old for old in rename or {} if name.startswith(old)), None)
    return prefix + (rename[old] + name[len(old) :] if old is not None else name)


def plain_part(joint, part: str):
    """Network `part` ("discriminator" or "generator") of a loaded joint model (ELECTRA, DeBERTa-v3 or an RTD
    objective on another encoder) as the plain `transformers` class a user loads, with its weights."""
    model_class, config, prefix, rename = part_layout(joint, part)
    model = _seeded(lambda: model_class(config))
    state = joint.state_dict()
    if isinstance(joint, BertologyElectraForPreTraining) and part == "discriminator":
        state = {k: v for k, v in state.items() if not k.startswith("generator.")}
    # the joint state dict names shared tables under every module that uses them and merges GDES's E_G + Δ
    left_out = fill_by_name(model, state, prefix, rename)
    if left_out:
        logger.info("the plain %s has no place for %s", model_class.__name__, ", ".join(left_out[:5]))
    return model


def load_parts(joint, discriminator, generator) -> list[str]:
    """Start the joint model from two released networks (plain models), the inverse of `plain_part`: each plain
    weight goes where `plain_part` takes it from. A table the joint model shares between its networks (ELECTRA's
    embeddings, DeBERTa's ES) takes the discriminator's values, as the official code holds one table; under GDES
    the generator keeps its table and Δ is set to the discriminator's minus it. Returns the joint model's weights
    that neither part holds (they keep their initialisation: a head the release does not ship)."""
    params = joint.state_dict(keep_vars=True)
    values, owner = {}, {}
    for part, plain in (("generator", generator), ("discriminator", discriminator)):  # the discriminator's last
        _, _, prefix, rename = part_layout(joint, part)
        for name, value in plain.state_dict().items():
            key = _joint_name(name, prefix, rename)
            if key in params:
                values[key], owner[key] = value, part
    tied: dict[int, list[str]] = {}
    for key, param in params.items():
        tied.setdefault(id(param), []).append(key)
    differ = []
    for keys in tied.values():  # one tensor under several names: the discriminator's value for all of them
        given = [k for k in keys if k in values]
        chosen = next((k for k in given if owner[k] == "discriminator"), given[0] if given else None)
        if chosen is None or len(keys) == 1:
            continue
        differ += [k for k in given if not torch.equal(values[k], values[chosen])]
        values.update(dict.fromkeys(keys, values[chosen]))
    if differ:
        logger.info(
            "the generator's %s differ from the discriminator's: the joint model shares the "
            "discriminator's, as the official code does",
            ", ".join(sorted(differ)[:3]),
        )
    with torch.no_grad():
        joint.load_state_dict(values, strict=False)
        for slot, table, delta in getattr(joint, "gdes_pairs", list)():
            delta.copy_(slot - table)  # E_G + Δ = E_D, within an fp32 rounding (docs/pretraining.md)
    initialised = {k for k in params if k not in values}
    initialised -= {f"{name}.delta" for name, m in joint.named_modules() if hasattr(m, "delta")}  # set just above
    return sorted(initialised)


def _export_joint(checkpoint, output_dir, part: str, joint_class, family: str, name: str, optional=()) -> Path:
    """Write `part` of the joint `joint_class` checkpoint as a plain folder (`plain_part`), with its card; a folder
    that is not such a checkpoint (a missing key other than the `optional` ones) is one error line."""
    checkpoint, output_dir = Path(checkpoint), Path(output_dir)
    if not (checkpoint / "config.json").is_file():
        raise BertologyError(f"{checkpoint} is not a checkpoint folder (no config.json)")
    try:
        joint, info = joint_class.from_pretrained(checkpoint, output_loading_info=True)
    except Exception as err:
        raise BertologyError(f"could not load a joint {name} model from {checkpoint} ({err})") from None
    missing = set(info["missing_keys"]) - set(optional)
    if missing:
        raise BertologyError(
            f"{checkpoint} is not a joint {name} checkpoint written by hf_bertology (missing e.g. {sorted(missing)[0]})"
        )
    model = plain_part(joint, part)
    logger.info("writing the %s %s (%s) to %s", name, part, type(model).__name__, output_dir)
    _write(model, checkpoint, output_dir)
    _card(output_dir, part, checkpoint, family)
    return output_dir


def export_electra(checkpoint: str | Path, output_dir: str | Path, part: str = "discriminator") -> Path:
    """Write the ELECTRA `part` ("discriminator" or "generator") of joint `checkpoint` to `output_dir`."""
    if part not in ELECTRA_PARTS:
        raise BertologyError(f"unknown ELECTRA part {part!r}; choose one of {', '.join(ELECTRA_PARTS)}")
    return _export_joint(checkpoint, output_dir, part, BertologyElectraForPreTraining, "electra", "ELECTRA")


EMD_TABLE = "generator.deberta.embeddings.position_embeddings.weight"  # the generator's EMD positions, not in vanilla
DEBERTA_V3_PARTS = {
    # part -> (vanilla class, config builder, prefix of its weights in the joint model)
    "discriminator": (DebertaV2Model, configuration_deberta_v3.discriminator_config, "deberta."),
    "generator": (DebertaV2ForMaskedLM, configuration_deberta_v3.generator_config, "generator."),
}


def export_deberta_v3(checkpoint: str | Path, output_dir: str | Path, part: str = "generator") -> Path:
    """Write the DeBERTa-v3 `part` ("discriminator" or "generator") of joint `checkpoint` to `output_dir`."""
    if part not in DEBERTA_V3_PARTS:
        raise BertologyError(f"unknown DeBERTa-v3 part {part!r}; choose one of {', '.join(DEBERTA_V3_PARTS)}")
    joint_class = modeling_deberta_v3.BertologyDebertaV3ForPreTraining
    # a checkpoint from before EMD: its networks are complete without the generator's EMD positions
    return _export_joint(checkpoint, output_dir, part, joint_class, "deberta-v3", "DeBERTa-v3", optional=[EMD_TABLE])


PARTS = ("discriminator", "generator")


# Fields a family's modeling code reads with `getattr` though its config class has no default for them: DeBERTa's
# factorised `embedding_size` (a composed generator narrower than the discriminator keeps the shared table's width).
OPTIONAL_FIELDS = ("embedding_size",)


def _plain_config(config, config_class):
    """`config` as the family's own config: only the fields that class has (no recipe fields, no `auto_map`).
    `layer_types` is cut to the depth (a generator's config was made shallower after construction, and the network
    built the first `num_hidden_layers` of them)."""
    known = set(config_class().to_dict()) | set(OPTIONAL_FIELDS)
    fields = {k: v for k, v in config.to_dict().items() if k in known and k not in ("architectures", "model_type")}
    if isinstance(fields.get("layer_types"), list):
        fields["layer_types"] = fields["layer_types"][: fields["num_hidden_layers"]]
    return config_class(**fields)


def export_composed(checkpoint: str | Path, output_dir: str | Path, part: str = "generator") -> Path:
    """Write the generator (the family's `*ForMaskedLM`) or the discriminator (the family's base model; under GDES
    its word table is E_G + Δ) of an RTD objective on another encoder (`models/composed`) to `output_dir`."""
    if part not in PARTS:
        raise BertologyError(f"unknown part {part!r}; choose one of {', '.join(PARTS)}")
    checkpoint, output_dir = Path(checkpoint), Path(output_dir)
    model_type = _read_config(checkpoint).get("model_type")
    model_type = {JOINT_MODEL_TYPE.format(family): family for family in COMPOSED_MODELS}.get(model_type, model_type)
    if model_type not in COMPOSED_MODELS:
        raise BertologyError(f"{checkpoint} holds no objective on another encoder (model_type {model_type!r})")
    try:
        joint, info = COMPOSED_MODELS[model_type].from_pretrained(checkpoint, output_loading_info=True)
    except Exception as err:
        raise BertologyError(f"could not load {checkpoint} ({err})") from None
    if info["missing_keys"] or not joint.config.replaced_token_detection:
        raise BertologyError(
            f"{checkpoint} has no generator: only replaced-token-detection objectives have two networks"
        )
    model = plain_part(joint, part)
    logger.info("writing the %s (%s) to %s", part, type(model).__name__, output_dir)
    _write(model, checkpoint, output_dir)
    _card(output_dir, part, checkpoint, f"RTD on {model_type}")
    return output_dir


def joint_model_type(folder: str | Path) -> str | None:
    """The `model_type` of our own that `folder`'s config.json names when it holds a joint run (ELECTRA, DeBERTa-v3,
    an RTD objective on another encoder; models/configuration_electra.py), else None."""
    joint_types = {ELECTRA_JOINT_MODEL_TYPE, DEBERTA_V3_JOINT_MODEL_TYPE}
    joint_types |= {JOINT_MODEL_TYPE.format(family) for family in COMPOSED_MODELS}
    config = Path(folder) / "config.json"
    model_type = _read_config(Path(folder)).get("model_type") if config.is_file() else None
    return model_type if model_type in joint_types else None


def joint_config(folder: str | Path):
    """The config of a joint run's `folder`, read by our class (the family's `model_type` in memory), else None.
    `AutoTokenizer` needs a config: given none, it would build one for a `model_type` transformers does not know
    (asking about remote code, then warning of a type mismatch)."""
    model_type = joint_model_type(folder)
    if model_type is None:
        return None
    classes = {ELECTRA_JOINT_MODEL_TYPE: BertologyElectraConfig, DEBERTA_V3_JOINT_MODEL_TYPE: BertologyDebertaV3Config}
    classes |= {JOINT_MODEL_TYPE.format(family): config for family, config in COMPOSED_CONFIGS.items()}
    return classes[model_type].from_pretrained(folder)


def is_joint(model) -> bool:
    """Whether `model` holds two networks (a generator and a discriminator) that `plain_part` can write."""
    if isinstance(model, (BertologyElectraForPreTraining, modeling_deberta_v3.BertologyDebertaV3ForPreTraining)):
        return True
    return type(model) in COMPOSED_MODELS.values() and bool(model.config.replaced_token_detection)


def write_part_folders(
    model, tokenizer, output_dir: str | Path, shown_in: str | Path | None = None, **card
) -> list[Path]:
    """The end of a joint run: `output_dir/discriminator` and `output_dir/generator` as vanilla folders (the layout
    of the papers' released checkpoints), each with its model card (`card`: `hub.write_part_card`'s fields; the
    cards name `shown_in/part` when the folder is written aside). A model with one network writes nothing. The
    joint folder itself stays as it is (resuming and export read it)."""
    if not is_joint(model):
        return []
    folders = []
    for part in PARTS:
        folder = Path(output_dir) / part
        shutil.rmtree(folder, ignore_errors=True)  # ours: the parts of an earlier run into this folder
        _write(plain_part(model, part), Path(output_dir), folder, tokenizer)
        write_part_card(folder, part, shown_as=Path(shown_in) / part if shown_in else None, **card)
        folders.append(folder)
    return folders


def export_part(checkpoint: str | Path, output_dir: str | Path, part: str) -> Path:
    """Write network `part` of whichever joint model `checkpoint` holds (ELECTRA, DeBERTa-v3 or a composed RTD)."""
    pretraining_class = _read_config(Path(checkpoint)).get("auto_map", {}).get("AutoModelForPreTraining", "")
    if pretraining_class.endswith("BertologyElectraForPreTraining"):
        return export_electra(checkpoint, output_dir, part)
    if pretraining_class.endswith("BertologyDebertaV3ForPreTraining"):
        return export_deberta_v3(checkpoint, output_dir, part)
    if ".BertologyComposed" in pretraining_class:
        return export_composed(checkpoint, output_dir, part)
    raise BertologyError(
        f"{checkpoint} holds no generator and discriminator (ELECTRA, DeBERTa-v3 or an RTD objective on another "
        f"encoder written by hf_bertology); its pretraining class: {pretraining_class or 'none'}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="bertology export", description="Write one network of a joint checkpoint as a vanilla folder."
    )
    parser.add_argument(
        "--electra-part",
        "--electra_part",
        dest="electra_part",
        choices=sorted(ELECTRA_PARTS),
        default=None,
        help="which ELECTRA network to write: the discriminator (ElectraForPreTraining, for fine-tuning) or the "
        "generator (ElectraForMaskedLM)",
    )
    parser.add_argument(
        "--deberta-v3-part",
        "--deberta_v3_part",
        dest="deberta_v3_part",
        choices=sorted(DEBERTA_V3_PARTS),
        default=None,
        help="which DeBERTa-v3 network to write: the discriminator (DebertaV2Model) or the generator "
        "(DebertaV2ForMaskedLM)",
    )
    parser.add_argument(
        "--part",
        choices=PARTS,
        default=None,
        help="which network to write, for any joint checkpoint (ELECTRA, DeBERTa-v3, an RTD objective on another "
        "encoder): read from its config.json",
    )
    parser.add_argument("checkpoint", help="folder written by `bertology pretrain` with an ELECTRA-style objective")
    parser.add_argument("output_dir", help="folder to write (new, or without a model in it)")
    parser.add_argument("--overwrite", action="store_true", help="replace a model already in output_dir")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if sum(flag is not None for flag in (args.part, args.electra_part, args.deberta_v3_part)) != 1:
        parser.error("give exactly one of --part, --electra-part or --deberta_v3_part")
    refuse_same_folder(args.checkpoint, args.output_dir, "bertology export")
    check_target(args.output_dir, args.overwrite)
    set_verbosity()
    if args.part is not None:
        export_part(args.checkpoint, args.output_dir, args.part)
        return 0
    if args.deberta_v3_part is not None:
        export_deberta_v3(args.checkpoint, args.output_dir, args.deberta_v3_part)
        return 0
    export_electra(args.checkpoint, args.output_dir, args.electra_part)
    return 0


if __name__ == "__main__":
    sys.exit(run_command(main))
