"""XLNet: permutation collator (valid factorisation, spans, rates), leakage, equivalence with transformers, memory
across batches, segment layout, recipes, and the `bertology pretrain` smoke test with plain-transformers loading."""

from __future__ import annotations

import math
import random
import subprocess
import sys
import textwrap

import datasets
import numpy as np
import pytest
import torch
from transformers import TrainingArguments, XLNetLMHeadModel, XLNetModel, XLNetTokenizer

import hf_bertology as hb
from hf_bertology.collators.permutation import sample_spans
from hf_bertology.data import build_xlnet_segments, tokenize_corpus
from hf_bertology.training.pretrain import main
from hf_bertology.training.xlnet_trainer import StreamBatches, XLNetTrainer

WORDS = (
    "the of and to in a is was that for on as with by he it at from his an were are which this be or has had "
    "not but first one their its new after who they have her she two been other when there all during into "
    "school time may years more most only over city some world would where later up such used many can state "
    "about national out known university united then made however between government series music"
).split()


def make_text(num_docs: int = 30, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    docs = []
    for _ in range(num_docs):
        sentences = []
        for _ in range(rng.randint(3, 8)):
            words = [rng.choice(WORDS) for _ in range(rng.randint(4, 14))]
            sentences.append(" ".join(words).capitalize() + ".")
        docs.append(" ".join(sentences))
    return docs


@pytest.fixture(scope="module")
def tokenizer():
    return hb.get_recipe("xlnet-tiny").train_tokenizer(make_text(), vocab_size=200)


def tiny_config(tokenizer, **overrides):
    recipe = hb.get_recipe("xlnet-tiny", **overrides)
    return recipe.adapt_to_tokenizer(tokenizer)


def features(tokenizer, lengths, seed=0):
    """XLNet-layout features `A <sep> B <sep> <cls>` of the given total lengths (odd ones included)."""
    rng = random.Random(seed)
    out = []
    for length in lengths:
        text = " ".join(rng.choice(WORDS) for _ in range(length))
        ids = tokenizer(text, add_special_tokens=False)["input_ids"][: length - 3]
        cut = rng.randint(1, len(ids) - 1)
        encoded = tokenizer(
            tokenizer.decode(ids[:cut]), tokenizer.decode(ids[cut:]), return_token_type_ids=True, verbose=False
        )
        out.append({"input_ids": encoded["input_ids"][:length], "token_type_ids": encoded["token_type_ids"][:length]})
    return out


# -- tokenizer ----------------------------------------------------------------------------------------------------
def test_tokenizer_is_xlnet_with_official_special_ids(tokenizer):
    assert isinstance(tokenizer, XLNetTokenizer)
    ids = {name: getattr(tokenizer, f"{name}_token_id") for name in ("unk", "bos", "eos", "cls", "sep", "pad", "mask")}
    assert ids == {"unk": 0, "bos": 1, "eos": 2, "cls": 3, "sep": 4, "pad": 5, "mask": 6}
    assert tokenizer.convert_tokens_to_ids(["<eod>", "<eop>"]) == [7, 8]
    assert tokenizer.padding_side == "left"
    encoded = tokenizer("One two.", "Three.", return_token_type_ids=True)
    assert encoded["input_ids"][-1] == 3 and encoded["token_type_ids"][-1] == 2
    assert tokenizer.tokenize("The")[0].startswith("▁T")  # cased


# -- collator: factorisation ------------------------------------------------------------------------------------
def check_factorisation(batch, tokenizer, reuse_len=0):
    perm, real = batch["perm_mask"], batch["attention_mask"].bool()
    sees = perm == 0
    tm, labels, ids = batch["target_mapping"], batch["labels"], batch["input_ids"]
    for b in range(ids.shape[0]):
        target = tm[b].sum(0).bool()
        functional = real[b] & torch.isin(ids[b], torch.tensor([tokenizer.sep_token_id, tokenizer.cls_token_id]))
        context = real[b] & ~target & ~functional
        ordered = target | functional
        s = sees[b]
        assert not (target & ~real[b]).any(), "padding is never a target"
        assert not s[:, ~real[b]].any(), "padding is never attended"
        assert not (target & functional).any()
        # rows of target_mapping: one per target, in position order, then zero rows; labels aligned, contiguous
        count = int(target.sum())
        positions = tm[b, :count].argmax(1)
        assert torch.equal(positions, target.nonzero().squeeze(1))
        assert torch.equal(tm[b, :count].sum(1), torch.ones(count)) and tm[b, count:].sum() == 0
        assert torch.equal(labels[b, :count], ids[b, positions]) and (labels[b, count:] == -100).all()
        real_index = real[b].long().cumsum(0) - 1
        group = (real_index >= reuse_len) if reuse_len else torch.zeros_like(real[b])
        for g in (False, True):
            members = real[b] & (group == g)
            o = (ordered & members).nonzero().squeeze(1)
            ctx = context & members
            # ordered tokens: "i sees j" (i != j) is a strict total order, antisymmetric and transitive
            before = s[o][:, o].clone()
            diag = before.diagonal().clone()
            assert torch.equal(diag, functional[o]), "targets never see themselves; <sep>/<cls> do"
            before.fill_diagonal_(False)
            n = len(o)
            assert not (before & before.T).any(), "antisymmetric"
            assert torch.equal(before | before.T, ~torch.eye(n, dtype=torch.bool)), "total"
            assert not ((before.float() @ before.float() > 0) & ~before).any(), "transitive"
            # targets and functional tokens see every context token of their group; context never sees them
            assert s[o][:, ctx].all()
            assert s[ctx][:, ctx].all() and not s[ctx][:, o].any()
        if reuse_len:
            first, second = real[b] & ~group, real[b] & group
            assert not s[first][:, second].any(), "the reuse part never sees the rest"
            assert s[second][:, first].all(), "the rest sees all of the reuse part"
    # the content stream keeps the real tokens: no <mask> anywhere
    assert not (ids == tokenizer.mask_token_id).any()


@pytest.mark.parametrize("reuse_len", [0, 9])
def test_perm_mask_is_a_valid_factorisation(tokenizer, reuse_len):
    lengths = [31, 47, 64, 17, 63, 40]  # odd lengths and padding
    feats = features(tokenizer, lengths)
    collator = hb.DataCollatorForPermutationLM(tokenizer, num_predict=None, reuse_len=reuse_len, seed=1)
    batch = collator(feats)
    assert batch["input_ids"].shape[1] == max(len(f["input_ids"]) for f in feats)
    for row, f in enumerate(feats):  # left padding, ids unchanged
        n = len(f["input_ids"])
        assert batch["input_ids"][row, -n:].tolist() == f["input_ids"]
        assert batch["attention_mask"][row].sum() == n and batch["attention_mask"][row, -n:].all()
    check_factorisation(batch, tokenizer, reuse_len)


def test_perm_size_orders_blocks(tokenizer):
    feats = features(tokenizer, [64] * 4)
    batch = hb.DataCollatorForPermutationLM(tokenizer, num_predict=None, perm_size=16, seed=2)(feats)
    check_factorisation(batch, tokenizer)
    sees = batch["perm_mask"] == 0
    for b in range(4):
        target = batch["target_mapping"][b].sum(0).bool().nonzero().squeeze(1)
        for i in target:
            for j in target:
                if i // 16 < j // 16:  # earlier blocks come first in the order
                    assert sees[b, j, i] and not sees[b, i, j]


def test_target_share_spans_and_whole_words(tokenizer):
    texts = make_text(60, seed=3)
    encoded = tokenizer(texts, truncation=True, max_length=120)
    feats = [
        {"input_ids": ids, "word_starts": [int(w is None or w != p) for w, p in zip(e.word_ids, [None, *e.word_ids])]}
        for ids, e in zip(encoded["input_ids"], encoded.encodings)
    ]
    collator = hb.DataCollatorForPermutationLM(tokenizer, num_predict=None, seed=4)
    real_total = target_total = 0
    for _ in range(5):
        batch = collator(feats)
        target = batch["target_mapping"].sum(1).bool()
        real = batch["attention_mask"].bool()
        real_total += int(real.sum())
        target_total += int(target.sum())
        # whole words: a word's tokens are all targets or none
        padded = torch.zeros_like(target)
        for row, f in enumerate(feats):
            padded[row, -len(f["word_starts"]) :] = torch.tensor(f["word_starts"], dtype=torch.bool)
        word_id = (padded | ~real).long().cumsum(1)
        for row in range(len(feats)):
            for w in word_id[row, real[row]].unique():
                in_word = target[row, (word_id[row] == w) & real[row]]
                assert in_word.all() or not in_word.any()
    assert abs(target_total / real_total - 1 / 6) < 0.02


def test_span_lengths_follow_one_over_n():
    """Raw spans: n ~ 1/n on 1..5 (mean 2.190 words) in contexts of 6n, so 1/6 of the words are targets."""
    generator = torch.Generator().manual_seed(0)
    span = sample_spans(torch.full((64,), 512), 512, 6.0, 5, generator)  # (64, 512) span id per word
    targets = span >= 0
    sizes = torch.zeros(64, int(span.max()) + 1, dtype=torch.long).scatter_add_(1, span.clamp(min=0), targets.long())
    sizes = sizes[sizes > 0]
    expected_mean = 5 / sum(1 / n for n in range(1, 6))
    assert sizes.max() <= 5 and abs(sizes.float().mean().item() - expected_mean) < 0.06
    for n in range(1, 6):  # p(n) ∝ 1/n within 0.02 (the last span of a row may be cut short: a small bias to 1)
        share = (sizes == n).float().mean().item()
        assert abs(share - (1 / n) / sum(1 / k for k in range(1, 6))) < 0.02
    assert abs(targets.float().mean().item() - 1 / 6) < 0.01


def test_budget_is_exact_and_capped(tokenizer):
    feats = features(tokenizer, [64, 61, 50])
    batch = hb.DataCollatorForPermutationLM(tokenizer, num_predict=None, seed=5)(feats)
    counts = batch["target_mapping"].sum((1, 2))
    assert counts.tolist() == [round(64 / 6), round(61 / 6), round(50 / 6)]
    capped = hb.DataCollatorForPermutationLM(tokenizer, num_predict=7, seed=5)(feats)
    assert capped["target_mapping"].shape[1] == 7 and capped["target_mapping"].sum((1, 2)).tolist() == [7, 7, 7]


def test_seeded_collator_is_reproducible(tokenizer):
    feats = features(tokenizer, [40, 33])
    one = hb.DataCollatorForPermutationLM(tokenizer, seed=7)(feats)
    two = hb.DataCollatorForPermutationLM(tokenizer, seed=7)(feats)
    assert all(torch.equal(one[k], two[k]) for k in one)


# -- model ----------------------------------------------------------------------------------------------------------
def collated(tokenizer, config, lengths=(31, 47, 64), reuse_len=0, seed=0):
    collator = hb.DataCollatorForPermutationLM.from_config(config, tokenizer, reuse_len=reuse_len, seed=seed)
    return collator(features(tokenizer, lengths, seed=seed))


def test_no_leakage_through_either_stream(tokenizer):
    """d logits(target) / d embedding(j) is zero wherever perm_mask forbids j (and across rows), nonzero for some
    allowed j: the two-stream attention with our perm_mask never lets a target see itself or a later target."""
    torch.manual_seed(0)
    config = tiny_config(tokenizer, dropout=0.0)
    model = hb.BertologyXLNetForPreTraining(config).eval()
    batch = collated(tokenizer, config, reuse_len=12)
    embeds = model.transformer.word_embedding(batch["input_ids"]).detach().requires_grad_(True)
    inputs = {k: batch[k] for k in ("attention_mask", "perm_mask", "target_mapping", "token_type_ids")}
    logits = model(inputs_embeds=embeds, **inputs).logits  # (B, P, V)
    probe = torch.randn(logits.shape[-1])
    checked = 0
    for b in range(logits.shape[0]):
        for row in range(int((batch["labels"][b] != -100).sum())):
            (grad,) = torch.autograd.grad(logits[b, row] @ probe, embeds, retain_graph=True)
            reach = grad.abs().sum(-1) > 0  # (B, L)
            position = int(batch["target_mapping"][b, row].argmax())
            allowed = batch["perm_mask"][b, position] == 0
            assert not reach[torch.arange(len(reach)) != b].any()
            assert not (reach[b] & ~allowed).any(), f"row {b} target {position} sees a forbidden position"
            assert not reach[b, position]
            assert reach[b].any()
            checked += 1
    assert checked >= 15


def test_memory_carries_nothing_about_the_next_segment(tokenizer):
    """The cached states come from the reuse part only, which never attends to the rest of the segment."""
    torch.manual_seed(0)
    config = tiny_config(tokenizer, dropout=0.0)
    model = hb.BertologyXLNetForPreTraining(config).eval()
    batch = collated(tokenizer, config, lengths=(64, 64), reuse_len=config.reuse_len)
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    mems = model(**inputs, use_mems=True).mems
    changed = dict(inputs, input_ids=inputs["input_ids"].clone())
    changed["input_ids"][:, config.reuse_len : -3] = 10  # rewrite the part after the reuse part
    mems_changed = model(**changed, use_mems=True).mems
    assert all(m.shape == (config.reuse_len, 2, config.d_model) for m in mems)
    assert all(torch.equal(a, b) for a, b in zip(mems, mems_changed))


def test_loss_equals_transformers_xlnet_lm_head(tokenizer):
    torch.manual_seed(0)
    config = tiny_config(tokenizer)
    model = hb.BertologyXLNetForPreTraining(config).eval()
    reference = XLNetLMHeadModel(config).eval()
    reference.load_state_dict(model.state_dict())  # strict: raises on any missing or unexpected key
    batch = collated(tokenizer, config, reuse_len=10)
    ours = model(**batch)
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    logits = reference(**inputs).logits  # (B, P, V)
    labels = batch["labels"]
    expected = torch.nn.functional.cross_entropy(logits[labels != -100], labels[labels != -100])
    torch.testing.assert_close(ours.loss, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours.loss, reference(**batch).loss, rtol=1e-5, atol=1e-5)
    assert ours.plm_loss is ours.loss and 0 <= ours.plm_accuracy <= 1
    # normalised by the Trainer's count of targets over the optimizer step
    count = int((labels != -100).sum())
    halved = model(**batch, num_items_in_batch={"labels": torch.tensor(2 * count)})
    torch.testing.assert_close(halved.loss, ours.loss / 2)


def test_checkpoint_keys_match_transformers(tokenizer):
    config = tiny_config(tokenizer)
    model = hb.BertologyXLNetForPreTraining(config)
    assert set(model.state_dict()) == set(XLNetLMHeadModel(config).state_dict())
    assert model.lm_loss.weight is model.transformer.word_embedding.weight  # tied as in XLNetLMHeadModel
    # saved, it loads in plain XLNetLMHeadModel / XLNetModel: tests/test_model_common.py (xlnet)


# -- data ------------------------------------------------------------------------------------------------------------
def tokenized_corpus(tokenizer, num_docs=40, seed=0):
    return tokenize_corpus(datasets.Dataset.from_dict({"text": make_text(num_docs, seed)}), tokenizer)


def test_segments_layout_and_continuity(tokenizer):
    reuse, length = 16, 48
    dataset = build_xlnet_segments(tokenized_corpus(tokenizer), tokenizer, length, reuse_len=reuse, seed=0)
    assert len(dataset) > 10
    sep, cls = tokenizer.sep_token_id, tokenizer.cls_token_id
    rows = dataset[:]
    for ids, types, starts in zip(rows["input_ids"], rows["token_type_ids"], rows["word_starts"]):
        assert len(ids) == len(types) == len(starts) == length
        assert ids[-1] == cls and ids.count(sep) == 2 and ids[-2] == sep
        first_sep = ids.index(sep)
        assert first_sep > reuse
        assert types == [0] * (first_sep + 1) + [1] * (length - first_sep - 2) + [2]
    assert rows["stream_position"] == sorted(rows["stream_position"])
    for current, following in zip(rows["input_ids"], rows["input_ids"][1:]):
        body = [t for t in current[reuse:] if t not in (sep, cls)]
        assert following[:reuse] == body[:reuse], "example k+1's reuse part continues example k's"


def test_stream_batches_continue_slot_by_slot():
    order = np.random.default_rng(0).permutation(14)
    dataset = datasets.Dataset.from_dict({"stream_position": order.tolist(), "x": order.tolist()})
    streams = StreamBatches(dataset, batch_size=2, num_processes=2)  # 4 streams of 3 steps, 2 examples dropped
    assert len(streams) == 12
    items = [streams[i] for i in range(len(streams))]
    steps = [items[k * 4 : (k + 1) * 4] for k in range(3)]
    for k in range(2):
        for slot in range(4):
            assert steps[k + 1][slot]["x"] == steps[k][slot]["x"] + 1  # slot s continues stream s
    # process p's batches (every second batch of 2) hold the streams 2p, 2p+1 at every step
    assert [e["x"] for e in steps[0]] == [0, 3, 6, 9]


def test_trainer_carries_mems_with_gradient_accumulation(tokenizer, tmp_path):
    torch.manual_seed(0)
    config = tiny_config(tokenizer, dropout=0.0)
    reuse = config.reuse_len
    model = hb.BertologyXLNetForPreTraining(config)
    dataset = build_xlnet_segments(tokenized_corpus(tokenizer), tokenizer, 64, reuse_len=reuse, seed=0)
    dataset = dataset.select(range(8)).shuffle(seed=1)  # 2 streams x 4 steps; the trainer restores the order
    calls = []

    def record(module, args, kwargs, output):
        reuse_embedded = module.transformer.word_embedding(kwargs["input_ids"][:, :reuse]).detach()
        calls.append(
            {"ids": kwargs["input_ids"], "mems_in": kwargs.get("mems"), "mems_out": output.mems, "emb": reuse_embedded}
        )

    model.register_forward_hook(record, with_kwargs=True)
    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,
        max_steps=3,
        learning_rate=1e-3,
        remove_unused_columns=False,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
    )
    collator = hb.DataCollatorForPermutationLM.from_config(config, tokenizer)
    trainer = XLNetTrainer(model=model, args=args, train_dataset=dataset, data_collator=collator)
    trainer.train()
    assert len(calls) == 6  # 3 optimizer steps x 2 micro-batches; an epoch is 4 micro-batches
    assert calls[0]["mems_in"] is None and calls[4]["mems_in"] is None  # stream starts: epoch 1 and 2
    for previous, current in [(calls[k - 1], calls[k]) for k in (1, 2, 3, 5)]:
        assert current["mems_in"] is not None
        for given, returned in zip(current["mems_in"], previous["mems_out"]):
            assert torch.equal(given, returned)
        # layer 0's newest memory is the previous segment's reuse-part embeddings (dropout 0), slot by slot
        torch.testing.assert_close(current["mems_in"][0][-reuse:], previous["emb"].transpose(0, 1), rtol=0, atol=0)
    assert calls[3]["mems_in"][0].shape[0] == config.mem_len  # memory grows to mem_len and is cut there
    assert all(torch.equal(calls[k]["ids"], calls[k + 4]["ids"]) for k in range(2))  # same streams, same order


# -- recipes and CLI ------------------------------------------------------------------------------------------------
def test_recipes():
    assert {"xlnet-base", "xlnet-large", "xlnet-mini", "xlnet-tiny"} <= set(hb.list_recipes())
    recipe = hb.get_recipe("xlnet-large")
    c, t = recipe.config, recipe.training_defaults
    assert isinstance(c, hb.BertologyXLNetConfig) and c.model_type == "xlnet" and recipe.tokenizer_type == "unigram"
    assert (c.reuse_len, c.mem_len, c.perm_size, c.num_predict, c.mask_alpha, c.mask_beta) == (256, 384, 256, 85, 6, 1)
    assert (c.max_span_length, recipe.max_seq_length, c.vocab_size, c.bi_data) == (5, 512, 32000, False)
    assert (t["learning_rate"], t["warmup_steps"], t["adam_epsilon"], t["weight_decay"]) == (4e-4, 40_000, 1e-6, 0.01)
    for name, expected in (("xlnet-base", 116_718_336), ("xlnet-large", 360_268_800)):  # docs/recipes/xlnet.md
        with torch.device("meta"):
            backbone = XLNetModel(hb.get_recipe(name).config)
        assert sum(p.numel() for p in backbone.parameters()) == expected
    tiny = hb.get_recipe("xlnet-tiny").config
    assert (tiny.n_layer, tiny.d_model, tiny.n_head, tiny.d_inner, tiny.reuse_len, tiny.mem_len) == (
        2,
        32,
        4,
        37,
        32,
        48,
    )


PLAIN_LOAD = textwrap.dedent(
    """
    import sys
    sys.modules["hf_bertology"] = None  # plain transformers only
    import torch
    from transformers import AutoModel, AutoModelForCausalLM, AutoModelForPreTraining, AutoTokenizer
    path, batch_file, out_file = sys.argv[1:]
    batch = torch.load(batch_file)
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert type(tokenizer).__name__ == "XLNetTokenizer" and tokenizer.padding_side == "left"
    plain, info = AutoModelForPreTraining.from_pretrained(path, output_loading_info=True)
    assert type(plain).__name__ == "XLNetLMHeadModel", type(plain)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    causal = AutoModelForCausalLM.from_pretrained(path)
    base, info = AutoModel.from_pretrained(path, output_loading_info=True)
    assert type(base).__name__ == "XLNetModel" and not info["missing_keys"], info
    remote = AutoModelForPreTraining.from_pretrained(path, trust_remote_code=True)
    assert type(remote).__name__ == "BertologyXLNetForPreTraining", type(remote)
    with torch.no_grad():
        out = {
            "plain": plain.eval()(**batch).logits,
            "causal": causal.eval()(**batch).logits,
            "remote": remote.eval()(**batch).logits,
        }
    torch.save(out, out_file)
    """
)


def test_pretrain_smoke_and_plain_loading(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(make_text(60, seed=5)) + "\n")
    output = tmp_path / "out"
    metrics = main(
        [
            "--recipe", "xlnet-tiny", "--train_file", str(corpus), "--output_dir", str(output),
            "--max_steps", "3", "--vocab_size", "200", "--per_device_train_batch_size", "4",
            "--gradient_accumulation_steps", "2", "--logging_steps", "1", "--save_strategy", "no",
        ]
    )  # fmt: skip
    assert math.isfinite(metrics["train_loss"])
    assert (output / "model.safetensors").exists() and (output / "modeling_xlnet.py").exists()
    assert "permutation LM" in (output / "README.md").read_text()
    model = hb.BertologyXLNetForPreTraining.from_pretrained(output).eval()
    tokenizer = XLNetTokenizer.from_pretrained(output)
    batch = collated(tokenizer, model.config, lengths=(20, 33))
    batch = {k: v for k, v in batch.items() if k != "labels"}
    torch.save(batch, tmp_path / "batch.pt")
    result = subprocess.run(
        [sys.executable, "-c", PLAIN_LOAD, str(output), str(tmp_path / "batch.pt"), str(tmp_path / "logits.pt")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    logits = torch.load(tmp_path / "logits.pt")
    with torch.no_grad():
        ours = model(**batch).logits
    for name in ("plain", "causal", "remote"):
        torch.testing.assert_close(logits[name], ours, rtol=1e-5, atol=1e-5)
