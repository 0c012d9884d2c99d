"""Hub-format folders: what `bertology pretrain` leaves behind, and its model card.

A folder holds `config.json` (the family's `model_type` plus an `auto_map` to our config and pretraining class),
`model.safetensors`, the tokenizer, our modeling code (copied by `save_pretrained` for `trust_remote_code=True`)
and a `README.md` model card. Plain `transformers` loads it without us.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .utils import BertologyError

CARD_TEMPLATE = """---
library_name: transformers
tags:
- hf_bertology
- {variant}
- fill-mask
---

# {name}

A **{variant}** encoder pretrained with [hf_bertology](https://github.com/) using the `{recipe}` recipe.

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
        auto_class=getattr(type(model), "_auto_class", None) or plain_auto_class,
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
