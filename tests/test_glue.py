"""GLUE fine-tuning: readers (real GLUE files and tiny ones written here), metrics, layer-wise lr decay, smoke runs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from hf_bertology.evaluation.glue import (
    GLUE_METRIC_PATH,
    GLUE_TASKS,
    get_task,
    glue_table,
    load_glue_files,
    load_glue_folder,
    main,
    parse_args,
    read_glue_tsv,
    task_score,
)
from hf_bertology.training.layerwise_lr import layerwise_lr_optimizer, layerwise_lr_param_groups, parameter_depth
from hf_bertology.training.optimizers import AdamWNoBiasCorrection
from hf_bertology.utils import BertologyError

GLUE_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "glue"

# (task, folder) -> rows per split, from shared/data/README.md ("records" minus the header)
REAL_COUNTS = {
    ("cola", "CoLA"): {"train": 8551, "validation": 1043, "test": 1063},
    ("sst2", "SST-2"): {"train": 67349, "validation": 872, "test": 1821},
    ("stsb", "STS-B"): {"train": 5749, "validation": 1500, "test": 1379},
    ("wnli", "WNLI"): {"train": 635, "validation": 71, "test": 146},
    ("qnli", "QNLI"): {"validation": 5463, "test": 5463},
}


def _write(path: Path, lines: list[str], bom: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(("\ufeff" if bom else "") + "\n".join(lines) + "\n", encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------------ real GLUE files
@pytest.mark.parametrize(("task", "folder"), list(REAL_COUNTS))
def test_reader_on_real_glue_files(task, folder):
    if not (GLUE_DIR / folder).is_dir():
        pytest.skip(f"GLUE data not found at {GLUE_DIR / folder} (the repo should sit next to shared/)")
    dd = load_glue_folder(task, GLUE_DIR / folder)
    assert {split: len(ds) for split, ds in dd.items()} == REAL_COUNTS[(task, folder)]
    spec = GLUE_TASKS[task]
    for split, ds in dd.items():
        labels = np.array(ds["label"])
        if split.startswith("test"):
            assert (labels == -1).all()
        elif spec.is_regression:
            assert labels.min() == 0.0 and labels.max() == 5.0 and len(np.unique(labels)) > 20  # scores, not ids
        else:
            assert set(labels.tolist()) == set(range(spec.num_labels))
        for key in spec.sentence_keys:
            if key:
                assert all(isinstance(t, str) and t for t in ds[key][:200])


def test_real_files_first_rows_and_label_mapping():
    if not GLUE_DIR.is_dir():
        pytest.skip(f"GLUE data not found at {GLUE_DIR}")
    cola = read_glue_tsv("cola", GLUE_DIR / "CoLA" / "dev.tsv", "validation")
    # first dev line: gj04	1		The sailors rode the breeze clear of the rocks.
    assert cola[0] == {"sentence": "The sailors rode the breeze clear of the rocks.", "label": 1, "idx": 0}
    assert cola.features["label"].names == ["unacceptable", "acceptable"]
    qnli = read_glue_tsv("qnli", GLUE_DIR / "QNLI" / "dev.tsv", "validation")
    raw = (GLUE_DIR / "QNLI" / "dev.tsv").read_text(encoding="utf-8").split("\n")[1].split("\t")
    assert qnli[0]["question"] == raw[1] and qnli[0]["sentence"] == raw[2]
    assert qnli.features["label"].int2str(qnli[0]["label"]) == raw[3]
    stsb_test = read_glue_tsv("stsb", GLUE_DIR / "STS-B" / "test.tsv", "test")
    assert stsb_test[0]["sentence1"] == "A girl is styling her hair." and stsb_test[-1]["idx"] == 1378
    # fields starting with a quote are kept verbatim (QUOTE_NONE), not merged with the next rows
    assert stsb_test[891]["idx"] == 891 and stsb_test[891]["sentence1"].startswith('"We believe we are fully prepared')
    assert stsb_test[898]["sentence1"] == '"Tony\'s not feeling well," Spurs coach Gregg Popovich said.'


# ------------------------------------------------------------------------------------------------ tiny layouts
def test_mrpc_with_bom(tmp_path):
    _write(
        tmp_path / "train.tsv",
        [
            "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String",
            '1\t1\t2\t"He said" so .\tHe said so .',
            "0\t3\t4\tA b .\tC d .",
        ],
        bom=True,
    )
    _write(tmp_path / "test.tsv", ["index\t#1 ID\t#2 ID\t#1 String\t#2 String", "7\t1\t2\tA .\tB ."], bom=True)
    dd = load_glue_folder("mrpc", tmp_path)
    assert dd["train"]["label"] == [1, 0] and dd["train"][0]["sentence1"] == '"He said" so .'
    assert dd["test"][0] == {"sentence1": "A .", "sentence2": "B .", "label": -1, "idx": 7}


def test_rte_qqp_layouts(tmp_path):
    _write(
        tmp_path / "RTE" / "dev.tsv",
        ["index\tsentence1\tsentence2\tlabel", "0\tA b.\tA.\tentailment", "1\tC d.\tE.\tnot_entailment"],
    )
    rte = load_glue_folder("rte", tmp_path)  # a GLUE root folder works too
    assert rte["validation"]["label"] == [0, 1] and rte["validation"].features["label"].names[0] == "entailment"
    _write(
        tmp_path / "QQP" / "train.tsv",
        ["id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate", "5\t1\t2\tWhy?\tHow?\t0", "6\t3\t4\tWho?\tWho?\t1"],
    )
    _write(tmp_path / "QQP" / "test.tsv", ["id\tquestion1\tquestion2", "0\tA?\tB?"])
    qqp = load_glue_folder("qqp", tmp_path / "QQP")
    assert qqp["train"]["label"] == [0, 1] and qqp["train"]["idx"] == [5, 6] and qqp["train"][1]["question1"] == "Who?"
    assert qqp["test"]["label"] == [-1]


def test_mnli_layout_gold_label_last(tmp_path):
    parse = "\t".join(["( A )"] * 4)
    _write(
        tmp_path / "train.tsv",
        [
            "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\t"
            "sentence2_parse\tsentence1\tsentence2\tlabel1\tgold_label",
            f"0\t1\t1e\tfiction\t{parse}\tP one.\tH one.\tneutral\tneutral",
            f"1\t2\t2c\tfiction\t{parse}\tP two.\tH two.\tcontradiction\tcontradiction",
        ],
    )
    dev_header = (
        "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\t"
        "sentence2_parse\tsentence1\tsentence2\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label"
    )
    # the annotators disagree; gold_label (last) is the label, not label1
    votes = "neutral\tentailment\tentailment\tentailment\tneutral"
    for name in ("dev_matched.tsv", "dev_mismatched.tsv"):
        _write(tmp_path / name, [dev_header, f"9\t1\t1e\tslate\t{parse}\tP.\tH.\t{votes}\tentailment"])
    dd = load_glue_folder("mnli", tmp_path)
    assert set(dd) == {"train", "validation_matched", "validation_mismatched"}
    assert dd["train"]["label"] == [1, 2] and dd["train"][0]["premise"] == "P one."
    assert dd["validation_matched"][0] == {"premise": "P.", "hypothesis": "H.", "label": 0, "idx": 9}


# ------------------------------------------------------------------------------------------------ errors
def test_reader_errors(tmp_path):
    with pytest.raises(BertologyError, match="not found"):
        load_glue_folder("sst2", tmp_path / "nope")
    with pytest.raises(BertologyError, match="holds none of the sst2 files"):
        load_glue_folder("sst2", tmp_path)
    bad = _write(tmp_path / "a" / "dev.tsv", ["sentence\tlabel", "good .\t1", "bad\ttab .\t0"])
    with pytest.raises(BertologyError, match=r"dev.tsv:3: expected 2 tab-separated fields, found 3"):
        read_glue_tsv("sst2", bad, "validation")
    bad = _write(tmp_path / "b" / "dev.tsv", ["sentence\tlabel", "good .\t1", "bad .\t2"])
    with pytest.raises(BertologyError, match=r"dev.tsv:3: unknown label '2' for GLUE task sst2"):
        read_glue_tsv("sst2", bad, "validation")
    bad = _write(tmp_path / "c" / "dev.tsv", ["index\tsentence1\tsentence2", "0\ta\tb"])
    with pytest.raises(BertologyError, match="no column 'label'"):
        read_glue_tsv("rte", bad, "validation")
    with pytest.raises(BertologyError, match="unknown GLUE task 'sst3'"):
        get_task("sst3")
    bad = _write(tmp_path / "d.csv", ["sentence,label", "good,positive", "meh,neutral"])
    with pytest.raises(BertologyError, match="unknown label 'neutral'"):
        load_glue_files("sst2", train_file=str(bad))


def test_csv_json_files(tmp_path):
    csv_file = _write(tmp_path / "train.csv", ["sentence1,sentence2,label", "a b,c d,equivalent", "e,f,0"])
    json_file = tmp_path / "dev.json"
    json_file.write_text('{"sentence1": "a", "sentence2": "b", "label": 1}\n')
    dd = load_glue_files("mrpc", train_file=str(csv_file))
    assert dd["train"]["label"] == [1, 0] and dd["train"]["idx"] == [0, 1]
    dd = load_glue_files("mrpc", validation_file=str(json_file))
    assert dd["validation"][0] == {"sentence1": "a", "sentence2": "b", "label": 1, "idx": 0}


# ------------------------------------------------------------------------------------------------ metrics
METRIC_CASES = {
    "cola": ["matthews_correlation"],
    "sst2": ["accuracy"],
    "mrpc": ["accuracy", "f1"],
    "stsb": ["pearson", "spearmanr"],
    "qqp": ["accuracy", "f1"],
    "mnli": ["accuracy"],
    "mnli_matched": ["accuracy"],
    "mnli_mismatched": ["accuracy"],
    "qnli": ["accuracy"],
    "rte": ["accuracy"],
    "wnli": ["accuracy"],
    "ax": ["accuracy"],
}


@pytest.mark.parametrize("config", list(METRIC_CASES))
def test_metric_module_matches_sklearn_scipy(config, monkeypatch):
    import evaluate
    from scipy.stats import pearsonr, spearmanr
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    rng = np.random.default_rng(0)
    if config == "stsb":
        refs = rng.uniform(0, 5, 50).astype(np.float32)
        preds = (refs + rng.normal(0, 1, 50)).astype(np.float32)
        expected = {"pearson": pearsonr(preds, refs)[0], "spearmanr": spearmanr(preds, refs)[0]}
    else:
        n_classes = 3 if config.startswith(("mnli", "ax")) else 2
        refs = rng.integers(0, n_classes, 60)
        preds = np.where(rng.random(60) < 0.7, refs, rng.integers(0, n_classes, 60))
        expected = {
            "matthews_correlation": matthews_corrcoef(refs, preds),
            "accuracy": accuracy_score(refs, preds),
            "f1": f1_score(refs, preds) if n_classes == 2 else None,
        }
    metric = evaluate.load(GLUE_METRIC_PATH, config_name=config)
    result = metric.compute(predictions=preds, references=refs)
    assert sorted(result) == sorted(METRIC_CASES[config])
    for key in METRIC_CASES[config]:
        assert result[key] == pytest.approx(expected[key], abs=1e-6)


def test_metric_values_against_hand_counts():
    """The module's numbers against closed forms worked out by hand (not the sklearn/scipy calls it makes)."""
    import evaluate

    refs = [1, 1, 0, 0, 1, 0, 1, 1]
    preds = [1, 0, 0, 1, 1, 0, 1, 1]  # TP 4, FN 1, FP 1, TN 2
    mrpc = evaluate.load(GLUE_METRIC_PATH, config_name="mrpc").compute(predictions=preds, references=refs)
    assert mrpc == pytest.approx({"accuracy": 6 / 8, "f1": 2 * 4 / (2 * 4 + 1 + 1)}, abs=1e-12)
    cola = evaluate.load(GLUE_METRIC_PATH, config_name="cola").compute(predictions=preds, references=refs)
    # MCC = (TP·TN − FP·FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)) = (8 − 1) / sqrt(5·5·3·3)
    assert cola["matthews_correlation"] == pytest.approx(7 / 15, abs=1e-12)
    # x = [1, 3, 2, 4], y = [1, 2, 3, 4]: centred dot 4 over sqrt(5·5); ranks differ by 1 twice: 1 − 6·2 / (4·15)
    stsb = evaluate.load(GLUE_METRIC_PATH, config_name="stsb").compute(
        predictions=[1, 3, 2, 4], references=[1, 2, 3, 4]
    )
    assert stsb == pytest.approx({"pearson": 0.8, "spearmanr": 0.8}, abs=1e-6)  # scores are float32


def test_metric_file_path_and_bad_config():
    import evaluate

    assert evaluate.load(GLUE_METRIC_PATH + "/glue.py", config_name="cola").compute(
        predictions=[0, 1, 1, 0], references=[0, 1, 1, 0]
    ) == {"matthews_correlation": 1.0}
    with pytest.raises(KeyError, match="unknown GLUE config"):
        evaluate.load(GLUE_METRIC_PATH, config_name="sst5")


def test_task_score_and_table():
    results = {
        "cola": {"eval_matthews_correlation": 0.5},
        "mrpc": {"eval_accuracy": 0.8, "eval_f1": 0.9},
        "mnli": {"eval_accuracy": 0.6, "eval_accuracy_mm": 0.7},
        "wnli": {"eval_accuracy": 0.1},
    }
    assert task_score("mrpc", results["mrpc"]) == pytest.approx(0.85)
    assert task_score("mnli", results["mnli"]) == pytest.approx(0.65)
    assert task_score("mnli", {"eval_accuracy": 0.6}) is None  # mismatched missing: no score
    table = glue_table(results)
    assert "| mrpc | accuracy 80.00 / f1 90.00 | 85.00 |" in table
    assert "**66.67**" in table  # (50 + 85 + 65) / 3: WNLI excluded


# ------------------------------------------------------------------------------------------------ defaults, lr decay
def test_defaults_and_overrides(tmp_path):
    _, data_args, args = parse_args(["--model_name_or_path", "m", "--task_name", "rte", "--output_dir", str(tmp_path)])
    assert (args.learning_rate, args.num_train_epochs, args.per_device_train_batch_size) == (2e-5, 3.0, 32)
    assert (args.warmup_steps, args.weight_decay, data_args.max_seq_length) == (0.1, 0.01, 128)
    assert args.do_train and args.do_eval and not args.do_predict  # nothing asked: train and evaluate
    # pinned batches only where there is an accelerator to copy them to (else a warning every epoch)
    assert args.dataloader_pin_memory == (torch.cuda.is_available() or torch.accelerator.is_available())
    _, _, args = parse_args(
        ["--model_name_or_path", "m", "--output_dir", str(tmp_path), "--learning_rate", "1e-4", "--do_eval"]
    )
    assert args.learning_rate == 1e-4 and args.do_eval and not args.do_train
    cfg = tmp_path / "args.json"
    cfg.write_text(json.dumps({"model_name_or_path": "m", "output_dir": str(tmp_path), "num_train_epochs": 10}))
    _, _, args = parse_args([str(cfg)])
    assert args.num_train_epochs == 10 and args.learning_rate == 2e-5


def test_layerwise_lr_decay_groups():
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=50, hidden_size=16, num_hidden_layers=3, num_attention_heads=2, intermediate_size=20, num_labels=2
    )
    model = BertForSequenceClassification(config)
    assert parameter_depth("bert.embeddings.word_embeddings.weight", 3) == 0
    assert parameter_depth("bert.encoder.layer.2.output.dense.weight", 3) == 3
    assert parameter_depth("classifier.weight", 3) == 5
    assert parameter_depth("transformer.layer.0.rel_attn.q", 3) == 1  # XLNet
    assert parameter_depth("transformer.word_embedding.weight", 3) == 0
    assert parameter_depth("electra.embeddings_project.weight", 3) == 0  # ELECTRA's "embeddings_project": 0
    assert parameter_depth("albert.encoder.embedding_hidden_mapping_in.weight", 3) == 0
    assert parameter_depth("albert.encoder.albert_layer_groups.0.albert_layers.0.ffn.weight", 3) == 3  # shared: top
    groups = layerwise_lr_param_groups(model, 1e-4, 0.8, 0.01)
    lr_of = {name: g["lr"] for g in groups for name in g["names"]}
    wd_of = {name: g["weight_decay"] for g in groups for name in g["names"]}
    assert lr_of["bert.embeddings.word_embeddings.weight"] == pytest.approx(1e-4 * 0.8**5)
    assert lr_of["bert.encoder.layer.0.attention.self.query.weight"] == pytest.approx(1e-4 * 0.8**4)
    assert lr_of["bert.encoder.layer.2.output.dense.weight"] == pytest.approx(1e-4 * 0.8**2)  # top layer: decay²
    assert lr_of["classifier.weight"] == pytest.approx(1e-4)
    assert wd_of["classifier.weight"] == 0.01 and wd_of["classifier.bias"] == 0.0
    assert wd_of["bert.encoder.layer.1.output.LayerNorm.weight"] == 0.0
    assert len(lr_of) == len(list(model.parameters()))  # every parameter in exactly one group
    grouped = [id(p) for g in groups for p in g["params"]]
    assert sorted(grouped) == sorted(id(p) for p in model.parameters())  # no parameter twice, none left out
    assert [len(g["params"]) for g in groups] == [len(g["names"]) for g in groups]

    from transformers import TrainingArguments

    args = TrainingArguments(
        output_dir="unused", learning_rate=1e-4, weight_decay=0.01, adam_beta1=0.8, adam_beta2=0.9, adam_epsilon=1e-7
    )
    optimizer_cls, kwargs = layerwise_lr_optimizer(model, args, 0.8)
    assert optimizer_cls is AdamWNoBiasCorrection  # ELECTRA's; tests/test_official_optimizers.py: --optim_args
    assert (kwargs["lr"], kwargs["betas"], kwargs["eps"]) == (1e-4, (0.8, 0.9), 1e-7)
    assert [(g["lr"], g["weight_decay"]) for g in kwargs["params"]] == [(g["lr"], g["weight_decay"]) for g in groups]
    optimizer_cls(**kwargs)  # the groups are valid AdamW groups ("names" removed)


# ------------------------------------------------------------------------------------------------ smoke runs
TEXTS = [
    "the movie was good and fun",
    "a bad and boring film",
    "i liked the actors a lot",
    "the plot was dull",
    "great music and a fine story",
    "terrible acting , weak script",
]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> str:
    from transformers import BertConfig, BertForPreTraining, BertTokenizer

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny-bert")
    tokenizer = BertTokenizer().train_new_from_iterator(TEXTS * 5, vocab_size=200)
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=64,
    )
    BertForPreTraining(config).save_pretrained(path)  # a pretraining checkpoint, as `bertology pretrain` writes
    tokenizer.save_pretrained(path)
    return str(path)


def _sst2_folder(root: Path) -> Path:
    train = ["sentence\tlabel"] + [f"{t}\t{int(i % 2 == 0)}" for i, t in enumerate(TEXTS * 4)]
    dev = ["sentence\tlabel"] + [f"{t}\t{int(i % 2 == 0)}" for i, t in enumerate(TEXTS)]
    test = ["index\tsentence"] + [f"{i}\t{t}" for i, t in enumerate(TEXTS[:4])]
    for name, lines in (("train.tsv", train), ("dev.tsv", dev), ("test.tsv", test)):
        _write(root / name, lines)
    return root


def _run_args(model: str, out: Path, *extra: str) -> list[str]:
    return [
        "--model_name_or_path", model, "--output_dir", str(out), "--max_steps", "5",
        "--per_device_train_batch_size", "4", "--per_device_eval_batch_size", "8", "--max_seq_length", "32",
        "--seed", "0", "--save_strategy", "no", "--report_to", "none", "--disable_tqdm", "true", *extra,
    ]  # fmt: skip


def test_smoke_sst2_train_eval_predict(tiny_model, tmp_path):
    data = _sst2_folder(tmp_path / "SST-2")
    out = tmp_path / "out"
    old = os.umask(0o002)
    try:
        assert main(_run_args(tiny_model, out, "--task_name", "sst2", "--data_dir", str(data), "--do_train",
                              "--do_eval", "--do_predict")) == 0  # fmt: skip
    finally:
        os.umask(old)
    # issue 40: the weights followed safetensors' 0600, not the umask as every other file and pretraining's do
    assert {path.name: oct(path.stat().st_mode & 0o777) for path in out.rglob("*") if path.is_file()} == {
        path.name: "0o664" for path in out.rglob("*") if path.is_file()
    }
    results = json.loads((out / "all_results.json").read_text())
    assert 0.0 <= results["eval_accuracy"] <= 1.0 and results["eval_samples"] == 6
    assert results["train_samples"] == 24
    lines = (out / "SST-2.tsv").read_text().splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == 5
    assert [line.split("\t")[0] for line in lines[1:]] == ["0", "1", "2", "3"]
    assert all(line.split("\t")[1] in ("0", "1") for line in lines[1:])
    from transformers import AutoConfig

    assert AutoConfig.from_pretrained(out).id2label == {0: "negative", 1: "positive"}
    # the reported accuracy and the submitted labels are the fine-tuned checkpoint's own predictions
    dev_pred, test_pred = _predict(out, TEXTS), _predict(out, TEXTS[:4])
    assert results["eval_accuracy"] == pytest.approx(np.mean(dev_pred == [int(i % 2 == 0) for i in range(6)]))
    assert [line.split("\t")[1] for line in lines[1:]] == [str(p) for p in test_pred]
    # the fine-tuned 2-label checkpoint cannot be fine-tuned on STS-B (1 output) without re-initialising its head
    with pytest.raises(BertologyError, match="--ignore_mismatched_sizes"):
        main(
            _run_args(
                str(out),
                tmp_path / "o2",
                "--task_name",
                "stsb",
                "--train_file",
                str(_stsb_csv(tmp_path)),
                "--do_train",
            )
        )


def _predict(model_dir: Path, texts: list[str]) -> np.ndarray:
    """Class ids from the saved checkpoint, with plain transformers (one padded batch)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    with torch.no_grad():
        logits = model(**tokenizer(texts, padding=True, truncation=True, max_length=32, return_tensors="pt")).logits
    return logits.argmax(-1).numpy()


def _readme_glue_line(repo: Path) -> list[str]:
    """The variables the README's one `make glue` line sets (none of those a test gives itself)."""
    import shlex

    lines = [line for line in (repo / "README.md").read_text().splitlines() if line.startswith("make glue")]
    assert len(lines) == 1, lines
    written = shlex.split(lines[0], comments=True)[1:]
    assert all(arg.split("=")[0] not in ("MODEL", "GLUE_OUTPUT_DIR") for arg in written), written
    return written


def _make_glue(repo: Path, *variables: str, dry_run: bool = False, timeout: int = 60):
    import subprocess
    import sys

    # `-o .venv/.installed`, PY: this interpreter, without re-checking the install (it is the one running the tests)
    command = ["make", "-s", "-C", str(repo), "-o", ".venv/.installed", f"PY={sys.executable}", *(["-n"] * dry_run)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(repo / "src"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run([*command, "glue", *variables], capture_output=True, text=True, env=env, timeout=timeout)


def test_the_readme_glue_line_is_a_run_of_the_real_data(shared_data):
    """The README's `make glue` line expands to a `bertology glue` command whose flags parse, whose data folder (the
    Makefile's `DATA_DIR`) is the real SST-2 beside the checkout, and which takes the line's `GLUE_ARGS`."""
    import shlex

    repo = Path(__file__).resolve().parents[1]
    done = _make_glue(repo, *_readme_glue_line(repo), "MODEL=some-model", dry_run=True)
    assert done.returncode == 0, done.stderr
    words = shlex.split(done.stdout.replace("\\\n", " "))
    flags = words[words.index("glue") + 1 :]
    model_args, data_args, training_args = parse_args(flags)
    assert model_args.model_name_or_path == "some-model" and data_args.task_name == "sst2"
    assert (repo / data_args.data_dir).resolve() == (shared_data / "glue" / "SST-2").resolve()
    assert data_args.max_train_samples == 2000 and training_args.num_train_epochs == 3


@pytest.mark.slow
def test_the_readme_glue_line_runs_as_written(shared_data, tmp_path):
    """The README's `make glue` line run as written, with only `MODEL` (a tiny BERT of 128 positions instead of
    `make pretrain`'s) and the folder given: 2,000 SST-2 examples for 3 epochs, then the 872 dev examples."""
    from transformers import BertConfig, BertForPreTraining, BertTokenizer

    repo = Path(__file__).resolve().parents[1]
    torch.manual_seed(0)
    model = tmp_path / "tiny-bert"
    tokenizer = BertTokenizer().train_new_from_iterator(TEXTS * 5, vocab_size=200)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=20, max_position_embeddings=128)  # fmt: skip
    BertForPreTraining(config).save_pretrained(model)
    tokenizer.save_pretrained(model)
    out = tmp_path / "glue"
    done = _make_glue(repo, *_readme_glue_line(repo), f"MODEL={model}", f"GLUE_OUTPUT_DIR={out}", timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((out / "all_results.json").read_text())
    assert results["train_samples"] == 2000 and results["epoch"] == 3.0 and results["eval_samples"] == 872


def test_layerwise_decay_zero_trains_only_the_head(tiny_model, tmp_path):
    """decay**(L + 2 - depth) with decay 0 leaves only depth L + 2 (pooler, classifier) a learning rate: the run must
    leave embeddings and encoder exactly as they were, while decay 1 (every depth at the full lr) moves them."""
    from safetensors.torch import load_file

    data = _sst2_folder(tmp_path / "SST-2")
    before = load_file(str(Path(tiny_model) / "model.safetensors"))
    moved = {}
    for decay in ("0.0", "1.0"):
        out = tmp_path / f"decay-{decay}"
        assert main(_run_args(tiny_model, out, "--task_name", "sst2", "--data_dir", str(data), "--do_train",
                              "--learning_rate", "1e-2", "--layerwise_lr_decay", decay)) == 0  # fmt: skip
        after = load_file(str(out / "model.safetensors"))
        body = [k for k in after if k.startswith(("bert.embeddings.", "bert.encoder."))]
        assert len(body) > 20 and all(k in before for k in body)
        moved[decay] = [k for k in body if not torch.equal(after[k], before[k])]
        assert not torch.equal(after["bert.pooler.dense.weight"], before["bert.pooler.dense.weight"])
    assert moved["0.0"] == []
    assert len(moved["1.0"]) > 20


def _stsb_csv(tmp_path: Path) -> Path:
    return _write(tmp_path / "stsb.csv", ["sentence1,sentence2,label", "a b,a b,5.0", "a,b,0.5"])


def test_smoke_stsb_regression_with_layerwise_decay(tiny_model, tmp_path):
    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"
    rows = [f"{i}\tg\tf\t2012\t{i}\tnone\tnone\t{a}\t{b}\t{(i * 0.7) % 5:.2f}" for i, (a, b) in
            enumerate(zip(TEXTS * 2, TEXTS[1:] * 2 + TEXTS[:2]))]  # fmt: skip
    data = tmp_path / "STS-B"
    _write(data / "train.tsv", [header] + rows)
    _write(data / "dev.tsv", [header] + rows[:6])
    out = tmp_path / "out"
    assert main(_run_args(tiny_model, out, "--task_name", "stsb", "--data_dir", str(data),
                          "--layerwise_lr_decay", "0.8")) == 0  # fmt: skip
    results = json.loads((out / "all_results.json").read_text())
    assert {"eval_pearson", "eval_spearmanr", "eval_combined_score", "train_loss"} <= set(results)


def test_task_all_collects_table(tiny_model, tmp_path, capsys):
    _sst2_folder(tmp_path / "glue" / "SST-2")
    wnli = ["index\tsentence1\tsentence2\tlabel"] + [f"{i}\t{t}\t{t}\t{i % 2}" for i, t in enumerate(TEXTS)]
    _write(tmp_path / "glue" / "WNLI" / "train.tsv", wnli)
    _write(tmp_path / "glue" / "WNLI" / "dev.tsv", wnli)
    out = tmp_path / "out"
    assert main(_run_args(tiny_model, out, "--task_name", "all", "--data_dir", str(tmp_path / "glue"))) == 0
    assert (out / "sst2" / "all_results.json").is_file() and (out / "wnli" / "all_results.json").is_file()
    printed = capsys.readouterr().out
    assert "| sst2 | accuracy" in printed and "| wnli | accuracy" in printed and "1 tasks" in printed


def test_task_all_goes_on_past_a_task_without_its_train_split(tiny_model, tmp_path, capsys):
    """`bertology glue --task_name all --data_dir glue_data` where one task's folder lacks `train.tsv`: the tasks
    after it still run, the table of those that ran is written, and the error line names the task (exit 2)."""
    from hf_bertology.cli import main as cli_main

    _sst2_folder(tmp_path / "glue" / "SST-2")
    qnli = ["index\tquestion\tsentence\tlabel"] + [f"{i}\t{t}\t{t}\tentailment" for i, t in enumerate(TEXTS)]
    _write(tmp_path / "glue" / "QNLI" / "dev.tsv", qnli)  # no train.tsv
    wnli = ["index\tsentence1\tsentence2\tlabel"] + [f"{i}\t{t}\t{t}\t{i % 2}" for i, t in enumerate(TEXTS)]
    _write(tmp_path / "glue" / "WNLI" / "train.tsv", wnli)  # runs after qnli
    _write(tmp_path / "glue" / "WNLI" / "dev.tsv", wnli)
    out = tmp_path / "out"
    code = cli_main(["glue", *_run_args(tiny_model, out, "--task_name", "all", "--data_dir", str(tmp_path / "glue"))])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1].startswith("error: qnli: ") and "train split" in err[-1], err[-1]
    assert (out / "sst2" / "all_results.json").is_file() and (out / "wnli" / "all_results.json").is_file()
    table = (out / "glue_results.md").read_text()
    assert "| sst2 | accuracy" in table and "| wnli | accuracy" in table and "qnli" not in table


def test_cli_error_is_one_line(tiny_model, tmp_path, capsys):
    from hf_bertology.cli import main as cli_main

    code = cli_main(["glue", "--model_name_or_path", tiny_model, "--task_name", "cola",
                     "--data_dir", str(tmp_path / "missing"), "--output_dir", str(tmp_path / "o")])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("error: GLUE data folder not found")


def test_a_joint_run_folder_fine_tunes_its_discriminator(tiny_model, tmp_path, capfd):
    """Issue 31: the folder of a two-network run (a model_type plain transformers refuses) is fine-tuned through its
    discriminator/, with a log line saying so; a joint checkpoint without one (a Trainer checkpoint-N) is one error
    that says how to write it."""
    from transformers import AutoTokenizer

    import hf_bertology as hb
    from hf_bertology.joint import write_part_folders

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    torch.manual_seed(0)
    recipe = hb.get_recipe("electra-tiny", vocab_size=len(tokenizer))
    model = recipe.build_model()
    joint = tmp_path / "electra"
    model.save_pretrained(joint)  # what the Trainer writes into checkpoint-N: no part folders
    tokenizer.save_pretrained(joint)
    data = _sst2_folder(tmp_path / "SST-2")
    with pytest.raises(BertologyError, match="no discriminator/ folder.*bertology export --part discriminator"):
        main(_run_args(str(joint), tmp_path / "o1", "--task_name", "sst2", "--data_dir", str(data), "--do_train"))
    write_part_folders(model, recipe.networks, tokenizer, joint)
    capfd.readouterr()
    assert main(_run_args(str(joint), tmp_path / "o2", "--task_name", "sst2", "--data_dir", str(data),
                          "--do_train", "--do_eval")) == 0  # fmt: skip
    assert f"fine-tuning its discriminator, {joint / 'discriminator'}" in capfd.readouterr().err
    for into in (joint, joint / "discriminator"):  # never over the joint model or the discriminator it reads
        with pytest.raises(BertologyError, match="--output_dir is the model it reads"):
            main(_run_args(str(joint), into, "--task_name", "sst2", "--data_dir", str(data), "--do_train"))
    config = json.loads((tmp_path / "o2" / "config.json").read_text())
    assert config["model_type"] == "electra" and config["architectures"] == ["ElectraForSequenceClassification"]


def test_checkpoint_without_tokenizer(tiny_model, tmp_path):
    from transformers import AutoModelForSequenceClassification

    no_tok = tmp_path / "model-only"
    AutoModelForSequenceClassification.from_pretrained(tiny_model).save_pretrained(no_tok)
    data = _sst2_folder(tmp_path / "SST-2")
    with pytest.raises(BertologyError, match="has no tokenizer"):
        main(_run_args(str(no_tok), tmp_path / "o", "--task_name", "sst2", "--data_dir", str(data)))


def test_hub_offline_is_one_error_line(tmp_path):
    import os
    import subprocess
    import sys

    import hf_bertology.cli

    # datasets/huggingface_hub read the offline switches at import time: run the command in a fresh process
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_HOME=str(tmp_path / "hf"))
    env["PYTHONPATH"] = str(Path(hf_bertology.cli.__file__).resolve().parents[1])  # the package under test
    argv = ["glue", "--model_name_or_path", "unused", "--task_name", "sst2", "--dataset_name", "nyu-mll/glue"]
    proc = subprocess.run(
        [sys.executable, "-m", "hf_bertology", *argv, "--output_dir", str(tmp_path / "o")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "could not load nyu-mll/glue/sst2 from the Hub" in errors[0]
    assert "Traceback" not in proc.stderr
