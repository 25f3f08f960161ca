"""Mixtape (Yang, Luong, Salakhutdinov & Le, NeurIPS 2019): break the softmax bottleneck with one softmax.

MoS mixes K distributions; Mixtape mixes K *logits* per word with gates that depend on the word, then
normalises once. For a context g (n, d):

    h_k      = tanh(H_k g + c_k)                                   component contexts (n, K, e)
    l_{x,j}  = v_x . tanh(U_j g + a_j) + u_j . g + b_{x,j}          gate logits, tree node j = 0 .. K-2
    pi_{x,k} = prod over the path root -> leaf k of sigmoid(+-l_{x,j})   the sigmoid tree (K a power of 2)
    z_x      = sum_k pi_{x,k} (h_k . w_x) + bias_x,     log p = log_softmax(z)

For K = 4: pi_1 = g0 g1, pi_2 = g0 (1 - g1), pi_3 = (1 - g0) g2, pi_4 = (1 - g0)(1 - g2), g_j = sigmoid(l_j).

**Gate sharing.** Only the ``frequent_share`` most frequent words (by train count) have their own gates
(v_x in R^{d2}, b_{x,j}); every other word shares the context-only gate l_j = u_j . g, so its logit is
(sum_k pi_k h_k) . w_x: one (e x V) product, a plain softmax's cost. The frequent words cost K products
each, so a step costs about (1 + K share) softmaxes against MoS's K. Defaults: K = 4 and d2 = e / 4 (the
paper's K; its d2 is "much smaller than d", the share 10% follows Mesh TensorFlow's Mixtape, the public
implementation read for this layer). Differences: an output bias per word (the project's softmax has one).
The logits are not affine in one context (the gates depend on the word), so the argmax test is not
defined for it (pipeline_src/evaluation/argmax.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import HeadContext, OutputLayer, output_embedding, register
from .kernels import auto_chunk, chunked_mean_nll, chunked_rows, init_range_field, target_log_softmax


def tree_mix(values: Tensor, gate_logits: Tensor) -> Tensor:
    """sum_k pi_k values_k for the leaves of the sigmoid tree, without forming pi: values (n, K, ...) along
    dim 1, gate logits (n, K - 1, ...) of the nodes in heap order (node j's children 2j + 1 and 2j + 2,
    sigmoid(l_j) going to the left). Bottom-up, each node's value is right + g (left - right): K - 1 fused
    steps where the products of sigmoids took a log-space pass per leaf."""
    g = torch.sigmoid(gate_logits)
    m = values.shape[1] // 2
    while m >= 1:
        left, right = values[:, 0::2], values[:, 1::2]
        values = right + g[:, m - 1:2 * m - 1] * (left - right)
        m //= 2
    return values.squeeze(1)


@register("mixtape", family="mixtures")
class Mixtape(OutputLayer):
    affine_why = "the gates depend on the word: each word's logit mixes its own K logits, not one context's"
    train_passes = 4  # the loss runs in checkpointed chunks: the forward is recomputed in backward

    @dataclass(frozen=True)
    class Options:
        components: int = field(default=4, metadata={"enum": [2, 4, 8, 16], "description": (
            "K, components: a power of 2, the leaves of the sigmoid tree (the paper: 4)")})
        gate_dim: int | None = field(default=None, metadata={"minimum": 1, "description": (
            "d2, the width of the word-specific gate vectors v_x (null = e / 4, at least 1)")})
        frequent_share: float = field(default=0.1, metadata={"minimum": 0, "maximum": 1, "description": (
            "share of the vocabulary (most frequent by train count) with word-specific gates; the rest share "
            "one context-only gate (gate sharing)")})
        context_dropout: float = field(default=0.0, metadata={"minimum": 0, "maximum": 1, "description":
                                       "dropout on the component contexts h_k"})
        chunk_size: int | None = field(default=None, metadata={"minimum": 1, "description": (
            "rows whose logits are alive at once (null = as many as fit in 2^17 elements)")})
        init_range: float = init_range_field()

    def __init__(self, ctx: HeadContext, opts: Options):
        super().__init__(ctx, opts)
        k, d, v = opts.components, ctx.in_dim, ctx.vocab_size
        self.weight, self.bias = output_embedding(ctx, opts.init_range)  # (V, e), (V,)
        e = self.comp_dim = self.weight.shape[1]
        d2 = self.gate_dim = opts.gate_dim or max(1, e // 4)
        vf = self.frequent = min(v, math.ceil(opts.frequent_share * v))
        counts = ctx.unigram_counts
        order = torch.arange(v) if counts is None else torch.sort(counts, descending=True, stable=True).indices
        self.register_buffer("frequent_ids", order[:vf].clone(), persistent=False)  # (Vf,)
        self.latent = nn.Linear(d, k * e)  # H_k, c_k
        self.gate_proj = nn.Linear(d, (k - 1) * d2)  # U_j, a_j
        self.gate_ctx = nn.Linear(d, k - 1, bias=False)  # u_j
        r = opts.init_range
        self.gate_vec = nn.Parameter(torch.empty(vf, d2).uniform_(-r, r))  # v_x, frequent words
        self.gate_bias = nn.Parameter(torch.zeros(vf, k - 1))  # b_{x,j}
        self.drop = nn.Dropout(opts.context_dropout)

    def forward_macs(self, exact: bool) -> float:
        d, e, v, k, d2, vf = self.in_dim, self.comp_dim, self.vocab_size, self.opts.components, self.gate_dim, self.frequent
        projections = d * k * e + d * (k - 1) * d2 + d * (k - 1)
        return projections + e * v + vf * k * e + vf * (k - 1) * d2

    def logits(self, g: Tensor) -> Tensor:
        """(n, d) -> (n, V): shared-gate logits for every word, then the frequent words' own."""
        n, k = g.shape[0], self.opts.components
        h = self.drop(torch.tanh(self.latent(g))).view(n, k, -1)  # (n, K, e)
        u = self.gate_ctx(g)  # (n, K-1): the shared gates' logits
        z = F.linear(tree_mix(h, u[:, :, None]), self.weight, self.bias)  # (n, V): one product, the mixed context
        if not self.frequent:
            return z
        t = torch.tanh(self.gate_proj(g)).view(n, k - 1, -1)  # (n, K-1, d2)
        gate = (t @ self.gate_vec.t()) + u[:, :, None] + self.gate_bias.t()  # (n, K-1, Vf)
        comp = h @ self.weight[self.frequent_ids].t()  # (n, K, Vf): each component's logit of each frequent word
        own = tree_mix(comp, gate) + self.bias[self.frequent_ids]  # (n, Vf)
        return z.index_copy(1, self.frequent_ids, own.to(z.dtype))  # (under autocast z is bf16, the bias float)

    def chunk_rows(self) -> int:
        return auto_chunk(self.opts.chunk_size, self.vocab_size + 2 * self.frequent * self.opts.components)

    def log_prob(self, hidden: Tensor) -> Tensor:
        return F.log_softmax(self.logits(hidden), dim=-1)

    def target_log_prob(self, hidden: Tensor, target: Tensor, chunk_size: int | None = None) -> Tensor:
        return chunked_rows(lambda h, t: target_log_softmax(self.logits(h), t), hidden, target,
                            chunk_size or self.chunk_rows())

    def loss(self, hidden: Tensor, target: Tensor) -> Tensor:
        return chunked_mean_nll(lambda h, t: target_log_softmax(self.logits(h), t), hidden, target, self.chunk_rows())
