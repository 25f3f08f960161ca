"""The binary logistic objectives of sampled training, each with an exact, fully normalised test-time distribution.

- ``nce`` (Mnih & Teh 2012; Zoph et al. 2016): logistic classification of data against k noise samples
  on s(w, c) - log Z - log E[count(w)] (k Q(w) with replacement; the same correction as sampled softmax),
  log Z fixed (``log_z``) or learned (``learn_log_z``), bias initialised to -log |V|. Test: softmax over s (a constant log Z cancels).
- ``neg`` (word2vec negative sampling): logistic loss on h . w - c, no bias, no correction; c is the
  ``logit_offset`` (default 0, as published; ``log_k`` starts the untrained model at the context-free optimum).
  Test: softmax over h . w (the variant Melamud et al. 2017 show to be poor).
- ``neglm`` (Melamud et al. 2017): the same training; test: p(w | c) proportional to
  exp(h . w) Q(w), Q = unigram^alpha the noise distribution used in training (with ``smooth_q``, floored
  at its smallest non-zero value, so a word with no training count is not given probability 0).
- ``neglm-b``: ``neglm`` with a learned output bias in training and at test time.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import HeadContext, register
from .sampled import SamplerOptions, SampledObjective, bias_init_field
from .sampling import Negatives


def logit_offset_field():
    return field(default=0.0, metadata={"pattern": "^log_k$", "description": (
        "c, subtracted from the score before the sigmoid in training (x = s - c) and from the test logits: "
        "a number, or log_k (log of negatives). With c = log k the untrained model starts at the "
        "context-free optimum sigma(x) = 1 / (k + 1) instead of 1/2")})


def offset_value(offset, k: int) -> float:
    """The logit offset c as a number (``log_k``: log k)."""
    return math.log(k) if offset == "log_k" else float(offset)


def smooth_q_field():
    return field(default=False, metadata={"description": (
        "floor Q at its smallest non-zero value in the test-time factor Q(w), so a word with no training count "
        "(Q = 0, never drawn) keeps a non-zero probability; false (as published): such a word gets probability 0")})


@dataclass(frozen=True)
class NegOptions(SamplerOptions):
    """NEG's and NEGLM's options: the sampler's, a logit offset (they have no bias to start from), and
    NEGLM's test-time smoothing of Q."""

    logit_offset: float | str = logit_offset_field()
    smooth_q: bool = smooth_q_field()


class _Logistic(SampledObjective):
    """Binary logistic losses: -log sigma(x_target) - sum_negatives log sigma(-x_negative)."""

    def offset(self) -> float:
        """The constant c subtracted from every score (NEG, NEGLM: ``logit_offset``; 0 for the others)."""
        return offset_value(getattr(self.opts, "logit_offset", 0.0), self.opts.negatives)

    def logit_shift(self, ids: Tensor, expected_count: Tensor) -> Tensor | float:
        """What is subtracted from s before the sigmoid (NCE: log Z + log E[count]); NEG: the offset c."""
        return self.offset()

    def loss_given(self, hidden: Tensor, target: Tensor, neg: Negatives) -> Tensor:
        draws = neg.draws.squeeze(1) if isinstance(neg.draws, Tensor) else neg.draws
        pos = self.scores(hidden, target[:, None]).squeeze(1)  # (N,)
        pos = pos - self.logit_shift(target, self.sampler.expected_count(target, draws))
        negs = self.scores(hidden, neg.ids) - self.logit_shift(neg.ids, neg.expected_count)  # (N, k)
        return (-F.logsigmoid(pos) - F.logsigmoid(-negs).sum(1)).mean()


@register("nce", family="sampled objectives")
class NCE(_Logistic):
    """NCE on s - log Z - log E[count(w)]: the expected count of w among the draws is k Q(w) with
    replacement and 1 - (1 - Q(w))^T without (T raw draws), the same correction sampled softmax uses
    for the same draw (TensorFlow's convention for both)."""

    @dataclass(frozen=True)
    class Options(SamplerOptions):
        log_z: float = field(default=0.0, metadata={"description": "fixed log normaliser (initial value if learned)"})
        learn_log_z: bool = field(default=False, metadata={"description": "learn log Z as a parameter"})
        bias_init: str = bias_init_field("neg-log-v")

    def __init__(self, ctx: HeadContext, opts: Options):
        super().__init__(ctx, opts)
        log_z = torch.tensor(float(opts.log_z))
        if opts.learn_log_z:
            self.log_z = nn.Parameter(log_z)
        else:
            self.register_buffer("log_z", log_z)

    def logit_shift(self, ids: Tensor, expected_count: Tensor) -> Tensor:
        return self.log_z + torch.log(expected_count).to(self.log_z.dtype)

    def test_logits(self, s: Tensor) -> Tensor:
        return s - self.log_z  # the model's unnormalised log p; the constant cancels in the softmax


@register("neg", family="sampled objectives")
class NEG(_Logistic):
    """NEG training on x = s - c; test: softmax over s - c (the offset cancels in the normalised
    distribution, and makes the reported log Z that of the trained logit)."""

    has_bias = False
    Options = NegOptions

    def test_logits(self, s: Tensor) -> Tensor:
        c = self.offset()
        return s - c if c else s


@register("neglm", family="sampled objectives")
class NEGLM(_Logistic):
    """NEG training; test p(w | c) proportional to exp(w . c - c0) Q(w) (Melamud et al. 2017), c0 the
    offset. With ``smooth_q`` Q is floored at its smallest non-zero value for scoring (:meth:`test_log_q`),
    so a word the noise distribution never draws (no training count) still gets a non-zero probability."""

    has_bias = False
    Options = NegOptions

    def test_log_q(self) -> Tensor:
        """(V,) log Q; with ``smooth_q``, -inf (a word of count 0) raised to the smallest finite log Q."""
        finite = torch.isfinite(self.log_q)
        if not self.opts.smooth_q or bool(finite.all()):
            return self.log_q
        return torch.where(finite, self.log_q, self.log_q[finite].min())

    def test_logits(self, s: Tensor) -> Tensor:
        c = self.offset()
        return (s - c if c else s) + self.test_log_q()


@register("neglm-b", family="sampled objectives")
class NEGLMBias(NEGLM):
    """NEGLM with a learned output bias, in training and at test time. With ``bias_init: nce`` it is NCE
    (log Z = 0, negatives with replacement) in another parametrisation: its logit b' + h.w equals NCE's
    b + h.w - log(k Q(w)) when b' = b - log(k Q(w)), so it trains alike, and its test distribution
    exp(h.w + b') Q(w) is NCE's exp(h.w + b) up to the constant k."""

    has_bias = True

    @dataclass(frozen=True)
    class Options(SamplerOptions):
        bias_init: str = bias_init_field("zero")
        smooth_q: bool = smooth_q_field()
