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


# -- the forward checks every MLM-family model passes, parametrized over the families (tests/test_model_common.py) --
VOCAB = 100
SIZES = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37)
NO_DROPOUT = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def tiny_family_model(family: str):
    """A tiny model of `family` with fixed weights (seed 0), in eval mode."""
    import hf_bertology as hb

    configs = {
        "bert": lambda: hb.BertologyBertConfig(**SIZES, max_position_embeddings=64),
        "roberta": lambda: hb.BertologyRobertaConfig(
            **SIZES, max_position_embeddings=64, pad_token_id=1, type_vocab_size=1
        ),
        "albert": lambda: hb.BertologyAlbertConfig(**SIZES, embedding_size=16, max_position_embeddings=64),
        "spanbert": lambda: hb.BertologySpanBertConfig(**SIZES, max_position_embeddings=64),
        "modernbert": lambda: hb.BertologyModernBertConfig(
            **SIZES, pad_token_id=1, cls_token_id=0, sep_token_id=2, bos_token_id=0, eos_token_id=2, local_attention=8
        ),
        "electra": lambda: hb.BertologyElectraConfig(
            **SIZES, embedding_size=16, max_position_embeddings=64, **NO_DROPOUT
        ),
        "deberta_v3": lambda: hb.BertologyDebertaV3Config(**SIZES, position_buckets=16, **NO_DROPOUT),
    }
    models = {
        "bert": hb.BertologyBertForPreTraining,
        "roberta": hb.BertologyRobertaForPreTraining,
        "albert": hb.BertologyAlbertForPreTraining,
        "spanbert": hb.BertologySpanBertForPreTraining,
        "modernbert": hb.BertologyModernBertForPreTraining,
        "electra": hb.BertologyElectraForPreTraining,
        "deberta_v3": hb.BertologyDebertaV3ForPreTraining,
    }
    torch.manual_seed(0)
    return models[family](configs[family]()).eval()


# family -> (the output field of the MLM logits, the field without labels, whether that one is per token only)
OUTPUT_FIELDS = {
    "bert": ("prediction_logits", "prediction_logits", False),
    "roberta": ("logits", "logits", False),
    "albert": ("prediction_logits", "prediction_logits", False),
    "spanbert": ("logits", "logits", False),
    "modernbert": ("logits", "logits", False),
    "electra": ("prediction_logits", "rtd_logits", True),  # without labels only the discriminator runs
    "deberta_v3": ("prediction_logits", "rtd_logits", True),
}
SENTENCE_LABELS = {"bert": "next_sentence_label", "albert": "sentence_order_label"}
LABELLED = [2, 5, 9]  # the labelled positions of every row


def tiny_family_batch(family: str, batch: int = 2, length: int = 12, seed: int = 0) -> dict[str, torch.Tensor]:
    """Unpadded rows, [CLS]=0 … [SEP]=2, labels at `LABELLED` (the original ids, the inputs there [MASK]=4)."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, VOCAB, (batch, length), generator=generator)
    input_ids[:, 0], input_ids[:, -1] = 0, 2
    labels = torch.full_like(input_ids, -100)
    labels[:, LABELLED] = input_ids[:, LABELLED]
    input_ids[:, LABELLED] = 4
    inputs = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), "labels": labels}
    if family in SENTENCE_LABELS:
        inputs[SENTENCE_LABELS[family]] = torch.arange(batch) % 2
    return inputs
