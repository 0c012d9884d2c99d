"""`bertology export`: write one network of a joint checkpoint as a vanilla `transformers` folder.

    bertology export --electra-part discriminator runs/electra-small runs/electra-small-discriminator
    bertology export --electra-part generator runs/electra-small runs/electra-small-generator
    bertology export --deberta_v3_part generator runs/deberta-v3-base runs/deberta-v3-base-generator

The folders have the layout of the released `google/electra-*-discriminator` / `-generator` checkpoints: a plain
`config.json` (`ElectraConfig` fields only: no `auto_map`, no recipe fields), `model.safetensors` with the names of
`ElectraForPreTraining` / `ElectraForMaskedLM`, and the tokenizer. Nothing of hf_bertology is needed to load them.
DeBERTa-v3 the same way: the discriminator as a `DebertaV2Model` (its word table the merged E_G + Δ under GDES),
the generator as a `DebertaV2ForMaskedLM` (`lm_predictions.lm_head.*`, as the released `pytorch_model.generator.bin`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from transformers import AutoTokenizer, DebertaV2ForMaskedLM, DebertaV2Model, ElectraForMaskedLM, ElectraForPreTraining

from .models import deberta_v3
from .models.electra import BertologyElectraForPreTraining, discriminator_config, generator_config
from .utils import BertologyError, logger, set_verbosity

ELECTRA_PARTS = {
    # part -> (vanilla class, config builder, prefix of its weights in the joint model)
    "discriminator": (ElectraForPreTraining, discriminator_config, ""),
    "generator": (ElectraForMaskedLM, generator_config, "generator."),
}


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
    output_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(output_dir, safe_serialization=True)
    try:
        AutoTokenizer.from_pretrained(checkpoint).save_pretrained(output_dir)
    except (OSError, ValueError):
        logger.warning("no tokenizer in %s: %s holds only the model", checkpoint, output_dir)
    logger.info("wrote the ELECTRA %s (%s) to %s", part, model_class.__name__, output_dir)
    return output_dir


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
    if info["missing_keys"]:
        raise BertologyError(
            f"{checkpoint} is not a joint DeBERTa-v3 checkpoint written by hf_bertology (missing e.g. "
            f"{sorted(info['missing_keys'])[0]})"
        )
    model_class, config_builder, prefix = DEBERTA_V3_PARTS[part]
    model = model_class(config_builder(joint.config))
    # state_dict() holds the merged GDES table under `deberta.`; the generator's keys are complete under `generator.`
    state = {k[len(prefix) :]: v for k, v in joint.state_dict().items() if k.startswith(prefix)}
    model.load_state_dict(state, strict=True)
    output_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(output_dir, safe_serialization=True)
    try:
        AutoTokenizer.from_pretrained(checkpoint).save_pretrained(output_dir)
    except (OSError, ValueError):
        logger.warning("no tokenizer in %s: %s holds only the model", checkpoint, output_dir)
    logger.info("wrote the DeBERTa-v3 %s (%s) to %s", part, model_class.__name__, output_dir)
    return output_dir


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
    parser.add_argument("checkpoint", help="folder written by `bertology pretrain --recipe electra-*`")
    parser.add_argument("output_dir", help="folder to write")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if (args.electra_part is None) == (args.deberta_v3_part is None):
        parser.error("give exactly one of --electra-part or --deberta_v3_part")
    set_verbosity()
    if args.deberta_v3_part is not None:
        export_deberta_v3(args.checkpoint, args.output_dir, args.deberta_v3_part)
        return 0
    export_electra(args.checkpoint, args.output_dir, args.electra_part)
    return 0


if __name__ == "__main__":
    sys.exit(main())
