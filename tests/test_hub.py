"""Pushing to a real Hub API: our Hub-compatible server on 127.0.0.1, `huggingface_hub` as the client.

The in-process tests call `push_folder(..., endpoint=hub.url)`; the end-to-end test runs `bertology pretrain
--push_to_hub` for every variant family in a child process (HF_ENDPOINT set before `huggingface_hub` is imported)
and loads the repositories back in a fresh one, plain and with `trust_remote_code=True`.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from huggingface_hub import HfApi
from huggingface_hub.errors import RepositoryNotFoundError

import hf_bertology as hb
from hf_bertology import cli
from hf_bertology.hub import push_folder, save_folder, write_model_card
from hf_bertology.testing import HubServer
from hf_bertology.utils import BertologyError
from platform_support import PYTHON, REPO, pretrain_argv, subprocess_env, tiny_recipes, write_corpus

TOKEN = "hf_test_token_platform"


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    with HubServer(root=tmp_path_factory.mktemp("hub"), token=TOKEN, user="tester") as server:
        yield server


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A Hub-format folder of an untrained bert-tiny, with training leftovers that must not be pushed."""
    out = tmp_path_factory.mktemp("bert-tiny")
    recipe = hb.get_recipe("bert-tiny")
    tokenizer = recipe.train_tokenizer(["the cat sat on the mat", "a dog ran over the hill"] * 20, vocab_size=120)
    recipe.adapt_to_tokenizer(tokenizer)
    model = recipe.build_model()
    save_folder(model, tokenizer, out)
    write_model_card(out, model, recipe="bert-tiny", variant="bert", corpus="`toy`")
    (out / "checkpoint-5").mkdir()
    (out / "checkpoint-5" / "optimizer.pt").write_bytes(b"state")
    (out / "runs").mkdir()
    (out / "runs" / "events.out").write_bytes(b"log")
    return out


def test_push_folder_uploads_the_model_and_not_the_leftovers(hub, folder):
    url = push_folder(folder, "tester/bert-push", token=TOKEN, endpoint=hub.url)
    repo = hub.repos["tester/bert-push"]
    assert url.endswith(repo.head["oid"])
    files = set(repo.head["files"])
    expected = {"config.json", "model.safetensors", "modeling_bert.py", "configuration_bert.py", "README.md"}
    assert expected <= files
    assert {"tokenizer.json", "tokenizer_config.json"} <= files
    assert not any(name.startswith(("checkpoint-", "runs")) for name in files), files
    assert hub.read_file("tester/bert-push", "model.safetensors") == (folder / "model.safetensors").read_bytes()
    card = hub.read_file("tester/bert-push", "README.md").decode()
    assert card.splitlines()[card.splitlines().index("---", 1) + 2] == "# tester/bert-push"
    assert 'from_pretrained("tester/bert-push"' in card and str(folder) not in card
    assert str(folder) in (folder / "README.md").read_text()  # the local card is left as it was

    # Pushing the same folder again is a no-op: the client sees identical blob ids and makes no commit.
    commits = len(repo.commits)
    push_folder(folder, "tester/bert-push", token=TOKEN, endpoint=hub.url)
    assert len(repo.commits) == commits
    # A name without namespace goes to the token's user, as on the Hub.
    push_folder(folder, "bert-push-short", token=TOKEN, endpoint=hub.url)
    assert "tester/bert-push-short" in hub.repos


def test_private_repo_needs_the_token(hub, folder):
    push_folder(folder, "tester/bert-private", token=TOKEN, private=True, endpoint=hub.url)
    assert hub.repos["tester/bert-private"].private
    with pytest.raises(RepositoryNotFoundError):
        HfApi(endpoint=hub.url, token=False).model_info("tester/bert-private")
    info = HfApi(endpoint=hub.url, token=TOKEN).model_info("tester/bert-private", files_metadata=True)
    sizes = {s.rfilename: s.size for s in info.siblings}
    assert sizes["model.safetensors"] == (folder / "model.safetensors").stat().st_size


def test_push_errors_are_one_line(hub, folder, tmp_path, capsys):
    with pytest.raises(BertologyError, match="not a model folder"):
        push_folder(tmp_path, "tester/x", token=TOKEN, endpoint=hub.url)
    with pytest.raises(BertologyError, match="could not push .*401 Unauthorized.*Invalid credentials"):
        push_folder(folder, "tester/bert-badtoken", token="hf_wrong", endpoint=hub.url)
    assert "tester/bert-badtoken" not in hub.repos
    # Nothing listens on port 9 (discard) on loopback: a connection error, reported in one line.
    with pytest.raises(BertologyError, match="could not push"):
        push_folder(folder, "tester/x", token=TOKEN, endpoint="http://127.0.0.1:9")
    assert cli.main(["push", str(tmp_path / "missing"), "tester/x"]) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_pretrain_push_to_hub_then_load_in_a_fresh_process(hub, tmp_path):
    """Every variant family: `bertology pretrain --push_to_hub`, then `from_pretrained(repo_id)` from the server
    in a fresh process, plain and with remote code, gives the outputs of the local folder exactly."""
    corpus = write_corpus(tmp_path / "corpus.txt")
    env = subprocess_env(
        HF_ENDPOINT=hub.url,
        HF_HUB_DISABLE_XET="1",
        HF_HOME=str(tmp_path / "hf_home"),
        HF_TOKEN=TOKEN,
        HF_HUB_OFFLINE="0",
        HF_HUB_ETAG_TIMEOUT="30",
        HF_HUB_DOWNLOAD_TIMEOUT="30",
    )
    cases, runs = [], []
    for recipe in tiny_recipes():
        out = tmp_path / recipe
        flags = ["--max_steps", "1", "--save_strategy", "no", "--push_to_hub", "--hub_model_id", recipe]
        runs.append(["pretrain", *pretrain_argv(recipe, corpus, out, *flags)])
        plain = hb.get_recipe(recipe).variant.plain_auto_class
        cases.append({"repo": f"tester/{recipe}", "folder": str(out), "plain": plain})
        if hb.get_recipe(recipe).config.to_diff_dict()["model_type"].endswith("-joint"):  # ELECTRA, DeBERTa-v3
            cases[-1]["plain_subfolder"] = "discriminator"
    # One child runs every pretraining (imports once); `--hub_token` comes from HF_TOKEN here and is tested by
    # `bertology push --token` below.
    script = (
        "import json, sys\nfrom hf_bertology import cli\n"
        "for argv in json.loads(sys.argv[1]):\n    assert cli.main(argv) == 0, argv\n"
    )
    runs.append(["push", cases[0]["folder"], "tester/pushed-by-cli", "--token", TOKEN, "--private"])
    done = subprocess.run(
        [PYTHON, "-c", script, json.dumps(runs)], env=env, capture_output=True, text=True, timeout=600, cwd=REPO
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert hub.repos["tester/pushed-by-cli"].private
    cases.append({**cases[0], "repo": "tester/pushed-by-cli"})

    for case in cases:
        card = hub.read_file(case["repo"], "README.md").decode()
        assert f'from_pretrained("{case["repo"]}"' in card, card

    loaded = subprocess.run(
        [PYTHON, str(REPO / "tests" / "hub_load_worker.py"), json.dumps(cases)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,  # not the repo: nothing local shadows the downloads
    )
    assert loaded.returncode == 0, loaded.stderr[-4000:]
    results = json.loads(next(line[7:] for line in loaded.stdout.splitlines() if line.startswith("RESULT ")))
    assert {r["repo"] for r in results} == {c["repo"] for c in cases}
    for result in results:
        assert result["same_tokens"] and result["same_params"] and result["same_outputs"], result
        assert result["outputs"], result
        assert result["max_diff"] == 0.0, result
        # Remote code gives our class from the downloaded module; plain loading gives transformers' own class.
        assert result["class"].startswith("transformers_modules.") == result["remote"], result
        if "plain_on_joint_folder" in result:  # the joint folder itself: plain transformers refuses it (issue 31)
            assert "trust_remote_code" in result["plain_on_joint_folder"], result
    # electra-tiny, deberta-v3-tiny, electra-15-tiny, replace-mlm-tiny
    assert sum("plain_on_joint_folder" in result for result in results) == 4
    downloads = {path for method, path in hub.requests if "/resolve/" in path}
    assert any(path.endswith("/model.safetensors") for path in downloads)


def test_glue_push_to_hub(hub, folder, tmp_path):
    """`bertology glue --push_to_hub` pushes the fine-tuned folder once, at the end."""
    task_dir = tmp_path / "SST-2"
    task_dir.mkdir()
    rows = "".join(f"{'a good film' if i % 2 else 'a bad film'}\t{i % 2}\n" for i in range(16))
    for split in ("train", "dev"):
        (task_dir / f"{split}.tsv").write_text("sentence\tlabel\n" + rows)
    argv = [
        "glue", "--model_name_or_path", str(folder), "--task_name", "sst2", "--data_dir", str(task_dir),
        "--output_dir", str(tmp_path / "out"), "--max_steps", "2", "--per_device_train_batch_size", "4",
        "--do_train", "--do_eval", "--report_to", "none", "--push_to_hub", "--hub_model_id", "tester/glue-sst2",
        "--save_strategy", "no", "--disable_tqdm", "true",
    ]  # fmt: skip
    env = subprocess_env(
        HF_ENDPOINT=hub.url, HF_HUB_DISABLE_XET="1", HF_HOME=str(tmp_path / "hf"), HF_TOKEN=TOKEN, HF_HUB_OFFLINE="0"
    )
    script = "import json, sys\nfrom hf_bertology import cli\nassert cli.main(json.loads(sys.argv[1])) == 0\n"
    done = subprocess.run(
        [PYTHON, "-c", script, json.dumps(argv)], env=env, capture_output=True, text=True, timeout=600, cwd=REPO
    )
    assert done.returncode == 0, done.stderr[-4000:]
    files = set(hub.repos["tester/glue-sst2"].head["files"])
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= files
    assert json.loads(hub.read_file("tester/glue-sst2", "config.json"))["architectures"] == [
        "BertForSequenceClassification"
    ]


def test_a_joint_model_is_saved_with_its_networks(tmp_path, bert_tokenizer):
    """A model with two networks saved without them would get a one-network folder (plain `architectures`, no
    `discriminator/`): `save_folder` refuses it in one line."""
    recipe = hb.get_recipe("electra-tiny", vocab_size=len(bert_tokenizer))
    with pytest.raises(ValueError, match="two networks"):
        save_folder(recipe.build_model(), bert_tokenizer, tmp_path / "joint")
    save_folder(recipe.build_model(), bert_tokenizer, tmp_path / "joint", recipe.networks)
    assert json.loads((tmp_path / "joint" / "config.json").read_text())["model_type"] == "bertology-electra-joint"
