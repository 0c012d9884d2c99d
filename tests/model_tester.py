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
remote = auto.from_pretrained(path, trust_remote_code=True)
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
) -> dict:
    """What a process with plain `transformers` only makes of `folder` (see the module docstring)."""
    torch.save(inputs, Path(folder) / "inputs.pt")
    spec = {"auto": auto, "logits": logits, "ties": ties, "remote_ties": remote_ties, "encoder": encoder}
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
) -> dict:
    """`model` saved to `folder` (unless `save` is False: the test wrote it) loads as `plain_class` through `auto`
    with nothing missing, nothing mismatched and only `unexpected` left over, and as our class through remote code;
    both give `model`'s logits on `inputs` (atol 1e-5); the `ties` (plain) and `remote_ties` (ours) share storage;
    with `encoder`, plain `AutoModel` loads that class with nothing missing or mismatched."""
    if save:
        model.save_pretrained(folder)
    with torch.no_grad():
        expected = getattr(model.eval()(**inputs), logits)
    result = load_in_plain_transformers(folder, inputs, auto, logits, ties, remote_ties, encoder is not None)
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
