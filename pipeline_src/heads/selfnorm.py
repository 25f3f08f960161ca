"""Self-normalised softmax: a softmax trained so that its normaliser Z(h) stays near 1, so that at test time
the unnormalised score s_w(h) = h . W_w + b_w can stand for log p(w | h) without computing Z.

Two objectives behind one head (``variant``), both per token and averaged over the N rows of a step:
- ``devlin`` (Devlin et al. 2014, their eq. for the self-normalised NNJM): the softmax cross-entropy plus
  alpha (log Z(h))^2 on every row, L = mean_i [log Z_i - s_{t_i} + alpha log^2 Z_i]. Z is computed every
  step, so training costs what a softmax does; the saving is at test time.
- ``infrequent`` (Andreas & Klein 2015, as Chen, Grangier & Auli 2016 use it): the target's unnormalised
  score on every row, the normaliser penalty on a random fraction gamma of the rows only, rescaled by 1/gamma,
  L = (1/N) [ -sum_i s_{t_i} + (alpha / gamma) sum_{i in S} log^2 Z_i ], |S| = max(1, round(gamma N)) rows
  drawn without replacement. A step costs O(d (N + gamma N |V|)). Where the expected gradient vanishes,
  P(w | h) = 2 alpha log Z(h) p(w | h) for every w: the model's distribution is the data's and log Z settles at
  1 / (2 alpha), not 0 (0.1 leaves it at 5; the default run uses alpha = 1). Nothing pushes a non-target
  word down but the penalty, so the smaller alpha, the slower the model leaves the uniform distribution.
The output bias starts at -log |V| (ours; the papers do not say): with small initial weights Z(h) is then
about 1 and the penalty starts near 0 instead of at alpha log^2 |V|, which on the default language kept the
first epoch's model at the uniform distribution. Scored exact and fully normalised like every head (log p = s - log Z); beside it evaluation reports the mean
and spread of log Z and the perplexity with Z = 1 (``self_normalisation``), as for the sampled heads.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor

from .base import HeadContext, OutputLayer, output_embedding, register
from .kernels import (
    Scratch,
    chunked_mean_nll,
    chunked_rows,
    linear_cross_entropy,
    linear_log_mass,
    linear_score_and_log_z,
    score_and_sampled_log_z,
)


@register("self-normalised-softmax", family="structured and self-normalised heads")
class SelfNormalisedSoftmax(OutputLayer):
    self_normalised = True  # evaluation gives score and log Z in one pass

    @dataclass(frozen=True)
    class Options:
        variant: str = field(default="devlin", metadata={"enum": ["devlin", "infrequent"], "description": (
            "devlin: cross-entropy + alpha log^2 Z on every row (Devlin et al. 2014); infrequent: the target's "
            "unnormalised score on every row, (alpha / gamma) log^2 Z on a fraction gamma of them (Andreas & Klein 2015)")})
        alpha: float = field(default=0.1, metadata={"minimum": 0, "description": (
            "weight of the (log Z)^2 penalty (Devlin et al. use 0.1)")})
        gamma: float = field(default=0.1, metadata={"exclusiveMinimum": 0, "maximum": 1, "description": (
            "variant infrequent: share of the rows whose normaliser is computed each step")})
        chunk_size: int = field(default=1024, metadata={"minimum": 1, "description": "rows of logits alive at once"})
        init_range: float = field(default=0.1, metadata={"exclusiveMinimum": 0,
                                  "description": "untied weights ~ U(-r, r)"})

    def __init__(self, ctx: HeadContext, opts: Options):
        super().__init__(ctx, opts)
        self.weight, self.bias = output_embedding(ctx, opts.init_range)  # (V, d), (V,)
        with torch.no_grad():  # start normalised: Z(h) ~ 1, so the penalty starts near 0, not at alpha log^2 |V|
            self.bias.fill_(-math.log(ctx.vocab_size))
        self.trains_exact_likelihood = opts.variant == "devlin"  # infrequent: scores, not a likelihood
        self.train_passes = 3  # fused, either variant: three products per chunk
        self.scratch = Scratch()

    def forward_macs(self, exact: bool) -> float:
        if exact or self.opts.variant == "devlin":
            return self.in_dim * self.vocab_size
        return self.in_dim * (1 + self.opts.gamma * self.vocab_size)  # the target's score, Z on gamma of the rows

    def _score_and_log_z(self, h: Tensor, t: Tensor) -> tuple[Tensor, Tensor]:
        return linear_score_and_log_z(h, self.weight, self.bias, t)  # blocked over V

    def loss(self, hidden: Tensor, target: Tensor) -> Tensor:
        a = self.opts.alpha
        if self.opts.variant == "devlin":  # the softmax's fused loss; its gradient (1 + 2 alpha log Z) p - onehot
            return linear_cross_entropy(hidden, self.weight, self.bias, target, self.opts.chunk_size, self.scratch, a)
        n = hidden.shape[0]
        rows = torch.randperm(n, device=hidden.device)[:max(1, round(self.opts.gamma * n))]
        return score_and_sampled_log_z(hidden, self.weight, self.bias, target, rows, a / self.opts.gamma,
                                       self.opts.chunk_size, self.scratch)

    def _infrequent_autograd(self, hidden: Tensor, target: Tensor) -> Tensor:
        """The infrequent loss through autograd (checkpointed chunks): the reference the fused one is held to,
        and bench-cells' *before*. Draws its rows as ``loss`` does."""
        a, n = self.opts.alpha, hidden.shape[0]
        score = (hidden * self.weight[target]).sum(1) + self.bias[target]  # (N,) the targets' scores alone
        rows = torch.randperm(n, device=hidden.device)[:max(1, round(self.opts.gamma * n))]
        h = hidden[rows]

        def neg_penalty(hc, _):
            log_z = torch.logsumexp(F.linear(hc, self.weight, self.bias), dim=1)
            return -(a / self.opts.gamma) * log_z * log_z

        penalty = chunked_mean_nll(neg_penalty, h, rows, self.opts.chunk_size) * h.shape[0] / n
        return penalty - score.mean()

    def loss_penalty(self, hidden: Tensor, target: Tensor) -> Tensor | None:
        """Devlin's: alpha times the mean of log^2 Z over the rows (the infrequent variant trains no likelihood)."""
        if self.opts.variant != "devlin":
            return None
        _, log_z = self.self_normalisation(hidden, target)
        return self.opts.alpha * (log_z * log_z).mean()

    def self_normalisation(self, hidden: Tensor, target: Tensor,
                           chunk_size: int | None = None) -> tuple[Tensor, Tensor]:
        """(unnormalised log p of the targets (N,), log Z (N,)); their difference is the exact log p."""
        both = chunked_rows(lambda h, t: torch.stack(self._score_and_log_z(h, t), dim=1), hidden, target,
                            chunk_size or self.opts.chunk_size)
        return both[:, 0], both[:, 1]

    def log_prob(self, hidden: Tensor) -> Tensor:
        return F.log_softmax(F.linear(hidden, self.weight, self.bias), dim=-1)

    def affine_logits(self):
        return self.weight, self.bias, self.vocab_size

    def log_mass(self, hidden: Tensor, member: Tensor) -> Tensor:
        return linear_log_mass(hidden, self.weight, self.bias, member)

    def target_log_prob(self, hidden: Tensor, target: Tensor, chunk_size: int | None = None) -> Tensor:
        score, log_z = self.self_normalisation(hidden, target, chunk_size)
        return score - log_z
