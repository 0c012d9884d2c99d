"""Child half of tests/test_clients.py: a user's process with plain `transformers`, no hf_bertology.

    python tests/clients_worker.py '{"family": ..., "mlm": DIR, "plm": DIR, "finetune": DIR, "joint": DIR, ...}'

`hf_bertology` is made unimportable first (the venv may hold an editable install), so everything below sees only
what the folders hold. Each client runs as the user would run it: the steps of transformers' `run_mlm.py`
(`resize_token_embeddings`, `DataCollatorForLanguageModeling`, a plain `Trainer` with `preprocess_logits_for_metrics`
and an accuracy from the returned logits), `run_plm.py` for XLNet, `run_glue.py` (sequence classification through a
plain `Trainer`, saved, reloaded with and without `trust_remote_code`), both pipelines, every `AutoModelFor*` head,
and sentence-transformers. A client that raises is recorded with its error, so one line of the result says what
broke. Prints one `RESULT {json}` line a case.
"""

from __future__ import annotations

import sys

sys.modules["hf_bertology"] = None  # type: ignore[assignment]  # `import hf_bertology` now fails, editable or not

import json  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import (  # noqa: E402
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DataCollatorForLanguageModeling,
    DataCollatorForPermutationLanguageModeling,
    DataCollatorWithPadding,
    Trainer,
    TrainingArguments,
    pipeline,
)

transformers.logging.set_verbosity_error()
TEXTS = [
    "The cat sat on the big old mat.",
    "A dog ran to the river and the bird sang.",
    "The old man walked to the city with his child.",
    "People looked at the small house by the mountain.",
] * 4
HEADS = (
    "AutoModelForSequenceClassification",
    "AutoModelForTokenClassification",
    "AutoModelForQuestionAnswering",
    "AutoModelForMultipleChoice",
)


def training_args(out: Path, **extra) -> TrainingArguments:
    return TrainingArguments(
        output_dir=str(out),
        max_steps=2,
        per_device_train_batch_size=4,
        per_device_eval_batch_size=4,
        learning_rate=1e-3,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        logging_steps=1,
        dataloader_num_workers=0,
        seed=0,
        **extra,
    )


def blocks(tokenizer, size: int = 16) -> Dataset:
    """run_mlm.py's `group_texts`: the corpus tokenized, concatenated and cut into blocks."""
    ids = [i for text in TEXTS for i in tokenizer(text)["input_ids"]]
    rows = [ids[i : i + size] for i in range(0, len(ids) - size + 1, size)]
    return Dataset.from_dict({"input_ids": rows, "attention_mask": [[1] * size for _ in rows]})


def accuracy_from_logits(eval_pred) -> dict:
    """run_mlm.py's `compute_metrics` on `preprocess_logits_for_metrics`' argmax: accuracy where labels != -100."""
    preds, labels = eval_pred
    mask = labels != -100
    return {"accuracy": float((preds[mask] == labels[mask]).mean())}


def run_mlm(folder: str, out: Path) -> dict:
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model, info = AutoModelForMaskedLM.from_pretrained(folder, output_loading_info=True)
    model.resize_token_embeddings(len(tokenizer))  # as run_mlm.py does
    data = blocks(tokenizer)
    trainer = Trainer(
        model=model,
        args=training_args(out / "mlm"),
        train_dataset=data,
        eval_dataset=data,
        data_collator=DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.3, seed=0),
        compute_metrics=accuracy_from_logits,
        preprocess_logits_for_metrics=lambda logits, labels: logits.argmax(dim=-1),
    )
    trainer.train()
    metrics = trainer.evaluate()
    saved = out / "mlm-model"
    trainer.save_model(str(saved))
    tokenizer.save_pretrained(saved)
    encoded = tokenizer(TEXTS[:2], padding=True, return_tensors="pt")
    return {
        "class": type(model).__name__,
        "missing": sorted(info["missing_keys"]),
        "metrics": metrics,
        "reloads": reloads(model, AutoModelForMaskedLM, saved, encoded),
    }


def reloads(model, auto, saved: Path, encoded) -> dict:
    """A folder saved by plain transformers from ours (it inherits our `auto_map`, not our code), loaded again with
    and without `trust_remote_code`: the largest difference from the trained model's logits, or the error."""
    model.eval()
    with torch.no_grad():
        reference = model(**encoded).logits
    result = {}
    for remote in (False, True):
        try:
            again = auto.from_pretrained(saved, trust_remote_code=remote).eval()
            with torch.no_grad():
                diff = (again(**encoded).logits - reference).abs().max().item()
            result[str(remote)] = {"class": type(again).__name__, "max_diff": diff}
        except Exception as err:  # noqa: BLE001 - recorded: the test names what broke
            result[str(remote)] = {"error": f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"}
    return result


def run_plm(folder: str, out: Path) -> dict:
    """run_plm.py: XLNetLMHeadModel with the permutation LM collator (even block lengths)."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model, info = transformers.XLNetLMHeadModel.from_pretrained(folder, output_loading_info=True)
    model.resize_token_embeddings(len(tokenizer))
    data = blocks(tokenizer)
    trainer = Trainer(
        model=model,
        args=training_args(out / "plm"),
        train_dataset=data,
        eval_dataset=data,
        data_collator=DataCollatorForPermutationLanguageModeling(tokenizer, plm_probability=1 / 6, max_span_length=3),
    )
    trainer.train()
    return {"class": type(model).__name__, "missing": sorted(info["missing_keys"]), "metrics": trainer.evaluate()}


def fill_mask(folder: str) -> dict:
    unmasker = pipeline("fill-mask", model=folder, device="cpu")
    mask = unmasker.tokenizer.mask_token
    predictions = unmasker(f"The cat sat on the {mask} mat.", top_k=3)
    return {"n": len(predictions), "score": float(predictions[0]["score"])}


def run_glue(folder: str, out: Path) -> dict:
    """run_glue.py: sequence classification through a plain Trainer, saved, then reloaded by plain users."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model, info = AutoModelForSequenceClassification.from_pretrained(folder, num_labels=2, output_loading_info=True)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    labels = [i % 2 for i in range(len(TEXTS))]
    data = Dataset.from_dict({"sentence": TEXTS, "label": labels}).map(
        lambda row: tokenizer(row["sentence"], truncation=True, max_length=32), remove_columns=["sentence"]
    )
    trainer = Trainer(
        model=model,
        args=training_args(out / "glue"),
        train_dataset=data,
        eval_dataset=data,
        data_collator=DataCollatorWithPadding(tokenizer),
        compute_metrics=lambda p: {"accuracy": float((np.argmax(p.predictions, axis=-1) == p.label_ids).mean())},
    )
    trainer.train()
    metrics = trainer.evaluate()
    saved = out / "glue-model"
    trainer.save_model(str(saved))
    tokenizer.save_pretrained(saved)
    encoded = tokenizer(TEXTS[:2], padding=True, return_tensors="pt")
    reloaded = reloads(model, AutoModelForSequenceClassification, saved, encoded)
    classify = pipeline("text-classification", model=str(saved), device="cpu")(TEXTS[:2])
    return {
        "class": type(model).__name__,
        "missing": sorted(info["missing_keys"]),
        "metrics": metrics,
        "reloads": reloaded,
        "pipeline": [row["label"] for row in classify],
    }


def heads(folder: str) -> dict:
    """Every AutoModelFor* head: what it initialises at random must be the new head only (nothing under the
    backbone's prefix), and it runs forward."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    results = {}
    for name in HEADS:
        auto = getattr(transformers, name)
        config = transformers.AutoConfig.from_pretrained(folder)
        if type(config) not in auto._model_mapping:
            results[name] = {"unsupported": True}
            continue
        model, info = auto.from_pretrained(folder, output_loading_info=True)
        prefix = model.base_model_prefix + "."
        encoded = tokenizer(TEXTS[:2], padding=True, return_tensors="pt")
        if name == "AutoModelForMultipleChoice":
            encoded = {k: v.unsqueeze(0) for k, v in encoded.items()}
        with torch.no_grad():
            model.eval()(**encoded)
        results[name] = {
            "class": type(model).__name__,
            "random_backbone": sorted(k for k in info["missing_keys"] if k.startswith(prefix)),
            "missing": sorted(info["missing_keys"]),
        }
    return results


def sentence_transformers(folder: str, out: Path) -> dict:
    from sentence_transformers import SentenceTransformer

    first = SentenceTransformer(folder, device="cpu").encode(TEXTS[:2])
    second = SentenceTransformer(folder, device="cpu")
    again = second.encode(TEXTS[:2])
    second.save(str(out / "st"))
    round_trip = SentenceTransformer(str(out / "st"), device="cpu").encode(TEXTS[:2])
    return {
        "shape": list(first.shape),
        "finite": bool(np.isfinite(first).all()),
        "reload_diff": float(np.abs(first - again).max()),
        "round_trip_diff": float(np.abs(first - round_trip).max()),
    }


def joint(folder: str) -> dict:
    """The joint folder of a two-network run, opened by standard tools: each must give the trained network or
    refuse. Without trust_remote_code (the default, and False) every Auto class, both pipelines and
    sentence-transformers; with it, AutoModelForPreTraining (our joint class), AutoModelForMaskedLM, AutoModel and
    pipeline("fill-mask"). Each: the class it gave, or its error's first line."""
    from sentence_transformers import SentenceTransformer

    def attempt(load, *args, **kwargs) -> dict:
        try:
            return {"class": type(load(*args, **kwargs)).__name__}
        except Exception as err:  # noqa: BLE001 - recorded: the refusal is the result
            return {"refused": f"{type(err).__name__}: {' | '.join(str(err).strip().splitlines())[:600]}"}

    result = {}
    for remote in (None, False, True):
        kwargs = {} if remote is None else {"trust_remote_code": remote}
        for name in ("AutoModel", "AutoModelForMaskedLM", "AutoModelForPreTraining", *HEADS):
            result[f"{name}[{remote}]"] = attempt(getattr(transformers, name).from_pretrained, folder, **kwargs)
        for task in ("fill-mask", "text-classification"):
            result[f"{task}[{remote}]"] = attempt(pipeline, task, model=folder, device="cpu", **kwargs)
    result["sentence_transformers[None]"] = attempt(SentenceTransformer, folder, device="cpu")
    return result


def snippets(codes: list[str]) -> dict:
    """The Python blocks of a documentation page or a model card, each run on its own as a user pastes it; the
    output of each."""
    import contextlib
    import io

    printed = []
    for code in codes:
        with contextlib.redirect_stdout(io.StringIO()) as out:
            exec(compile(code, "<docs>", "exec"), {"__name__": "__docs__"})  # noqa: S102 - our own docs' code
        printed.append(out.getvalue())
    return {"printed": printed}


def play(case: dict) -> dict:
    """Every client that `case` has a folder for; what each gave, or its error."""
    out = Path(case["out"])
    try:
        import hf_bertology  # noqa: F401

        importable = True
    except ImportError:
        importable = False
    result = {"family": case["family"], "hf_bertology_importable": importable, "seconds": {}}
    clients = {
        "mlm": (run_mlm, "mlm", True),
        "plm": (run_plm, "plm", True),
        "fill_mask": (fill_mask, "mlm", False),
        "glue": (run_glue, "finetune", True),
        "heads": (heads, "finetune", False),
        "sentence_transformers": (sentence_transformers, "finetune", True),
        "joint": (joint, "joint", False),
        "snippets": (snippets, "snippets", False),
        "card": (snippets, "card", False),
    }
    for name, (client, key, needs_out) in clients.items():
        if not case.get(key):
            continue
        start = time.perf_counter()
        try:
            torch.manual_seed(0)
            result[name] = client(case[key], out / name) if needs_out else client(case[key])
        except Exception as err:  # noqa: BLE001 - recorded: the test names what broke
            result[name] = {"error": f"{type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}"}
            print(traceback.format_exc(), file=sys.stderr)
        result["seconds"][name] = round(time.perf_counter() - start, 2)
    return result


def main() -> None:
    """One case (a JSON object) or several (a list): one `RESULT` line each, so one process pays the imports once."""
    cases = json.loads(sys.argv[1])
    for case in cases if isinstance(cases, list) else [cases]:
        # on a line of its own: transformers' "run the custom code? [y/N]" prompt leaves stdout mid-line
        print("\nRESULT " + json.dumps(play(case)), flush=True)


if __name__ == "__main__":
    main()
