"""Heads that break the softmax bottleneck by mixing, and Sigsoftmax.

- ``mos``  Mixture of Softmaxes (Yang et al., ICLR 2018):
  pi = softmax(W_pi g), h_k = dropout(tanh(W_k g + b_k)),
  log p = logsumexp_k(log pi_k + log_softmax(h_k W^T + b)).
- ``moc``  Mixture of Contexts, the paper's negative control: the same parameters, but the
  contexts are mixed first, p = softmax((sum_k pi_k h_k) W^T + b); rank stays <= d + 1.
- ``moss`` mixture of sigsoftmaxes (Kanai et al., NeurIPS 2018): MoS with sigsoftmax components
  (``sigsoftmax`` itself, a fixed pointwise function of the logits, lives in pointwise.py).

All are exact in log space (no log(p + eps)). The MoS/MoSS loss runs chunk by chunk and forms its
gradients in the same pass (``MixtureCrossEntropy``: 3K matrix products per chunk, one exp pass), so the
(rows x K x V) tensor never exists for all rows at once and nothing is recomputed.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import HeadContext, OutputLayer, output_embedding, register
from .kernels import (
    MIXTURE_CHUNK_ELEMENTS,
    MIXTURE_MIN_ROWS,
    MixtureCrossEntropy,
    Scratch,
    apply_in_fp32,
    auto_chunk,
    chunked_rows,
    init_range_field,
    linear_cross_entropy,
    linear_target_log_prob,
    mixture_chunk,
    sig_logits,
)


# a mixture's chunk does 3K small matrix products and ~15 passes: fewer, larger chunks pay off sooner than
# for a pointwise head (measured at V = 500, K = 8, one thread: 64-row chunks 59 ms/step against 70 for 16)
class _Mixture(OutputLayer):
    """Shared parameters of MoS / MoSS / MoC: prior, K latent projections, one output embedding."""

    sigmoid_gate = False  # MoSS: components are sigsoftmaxes

    @dataclass(frozen=True)
    class Options:
        components: int = field(default=15, metadata={"minimum": 1, "description": "K, mixture components"})
        context_dropout: float = field(default=0.0, metadata={"minimum": 0, "maximum": 1,
                                       "description": "dropout on the component contexts h_k"})
        chunk_size: int | None = field(default=None, metadata={"minimum": 1, "description":
                                       "rows whose (K x V) logits are alive at once (null = as many as fit in 2^19 "
                                       "elements)"})
        init_range: float = init_range_field()

    def __init__(self, ctx: HeadContext, opts: Options):
        super().__init__(ctx, opts)
        k, d = opts.components, ctx.in_dim
        self.weight, self.bias = output_embedding(ctx, opts.init_range)  # (V, e), (V,)
        # the components live in the output embedding's width e: d, or a tied table's own width (AWD-LSTM-MoS:
        # the last LSTM layer has 620 units, the tied embedding 280; Yang et al.'s latent maps 620 -> K x 280)
        self.comp_dim = self.weight.shape[1]
        self.prior = nn.Linear(d, k, bias=False)
        self.latent = nn.Linear(d, k * self.comp_dim)
        self.drop = nn.Dropout(opts.context_dropout)

    def forward_macs(self, exact: bool) -> float:
        d, e, v, k = self.in_dim, self.comp_dim, self.vocab_size, self.opts.components
        logits = e * v if self.mixes_contexts else k * e * v
        return d * k + k * d * e + logits

    mixes_contexts = False  # MoC: one (d x V) product per token instead of K

    def chunk_rows(self) -> int:
        """Rows per chunk: one (rows x K x V) block (two for sigsoftmax components, which keep sigmoid(z))."""
        width = self.vocab_size * (1 if self.mixes_contexts else self.opts.components * (2 if self.sigmoid_gate else 1))
        return auto_chunk(self.opts.chunk_size, width, MIXTURE_CHUNK_ELEMENTS, MIXTURE_MIN_ROWS)

    def mixture(self, g: Tensor) -> tuple[Tensor, Tensor]:
        """g (n, d) -> log prior (n, K), component contexts h_k (n, K, d)."""
        log_prior = F.log_softmax(self.prior(g), dim=-1)
        h = self.drop(torch.tanh(self.latent(g))).view(g.shape[0], self.opts.components, -1)
        return log_prior, h

    def _component_logits(self, h: Tensor) -> Tensor:
        z = F.linear(h, self.weight, self.bias)  # (n, K, V)
        return sig_logits(z) if self.sigmoid_gate else z


class _MixtureOfComponents(_Mixture):
    affine_why = "a mixture of K distributions: log p is a log-sum-exp over components, not one set of logits"

    def log_prob(self, hidden: Tensor) -> Tensor:
        log_prior, h = self.mixture(hidden)
        comp = F.log_softmax(self._component_logits(h), dim=-1)  # (n, K, V)
        return torch.logsumexp(log_prior[:, :, None] + comp, dim=1)

    def target_log_prob(self, hidden: Tensor, target: Tensor, chunk_size: int | None = None) -> Tensor:
        def rows(h: Tensor, t: Tensor) -> Tensor:
            return mixture_chunk(*self.mixture(h), self.weight, self.bias, t, self.sigmoid_gate, None)[0]

        return chunked_rows(rows, hidden, target, chunk_size or self.chunk_rows())

    def loss(self, hidden: Tensor, target: Tensor) -> Tensor:
        log_prior, h = self.mixture(hidden)  # (N, K), (N, K, d): small; the (K x V) work is chunked
        # sigsoftmax components keep sigmoid(z) too: half the rows keep the same memory
        rows = self.chunk_rows()
        return apply_in_fp32(MixtureCrossEntropy, log_prior, h, self.weight, self.bias, target, self.sigmoid_gate, rows)


@register("mos", family="mixtures", train_cost=8)
class MixtureOfSoftmaxes(_MixtureOfComponents):
    """Mixture of Softmaxes: a log-probability matrix of rank far above d + 1."""


@register("moss", family="mixtures", train_cost=9)
class MixtureOfSigsoftmaxes(_MixtureOfComponents):
    """Mixture of sigsoftmaxes (Kanai et al. 2018)."""

    sigmoid_gate = True


@register("moc", family="softmax and its controls", train_cost=4)
class MixtureOfContexts(_Mixture):
    """Mix the contexts, then one softmax: MoS's parameters with the softmax's rank bound (control)."""

    mixes_contexts = True

    def __init__(self, ctx: HeadContext, opts: "_Mixture.Options"):
        super().__init__(ctx, opts)
        self.scratch = Scratch()  # the softmax loss's logits block, reused every step (heads/base.py)

    @property
    def rank_dim(self) -> int:
        return self.comp_dim  # one softmax over the mixed e-dimensional context

    def context(self, g: Tensor) -> Tensor:
        log_prior, h = self.mixture(g)
        return (log_prior.exp()[:, :, None] * h).sum(1)  # (n, e)

    def log_prob(self, hidden: Tensor) -> Tensor:
        return F.log_softmax(F.linear(self.context(hidden), self.weight, self.bias), dim=-1)

    def affine_logits(self):  # one softmax over the mixed context
        return self.weight, self.bias, self.vocab_size

    def target_log_prob(self, hidden: Tensor, target: Tensor, chunk_size: int | None = None) -> Tensor:
        return chunked_rows(lambda h, t: linear_target_log_prob(self.context(h), self.weight, self.bias, t),
                            hidden, target, chunk_size or self.chunk_rows())

    def loss(self, hidden: Tensor, target: Tensor) -> Tensor:
        return linear_cross_entropy(self.context(hidden), self.weight, self.bias, target, 1024, self.scratch)
