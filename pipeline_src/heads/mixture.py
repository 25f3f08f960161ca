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
from torch.autograd.function import once_differentiable

from .base import (HeadContext, OutputLayer, Scratch, apply_in_fp32, auto_chunk, chunked_rows,
    linear_target_log_prob, output_embedding, register)
from .softmax import linear_cross_entropy


# a mixture's chunk does 3K small matrix products and ~15 passes: fewer, larger chunks pay off sooner than
# for a pointwise head (measured at V = 500, K = 8, one thread: 64-row chunks 59 ms/step against 70 for 16)
MIXTURE_CHUNK_ELEMENTS = 1 << 19
MIXTURE_MIN_ROWS = 64  # K = 15, V = 10k / 33k: 64 rows 10.7x / 16.9x the softmax floor, 3 / 1 rows 15.1x / 39.8x


def sig_logits(z: Tensor) -> Tensor:
    """z + log sigmoid(z): log_softmax of it is log sigsoftmax(z), exactly and stably."""
    return z + F.logsigmoid(z)


def init_range_field():
    return field(default=0.1, metadata={"exclusiveMinimum": 0, "description": "untied weights ~ U(-r, r)"})


SIG_FAST_ABOVE = -30.0  # the sigsoftmax block skips log-sigmoid when every row's largest logit is above this


def mixture_chunk(log_prior: Tensor, h: Tensor, weight: Tensor, bias: Tensor, t: Tensor, sig: bool,
                   grad_scale: float | None):
    """log p(t) of a mixture for one chunk of rows, and optionally its gradients, in one pass.

    log_prior (c, K), h (c, K, d), weight (V, d), bias (V,), t (c,). Only one (c, K, V) block is
    alive (two for sigsoftmax components). With ``grad_scale`` s, also returns the gradients of
    -s * sum(log p(t)) w.r.t. log_prior, h, weight and bias:
      r = responsibilities softmax_k(log pi_k + log p_k(t)),
      d/dz_kv = s r_k (softmax(f(z_k))_v - [v = t]) f'(z_kv), f(z) = z (softmax) or z + log sigmoid(z)
      (sigsoftmax; f' = 2 - sigmoid(z)).
    Sigsoftmax components without a log-sigmoid pass over the block (on the CPU the slowest pass by far,
    ~7x an exp): f is increasing, so the row's largest f is at its largest logit m, and
    softmax(f(z))_v = exp(z_v - m) sigmoid(z_v) / S with S = sum_v exp(z_v - m) sigmoid(z_v) >= sigmoid(m).
    log S is exact unless sigmoid(m) itself underflows: below m = SIG_FAST_ABOVE the log-sigmoid form runs.
    That check reads a flag back from the device, free on the CPU; elsewhere (CUDA, where the log-sigmoid
    pass is one more memory-bound pass like the others) the log-sigmoid form runs, with no host read.
    """
    c, k = log_prior.shape
    z = F.linear(h, weight, bias)  # (c, K, V)
    idx = t[:, None, None].expand(c, k, 1)
    picked = z.gather(2, idx).squeeze(2)  # (c, K) target logits
    top = z.amax(dim=2)  # (c, K)
    sig_z = None
    if sig and (z.device.type != "cpu" or bool((top < SIG_FAST_ABOVE).any())):  # the latter practically never
        if grad_scale is not None:
            sig_z = torch.sigmoid(z)
        z = z.add_(F.logsigmoid(z))
        picked, top = z.gather(2, idx).squeeze(2), z.amax(dim=2)
        e = z.sub_(top[:, :, None]).exp_()  # (c, K, V)
    elif sig:
        sig_z = torch.sigmoid(z)  # (c, K, V)
        e = z.sub_(top[:, :, None]).exp_().mul_(sig_z)  # exp(z - m) sigmoid(z) = exp(f(z) - m); logsumexp f = m + log S
        picked = picked + F.logsigmoid(picked)  # f(z_t), on (c, K) only
    else:
        e = z.sub_(top[:, :, None]).exp_()  # (c, K, V), one exp pass
    total = e.sum(dim=2)  # (c, K)
    joint = log_prior + picked - top - total.log()  # log pi_k + log p_k(t)
    lp = torch.logsumexp(joint, dim=1)  # (c,)
    if grad_scale is None:
        return lp, None
    r = (joint - lp[:, None]).exp()  # (c, K)
    g = e.mul_((grad_scale * r / total)[:, :, None])  # s r_k softmax_k
    g.scatter_add_(2, idx, (-grad_scale * r)[:, :, None])
    if sig_z is not None:
        g.mul_(sig_z.neg_().add_(2.0))  # d(z + logsigmoid z)/dz = 2 - sigmoid(z)
    d_prior = -grad_scale * r
    d_h = torch.matmul(g, weight)  # (c, K, d)
    d_w = g.reshape(c * k, -1).t() @ h.reshape(c * k, -1)  # (V, d)
    d_b = g.sum(dim=(0, 1))
    return lp, (d_prior, d_h, d_w, d_b)


class MixtureCrossEntropy(torch.autograd.Function):
    """-mean log sum_k pi_k p_k(t), chunked; gradients formed in the forward pass (the loss ends the graph)."""

    @staticmethod
    def forward(ctx, log_prior, h, weight, bias, target, sig: bool, chunk_size: int):
        n = h.shape[0]
        grads = [torch.zeros_like(x) for x in (log_prior, h, weight, bias)]
        total = torch.zeros((), dtype=torch.float64, device=h.device)
        for s in range(0, n, chunk_size):
            sl = slice(s, s + chunk_size)
            lp, g = mixture_chunk(log_prior[sl], h[sl], weight, bias, target[sl], sig, 1.0 / n)
            total -= lp.sum(dtype=torch.float64)
            grads[0][sl], grads[1][sl] = g[0], g[1]
            grads[2] += g[2]
            grads[3] += g[3]
        ctx.save_for_backward(*grads)
        return (total / n).to(h.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        return (*(g * grad_out for g in ctx.saved_tensors), None, None, None)


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
