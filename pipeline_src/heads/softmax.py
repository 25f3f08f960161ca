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

from .base import HeadContext, OutputLayer, output_embedding, register
from .kernels import (
    Scratch,
    chunked_rows,
    linear_cross_entropy,
    linear_log_mass,
    linear_target_log_prob,
    matched_width,
)


@register("softmax", family="softmax and its controls", train_cost=4)
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

    def log_mass(self, hidden: Tensor, member: Tensor) -> Tensor:
        return linear_log_mass(hidden, self.weight, self.bias, member)

    def target_log_prob(self, hidden: Tensor, target: Tensor, chunk_size: int | None = None) -> Tensor:
        return chunked_rows(lambda h, t: linear_target_log_prob(h, self.weight, self.bias, t),
                            hidden, target, chunk_size or self.opts.chunk_size)


@register("wide-softmax", family="softmax and its controls", train_cost=6)
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

    def log_mass(self, hidden: Tensor, member: Tensor) -> Tensor:
        return linear_log_mass(self.context(hidden), self.weight, self.bias, member)

    def target_log_prob(self, hidden: Tensor, target: Tensor, chunk_size: int | None = None) -> Tensor:
        return chunked_rows(lambda h, t: linear_target_log_prob(self.context(h), self.weight, self.bias, t),
                            hidden, target, chunk_size or self.opts.chunk_size)
