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


def draw_macs(vocab_size: int, dim: int, k: int, bucket_size: int) -> float:
    """Multiply-adds of k draws for one row (:meth:`KernelTree.sample`): every node of a dense level, two children
    per draw on a gathered one (P = d (d + 1) / 2 each), and every word's score (dense leaves) or a bucket's per
    draw."""
    p = dim * (dim + 1) / 2
    levels = max(0, math.ceil(math.log2(max(1, math.ceil(vocab_size / bucket_size)))))
    nodes = [2 ** level for level in range(1, levels + 1)]
    words = 2 ** levels * bucket_size  # padded
    leaves = words * dim if words <= DENSE_LEAVES * k * bucket_size else k * bucket_size * dim
    return sum(n * p if n <= DENSE_PER_DRAW * k else 2 * k * p for n in nodes) + leaves


def packed_outer(h: Tensor) -> Tensor:
    """(N, d) -> (N, d (d + 1) / 2): h h^T's upper triangle, off-diagonal entries doubled, so that
    packed_outer(h) . packed(C) = h^T C h for a symmetric C."""
    d = h.shape[1]
    i, j = torch.triu_indices(d, d, device=h.device)
    return h[:, i] * h[:, j] * torch.where(i == j, 1.0, 2.0).to(h.dtype)


# A level of at most this many nodes per draw of a row is scored for all its nodes by one product (compute-bound);
# a deeper one gathers each draw's two children (memory-bound). Measured at 10k-1M words, d = 64, 16 draws of
# 2,240 rows on one thread: 128 beat 8 and 32 by 1.3-4x (docs/bench.md).
DENSE_PER_DRAW = 128
# The buckets' words are scored for every row at once where the (padded) vocabulary is at most this many times
# the words k draws' buckets hold (k x bucket_size); else each draw gathers its bucket. Measured: docs/bench.md.
DENSE_LEAVES = 16
LEAF_SCORES = 1 << 22  # at most this many (row, word) scores at once on the dense path


class KernelTree:
    """Sufficient statistics of q(w | h) proportional to alpha (h . w)^2 + 1 over buckets of words."""

    def __init__(self, alpha: float, bucket_size: int, chunk: int = 4096):  # draws at once: 34 MB a gathered level
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

    def log_q(self, h: Tensor, ids: Tensor, log_z: Tensor | None = None) -> Tensor:
        """log q(w | h) of given ids: (N, k) ids for the rows of h (N, d) -> (N, k)."""
        w = self.words.view(-1, self.words.shape[-1])[ids].to(h.dtype)  # (N, k, d)
        return self.log_q_of_scores(torch.einsum("nd,nkd->nk", h, w), h, log_z)

    def log_q_of_scores(self, s: Tensor, h: Tensor, log_z: Tensor | None = None) -> Tensor:
        """log q(w | h) from the kernel scores s = h . w (N, k) already formed (a draw's, by :meth:`sample`);
        ``log_z``: :meth:`log_z` of h where the caller has it."""
        s = s.to(h.dtype)
        return torch.log(self.alpha * s * s + 1) - (self.log_z(h) if log_z is None else log_z)[:, None]

    def probs(self, h: Tensor) -> Tensor:
        """(N, V) q(. | h) computed densely: the reference the sampler is checked against."""
        s = h @ self.words.view(-1, self.words.shape[-1])[: self.vocab_size].to(h.dtype).t()
        m = self.alpha * s * s + 1
        return m / m.sum(1, keepdim=True)

    @torch.no_grad()
    def sample(self, h: Tensor, k: int, generator: torch.Generator | None = None,
               scores: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """(N, k) ids, k independent draws from q(. | h_n) for each row n of h (with replacement); with
        ``scores``, also each draw's kernel score h . w (N, k), read from the bucket the draw was made in, so that
        its q (:meth:`log_q_of_scores`) needs no second gather of the snapshot."""
        h = h.detach().to(self.words.dtype)
        out = torch.empty(h.shape[0], k, dtype=torch.int64, device=h.device)
        score = torch.empty(h.shape[0], k, dtype=h.dtype, device=h.device)
        rows = max(1, self.chunk // k)
        if self.dense_leaves(k):  # a chunk's (rows, words) scores stay within LEAF_SCORES (16 MB)
            rows = max(1, min(rows, LEAF_SCORES // self.words[:, :, 0].numel()))
        for lo in range(0, h.shape[0], rows):
            out[lo:lo + rows], score[lo:lo + rows] = self._descend(h[lo:lo + rows], k, generator)
        return (out, score) if scores else out

    def dense_leaves(self, k: int) -> bool:
        """Score every word for each row (one product, compute-bound) rather than gather each draw's bucket
        (memory-bound), where the words are few against the draws' buckets (:data:`DENSE_LEAVES`)."""
        return self.words[:, :, 0].numel() <= DENSE_LEAVES * k * self.bucket_size

    def _descend(self, h: Tensor, k: int, generator) -> tuple[Tensor, Tensor]:
        """k draws for each row of h (n, d) and their scores: root to bucket by the children's masses, then a word
        in the bucket.
        A level of at most ``DENSE_PER_DRAW k`` nodes is scored for every row at once (one product,
        (n, P) x (P, nodes)); below, each draw gathers its node's two children (memory-bound)."""
        n = h.shape[0]
        p = packed_outer(h)  # (n, P)
        node = torch.zeros(n, k, dtype=torch.int64, device=h.device)
        for stats, count in zip(self.levels[1:], self.counts[1:]):
            if stats.shape[0] <= DENSE_PER_DRAW * k:
                every = self.alpha * p @ stats.t() + count  # (n, nodes): every node's mass for every row
                left, right = every.gather(1, 2 * node), every.gather(1, 2 * node + 1)
            else:
                kids = stats.view(-1, 2 * stats.shape[1]).index_select(0, node.reshape(-1))
                kids = kids.view(n, 2 * k, stats.shape[1])  # each draw's two children, side by side
                mass = self.alpha * torch.bmm(kids, p[:, :, None]).view(n, k, 2) + count.view(-1, 2)[node]
                left, right = mass[..., 0], mass[..., 1]
            u = torch.rand(n, k, device=h.device, dtype=h.dtype, generator=generator)
            node = 2 * node + (u * (left + right) >= left).long()
        if self.dense_leaves(k):  # every word's score for every row by one product; each draw reads its bucket's
            every = h @ self.words.view(-1, h.shape[1]).t()  # (n, words)
            s = every.gather(1, (node[..., None] * self.bucket_size + torch.arange(
                self.bucket_size, device=h.device)).view(n, -1)).view(n, k, -1)  # (n, k, bucket)
        else:  # each draw gathers its bucket's words
            words = self.words.view(self.words.shape[0], -1).index_select(0, node.reshape(-1))
            s = torch.bmm(words.view(n, k * self.bucket_size, -1), h[:, :, None]).view(n, k, -1)  # (n, k, bucket)
        mass = self.alpha * s * s + 1
        valid = torch.arange(self.bucket_size, device=h.device) < self.counts[-1][node][..., None]
        pick = torch.multinomial(mass.masked_fill(~valid, 0.0).view(n * k, -1), 1, generator=generator)
        return node * self.bucket_size + pick.view(n, k), s.view(n * k, -1).gather(1, pick).view(n, k)
