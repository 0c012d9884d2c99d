"""DataCollatorForMaskedLM: exact counts, 80/10/10 split, specials, whole words, dynamic masking, seeding."""

from __future__ import annotations

import pytest
import torch

from hf_bertology import BertologyError, DataCollatorForMaskedLM, get_recipe


@pytest.fixture(scope="module")
def features(bert_tokenizer, texts):
    # ~100k real tokens: every text, several times over, truncated to 64 tokens with [CLS]/[SEP]
    encoded = bert_tokenizer(texts * 30, truncation=True, max_length=64)["input_ids"]
    return [{"input_ids": ids} for ids in encoded]


def collate_all(collator, features, batch_size=256):
    return [collator(features[i : i + batch_size]) for i in range(0, len(features), batch_size)]


def test_exact_count_split_and_specials(bert_tokenizer, features):
    collator = DataCollatorForMaskedLM(bert_tokenizer, seed=0)
    batches = collate_all(collator, features)
    special = torch.tensor(bert_tokenizer.all_special_ids)
    total_tokens = masked = as_mask = 0
    for features_batch, batch in zip([features[i : i + 256] for i in range(0, len(features), 256)], batches):
        originals = torch.nn.utils.rnn.pad_sequence(
            [torch.tensor(f["input_ids"]) for f in features_batch], batch_first=True, padding_value=0
        )
        chosen = batch["labels"].ne(-100)
        n_real = batch["attention_mask"].sum(1)
        expected = torch.round(n_real.double() * 0.15).long().clamp(min=1)
        assert torch.equal(chosen.sum(1), expected)  # exact count per sequence
        assert not (chosen & torch.isin(originals, special)).any()  # specials and padding never chosen
        assert torch.equal(batch["labels"][chosen], originals[chosen])
        replaced = batch["input_ids"][chosen]
        as_mask += int((replaced == bert_tokenizer.mask_token_id).sum())
        assert not torch.isin(replaced[replaced != bert_tokenizer.mask_token_id], special).any()  # non-special
        masked += int(chosen.sum())
        total_tokens += int(n_real.sum())
        assert torch.equal(batch["input_ids"][~chosen], originals[~chosen])  # unchosen positions untouched
    assert total_tokens > 100_000
    assert as_mask / masked == pytest.approx(0.80, abs=0.01)


def test_split_is_80_10_10(bert_tokenizer, features):
    """The three-way split, measured on draws where a random token cannot equal the original by chance."""
    collator = DataCollatorForMaskedLM(bert_tokenizer, seed=1)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(5, len(bert_tokenizer), (2000, 64), generator=generator)
    chosen = torch.rand(ids.shape, generator=generator) < 0.15
    corrupted = collator.corrupt(ids, chosen)
    n = int(chosen.sum())
    to_mask = (corrupted == bert_tokenizer.mask_token_id) & chosen
    unchanged = (corrupted == ids) & chosen
    changed = chosen & ~to_mask & ~unchanged
    # a random token equals the original with probability 1/|non-special vocab|: correct the kept share for it
    p_same = 1 / len(collator._replacements)
    random_share = int(changed.sum()) / n / (1 - p_same)
    assert int(to_mask.sum()) / n == pytest.approx(0.80, abs=0.01)
    assert random_share == pytest.approx(0.10, abs=0.01)
    assert 1 - int(to_mask.sum()) / n - random_share == pytest.approx(0.10, abs=0.01)
    assert not (corrupted != ids)[~chosen].any()


def test_dynamic_masks_differ_between_passes(bert_tokenizer, features):
    collator = DataCollatorForMaskedLM(bert_tokenizer, seed=0)
    first, second = collator(features[:64]), collator(features[:64])
    assert not torch.equal(first["labels"], second["labels"])
    # and the same seed reproduces the same masks
    again = DataCollatorForMaskedLM(bert_tokenizer, seed=0)(features[:64])
    assert torch.equal(first["labels"], again["labels"])


def test_max_predictions_cap(bert_tokenizer, features, texts):
    """Every row predicts exactly min(cap, max(1, round(15% of its real tokens))) tokens (official
    `create_masked_lm_predictions`), rows under the cap and rows at it alike."""
    short = [{"input_ids": ids} for ids in bert_tokenizer(texts[:64], truncation=True, max_length=12)["input_ids"]]
    batch = DataCollatorForMaskedLM(bert_tokenizer, max_predictions_per_seq=3, seed=0)(features[:128] + short)
    n_real = batch["attention_mask"].sum(1)
    expected = torch.round(n_real.double() * 0.15).long().clamp(min=1, max=3)
    assert (expected < 3).sum() >= 10 and (expected == 3).sum() >= 100  # both sides of the cap are exercised
    assert torch.equal(batch["labels"].ne(-100).sum(1), expected)


def test_whole_word_masking_takes_whole_words(bert_tokenizer, texts):
    encoded = bert_tokenizer(texts * 4, truncation=True, max_length=64)
    features = []
    for i, ids in enumerate(encoded["input_ids"]):
        words = encoded.word_ids(i)
        starts = [int(w is None or w != p) for w, p in zip(words, [None, *words[:-1]])]
        features.append({"input_ids": ids, "word_starts": starts})
    collator = DataCollatorForMaskedLM(bert_tokenizer, whole_word_mask=True, seed=0)
    batch = collator(features)
    chosen = batch["labels"].ne(-100)
    n_real = batch["attention_mask"].sum(1)
    budget = torch.round(n_real.double() * 0.15).long().clamp(min=1)
    assert (chosen.sum(1) <= budget).all()
    assert chosen.sum() >= 0.97 * budget.sum()  # whole words rarely leave the count short
    n_multi = 0
    for row, feature in enumerate(features):
        starts = feature["word_starts"]
        for position in range(1, len(starts)):
            if not starts[position]:  # a continuation piece is chosen iff its word start is
                n_multi += 1
                assert chosen[row, position] == chosen[row, position - 1]
    assert n_multi > 100
    # without word_starts the vocabulary ("##") gives the same grouping
    plain = [{"input_ids": f["input_ids"]} for f in features]
    batch = collator(plain)
    chosen = batch["labels"].ne(-100)
    for row, feature in enumerate(features):
        for position in range(1, len(feature["word_starts"])):
            if not feature["word_starts"][position]:
                assert chosen[row, position] == chosen[row, position - 1]


def test_workers_draw_different_masks(bert_tokenizer, features):
    collator = DataCollatorForMaskedLM(bert_tokenizer)  # seed=None: torch's RNG, seeded per worker
    same = [features[0]] * 8
    loader = torch.utils.data.DataLoader([same] * 4, batch_size=None, num_workers=2, collate_fn=collator)
    torch.manual_seed(0)
    labels = [batch["labels"] for batch in loader]
    assert len({tuple(label.flatten().tolist()) for label in labels}) == 4
    torch.manual_seed(0)
    assert all(torch.equal(a["labels"], b) for a, b in zip(loader, labels))  # reproducible from the main seed


def test_from_config_reads_the_recipe(bert_tokenizer):
    recipe = get_recipe("bert-tiny", mlm_probability=0.2, max_predictions_per_seq=7)
    collator = recipe.build_collator(bert_tokenizer)
    assert isinstance(collator, DataCollatorForMaskedLM)
    assert (collator.mlm_probability, collator.max_predictions_per_seq) == (0.2, 7)
    assert (collator.mask_replace_prob, collator.random_replace_prob) == (0.8, 0.1)


def test_tokenizer_without_mask_token_is_a_clear_error(bert_tokenizer):
    import copy

    tokenizer = copy.deepcopy(bert_tokenizer)
    tokenizer.mask_token = None
    with pytest.raises(BertologyError, match="no mask token"):
        DataCollatorForMaskedLM(tokenizer)


def test_pass_through_keys_and_padding(bert_tokenizer):
    features = [
        {"input_ids": [2, 10, 11, 3, 12, 3], "token_type_ids": [0, 0, 0, 0, 1, 1], "next_sentence_label": 1},
        {"input_ids": [2, 10, 3, 12, 3], "token_type_ids": [0, 0, 0, 1, 1], "next_sentence_label": 0},
    ]
    batch = DataCollatorForMaskedLM(bert_tokenizer, seed=0, pad_to_multiple_of=8)(features)
    assert batch["input_ids"].shape == (2, 8)
    assert batch["attention_mask"].tolist() == [[1] * 6 + [0] * 2, [1] * 5 + [0] * 3]
    assert batch["token_type_ids"][0].tolist() == [0, 0, 0, 0, 1, 1, 0, 0]
    assert batch["next_sentence_label"].tolist() == [1, 0]
    assert set(batch) == {"input_ids", "attention_mask", "token_type_ids", "next_sentence_label", "labels"}


def test_whole_words_when_a_row_starts_mid_word(bert_tokenizer):
    features = [{"input_ids": [40, 41, 42, 43, 44, 45, 46, 47], "word_starts": [0, 0, 1, 0, 1, 1, 0, 1]}] * 4
    batch = DataCollatorForMaskedLM(bert_tokenizer, whole_word_mask=True, mlm_probability=0.5, seed=0)(features)
    chosen = batch["labels"].ne(-100)
    assert chosen.sum(1).tolist() == [4, 4, 4, 4]
    assert (chosen[:, 0] == chosen[:, 1]).all() and (chosen[:, 2] == chosen[:, 3]).all()
