"""Fresh-process half of tests/test_hub.py: load pushed repos from the Hub server and compare with local folders.

    HF_ENDPOINT=http://127.0.0.1:PORT python tests/hub_load_worker.py '[{"repo": ..., "folder": ..., "plain": ...}]'

For each case: the tokenizer, the plain `transformers` class (no remote code) and every `auto_map` class with
`trust_remote_code=True`, loaded from the Hub and from the local folder; prints one `RESULT {json}` line with the
largest difference between their outputs and whether every parameter is identical.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import transformers
from transformers import AutoTokenizer

TEXT = "The cat sat on the big old mat. A dog ran to the river and the bird sang."


def tensors(output) -> dict[str, torch.Tensor]:
    items = output.items() if hasattr(output, "items") else enumerate(output)
    return {str(k): v for k, v in items if torch.is_tensor(v) and v.is_floating_point()}


def compare(cls_name: str, repo: str, folder: str, remote: bool, encoded, subfolder: str = "") -> dict:
    cls = getattr(transformers, cls_name)
    torch.manual_seed(0)
    from_hub = cls.from_pretrained(repo, subfolder=subfolder, trust_remote_code=remote).eval()
    from_folder = cls.from_pretrained(Path(folder) / subfolder, trust_remote_code=remote).eval()
    hub_params, folder_params = from_hub.state_dict(), from_folder.state_dict()
    same_params = hub_params.keys() == folder_params.keys() and all(
        torch.equal(hub_params[k], folder_params[k]) for k in hub_params
    )
    with torch.no_grad():
        hub_out, folder_out = tensors(from_hub(**encoded)), tensors(from_folder(**encoded))
    diff = max((hub_out[k] - folder_out[k]).abs().max().item() for k in hub_out) if hub_out else float("nan")
    return {
        "repo": repo,
        "auto_class": cls_name,
        "remote": remote,
        "class": f"{type(from_hub).__module__}.{type(from_hub).__name__}",
        "outputs": sorted(hub_out),
        "same_outputs": sorted(hub_out) == sorted(folder_out),
        "max_diff": diff,
        "same_params": same_params,
    }


def main() -> None:
    results = []
    for case in json.loads(sys.argv[1]):
        repo, folder = case["repo"], case["folder"]
        # no remote code for the tokenizer: a joint run's folder names our config class, and AutoTokenizer asks
        tok_hub = AutoTokenizer.from_pretrained(repo, trust_remote_code=False)
        tok_folder = AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
        encoded = tok_hub(TEXT, return_tensors="pt")
        same_tokens = encoded["input_ids"].tolist() == tok_folder(TEXT, return_tensors="pt")["input_ids"].tolist()
        auto_map = json.loads((Path(folder) / "config.json").read_text())["auto_map"]
        remote_classes = [name for name in auto_map if name.startswith("AutoModel")]
        # a joint run: plain transformers reads its discriminator/ (and refuses the joint folder itself)
        subfolder = case.get("plain_subfolder", "")
        results.append({**compare(case["plain"], repo, folder, False, encoded, subfolder), "same_tokens": same_tokens})
        for cls_name in remote_classes:
            results.append({**compare(cls_name, repo, folder, True, encoded), "same_tokens": same_tokens})
        if subfolder:
            try:
                refused = type(getattr(transformers, case["plain"]).from_pretrained(repo, trust_remote_code=False))
            except ValueError as err:
                refused = " | ".join(str(err).splitlines())
            results[-1]["plain_on_joint_folder"] = str(refused)
    print("RESULT " + json.dumps(results), flush=True)


if __name__ == "__main__":
    main()
