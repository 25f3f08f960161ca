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

from .base import (HeadContext, OutputLayer, apply_in_fp32, chunked_rows, output_embedding, register,
                   target_log_softmax)


class ChunkedLinearCrossEntropy(torch.autograd.Function):
    """mean_i [ logsumexp(h_i W^T + b) - (h_i W^T + b)[t_i] ], exact, O(chunk x V) memory."""

    @staticmethod
    def forward(ctx, h: Tensor, weight: Tensor, bias: Tensor | None, target: Tensor, chunk_size: int):
        n = h.shape[0]  # h (N, d), weight (V, d), bias (V,), target (N,)
        want_h, want_w, want_b = ctx.needs_input_grad[:3]
        grad_h = torch.empty_like(h) if want_h else None
        grad_w = torch.zeros_like(weight) if want_w else None
        grad_b = torch.zeros_like(bias) if (want_b and bias is not None) else None
        total = torch.zeros((), dtype=torch.float64, device=h.device)
        for s in range(0, n, chunk_size):
            hc, tc = h[s:s + chunk_size], target[s:s + chunk_size]  # (c, d), (c,)
            rows = torch.arange(hc.shape[0], device=h.device)
            logits = F.linear(hc, weight, bias)  # (c, V)
            picked = logits[rows, tc]  # (c,) target logits
            top = logits.amax(dim=1)  # (c,)
            p = logits.sub_(top[:, None]).exp_()  # unnormalised softmax, in place: one exp pass
            z = p.sum(dim=1)  # (c,)
            total += (top + z.log() - picked).sum(dtype=torch.float64)
            if want_h or want_w or want_b:
                g = p.mul_((1.0 / (z * n))[:, None])  # softmax / N = d(mean loss)/d logits, minus the one-hot
                g[rows, tc] -= 1.0 / n
                if grad_h is not None:
                    torch.mm(g, weight, out=grad_h[s:s + chunk_size])
                if grad_w is not None:
                    grad_w.addmm_(g.t(), hc)
                if grad_b is not None:
                    grad_b += g.sum(0)
        ctx.save_for_backward(grad_h, grad_w, grad_b)
        return (total / n).to(h.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor):
        # The gradients were computed in forward for a unit upstream gradient. Scale out of
        # place: the saved tensors must survive a second backward (retain_graph, gradcheck).
        grads = [None if g is None else g * grad_out for g in ctx.saved_tensors]
        return grads[0], grads[1], grads[2], None, None


def linear_cross_entropy(h: Tensor, weight: Tensor, bias: Tensor | None, target: Tensor,
                         chunk_size: int = 1024) -> Tensor:
    """Mean cross-entropy of ``F.linear(h, weight, bias)`` against ``target``, chunked."""
    return apply_in_fp32(ChunkedLinearCrossEntropy, h, weight, bias, target, chunk_size)


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

    def loss(self, hidden: Tensor, target: Tensor) -> Tensor:
        return linear_cross_entropy(hidden, self.weight, self.bias, target, self.opts.chunk_size)

    def log_prob(self, hidden: Tensor) -> Tensor:
        return F.log_softmax(F.linear(hidden, self.weight, self.bias), dim=-1)

    def target_log_prob(self, hidden: Tensor, target: Tensor, chunk_size: int | None = None) -> Tensor:
        return chunked_rows(lambda h, t: target_log_softmax(F.linear(h, self.weight, self.bias), t),  # (c, V)
                            hidden, target, chunk_size or self.opts.chunk_size)
