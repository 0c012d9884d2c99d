"""The folders we write, used by the clients users already have, in a process where hf_bertology is not importable
(issue 31): transformers' `run_mlm.py` / `run_plm.py` / `run_glue.py` steps through a plain `Trainer`, both
pipelines, every `AutoModelFor*` head, sentence-transformers, and folders derived from ours by plain transformers.

One `bertology pretrain` of one step per family writes the folders once a session (`folders`); one child process
per family (`tests/clients_worker.py`) runs every client against them and prints what each gave.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys

import pytest

import hf_bertology as hb
from hf_bertology import cli
from platform_support import REPO, pretrain_argv, tiny_recipes, write_corpus

# two networks: discriminator/ + generator/
JOINT = ("electra-tiny", "deberta-v3-tiny", "electra-tiny@roberta", "electra-15-tiny", "replace-mlm-tiny")
FAMILIES = [*tiny_recipes(), "electra-tiny@roberta"]


@pytest.fixture(scope="session")
def folders(tmp_path_factory) -> dict:
    """`bertology pretrain` (1 step) of every tiny recipe, once a session: recipe -> output folder."""
    root = tmp_path_factory.mktemp("client-folders")
    corpus = write_corpus(root / "corpus.txt")
    out = {}
    for recipe in FAMILIES:
        out[recipe] = root / recipe
        argv = pretrain_argv(recipe, corpus, out[recipe], "--max_steps", "1", "--save_strategy", "no")
        assert cli.main(["pretrain", *argv]) == 0, recipe
    return out


def client_env(tmp_path) -> dict[str, str]:
    """A user's environment: no `src` on the path, offline, one thread."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_", "PYTHONPATH"))}
    env.update(
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        TOKENIZERS_PARALLELISM="false",
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        HF_HOME=str(tmp_path / "hf_home"),
        PYTHONUNBUFFERED="1",
    )
    return env


def client_case(recipe: str, folder, out) -> dict:
    """What a user points each client at: a joint run's `generator/` for masked-LM work and `discriminator/` for
    fine-tuning, the run's folder itself for every other family."""
    joint = recipe in JOINT
    xlnet = recipe.startswith("xlnet")
    return {
        "family": recipe,
        "mlm": str(folder / "generator") if joint else (None if xlnet else str(folder)),
        "plm": str(folder) if xlnet else None,
        "finetune": str(folder / "discriminator") if joint else str(folder),
        "joint": str(folder) if joint else None,
        # the model card's Python blocks, each run on its own as a user pastes it
        "card": re.findall(r"```python\n(.*?)```", (folder / "README.md").read_text(), flags=re.DOTALL),
        "out": str(out / recipe),
    }


def loading_page_code(folders: dict) -> list[str]:
    """The Python blocks of docs/loading.md, with its `runs/<family>-mini` folders replaced by the tiny ones."""
    page = (REPO / "docs" / "loading.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, flags=re.DOTALL)
    root = next(iter(folders.values())).parent
    return [
        re.sub(r"runs/([a-z0-9-]+?)-mini(@[a-z]+)?", lambda m: f"{root}/{m[1]}-tiny{m[2] or ''}", b) for b in blocks
    ]


@pytest.fixture(scope="session")
def client_results(folders, tmp_path_factory) -> dict:
    """Every client on every family's folders, in one child process without hf_bertology (imports paid once)."""
    tmp = tmp_path_factory.mktemp("clients")
    cases = [client_case(recipe, folder, tmp) for recipe, folder in folders.items()]
    cases.append({"family": "docs", "snippets": loading_page_code(folders), "out": str(tmp / "docs")})
    done = subprocess.run(
        [sys.executable, str(REPO / "tests" / "clients_worker.py"), json.dumps(cases)],
        env=client_env(tmp),
        cwd=tmp,  # not the repo: nothing there is importable
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,  # transformers asks "run the custom code? [y/N]" on a terminal: no one answers
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    results = [json.loads(line[7:]) for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    return {result["family"]: result for result in results}


def ok(result: dict, name: str) -> dict:
    assert "error" not in result[name], f"{name}: {result[name]['error']}"
    return result[name]


@pytest.mark.parametrize("recipe", FAMILIES)
def test_every_client_on_the_folders_of_a_run(recipe, folders, client_results):
    result = client_results[recipe]
    assert result["hf_bertology_importable"] is False

    # run_mlm.py (or run_plm.py for XLNet): resize_token_embeddings, DataCollatorForLanguageModeling, a plain
    # Trainer, accuracy from the returned logits (item 1: ModernBERT's sparse_prediction made the logits ragged;
    # item 2: the DeBERTa-v3 generator's head broke on resize).
    lm = ok(result, "plm" if recipe.startswith("xlnet") else "mlm")
    assert lm["missing"] == [], lm  # the trained head, nothing random
    assert math.isfinite(lm["metrics"]["eval_loss"])
    if "mlm" in result:
        assert 0.0 <= lm["metrics"]["eval_accuracy"] <= 1.0
        # item 5: the continued-MLM folder plain transformers wrote (it inherits our auto_map, not our code) loads
        # with and without trust_remote_code (auto_map names our class under AutoModelForPreTraining only, so
        # AutoModelForMaskedLM picks transformers' class either way)
        for remote, reload in lm["reloads"].items():
            assert "error" not in reload and reload["max_diff"] < 1e-5, (remote, reload)
        assert ok(result, "fill_mask")["n"] == 3

    # run_glue.py: a new head only, fine-tuned by a plain Trainer; the saved classifier reloads both ways (item 5)
    glue = ok(result, "glue")
    assert glue["class"].endswith("ForSequenceClassification") and math.isfinite(glue["metrics"]["eval_loss"])
    for remote, reload in glue["reloads"].items():
        assert "error" not in reload and reload["max_diff"] < 1e-5, (remote, reload)
    assert len(glue["pipeline"]) == 2

    # every AutoModelFor* head: only the new head is random (item 4: RoBERTa's pooler was random on every load)
    for head, loaded in ok(result, "heads").items():
        assert loaded.get("unsupported") or loaded["random_backbone"] == [], (head, loaded)

    assert len(ok(result, "card")["printed"]) == 2  # the card's snippets run as written (plain, then our class)

    st = ok(result, "sentence_transformers")
    assert st["finite"] and st["reload_diff"] == 0.0 and st["round_trip_diff"] < 1e-6, st

    if recipe in JOINT:  # item 3: the joint folder gives standard tools our joint class or a refusal, never a guess
        joint = ok(result, "joint")
        ours = json.loads((folders[recipe] / "config.json").read_text())["auto_map"]["AutoModelForPreTraining"]
        assert len(joint) == 3 * 9 + 1, sorted(joint)  # 7 Auto classes + 2 pipelines, 3 ways; sentence-transformers
        for client, got in joint.items():
            if client == "AutoModelForPreTraining[True]":
                assert got == {"class": ours.split(".")[-1]}, (client, got)
            elif client.endswith("[True]"):  # our config class, which no transformers class takes
                refusal = "Could not load model" if client.startswith(("fill-mask", "text-")) else "Unrecognized"
                assert got.get("refused", "").startswith(f"ValueError: {refusal}"), (client, got)
            else:  # transformers does not know the joint model_type and asks for remote code
                assert "refused" in got and "trust_remote_code" in got["refused"], (client, got)


@pytest.mark.parametrize("recipe", FAMILIES)
def test_config_and_card_name_what_plain_transformers_has(recipe, folders, tmp_path):
    """Item 6 (and 1, 3): `architectures` is a transformers class, ours is under auto_map; the card's header has the
    task the folder serves, a license; a joint run's folder is no fill-mask model and says where the two networks
    are; every part folder has its own card."""
    import transformers
    from transformers.testing_utils import CaptureLogger

    from hf_bertology.joint import export_part

    folder = folders[recipe]
    config = json.loads((folder / "config.json").read_text())
    assert all(ref.split(".")[-1].startswith("Bertology") for ref in config["auto_map"].values())
    assert "sparse_prediction" not in config or config["sparse_prediction"] is False
    card = (folder / "README.md").read_text()
    header = card.split("---")[1]
    assert "license: apache-2.0" in header and "library_name: transformers" in header
    if recipe in JOINT:  # item 3: a model_type of its own and our classes only: plain transformers refuses it
        assert config["model_type"].startswith("bertology-") and config["model_type"].endswith("-joint")
        assert config["model_type"] not in transformers.CONFIG_MAPPING
        assert config["architectures"] == [config["auto_map"]["AutoModelForPreTraining"].split(".")[-1]]
        assert set(config["auto_map"]) == {"AutoConfig", "AutoModelForPreTraining"}
        assert "pipeline_tag" not in header  # no pipeline serves it; each part folder has its own
        assert "the pretraining heads" not in card and 'subfolder="generator"' in card
        assert f"`{config['model_type']}`" in card and "trust_remote_code=True)" in card
        for part, tag in (("discriminator", "feature-extraction"), ("generator", "fill-mask")):
            part_config = json.loads((folder / part / "config.json").read_text())
            assert "auto_map" not in part_config and hasattr(transformers, part_config["architectures"][0])
            assert f"pipeline_tag: {tag}" in (folder / part / "README.md").read_text()
        verbosity = transformers.logging.get_verbosity()
        transformers.logging.set_verbosity_warning()
        try:  # `bertology export` writes a card too; it reads the tokenizer with our config class (no type warning)
            with CaptureLogger(transformers.logging.get_logger("transformers.configuration_utils")) as logged:
                exported = export_part(folder, tmp_path / "exported", "generator")
        finally:
            transformers.logging.set_verbosity(verbosity)
        assert "model of type" not in logged.out, logged.out
        assert "pipeline_tag: fill-mask" in (exported / "README.md").read_text()
    else:
        assert hasattr(transformers, config["architectures"][0]), config["architectures"]
        assert config["model_type"] in transformers.CONFIG_MAPPING and "AutoConfig" not in config["auto_map"]
        # item 5: ours under AutoModelForPreTraining, so a derived masked LM's AutoModelForMaskedLM is transformers'
        assert list(config["auto_map"]) == ["AutoModelForPreTraining"], config["auto_map"]
        tag = "text-generation" if recipe.startswith("xlnet") else "fill-mask"
        assert f"pipeline_tag: {tag}" in header


def test_card_names_the_hub_dataset_and_the_repo(tmp_path):
    """`datasets` in the header when the corpus is a Hub dataset; pushing points every snippet, part folders'
    included, at the repository."""
    from hf_bertology.hub import card_for_repo, write_model_card, write_part_card

    recipe = hb.get_recipe("electra-tiny")
    model = recipe.build_model()
    (tmp_path / "generator").mkdir()
    (tmp_path / "generator" / "config.json").write_text(json.dumps({"architectures": ["ElectraForMaskedLM"]}))
    card = write_model_card(
        tmp_path, model, "electra-tiny", "electra", "`wikitext`", dataset_name="wikitext", networks=recipe.networks
    )
    text = card.read_text()
    assert "datasets:\n- wikitext" in text.split("---")[1]
    pushed = card_for_repo(text, "me/electra")
    assert str(tmp_path) not in pushed and 'from_pretrained("me/electra", subfolder="generator")' in pushed
    part = write_part_card(tmp_path / "generator", "generator", "electra-tiny", "electra", "`wikitext`")
    pushed_part = card_for_repo(part.read_text(), "me/electra", subfolder="generator")
    assert 'from_pretrained("me/electra", subfolder="generator")' in pushed_part and str(tmp_path) not in pushed_part


def test_the_loading_page_runs(client_results):
    """docs/loading.md: every Python block runs as written (on the tiny folders) without hf_bertology."""
    docs = client_results["docs"]
    assert docs["hf_bertology_importable"] is False
    printed = ok(docs, "snippets")["printed"]
    assert len(printed) == 3
    assert "BertologyElectraForPreTraining BertologyRobertaForPreTraining" in printed[2]


# + a generator narrower than a factorised table (DeBERTa's embedding_size) and a shallower ModernBERT (layer_types)
@pytest.mark.parametrize("recipe", [*JOINT, "electra-tiny@deberta", "deberta-v3-tiny@modernbert"])
def test_exported_parts_are_the_joint_networks_and_resizable(recipe, tmp_path):
    """Item 2 and 3, in-process and fast: each part of a joint model (one with a module only ours has added to the
    generator, as a later generator head would be) written as the plain class loads with no missing or unexpected
    key, gives the joint network's outputs, and survives run_mlm.py's `resize_token_embeddings` + a training
    forward (the DeBERTa-v3 generator's `legacy=False` head failed there on a LayerNorm shape)."""
    import torch
    import transformers
    from transformers import AutoModelForMaskedLM

    from hf_bertology.joint import plain_part

    torch.manual_seed(0)
    recipe_ = hb.get_recipe(recipe, vocab_size=120)
    joint = recipe_.build_model().eval()
    joint.generator.extra_head = torch.nn.Linear(4, 4)  # a module plain transformers has no name for
    ids = torch.randint(5, 120, (2, 12), generator=torch.Generator().manual_seed(0))
    for network in reversed(recipe_.networks):  # the generator, then the discriminator
        part = network.name
        plain_part(joint, network, recipe_.networks).save_pretrained(tmp_path / part)
        plain_class = json.loads((tmp_path / part / "config.json").read_text())["architectures"][0]
        model, info = getattr(transformers, plain_class).from_pretrained(tmp_path / part, output_loading_info=True)
        assert not info["missing_keys"] and not info["unexpected_keys"], (part, info)
        with torch.no_grad():
            if part == "generator":
                reference = joint.generator(input_ids=ids).logits
                assert torch.allclose(model.eval()(input_ids=ids).logits, reference, atol=1e-5)
            else:  # DeBERTa-v3 reads its GDES table E_G + Δ through `discriminate`
                reference = getattr(joint, "discriminate", joint.base_model)(ids)[0]
                assert torch.allclose(model.base_model.eval()(ids)[0], reference, atol=1e-5)
    generator = AutoModelForMaskedLM.from_pretrained(tmp_path / "generator")
    generator.resize_token_embeddings(128)
    labels = torch.where(ids % 3 == 0, ids, -100)
    loss = generator(input_ids=ids, labels=labels).loss
    loss.backward()
    assert torch.isfinite(loss) and generator.get_input_embeddings().weight.grad.shape[0] == 128


def test_pushing_a_joint_run_points_every_card_at_the_repo(folders, tmp_path):
    """Item 6: pushed, the joint card and the part folders' cards load from the repository (`subfolder=`), never
    from the local path."""
    from hf_bertology.hub import push_folder
    from hf_bertology.testing import HubServer

    folder = folders["electra-tiny"]
    with HubServer(root=tmp_path / "hub", token="hf_clients", user="tester") as hub:
        push_folder(folder, "tester/electra", token="hf_clients", endpoint=hub.url)
        top = hub.read_file("tester/electra", "README.md").decode()
        assert 'from_pretrained("tester/electra", subfolder="generator")' in top and str(folder) not in top
        for part in ("discriminator", "generator"):
            card = hub.read_file("tester/electra", f"{part}/README.md").decode()
            assert f'from_pretrained("tester/electra", subfolder="{part}")' in card and str(folder) not in card
            assert hub.read_file("tester/electra", f"{part}/model.safetensors")


@pytest.mark.parametrize("recipe", ["electra-tiny@roberta", "electra-tiny@bert"])
def test_a_generator_folder_loads_under_automodel_with_nothing_random(recipe, tmp_path):
    """Issue 40, item 5: `electra@roberta`'s generator folder (a RobertaForMaskedLM: no pooler) loaded under
    AutoModel with a random pooler, while its discriminator ships a seeded one; now both do, and two loads agree."""
    import torch
    from transformers import AutoModel, BertTokenizerFast

    from hf_bertology.joint import write_part_folders

    (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]))
    tokenizer = BertTokenizerFast(vocab_file=str(tmp_path / "vocab.txt"))
    recipe_ = hb.get_recipe(recipe, vocab_size=120)
    joint = recipe_.build_model()
    write_part_folders(joint, recipe_.networks, tokenizer, tmp_path / "run")
    for part in ("generator", "discriminator"):
        first, info = AutoModel.from_pretrained(tmp_path / "run" / part, output_loading_info=True)
        assert not info["missing_keys"], (part, info)
        again = AutoModel.from_pretrained(tmp_path / "run" / part)
        assert torch.equal(first.pooler.dense.weight, again.pooler.dense.weight)
