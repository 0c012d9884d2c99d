"""Checkpoints do not change when the code moves: every recipe's saved folder held to recorded digests.

For each paper recipe at its tiny size, every objective on every other encoder and a few part variations, a model
built from a fixed seed is saved as a run saves it (`hub.save_folder`, and a joint run's `discriminator/` and
`generator/`); the digests are the tensor names, shapes and bytes of every safetensors file, the `config.json`s, and
the losses and logits of a fixed batch. `python tests/test_digests.py --record [CASE ...]` writes them
(`tests/digests.json`; only the named cases, if any); re-record only for a change that is meant to change checkpoints,
and say so in the commit.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

sys.path.insert(0, str(Path(__file__).parent))

from hf_bertology import hub  # noqa: E402
from hf_bertology.data import build_pretraining_dataset, load_corpus, tokenize_corpus  # noqa: E402
from hf_bertology.joint import write_part_folders  # noqa: E402
from hf_bertology.recipes import BACKBONES, VARIANTS, get_recipe  # noqa: E402
from platform_support import no_dropout, write_corpus  # noqa: E402

DIGESTS = Path(__file__).parent / "digests.json"
REFUSED = {("bert", "modernbert"), ("albert", "modernbert")}  # sentence tasks need token types
CASES = (
    [f"{name}-tiny" for name in VARIANTS]
    + [
        f"{objective}-tiny@{backbone}"
        for objective, spec in VARIANTS.items()
        for backbone in BACKBONES
        if objective != "xlnet" and backbone != spec.backbone and (objective, backbone) not in REFUSED
    ]
    + [
        "bert-tiny+sentence_task=none",
        "roberta-tiny+sentence_task=sop",
        "albert-tiny+span_boundary_objective=true",
        "electra-tiny@roberta+embedding_sharing=nes",
        "deberta-v3-tiny+embedding_sharing=es",
        "deberta-v3-tiny@bert+embedding_sharing=gdes",
    ]
)
LENGTH = 48


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def folder_digest(folder: Path) -> dict:
    """Names, shapes, dtypes and bytes of every tensor, and the config, of one saved folder."""
    tensors = load_file(folder / "model.safetensors")
    config = json.loads((folder / "config.json").read_text())
    config.pop("transformers_version", None)
    return {
        "names": sorted(f"{name}:{tuple(t.shape)}:{t.dtype}" for name, t in tensors.items()),
        "values": _sha(
            b"".join(tensors[name].contiguous().view(torch.uint8).numpy().tobytes() for name in sorted(tensors))
        ),
        "config": config,
    }


def output_digest(output) -> dict:
    """Every tensor of the model's output: a scalar as its value, a larger tensor as its shape, sum and |sum|."""
    out = {}
    for key, value in output.items():
        if isinstance(value, torch.Tensor):
            value = value.detach().double()
            if value.numel() == 1:
                out[key] = [value.item()]
            else:
                out[key] = [list(value.shape), value.sum().item(), value.abs().sum().item()]
    return out


_TOKENIZERS: dict = {}


def deterministic(tokenizer, texts):
    """A WordPiece tokenizer whose vocabulary is the corpus's words and letters in sorted order: the WordPiece
    trainer breaks ties between pieces differently from one process to the next."""
    if type(tokenizer).__name__ != "BertTokenizer":
        return tokenizer
    words = {word for text in texts for word in re.findall(r"\w+|[^\w\s]", text.lower())}
    letters = {letter for word in words for letter in word}
    pieces = sorted(words | letters | {f"##{letter}" for letter in letters})
    specials = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])[: len(tokenizer.all_special_ids)]
    vocab = [token for token, _ in specials] + pieces
    return type(tokenizer)(vocab={token: i for i, token in enumerate(vocab)}, do_lower_case=True)


def digest(case: str, corpus, workdir: Path) -> dict:
    objective = case.split("@")[0].split("+")[0].rsplit("-", 1)[0]
    recipe = get_recipe(case, **no_dropout(case))
    if objective not in _TOKENIZERS:
        trained = get_recipe(f"{objective}-tiny").train_tokenizer(corpus["text"], 300)
        _TOKENIZERS[objective] = deterministic(trained, corpus["text"])
    tokenizer = _TOKENIZERS[objective]
    recipe.adapt_to_tokenizer(tokenizer)
    recipe.fit_to_length(LENGTH)
    examples = build_pretraining_dataset(tokenize_corpus(corpus, tokenizer), tokenizer, recipe.config, LENGTH, 0)
    batch = recipe.build_collator(tokenizer, seed=3)([examples[i] for i in range(4)])
    torch.manual_seed(0)
    model = recipe.build_model().eval()
    torch.manual_seed(1)
    with torch.no_grad():
        outputs = output_digest(model(**batch))
    folder = workdir / case.replace("@", "_at_").replace("+", "_")
    hub.save_folder(model, tokenizer, folder, recipe.networks)
    folders = {"": folder_digest(folder)}
    for part in write_part_folders(model, recipe.networks, tokenizer, folder):
        folders[part.name] = folder_digest(part)
    return {"folders": folders, "outputs": outputs}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return load_corpus(train_files=[str(write_corpus(tmp_path_factory.mktemp("digests") / "corpus.txt"))])


@pytest.fixture(scope="module")
def recorded():
    return json.loads(DIGESTS.read_text())


def test_every_recipe_has_a_digest(recorded):
    assert sorted(recorded) == sorted(CASES)


@pytest.mark.parametrize("case", CASES)
def test_checkpoint_is_unchanged(case, corpus, recorded, tmp_path):
    ours, theirs = digest(case, corpus, tmp_path), recorded[case]
    assert ours["folders"].keys() == theirs["folders"].keys()
    for part, folder in ours["folders"].items():
        for key in ("names", "config", "values"):
            assert folder[key] == theirs["folders"][part][key], f"{case} {part or 'joint'} folder: {key} changed"
    assert ours["outputs"].keys() == theirs["outputs"].keys()
    for key, values in ours["outputs"].items():
        expected = theirs["outputs"][key]
        if len(values) > 1:  # a tensor: its shape exactly, then its sum and |sum|
            assert values[0] == expected[0], (case, key)
            values, expected = values[1:], expected[1:]
        for got, want in zip(values, expected, strict=True):
            assert math.isclose(got, want, rel_tol=1e-5, abs_tol=1e-6), (case, key, got, want)


if __name__ == "__main__" and sys.argv[1:2] == ["--record"]:
    import tempfile

    named = sys.argv[2:]  # `--record CASE ...`: only these, the others kept as recorded
    with tempfile.TemporaryDirectory() as tmp:
        corpus = load_corpus(train_files=[str(write_corpus(Path(tmp) / "corpus.txt"))])
        result = {case: digest(case, corpus, Path(tmp)) for case in (named or CASES)}
    if named:
        result = {**json.loads(DIGESTS.read_text()), **result}
    DIGESTS.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print(f"{len(named or result)} digests written to {DIGESTS}")
