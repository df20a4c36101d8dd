"""ggpy.models.llama's sampler: greedy at temperature 0; top-k, then top-p, then temperature, then a seeded draw whose
frequencies follow the expected probabilities."""
import numpy as np
import pytest

from ggpy.models.llama.sampling import Sampler, softmax

SEED = int(np.random.SeedSequence().entropy % 2**32)


@pytest.fixture
def logits():
    return np.random.default_rng(SEED).standard_normal(200) * 3


def test_greedy_is_the_argmax(logits):
    assert Sampler(temp=0, seed=SEED)(logits) == int(np.argmax(logits))
    assert Sampler(temp=5.0, top_k=1, seed=SEED)(logits) == int(np.argmax(logits))


def test_top_k_then_top_p(logits):
    order = np.argsort(-logits)
    ids, p = Sampler(temp=1.0, top_k=7, top_p=1.0).candidates(logits)
    assert list(ids) == list(order[:7]) and np.isclose(p.sum(), 1)
    q = softmax(logits[order[:20]])                 # top-p reads the softmax of what top-k kept
    cut = 0.6
    ids, _ = Sampler(temp=1.0, top_k=20, top_p=cut).candidates(logits)
    n = len(ids)
    assert q[:n].sum() >= cut > q[:n - 1].sum(), f"kept {n} (seed {SEED})"
    assert len(Sampler(temp=1.0, top_k=0, top_p=1.0).candidates(logits)[0]) == len(logits)


def test_temperature_applies_after_the_cuts(logits):
    ids, p = Sampler(temp=0.5, top_k=10, top_p=1.0).candidates(logits)
    np.testing.assert_allclose(p, softmax(logits[ids] / 0.5))


def test_draws_follow_the_probabilities():
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    sampler = Sampler(temp=1.0, top_k=0, top_p=1.0, seed=SEED)
    n = 20000
    counts = np.bincount([sampler(logits) for _ in range(n)], minlength=4)
    expected = np.exp(logits) * n
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 16.3, f"counts {counts}, chi2 {chi2:.1f} (3 degrees of freedom, p = 0.001; seed {SEED})"


def test_a_seed_repeats_its_draws(logits):
    a, b = Sampler(seed=SEED), Sampler(seed=SEED)
    assert [a(logits) for _ in range(50)] == [b(logits) for _ in range(50)]


@pytest.mark.parametrize("top_k, top_p, temp", [(1, 1.0, 0.7), (40, 0.95, 0.8), (7, 1.0, 2.0), (256, 0.5, 1.3)])
def test_choosing_among_the_top_k_draws_what_the_whole_logits_draw(top_k, top_p, temp):
    """A device hands the top k (ids by descending logit, ties by lower id) and their logits: Sampler.choose draws
    the same token as the sampler given every logit, draw after draw."""
    rng = np.random.default_rng(SEED)
    whole, part = Sampler(temp, top_k, top_p, seed=SEED), Sampler(temp, top_k, top_p, seed=SEED)
    assert part.device_head() == ("top_k", top_k)
    for _ in range(20):
        logits = np.round(rng.standard_normal(1000) * 3, 1).astype(np.float32)     # rounded: ties happen
        ids = np.lexsort((np.arange(len(logits)), -logits))[:top_k]
        assert part.choose(ids, logits[ids]) == whole(logits), f"seed {SEED}"


def test_device_heads():
    assert Sampler(temp=0).device_head() == ("argmax",)
    assert Sampler(temp=1.0, top_k=0).device_head() is None            # every logit is a candidate
    assert Sampler(temp=1.0, top_k=1000).device_head() is None         # more than a device's top_k hands over
