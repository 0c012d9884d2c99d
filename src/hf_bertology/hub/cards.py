"""Model cards: a run's folder's `README.md` (`write_model_card`), a part folder's (`write_part_card`), and a card
rewritten to name the Hub repository it is pushed to (`card_for_repo`)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from transformers import PreTrainedModel

from ..recipes.recipe import VARIANTS

CARD_TEMPLATE = """---
{metadata}
---

# {name}

A **{variant}** encoder pretrained with `hf_bertology` using the `{recipe}` recipe.{continued}

| | |
|---|---|
| recipe | `{recipe}` ({variant}) |
| objective | {objective} |
| corpus | {corpus} |
| steps | {steps} |
| batch | {batch} |
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
folder (`{plain_class}`; no hf_bertology needed). Corpus: {corpus}. {use}{continued}

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
    pipeline_tag: str | None,
    tags: list[str],
    license: str = LICENSE,
    dataset_name: str | None = None,
    base_model: tuple[str, ...] = (),
) -> str:
    """The card's YAML header: what the Hub shows and filters on (library, license, task, tags, training data, and
    `base_model:`, the models a continued run started from, which places it in their family tree on the Hub)."""
    lines = ["library_name: transformers", f"license: {license}"]
    if pipeline_tag:
        lines.append(f"pipeline_tag: {pipeline_tag}")
    lines += ["tags:"] + [f"- {tag}" for tag in tags]
    if dataset_name:
        lines += ["datasets:", f"- {dataset_name}"]
    if base_model:
        lines += ["base_model:"] + [f"- {name}" for name in base_models(base_model)]
    return "\n".join(lines)


def base_models(sources: tuple[str, ...]) -> list[str]:
    """The `base_model:` entries of a run continued from `sources` (`--model_name_or_path`, then
    `--generator_name_or_path`): a Hub id as given, a local folder by its name (its path means nothing on the Hub)."""
    return [Path(source).resolve().name if Path(source).exists() else str(source) for source in sources]


def continued_text(sources: tuple[str, ...]) -> str:
    """The card's sentence saying what a continued run started from (empty for a run from scratch)."""
    if not sources:
        return ""
    parts = ("the discriminator", "the generator") if len(sources) == 2 else ("",)
    named = " and ".join(f"`{source}`" + (f" ({part})" if part else "") for source, part in zip(sources, parts))
    return f"\n\nContinued from {named}: its pretraining started from these weights, not from scratch."


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
    base_model: tuple[str, ...] = (),
    batch: str | None = None,
) -> Path:
    """Write `README.md`: recipe, corpus, steps, the global batch (`batch`: its split, e.g. `global batch 8192 = 32
    per device x 8 processes x 32 accumulation steps`), tokens seen, final losses, how to load; the header names the task
    the folder serves, its license and training data (`dataset_name`: a Hub dataset). `shown_as`: the folder the
    card names, if not `output_dir` (a folder written aside, then moved there); `networks`: the model's when it
    holds two (`Recipe.networks`), whose part folders it names; `base_model`: what a continued run started from
    (`--model_name_or_path`, `--generator_name_or_path`), in the header and in a sentence."""
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
        metadata=card_metadata(pipeline_tag_of(plain_class), tags, license, dataset_name, base_model),
        name=repo_id or Path(shown_as or output_dir).name,
        continued=continued_text(base_model),
        variant=variant,
        recipe=recipe,
        objective=VARIANTS[variant].card_objective if variant in VARIANTS else variant,
        corpus=corpus,
        steps=_fmt(steps),
        batch=_fmt(batch),
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
    base_model: tuple[str, ...] = (),
) -> Path:
    """`README.md` of a vanilla folder holding one network of a joint run (`bertology export`, or the
    `discriminator/` and `generator/` folders a joint run writes); `shown_as` and `base_model` as in
    `write_model_card` (every card of a run carries the same `datasets:` and `base_model:`)."""
    folder = Path(folder)
    plain_class = (_read_json(folder / "config.json").get("architectures") or ["?"])[0]
    tag = pipeline_tag_of(plain_class)
    card = PART_CARD.format(
        metadata=card_metadata(tag, ["hf_bertology", variant, part], license, dataset_name, base_model),
        name=repo_id or Path(shown_as or folder).name,
        continued=continued_text(base_model),
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


_CARD_LOAD = re.compile(r'from_pretrained\("[^"]*"')


def card_for_repo(card: str, repo_id: str, subfolder: str | None = None) -> str:
    """The model card with its title and every `from_pretrained("...")` pointing at `repo_id` (and, for the card of a
    part folder, at its `subfolder`)."""
    target = f'from_pretrained("{repo_id}", subfolder="{subfolder}"' if subfolder else f'from_pretrained("{repo_id}"'
    card = _CARD_LOAD.sub(target, card)
    if subfolder:
        return re.sub(r"^# .*$", f"# {repo_id} ({subfolder})", card, count=1, flags=re.MULTILINE)
    return re.sub(r"^# .*$", f"# {repo_id}", card, count=1, flags=re.MULTILINE)
