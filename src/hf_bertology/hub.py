"""Hub-format folders: what `bertology pretrain` leaves behind, and its model card.

A folder holds `config.json` (the family's `model_type` plus an `auto_map` naming our pretraining class),
`model.safetensors`, the tokenizer, our modeling code (copied by `save_pretrained` for `trust_remote_code=True`)
and a `README.md` model card. Plain `transformers` loads it without us.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .utils import BertologyError, logger, run_command

CARD_TEMPLATE = """---
library_name: transformers
tags:
- hf_bertology
- {variant}
- fill-mask
---

# {name}

A **{variant}** encoder pretrained with `hf_bertology` using the `{recipe}` recipe.

| | |
|---|---|
| recipe | `{recipe}` ({variant}) |
| objective | {objective} |
| corpus | {corpus} |
| steps | {steps} |
| tokens seen (non-padding) | {tokens} |
| final losses | {losses} |
| parameters | {parameters} |

## How to load

With plain `transformers` (no hf_bertology needed):

```python
from transformers import AutoTokenizer, {plain_auto_class}, AutoModel
tokenizer = AutoTokenizer.from_pretrained("{path}")
model = {plain_auto_class}.from_pretrained("{path}")   # the pretraining heads, transformers' own class
encoder = AutoModel.from_pretrained("{path}")           # the backbone, e.g. for fine-tuning
```

To continue pretraining with our objective (component losses included), load our class through remote code:

```python
model = {auto_class}.from_pretrained("{path}", trust_remote_code=True)
```

## Recipe

```json
{recipe_json}
```
"""

OBJECTIVES = {
    "bert": "masked LM (exact count, 80/10/10) + next-sentence prediction",
    "roberta": "masked LM with dynamic masking (exact count, 80/10/10), FULL-SENTENCES blocks, no NSP",
    "spanbert": "geometric span masking over whole words (15%, 80/10/10 per span) + span boundary objective, no NSP",
    "albert": "n-gram masked LM over whole words (n <= 3, 15%, 80/10/10) + sentence-order prediction",
    "xlnet": "permutation LM (two-stream attention): 1/6 of the tokens, in whole-word spans, predicted in a random "
    "factorisation order; memory of the previous segment",
    "electra": "replaced-token detection: generator MLM (exact count, 85% [MASK] / 15% kept) + 50 x discriminator "
    "BCE over all tokens on Gumbel-sampled replacements, shared embeddings",
    "deberta-v3": "replaced-token detection (DeBERTa-v3): half-depth generator MLM (exact count, all [MASK]) + 50 x "
    "discriminator BCE over all tokens, gradient-disentangled embedding sharing (or ES/NES, see the recipe)",
    "modernbert": "masked LM with 30% dynamic masking (80/10/10), packed blocks without padding, sparse prediction",
}


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value) if value is not None else "–"


def write_model_card(
    output_dir: str | Path,
    model: PreTrainedModel,
    recipe: str,
    variant: str,
    corpus: str,
    steps: int | None = None,
    tokens_seen: int | None = None,
    final_losses: dict[str, float] | None = None,
    plain_auto_class: str = "AutoModelForPreTraining",
    repo_id: str | None = None,
) -> Path:
    """Write `README.md`: recipe, corpus, steps, tokens seen, final losses, how to load."""
    output_dir = Path(output_dir)
    config = model.config
    objective_keys = {
        key: value
        for key, value in config.to_diff_dict().items()
        if key not in ("architectures", "auto_map", "transformers_version", "dtype", "torch_dtype")
    }
    losses = ", ".join(f"{k} {v:.4f}" for k, v in (final_losses or {}).items()) or "–"
    card = CARD_TEMPLATE.format(
        name=repo_id or output_dir.name,
        variant=variant,
        recipe=recipe,
        objective=OBJECTIVES.get(variant, variant),
        corpus=corpus,
        steps=_fmt(steps),
        tokens=_fmt(tokens_seen),
        losses=losses,
        parameters=_fmt(sum(p.numel() for p in model.parameters())),
        plain_auto_class=plain_auto_class,
        auto_class=getattr(model, "_auto_class", None) or plain_auto_class,
        path=repo_id or str(output_dir),
        recipe_json=json.dumps(objective_keys, indent=2, sort_keys=True, default=str),
    )
    path = output_dir / "README.md"
    path.write_text(card, encoding="utf-8")
    return path


def save_folder(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, output_dir: str | Path) -> Path:
    """`save_pretrained` for model (safetensors only, modeling code copied) and tokenizer."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(output_dir, safe_serialization=True)
    tokenizer.save_pretrained(output_dir)
    if not (output_dir / "model.safetensors").exists() and not list(output_dir.glob("model-*.safetensors")):
        raise BertologyError(f"no safetensors weights were written to {output_dir}")
    return output_dir


# -- pushing to the Hub -----------------------------------------------------------------------------------------
# Training leftovers that do not belong in a model repository (the Trainer's checkpoints, logs, optimizer states).
PUSH_IGNORE = ("checkpoint-*", "tmp-checkpoint-*", "runs", "runs/*", ".*", "*.pt", "*.pth", "training_args.bin")
_CARD_LOAD = re.compile(r'from_pretrained\("[^"]*"')


def card_for_repo(card: str, repo_id: str) -> str:
    """The model card with its title and every `from_pretrained("...")` pointing at `repo_id`."""
    card = _CARD_LOAD.sub(f'from_pretrained("{repo_id}"', card)
    return re.sub(r"^# .*$", f"# {repo_id}", card, count=1, flags=re.MULTILINE)


def _transport_errors() -> tuple[type[Exception], ...]:
    """The HTTP client's connection/timeout errors (huggingface_hub 2.x uses httpx2, 1.x httpx; requests' are
    OSErrors already)."""
    errors = []
    for name in ("httpx2", "httpx"):
        module = sys.modules.get(name)
        if module is not None:
            errors.append(module.HTTPError)
    return tuple(errors)


def push_folder(
    folder: str | Path,
    repo_id: str,
    token: str | None = None,
    private: bool | None = None,
    commit_message: str = "Upload model with hf_bertology",
    revision: str | None = None,
    endpoint: str | None = None,
) -> str:
    """Push a Hub-format folder (config, weights, tokenizer, modeling code, card) to `repo_id`; returns the URL
    of the commit. The repository is created when missing (`repo_id` without a namespace goes to the token's user);
    the model card is rewritten to name the repository; `checkpoint-*`, logs and optimizer states stay local. One
    commit, through `huggingface_hub` (`create_repo` + `create_commit`, which is `upload_folder` with the card
    replaced in flight, so the local folder is left as it is)."""
    from huggingface_hub import CommitOperationAdd, HfApi
    from huggingface_hub.errors import HfHubHTTPError
    from huggingface_hub.utils import filter_repo_objects

    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise BertologyError(f"{folder} is not a model folder (no config.json); pass the output_dir of a run")
    if not list(folder.glob("*.safetensors")):
        raise BertologyError(f"{folder} holds no safetensors weights; nothing to push")
    api = HfApi(endpoint=endpoint, token=token)
    files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    files = list(filter_repo_objects(files, ignore_patterns=list(PUSH_IGNORE) + [f"{p}/*" for p in PUSH_IGNORE]))
    try:
        repo_id = api.create_repo(repo_id, private=private, exist_ok=True).repo_id
        operations = []
        for name in files:
            content: str | bytes = str(folder / name)
            if name == "README.md":
                content = card_for_repo((folder / name).read_text(encoding="utf-8"), repo_id).encode("utf-8")
            operations.append(CommitOperationAdd(path_in_repo=name, path_or_fileobj=content))
        commit = api.create_commit(repo_id, operations, commit_message=commit_message, revision=revision)
    except (HfHubHTTPError, OSError, ValueError, *_transport_errors()) as err:
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        detail = getattr(err, "server_message", None)
        first_line += f" ({detail.strip()})" if detail else ""
        raise BertologyError(f"could not push {folder} to {repo_id!r} at {api.endpoint}: {first_line}") from None
    logger.info("pushed %d files of %s to %s/%s", len(operations), folder, api.endpoint, repo_id)
    return commit.commit_url


def keep_token_out_of_files(training_args):
    """`--hub_token` is never written to disk: the Trainer pickles its TrainingArguments into every checkpoint's
    `training_args.bin` (pretraining and GLUE), so a copied or shared run folder would carry the token in plain
    text. The token moves to this process's environment (`HF_TOKEN`, which `huggingface_hub` reads at every call,
    so our push and the Trainer's still use it) and the arguments keep none. Returns `training_args`."""
    if training_args.hub_token:
        os.environ["HF_TOKEN"] = training_args.hub_token
        training_args.hub_token = None
        logger.warning(
            "--hub_token is kept in memory only (never saved with the run); prefer HF_TOKEN or `hf auth login`, "
            "which leave it off the command line too"
        )
    return training_args


def push_from_training_args(folder: str | Path, training_args) -> str | None:
    """`--push_to_hub` for any command: push `folder` with the Trainer's hub flags (`--hub_model_id`, default the
    folder's name; `--hub_token`; `--hub_private_repo`; `--hub_revision`). Returns the commit URL, or None when the
    flag is off or on a process other than the main one. GLUE calls it the same way on its output folder."""
    if not training_args.push_to_hub or not training_args.should_save:
        return None
    repo_id = training_args.hub_model_id or Path(folder).absolute().name
    return push_folder(
        folder,
        repo_id,
        token=training_args.hub_token,
        private=training_args.hub_private_repo,
        revision=getattr(training_args, "hub_revision", None),
    )


def main(argv: list[str] | None = None) -> int:
    """`bertology push CKPT REPO_ID [--token T] [--private] [--revision R] [--commit_message M]`."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="bertology push", description="Push a Hub-format folder written by `bertology pretrain` to the Hub."
    )
    parser.add_argument("checkpoint", help="the folder (output_dir of a run, or a folder from `save_folder`)")
    parser.add_argument("repo_id", help="`namespace/name`, or `name` for the token's user")
    parser.add_argument("--token", default=None, help="write token (default: HF_TOKEN or the saved login)")
    parser.add_argument("--private", action="store_true", default=None, help="create the repository private")
    parser.add_argument("--revision", default=None, help="branch to commit to (default: main)")
    parser.add_argument("--commit_message", default="Upload model with hf_bertology")
    args = parser.parse_args(argv)
    url = push_folder(args.checkpoint, args.repo_id, args.token, args.private, args.commit_message, args.revision)
    print(url)
    return 0


if __name__ == "__main__":
    sys.exit(run_command(main))
