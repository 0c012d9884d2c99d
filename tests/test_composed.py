"""Every objective on every encoder (models/composed): the matrix of allowed cells, the refusals, and for each cell the
paper's masking, a falling loss, plain-transformers loading, RTD gradient isolation and padding-free equivalence."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import pytest
import torch
from transformers import AutoModel, AutoModelForMaskedLM, RobertaConfig

from hf_bertology.collators.flatten import flatten_batch
from hf_bertology.data import build_pretraining_dataset, load_corpus, tokenize_corpus
from hf_bertology.models.configuration_composed import two_networks
from hf_bertology.models.step import backbone_inputs
from hf_bertology.recipes import BACKBONES, VARIANTS, get_recipe
from hf_bertology.training import pretrain
from hf_bertology.training.attention import PACKED_ATTENTION, set_attention, use_padding_free
from hf_bertology.training.trainer import BertologyTrainer
from hf_bertology.utils import BertologyError
from platform_support import assert_same_step, no_dropout, pretrain_argv, subprocess_env, write_corpus

# (objective, backbone) -> the start of the one line that refuses it
REFUSED = {
    **{("xlnet", backbone): "xlnet-tiny: the xlnet objective runs only on its own encoder" for backbone in BACKBONES},
    ("bert", "modernbert"): "nsp needs token types (segment embeddings) and modernbert has none",
    ("albert", "modernbert"): "sop needs token types (segment embeddings) and modernbert has none",
}
CELLS = [
    (objective, backbone)
    for objective, spec in VARIANTS.items()
    for backbone in BACKBONES
    if backbone != spec.backbone and (objective, backbone) not in REFUSED
]
RTD_CELLS = [cell for cell in CELLS if VARIANTS[cell[0]].parts.get("replaced_token_detection")]
# cells with a generator (RTD's, Replace MLM's): two networks, a joint folder
JOINT_CELLS = [cell for cell in CELLS if two_networks(VARIANTS[cell[0]].parts)]
PACKABLE_CELLS = [cell for cell in CELLS if BACKBONES[cell[1]].packable]


def cell_id(cell) -> str:
    return f"{cell[0]}@{cell[1]}"


def test_the_matrix_is_every_objective_on_every_encoder():
    # 8 objectives x 6 encoders - 8 native pairs - 2 sentence tasks on ModernBERT
    assert len(CELLS) == len(VARIANTS) * 5 - 5 - 2
    assert {backbone for _, backbone in CELLS} == set(BACKBONES)
    assert {objective for objective, _ in CELLS} == set(VARIANTS) - {"xlnet"}


@pytest.mark.parametrize("cell", sorted(REFUSED), ids=cell_id)
def test_impossible_cells_are_refused_in_one_line(cell):
    with pytest.raises(BertologyError, match="^" + re.escape(REFUSED[cell])) as err:
        get_recipe(f"{cell[0]}-tiny", backbone=cell[1])
    assert "\n" not in str(err.value)


def test_part_and_sharing_refusals():
    with pytest.raises(BertologyError, match="span_boundary_objective needs span masking"):
        get_recipe("roberta-tiny", span_boundary_objective=True)
    with pytest.raises(BertologyError, match="has no embedding projection: set generator_hidden_fraction=1.0"):
        get_recipe("electra-tiny@roberta", embedding_sharing="es")
    with pytest.raises(BertologyError, match="replaced-token detection with a sentence task"):
        get_recipe("electra-tiny@roberta", sentence_task="nsp")
    with pytest.raises(BertologyError, match="two_stage_generator_steps works only"):
        get_recipe("electra-tiny@albert", two_stage_generator_steps=10)
    with pytest.raises(BertologyError, match="unknown backbone 'gpt2'; known: bert, roberta"):
        get_recipe("bert-tiny", backbone="gpt2")


def test_paper_recipes_keep_their_own_classes():
    for name, spec in VARIANTS.items():
        native = get_recipe(f"{name}-tiny", backbone=spec.backbone) if spec.backbone else get_recipe(f"{name}-tiny")
        assert type(native.config) is spec.config_class and native.backbone is None and native.name == f"{name}-tiny"
    # the same part as the paper's is no change either
    assert get_recipe("bert-tiny", sentence_task="nsp").backbone is None


def test_parts_compose_on_a_papers_own_encoder():
    recipe = get_recipe("roberta-tiny", sentence_task="sop")  # RoBERTa with ALBERT's sentence-order task
    assert recipe.name == "roberta-tiny@roberta" and recipe.config.input_format == "sop_pairs"
    recipe = get_recipe("bert-tiny", sentence_task="none")  # BERT without NSP
    assert recipe.config.sentence_task is None and recipe.config.input_format == "full_sentences"
    recipe = get_recipe("albert-tiny", span_boundary_objective=True)  # ALBERT's n-grams + SpanBERT's SBO
    assert recipe.config.sentence_task == "sop" and recipe.config.sbo_max_targets == 15


@pytest.mark.parametrize("recipe_name", ["bert-tiny+sentence_task=none", "roberta-tiny+sentence_task=sop"])
def test_parts_on_a_papers_own_encoder_train_and_evaluate(recipe_name, cli_corpus, tmp_path):
    """`bertology pretrain --recipe bert-tiny+sentence_task=none --do_train --do_eval`: the evaluation has a loss
    (BERT's forward takes `next_sentence_label`, which these batches do not carry), and SOP is evaluated on RoBERTa."""
    argv = pretrain_argv(recipe_name, cli_corpus, tmp_path, "--max_steps", "2", "--do_train", "--do_eval")
    metrics = pretrain.main(argv)
    assert torch.isfinite(torch.tensor([metrics["eval_loss"], metrics["eval_mlm_loss"]])).all()
    assert ("eval_sop_loss" in metrics) == recipe_name.endswith("sop") and "eval_nsp_loss" not in metrics


def test_readme_python_lines():
    """README, "Any objective on any encoder": the two spellings give the same RoBERTa-based recipe."""
    recipe = get_recipe("deberta-v3-small", backbone="roberta")
    assert recipe.config.to_dict() == get_recipe("deberta-v3-small@roberta").config.to_dict()
    assert isinstance(recipe.config, RobertaConfig) and recipe.config.model_type == "roberta"
    assert recipe.config.objective == "deberta-v3" and recipe.config.replaced_token_detection


def test_a_cell_takes_the_objective_and_the_encoders_architecture():
    recipe = get_recipe("electra-small@albert")
    config, electra = recipe.config, get_recipe("electra-small").config
    assert config.model_type == "albert" and config.objective == "electra"
    assert (config.hidden_size, config.num_hidden_layers, config.intermediate_size) == (256, 12, 1024)
    assert config.embedding_size == 128 and config.hidden_act == "gelu_new"  # ALBERT's own (albert-base)
    for key in ("mlm_probability", "mask_replace_prob", "max_predictions_per_seq", "discriminator_weight"):
        assert getattr(config, key) == getattr(electra, key), key
    assert config.generator_hidden_fraction == 0.25 and config.embedding_sharing == "es"
    assert recipe.training_defaults == get_recipe("electra-small").training_defaults
    deberta = get_recipe("deberta-v3-tiny@roberta").config
    assert deberta.embedding_sharing == "gdes" and deberta.generator_layers_fraction == 0.5
    assert deberta.discriminator_weight == get_recipe("deberta-v3-tiny").config.discriminator_weight


# -- per cell: batches, losses, gradients ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus(corpus_file):
    return load_corpus(train_files=[str(corpus_file)])


@pytest.fixture(scope="module")
def tokenizers(corpus):
    """One trained tokenizer per objective (its family), shared by its cells and its paper recipe."""
    out = {}
    for objective in VARIANTS:
        if objective != "xlnet":
            out[objective] = get_recipe(f"{objective}-tiny").train_tokenizer(corpus["text"], 300)
    return out


_SETUPS: dict = {}


def setup(cell, corpus, tokenizers):
    """(recipe, collator, 6 examples) of a cell, built once."""
    if cell not in _SETUPS:
        objective, backbone = cell
        recipe = get_recipe(f"{objective}-tiny", backbone=backbone, **no_dropout(f"{objective}-tiny@{backbone}"))
        tokenizer = tokenizers[objective]
        recipe.adapt_to_tokenizer(tokenizer)
        recipe.fit_to_length(48)
        examples = build_pretraining_dataset(tokenize_corpus(corpus, tokenizer), tokenizer, recipe.config, 48, 0)
        features = [examples[i] for i in range(6)]
        _SETUPS[cell] = (recipe, recipe.build_collator(tokenizer, seed=3), features)
    return _SETUPS[cell]


@pytest.mark.parametrize("cell", CELLS, ids=cell_id)
def test_cell_masks_exactly_as_the_papers_recipe(cell, corpus, tokenizers):
    """The collator, input format and prediction cap are the objective's: the same examples give the same batch as
    the paper's recipe, so the masking statistics tested for the six recipes hold on every encoder."""
    recipe, collator, features = setup(cell, corpus, tokenizers)
    paper = get_recipe(f"{cell[0]}-tiny")
    paper.adapt_to_tokenizer(tokenizers[cell[0]])
    paper.fit_to_length(48)
    assert recipe.config.input_format == paper.config.input_format
    theirs = paper.build_collator(tokenizers[cell[0]], seed=3)(features)
    ours = collator(features)
    assert ours.keys() == theirs.keys()
    for key in ours:
        assert torch.equal(ours[key], theirs[key]), key


@pytest.mark.parametrize("cell", [cell for cell in CELLS if cell not in JOINT_CELLS], ids=cell_id)
def test_masked_lm_cell_resizes_its_vocabulary(cell, corpus, tokenizers):
    """`resize_token_embeddings` (what run_mlm.py calls after adding tokens) resizes the MLM decoder with the word
    table: the logits cover the new ids, a label among them trains, and the decoder stays tied to the table."""
    recipe, collator, features = setup(cell, corpus, tokenizers)
    torch.manual_seed(0)
    model = recipe.build_model()
    vocab = model.config.vocab_size
    model.resize_token_embeddings(vocab + 8)
    decoder, table = model.get_output_embeddings(), model.get_input_embeddings()
    assert decoder.weight.shape[0] == table.weight.shape[0] == vocab + 8
    assert decoder.weight.data_ptr() == table.weight.data_ptr()  # still one tensor
    batch = collator(features)
    chosen = batch["labels"].ne(-100).nonzero()[0]
    batch["labels"][tuple(chosen)] = vocab + 7  # a new token as a target
    output = model(**batch)
    assert torch.isfinite(output.loss)
    logits = output.prediction_logits if getattr(output, "prediction_logits", None) is not None else output.logits
    assert logits.shape[-1] == vocab + 8


@pytest.mark.parametrize("cell", CELLS, ids=cell_id)
def test_cell_loss_falls_on_a_repeated_batch(cell, corpus, tokenizers):
    recipe, collator, features = setup(cell, corpus, tokenizers)
    batch = collator(features)
    torch.manual_seed(0)
    model = recipe.build_model().train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-3)
    losses = []
    for step in range(8):
        torch.manual_seed(step)  # RTD samples its replacements
        loss = model(**batch).loss
        assert torch.isfinite(loss)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.95 * losses[0], losses  # 8 AdamW steps on one batch: at least 5% down


# each component loss and the count that normalises it (`outputs.step_mean`'s key)
COUNT_KEYS = {
    "mlm_loss": "labels",
    "nsp_loss": "next_sentence_label",
    "sop_loss": "sentence_order_label",
    "sbo_loss": "sbo_labels",
    "rtd_loss": "attention_mask",
}


@pytest.mark.parametrize("cell", CELLS, ids=cell_id)
def test_cell_losses_follow_every_count_path(cell, corpus, tokenizers):
    """Issue 40, item 3: each component against its local mean (which test_loss_references.py compares with the
    papers' definitions) on every path of `step_mean`. The stock Trainer passes one int, the step's masked tokens
    N: every component is then its sum / N, i.e. its local mean x (this micro-batch's masked tokens / N), and so is
    the total. BertologyTrainer's dict: each sum over its own key's count; a dict without a loss's key falls back
    to the int rule with the dict's `labels`. Tested for plain BERT only before."""
    recipe, collator, features = setup(cell, corpus, tokenizers)
    batch = collator(features)
    torch.manual_seed(0)
    model = recipe.build_model().train()

    def forward(counts):
        torch.manual_seed(5)  # RTD without sample keys would draw its noise here
        with torch.no_grad():
            return model(**batch, num_items_in_batch=counts)

    local = forward(None)
    names = [name for name in COUNT_KEYS if getattr(local, name, None) is not None]
    assert "mlm_loss" in names and len(names) == 1 + bool(set(batch) & {"next_sentence_label", "sentence_order_label",
                                                                        "sbo_labels"}) + ("rtd_logits" in local)  # fmt: skip
    local_counts = {
        "labels": batch["labels"].ne(-100).sum(),
        "next_sentence_label": torch.tensor(len(batch["input_ids"])),
        "sentence_order_label": torch.tensor(len(batch["input_ids"])),
        "sbo_labels": batch["sbo_labels"].ne(-100).sum() if "sbo_labels" in batch else None,
        "attention_mask": batch["attention_mask"].sum(),
    }
    n_masked = local_counts["labels"]
    step = 3 * int(n_masked)  # as if this were one micro-batch of three
    share = n_masked.double() / step

    def close(got, expected, what):
        torch.testing.assert_close(got.double(), expected.double(), rtol=2e-5, atol=1e-7, msg=f"{cell} {what}")

    for counts, path in ((step, "int"), ({"labels": torch.tensor(step)}, "dict without the key")):
        got = forward(counts)
        for name in names:
            close(getattr(got, name), getattr(local, name) * share, f"{path}: {name}")
        close(got.loss, local.loss * share, f"{path}: loss")
    # every key: each component over its own count (its objective's: "ELECTRA 15%" counts the chosen tokens), here
    # (i + 2) x the local count of the i-th key
    key_of = {**COUNT_KEYS, **{f"{o.name}_loss": o.count_key for o in model.objectives if hasattr(o, "count_key")}}
    keys = list(dict.fromkeys(key_of[name] for name in names))
    counts = {key: (i + 2) * local_counts[key] for i, key in enumerate(keys)}
    got = forward(counts)
    for name in names:
        close(getattr(got, name), getattr(local, name) / (keys.index(key_of[name]) + 2), f"dict: {name}")
    got = forward({key: 2 * local_counts[key] for key in keys})
    close(got.loss, local.loss / 2, "dict: loss")


def _generator_only(model) -> dict[str, torch.nn.Parameter]:
    shared = {id(p) for name, p in model.named_parameters() if not name.startswith("generator.")}
    return {n: p for n, p in model.generator.named_parameters() if id(p) not in shared and p.requires_grad}


@pytest.mark.parametrize("cell", RTD_CELLS, ids=cell_id)
def test_rtd_sends_nothing_into_generator_only_weights(cell, corpus, tokenizers):
    recipe, collator, features = setup(cell, corpus, tokenizers)
    torch.manual_seed(0)
    model = recipe.build_model().train()
    torch.manual_seed(1)
    out = model(**collator(features))
    out.rtd_loss.backward(retain_graph=True)
    generator_only = _generator_only(model)
    assert generator_only, "the generator has weights of its own"
    for name, param in generator_only.items():
        assert param.grad is None or not param.grad.any(), f"RTD reached generator.{name}"
    disc_grads = [p.grad for n, p in model.named_parameters() if not n.startswith("generator.") and p.requires_grad]
    assert any(g is not None and g.any() for g in disc_grads)
    if recipe.config.embedding_sharing == "gdes":  # the residual takes RTD, the generator's table MLM only
        assert model.gdes.delta.grad.any()
        model.zero_grad()
        out.mlm_loss.backward()
        assert model.gdes.delta.grad is None or not model.gdes.delta.grad.any()
        assert model.generator.get_input_embeddings().weight.grad.any()


def test_sharing_modes_on_another_encoder(tmp_path, corpus, tokenizers):
    """ES ties the tables, NES keeps two, GDES saves E_G + Δ as the discriminator's table."""
    es = get_recipe("deberta-v3-tiny@roberta", embedding_sharing="es").build_model()
    assert es.generator.roberta.embeddings.word_embeddings.weight is es.roberta.embeddings.word_embeddings.weight
    assert es.generator.lm_head.decoder.weight is es.roberta.embeddings.word_embeddings.weight
    nes = get_recipe("deberta-v3-tiny@roberta", embedding_sharing="nes").build_model()
    assert nes.generator.roberta.embeddings.word_embeddings.weight is not nes.roberta.embeddings.word_embeddings.weight
    assert nes.generator.lm_head.decoder.weight is nes.generator.roberta.embeddings.word_embeddings.weight
    gdes = get_recipe("deberta-v3-tiny@roberta").build_model()
    with torch.no_grad():
        gdes.gdes.delta.normal_()
    state = gdes.state_dict()
    expected = gdes.generator.roberta.embeddings.word_embeddings.weight + gdes.gdes.delta
    torch.testing.assert_close(state["roberta.embeddings.word_embeddings.weight"], expected)


@pytest.mark.parametrize("backbone", ["bert", "roberta", "albert", "electra", "modernbert"])
def test_deberta_v3_objective_uses_debertas_cls_head(backbone):
    """The DeBERTa-v3 objective's discriminator head is its own `mask_predictions` (microsoft/DeBERTa
    replaced_token_detection_model.py:41-49: LayerNorm(h_[CLS] + h_i) -> dense -> act -> logit), not ELECTRA's;
    checked against torch.nn.functional. ELECTRA's objective keeps ELECTRA's head."""
    import torch.nn.functional as F

    torch.manual_seed(0)
    model = get_recipe("deberta-v3-tiny", backbone=backbone).build_model().eval()
    assert not hasattr(model, "discriminator_predictions")
    head = model.mask_predictions
    hidden = torch.randn(2, 5, model.config.hidden_size, generator=torch.Generator().manual_seed(0))
    states = F.layer_norm(
        hidden[:, :1] + hidden, hidden.shape[-1:], head.LayerNorm.weight, head.LayerNorm.bias, head.LayerNorm.eps
    )
    states = head.transform_act_fn(F.linear(states, head.dense.weight, head.dense.bias))
    torch.testing.assert_close(head(hidden), F.linear(states, head.classifier.weight, head.classifier.bias)[..., 0])
    electra = get_recipe("electra-tiny", backbone=backbone).build_model()
    assert hasattr(electra, "discriminator_predictions") and not hasattr(electra, "mask_predictions")


@pytest.mark.parametrize("backbone", ["bert", "roberta", "albert", "electra"])
def test_gdes_shares_the_position_table_on_another_encoder(backbone, corpus, tokenizers):
    """GDES shares the absolute position table as the word table (rtd_task.py:59-64,120-122): RTD trains Δ_P and not
    P_G, MLM trains P_G and not Δ_P, the saved table is P_G + Δ_P and plain transformers' backbone reads the same."""
    recipe, collator, features = setup(("deberta-v3", backbone), corpus, tokenizers)
    torch.manual_seed(0)
    model = recipe.build_model().train()
    prefix = model.base_model_prefix
    positions = model.generator.base_model.embeddings.position_embeddings.weight
    assert not model.base_model.embeddings.position_embeddings.weight.requires_grad
    batch = collator(features)
    torch.manual_seed(1)
    out = model(**batch)
    out.rtd_loss.backward(retain_graph=True)
    assert model.gdes_positions.delta.grad.any() and (positions.grad is None or not positions.grad.any())
    model.zero_grad()
    out.mlm_loss.backward()
    assert positions.grad.any()
    assert model.gdes_positions.delta.grad is None or not model.gdes_positions.delta.grad.any()
    model.eval()
    with torch.no_grad():
        model.gdes_positions.delta.normal_(std=0.1)
        model.gdes.delta.normal_(std=0.1)
        hidden = model.discriminate(batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    state = model.state_dict()
    torch.testing.assert_close(
        state[f"{prefix}.embeddings.position_embeddings.weight"], positions + model.gdes_positions.delta
    )
    plain = type(model.base_model)(model.base_model.config).eval()  # the family's own class, fresh
    plain.load_state_dict({k[len(prefix) + 1 :]: v for k, v in state.items() if k.startswith(f"{prefix}.")})
    with torch.no_grad():
        plain_hidden = plain(batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    torch.testing.assert_close(plain_hidden, hidden, atol=1e-5, rtol=1e-4)


def test_a_familys_own_token_types_are_kept(caplog):
    """No silent change of type_vocab_size: RoBERTa keeps 1 and DeBERTa 0 under objectives without segments; an
    objective whose examples have two segments raises it to 2 and says so in one line."""
    assert get_recipe("deberta-v3-tiny@roberta").config.type_vocab_size == 1
    assert get_recipe("roberta-tiny@deberta").config.type_vocab_size == 0
    assert get_recipe("deberta-v3-tiny@bert").config.type_vocab_size == 2  # BERT's own
    from hf_bertology.utils import logger

    logger.addHandler(caplog.handler)  # our logger may not propagate to the root (set_verbosity)
    try:
        with caplog.at_level("WARNING", logger="hf_bertology"):
            assert get_recipe("electra-tiny@roberta").config.type_vocab_size == 2
    finally:
        logger.removeHandler(caplog.handler)
    lines = sorted({r.getMessage() for r in caplog.records if "token type" in r.getMessage()})
    assert lines == [
        "electra-tiny@roberta: the electra_segments examples have two segments and roberta has 1 token type(s): type_vocab_size=2"
    ]
    assert get_recipe("electra-tiny@roberta", type_vocab_size=3).config.type_vocab_size == 3


@pytest.mark.parametrize("cell", PACKABLE_CELLS, ids=cell_id)
def test_cell_padding_free_equals_padded(cell, corpus, tokenizers):
    recipe, collator, features = setup(cell, corpus, tokenizers)
    padded = collator(features)
    flat = flatten_batch(padded)
    torch.manual_seed(0)
    model = set_attention(recipe.build_model(), PACKED_ATTENTION).train()

    class _Args:
        average_tokens_across_devices, world_size = False, 1

    host = type("Host", (), {"model_accepts_loss_kwargs": True, "args": _Args()})()
    counts = BertologyTrainer._get_num_items_in_batch(host, [padded], torch.device("cpu"))
    results = []
    for batch in (padded, flat):
        model.zero_grad(set_to_none=True)
        torch.manual_seed(11)
        output = model(**batch, num_items_in_batch=counts)
        output.loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results.append((output, grads))
    assert_same_step(*results)


@pytest.mark.parametrize("cell", PACKABLE_CELLS, ids=cell_id)
def test_cell_no_example_sees_another_in_a_packed_row(cell, corpus, tokenizers):
    """Leakage by gradient through the whole model: example j's loss depends on no other example's tokens."""
    recipe, collator, features = setup(cell, corpus, tokenizers)
    flat = flatten_batch(collator(features))
    torch.manual_seed(0)
    model = use_padding_free(recipe.build_model()).eval()
    cu = flat["cu_seq_lens_q"].long()
    table = model.base_model.get_input_embeddings()
    embeds = table(flat["input_ids"]).detach().requires_grad_(True)  # (1, T, E)
    keys = ("token_type_ids", "position_ids", "cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")
    inputs = backbone_inputs(model.base_model, None, {key: flat[key] for key in keys if key in flat})
    hidden = model.base_model(inputs_embeds=embeds, **inputs).last_hidden_state  # (1, T, H)
    probe = torch.randn(hidden.shape[1:], generator=torch.Generator().manual_seed(0))
    for j in range(len(cu) - 1):
        # a random projection, not `.sum()`: the final LayerNorm makes the sum's gradient vanish (to rounding)
        probed = (hidden[0, cu[j] : cu[j + 1]] * probe[cu[j] : cu[j + 1]]).sum()
        (grad,) = torch.autograd.grad(probed, embeds, retain_graph=True)
        touched = grad[0].abs().sum(-1) > 0
        inside = torch.zeros_like(touched)
        inside[cu[j] : cu[j + 1]] = True
        assert touched[inside].all() and not touched[~inside].any(), f"example {j}"


# -- through `bertology pretrain`, then plain transformers -------------------------------------------------------


@pytest.fixture(scope="module")
def cli_corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("composed") / "corpus.txt")


@pytest.mark.parametrize("cell", CELLS, ids=cell_id)
def test_cell_pretrains_and_plain_transformers_loads_it(cell, cli_corpus, tmp_path):
    objective, backbone = cell
    out = tmp_path / "out"
    argv = pretrain_argv(f"{objective}-tiny", cli_corpus, out, "--backbone", backbone, "--max_steps", "2")
    pretrain.main([*argv, "--do_train", "--do_eval"])
    results = json.loads((out / "all_results.json").read_text())
    assert torch.isfinite(torch.tensor(results["train_loss"]))
    # evaluated with every head the cell has (a forward names every head's labels, a batch carries its own)
    assert torch.isfinite(torch.tensor([results["eval_loss"], results["eval_mlm_loss"], results["perplexity"]])).all()
    config = json.loads((out / "config.json").read_text())
    recipe = get_recipe(f"{objective}-tiny", backbone=backbone)
    rtd = recipe.config.writes_joint_type  # a generator (RTD, Replace MLM)
    # two networks: a model_type of its own (plain transformers refuses the folder); the discriminator/ is plain
    family = f"bertology-rtd-{recipe.config.model_type}-joint" if rtd else recipe.config.model_type
    assert config["model_type"] == family and config["objective"] == objective
    ours = recipe.model_class.from_pretrained(out).eval()
    assert ours.config.model_type == recipe.config.model_type
    ids = torch.randint(5, ours.config.vocab_size, (2, 9))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    plain_class = AutoModel if rtd else AutoModelForMaskedLM
    plain, info = plain_class.from_pretrained(out / "discriminator" if rtd else out, output_loading_info=True)
    assert type(plain).__module__.startswith("transformers.models.")
    assert info["missing_keys"] == set() or info["missing_keys"] == [], info["missing_keys"]
    with torch.no_grad():
        if rtd:  # the discriminator (under GDES: the saved table is E_G + Δ)
            theirs = plain.eval()(input_ids=ids, attention_mask=mask).last_hidden_state
            mine = ours.discriminate(ids, attention_mask=mask).last_hidden_state
        else:
            theirs = plain.eval()(input_ids=ids, attention_mask=mask).logits
            mine = ours(input_ids=ids, attention_mask=mask).logits
    torch.testing.assert_close(mine[mask.bool()], theirs[mask.bool()], rtol=1e-4, atol=1e-4)


REMOTE = textwrap.dedent(
    """
    import json, sys
    sys.modules["hf_bertology"] = None  # hf_bertology cannot be imported in this process
    import torch
    from transformers import AutoModelForPreTraining
    model = AutoModelForPreTraining.from_pretrained(sys.argv[1], trust_remote_code=True)
    ids = torch.tensor([[2, 7, 8, 9, 10, 3]])
    labels = torch.full_like(ids, -100)
    labels[0, 2] = 8
    torch.manual_seed(0)
    print(json.dumps({"class": type(model).__name__, "loss": model(input_ids=ids, labels=labels).loss.item()}))
    """
)


@pytest.mark.parametrize("cell", [("spanbert", "albert"), ("deberta-v3", "electra")], ids=cell_id)
def test_cell_loads_with_remote_code_without_hf_bertology(cell, cli_corpus, tmp_path):
    out = tmp_path / "out"
    # the README's `--recipe NAME@BACKBONE` form (the other tests pass --backbone)
    pretrain.main(pretrain_argv(f"{cell[0]}-tiny@{cell[1]}", cli_corpus, out, "--max_steps", "1"))
    result = subprocess.run(
        [sys.executable, "-c", REMOTE, str(out)], env=subprocess_env(PYTHONPATH=""), capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-2000:]
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert loaded["class"] == get_recipe(f"{cell[0]}-tiny", backbone=cell[1]).model_class.__name__
    assert torch.isfinite(torch.tensor(loaded["loss"]))


@pytest.mark.parametrize("recipe_name", ["electra-tiny@albert", "deberta-v3-tiny@roberta"])
def test_export_writes_either_network_of_an_rtd_cell_as_plain_transformers(recipe_name, cli_corpus, tmp_path):
    """`bertology export --part generator|discriminator` on an RTD objective on another encoder (ES on ALBERT, GDES
    on RoBERTa): the family's `*ForMaskedLM` and base model, plain configs, nothing missing, the joint model's
    outputs (the discriminator's under GDES from the merged table E_G + Δ)."""
    from hf_bertology import cli

    out = tmp_path / "joint"
    pretrain.main(pretrain_argv(recipe_name, cli_corpus, out, "--max_steps", "2"))
    recipe = get_recipe(recipe_name)
    joint = recipe.model_class.from_pretrained(out).eval()
    ids = torch.randint(5, joint.config.vocab_size, (2, 9))
    for part, plain_class in (("generator", AutoModelForMaskedLM), ("discriminator", AutoModel)):
        assert cli.main(["export", "--part", part, str(out), str(tmp_path / part)]) == 0
        config = json.loads((tmp_path / part / "config.json").read_text())
        assert "auto_map" not in config and "objective" not in config and "embedding_sharing" not in config
        plain, info = plain_class.from_pretrained(tmp_path / part, output_loading_info=True)
        assert type(plain).__module__.startswith(f"transformers.models.{joint.config.model_type.replace('-', '_')}")
        # the generator ships the seeded pooler its family's AutoModel builds (as roberta-base does), which the masked
        # LM leaves unused: the only key it may skip
        unused = {key for key in info["unexpected_keys"] if ".pooler." not in key or part != "generator"}
        assert not info["missing_keys"] and not unused, info
        with torch.no_grad():
            if part == "generator":
                mine, theirs = joint.generator(input_ids=ids).logits, plain.eval()(input_ids=ids).logits
            else:
                mine = joint.discriminate(ids).last_hidden_state
                theirs = plain.eval()(input_ids=ids).last_hidden_state
        torch.testing.assert_close(theirs, mine, rtol=1e-5, atol=1e-5)
    assert (tmp_path / "generator" / "tokenizer_config.json").is_file()


def test_export_part_reads_the_kind_of_checkpoint(cli_corpus, tmp_path, capsys):
    """`--part` on a paper ELECTRA checkpoint writes what `--electra-part` writes; a masked-LM cell has no generator."""
    from hf_bertology import cli

    electra = tmp_path / "electra"
    pretrain.main(pretrain_argv("electra-tiny", cli_corpus, electra, "--max_steps", "1"))
    assert cli.main(["export", "--part", "generator", str(electra), str(tmp_path / "a")]) == 0
    assert cli.main(["export", "--electra-part", "generator", str(electra), str(tmp_path / "b")]) == 0
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == (tmp_path / "b" / "model.safetensors").read_bytes()
    mlm = tmp_path / "mlm"
    pretrain.main(pretrain_argv("bert-tiny@roberta", cli_corpus, mlm, "--max_steps", "1"))
    assert cli.main(["export", "--part", "generator", str(mlm), str(tmp_path / "c")]) == 2
    assert "has no generator" in capsys.readouterr().err


@pytest.mark.parametrize("cell", ["bert-tiny@roberta", "spanbert-tiny@albert", "electra-tiny@bert", "albert-tiny"])
def test_a_cell_is_built_from_its_objective_list(cell):
    """No objective comes by inheritance: a cell's objectives are its config's list, in that order, each an
    `Objective` module that registers no parameter (its heads are the model's, under the plain names)."""
    from hf_bertology.models.objective import Objective

    model = get_recipe(cell).build_model()
    names = {"masked_lm": "MaskedLM", "sentence_task": "SentenceTask", "span_boundary": "SpanBoundary"}
    names.update(generator="Generator", replaced_token_detection="ReplacedTokenDetection")
    if hasattr(model.config, "objectives"):
        assert [type(o).__name__ for o in model.objectives] == [names[n] for n in model.config.objectives]
    assert all(isinstance(o, Objective) and not list(o.parameters()) for o in model.objectives)
    assert not any(isinstance(m, Objective) for m in model.modules())  # not registered: no state-dict key
