"""Learnable monotonic pointwise functions on the logits before the softmax (Ganea et al., 2019).

A softmax over f(h W^T + b), with f strictly increasing and applied to every logit, is no longer
bounded to rank d + 1 when f is non-linear, yet keeps the order of the logits.

- ``plif``: f piecewise linear on a uniform grid of ``knots`` segments over [-limit, limit], slopes
  softplus(a) > 0, extended linearly outside the grid with the edge slopes, initialised to the
  identity (plus ``init_noise``). Forward is a table lookup (segment index, knot value, slope);
  backward scatters into the M slopes, so time and memory stay close to a plain softmax.
- ``monotonic-mlp``: f(z) = s0 z + sum_j alpha_j tanh(beta_j z + gamma_j) with s0, alpha, beta > 0
  (softplus), a one-hidden-layer network per logit: (rows x V x hidden) activations, the memory
  PLIF avoids. Included to measure that trade-off.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import HeadContext, OutputLayer, chunked_mean_nll, output_embedding, register
from .mixture import init_range_field

SOFTPLUS_INV_1 = math.log(math.e - 1.0)  # softplus(x) = 1


class _PointwiseSoftmax(OutputLayer):
    """softmax(f(h W^T + b)) for a learnable increasing f; subclasses define ``f``."""

    def __init__(self, ctx: HeadContext, opts):
        super().__init__(ctx, opts)
        self.weight, self.bias = output_embedding(ctx, opts.init_range)

    def f(self, z: Tensor) -> Tensor:
        raise NotImplementedError

    def log_prob(self, hidden: Tensor) -> Tensor:
        return F.log_softmax(self.f(F.linear(hidden, self.weight, self.bias)), dim=-1)

    def _target_lp(self, h: Tensor, t: Tensor) -> Tensor:
        z = self.f(F.linear(h, self.weight, self.bias))  # (c, V)
        return z.gather(1, t[:, None]).squeeze(1) - torch.logsumexp(z, dim=1)

    def target_log_prob(self, hidden: Tensor, target: Tensor, chunk_size: int | None = None) -> Tensor:
        c = chunk_size or self.opts.chunk_size
        return torch.cat([self._target_lp(hidden[s:s + c], target[s:s + c]) for s in range(0, hidden.shape[0], c)])

    def loss(self, hidden: Tensor, target: Tensor) -> Tensor:
        return chunked_mean_nll(self._target_lp, hidden, target, self.opts.chunk_size)

    def param_groups(self):
        own = [p for n, p in self.named_parameters() if n.startswith("fn_")]
        return [(own, self.opts.lr_scale)] if self.opts.lr_scale != 1.0 else []


@register("plif")
class PiecewiseLinearIncreasing(_PointwiseSoftmax):
    @dataclass(frozen=True)
    class Options:
        knots: int = field(default=1000, metadata={"minimum": 1, "description": "segments of the grid"})
        limit: float = field(default=20.0, metadata={"exclusiveMinimum": 0, "description": "grid covers [-limit, limit]"})
        init_noise: float = field(default=0.0, metadata={"minimum": 0, "description": "std of noise on the initial slopes"})
        lr_scale: float = field(default=1.0, metadata={"exclusiveMinimum": 0, "description": "lr of f = this x base lr"})
        chunk_size: int = field(default=512, metadata={"minimum": 1, "description": "rows of logits alive at once"})
        init_range: float = init_range_field()

    def __init__(self, ctx: HeadContext, opts: Options):
        super().__init__(ctx, opts)
        a = torch.full((opts.knots,), SOFTPLUS_INV_1)
        self.fn_slope_params = nn.Parameter(a + opts.init_noise * torch.randn(opts.knots))
        self.delta = 2.0 * opts.limit / opts.knots

    def tables(self) -> tuple[Tensor, Tensor]:
        """Slopes (M,) and the values of f at the M + 1 knots (f(-limit) = -limit)."""
        slopes = F.softplus(self.fn_slope_params)
        start = slopes.new_full((1,), -self.opts.limit)
        return slopes, torch.cat([start, start + self.delta * torch.cumsum(slopes, 0)])

    def f(self, z: Tensor) -> Tensor:
        slopes, values = self.tables()
        idx = torch.floor((z.detach() + self.opts.limit) / self.delta).clamp_(0, self.opts.knots - 1).long()
        left = idx.to(z.dtype) * self.delta - self.opts.limit  # knot at the left of each segment
        return values[idx] + slopes[idx] * (z - left)


@register("monotonic-mlp")
class MonotonicMLP(_PointwiseSoftmax):
    @dataclass(frozen=True)
    class Options:
        hidden: int = field(default=16, metadata={"minimum": 1, "description": "hidden units of f"})
        limit: float = field(default=20.0, metadata={"exclusiveMinimum": 0,
                             "description": "initial offsets gamma_j spread over [-limit, limit]"})
        lr_scale: float = field(default=1.0, metadata={"exclusiveMinimum": 0, "description": "lr of f = this x base lr"})
        chunk_size: int = field(default=128, metadata={"minimum": 1, "description": "rows of logits alive at once"})
        init_range: float = init_range_field()

    def __init__(self, ctx: HeadContext, opts: Options):
        super().__init__(ctx, opts)
        k = opts.hidden
        self.fn_linear = nn.Parameter(torch.tensor(SOFTPLUS_INV_1))  # s0 = 1: identity at init
        self.fn_out = nn.Parameter(torch.full((k,), -6.0))  # alpha ~ 0.0025: a small perturbation
        self.fn_in = nn.Parameter(torch.full((k,), SOFTPLUS_INV_1))
        self.fn_offset = nn.Parameter(torch.linspace(-opts.limit, opts.limit, k))

    def f(self, z: Tensor) -> Tensor:
        a, b = F.softplus(self.fn_out), F.softplus(self.fn_in)
        hidden = torch.tanh(z[..., None] * b + self.fn_offset)  # (..., V, hidden)
        return F.softplus(self.fn_linear) * z + hidden @ a
