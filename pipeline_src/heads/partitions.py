"""Jean, Cho, Memisevic & Bengio (ACL 2015)'s target vocabularies: the training stream cut into partitions.

Before training (here: before each epoch, whose order of batches the loop fixes), the batches' targets are
walked in order and distinct target words accumulated; a partition ends with the batch at which their number
reaches tau, and the next batch starts a new one. Every batch of a partition trains with a softmax over the
partition's target vocabulary V' (its distinct targets; with ``fill``, topped up to tau with the most frequent
words, the description's rule). The paper walks sentences; a batch here is the loop's unit. A batch the loop
did not plan (the bench, a test calling ``loss`` directly) is its own partition.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass

import torch
from torch import Tensor


def fill_frequent(ids: Tensor, tau: int, vocab_size: int) -> Tensor:
    """Sorted ``ids`` topped up to ``tau`` words with the most frequent ones (the smallest ids) not in them."""
    need = min(tau, vocab_size) - ids.numel()
    if need <= 0:
        return ids
    top = torch.arange(min(vocab_size, tau + ids.numel()), device=ids.device)
    extra = top[~torch.isin(top, ids)][:need]
    return torch.sort(torch.cat([ids, extra])).values


def partition(targets: list[Tensor], tau: int, vocab_size: int, fill: bool) -> list[tuple[int, Tensor]]:
    """Jean et al.'s rule over consecutive batches: [(index of the partition's first batch, sorted V')].
    A partition closes with the batch at which its distinct targets reach ``tau``; the last one closes with
    the stream."""
    out: list[tuple[int, Tensor]] = []
    if not targets:
        return out
    seen = torch.zeros(vocab_size, dtype=torch.bool, device=targets[0].device)
    n_seen, first = 0, 0
    for k, y in enumerate(targets):
        new = torch.unique(y.reshape(-1))
        n_seen += int((~seen[new]).sum())
        seen[new] = True
        if n_seen >= tau or k == len(targets) - 1:
            ids = torch.nonzero(seen).squeeze(1)
            out.append((first, fill_frequent(ids, tau, vocab_size) if fill else ids))
            seen[ids] = False
            n_seen, first = 0, k + 1
    return out


@dataclass
class Plan:
    """An epoch's partitions and where the loop is in it: ``take`` hands out each step's V' in order."""

    parts: list[tuple[int, Tensor]]
    fingerprints: list[tuple[int, int]]  # each planned step's (number of targets, their sum): a check that
    cursor: int = 0  # the batches the loss sees are the planned ones, in the planned order

    @classmethod
    def of(cls, targets: list[Tensor], tau: int, vocab_size: int, fill: bool, start: int = 0) -> "Plan":
        prints = [(y.numel(), int(y.sum())) for y in targets]
        return cls(partition(targets, tau, vocab_size, fill), prints, start)

    def take(self, target: Tensor) -> Tensor | None:
        """The V' of the next planned step (None once the plan is spent). Raises if ``target`` is not that
        step's batch: a loss out of step with its plan would train on another partition's vocabulary."""
        if self.cursor >= len(self.fingerprints):
            return None
        if (target.numel(), int(target.sum())) != self.fingerprints[self.cursor]:
            raise RuntimeError(f"target-vocabulary plan out of step at batch {self.cursor}: the loss was given "
                               "other targets than the loop planned")
        k = self.cursor
        self.cursor += 1
        return self.parts[bisect.bisect_right([first for first, _ in self.parts], k) - 1][1]
