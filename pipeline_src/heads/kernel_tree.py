"""Blanc & Rendle (ICML 2018)'s quadratic-kernel proposal, sampled exactly through a tree of sufficient statistics.

For a context h and output embeddings W (V, d) the proposal is

    q(w | h) = (alpha (h . w)^2 + 1) / Z(h),    Z(h) = alpha h^T C h + V,    C = sum_w w w^T,

which follows the model: words whose score is large in magnitude are proposed more often. The mass of any
set S of words is alpha h^T C_S h + |S| with C_S = sum_{w in S} w w^T, so a balanced binary tree whose nodes
hold (C_S, |S|) lets one draw descend from the root in O(d^2) per level: go left with probability
mass(left) / (mass(left) + mass(right)). Blanc & Rendle keep a tree over single words; here the leaves are
*buckets* of ``bucket_size`` consecutive ids (a d x d matrix per word would be 33 GB at 1M words and d = 64),
and the last step draws a word inside the bucket from its exact masses (O(bucket_size d)). The statistics are
stored as packed upper triangles (d (d + 1) / 2 floats), so a node's mass is one dot product with the packed
h h^T (off-diagonal terms doubled).

The tree is built from a *snapshot* of W (:meth:`KernelTree.build`); the caller rebuilds it as W changes, and
``q`` is the snapshot's, so the inclusion probabilities used for the correction are those of the distribution
actually sampled from. Memory at V words: the snapshot (V d floats) and about 2 V / bucket_size packed nodes.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor


def packed_outer(h: Tensor) -> Tensor:
    """(N, d) -> (N, d (d + 1) / 2): h h^T's upper triangle, off-diagonal entries doubled, so that
    packed_outer(h) . packed(C) = h^T C h for a symmetric C."""
    d = h.shape[1]
    i, j = torch.triu_indices(d, d, device=h.device)
    return h[:, i] * h[:, j] * torch.where(i == j, 1.0, 2.0).to(h.dtype)


class KernelTree:
    """Sufficient statistics of q(w | h) proportional to alpha (h . w)^2 + 1 over buckets of words."""

    def __init__(self, alpha: float, bucket_size: int, chunk: int = 8192):
        self.alpha, self.bucket_size, self.chunk = float(alpha), int(bucket_size), chunk
        self.levels: list[Tensor] = []  # level l: (2^l, P) packed C of each node; the last level = the buckets
        self.counts: list[Tensor] = []  # level l: (2^l,) words under each node
        self.words: Tensor | None = None  # (buckets, bucket_size, d) the snapshot of W, zero-padded
        self.vocab_size = 0

    @torch.no_grad()
    def build(self, weight: Tensor) -> None:
        """(Re)build every node's statistics from W (V, d): the buckets' by one batched product, each parent
        as the sum of its two children."""
        v, d = weight.shape
        b = self.bucket_size
        n_buckets = 1 << max(0, math.ceil(math.log2(max(1, math.ceil(v / b)))))
        words = weight.new_zeros(n_buckets * b, d)
        words[:v] = weight.detach()
        self.words, self.vocab_size = words.view(n_buckets, b, d), v
        i, j = torch.triu_indices(d, d, device=weight.device)
        full = torch.bmm(self.words.transpose(1, 2), self.words)  # (buckets, d, d)
        level = full[:, i, j]  # (buckets, P)
        count = (v - torch.arange(n_buckets, device=weight.device) * b).clamp(0, b).to(weight.dtype)
        self.levels, self.counts = [level], [count]
        while level.shape[0] > 1:
            level = level.view(-1, 2, level.shape[1]).sum(1)
            count = count.view(-1, 2).sum(1)
            self.levels.insert(0, level)
            self.counts.insert(0, count)

    def bytes(self) -> int:
        """Memory the tree holds: the snapshot and every level's statistics."""
        return sum(t.numel() * t.element_size() for t in [self.words, *self.levels, *self.counts])

    def log_z(self, h: Tensor) -> Tensor:
        """(N,) log Z(h) = log(alpha h^T C h + V)."""
        root = self.levels[0][0].to(h.dtype)
        return torch.log(self.alpha * packed_outer(h) @ root + self.vocab_size)

    def log_q(self, h: Tensor, ids: Tensor) -> Tensor:
        """log q(w | h) of given ids: (N, k) ids for the rows of h (N, d) -> (N, k)."""
        w = self.words.view(-1, self.words.shape[-1])[ids].to(h.dtype)  # (N, k, d)
        s = torch.einsum("nd,nkd->nk", h, w)
        return torch.log(self.alpha * s * s + 1) - self.log_z(h)[:, None]

    def probs(self, h: Tensor) -> Tensor:
        """(N, V) q(. | h) computed densely: the reference the sampler is checked against."""
        s = h @ self.words.view(-1, self.words.shape[-1])[: self.vocab_size].to(h.dtype).t()
        m = self.alpha * s * s + 1
        return m / m.sum(1, keepdim=True)

    @torch.no_grad()
    def sample(self, h: Tensor, k: int, generator: torch.Generator | None = None) -> Tensor:
        """(N, k) ids, k independent draws from q(. | h_n) for each row n of h (with replacement)."""
        h = h.detach().to(self.words.dtype)
        rows = torch.arange(h.shape[0], device=h.device).repeat_interleave(k)
        out = torch.empty(rows.numel(), dtype=torch.int64, device=h.device)
        for lo in range(0, rows.numel(), self.chunk):
            r = rows[lo:lo + self.chunk]
            out[lo:lo + self.chunk] = self._descend(h[r], generator)
        return out.view(h.shape[0], k)

    def _descend(self, h: Tensor, generator) -> Tensor:
        """One draw per row of h (M, d): root to bucket by the children's masses, then a word in the bucket."""
        p = packed_outer(h)  # (M, P)
        node = torch.zeros(h.shape[0], dtype=torch.int64, device=h.device)
        for stats, count in zip(self.levels[1:], self.counts[1:]):
            kids = stats.view(-1, 2, stats.shape[1])[node]  # (M, 2, P): the two children, side by side
            mass = self.alpha * torch.einsum("mcp,mp->mc", kids, p) + count.view(-1, 2)[node]
            u = torch.rand(h.shape[0], device=h.device, dtype=h.dtype, generator=generator)
            right = u * mass.sum(1) >= mass[:, 0]
            node = 2 * node + right.long()
        s = torch.einsum("mbd,md->mb", self.words[node], h)  # (M, bucket)
        mass = self.alpha * s * s + 1
        n_valid = self.counts[-1][node]  # padding beyond V has mass 0
        mass = mass.masked_fill(torch.arange(self.bucket_size, device=h.device)[None, :] >= n_valid[:, None], 0.0)
        pick = torch.multinomial(mass, 1, generator=generator).squeeze(1)
        return node * self.bucket_size + pick
