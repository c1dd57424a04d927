import numpy as np
import pytest

from iron.lm import Sampler

LOGITS = np.array([2.0, 1.0, 0.5, 3.0, -1.0, 3.0, 0.0, 1.5], dtype=np.float32)


def test_temperature_zero_is_greedy_first_maximum():
    sampler = Sampler(temperature=0, seed=1)
    assert all(sampler(LOGITS) == 3 for _ in range(10))  # first of the tied maxima


def test_same_seed_same_tokens_different_seed_differs():
    logits = np.random.default_rng(0).standard_normal(1000).astype(np.float32)

    def draws(seed):
        sampler = Sampler(temperature=1.0, top_k=100, seed=seed)
        return [sampler(logits) for _ in range(50)]

    assert draws(7) == draws(7)
    assert draws(7) != draws(8)


def test_draw_follows_the_documented_recipe():
    # top-2 of LOGITS / 0.5 are the tied 6.0s at 3 and 5, then 4.0 at 0: top_k=3 keeps
    # [0, 3, 5] with weights [e^-2, 1, 1]; one uniform u picks by u * total
    for seed in range(20):
        u = np.random.default_rng(seed).random()
        weights = np.array([np.exp(-2.0), 1.0, 1.0])
        cdf = np.cumsum(weights)
        expected = [0, 3, 5][int(np.searchsorted(cdf, u * cdf[-1], side="right"))]
        assert Sampler(temperature=0.5, top_k=3, seed=seed)(LOGITS) == expected


def test_top_k_keeps_only_the_k_largest_and_their_ties():
    sampler = Sampler(temperature=1.0, top_k=2, seed=0)
    assert {sampler(LOGITS) for _ in range(400)} == {3, 5}  # the two 3.0s
    sampler = Sampler(temperature=1.0, top_k=1, seed=0)
    assert {sampler(LOGITS) for _ in range(400)} == {
        3,
        5,
    }  # k=1 but a tie at the boundary: both kept
    sampler = Sampler(temperature=1.0, top_k=3, seed=0)
    assert {sampler(LOGITS) for _ in range(2000)} == {0, 3, 5}


def test_frequencies_follow_the_tempered_softmax():
    temperature, draws = 0.7, 20000
    sampler = Sampler(temperature=temperature, top_k=None, seed=123)
    counts = np.bincount([sampler(LOGITS) for _ in range(draws)], minlength=LOGITS.size)
    p = np.exp(LOGITS.astype(np.float64) / temperature)
    p /= p.sum()
    # each count within 5 binomial standard deviations of its expectation
    assert np.all(np.abs(counts - draws * p) <= 5 * np.sqrt(draws * p * (1 - p)) + 1)


def test_masked_tokens_are_never_drawn():
    logits = np.full(50, -np.inf, dtype=np.float32)
    logits[[4, 40]] = [0.0, 1.0]
    sampler = Sampler(temperature=1.0, top_k=10, seed=3)  # fewer than k finite logits
    assert {sampler(logits) for _ in range(300)} == {4, 40}


def test_accepts_bf16_logits():
    import ml_dtypes

    assert Sampler(0)(LOGITS.astype(ml_dtypes.bfloat16)) == 3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": -0.5}, "temperature=-0.5 must be a finite number >= 0"),
        ({"temperature": float("nan")}, "temperature=nan must be a finite number"),
        ({"temperature": "hot"}, "temperature='hot'"),
        ({"top_k": 0}, "top_k=0 must be a positive integer or None"),
        ({"top_k": 2.5}, "top_k=2.5"),
        ({"seed": -1}, "seed=-1 must be a non-negative integer or None"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Sampler(**kwargs)


def test_bad_logits():
    sampler = Sampler(seed=0)
    with pytest.raises(ValueError, match=r"non-empty 1-D numeric array, got shape \(2, 2\)"):
        sampler(np.zeros((2, 2)))
    with pytest.raises(ValueError, match="logits hold NaN at index 1"):
        sampler(np.array([0.0, np.nan]))
    with pytest.raises(ValueError, match="largest logit is -inf"):
        sampler(np.full(4, -np.inf))


def test_top_p_keeps_the_most_probable_tokens_up_to_the_mass():
    # softmax of LOGITS at T=1: each 3.0 holds 0.348, then 2.0 holds 0.128
    p = np.exp(LOGITS.astype(np.float64))
    p /= p.sum()
    assert 0.3 < p[3] < 0.6 < p[3] + p[5] < 0.75 < p[3] + p[5] + p[0]
    sampler = Sampler(temperature=1.0, top_k=None, top_p=0.75, seed=0)
    assert {sampler(LOGITS) for _ in range(2000)} == {0, 3, 5}
    sampler = Sampler(temperature=1.0, top_k=None, top_p=0.6, seed=0)
    assert {sampler(LOGITS) for _ in range(2000)} == {3, 5}
    sampler = Sampler(temperature=1.0, top_k=None, top_p=0.3, seed=0)
    assert {sampler(LOGITS) for _ in range(400)} == {3}  # a tie: the lower id comes first


def test_top_p_draws_from_the_renormalised_survivors():
    for seed in range(20):
        u = np.random.default_rng(seed).random()
        weights = np.array([np.exp(-1.0), 1.0, 1.0])  # ids 0, 3, 5 at T=1 relative to 3.0
        cdf = np.cumsum(weights)
        expected = [0, 3, 5][int(np.searchsorted(cdf, u * cdf[-1], side="right"))]
        assert Sampler(temperature=1.0, top_k=None, top_p=0.75, seed=seed)(LOGITS) == expected


def test_top_p_one_draws_as_if_it_were_absent():
    logits = np.random.default_rng(4).standard_normal(300).astype(np.float32)
    a = Sampler(temperature=0.8, top_k=40, seed=9, top_p=1.0)
    b = Sampler(temperature=0.8, top_k=40, seed=9)
    assert [a(logits) for _ in range(50)] == [b(logits) for _ in range(50)]


@pytest.mark.parametrize("top_p", [0, -0.5, 1.5, float("nan"), True, "0.9"])
def test_top_p_outside_zero_to_one_is_refused(top_p):
    with pytest.raises(ValueError, match=r"top_p=.* must be a number in \(0, 1\] or None"):
        Sampler(top_p=top_p)
