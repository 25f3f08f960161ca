"""Learnable monotonic pointwise functions on the logits before the softmax (Ganea et al., 2019).

A softmax over f(h W^T + b), with f strictly increasing and applied to every logit, is no longer
bounded to rank d + 1 when f is non-linear, yet keeps the order of the logits.

- ``plif``: f piecewise linear on a uniform grid of ``knots`` segments over [-limit, limit], slopes
  softplus(a) > 0, extended linearly outside the grid with the edge slopes, initialised to the
  identity (plus ``init_noise``). Forward is a table lookup (segment index, knot value, slope); the
  gradient is a lookup and a scatter into the M slopes, formed in the loss's single pass
  (``PLIFCrossEntropy``), so time and memory stay close to a plain softmax.
- ``sigsoftmax`` (Kanai et al. 2018): the fixed f(z) = z + logsigmoid(z), i.e. p proportional to
  exp(z) sigmoid(z).
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
from torch.autograd.function import once_differentiable

from .base import HeadContext, OutputLayer, output_embedding, register
from .kernels import (
    MixtureCrossEntropy,
    apply_in_fp32,
    auto_chunk,
    chunked_mean_nll,
    chunked_rows,
    init_range_field,
    mixture_chunk,
    sig_logits,
)

SOFTPLUS_INV_1 = math.log(math.e - 1.0)  # softplus(x) = 1


class _PointwiseSoftmax(OutputLayer):
    """softmax(f(h W^T + b)) for a learnable increasing f; subclasses define ``f``."""

    def __init__(self, ctx: HeadContext, opts):
        super().__init__(ctx, opts)
        self.weight, self.bias = output_embedding(ctx, opts.init_range)

    def f(self, z: Tensor) -> Tensor:
        raise NotImplementedError

    def forward_macs(self, exact: bool) -> float:
        return self.in_dim * self.vocab_size  # f is elementwise: not counted

    def log_prob(self, hidden: Tensor) -> Tensor:
        return F.log_softmax(self.f(F.linear(hidden, self.weight, self.bias)), dim=-1)

    def affine_logits(self):  # f is strictly increasing: argmax f(z) = argmax z (Grivas et al.'s point)
        return self.weight, self.bias, self.vocab_size

    def _target_lp(self, h: Tensor, t: Tensor) -> Tensor:
        z = self.f(F.linear(h, self.weight, self.bias))  # (c, V)
        # log_softmax subtracts the row's max before anything else: a learnt f can reach ~1e9, where float32's
        # spacing is ~100, so z_t - logsumexp(z) would lose the whole log-probability (a perplexity of 1.00)
        return F.log_softmax(z, dim=1).gather(1, t[:, None]).squeeze(1)

    def target_log_prob(self, hidden: Tensor, target: Tensor, chunk_size: int | None = None) -> Tensor:
        rows = chunk_size or auto_chunk(self.opts.chunk_size, self.vocab_size * self.chunk_width)
        return chunked_rows(self._target_lp, hidden, target, rows)

    chunk_width = 1  # (rows x V x chunk_width) elements per chunk in evaluation

    def loss(self, hidden: Tensor, target: Tensor) -> Tensor:
        return chunked_mean_nll(self._target_lp, hidden, target, auto_chunk(self.opts.chunk_size, self.vocab_size))

    def param_groups(self):
        own = [p for n, p in self.named_parameters() if n.startswith("fn_")]
        scale = getattr(self.opts, "lr_scale", 1.0)
        return [(own, scale)] if own and scale != 1.0 else []


@register("sigsoftmax", family="pointwise functions", train_cost=6)
class Sigsoftmax(_PointwiseSoftmax):
    """p(w | h) proportional to exp(z_w) sigmoid(z_w) (Kanai et al. 2018): the fixed increasing
    f(z) = z + logsigmoid(z) before the softmax, exact in log space."""

    @dataclass(frozen=True)
    class Options:
        chunk_size: int | None = field(default=None, metadata={"minimum": 1, "description":
                                       "rows of logits alive at once (null = as many as fit in 2^17 elements)"})
        init_range: float = init_range_field()

    def f(self, z: Tensor) -> Tensor:
        return sig_logits(z)

    # Loss and evaluation: MoSS's fused chunk with one component (its gradients formed in the same pass,
    # nothing recomputed, no log-sigmoid pass over the logits), two (rows x V) blocks alive.
    def _rows(self) -> int:
        return auto_chunk(self.opts.chunk_size, 2 * self.vocab_size)

    def loss(self, hidden: Tensor, target: Tensor) -> Tensor:
        one = hidden.new_zeros(hidden.shape[0], 1)  # log prior of the single component
        return apply_in_fp32(MixtureCrossEntropy, one, hidden[:, None], self.weight, self.bias, target, True,
                             self._rows())

    def target_log_prob(self, hidden: Tensor, target: Tensor, chunk_size: int | None = None) -> Tensor:
        def rows(h: Tensor, t: Tensor) -> Tensor:
            return mixture_chunk(h.new_zeros(h.shape[0], 1), h[:, None], self.weight, self.bias, t, True, None)[0]

        return chunked_rows(rows, hidden, target, chunk_size or self._rows())


class PLIFCrossEntropy(torch.autograd.Function):
    """-mean log softmax(f(h W^T + b))[t] for the piecewise-linear f, chunked, gradients in one pass.

    Per chunk: z = h W^T + b, segment index i(z), u = z - knot_i, y = values_i + slope_i u, then the
    softmax of y; G = dL/dy; dL/dz = G slope_i (a lookup); dL/dslope_j = sum_{i(z)=j} G u +
    delta sum_{i(z)>j} G (a scatter and a suffix sum over the M segments). Memory: the softmax head's
    (chunk x V) block plus its segment indices.
    """

    @staticmethod
    def forward(ctx, h, weight, bias, slope_params, target, limit: float, chunk_size: int):
        n, m = h.shape[0], slope_params.shape[0]
        delta = 2.0 * limit / m
        slopes = F.softplus(slope_params)
        values = torch.cat([slopes.new_full((1,), -limit), -limit + delta * torch.cumsum(slopes, 0)])
        grad_h, grad_w, grad_b = torch.empty_like(h), torch.zeros_like(weight), torch.zeros_like(bias)
        seg_grad, seg_mass = torch.zeros_like(slopes), torch.zeros_like(slopes)
        total = torch.zeros((), dtype=torch.float64, device=h.device)
        for s in range(0, n, chunk_size):
            hc, tc = h[s:s + chunk_size], target[s:s + chunk_size]
            rows = torch.arange(hc.shape[0], device=h.device)
            z = F.linear(hc, weight, bias)  # (c, V)
            idx = torch.floor((z + limit) / delta).nan_to_num_(0.0).clamp_(0, m - 1).long()  # (c, V); a NaN z
            # (blown-up weights) gets segment 0 and stays NaN in f, for the divergence guard to name
            u = z.sub_(idx.to(z.dtype) * delta - limit)  # in z's dtype (int64 x float is float32)  # offset inside the segment, in place
            y = values[idx].addcmul_(slopes[idx], u)  # f(z)
            picked = y[rows, tc]
            top = y.amax(dim=1)
            e = y.sub_(top[:, None]).exp_()
            zsum = e.sum(dim=1)
            total += ((top - picked) + zsum.log()).sum(dtype=torch.float64)  # top - picked first: f may be ~1e9
            g = e.mul_((1.0 / (zsum * n))[:, None])  # dL/dy
            g[rows, tc] -= 1.0 / n
            flat = idx.view(-1)
            seg_grad.index_add_(0, flat, (g * u).view(-1))
            seg_mass.index_add_(0, flat, g.view(-1))
            gz = g.mul_(slopes[idx])  # dL/dz
            torch.mm(gz, weight, out=grad_h[s:s + chunk_size])
            grad_w.addmm_(gz.t(), hc)
            grad_b += gz.sum(0)
        # values_i = -limit + delta * sum_{j<i} slope_j: slope_j feeds every segment above j
        above = torch.flip(torch.cumsum(torch.flip(seg_mass, [0]), 0), [0]) - seg_mass
        grad_a = (seg_grad + delta * above) * torch.sigmoid(slope_params)  # softplus' = sigmoid
        ctx.save_for_backward(grad_h, grad_w, grad_b, grad_a)
        return (total / n).to(h.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        gh, gw, gb, ga = (g * grad_out for g in ctx.saved_tensors)
        return gh, gw, gb, ga, None, None, None


@register("plif", family="pointwise functions", train_cost=6)
class PiecewiseLinearIncreasing(_PointwiseSoftmax):
    @dataclass(frozen=True)
    class Options:
        knots: int = field(default=1000, metadata={"minimum": 1, "description": "segments of the grid"})
        limit: float = field(default=20.0, metadata={"exclusiveMinimum": 0, "description": "grid covers [-limit, limit]"})
        init_noise: float = field(default=0.0, metadata={"minimum": 0, "description": "std of noise on the initial slopes"})
        lr_scale: float = field(default=1.0, metadata={"exclusiveMinimum": 0, "description": "lr of f = this x base lr"})
        chunk_size: int | None = field(default=None, metadata={"minimum": 1, "description":
                                       "rows of logits alive at once (null = as many as fit in 2^17 elements)"})
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
        idx = torch.floor((z.detach() + self.opts.limit) / self.delta).nan_to_num_(0.0).clamp_(0, self.opts.knots - 1)
        idx = idx.long()  # a NaN z (blown-up weights) indexes segment 0 and stays NaN in f
        left = idx.to(z.dtype) * self.delta - self.opts.limit  # knot at the left of each segment
        return values[idx] + slopes[idx] * (z - left)

    def loss(self, hidden: Tensor, target: Tensor) -> Tensor:
        return apply_in_fp32(PLIFCrossEntropy, hidden, self.weight, self.bias, self.fn_slope_params, target,
                             self.opts.limit, auto_chunk(self.opts.chunk_size, self.vocab_size))


class MonotonicMLPCrossEntropy(torch.autograd.Function):
    """-mean log softmax(f(h W^T + b))[t] for f(z) = s0 z + sum_j a_j tanh(b_j z + g_j), chunked, with
    its gradients formed in the same pass (no activation checkpointing, no (c x V x hidden) tensor).

    Per chunk: z, then y = f(z) one hidden unit at a time, the softmax of y, G = dL/dy; a second loop
    over the units recomputes t_j = tanh(b_j z + g_j) and accumulates dL/ds0 = sum G z, dL/da_j =
    sum G t_j, dL/db_j = a_j sum G (1 - t_j^2) z, dL/dg_j = a_j sum G (1 - t_j^2) and
    dL/dz = G (s0 + sum_j a_j b_j (1 - t_j^2)). s0, a, b are softplus of the raw parameters.
    """

    @staticmethod
    def forward(ctx, h, weight, bias, raw_s0, raw_a, raw_b, offset, target, chunk_size: int):
        n = h.shape[0]
        s0, a, b = F.softplus(raw_s0), F.softplus(raw_a), F.softplus(raw_b)
        s0_, a_, b_, g_ = float(s0), a.tolist(), b.tolist(), offset.tolist()
        grad_h, grad_w, grad_b = torch.empty_like(h), torch.zeros_like(weight), torch.zeros_like(bias)
        g_s0 = torch.zeros((), dtype=torch.float64, device=h.device)
        g_a, g_b, g_g = (torch.zeros(len(a_), dtype=torch.float64, device=h.device) for _ in range(3))
        total = torch.zeros((), dtype=torch.float64, device=h.device)
        for s in range(0, n, chunk_size):
            hc, tc = h[s:s + chunk_size], target[s:s + chunk_size]
            rows = torch.arange(hc.shape[0], device=h.device)
            z = F.linear(hc, weight, bias)  # (c, V)
            y = z * s0_
            for aj, bj, gj in zip(a_, b_, g_):
                y.add_(torch.tanh(z * bj + gj), alpha=aj)
            picked = y[rows, tc]
            top = y.amax(dim=1)
            e = y.sub_(top[:, None]).exp_()
            zsum = e.sum(dim=1)
            total += ((top - picked) + zsum.log()).sum(dtype=torch.float64)  # top - picked first: f may be ~1e9
            grad = e.mul_((1.0 / (zsum * n))[:, None])  # G = dL/dy
            grad[rows, tc] -= 1.0 / n
            g_s0 += (grad * z).sum(dtype=torch.float64)
            gz = grad * s0_  # dL/dz, accumulated over the units
            for j, (aj, bj, gj) in enumerate(zip(a_, b_, g_)):
                t = torch.tanh(z * bj + gj)
                g_a[j] += (grad * t).sum(dtype=torch.float64)
                gs = t.mul_(t).neg_().add_(1.0).mul_(grad)  # G (1 - t^2)
                g_b[j] += aj * (gs * z).sum(dtype=torch.float64)
                g_g[j] += aj * gs.sum(dtype=torch.float64)
                gz.add_(gs, alpha=aj * bj)
            torch.mm(gz, weight, out=grad_h[s:s + chunk_size])
            grad_w.addmm_(gz.t(), hc)
            grad_b += gz.sum(0)
        dt = raw_a.dtype
        grads = (grad_h, grad_w, grad_b, (g_s0.to(dt) * torch.sigmoid(raw_s0)), g_a.to(dt) * torch.sigmoid(raw_a),
                 g_b.to(dt) * torch.sigmoid(raw_b), g_g.to(dt))
        ctx.save_for_backward(*grads)
        return (total / n).to(h.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        return (*(g * grad_out for g in ctx.saved_tensors), None, None)


@register("monotonic-mlp", family="pointwise functions", train_cost=8)
class MonotonicMLP(_PointwiseSoftmax):
    @dataclass(frozen=True)
    class Options:
        hidden: int = field(default=16, metadata={"minimum": 1, "description": "hidden units of f"})
        limit: float = field(default=20.0, metadata={"exclusiveMinimum": 0,
                             "description": "initial offsets gamma_j spread over [-limit, limit]"})
        lr_scale: float = field(default=1.0, metadata={"exclusiveMinimum": 0, "description": "lr of f = this x base lr"})
        chunk_size: int | None = field(default=None, metadata={"minimum": 1, "description":
                                       "rows of logits alive at once (null = as many as fit in 2^17 elements)"})
        init_range: float = init_range_field()

    @property
    def chunk_width(self) -> int:  # evaluation forms the (rows x V x hidden) activations
        return self.opts.hidden

    def loss(self, hidden: Tensor, target: Tensor) -> Tensor:
        return apply_in_fp32(MonotonicMLPCrossEntropy, hidden, self.weight, self.bias, self.fn_linear, self.fn_out,
                             self.fn_in, self.fn_offset, target, auto_chunk(self.opts.chunk_size, self.vocab_size))

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
