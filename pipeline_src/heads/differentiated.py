"""Differentiated softmax (Chen, Grangier & Auli 2016).

The frequency-sorted vocabulary is split into bands; band b's logits come from its own slice of the context
vector, h[:, slice_b] W_b^T + b_b with W_b of shape (|band b|, d_b) and sum_b d_b = d, and one softmax runs over
all the logits. Frequent words get wide slices, rare words narrow ones: the output matrix is block-diagonal,
so a step costs d_b |band b| summed over bands instead of d |V|. As a logit matrix it is h W^T + b with a
block-sparse W, so its log-probability matrix keeps the softmax's rank bound d + 2.

The loss is the softmax's fused one over the band logits (three products per band, one softmax pass).
Defaults (ours; the paper tunes bands and widths per corpus): bands at 5% and 25% of the vocabulary (the
adaptive softmax's default cut-offs), widths d/2, d/4 and d/4 for the frequent, middle and rare band.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from ..io.errors import ConfigError
from .base import HeadContext, OutputLayer, register
from .kernels import Scratch, apply_in_fp32, chunked_rows, default_cutoffs, linear_score_and_log_z, softmax_


def default_widths(d: int, bands: int) -> list[int]:
    """Half of d for the first band, the rest split evenly (at least 1 each; the last takes what is left)."""
    if bands == 1:
        return [d]
    first = max(1, d // 2)
    rest = [max(1, (d - first) // (bands - 1))] * (bands - 1)
    rest[-1] = d - first - sum(rest[:-1])
    return [first] + rest


def bands(edges: list[int], slices: list[int], weights) -> list[tuple[int, int, int, int, Tensor]]:
    """(v0, v1, a, b, W_b) per band: its words [v0, v1), its slice [a, b) of the context, its weight."""
    return list(zip(edges, edges[1:], slices, slices[1:], weights))


class ChunkedBandCrossEntropy(torch.autograd.Function):
    """The softmax's fused loss (``softmax.ChunkedLinearCrossEntropy``) over band logits: per chunk of rows the
    bands' products are written side by side into one (c, V) block, one in-place row softmax, then each band's
    two gradient products; O(chunk x V) memory, nothing recomputed. ``edges``/``slices``: band boundaries over
    the vocabulary and over the context's dimensions."""

    @staticmethod
    def forward(ctx, h: Tensor, bias: Tensor, target: Tensor, chunk_size: int, scratch: Scratch | None,
                edges: list[int], slices: list[int], *weights: Tensor):
        n = h.shape[0]  # h (N, d), bias (V,), weights[b] (|band b|, d_b)
        parts = bands(edges, slices, weights)
        grad_h = torch.empty_like(h) if ctx.needs_input_grad[0] else None
        grad_b = torch.zeros_like(bias) if ctx.needs_input_grad[1] else None
        grad_w = [torch.empty_like(w) if ctx.needs_input_grad[7 + i] else None for i, w in enumerate(weights)]
        total = torch.zeros((), dtype=torch.float64, device=h.device)
        for s in range(0, n, chunk_size):
            hc, tc = h[s:s + chunk_size], target[s:s + chunk_size]  # (c, d), (c,)
            rows = torch.arange(hc.shape[0], device=h.device)
            logits = scratch.get(hc.shape[0], bias.shape[0], h) if scratch is not None else \
                h.new_empty(hc.shape[0], bias.shape[0])  # (c, V)
            for v0, v1, a, b, w in parts:
                torch.addmm(bias[v0:v1], hc[:, a:b], w.t(), out=logits[:, v0:v1])
            picked = logits[rows, tc]
            top = logits.amax(dim=1)
            p = softmax_(logits)
            total += (top - p.amax(dim=1).log() - picked).sum(dtype=torch.float64)
            p[rows, tc] -= 1.0  # N x d(mean loss)/d logits; the 1/N goes into the products
            for i, (v0, v1, a, b, w) in enumerate(parts):
                if grad_h is not None:
                    grad_h[s:s + chunk_size, a:b].addmm_(p[:, v0:v1], w, beta=0.0, alpha=1.0 / n)
                if grad_w[i] is not None:
                    grad_w[i].addmm_(p[:, v0:v1].t(), hc[:, a:b], beta=float(s > 0), alpha=1.0 / n)
            if grad_b is not None:
                grad_b.add_(p.sum(0), alpha=1.0 / n)
        ctx.save_for_backward(grad_h, grad_b, *grad_w)
        return (total / n).to(h.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor):
        grads = [None if g is None else g * grad_out for g in ctx.saved_tensors]
        return (grads[0], grads[1], None, None, None, None, None, *grads[2:])


@register("differentiated-softmax", family="structured and self-normalised heads")
class DifferentiatedSoftmax(OutputLayer):

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
        self.scratch = Scratch()

    def bands(self) -> list[tuple[int, int, int, int, Tensor]]:
        return bands(self.edges, self.slices, self.weights)

    def forward_macs(self, exact: bool) -> float:
        return float(sum(w.numel() for w in self.weights))  # sum over bands of |band| d_b

    def logits(self, hidden: Tensor) -> Tensor:
        """(N, V) logits: each band's from its own slice of h."""
        parts = [F.linear(hidden[:, a:b], w) for _, _, a, b, w in self.bands()]
        return torch.cat(parts, dim=1) + self.bias

    def loss(self, hidden: Tensor, target: Tensor) -> Tensor:
        return apply_in_fp32(ChunkedBandCrossEntropy, hidden, self.bias, target, self.opts.chunk_size, self.scratch,
                             self.edges, self.slices, *self.weights)

    def affine_logits(self):  # one block-sparse W: band b's rows read only slice b of h
        w = self.bias.new_zeros(self.vocab_size, self.in_dim)
        for v0, v1, a, b, wb in self.bands():
            w[v0:v1, a:b] = wb
        return w, self.bias, self.vocab_size

    def log_prob(self, hidden: Tensor) -> Tensor:
        return F.log_softmax(self.logits(hidden), dim=-1)

    def target_log_prob(self, hidden: Tensor, target: Tensor, chunk_size: int | None = None) -> Tensor:
        return chunked_rows(self._band_target_log_prob, hidden, target, chunk_size or self.opts.chunk_size)

    def _band_target_log_prob(self, h: Tensor, t: Tensor) -> Tensor:
        """log p(t | h), (c,): each band's logits blocked over its words as the softmax's exact evaluation is
        (``linear_score_and_log_z``), the bands' log Z joined by logaddexp; no (c, V) tensor is formed."""
        score, log_z = torch.zeros_like(t, dtype=h.dtype), None
        for v0, v1, a, b, w in self.bands():
            s, lz = linear_score_and_log_z(h[:, a:b].contiguous(), w, self.bias[v0:v1], t - v0)
            score = torch.where((t >= v0) & (t < v1), s, score)  # s is a target's logit only inside its band
            log_z = lz if log_z is None else torch.logaddexp(log_z, lz)
        return score - log_z
