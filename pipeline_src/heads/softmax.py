"""Full softmax head, with a loss that never materialises the (N x V) logit matrix.

The cross-entropy of a linear layer is computed chunk by chunk over rows. Because the
loss is a scalar that ends the graph, the gradients w.r.t. h, W and b are computed in
the same pass as the loss (three matrix products per chunk, the floor for a softmax
layer) and merely scaled by the incoming gradient in ``backward``; nothing is recomputed
and only one (chunk x V) block is alive at a time.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

from .base import (HeadContext, OutputLayer, Scratch, apply_in_fp32, chunked_rows, linear_target_log_prob,
    output_embedding, register)


def softmax_(logits: Tensor) -> Tensor:
    """Row softmax of a (c, V) block, in place on the CPU: its kernel takes each row's max, exp and sum
    while the row is in cache, one pass over memory where amax, sub, exp, sum and a division were five.
    (Writing into its own input is safe there: each element is read before it is written. Elsewhere a
    new tensor, which a caching allocator makes cheap.)"""
    if logits.device.type == "cpu":
        return torch.ops.aten._softmax.out(logits, 1, False, out=logits)
    return torch.softmax(logits, dim=1)


class ChunkedLinearCrossEntropy(torch.autograd.Function):
    """mean_i [ log Z_i - (h_i W^T + b)[t_i] + alpha (log Z_i)^2 ], log Z_i = logsumexp(h_i W^T + b): the
    cross-entropy (alpha = 0), or Devlin et al.'s self-normalised objective; exact, O(chunk x V) memory."""

    @staticmethod
    def forward(ctx, h: Tensor, weight: Tensor, bias: Tensor | None, target: Tensor, chunk_size: int,
                scratch: Scratch | None, alpha: float = 0.0):
        n = h.shape[0]  # h (N, d), weight (V, d), bias (V,), target (N,)
        want_h, want_w, want_b = ctx.needs_input_grad[:3]
        grad_h = torch.empty_like(h) if want_h else None
        grad_w = torch.empty_like(weight) if want_w else None  # the first chunk's product overwrites it
        grad_b = torch.zeros_like(bias) if (want_b and bias is not None) else None
        total = torch.zeros((), dtype=torch.float64, device=h.device)
        for s in range(0, n, chunk_size):
            hc, tc = h[s:s + chunk_size], target[s:s + chunk_size]  # (c, d), (c,)
            rows = torch.arange(hc.shape[0], device=h.device)
            block = scratch.get(hc.shape[0], weight.shape[0], h) if scratch is not None else None
            logits = (torch.mm(hc, weight.t(), out=block) if bias is None  # (c, V)
                      else torch.addmm(bias, hc, weight.t(), out=block))
            picked = logits[rows, tc]  # (c,) target logits
            top = logits.amax(dim=1)  # (c,)
            p = softmax_(logits)  # (c, V)
            # logsumexp = top + log z, and the row's largest probability is exp(0) / z
            log_z = top - p.amax(dim=1).log()  # (c,)
            total += (log_z - picked).sum(dtype=torch.float64)
            if alpha:  # d(alpha log^2 Z)/d logits = 2 alpha log Z softmax
                total += alpha * (log_z.double() ** 2).sum()
                p.mul_((1.0 + 2.0 * alpha * log_z)[:, None])
            if want_h or want_w or want_b:
                p[rows, tc] -= 1.0  # N x d(mean loss)/d logits = softmax - one-hot; the 1/N goes into the products
                if grad_h is not None:
                    grad_h[s:s + chunk_size].addmm_(p, weight, beta=0.0, alpha=1.0 / n)
                if grad_w is not None:
                    grad_w.addmm_(p.t(), hc, beta=float(s > 0), alpha=1.0 / n)
                if grad_b is not None:
                    grad_b.add_(p.sum(0), alpha=1.0 / n)
        ctx.save_for_backward(grad_h, grad_w, grad_b)
        return (total / n).to(h.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor):
        # The gradients were computed in forward for a unit upstream gradient. Scale out of
        # place: the saved tensors must survive a second backward (retain_graph, gradcheck).
        grads = [None if g is None else g * grad_out for g in ctx.saved_tensors]
        return grads[0], grads[1], grads[2], None, None, None, None


def linear_cross_entropy(h: Tensor, weight: Tensor, bias: Tensor | None, target: Tensor,
                         chunk_size: int = 1024, scratch: Scratch | None = None, alpha: float = 0.0) -> Tensor:
    """Mean cross-entropy of ``F.linear(h, weight, bias)`` against ``target``, chunked (plus alpha log^2 Z per
    row: the self-normalised objective); the logits of each chunk are written into ``scratch`` when given
    (a head's block, reused every step)."""
    return apply_in_fp32(ChunkedLinearCrossEntropy, h, weight, bias, target, chunk_size, scratch, alpha)


@register("softmax")
class Softmax(OutputLayer):
    """p(w | h) = softmax(h W^T + b): the baseline whose log-prob matrix has rank <= d + 1."""

    @dataclass(frozen=True)
    class Options:
        chunk_size: int = field(default=1024, metadata={"minimum": 1,
                                "description": "rows of the logit matrix alive at once"})
        init_range: float = field(default=0.1, metadata={"exclusiveMinimum": 0,
                                  "description": "untied weights ~ U(-r, r), as in PyTorch's word LM example"})

    def __init__(self, ctx: HeadContext, opts: Options):
        super().__init__(ctx, opts)
        self.weight, self.bias = output_embedding(ctx, opts.init_range)  # (V, d), (V,)
        self.scratch = Scratch()

    def loss(self, hidden: Tensor, target: Tensor) -> Tensor:
        return linear_cross_entropy(hidden, self.weight, self.bias, target, self.opts.chunk_size, self.scratch)

    def forward_macs(self, exact: bool) -> float:
        return self.in_dim * self.vocab_size

    def log_prob(self, hidden: Tensor) -> Tensor:
        return F.log_softmax(F.linear(hidden, self.weight, self.bias), dim=-1)

    def affine_logits(self):
        return self.weight, self.bias, self.vocab_size

    def target_log_prob(self, hidden: Tensor, target: Tensor, chunk_size: int | None = None) -> Tensor:
        return chunked_rows(lambda h, t: linear_target_log_prob(h, self.weight, self.bias, t),
                            hidden, target, chunk_size or self.opts.chunk_size)


def mos_forward_macs(d: int, v: int, k: int) -> int:
    """Multiply-adds per token of MoS with K components: prior d K, latent projections K d^2, K logit rows d V."""
    return d * k + k * d * d + k * d * v


def matched_width(d: int, v: int, k: int) -> int:
    """The d' whose widened softmax, d d' + d' V multiply-adds per token, costs what MoS with K components does."""
    return max(1, round(mos_forward_macs(d, v, k) / (d + v)))


@register("wide-softmax")
class WideSoftmax(OutputLayer):
    """The compute control for MoS: one softmax over a wider context g' = tanh(W g + b) in R^{d'}.

    A linear widening of a d-dimensional context would keep the rank bound d + 2; the tanh makes
    it d' + 2. With ``width`` unset, d' is chosen so that the head's multiply-adds per token match
    MoS with ``match_components`` components (d' ~ K d when V >> d): if MoS beats it, MoS wins by
    more than compute. Its output embedding is its own (V, d'): it cannot be tied to a d-dim input.
    """

    @dataclass(frozen=True)
    class Options:
        width: int | None = field(default=None, metadata={"minimum": 1,
                                  "description": "d', the widened context (null = match MoS's cost)"})
        match_components: int = field(default=8, metadata={"minimum": 1,
                                      "description": "K of the MoS whose multiply-adds per token d' matches"})
        chunk_size: int = field(default=1024, metadata={"minimum": 1, "description": "rows of logits alive at once"})
        init_range: float = field(default=0.1, metadata={"exclusiveMinimum": 0, "description": "weights ~ U(-r, r)"})

    def __init__(self, ctx: HeadContext, opts: Options):
        super().__init__(ctx, opts)
        self.width = opts.width or matched_width(ctx.in_dim, ctx.vocab_size, opts.match_components)
        self.widen = torch.nn.Linear(ctx.in_dim, self.width)  # (d -> d')
        wide = HeadContext(vocab_size=ctx.vocab_size, in_dim=self.width)  # never tied: d' != emb_dim
        self.weight, self.bias = output_embedding(wide, opts.init_range)  # (V, d'), (V,)
        self.scratch = Scratch()

    @property
    def rank_dim(self) -> int:
        return self.width

    def context(self, hidden: Tensor) -> Tensor:
        return torch.tanh(self.widen(hidden))  # (N, d')

    def forward_macs(self, exact: bool) -> float:
        return self.in_dim * self.width + self.width * self.vocab_size

    def loss(self, hidden: Tensor, target: Tensor) -> Tensor:
        return linear_cross_entropy(self.context(hidden), self.weight, self.bias, target, self.opts.chunk_size,
                                    self.scratch)

    def log_prob(self, hidden: Tensor) -> Tensor:
        return F.log_softmax(F.linear(self.context(hidden), self.weight, self.bias), dim=-1)

    def affine_logits(self):  # affine in the widened context tanh(W' h + b')
        return self.weight, self.bias, self.vocab_size

    def target_log_prob(self, hidden: Tensor, target: Tensor, chunk_size: int | None = None) -> Tensor:
        return chunked_rows(lambda h, t: linear_target_log_prob(self.context(h), self.weight, self.bias, t),
                            hidden, target, chunk_size or self.opts.chunk_size)
