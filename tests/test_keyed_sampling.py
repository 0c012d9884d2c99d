"""RTD's generator samples with noise keyed by (seed, epoch, example, position) (issue 30, item 5).

The collator hands the model one int64 key per token (`sample_keys`, from the same counter-based draws as the
masks); the Gumbel noise of a sampled token is a hash of its key and the vocabulary index. So a row's replacements
are the same whether it is sampled in the whole batch or in a half of it (two processes), at the real temperature
1, and they still follow the generator's softmax. tests/test_multiprocess.py checks two processes against one.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from scipy import stats

from hf_bertology.data import build_pretraining_dataset, load_corpus, tokenize_corpus
from hf_bertology.models.replaced_token_detection import gumbel_sample, keyed_uniform
from hf_bertology.recipes import get_recipe
from platform_support import no_dropout


def test_keyed_noise_is_uniform_and_a_function_of_the_key():
    keys = torch.arange(-3000, 3000, dtype=torch.long) * 1_000_003
    noise = keyed_uniform(keys, 50)  # (6000, 50)
    assert noise.dtype == torch.float32 and 0 <= noise.min() and noise.max() < 1
    assert stats.kstest(noise.flatten().numpy(), "uniform").pvalue > 1e-3
    # neighbouring keys and vocabulary entries are uncorrelated
    assert abs(np.corrcoef(noise[:-1].flatten(), noise[1:].flatten())[0, 1]) < 0.02
    assert abs(np.corrcoef(noise[:, :-1].flatten(), noise[:, 1:].flatten())[0, 1]) < 0.02
    torch.testing.assert_close(keyed_uniform(keys[100:200], 50), noise[100:200], rtol=0, atol=0)


def test_keyed_samples_follow_the_softmax():
    """20k keyed draws from one distribution over 6 tokens: chi-square against softmax(logits), p > 1e-3."""
    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, -3.0])
    keys = torch.arange(20_000, dtype=torch.long) * 7919 + 11
    samples = gumbel_sample(logits.expand(len(keys), -1), 1.0, keys)
    observed = torch.bincount(samples, minlength=6).numpy()
    expected = logits.softmax(-1).double().numpy() * len(keys)
    assert stats.chisquare(observed, expected).pvalue > 1e-3, (observed, expected.round())


@pytest.fixture(scope="module")
def corpus(corpus_file):
    return load_corpus(train_files=[str(corpus_file)])


@pytest.mark.parametrize("name", ["electra-tiny", "deberta-v3-tiny", "electra-tiny@bert"])
def test_a_row_samples_alike_in_the_whole_batch_and_in_a_half(name, corpus):
    recipe_name, _, backbone = name.partition("@")
    recipe = get_recipe(recipe_name, **({"backbone": backbone} if backbone else {}), **no_dropout(name))
    assert recipe.config.sampling_temperature == 1.0
    tokenizer = recipe.train_tokenizer(corpus["text"], 300)
    recipe.adapt_to_tokenizer(tokenizer)
    recipe.fit_to_length(48)
    examples = build_pretraining_dataset(tokenize_corpus(corpus, tokenizer), tokenizer, recipe.config, 48, 0)
    batch = recipe.build_collator(tokenizer, seed=3)([examples[i] for i in range(6)])
    assert batch["sample_keys"].shape == batch["input_ids"].shape
    torch.manual_seed(0)
    model = recipe.build_model().eval()
    # every RTD step samples through `replaced_token_detection.fake_data`, which calls this module's `gumbel_sample`
    module = sys.modules["hf_bertology.models.replaced_token_detection"]
    original, seen = module.gumbel_sample, []
    module.gumbel_sample = lambda *args, **kwargs: seen.append(original(*args, **kwargs)) or seen[-1]
    try:
        with torch.no_grad():
            torch.manual_seed(1)
            model(**batch)
            for half in (slice(0, 3), slice(3, 6)):
                torch.manual_seed(2)  # another random state: the keys alone decide
                model(**{k: v[half] for k, v in batch.items()})
            torch.manual_seed(1)
            model(**{k: v for k, v in batch.items() if k != "sample_keys"})  # unkeyed: torch's random state
            torch.manual_seed(2)
            model(**{k: v for k, v in batch.items() if k != "sample_keys"})
    finally:
        module.gumbel_sample = original
    whole, first, second, unkeyed_1, unkeyed_2 = seen
    torch.testing.assert_close(torch.cat([first, second]), whole, rtol=0, atol=0)
    assert not torch.equal(unkeyed_1, unkeyed_2)  # without keys the state matters: the keys above did the work
