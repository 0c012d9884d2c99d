"""RTD's generator samples with one uniform per target keyed by (seed, epoch, example, position) (issue 30, item 5;
issue 44: one uniform, not one per vocabulary entry).

The collator hands the model one int64 key per token (`sample_keys`, from the same counter-based draws as the
masks); a sampled token's uniform is a hash of its key, inverted through the generator's softmax CDF
(`sample_tokens`). So a row's replacements are the same whether it is sampled in the whole batch or in a half of it
(two processes), at the real temperature 1, and they follow the generator's softmax as `torch.multinomial` does.
tests/test_multiprocess.py checks two processes against one.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from scipy import stats

from hf_bertology.data import build_pretraining_dataset, load_corpus, tokenize_corpus
from hf_bertology.models import replaced_token_detection as rtd
from hf_bertology.models.replaced_token_detection import keyed_uniform, sample_tokens
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
    fine = keyed_uniform(keys, 50, torch.float64)  # 53 bits, whose top 24 are the float32 noise's
    assert fine.dtype == torch.float64 and 0 <= fine.min() and fine.max() < 1
    assert torch.equal(torch.floor(fine * 2**24) * 2.0**-24, noise.double())
    assert stats.kstest(fine.flatten().numpy(), "uniform").pvalue > 1e-3
    below = (fine * 2**24 % 1).flatten().numpy()  # the 29 bits below float32's: uniform within every 2**-24 slice
    assert stats.kstest(below, "uniform").pvalue > 1e-3
    assert abs(np.corrcoef(below, fine.flatten().numpy())[0, 1]) < 0.02


LOGITS = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, -3.0, -8.0])


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_keyed_samples_follow_the_softmax_as_multinomial(temperature):
    """20k keyed draws from one distribution over 7 tokens: chi-square against softmax(logits / T), and a
    two-sample chi-square against 20k seeded `torch.multinomial` draws (tokens expected under 5 times pooled);
    p > 1e-3 for both (a fixed draw: the keys and the seed are fixed, so the outcome is too)."""
    keys = torch.arange(20_000, dtype=torch.long) * 7919 + 11
    probs = (LOGITS.double() / temperature).softmax(-1)
    samples = sample_tokens(LOGITS.expand(len(keys), -1), temperature, keys)
    observed = torch.bincount(samples, minlength=7).numpy()
    expected = probs.double().numpy() * len(keys)
    frequent = expected >= 5
    pooled_obs = np.append(observed[frequent], observed[~frequent].sum())
    pooled_exp = np.append(expected[frequent], expected[~frequent].sum())
    assert stats.chisquare(pooled_obs, pooled_exp).pvalue > 1e-3, (observed, expected.round())
    draws = torch.multinomial(probs, len(keys), replacement=True, generator=torch.Generator().manual_seed(0))
    reference = torch.bincount(draws, minlength=7).numpy()
    table = np.stack(
        [
            np.append(observed[frequent], observed[~frequent].sum()),
            np.append(reference[frequent], reference[~frequent].sum()),
        ]
    )
    table = table[:, table.sum(0) > 0]  # a pooled class neither drew
    assert stats.chi2_contingency(table).pvalue > 1e-3, table


def test_unkeyed_samples_follow_the_softmax():
    torch.manual_seed(0)
    samples = sample_tokens(LOGITS[:6].expand(20_000, -1), 1.0)
    expected = LOGITS[:6].double().softmax(-1).numpy() * 20_000
    assert stats.chisquare(torch.bincount(samples, minlength=6).numpy(), expected).pvalue > 1e-3


@pytest.mark.parametrize("uniform", [0.0, 0.5, 1 - 2**-24, 1 - 2**-53])
def test_a_token_of_probability_zero_is_never_drawn(monkeypatch, uniform):
    """`disallow_correct` sets the original's logit to -1e9: it is never drawn, even at the uniform's ends (the
    largest uniform times the CDF's total can round up to the total) and at either end of the vocabulary."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(300, 50, generator=g) * 4
    logits[::3, -1] = 30.0  # nearly all the mass on the last token, banned in some of these rows
    banned = torch.arange(300) % 50  # first, last and every index between
    logits[torch.arange(300), banned] = -1e9

    def fixed(keys, size, dtype=torch.float32):
        return torch.full((len(keys), size), uniform, dtype=dtype)

    monkeypatch.setattr(rtd, "keyed_uniform", fixed)
    sampled = sample_tokens(logits, 1.0, torch.arange(300))
    assert not (sampled == banned).any() and sampled.max() < 50


def key_of(uniform: float) -> int:
    """The sampling key whose float64 uniform is `uniform` rounded down to 53 bits: the two rounds of SplitMix64's
    finaliser that `keyed_uniform` applies to `key + golden`, inverted."""
    mask, golden = 2**64 - 1, 0x9E3779B97F4A7C15
    mix1, mix2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB

    def unshift(y: int, bits: int) -> int:  # the inverse of x ^ (x >>> bits)
        x = y
        for _ in range(64 // bits + 1):
            x = y ^ (x >> bits)
        return x

    x = unshift((int(uniform * 2**53) << 11) * pow(mix2, -1, 2**64) & mask, 27)
    x = unshift(x * pow(mix1, -1, 2**64) & mask, 30)
    key = (x - golden) & mask
    return key - 2**64 if key >= 2**63 else key


def test_a_token_below_2_to_the_minus_24_is_drawn_where_its_uniforms_fall():
    """Tokens of probability 2**-30 and 2**-40 between ordinary ones: the key whose uniform lies in the middle of a
    token's interval of the exact (float64) CDF draws it. A float32 running sum does not move across them, and a
    24-bit uniform falls in such an interval with probability 1/64 or less; both drew the neighbours."""
    probs = torch.tensor([0.3, 2.0**-30, 0.2, 2.0**-40, 0.1], dtype=torch.float64)
    probs[-1] = 1 - probs[:-1].sum()
    logits = probs.log().float()
    cdf = logits.double().softmax(-1).cumsum(-1)  # the exact CDF of these float32 logits
    for token in (1, 3):
        key = key_of((cdf[token - 1] + cdf[token]).item() / 2)
        uniform = keyed_uniform(torch.tensor([key]), 1, torch.float64).item()
        assert cdf[token - 1] < uniform < cdf[token]
        assert sample_tokens(logits[None], 1.0, torch.tensor([key])).item() == token


def test_a_row_samples_alike_alone_and_in_a_batch_and_with_a_gradient():
    """A row's sample depends only on its key and logits (no batch-wide state), and logits with a gradient are
    read, not changed."""
    g = torch.Generator().manual_seed(1)
    keys = torch.randint(-(2**62), 2**62, (1500,), generator=g)
    logits = torch.randn(1500, 40, generator=g) * 3
    whole = sample_tokens(logits.clone().requires_grad_(), 0.7, keys)
    rows = torch.cat([sample_tokens(logits[i : i + 500], 0.7, keys[i : i + 500]) for i in (0, 500, 1000)])
    assert torch.equal(whole, rows)
    assert sample_tokens(logits[:0], 1.0, keys[:0]).shape == (0,)


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
    # every RTD step samples through `replaced_token_detection.fake_data`, which calls this module's `sample_tokens`
    module = sys.modules["hf_bertology.models.replaced_token_detection"]
    original, seen = module.sample_tokens, []
    module.sample_tokens = lambda *args, **kwargs: seen.append(original(*args, **kwargs)) or seen[-1]
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
        module.sample_tokens = original
    whole, first, second, unkeyed_1, unkeyed_2 = seen
    torch.testing.assert_close(torch.cat([first, second]), whole, rtol=0, atol=0)
    assert not torch.equal(unkeyed_1, unkeyed_2)  # without keys the state matters: the keys above did the work


@pytest.mark.parametrize("name", ["electra-tiny", "deberta-v3-tiny", "electra-tiny@bert"])
def test_the_step_samples_at_the_configured_temperature(name, corpus):
    """Through the model's step at `sampling_temperature` 0.7: every chosen token is replaced by the token whose
    interval of softmax(logits / 0.7)'s CDF (float64, from the step's own generator logits) holds the target's keyed
    uniform; at temperature 1 the same uniforms pick other tokens in several rows, so 0.7 is what decides."""
    recipe_name, _, backbone = name.partition("@")
    overrides = {"backbone": backbone} if backbone else {}
    recipe = get_recipe(recipe_name, **overrides, **no_dropout(name), sampling_temperature=0.7)
    tokenizer = recipe.train_tokenizer(corpus["text"], 300)
    recipe.adapt_to_tokenizer(tokenizer)
    recipe.fit_to_length(48)
    examples = build_pretraining_dataset(tokenize_corpus(corpus, tokenizer), tokenizer, recipe.config, 48, 0)
    batch = recipe.build_collator(tokenizer, seed=3)([examples[i] for i in range(6)])
    torch.manual_seed(0)
    model = recipe.build_model().eval()
    with torch.no_grad():
        out = model(**batch)
    at = batch["labels"].flatten().ne(-100).nonzero().squeeze(1)  # the order of the step's generator logits
    sampled = out.replaced_input_ids.take(at)
    uniform = keyed_uniform(batch["sample_keys"].take(at), 1).double()  # (M, 1)

    def inside(temperature):  # (M,): the uniform falls in the sampled token's CDF interval (rounding allowed)
        cdf = (out.prediction_logits.double() / temperature).softmax(-1).cumsum(-1)
        below = torch.cat([torch.zeros_like(cdf[:, :1]), cdf], 1).gather(1, sampled[:, None])
        above = cdf.gather(1, sampled[:, None])
        return ((below - 1e-6 <= uniform) & (uniform < above + 1e-6)).squeeze(1)

    assert inside(0.7).all(), inside(0.7)
    assert (~inside(1.0)).sum() >= 5  # a fixed draw: 6 to 19 of the ~40 rows


def test_sampling_benchmark_runs():
    """`benchmarks/rtd_sampling.py` (docs/speed.md) at a small shape: both samplers timed, in the same run."""
    import importlib.util

    from platform_support import REPO

    spec = importlib.util.spec_from_file_location("rtd_sampling", REPO / "benchmarks" / "rtd_sampling.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    medians = bench.main(["--targets", "64", "--vocab", "500", "--repeats", "2"])
    assert set(medians) == {"torch.multinomial (reference)", "sample_tokens (keyed)"}
    assert all(seconds > 0 for seconds in medians.values())


def test_sampling_accuracy_benchmark_runs():
    """`benchmarks/rtd_sampling_accuracy.py` (docs/speed.md) on one row of BERT's 30,522 tokens: the sampler's
    distribution is the softmax to a total variation under 1e-9; the float32 one before was 1e-4 or more off."""
    import importlib.util

    from platform_support import REPO

    path = REPO / "benchmarks" / "rtd_sampling_accuracy.py"
    spec = importlib.util.spec_from_file_location("rtd_sampling_accuracy", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    results = bench.main(["--rows", "1", "--vocab", "30522"])
    assert results[30522, "float64 (now)"][0] < 1e-9 and results[30522, "float64 (now)"][1] == 0
    assert results[30522, "float32 (before)"][0] > 1e-4
