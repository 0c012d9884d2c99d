"""Multi-process pretraining on CPU: `torchrun --nproc_per_node 2` (gloo) runs BertologyTrainer's step and
`bertology pretrain` for every variant family; one step's loss and gradients equal one process on the same global
batch. One launch for all families (each launch costs ~10 s); `accelerate launch` is the slow variant."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess

import pytest

import hf_bertology as hb
from platform_support import PYTHON, REPO, subprocess_env, tiny_recipes, write_corpus

TOLERANCE = 1e-5


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch(launcher: list[str], tmp_path) -> list[dict]:
    corpus = write_corpus(tmp_path / "corpus.txt", n_docs=30)
    cases = []
    for recipe in tiny_recipes():
        tokenizer_dir = tmp_path / f"tok-{recipe}"  # trained once here: every process must use the same one
        hb.get_recipe(recipe).train_tokenizer([corpus.read_text()], vocab_size=300).save_pretrained(tokenizer_dir)
        out = tmp_path / f"run-{recipe}"
        cases.append(
            {"recipe": recipe, "tokenizer": str(tokenizer_dir), "train_file": str(corpus), "output_dir": str(out)}
        )
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"cases": cases, "result": str(tmp_path / "result.json")}))
    done = subprocess.run(
        [*launcher, str(REPO / "tests" / "ddp_worker.py"), str(spec)],
        env=subprocess_env(MASTER_ADDR="127.0.0.1"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-6000:])
    ranks = json.loads((tmp_path / "result.json").read_text())
    assert len(ranks) == 2
    for case in cases:
        assert (tmp_path / f"run-{case['recipe']}" / "model.safetensors").is_file(), case
    return [result for rank in ranks for result in rank]


def check(results: list[dict]) -> None:
    assert {r["recipe"] for r in results} == set(tiny_recipes())
    for result in results:
        assert result["count_diff"] == 0, result
        assert result["missing_grads"] == [], result
        assert result["loss_diff"] <= TOLERANCE * max(1.0, abs(result["loss"])), result
        assert result["grad_diff"] <= TOLERANCE, result
        assert result["pretrain_status"] == 0, result


def test_torchrun_two_processes_equal_one(tmp_path):
    if shutil.which("torchrun") is None:
        pytest.skip("torchrun is not on PATH")
    # --standalone: a local rendezvous on a free port (`--master_port 0` would hang the processes).
    launcher = [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    check(launch(launcher, tmp_path))


@pytest.mark.slow
def test_accelerate_launch_two_processes_equal_one(tmp_path):
    # `--cpu --num_processes 2` silently runs one process; `--multi_gpu` on a CPU machine runs two (gloo).
    launcher = [PYTHON, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
                "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_ip", "127.0.0.1", "--main_process_port", str(free_port())]  # fmt: skip
    check(launch(launcher, tmp_path))
