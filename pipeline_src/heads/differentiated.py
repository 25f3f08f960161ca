"""Differentiated softmax (Chen, Grangier & Auli 2016).

The frequency-sorted vocabulary is split into bands; band b's logits come from its own slice of the context
vector, h[:, slice_b] W_b^T + b_b with W_b of shape (|band b|, d_b) and sum_b d_b = d, and one softmax runs over
all the logits. Frequent words get wide slices, rare words narrow ones: the output matrix is block-diagonal,
so a step costs d_b |band b| summed over bands instead of d |V|. As a logit matrix it is h W^T + b with a
block-sparse W, so its log-probability matrix keeps the softmax's rank bound d + 2.

Defaults (ours; the paper tunes bands and widths per corpus): bands at 5% and 25% of the vocabulary (the
adaptive softmax's default cut-offs), widths d/2, d/4 and d/4 for the frequent, middle and rare band.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import ConfigError
from .adaptive import default_cutoffs
from .base import HeadContext, OutputLayer, chunked_mean_nll, chunked_rows, register, target_log_softmax


def default_widths(d: int, bands: int) -> list[int]:
    """Half of d for the first band, the rest split evenly (at least 1 each; the last takes what is left)."""
    if bands == 1:
        return [d]
    first = max(1, d // 2)
    rest = [max(1, (d - first) // (bands - 1))] * (bands - 1)
    rest[-1] = d - first - sum(rest[:-1])
    return [first] + rest


@register("differentiated-softmax")
class DifferentiatedSoftmax(OutputLayer):
    train_passes = 4  # chunks run under activation checkpointing: the forward is recomputed in backward

    @dataclass(frozen=True)
    class Options:
        cutoffs: tuple[int, ...] = field(default=(), metadata={
            "description": "ids where bands start after the first (increasing, < V); empty = 5% and 25% of V"})
        widths: tuple[int, ...] = field(default=(), metadata={
            "description": "context slice width of each band, summing to the head input d; empty = d/2, then the rest evenly"})
        chunk_size: int = field(default=1024, metadata={"minimum": 1, "description": "rows of logits alive at once"})
        init_range: float = field(default=0.1, metadata={"exclusiveMinimum": 0, "description": "weights ~ U(-r, r)"})

    def __init__(self, ctx: HeadContext, opts: Options):
        super().__init__(ctx, opts)
        v, d = ctx.vocab_size, ctx.in_dim
        cutoffs = list(opts.cutoffs) or default_cutoffs(v)
        if sorted(set(cutoffs)) != cutoffs or (cutoffs and (cutoffs[0] < 1 or cutoffs[-1] >= v)):
            raise ConfigError(f"differentiated-softmax option 'cutoffs': {cutoffs} must be increasing integers in [1, {v})")
        widths = list(opts.widths) or default_widths(d, len(cutoffs) + 1)
        if len(widths) != len(cutoffs) + 1 or sum(widths) != d or min(widths) < 1:
            raise ConfigError(f"differentiated-softmax option 'widths': {widths} must be {len(cutoffs) + 1} positive "
                              f"integers summing to the head input d = {d}")
        self.edges = [0, *cutoffs, v]
        self.slices = [0]
        for w in widths:
            self.slices.append(self.slices[-1] + w)
        self.weights = nn.ParameterList(
            nn.Parameter(torch.empty(e - s, w).uniform_(-opts.init_range, opts.init_range))
            for s, e, w in zip(self.edges, self.edges[1:], widths))
        self.bias = nn.Parameter(torch.zeros(v))

    def forward_macs(self, exact: bool) -> float:
        return float(sum(w.numel() for w in self.weights))  # sum over bands of |band| d_b

    def logits(self, hidden: Tensor) -> Tensor:
        """(N, V) logits: each band's from its own slice of h."""
        parts = [F.linear(hidden[:, a:b], w) for a, b, w in zip(self.slices, self.slices[1:], self.weights)]
        return torch.cat(parts, dim=1) + self.bias

    def loss(self, hidden: Tensor, target: Tensor) -> Tensor:
        return chunked_mean_nll(lambda h, t: target_log_softmax(self.logits(h), t), hidden, target,
                                self.opts.chunk_size)

    def log_prob(self, hidden: Tensor) -> Tensor:
        return F.log_softmax(self.logits(hidden), dim=-1)

    def target_log_prob(self, hidden: Tensor, target: Tensor, chunk_size: int | None = None) -> Tensor:
        return chunked_rows(lambda h, t: target_log_softmax(self.logits(h), t), hidden, target,
                            chunk_size or self.opts.chunk_size)
