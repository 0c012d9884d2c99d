"""Pushing a folder to the Hub (`push_folder`, one commit through `huggingface_hub`), `--push_to_hub` for any
command (`push_from_training_args`), and `--hub_token` kept off the disk (`keep_token_out_of_files`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..utils import BertologyError, logger
from .cards import card_for_repo

# -- pushing to the Hub -----------------------------------------------------------------------------------------
# Training leftovers that do not belong in a model repository (the Trainer's checkpoints, logs, optimizer states).
PUSH_IGNORE = ("checkpoint-*", "tmp-checkpoint-*", "runs", "runs/*", ".*", "*.pt", "*.pth", "training_args.bin")


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
            if name == "README.md" or (name.count("/") == 1 and name.endswith("/README.md")):
                subfolder = name.split("/")[0] if "/" in name else None
                card = card_for_repo((folder / name).read_text(encoding="utf-8"), repo_id, subfolder)
                content = card.encode("utf-8")
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
