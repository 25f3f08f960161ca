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
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from .base import HeadContext, OutputLayer, register


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
            logits = F.linear(hc, weight, bias)  # (c, V)
            lse = torch.logsumexp(logits, dim=1)  # (c,)
            total += (lse - logits.gather(1, tc[:, None]).squeeze(1)).sum(dtype=torch.float64)
            if want_h or want_w or want_b:
                g = logits.sub_(lse[:, None]).exp_()  # softmax, in place: (c, V)
                g[torch.arange(g.shape[0], device=g.device), tc] -= 1.0
                g.div_(n)  # d(mean loss)/d logits
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
        grad_h, grad_w, grad_b = ctx.saved_tensors
        scale = lambda g: None if g is None else g * grad_out  # noqa: E731
        return scale(grad_h), scale(grad_w), scale(grad_b), None, None


def linear_cross_entropy(h: Tensor, weight: Tensor, bias: Tensor | None, target: Tensor,
                         chunk_size: int = 1024) -> Tensor:
    """Mean cross-entropy of ``F.linear(h, weight, bias)`` against ``target``, chunked."""
    return ChunkedLinearCrossEntropy.apply(h, weight, bias, target, chunk_size)


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
        if ctx.tied_weight is not None:
            self.weight = ctx.tied_weight  # (V, d), shared with the input embedding
        else:
            self.weight = nn.Parameter(torch.empty(ctx.vocab_size, ctx.in_dim).uniform_(-opts.init_range, opts.init_range))
        self.bias = nn.Parameter(torch.zeros(ctx.vocab_size))

    def loss(self, hidden: Tensor, target: Tensor) -> Tensor:
        return linear_cross_entropy(hidden, self.weight, self.bias, target, self.opts.chunk_size)

    def log_prob(self, hidden: Tensor) -> Tensor:
        return F.log_softmax(F.linear(hidden, self.weight, self.bias), dim=-1)
