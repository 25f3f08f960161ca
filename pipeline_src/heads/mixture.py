"""Heads that break the softmax bottleneck by mixing, and Sigsoftmax.

- ``mos``  Mixture of Softmaxes (Yang et al., ICLR 2018):
  pi = softmax(W_pi g), h_k = dropout(tanh(W_k g + b_k)),
  log p = logsumexp_k(log pi_k + log_softmax(h_k W^T + b)).
- ``moc``  Mixture of Contexts, the paper's negative control: the same parameters, but the
  contexts are mixed first, p = softmax((sum_k pi_k h_k) W^T + b); rank stays <= d + 1.
- ``sigsoftmax`` (Kanai et al., NeurIPS 2018): p proportional to exp(z) sigmoid(z), z = h W^T + b,
  computed in log space as log_softmax(z + logsigmoid(z)).
- ``moss`` mixture of sigsoftmaxes: MoS with sigsoftmax components.

All are exact in log space (no log(p + eps)). Training losses run chunk by chunk with recomputation
in backward (``chunked_mean_nll``), so the (rows x K x V) tensor never exists for all rows at once.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import HeadContext, OutputLayer, chunked_mean_nll, output_embedding, register
from .softmax import linear_cross_entropy


def log_sigsoftmax(z: Tensor, dim: int = -1) -> Tensor:
    """log of exp(z) sigmoid(z) / sum exp(z) sigmoid(z), stably."""
    return F.log_softmax(z + F.logsigmoid(z), dim=dim)


def _sig_logits(z: Tensor) -> Tensor:
    return z + F.logsigmoid(z)


def init_range_field():
    return field(default=0.1, metadata={"exclusiveMinimum": 0, "description": "untied weights ~ U(-r, r)"})


class _Mixture(OutputLayer):
    """Shared parameters of MoS / MoSS / MoC: prior, K latent projections, one output embedding."""

    sigmoid_gate = False  # MoSS: components are sigsoftmaxes

    @dataclass(frozen=True)
    class Options:
        components: int = field(default=15, metadata={"minimum": 1, "description": "K, mixture components"})
        context_dropout: float = field(default=0.0, metadata={"minimum": 0, "maximum": 1,
                                       "description": "dropout on the component contexts h_k"})
        chunk_size: int = field(default=64, metadata={"minimum": 1,
                                "description": "rows whose (K x V) logits are alive at once"})
        init_range: float = init_range_field()

    def __init__(self, ctx: HeadContext, opts: Options):
        super().__init__(ctx, opts)
        k, d = opts.components, ctx.in_dim
        self.weight, self.bias = output_embedding(ctx, opts.init_range)  # (V, d), (V,)
        self.prior = nn.Linear(d, k, bias=False)
        self.latent = nn.Linear(d, k * d)
        self.drop = nn.Dropout(opts.context_dropout)

    def mixture(self, g: Tensor) -> tuple[Tensor, Tensor]:
        """g (n, d) -> log prior (n, K), component contexts h_k (n, K, d)."""
        log_prior = F.log_softmax(self.prior(g), dim=-1)
        h = self.drop(torch.tanh(self.latent(g))).view(g.shape[0], self.opts.components, -1)
        return log_prior, h

    def _component_logits(self, h: Tensor) -> Tensor:
        z = F.linear(h, self.weight, self.bias)  # (n, K, V)
        return _sig_logits(z) if self.sigmoid_gate else z


class _MixtureOfComponents(_Mixture):
    def log_prob(self, hidden: Tensor) -> Tensor:
        log_prior, h = self.mixture(hidden)
        comp = F.log_softmax(self._component_logits(h), dim=-1)  # (n, K, V)
        return torch.logsumexp(log_prior[:, :, None] + comp, dim=1)

    def _target_lp(self, g: Tensor, t: Tensor) -> Tensor:
        log_prior, h = self.mixture(g)
        z = self._component_logits(h)  # (c, K, V)
        picked = z.gather(2, t[:, None, None].expand(-1, z.shape[1], 1)).squeeze(2)  # (c, K)
        return torch.logsumexp(log_prior + picked - torch.logsumexp(z, dim=2), dim=1)

    def target_log_prob(self, hidden: Tensor, target: Tensor, chunk_size: int | None = None) -> Tensor:
        c = chunk_size or self.opts.chunk_size
        return torch.cat([self._target_lp(hidden[s:s + c], target[s:s + c]) for s in range(0, hidden.shape[0], c)])

    def loss(self, hidden: Tensor, target: Tensor) -> Tensor:
        return chunked_mean_nll(self._target_lp, hidden, target, self.opts.chunk_size)


@register("mos")
class MixtureOfSoftmaxes(_MixtureOfComponents):
    """Mixture of Softmaxes: a log-probability matrix of rank far above d + 1."""


@register("moss")
class MixtureOfSigsoftmaxes(_MixtureOfComponents):
    """Mixture of sigsoftmaxes (Kanai et al. 2018)."""

    sigmoid_gate = True


@register("moc")
class MixtureOfContexts(_Mixture):
    """Mix the contexts, then one softmax: MoS's parameters with the softmax's rank bound (control)."""

    def context(self, g: Tensor) -> Tensor:
        log_prior, h = self.mixture(g)
        return (log_prior.exp()[:, :, None] * h).sum(1)  # (n, d)

    def log_prob(self, hidden: Tensor) -> Tensor:
        return F.log_softmax(F.linear(self.context(hidden), self.weight, self.bias), dim=-1)

    def target_log_prob(self, hidden: Tensor, target: Tensor, chunk_size: int | None = None) -> Tensor:
        c = chunk_size or self.opts.chunk_size
        out = []
        for s in range(0, hidden.shape[0], c):
            z = F.linear(self.context(hidden[s:s + c]), self.weight, self.bias)
            out.append(z.gather(1, target[s:s + c, None]).squeeze(1) - torch.logsumexp(z, dim=1))
        return torch.cat(out)

    def loss(self, hidden: Tensor, target: Tensor) -> Tensor:
        return linear_cross_entropy(self.context(hidden), self.weight, self.bias, target, 1024)


@register("sigsoftmax")
class Sigsoftmax(OutputLayer):
    """p(w | h) proportional to exp(z_w) sigmoid(z_w), z = h W^T + b."""

    @dataclass(frozen=True)
    class Options:
        chunk_size: int = field(default=512, metadata={"minimum": 1, "description": "rows of logits alive at once"})
        init_range: float = init_range_field()

    def __init__(self, ctx: HeadContext, opts: Options):
        super().__init__(ctx, opts)
        self.weight, self.bias = output_embedding(ctx, opts.init_range)

    def log_prob(self, hidden: Tensor) -> Tensor:
        return log_sigsoftmax(F.linear(hidden, self.weight, self.bias))

    def _target_lp(self, h: Tensor, t: Tensor) -> Tensor:
        z = _sig_logits(F.linear(h, self.weight, self.bias))  # (c, V)
        return z.gather(1, t[:, None]).squeeze(1) - torch.logsumexp(z, dim=1)

    def target_log_prob(self, hidden: Tensor, target: Tensor, chunk_size: int | None = None) -> Tensor:
        c = chunk_size or self.opts.chunk_size
        return torch.cat([self._target_lp(hidden[s:s + c], target[s:s + c]) for s in range(0, hidden.shape[0], c)])

    def loss(self, hidden: Tensor, target: Tensor) -> Tensor:
        return chunked_mean_nll(self._target_lp, hidden, target, self.opts.chunk_size)
