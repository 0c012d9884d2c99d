"""Helpers shared by the platform tests (Hub, multi-process, resume, hostile input, streaming)."""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import hf_bertology as hb

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
WORDS = (
    "the a cat dog bird fish tree house river mountain city people time year day way man woman child world life "
    "hand part place case week company system program question work number night point home water room mother area "
    "money story fact month lot right study book eye job word business side kind head friend father power hour game "
    "runs walked sings is was has made said went saw took came looked wanted gave used found big small old new good"
).split()


def write_corpus(path: Path, n_docs: int = 40, seed: int = 0) -> Path:
    """Plain text: blank-line-separated documents of 3-8 sentences of random words."""
    rng = random.Random(seed)
    documents = []
    for _ in range(n_docs):
        sentences = [
            " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 14))).capitalize() + "."
            for _ in range(rng.randint(3, 8))
        ]
        documents.append(" ".join(sentences))
    path.write_text("\n\n".join(documents) + "\n", encoding="utf-8")
    return path


def tiny_recipes() -> list[str]:
    """`<variant>-tiny` for every variant family this checkout has (new families join automatically)."""
    return [f"{variant}-tiny" for variant in hb.VARIANTS if f"{variant}-tiny" in hb.PRESETS]


def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment for a child Python: our `src` first on the path, one thread, no network."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("HF_", "HUGGINGFACE_"))}
    env.update(
        PYTHONPATH=os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        TOKENIZERS_PARALLELISM="false",
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


def pretrain_argv(recipe: str, train_file: Path, output_dir: Path, *extra: str) -> list[str]:
    """`bertology pretrain` flags for a tiny, fast, deterministic run of `recipe`."""
    return [
        "--recipe", recipe, "--train_file", str(train_file), "--output_dir", str(output_dir),
        "--vocab_size", "300", "--per_device_train_batch_size", "4", "--seed", "0",
        "--logging_steps", "1", "--report_to", "none", "--dataloader_num_workers", "0",
        "--use_cpu", "true", *extra,
    ]  # fmt: skip


PYTHON = sys.executable


def pretrain_in_child(argv: list[str], log: str) -> None:
    """`bertology pretrain argv`, as `python -m hf_bertology` runs it, in a child forked by a server that imported
    hf_bertology once (`test_resume.forkserver`): one thread, as the tests' in-process runs; output into `log`."""
    import multiprocessing

    # a forkserver child inherits the forkserver start method; DataLoader workers must start as in a new process
    multiprocessing.set_start_method(None, force=True)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    import torch

    from hf_bertology import cli

    torch.set_num_threads(1)
    sys.exit(cli.main(["pretrain", *argv]))


def no_dropout(recipe: str) -> dict:
    """Config overrides that turn off every dropout of `recipe`'s config: the names differ by family (BERT's
    `hidden_dropout_prob`, XLNet's `dropout`, ModernBERT's `mlp_dropout`, ...), and a name the config lacks is
    refused."""
    config = hb.get_recipe(recipe).config
    return {key: 0.0 for key, value in config.to_dict().items() if "dropout" in key and isinstance(value, float)}


def assert_folder_reloads_alike(folder: Path, ours_class, plain_class, ours_logits: str, plain_logits: str) -> None:
    """The folder a run wrote is complete: plain `transformers`' `plain_class` loads it with nothing missing, and
    gives on a fixed input the same logits as our `ours_class` loaded from it (a tensor left out of the file would
    be initialised afresh, differently, by each)."""
    import torch

    ours = ours_class.from_pretrained(folder).eval()
    plain, info = plain_class.from_pretrained(folder, output_loading_info=True)
    assert info["missing_keys"] == [] or info["missing_keys"] == set(), info["missing_keys"]
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(5, ours.config.vocab_size, (2, 16), generator=generator)
    with torch.no_grad():
        expected = getattr(plain.eval()(input_ids=input_ids), plain_logits)
        got = getattr(ours(input_ids=input_ids), ours_logits)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def assert_train_loss_is_the_logged_mean(metrics: dict, log_history: list[dict]) -> None:
    """`train_loss` is the mean of the per-step losses the run logged (`logging_steps` 1; logs keep 4 digits)."""
    import math

    losses = [log["loss"] for log in log_history if "loss" in log]
    assert losses and all(math.isfinite(loss) for loss in losses), losses
    mean = sum(losses) / len(losses)
    assert abs(metrics["train_loss"] - mean) <= 1e-3 * abs(mean), (metrics["train_loss"], losses)


def tiny_examples(variant: str, corpus, length: int):
    """(recipe, tokenizer, examples) of `variant`'s tiny recipe without dropout, on a 300-word vocabulary trained on
    `corpus` (a `load_corpus` dataset), examples of at most `length` tokens."""
    from hf_bertology.data import build_pretraining_dataset, tokenize_corpus

    recipe = hb.get_recipe(f"{variant}-tiny", **no_dropout(f"{variant}-tiny"))
    tokenizer = recipe.train_tokenizer(corpus["text"], 300)
    recipe.adapt_to_tokenizer(tokenizer)
    examples = build_pretraining_dataset(tokenize_corpus(corpus, tokenizer), tokenizer, recipe.config, length, 0)
    return recipe, tokenizer, examples


def loss_and_grads(model, batch: dict, num_items=None):
    """One forward and backward of `model` on `batch` from zeroed gradients: (output, every parameter's gradient).
    The random state is fixed first, so ELECTRA samples the same replacements whatever the batch layout."""
    import torch

    model.zero_grad(set_to_none=True)
    torch.manual_seed(11)
    output = model(**batch, num_items_in_batch=num_items)
    output.loss.backward()
    return output, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def assert_same_step(expected: tuple, got: tuple, rtol: float = 1e-5, atol: float = 1e-5, label: str = "") -> None:
    """Two `loss_and_grads` results agree: every scalar output (losses, accuracies) and every parameter's gradient,
    within (rtol, atol)."""
    import torch

    (out_expected, grads_expected), (out_got, grads_got) = expected, got
    for key, value in out_expected.items():
        if torch.is_tensor(value) and value.dim() == 0:
            torch.testing.assert_close(out_got[key], value, rtol=rtol, atol=atol, msg=f"{label} {key}")
    assert grads_expected.keys() == grads_got.keys()
    for name, grad in grads_expected.items():
        torch.testing.assert_close(grads_got[name], grad, rtol=rtol, atol=atol, msg=f"{label} {name}")
