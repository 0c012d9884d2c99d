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
import sys
from pathlib import Path

from transformers import AutoTokenizer, DebertaV2ForMaskedLM, DebertaV2Model, ElectraForMaskedLM, ElectraForPreTraining

from .models import deberta_v3
from .models.composed import COMPOSED_MODELS
from .models.electra import BertologyElectraForPreTraining, discriminator_config, generator_config
from .utils import BertologyError, logger, refuse_same_folder, set_verbosity

ELECTRA_PARTS = {
    # part -> (vanilla class, config builder, prefix of its weights in the joint model)
    "discriminator": (ElectraForPreTraining, discriminator_config, ""),
    "generator": (ElectraForMaskedLM, generator_config, "generator."),
}


def _write(model, checkpoint: Path, output_dir: Path) -> Path:
    output_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(output_dir, safe_serialization=True)
    try:
        AutoTokenizer.from_pretrained(checkpoint).save_pretrained(output_dir)
    except (OSError, ValueError):
        logger.warning("no tokenizer in %s: %s holds only the model", checkpoint, output_dir)
    return output_dir


def _read_config(checkpoint: Path) -> dict:
    try:
        return json.loads((checkpoint / "config.json").read_text())
    except (OSError, ValueError):
        raise BertologyError(f"{checkpoint} is not a checkpoint folder (no readable config.json)") from None


def export_electra(checkpoint: str | Path, output_dir: str | Path, part: str = "discriminator") -> Path:
    """Write the ELECTRA `part` ("discriminator" or "generator") of joint `checkpoint` to `output_dir`."""
    if part not in ELECTRA_PARTS:
        raise BertologyError(f"unknown ELECTRA part {part!r}; choose one of {', '.join(ELECTRA_PARTS)}")
    checkpoint, output_dir = Path(checkpoint), Path(output_dir)
    if not (checkpoint / "config.json").is_file():
        raise BertologyError(f"{checkpoint} is not a checkpoint folder (no config.json)")
    try:
        joint, info = BertologyElectraForPreTraining.from_pretrained(checkpoint, output_loading_info=True)
    except Exception as err:
        raise BertologyError(f"could not load a joint ELECTRA model from {checkpoint} ({err})") from None
    if info["missing_keys"]:
        raise BertologyError(
            f"{checkpoint} is not a joint ELECTRA checkpoint written by hf_bertology (missing e.g. "
            f"{sorted(info['missing_keys'])[0]})"
        )
    model_class, config_builder, prefix = ELECTRA_PARTS[part]
    model = model_class(config_builder(joint.config))
    # The joint state dict names shared tensors under every module that uses them, so each part is complete.
    state = {k[len(prefix) :]: v for k, v in joint.state_dict().items() if k.startswith(prefix)}
    if part == "discriminator":
        state = {k: v for k, v in state.items() if not k.startswith("generator.")}
    model.load_state_dict(state, strict=True)
    logger.info("writing the ELECTRA %s (%s) to %s", part, model_class.__name__, output_dir)
    return _write(model, checkpoint, output_dir)


EMD_TABLE = "generator.deberta.embeddings.position_embeddings.weight"  # the generator's EMD positions, not in vanilla
DEBERTA_V3_PARTS = {
    # part -> (vanilla class, config builder, prefix of its weights in the joint model)
    "discriminator": (DebertaV2Model, deberta_v3.discriminator_config, "deberta."),
    "generator": (DebertaV2ForMaskedLM, deberta_v3.generator_config, "generator."),
}


def export_deberta_v3(checkpoint: str | Path, output_dir: str | Path, part: str = "generator") -> Path:
    """Write the DeBERTa-v3 `part` ("discriminator" or "generator") of joint `checkpoint` to `output_dir`."""
    if part not in DEBERTA_V3_PARTS:
        raise BertologyError(f"unknown DeBERTa-v3 part {part!r}; choose one of {', '.join(DEBERTA_V3_PARTS)}")
    checkpoint, output_dir = Path(checkpoint), Path(output_dir)
    if not (checkpoint / "config.json").is_file():
        raise BertologyError(f"{checkpoint} is not a checkpoint folder (no config.json)")
    try:
        joint, info = deberta_v3.BertologyDebertaV3ForPreTraining.from_pretrained(checkpoint, output_loading_info=True)
    except Exception as err:
        raise BertologyError(f"could not load a joint DeBERTa-v3 model from {checkpoint} ({err})") from None
    missing = set(info["missing_keys"]) - {EMD_TABLE}  # a checkpoint from before EMD: its networks are complete
    if missing:
        raise BertologyError(
            f"{checkpoint} is not a joint DeBERTa-v3 checkpoint written by hf_bertology (missing e.g. "
            f"{sorted(missing)[0]})"
        )
    model_class, config_builder, prefix = DEBERTA_V3_PARTS[part]
    model = model_class(config_builder(joint.config))
    # state_dict() holds the merged GDES table under `deberta.`; the generator's keys are complete under `generator.`
    state = {k[len(prefix) :]: v for k, v in joint.state_dict().items() if k.startswith(prefix)}
    if part == "generator" and model.deberta.embeddings.position_embeddings is None:
        # the EMD's position table: plain DebertaV2ForMaskedLM has no EMD (and ignores the table on loading)
        state.pop(EMD_TABLE.removeprefix(prefix), None)
    model.load_state_dict(state, strict=True)
    logger.info("writing the DeBERTa-v3 %s (%s) to %s", part, model_class.__name__, output_dir)
    return _write(model, checkpoint, output_dir)


PARTS = ("discriminator", "generator")


def _plain_config(config, config_class):
    """`config` as the family's own config: only the fields that class has (no recipe fields, no `auto_map`)."""
    known = config_class().to_dict()
    return config_class(**{k: v for k, v in config.to_dict().items() if k in known and k != "architectures"})


def export_composed(checkpoint: str | Path, output_dir: str | Path, part: str = "generator") -> Path:
    """Write the generator (the family's `*ForMaskedLM`) or the discriminator (the family's base model; under GDES
    its word table is E_G + Δ) of an RTD objective on another encoder (`models/composed`) to `output_dir`."""
    if part not in PARTS:
        raise BertologyError(f"unknown part {part!r}; choose one of {', '.join(PARTS)}")
    checkpoint, output_dir = Path(checkpoint), Path(output_dir)
    model_type = _read_config(checkpoint).get("model_type")
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
    family_config = type(joint.base_model).config_class  # e.g. RobertaConfig
    if part == "generator":  # the family's *ForMaskedLM
        model_class, config, prefix = type(joint.generator), joint.generator.config, "generator."
    else:
        model_class, config, prefix = type(joint.base_model), joint.config, f"{joint.base_model_prefix}."
    model = model_class(_plain_config(config, family_config))
    # the joint state dict names shared tables under every module that uses them, and merges GDES's E_G + Δ
    state = {k[len(prefix) :]: v for k, v in joint.state_dict().items() if k.startswith(prefix)}
    model.load_state_dict(state, strict=True)
    logger.info("writing the %s (%s) to %s", part, model_class.__name__, output_dir)
    return _write(model, checkpoint, output_dir)


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
    parser.add_argument("output_dir", help="folder to write")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if sum(flag is not None for flag in (args.part, args.electra_part, args.deberta_v3_part)) != 1:
        parser.error("give exactly one of --part, --electra-part or --deberta_v3_part")
    refuse_same_folder(args.checkpoint, args.output_dir, "bertology export")
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
    sys.exit(main())
