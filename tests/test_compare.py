"""`bertology compare`: FLOP accounting against a hand count, the budget callback, and a tiny end-to-end run that
writes the report, results and plots and resumes without redoing finished work."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from conftest import WORDS, make_documents, write_corpus
from hf_bertology.recipes import get_recipe
from hf_bertology.training.budget import FlopCounter, budget_schedule
from hf_bertology.utils import BertologyError

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


# --------------------------------------------------------------------------------------------------------------------
# FLOP accounting
# --------------------------------------------------------------------------------------------------------------------
def _bert_batch(seq_len: int) -> dict[str, torch.Tensor]:
    """Two sequences with 8 and 5 real tokens (padded to `seq_len`), 3 predicted positions, NSP labels."""
    input_ids = torch.zeros(2, seq_len, dtype=torch.long)
    input_ids[0, :8] = torch.arange(5, 13)
    input_ids[1, :5] = torch.arange(20, 25)
    attention_mask = (input_ids != 0).long()
    labels = torch.full_like(input_ids, -100)
    labels[0, 2], labels[0, 6], labels[1, 3] = 7, 11, 23
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "token_type_ids": torch.zeros_like(input_ids),
        "labels": labels,
        "next_sentence_label": torch.tensor([0, 1]),
    }


def test_flop_count_matches_hand_count_for_bert_tiny():
    torch.manual_seed(0)
    model = get_recipe("bert-tiny", vocab_size=100).build_model()  # L=2, H=32, FFN=37, V=100
    # Hand count (multiply-accumulates of the forward pass), the last layer's feed-forward on the rows a loss reads
    # only (`models/last_layer.py`: 3 predicted positions + 2 first tokens for NSP = 5 rows):
    #   attention, per real token: 2 layers × Q,K,V,O 4·32·32 = 8,192 × 13 real tokens (8 + 5; no padding) = 106,496
    #   feed-forward 32·37 + 37·32 = 2,368: layer 1 on 13 tokens, layer 2 on 5 rows = 2,368 × 18      =  42,624
    #   sparse MLM head, per predicted position: transform 32·32 + decoder 32·100 = 4,224 × 3    =  12,672
    #   pooler 32·32 + NSP 32·2 = 1,088 per sequence × 2                                           =   2,176
    #   BertModel's own pooler on the subset's first row (its output unread)                      =   1,024
    #   matmul MACs 164,992 → forward FLOPs 2 × 164,992                                            = 329,984
    #   attention (QKᵀ and A·V): 2 layers × 4 · 32 · (8² + 5²) = 2 × 128 × 89                      =  22,784
    #   forward 352,768; training (forward + backward = 3 × forward)                               = 1,058,304
    expected = 3 * 2 * (2 * 4 * 32 * 32 * 13 + 2 * 32 * 37 * (13 + 5) + (32 * 32 + 32 * 100) * 3)
    expected += 3 * 2 * ((32 * 32 + 32 * 2) * 2 + 32 * 32)
    expected += 3 * 2 * 4 * 32 * (8**2 + 5**2)
    assert expected == 1_058_304
    for seq_len in (8, 12):  # the same real tokens, more padding: the same count
        counter = FlopCounter(model)
        with counter:
            model(**_bert_batch(seq_len)).loss.backward()
        assert counter.training_flops == expected
        assert (counter.tokens, counter.predicted, counter.sequences) == (13, 3, 2)
    # detached: nothing more is counted
    model(**_bert_batch(8))
    assert counter.training_flops == expected


def test_flop_count_shared_layers_and_einsum_weights():
    """A layer applied twice counts twice (ALBERT); a module's own ≥2-dim weights count once per input row (XLNet's
    einsum q/k/v), and a weight named `q` marks an attention layer of width heads × head size."""

    class EinsumAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q = nn.Parameter(torch.randn(8, 2, 4))  # (d_model, heads, head size)
            self.o = nn.Parameter(torch.randn(8, 2, 4))

        def forward(self, h):  # h: (T, B, d_model)
            q = torch.einsum("ibh,hnd->ibnd", h, self.q)
            return torch.einsum("ibnd,hnd->ibh", q, self.o)

    class Shared(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(8, 8)
            self.attn = EinsumAttention()
            self.embed = nn.Embedding(10, 8)

        def forward(self, input_ids, attention_mask=None):
            h = self.embed(input_ids)  # (B, T, 8)
            h = self.layer(self.layer(h))  # the same weights twice
            return self.attn(h.transpose(0, 1))

    model = Shared()
    ids = torch.tensor([[1, 2, 3], [4, 5, 0]])
    counter = FlopCounter(model)
    with counter:
        model(input_ids=ids, attention_mask=(ids != 0).long())
    real = 5  # 3 + 2 real tokens
    linear = 2 * 2 * real * 8 * 8  # two calls of an 8×8 matmul
    einsum = 2 * real * (8 * 2 * 4) * 2  # q and o, 64 MACs each per row
    attention = 4 * (2 * 4) * (3**2 + 2**2)
    assert counter.forward_flops == linear + einsum + attention


def test_budget_counts_training_only_not_evaluation(corpus_file, tmp_path):
    """`bertology compare --pretrain_args "--do_eval --eval_strategy steps ..."`: evaluations run forward passes
    (no grad, eval mode) between the steps; the budget spends nothing on them, so a run with evaluations gets the
    same FLOPs, tokens, sequences and predicted positions, step for step, as one without."""
    from hf_bertology.training import pretrain
    from hf_bertology.training.budget import ComputeBudgetCallback

    spent = {}
    # both hold the same examples out (`--do_eval`); one evaluates every 2 steps, the other after training only
    for name, extra in {"plain": [], "evaluating": ["--eval_strategy", "steps", "--eval_steps", "2"]}.items():
        budget = ComputeBudgetCallback(budget_flops=1e18, schedule=False, progress=False)
        argv = ["--recipe", "bert-tiny", "--train_file", str(corpus_file), "--output_dir", str(tmp_path / name)]
        argv += ["--max_steps", "4", "--seed", "1", "--save_strategy", "no", "--do_train", "--do_eval"]
        metrics = pretrain.main([*argv, *extra], callbacks=[budget])
        spent[name] = {k: v for k, v in budget.summary().items() if k != "seconds"}
    assert "eval_loss" in metrics
    assert spent["evaluating"] == spent["plain"] and spent["plain"]["flops"] > 0


def test_budget_schedule_warms_up_then_decays_to_zero():
    assert budget_schedule(0.0, 0.1) == 0.0
    assert budget_schedule(0.05, 0.1) == pytest.approx(0.5)
    assert budget_schedule(0.1, 0.1) == pytest.approx(1.0)
    assert budget_schedule(0.55, 0.1) == pytest.approx(0.5)
    assert budget_schedule(1.0, 0.1) == 0.0
    assert budget_schedule(1.3, 0.1) == 0.0


# --------------------------------------------------------------------------------------------------------------------
# End to end
# --------------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def compare_inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("compare")
    corpus = write_corpus(root / "corpus.txt", make_documents(40, seed=3))
    rng = random.Random(0)
    sst2 = root / "glue" / "SST-2"
    sst2.mkdir(parents=True)
    for split, rows in (("train", 40), ("dev", 16)):
        lines = ["sentence\tlabel"]
        for _ in range(rows):
            label = rng.randint(0, 1)
            words = [rng.choice(WORDS) for _ in range(5)] + (["good"] if label else ["bad"])
            lines.append(" ".join(words) + f"\t{label}")
        (sst2 / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    return corpus, root / "glue"


def _argv(corpus, glue_dir, out, budget: str = "2e8") -> list[str]:
    return [
        "--recipes", "bert-tiny,roberta-tiny",
        "--train_file", str(corpus),
        "--budget_flops", budget,
        "--glue_tasks", "sst2",
        "--glue_data_dir", str(glue_dir),
        "--output_dir", str(out),
        "--vocab_size", "300",
        "--logging_steps", "1",
        "--glue_epochs", "1",
        "--pretrain_args", "--per_device_train_batch_size 4",
    ]  # fmt: skip


def test_compare_end_to_end_and_resume(compare_inputs, tmp_path, monkeypatch):
    from hf_bertology.evaluation import compare
    from hf_bertology.evaluation.glue import run as glue_run
    from hf_bertology.training import pretrain

    corpus, glue_dir = compare_inputs
    out = tmp_path / "cmp"
    results = compare.main(_argv(corpus, glue_dir, out))

    # report, results, plots
    report = (out / "report.md").read_text()
    for name in ("bert-tiny", "roberta-tiny", "random-init (bert-tiny arch)", "sst2", "GLUE avg", "train FLOPs"):
        assert name in report
    saved = json.loads((out / "results.json").read_text())
    assert list(saved["models"]) == ["bert-tiny", "roberta-tiny", "random-init"]
    for png in ("loss_vs_flops.png", "glue_vs_flops.png"):
        data = (out / png).read_bytes()
        assert data[:8] == PNG_SIGNATURE and len(data) > 1000

    for name in ("bert-tiny", "roberta-tiny"):
        pre = saved["models"][name]["pretrain"]
        # stopped at the first optimizer step that reached the budget (logging every step gives each step's FLOPs)
        flops = [point["flops"] for point in pre["curve"]]
        assert flops[-1] == pre["flops"] and pre["steps"] == len(flops)
        assert flops[-2] < 2e8 <= flops[-1]
        assert pre["tokens"] > 0 and pre["final_losses"]["loss"] > 0
        # the learning rate follows the budget: 0 at the start, warmup, then decay
        rates = [point["learning_rate"] for point in pre["curve"]]
        assert rates[0] == 0.0 and max(rates) > rates[-1] > 0.0
        assert 0.0 <= saved["models"][name]["glue"]["sst2"]["eval_accuracy"] <= 1.0
        # the scores are those of the fine-tuning run's own all_results.json, averaged as the GLUE table does
        finetuned = json.loads((out / "glue" / name / "sst2" / "all_results.json").read_text())
        assert saved["models"][name]["glue"]["sst2"] == finetuned
        assert saved["models"][name]["glue_average"] == pytest.approx(finetuned["eval_accuracy"])
    assert saved["models"]["random-init"]["pretrain"] is None
    # issue 40: the report names the folder each fine-tuning started from, and the floor's is not a pretrained one
    started = {name: saved["models"][name]["finetuned_from"] for name in saved["models"]}
    assert started == {name: str(out / "pretrain" / name) for name in saved["models"]}
    assert "Each fine-tuning started from: " + "; ".join(f"{n}, `{f}`" for n, f in started.items()) in report
    for name, folder in started.items():
        recorded = json.loads((out / "glue" / name / "sst2" / "compare_finetune.json").read_text())
        assert recorded[recorded.index("--model_name_or_path") + 1] == folder
    floor_weights = load_file(Path(started["random-init"]) / "model.safetensors")
    pretrained = load_file(Path(started["bert-tiny"]) / "model.safetensors")
    encoder = [k for k in pretrained if ".encoder." in k]
    assert encoder and not any(torch.equal(floor_weights[k], pretrained[k]) for k in encoder)
    floor = json.loads((out / "glue" / "random-init" / "sst2" / "all_results.json").read_text())
    assert saved["models"]["random-init"]["glue_average"] == pytest.approx(floor["eval_accuracy"])
    assert results["models"]["bert-tiny"]["glue_average"] == saved["models"]["bert-tiny"]["glue_average"]
    # the pretrained folder is a plain-transformers checkpoint
    assert (out / "pretrain" / "bert-tiny" / "model.safetensors").is_file()

    # resume: nothing is pretrained or fine-tuned again; the report is rebuilt from the saved results
    def refuse(*args, **kwargs):
        raise AssertionError("finished work was run again")

    real_glue_main = glue_run.main
    monkeypatch.setattr(pretrain, "main", refuse)
    monkeypatch.setattr(glue_run, "main", refuse)
    (out / "report.md").unlink()
    again = compare.main(_argv(corpus, glue_dir, out))
    assert (out / "report.md").read_text() == report
    assert again["models"]["roberta-tiny"]["glue"] == saved["models"]["roberta-tiny"]["glue"]

    # other settings refuse to mix with the finished runs: another budget, other fine-tuning settings
    with pytest.raises(BertologyError, match="other settings .*budget_flops=2"):
        compare.main(_argv(corpus, glue_dir, out, budget="4e8"))
    with pytest.raises(BertologyError, match="fine-tuned with other settings"):
        compare.main(_argv(corpus, glue_dir, out) + ["--glue_epochs", "2"])

    # a fine-tuning stopped during evaluation: the Trainer had written all_results.json with the training metrics
    # only, and the settings file (written after the run) is missing. That task alone is run again.
    task_dir = out / "glue" / "roberta-tiny" / "sst2"
    (task_dir / "compare_finetune.json").unlink()
    (task_dir / "all_results.json").write_text(json.dumps({"train_loss": 0.7}))
    ran = []
    monkeypatch.setattr(glue_run, "main", lambda argv: ran.append(argv) or real_glue_main(argv))
    resumed = compare.main(_argv(corpus, glue_dir, out))
    assert len(ran) == 1 and ran[0][ran[0].index("--output_dir") + 1] == str(task_dir)
    assert "eval_accuracy" in resumed["models"]["roberta-tiny"]["glue"]["sst2"]


def test_compare_resumes_an_interrupted_pretraining_where_it_stopped(compare_inputs, tmp_path, monkeypatch):
    """Killed mid-budget, a recipe goes on from its newest checkpoint with the FLOPs, tokens, curve and schedule it
    had spent; the result equals an uninterrupted run's."""
    from safetensors.torch import load_file

    from hf_bertology.evaluation import compare
    from hf_bertology.training.budget import ComputeBudgetCallback

    corpus, _ = compare_inputs
    tokenizer_dir = tmp_path / "tokenizer"  # one vocabulary for both runs (`tokenizers` breaks ties run to run)
    texts = [" ".join(doc) for doc in make_documents(40, seed=3)]
    get_recipe("roberta-tiny").train_tokenizer(texts, 300).save_pretrained(tokenizer_dir)

    def argv(out, budget="2e8"):
        return [
            "--recipes", "roberta-tiny", "--train_file", str(corpus), "--budget_flops", budget, "--glue_tasks", "",
            "--baseline", "none", "--output_dir", str(out), "--vocab_size", "300", "--logging_steps", "1",
            "--checkpoint_steps", "2",
            "--pretrain_args",  # one micro-batch a step: more than 5 steps in the budget
            f"--per_device_train_batch_size 4 --gradient_accumulation_steps 1 --tokenizer_name {tokenizer_dir}",
        ]  # fmt: skip

    reference = compare.main(argv(tmp_path / "ref"))["models"]["roberta-tiny"]["pretrain"]
    assert reference["steps"] > 5

    original = ComputeBudgetCallback.on_step_end

    def interrupt_at_step_5(self, args, state, control, **kwargs):
        if state.global_step == 5:  # checkpoint-4 is on disk; steps 5.. are lost with the process
            raise RuntimeError("simulated kill")
        return original(self, args, state, control, **kwargs)

    out = tmp_path / "cut"
    monkeypatch.setattr(ComputeBudgetCallback, "on_step_end", interrupt_at_step_5)
    with pytest.raises(RuntimeError, match="simulated kill"):
        compare.main(argv(out))
    monkeypatch.setattr(ComputeBudgetCallback, "on_step_end", original)
    assert (out / "pretrain" / "roberta-tiny" / "checkpoint-4").is_dir()
    with pytest.raises(BertologyError, match="unfinished pretraining run with other settings .*budget_flops"):
        compare.main(argv(out, budget="3e8"))

    resumed = compare.main(argv(out))["models"]["roberta-tiny"]["pretrain"]
    for key in ("steps", "flops", "tokens", "predicted_positions", "sequences"):
        assert resumed[key] == reference[key], key
    assert [p["step"] for p in resumed["curve"]] == [p["step"] for p in reference["curve"]]
    for got, want in zip(resumed["curve"], reference["curve"]):
        assert got["flops"] == want["flops"] and got["learning_rate"] == pytest.approx(want["learning_rate"])
        assert got["loss"] == pytest.approx(want["loss"], rel=1e-4)
    finished = out / "pretrain" / "roberta-tiny"
    assert not list(finished.glob("checkpoint-*")) and not (finished / compare.PRETRAIN_STARTED).exists()
    weights = load_file(finished / "model.safetensors")
    for name, tensor in load_file(tmp_path / "ref" / "pretrain" / "roberta-tiny" / "model.safetensors").items():
        torch.testing.assert_close(weights[name], tensor, rtol=1e-4, atol=1e-5)


def test_compare_wall_time_budget_without_glue(compare_inputs, tmp_path):
    from hf_bertology.evaluation import compare

    corpus, _ = compare_inputs
    out = tmp_path / "wall"
    argv = ["--recipes", "roberta-tiny", "--train_file", str(corpus), "--budget_minutes", "0.005", "--glue_tasks", ""]
    argv += ["--baseline", "none", "--output_dir", str(out), "--vocab_size", "300", "--logging_steps", "1"]
    argv += ["--pretrain_args", "--per_device_train_batch_size 4"]
    results = compare.main(argv)
    pre = results["models"]["roberta-tiny"]["pretrain"]
    assert pre["seconds"] >= 0.3 and pre["steps"] >= 1 and pre["flops"] > 0
    assert (out / "loss_vs_flops.png").read_bytes()[:8] == PNG_SIGNATURE
    report = (out / "report.md").read_text()
    assert "roberta-tiny" in report
    # no GLUE score, no GLUE plot, and no link to one
    assert not (out / "glue_vs_flops.png").exists() and "glue_vs_flops.png" not in report


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--budget_flops", "1e9", "--budget_minutes", "1"], "exactly one budget"),
        (["--budget_flops", "1e9", "--recipes", "nope-tiny"], "unknown recipe"),
        (["--budget_flops", "1e9", "--baseline", "roberta-tiny"], "must be one of --recipes"),
        (["--budget_flops", "1e9", "--glue_tasks", "sst2"], "needs --glue_data_dir"),
        (["--budget_flops", "-1"], "positive"),
        (["--budget_flops", "1e9", "--glue_seeds", "1,1"], "distinct seeds"),
        (["--budget_flops", "1e9", "--glue_seeds", "1,two"], "comma-separated integers"),
        (["--budget_flops", "1e9", "--glue_seeds", "1,-3"], "--glue_seeds"),
    ],
)
def test_compare_argument_errors(tmp_path, extra, message):
    from hf_bertology.evaluation import compare

    argv = ["--recipes", "bert-tiny", "--train_file", "x.txt", "--output_dir", str(tmp_path), "--glue_tasks", ""]
    with pytest.raises(BertologyError, match=message):
        compare.main(argv + extra)


def test_glue_summary_over_seeds_is_the_mean_and_its_standard_error():
    """Issue 52 item 4: with several fine-tuning seeds a task's score is the mean over seeds of its GLUE score, its
    standard error the sample standard deviation over seeds / √seeds, and the GLUE average's error is over the seeds'
    own averages (WNLI left out of the average, as GLUE does). Figures by hand."""
    from hf_bertology.evaluation.compare import summarise_glue

    runs = {
        "sst2": {1: {"eval_accuracy": 0.60}, 2: {"eval_accuracy": 0.70}, 3: {"eval_accuracy": 0.80}},
        "stsb": {
            s: {"eval_pearson": p, "eval_spearmanr": q} for s, p, q in ((1, 0.1, 0.3), (2, 0.2, 0.2), (3, 0.3, 0.7))
        },
        "wnli": {1: {"eval_accuracy": 0.5}, 2: {"eval_accuracy": 0.4}, 3: {"eval_accuracy": 0.3}},
    }
    got = summarise_glue(runs)
    assert got["glue_scores"]["sst2"] == pytest.approx(0.70)
    assert got["glue_scores_se"]["sst2"] == pytest.approx(0.1 / 3**0.5)  # std of 0.6, 0.7, 0.8 is 0.1
    assert got["glue_scores"]["stsb"] == pytest.approx(0.30)  # per seed 0.2, 0.2, 0.5
    assert got["glue_scores_se"]["stsb"] == pytest.approx(0.3 / 3**0.5 / 3**0.5)  # std of 0.2, 0.2, 0.5: √0.03
    averages = [(0.6 + 0.2) / 2, (0.7 + 0.2) / 2, (0.8 + 0.5) / 2]
    assert got["glue_average"] == pytest.approx(sum(averages) / 3)
    mean = sum(averages) / 3
    std = (sum((a - mean) ** 2 for a in averages) / 2) ** 0.5
    assert got["glue_average_se"] == pytest.approx(std / 3**0.5)
    assert got["glue"]["stsb"] == pytest.approx({"eval_pearson": 0.2, "eval_spearmanr": 0.4})
    assert got["glue_runs"]["sst2"]["2"] == {"eval_accuracy": 0.70}
    # one seed: that run's own figures, no error bar
    one = summarise_glue({"sst2": {7: {"eval_accuracy": 0.65, "epoch": 2.0}}})
    assert one["glue"]["sst2"] == {"eval_accuracy": 0.65, "epoch": 2.0} and one["glue_average"] == 0.65
    assert one["glue_scores_se"] == {"sst2": None} and one["glue_average_se"] is None


def test_compare_fine_tunes_once_per_glue_seed(compare_inputs, tmp_path):
    """`--glue_seeds 1,2`: each model is fine-tuned once per seed, in `glue/<model>/<task>/seed-<s>/`, each run with
    its own `--seed`; results.json and the report give the mean ± standard error of those runs."""
    from hf_bertology.evaluation import compare

    corpus, glue_dir = compare_inputs
    out = tmp_path / "seeds"
    argv = _argv(corpus, glue_dir, out, budget="1e8") + ["--glue_seeds", "1,2", "--baseline", "none"]
    argv[argv.index("--recipes") + 1] = "bert-tiny"
    compare.main(argv)
    saved = json.loads((out / "results.json").read_text())
    entry, runs = saved["models"]["bert-tiny"], {}
    for seed in (1, 2):
        task_dir = out / "glue" / "bert-tiny" / "sst2" / f"seed-{seed}"
        runs[seed] = json.loads((task_dir / "all_results.json").read_text())
        recorded = json.loads((task_dir / "compare_finetune.json").read_text())
        assert recorded[recorded.index("--seed") + 1] == str(seed)
    assert not (out / "glue" / "bert-tiny" / "sst2" / "all_results.json").exists()
    assert runs[1]["train_loss"] != runs[2]["train_loss"]  # the seeds made different runs
    assert entry["glue_runs"]["sst2"] == {"1": runs[1], "2": runs[2]}
    accuracies = [runs[1]["eval_accuracy"], runs[2]["eval_accuracy"]]
    assert entry["glue_scores"]["sst2"] == pytest.approx(sum(accuracies) / 2)
    assert entry["glue_scores_se"]["sst2"] == pytest.approx(abs(accuracies[0] - accuracies[1]) / 2)
    assert saved["settings"]["glue_seeds"] == [1, 2]
    report = (out / "report.md").read_text()
    score = f"{100 * entry['glue_scores']['sst2']:.2f} ± {100 * entry['glue_scores_se']['sst2']:.2f}"
    assert f"| {score} | **{score}** |" in report and "seeds 1, 2 (one fine-tuning run a seed" in report


def test_no_glue_tasks_means_no_baseline():
    """`bertology compare --glue_tasks ""`: the random-init baseline is scored on GLUE only, so with no task none is
    built (nor counted in the progress bar); with tasks, the first recipe's architecture by default."""
    from hf_bertology.evaluation import compare

    def checked(*flags):
        argv = ["--recipes", "bert-tiny,roberta-tiny", "--train_file", "x.txt", "--output_dir", "o", *flags]
        return compare.check_args(compare.parse_args([*argv, "--budget_flops", "1e9"]))

    assert checked("--glue_tasks", "") == (["bert-tiny", "roberta-tiny"], [], None)
    assert checked("--glue_tasks", "", "--baseline", "roberta-tiny")[2] is None
    with pytest.raises(BertologyError, match="must be one of --recipes"):
        checked("--glue_tasks", "", "--baseline", "albert-tiny")


@pytest.mark.parametrize("arch", ["bert-tiny", "electra-tiny"])
def test_random_init_baseline_is_not_the_pretrained_weights(tmp_path, bert_tokenizer, arch):
    """The floor of the comparison is a fresh initialisation of the architecture: no weight tensor of the
    baseline equals the pretrained folder's (every tensor of the "pretrained" model here is moved off its
    initial value, LayerNorms included), while the config and the tokenizer are the pretrained ones. A joint
    model's baseline has its discriminator/ (what GLUE fine-tunes) and generator/ too."""
    from types import SimpleNamespace

    from safetensors.torch import load_file

    from hf_bertology.evaluation.compare import make_baseline
    from hf_bertology.hub import save_folder

    recipe = get_recipe(arch, vocab_size=len(bert_tokenizer))
    torch.manual_seed(1)
    pretrained = recipe.build_model()
    with torch.no_grad():
        for param in pretrained.parameters():
            param.add_(torch.randn_like(param))
    source = tmp_path / "pretrain" / arch
    save_folder(pretrained, bert_tokenizer, source, recipe.networks)  # as a run saves it
    baseline = make_baseline(SimpleNamespace(output_dir=str(tmp_path), seed=0), arch)
    theirs, ours = load_file(source / "model.safetensors"), load_file(baseline / "model.safetensors")
    assert ours.keys() == theirs.keys()
    same = [key for key in ours if torch.equal(ours[key], theirs[key])]
    assert same == [], same
    assert json.loads((baseline / "config.json").read_text()) == json.loads((source / "config.json").read_text())
    assert (baseline / "tokenizer.json").read_text() == (source / "tokenizer.json").read_text()
    parts = [part for part in ("discriminator", "generator") if (baseline / part / "model.safetensors").is_file()]
    assert parts == ([] if arch == "bert-tiny" else ["discriminator", "generator"])
