"""The checks every family's saved folder must pass, in one place: plain `transformers` loads it.

A family's test calls `assert_loads_in_plain_transformers` with its tiny model and a batch; the folder is saved
(`save_pretrained`, or already written by the test), then read in a separate process where `hf_bertology` cannot be
imported (`sys.modules["hf_bertology"] = None`), so only `transformers` and the modeling files copied next to the
weights are there. That process loads the folder with the plain class (`auto`) and with our class
(`trust_remote_code=True`), and reports the classes, the keys missing/unexpected/mismatched, each one's logits on the
batch, and, when asked, whether given parameters share storage (ties) and what plain `AutoModel` loads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

LOAD_SCRIPT = """
import json, sys
sys.modules["hf_bertology"] = None  # plain transformers only
import torch
import transformers

path, spec = sys.argv[1], json.loads(sys.argv[2])
auto = getattr(transformers, spec["auto"])
inputs = torch.load(path + "/inputs.pt")


def pointer(model, name):
    return model.get_parameter(name).data_ptr()


def logits(model):
    with torch.no_grad():
        return getattr(model.eval()(**inputs), spec["logits"]).tolist()


plain, info = auto.from_pretrained(path, output_loading_info=True)
remote = getattr(transformers, spec["remote_auto"]).from_pretrained(path, trust_remote_code=True)
result = {
    "plain": type(plain).__name__,
    "remote": type(remote).__name__,
    "missing": sorted(info["missing_keys"]),
    "unexpected": sorted(info["unexpected_keys"]),
    "mismatched": sorted(map(str, info["mismatched_keys"])),
    "logits": logits(plain),
    "remote_logits": logits(remote),
    "ties": [pointer(plain, a) == pointer(plain, b) for a, b in spec["ties"]],
    "remote_ties": [pointer(remote, a) == pointer(remote, b) for a, b in spec["remote_ties"]],
}
if spec["encoder"]:
    encoder, info = transformers.AutoModel.from_pretrained(path, output_loading_info=True)
    result["encoder"] = type(encoder).__name__
    result["encoder_missing"] = sorted(info["missing_keys"])
    result["encoder_mismatched"] = sorted(map(str, info["mismatched_keys"]))
print(json.dumps(result))
"""


def load_in_plain_transformers(
    folder: Path,
    inputs: dict[str, torch.Tensor],
    auto: str,
    logits: str = "logits",
    ties: tuple[tuple[str, str], ...] = (),
    remote_ties: tuple[tuple[str, str], ...] = (),
    encoder: bool = False,
    remote_auto: str | None = None,
) -> dict:
    """What a process with plain `transformers` only makes of `folder` (see the module docstring)."""
    torch.save(inputs, Path(folder) / "inputs.pt")
    spec = {"auto": auto, "logits": logits, "ties": ties, "remote_ties": remote_ties, "encoder": encoder}
    spec["remote_auto"] = remote_auto or auto
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    run = subprocess.run(
        [sys.executable, "-c", LOAD_SCRIPT, str(folder), json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=folder,
        env=env,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def assert_loads_in_plain_transformers(
    model,
    folder: Path,
    inputs: dict[str, torch.Tensor],
    auto: str,
    plain_class: str,
    logits: str = "logits",
    unexpected: tuple[str, ...] = (),
    ties: tuple[tuple[str, str], ...] = (),
    remote_ties: tuple[tuple[str, str], ...] = (),
    encoder: str | None = None,
    save: bool = True,
    remote_auto: str | None = None,
) -> dict:
    """`model` saved to `folder` (unless `save` is False: the test wrote it) loads as `plain_class` through `auto`
    with nothing missing, nothing mismatched and only `unexpected` left over, and as our class through remote code;
    both give `model`'s logits on `inputs` (atol 1e-5); the `ties` (plain) and `remote_ties` (ours) share storage;
    with `encoder`, plain `AutoModel` loads that class with nothing missing or mismatched. Our class is asked of
    `remote_auto` (default: `auto`), the Auto class its `auto_map` names."""
    if save:
        model.save_pretrained(folder)
    with torch.no_grad():
        expected = getattr(model.eval()(**inputs), logits)
    result = load_in_plain_transformers(
        folder, inputs, auto, logits, ties, remote_ties, encoder is not None, remote_auto=remote_auto
    )
    assert result["plain"] == plain_class, result["plain"]
    assert result["remote"] == type(model).__name__, result["remote"]
    assert result["missing"] == [] and result["mismatched"] == [], result
    assert result["unexpected"] == sorted(unexpected), result["unexpected"]
    assert all(result["ties"]) and all(result["remote_ties"]), (
        ties,
        result["ties"],
        remote_ties,
        result["remote_ties"],
    )
    if encoder is not None:
        assert result["encoder"] == encoder, result["encoder"]
        assert result["encoder_missing"] == [] and result["encoder_mismatched"] == [], result
    torch.testing.assert_close(torch.tensor(result["logits"]), expected, rtol=0, atol=1e-5)
    torch.testing.assert_close(torch.tensor(result["remote_logits"]), expected, rtol=0, atol=1e-5)
    return result


# -- one tiny model and batch per family, for every test (tests/test_model_common.py runs the common checks) ------
SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37)
NO_DROPOUT = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
MODERNBERT_IDS = dict(pad_token_id=1, cls_token_id=0, sep_token_id=2, bos_token_id=0, eos_token_id=2)

# family -> the keyword arguments of its tiny config: the one place a test takes a family's size from. The family
# files' own tests use these too (`TINY = TINY_CONFIGS[...]`), so their numbers are those of this table.
TINY_CONFIGS = {
    "bert": dict(vocab_size=100, **SIZES, max_position_embeddings=64),
    "roberta": dict(vocab_size=100, **SIZES, max_position_embeddings=64, pad_token_id=1, type_vocab_size=1),
    "albert": dict(vocab_size=100, embedding_size=16, **SIZES, max_position_embeddings=64),
    "spanbert": dict(vocab_size=100, **SIZES, max_position_embeddings=64),
    # 3 layers: global (layer 0), local, local; a window of 8 is shorter than the test rows
    "modernbert": dict(vocab_size=120, **{**SIZES, "num_hidden_layers": 3}, **MODERNBERT_IDS, local_attention=8),
    # embedding_size != hidden_size: both networks keep their own embeddings_project
    "electra": dict(vocab_size=120, **SIZES, embedding_size=16, max_position_embeddings=64, **NO_DROPOUT),
    "deberta_v3": dict(vocab_size=120, **SIZES, position_buckets=16, **NO_DROPOUT),
    "xlnet": dict(vocab_size=100, **SIZES, mem_len=0, reuse_len=0, dropout=0.0),
}
# composed cells (an objective on another family's encoder): the tiny recipe's config (the same sizes) with these
COMPOSED_OVERRIDES = dict(vocab_size=100, pad_token_id=1, **NO_DROPOUT)
COMPOSED_CELLS = ("spanbert@albert", "deberta-v3@bert")  # a masked-LM objective with SBO; RTD with GDES
FAMILIES = (*TINY_CONFIGS, *COMPOSED_CELLS)


def tiny_config(family: str, **overrides):
    """The tiny config of `family` (a key of `TINY_CONFIGS`, or `objective@backbone`), with `overrides`."""
    import hf_bertology as hb

    if "@" in family:
        objective, backbone = family.split("@")
        return hb.get_recipe(f"{objective}-tiny", backbone=backbone, **{**COMPOSED_OVERRIDES, **overrides}).config
    variant = hb.VARIANTS[family.replace("_", "-")]
    return variant.config_class(**{**TINY_CONFIGS[family], **overrides})


def tiny_family_model(family: str, **overrides):
    """A tiny model of `family` with fixed weights (seed 0), in eval mode."""
    import hf_bertology as hb
    from hf_bertology.models.modeling_composed import COMPOSED_MODELS

    config = tiny_config(family, **overrides)
    if "@" in family:  # the composed class of the encoder's family
        model_class = COMPOSED_MODELS[config.model_type]
    else:
        model_class = hb.VARIANTS[family.replace("_", "-")].model_class
    torch.manual_seed(0)
    return model_class(config).eval()


# family -> (the output field of the MLM logits, the field without labels, whether that one is per token only)
OUTPUT_FIELDS = {
    "bert": ("prediction_logits", "prediction_logits", False),
    "roberta": ("logits", "logits", False),
    "albert": ("prediction_logits", "prediction_logits", False),
    "spanbert": ("logits", "logits", False),
    "modernbert": ("logits", "logits", False),
    "electra": ("prediction_logits", "rtd_logits", True),  # without labels only the discriminator runs
    "deberta_v3": ("prediction_logits", "rtd_logits", True),
    "xlnet": ("logits", "logits", False),  # at the prediction targets: (B, P, V) without labels
    "spanbert@albert": ("logits", "logits", False),
    "deberta-v3@bert": ("prediction_logits", "rtd_logits", True),  # an RTD cell answers under ELECTRA's names
}
SENTENCE_LABELS = {"bert": "next_sentence_label", "albert": "sentence_order_label"}
WITH_SBO = ("spanbert", "spanbert@albert")
RTD = ("electra", "deberta_v3", "deberta-v3@bert")
LABELLED = [2, 5, 9]  # the labelled positions of every row
LABEL_KEYS = ("labels", "next_sentence_label", "sentence_order_label", "sbo_labels", "sbo_boundaries")
LABEL_KEYS += ("sbo_relative_positions",)


def tiny_family_batch(family: str, batch: int = 2, length: int = 12, seed: int = 0) -> dict[str, torch.Tensor]:
    """Unpadded rows, [CLS]=0 … [SEP]=2, labels at `LABELLED` (the original ids, the inputs there [MASK]=4); each
    labelled token is also a one-token span for SBO (boundaries i-1, i+1). XLNet: the same targets as its
    `target_mapping` rows, which no position may see (`perm_mask`), the inputs unmasked."""
    vocab = tiny_config(family).vocab_size
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, vocab, (batch, length), generator=generator)
    input_ids[:, 0], input_ids[:, -1] = 0, 2
    labels = torch.full_like(input_ids, -100)
    labels[:, LABELLED] = input_ids[:, LABELLED]
    inputs = {"attention_mask": torch.ones_like(input_ids)}
    if family == "xlnet":
        target_mapping = torch.zeros(batch, len(LABELLED), length)
        target_mapping[:, range(len(LABELLED)), LABELLED] = 1.0
        perm_mask = torch.zeros(batch, length, length)
        perm_mask[:, :, LABELLED] = 1.0  # (B, T, T): nobody sees a target's content
        labels = input_ids[:, LABELLED].clone()  # (B, P)
        return {
            "input_ids": input_ids,
            **inputs,
            "perm_mask": perm_mask,
            "target_mapping": target_mapping,
            "labels": labels,
        }
    input_ids[:, LABELLED] = 4
    inputs.update(input_ids=input_ids, labels=labels)
    if family in SENTENCE_LABELS:  # two segments: token types 0, then 1
        inputs[SENTENCE_LABELS[family]] = torch.arange(batch) % 2
        inputs["token_type_ids"] = (torch.arange(length) >= length // 2).long().expand(batch, length)
    if family in WITH_SBO:
        inputs["sbo_labels"] = labels.clone()
        boundaries = torch.zeros(batch, length, 2, dtype=torch.long)
        boundaries[:, LABELLED, 0] = torch.tensor(LABELLED) - 1
        boundaries[:, LABELLED, 1] = torch.tensor(LABELLED) + 1
        inputs.update(sbo_boundaries=boundaries, sbo_relative_positions=torch.zeros_like(input_ids))
    return inputs
