"""`bertology pretrain` end to end: smoke runs, the Hub-format folder, resume, JSON args, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from hf_bertology.cli import main as cli_main
from hf_bertology.training.pretrain import main
from platform_support import assert_train_loss_is_the_logged_mean

FAST = ["--max_steps", "3", "--per_device_train_batch_size", "4", "--logging_steps", "1", "--disable_tqdm", "true"]


@pytest.mark.parametrize("recipe", ["bert-tiny", "roberta-tiny"])
def test_pretrain_smoke(tmp_path, corpus_file, recipe):
    out = tmp_path / recipe
    metrics = main(
        ["--recipe", recipe, "--train_file", str(corpus_file), "--output_dir", str(out), "--vocab_size", "300", *FAST]
    )
    assert metrics["tokens_seen"] > 0
    config = json.loads((out / "config.json").read_text())
    variant = recipe.split("-")[0]
    assert config["model_type"] == variant and config["auto_map"]
    assert (out / "model.safetensors").exists() and not list(out.glob("*.bin"))
    assert (out / f"modeling_{variant}.py").exists()
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert type(tokenizer).__name__ == {"bert": "BertTokenizer", "roberta": "RobertaTokenizer"}[variant]
    assert len(tokenizer) == config["vocab_size"]
    card = (out / "README.md").read_text()
    assert recipe in card and "| steps | 3 |" in card and "mlm_loss" in card
    logs = json.loads((out / "checkpoint-3" / "trainer_state.json").read_text())["log_history"]
    assert "mlm_loss" in logs[0] and "mlm_accuracy" in logs[0]
    assert_train_loss_is_the_logged_mean(metrics, logs)
    if variant == "bert":
        assert "nsp_loss" in logs[0]


def test_resume_and_json_arguments(tmp_path, corpus_file):
    out = tmp_path / "run"
    args = {
        "recipe": "bert-tiny",
        "train_file": [str(corpus_file)],
        "output_dir": str(out),
        "vocab_size": 300,
        "max_steps": 4,
        "save_steps": 2,
        "per_device_train_batch_size": 4,
        "disable_tqdm": True,
        "learning_rate": 3e-3,
    }
    (tmp_path / "args.json").write_text(json.dumps(args))
    main([str(tmp_path / "args.json")])
    state = json.loads((out / "checkpoint-4" / "trainer_state.json").read_text())
    assert state["global_step"] == 4
    resumed = main([
        "--recipe", "bert-tiny", "--train_file", str(corpus_file), "--output_dir", str(out), "--max_steps", "6",
        "--per_device_train_batch_size", "4", "--resume_from_checkpoint", str(out / "checkpoint-4"),
        "--tokenizer_name", str(out), "--save_steps", "2", "--disable_tqdm", "true",
    ])  # fmt: skip
    assert resumed["train_loss"] > 0
    assert json.loads((out / "checkpoint-6" / "trainer_state.json").read_text())["global_step"] == 6


def test_cli_subprocess(tmp_path, corpus_file):
    out = tmp_path / "cli"
    run = subprocess.run(
        [sys.executable, "-m", "hf_bertology", "pretrain", "--recipe", "roberta-tiny", "--train_file", str(corpus_file),
         "--output_dir", str(out), "--vocab_size", "300", *FAST],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert (out / "model.safetensors").exists()


def error_of(capsys, argv) -> str:
    assert cli_main(["pretrain", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    return lines[0]


def test_bad_input_gives_one_clear_line(tmp_path, capsys, corpus_file):
    base = ["--recipe", "bert-tiny", "--output_dir", str(tmp_path / "o"), "--vocab_size", "300", *FAST]
    assert "not found" in error_of(capsys, ["--train_file", str(tmp_path / "missing.txt"), *base])
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n\n\t\n")
    assert "empty" in error_of(capsys, ["--train_file", str(empty), *base])
    latin = tmp_path / "latin.txt"
    latin.write_bytes("Ol\xe9 ol\xe9.\n".encode("latin-1"))
    assert "latin.txt is not valid UTF-8: byte 2" in error_of(capsys, ["--train_file", str(latin), *base])
    binary = tmp_path / "weights.bin"
    binary.write_bytes(bytes(range(256)) * 10)
    assert "binary" in error_of(capsys, ["--train_file", str(binary), *base])
    too_long = error_of(capsys, ["--train_file", str(corpus_file), *base, "--max_seq_length", "4096"])
    assert "max_seq_length 4096 exceeds" in too_long
    assert "unknown recipe" in error_of(
        capsys, ["--train_file", str(corpus_file), "--recipe", "bert-huge", "--output_dir", "x"]
    )


def test_tokenizer_without_mask_token(tmp_path, capsys, corpus_file, bert_tokenizer):
    from transformers import PreTrainedTokenizerFast

    # a WordPiece tokenizer saved without any mask token (as GPT-style tokenizers are)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bert_tokenizer.backend_tokenizer, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
        sep_token="[SEP]",
    )  # fmt: skip
    tokenizer.save_pretrained(tmp_path / "tok")
    assert AutoTokenizer.from_pretrained(tmp_path / "tok").mask_token is None
    line = error_of(
        capsys,
        ["--recipe", "bert-tiny", "--train_file", str(corpus_file), "--tokenizer_name", str(tmp_path / "tok"),
         "--output_dir", str(tmp_path / "o"), *FAST],
    )  # fmt: skip
    assert "no mask token" in line


def test_offline_hub_dataset_says_pass_train_file(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    line = error_of(
        capsys,
        ["--recipe", "bert-tiny", "--dataset_name", "wikitext", "--dataset_config_name", "wikitext-2-raw-v1",
         "--output_dir", str(tmp_path / "o"), *FAST],
    )  # fmt: skip
    assert "--train_file" in line and "wikitext" in line


# one network, and a joint run (two networks: its folder has a model_type of its own, issue 31)
@pytest.mark.parametrize(
    "recipe,model_type", [("roberta-tiny", "roberta"), ("electra-tiny@roberta", "bertology-rtd-roberta-joint")]
)
def test_continue_from_checkpoint_without_recipe(tmp_path, corpus_file, recipe, model_type):
    """`--model_name_or_path` alone continues the saved run: its weights (with lr 0 they come out unchanged), its
    tokenizer, and its recipe from the config (class, objective settings); a normal step then trains on."""
    first = tmp_path / "first"
    main(
        [
            "--recipe",
            recipe,
            "--train_file",
            str(corpus_file),
            "--output_dir",
            str(first),
            "--vocab_size",
            "300",
            *FAST,
        ]
    )
    from safetensors.torch import load_file

    def continued(name: str, *flags: str) -> tuple[dict, Path]:
        out = tmp_path / name
        argv = ["--model_name_or_path", str(first), "--train_file", str(corpus_file), "--output_dir", str(out)]
        return main([*argv, *FAST, *flags]), out

    _, frozen = continued("frozen", "--learning_rate", "0", "--weight_decay", "0")
    before, after = load_file(first / "model.safetensors"), load_file(frozen / "model.safetensors")
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    assert (frozen / "tokenizer.json").read_text() == (first / "tokenizer.json").read_text()
    first_config = json.loads((first / "config.json").read_text())
    config = json.loads((frozen / "config.json").read_text())
    assert config["model_type"] == first_config["model_type"] == model_type
    assert config["architectures"] == first_config["architectures"]
    assert {k: v for k, v in config.items() if k != "transformers_version"} == {
        k: v for k, v in first_config.items() if k != "transformers_version"
    }
    metrics, second = continued("second")
    assert metrics["train_loss"] > 0
    trained = load_file(second / "model.safetensors")
    assert any(not torch.equal(before[k], trained[k]) for k in before)


def test_saved_tokenizer_knows_the_models_length(tmp_path, corpus_file):
    """Downstream `truncation=True` (GLUE's default length is 128) must fit a 64-position tiny model."""
    out = tmp_path / "tiny"
    main(
        [
            "--recipe",
            "roberta-tiny",
            "--train_file",
            str(corpus_file),
            "--output_dir",
            str(out),
            "--vocab_size",
            "300",
            *FAST,
        ]
    )
    tokenizer = AutoTokenizer.from_pretrained(out)
    config = json.loads((out / "config.json").read_text())
    assert tokenizer.model_max_length == config["max_position_embeddings"] - config["pad_token_id"] - 1 == 64


def test_model_card_of_a_run_shorter_than_its_logging_steps(tmp_path, corpus_file):
    """The README's 10-step runs log nothing at `logging_steps` 50: the card still shows a loss (the run's mean)."""
    out = tmp_path / "short"
    main(["--recipe", "bert-tiny", "--train_file", str(corpus_file), "--output_dir", str(out), "--max_steps", "2"])
    card = (out / "README.md").read_text()
    (row,) = [line for line in card.splitlines() if line.startswith("| final losses |")]
    assert "train_loss (mean) " in row and "–" not in row
    assert "](https://github.com/)" not in card


def test_do_eval_adds_evaluation_to_training(tmp_path, corpus_file):
    """The README's command with `--do_eval` added trains, then reports the `eval_*` losses (it used to evaluate the
    untrained model and write it as the run's folder); `--do_train false --do_eval` evaluates only."""
    argv = ["--recipe", "bert-tiny", "--train_file", str(corpus_file), "--vocab_size", "300", *FAST, "--do_eval"]
    metrics = main([*argv, "--output_dir", str(tmp_path / "both")])
    assert metrics["tokens_seen"] > 0 and metrics["train_loss"] > 0
    assert metrics["eval_mlm_loss"] > 0 and metrics["eval_nsp_loss"] > 0 and metrics["perplexity"] > 1
    assert "| steps | 3 |" in (tmp_path / "both" / "README.md").read_text()
    only = main([*argv, "--output_dir", str(tmp_path / "only"), "--do_train", "false"])
    assert "train_loss" not in only and only["tokens_seen"] == 0 and only["eval_mlm_loss"] > 0


def test_readme_make_pretrain_line_runs_offline_without_shared(tmp_path):
    """The README's first command, `make pretrain`, as written, on a copy of the checkout that has no `../shared`
    beside it and no network (`HF_HUB_OFFLINE`), with only the steps, batch, evaluation size and folder made small:
    it reads the embedded WikiText-2 (decompressed into a fresh cache), evaluates before and after, writes a folder
    whose `discriminator/` plain `AutoModel` loads, and the same line run again goes on (`--resume_from_checkpoint last`)."""
    import shlex
    import shutil

    from transformers import AutoModel

    repo = Path(__file__).resolve().parents[1]
    lines = [line for line in (repo / "README.md").read_text().splitlines() if line.startswith("make pretrain")]
    assert lines[0] == "make pretrain", lines
    copy = tmp_path / "clone" / "hf_bertology"  # ../shared of this copy does not exist
    tracked = subprocess.run(["git", "-C", str(repo), "ls-files"], capture_output=True, text=True, check=True)
    for name in tracked.stdout.splitlines():
        if (repo / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(repo / name, copy / name)
    assert not (copy.parent / "shared").exists()
    out = tmp_path / "run"
    env = {
        **os.environ,
        "PYTHONPATH": str(copy / "src"),  # the copy's package, not the checkout's
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_BERTOLOGY_CACHE": str(tmp_path / "cache"),
    }
    # `-o .venv/.installed`, PY: this interpreter, without re-checking the install (it is the one running the tests)
    command = ["make", "-s", "-C", str(copy), "-o", ".venv/.installed", f"PY={sys.executable}"]
    small = ["BATCH_SIZE=4", f"OUTPUT_DIR={out}", "PRETRAIN_ARGS=--max_eval_samples 16"]
    for steps in (2, 3, 3):  # a run, the same line with more steps (goes on), then again (nothing left to train)
        done = subprocess.run(
            [*command, *shlex.split(lines[0])[1:], *small, f"MAX_STEPS={steps}"],
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert (out / "model.safetensors").is_file() and "electra-mini" in (out / "README.md").read_text()
        assert (
            "WikiText-2" in (out / "README.md").read_text()
            and f"| steps | {steps} |" in (out / "README.md").read_text()
        )
        learned = [line for line in done.stderr.splitlines() if "untrained" in line and "-> trained" in line]
        assert any("mlm_accuracy" in line for line in learned) != ("nothing to train" in done.stderr), done.stderr[
            -3000:
        ]
        if learned:  # the last lines say whether it learned: after the folder is written, the AUC and accuracy last
            said = [line for line in done.stderr.splitlines() if " INFO hf_bertology: " in line]
            assert said[-2:] == learned[-2:] and "disc_auc" in said[-2] and "rtd_accuracy" in said[-1], said[-6:]
    assert (tmp_path / "cache" / "wikitext-2-raw" / "wiki.test.raw").is_file()
    results = json.loads((out / "all_results.json").read_text())
    assert results["eval_at_start"]["eval_mlm_loss"] > 0 and results["eval_mlm_loss"] > 0
    assert type(AutoModel.from_pretrained(out / "discriminator")).__name__ == "ElectraModel"


def test_the_learning_lines_show_what_a_constant_guess_scores(monkeypatch):
    """Issue 40, item 4: `make pretrain` ended with "rtd_accuracy 0.46 -> 0.86" while always guessing "original"
    scores 0.85; the line now carries that guess's score (1 - the replaced fraction) and the AUC has its own line."""
    from hf_bertology.training import run_trainer

    said = []
    monkeypatch.setattr(run_trainer.logger, "info", lambda message, *args: said.append(message % args))
    before = {"eval_rtd_accuracy": 0.46, "eval_replaced_fraction": 0.1512, "eval_disc_auc": 0.5, "eval_loss": 9.0}
    after = {"eval_rtd_accuracy": 0.86, "eval_replaced_fraction": 0.1456, "eval_disc_auc": 0.71, "eval_loss": 7.0}
    run_trainer.log_learning(before, after)
    assert said == [  # the losses first: the last lines are the accuracy and AUC (issue 52, item 3)
        "held-out loss                     untrained   9.0000 -> trained   7.0000",
        "held-out disc_auc                 untrained   0.5000 -> trained   0.7100",
        "held-out rtd_accuracy             untrained   0.4600 -> trained   0.8600  (a constant guess, always "
        "'original': 0.8488 -> 0.8544)",
    ]


def test_the_cards_datasets_field_names_a_hub_dataset_or_nothing(tmp_path, corpus_file):
    """Issue 40, item 5: `--dataset_name DIR` (a local folder) put its path in the card's `datasets:`, and the
    embedded WikiText-2 got none; now a path gets none and the default corpus its Hub id (`wikitext`)."""
    from hf_bertology.training.arguments import DataArguments
    from hf_bertology.training.corpora import card_dataset, describe_corpus

    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "train.txt").write_text(corpus_file.read_text())
    out = tmp_path / "out"
    main(
        [
            "--recipe",
            "bert-tiny",
            "--dataset_name",
            str(folder),
            "--output_dir",
            str(out),
            "--vocab_size",
            "300",
            *FAST,
        ]
    )
    header = (out / "README.md").read_text().split("---")[1]
    assert "datasets:" not in header and str(folder) not in header, header
    assert card_dataset(DataArguments()) == "wikitext"
    assert "`wikitext` (wikitext-2-raw-v1)" in describe_corpus(DataArguments())
    assert card_dataset(DataArguments(dataset_name="ag_news")) == "ag_news"
    assert card_dataset(DataArguments(train_file=[str(corpus_file)])) is None
