import math

import numpy as np
import pytest
import torch

from pipeline_src.heads.sampling import AliasSampler, Sampler, log_uniform_probs, unigram_probs


def chi_square_ok(counts: np.ndarray, probs: np.ndarray, n: int) -> bool:
    """Pearson chi-square against expected counts, at the 0.001 level (normal approximation)."""
    exp = n * probs
    stat = ((counts - exp) ** 2 / exp).sum()
    dof = len(probs) - 1
    return stat < dof + 3.1 * math.sqrt(2 * dof)  # z = 3.1 ~ p = 0.001


def test_log_uniform_formula():
    p = log_uniform_probs(1000)
    assert p.sum().item() == pytest.approx(1.0)
    assert p[0].item() == pytest.approx(math.log(2) / math.log(1001))
    assert (p[1:] < p[:-1]).all()


def test_alias_sampler_matches_log_uniform_by_chi_square():
    p = log_uniform_probs(50)
    g = torch.Generator().manual_seed(0)
    n = 200_000
    draws = AliasSampler(p).sample((n,), g)
    counts = np.bincount(draws.numpy(), minlength=50)
    assert chi_square_ok(counts, p.numpy(), n)
    # and the test has power: a wrong distribution fails it
    assert not chi_square_ok(counts, torch.full((50,), 1 / 50).numpy(), n)


def test_alias_sampler_matches_unigram_alpha():
    counts = torch.tensor([50, 20, 10, 5, 0, 1])
    p = unigram_probs(counts, 0.75)
    assert p[4] == 0
    draws = AliasSampler(p).sample((100_000,), torch.Generator().manual_seed(1))
    c = np.bincount(draws.numpy(), minlength=6)
    assert c[4] == 0
    keep = p.numpy() > 0
    assert chi_square_ok(c[keep], p.numpy()[keep], 100_000)


def test_without_replacement_gives_distinct_ids_and_expected_counts():
    p = log_uniform_probs(100)
    s = Sampler(p, k=30, replacement=False)
    neg = s.sample(generator=torch.Generator().manual_seed(2))
    assert neg.ids.shape == (30,) and len(set(neg.ids.tolist())) == 30
    # expected counts are probabilities of inclusion: in (0, 1], larger for frequent ids
    assert ((neg.expected_count > 0) & (neg.expected_count <= 1)).all()
    # the formula: 1 - (1 - Q)^T for T raw draws
    q = p[neg.ids]
    draws = math.log1p(-neg.expected_count[0].item()) / math.log1p(-q[0].item())
    assert draws >= 30 and torch.allclose(neg.expected_count, 1 - (1 - q) ** round(draws))


def test_with_replacement_and_per_example_shapes():
    p = log_uniform_probs(20)
    s = Sampler(p, k=7, replacement=True, shared=False)
    neg = s.sample(n=5, generator=torch.Generator().manual_seed(0))
    assert neg.ids.shape == (5, 7) and torch.allclose(neg.expected_count, 7 * p[neg.ids])
    s2 = Sampler(p, k=7, replacement=False, shared=False)
    neg2 = s2.sample(n=4, generator=torch.Generator().manual_seed(0))
    assert neg2.ids.shape == (4, 7) and all(len(set(r)) == 7 for r in neg2.ids.tolist())


def test_sampling_is_seeded():
    p = log_uniform_probs(1000)
    a = Sampler(p, 50).sample(generator=torch.Generator().manual_seed(9)).ids
    b = Sampler(p, 50).sample(generator=torch.Generator().manual_seed(9)).ids
    assert torch.equal(a, b)


def test_too_many_distinct_negatives_is_a_clear_error():
    with pytest.raises(ValueError, match="cannot draw 11 distinct negatives from a vocabulary of 10"):
        Sampler(log_uniform_probs(10), 11)
