"""Negative samplers over a frequency-sorted vocabulary, for the sampling-based objectives.

Distributions Q over ids 0..V-1 (id 0 = most frequent):
- ``unigram``: counts^alpha normalised (the data stage's ``noise.npz``);
- ``uniform``: 1 / V;
- ``log-uniform`` (Zipf): Q(c) = (log(c + 2) - log(c + 1)) / log(V + 1).

Sampling uses Walker's alias method (O(V) set-up, O(1) per draw, all on the device). Without
replacement, k distinct ids are drawn by rejection of repeats from the same Q, and each sampled id's
*expected count* E[count(c)] = 1 - (1 - Q(c))^T, with T the number of raw draws it took, is returned
for the -log Q correction (as TensorFlow's candidate samplers do). With replacement the expected
count is k Q(c). Negatives are shared across the batch by default, or drawn per example.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor


def log_uniform_probs(v: int, dtype=torch.float64) -> Tensor:
    c = torch.arange(v, dtype=dtype)
    return (torch.log(c + 2) - torch.log(c + 1)) / math.log(v + 1)


def unigram_probs(counts: Tensor, alpha: float) -> Tensor:
    w = counts.double().pow(alpha)
    return w / w.sum()


class AliasSampler:
    """Walker's alias method: draws from a fixed categorical distribution in O(1) per sample."""

    def __init__(self, probs: Tensor):
        p = probs.double() / probs.double().sum()
        v = p.numel()
        scaled = (p * v).tolist()
        prob, alias = [0.0] * v, list(range(v))
        small = [i for i, x in enumerate(scaled) if x < 1.0]
        large = [i for i, x in enumerate(scaled) if x >= 1.0]
        while small and large:
            s, l_ = small.pop(), large.pop()
            prob[s], alias[s] = scaled[s], l_
            scaled[l_] = scaled[l_] + scaled[s] - 1.0
            (small if scaled[l_] < 1.0 else large).append(l_)
        for i in small + large:  # numerical leftovers are exactly 1
            prob[i] = 1.0
        self.probs = p
        self.prob = torch.tensor(prob, dtype=torch.float64)
        self.alias = torch.tensor(alias, dtype=torch.int64)

    def to(self, device) -> "AliasSampler":
        self.probs, self.prob, self.alias = (t.to(device) for t in (self.probs, self.prob, self.alias))
        return self

    def sample(self, shape: tuple[int, ...], generator: torch.Generator | None = None) -> Tensor:
        dev = self.prob.device
        col = torch.randint(0, self.prob.numel(), shape, device=dev, generator=generator)
        coin = torch.rand(shape, device=dev, dtype=torch.float64, generator=generator)
        return torch.where(coin < self.prob[col], col, self.alias[col])


@dataclass
class Negatives:
    ids: Tensor  # (k,) shared, or (N, k) per example
    expected_count: Tensor  # same shape: expected number of times each id appears among the draws
    draws: Tensor | int  # raw draws behind them: an int when shared, (N, 1) per example
    # each row's target's expected count (N,), where the proposal depends on the row (the quadratic kernel);
    # None: the sampler's expected count of the target among ``draws``
    target_count: Tensor | None = None


class Sampler:
    """k negatives per step from Q, shared across the batch or per example, with or without replacement."""

    def __init__(self, probs: Tensor, k: int, replacement: bool = False, shared: bool = True):
        if not replacement and k > probs.numel():
            raise ValueError(f"cannot draw {k} distinct negatives from a vocabulary of {probs.numel()}")
        self.alias = AliasSampler(probs)
        self.k, self.replacement, self.shared = k, replacement, shared

    def to(self, device) -> "Sampler":
        self.alias.to(device)
        return self

    @property
    def probs(self) -> Tensor:
        return self.alias.probs

    def expected_count(self, ids: Tensor, draws: Tensor | int) -> Tensor:
        """E[count of id among the raw draws]: k Q with replacement, 1 - (1 - Q)^T without."""
        q = self.probs[ids]
        if self.replacement:
            return self.k * q
        return -torch.expm1(torch.as_tensor(draws, dtype=torch.float64, device=q.device) * torch.log1p(-q))

    def _distinct(self, generator) -> tuple[Tensor, int]:
        """k distinct ids by drawing in batches and dropping repeats; returns them and the raw draw count."""
        seen: list[int] = []
        have: set[int] = set()
        draws = 0
        while len(seen) < self.k:
            batch = self.alias.sample((2 * (self.k - len(seen)) + 16,), generator).tolist()
            for x in batch:
                draws += 1
                if x not in have:
                    have.add(x)
                    seen.append(x)
                    if len(seen) == self.k:
                        break
        return torch.tensor(seen, dtype=torch.int64, device=self.probs.device), draws

    def sample(self, n: int = 1, generator: torch.Generator | None = None) -> Negatives:
        if self.replacement:
            shape = (self.k,) if self.shared else (n, self.k)
            ids = self.alias.sample(shape, generator)
            return Negatives(ids, self.expected_count(ids, self.k), self.k)
        if self.shared:
            ids, draws = self._distinct(generator)
            return Negatives(ids, self.expected_count(ids, draws), draws)
        rows = [self._distinct(generator) for _ in range(n)]
        ids = torch.stack([r[0] for r in rows])
        draws = torch.tensor([r[1] for r in rows], dtype=torch.float64, device=ids.device)[:, None]
        return Negatives(ids, self.expected_count(ids, draws), draws)
