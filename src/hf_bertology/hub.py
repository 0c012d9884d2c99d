"""Hub-format folders: what `bertology pretrain` leaves behind, and its model card.

A folder holds `config.json` (the family's `model_type` plus an `auto_map` naming our pretraining class),
`model.safetensors`, the tokenizer, our modeling code (copied by `save_pretrained` for `trust_remote_code=True`)
and a `README.md` model card. Plain `transformers` loads it without us: `architectures` names its own class, the
weights hold every backbone parameter that class has. A joint run (two networks) adds vanilla `discriminator/` and
`generator/` folders, each with its own card (`write_part_card`); the joint folder itself has a `model_type` of its
own, which plain `transformers` refuses (models/configuration_electra.py). docs/loading.md: which folder for
which client.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .recipes.recipe import VARIANTS
from .utils import BertologyError, logger, run_command

CARD_TEMPLATE = """---
{metadata}
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

{how_to_load}

## Recipe

```json
{recipe_json}
```
"""

# One network (every family but the joint ones): transformers' own classes load it.
LOAD_ONE = """With plain `transformers` (no hf_bertology needed):

```python
from transformers import AutoTokenizer, {plain_auto_class}, AutoModel
tokenizer = AutoTokenizer.from_pretrained("{path}")
model = {plain_auto_class}.from_pretrained("{path}")   # the pretrained network with its {head}
encoder = AutoModel.from_pretrained("{path}")           # the encoder alone, e.g. to fine-tune or embed
```

To continue pretraining with our objective (component losses included), load our class through remote code:

```python
from transformers import {auto_class}
model = {auto_class}.from_pretrained("{path}", trust_remote_code=True)
```"""

# Two networks (ELECTRA, DeBERTa-v3, an RTD objective on another encoder): the papers release them apart.
LOAD_JOINT = """This folder holds **two networks**, trained together: a small generator (masked LM) and the
discriminator (replaced-token detection). As the papers' released checkpoints, each is also written as a folder
plain `transformers` reads on its own:

| folder | holds | use it for |
|---|---|---|
| `discriminator/` | the discriminator, `{disc_class}` | fine-tuning (classification, tagging, QA, multiple choice), embeddings |
| `generator/` | the generator, `{gen_class}` | `pipeline("fill-mask")`, continued masked-LM training (`run_mlm.py`) |
| `.` (this folder) | both, for `hf_bertology` (resuming, `bertology export`) | continuing the joint pretraining |

```python
from transformers import AutoTokenizer, AutoModelForMaskedLM, AutoModelForSequenceClassification, pipeline
tokenizer = AutoTokenizer.from_pretrained("{path}", subfolder="discriminator")
classifier = AutoModelForSequenceClassification.from_pretrained("{path}", subfolder="discriminator", num_labels=2)
generator = AutoModelForMaskedLM.from_pretrained("{path}", subfolder="generator")
fill_mask = pipeline("fill-mask", model=generator, tokenizer=tokenizer)
```

This folder itself is not a plain `transformers` model (its `model_type` is `{model_type}`): `AutoModel*`
classes, pipelines and sentence-transformers refuse it and ask for `trust_remote_code`, and with
`trust_remote_code=True` only our joint class loads, to continue the joint pretraining:

```python
from transformers import {auto_class}
model = {auto_class}.from_pretrained("{path}", trust_remote_code=True)
```"""

PART_CARD = """---
{metadata}
---

# {name}

The **{part}** of a joint `{recipe}` run ({variant}) pretrained with `hf_bertology`, as a plain `transformers`
folder (`{plain_class}`; no hf_bertology needed). Corpus: {corpus}. {use}

```python
from transformers import AutoTokenizer, {auto_class}
tokenizer = AutoTokenizer.from_pretrained("{path}")
model = {auto_class}.from_pretrained("{path}")
```
"""
PART_USE = {
    "discriminator": "Use it for fine-tuning (sequence/token classification, QA, multiple choice) and embeddings; the "
    "generator next to it is for masked-LM work.",
    "generator": 'Use it for `pipeline("fill-mask")` and continued masked-LM training; fine-tune the '
    "discriminator next to it instead.",
}
LICENSE = "apache-2.0"  # hf_bertology's; pass `license=` for a corpus whose terms differ


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value) if value is not None else "–"


def card_metadata(
    pipeline_tag: str | None, tags: list[str], license: str = LICENSE, dataset_name: str | None = None
) -> str:
    """The card's YAML header: what the Hub shows and filters on (library, license, task, tags, training data)."""
    lines = ["library_name: transformers", f"license: {license}"]
    if pipeline_tag:
        lines.append(f"pipeline_tag: {pipeline_tag}")
    lines += ["tags:"] + [f"- {tag}" for tag in tags]
    if dataset_name:
        lines += ["datasets:", f"- {dataset_name}"]
    return "\n".join(lines)


def pipeline_tag_of(plain_class: str | None) -> str | None:
    """The Hub task of a folder whose plain class is `plain_class`: fill-mask where a masked-LM head was trained
    (`*ForMaskedLM`, BERT's and ALBERT's `*ForPreTraining`), text-generation for XLNet's LM head, feature-extraction
    for an encoder alone (a discriminator, a base model)."""
    if not plain_class:
        return None
    if plain_class.endswith("ForMaskedLM") or plain_class in ("BertForPreTraining", "AlbertForPreTraining"):
        return "fill-mask"
    if plain_class == "XLNetLMHeadModel":
        return "text-generation"
    return "feature-extraction"


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


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
    dataset_name: str | None = None,
    license: str = LICENSE,
    shown_as: str | Path | None = None,
    networks: tuple = (),
) -> Path:
    """Write `README.md`: recipe, corpus, steps, tokens seen, final losses, how to load; the header names the task
    the folder serves, its license and training data (`dataset_name`: a Hub dataset). `shown_as`: the folder the
    card names, if not `output_dir` (a folder written aside, then moved there); `networks`: the model's when it
    holds two (`Recipe.networks`), whose part folders it names."""
    output_dir = Path(output_dir)
    config = model.config
    objective_keys = {
        key: value
        for key, value in config.to_diff_dict().items()
        if key not in ("architectures", "auto_map", "transformers_version", "dtype", "torch_dtype")
    }
    losses = ", ".join(f"{k} {v:.4f}" for k, v in (final_losses or {}).items()) or "–"
    path = repo_id or str(shown_as or output_dir)
    saved = _read_json(output_dir / "config.json")
    plain_class = (saved.get("architectures") or [None])[0]
    model_classes = [name for name in saved.get("auto_map", {}) if name.startswith("AutoModel")]  # not AutoConfig
    auto_class = next(iter(model_classes), None) or getattr(model, "_auto_class", None) or plain_auto_class
    if networks:  # the classes of the part folders written next to it (`joint.write_part_folders`)
        written = {n.name: _read_json(output_dir / n.name / "config.json").get("architectures") for n in networks}
        how_to_load = LOAD_JOINT.format(
            path=path,
            auto_class=auto_class,
            model_type=saved.get("model_type", "?"),
            disc_class=(written.get("discriminator") or ["the family's base model"])[0],
            gen_class=(written.get("generator") or ["the family's masked LM"])[0],
        )
        tags = ["hf_bertology", variant, "replaced-token-detection"]
        plain_class = None  # no pipeline serves the joint folder (its parts: the part cards)
    else:
        head = "pretraining heads" if plain_auto_class == "AutoModelForPreTraining" else "masked-LM head"
        how_to_load = LOAD_ONE.format(path=path, plain_auto_class=plain_auto_class, auto_class=auto_class, head=head)
        tags = ["hf_bertology", variant]
    card = CARD_TEMPLATE.format(
        metadata=card_metadata(pipeline_tag_of(plain_class), tags, license, dataset_name),
        name=repo_id or Path(shown_as or output_dir).name,
        variant=variant,
        recipe=recipe,
        objective=VARIANTS[variant].card_objective if variant in VARIANTS else variant,
        corpus=corpus,
        steps=_fmt(steps),
        tokens=_fmt(tokens_seen),
        losses=losses,
        parameters=_fmt(sum(p.numel() for p in model.parameters())),
        how_to_load=how_to_load,
        recipe_json=json.dumps(objective_keys, indent=2, sort_keys=True, default=str),
    )
    card_path = output_dir / "README.md"
    card_path.write_text(card, encoding="utf-8")
    return card_path


def write_part_card(
    folder: str | Path,
    part: str,
    recipe: str = "?",
    variant: str = "?",
    corpus: str = "–",
    repo_id: str | None = None,
    dataset_name: str | None = None,
    license: str = LICENSE,
    shown_as: str | Path | None = None,
) -> Path:
    """`README.md` of a vanilla folder holding one network of a joint run (`bertology export`, or the
    `discriminator/` and `generator/` folders a joint run writes); `shown_as` as in `write_model_card`."""
    folder = Path(folder)
    plain_class = (_read_json(folder / "config.json").get("architectures") or ["?"])[0]
    tag = pipeline_tag_of(plain_class)
    card = PART_CARD.format(
        metadata=card_metadata(tag, ["hf_bertology", variant, part], license, dataset_name),
        name=repo_id or Path(shown_as or folder).name,
        part=part,
        recipe=recipe,
        variant=variant,
        corpus=corpus,
        plain_class=plain_class,
        use=PART_USE.get(part, ""),
        auto_class="AutoModelForMaskedLM" if tag == "fill-mask" else "AutoModel",
        path=repo_id or str(shown_as or folder),
    )
    card_path = folder / "README.md"
    card_path.write_text(card, encoding="utf-8")
    return card_path


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


# -- pushing to the Hub -----------------------------------------------------------------------------------------
# Training leftovers that do not belong in a model repository (the Trainer's checkpoints, logs, optimizer states).
PUSH_IGNORE = ("checkpoint-*", "tmp-checkpoint-*", "runs", "runs/*", ".*", "*.pt", "*.pth", "training_args.bin")
_CARD_LOAD = re.compile(r'from_pretrained\("[^"]*"')


def card_for_repo(card: str, repo_id: str, subfolder: str | None = None) -> str:
    """The model card with its title and every `from_pretrained("...")` pointing at `repo_id` (and, for the card of a
    part folder, at its `subfolder`)."""
    target = f'from_pretrained("{repo_id}", subfolder="{subfolder}"' if subfolder else f'from_pretrained("{repo_id}"'
    card = _CARD_LOAD.sub(target, card)
    if subfolder:
        return re.sub(r"^# .*$", f"# {repo_id} ({subfolder})", card, count=1, flags=re.MULTILINE)
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
