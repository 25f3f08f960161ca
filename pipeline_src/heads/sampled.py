"""Sampling-based training objectives, each with an exact, fully normalised test-time distribution.

Training touches only the target and k negative rows of the output embedding; evaluation is exact.
Every loss is also available for negatives given from outside (``loss_given``), so it can be checked
against brute force and reproduced. Scores: s(w, c) = h . w (+ b_w where the method has a bias).

- ``sampled-softmax`` (Jean et al. 2015): softmax over the target and the negatives with logits
  s - log E[count] (the sampler's expected count; k Q with replacement), accidental hits (negatives
  equal to the row's target) removed. Test: the full softmax over s.
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

from ..io.errors import ConfigError
from .base import HeadContext, OutputLayer, output_embedding, register
from .kernel_tree import KernelTree, draw_macs
from .kernels import chunked_rows, init_range_field, linear_score_and_log_z
from .partitions import Plan, fill_frequent
from .sampling import Negatives, Sampler, log_uniform_probs, unigram_probs


@dataclass(frozen=True)
class SamplerOptions:
    """Options shared by the sampled objectives."""

    negatives: int = field(default=100, metadata={"minimum": 1, "description": "k, negatives per step"})
    sampler: str = field(default="unigram", metadata={"enum": ["unigram", "uniform", "log-uniform"],
                                                      "description": "noise distribution Q over frequency-sorted ids"})
    alpha: float = field(default=0.75, metadata={"minimum": 0, "maximum": 1, "description": "Q = unigram^alpha"})
    replacement: bool = field(default=True, metadata={"description": "draw negatives with replacement"})
    shared: bool = field(default=True, metadata={"description": "one set of negatives for the whole batch"})
    sparse: bool = field(default=True, metadata={
        "description": "sparse gradients for the gathered rows (a step independent of |V|)"})
    chunk_size: int = field(default=1024, metadata={"minimum": 1, "description": "rows per chunk in exact evaluation"})
    init_range: float = init_range_field()


BIAS_INITS = ("zero", "neg-log-v", "nce")


def bias_init_field(default: str):
    return field(default=default, metadata={"enum": list(BIAS_INITS), "description": (
        "initial output bias: zero; neg-log-v, -log |V| (NCE's usual start); nce, -log |V| - log(k Q(w)): "
        "NCE's initial logit in this head's parametrisation (log Q floored at its smallest finite value, "
        "so a word Q never draws starts like the rarest it does)")})


def initial_bias(how: str, log_q: Tensor, k: int) -> Tensor:
    """(V,) initial output bias. ``nce``: NCE starts at logit s - log(k Q(w)) with s's bias -log |V|; a head
    whose logit is s itself (NEGLM-B, sampled softmax's score) starts at the same logit with this bias."""
    v = log_q.numel()
    if how == "zero":
        return torch.zeros(v)
    if how == "neg-log-v":
        return torch.full((v,), -math.log(v))
    floor = log_q[torch.isfinite(log_q)].min()
    return (-math.log(v) - math.log(k) - torch.where(torch.isfinite(log_q), log_q, floor)).float()


class _Sampled(OutputLayer):
    """Shared machinery: output embedding, noise distribution Q, sampler, exact chunked evaluation."""

    self_normalised = True  # evaluation gives score and log Z in one pass

    has_bias = True
    trains_exact_likelihood = False

    def forward_macs(self, exact: bool) -> float:
        """Exact: every word's score; training: the target's and the k negatives' (shared or per row)."""
        return self.in_dim * (self.vocab_size if exact else self.opts.negatives + 1)

    def __init__(self, ctx: HeadContext, opts):
        super().__init__(ctx, opts)
        self.weight, _ = output_embedding(ctx, opts.init_range)  # (V, d)
        # The bias is stored as a (V, 1) column so rows can be gathered with a sparse gradient
        # (a sparse gradient cannot flow back through a view of a (V,) vector).
        # (created before Q, filled after it: the parameters' order is what it was before the option)
        self.bias_col = nn.Parameter(torch.zeros(ctx.vocab_size, 1)) if self.has_bias else None
        v = ctx.vocab_size
        if opts.sampler in ("unigram", "in-batch"):
            if ctx.unigram_counts is None:
                raise ValueError(f"sampler {opts.sampler!r} needs the train counts (noise.npz)")
            # in-batch: the batch's targets are draws from the data's own unigram, so Q has alpha = 1
            q = unigram_probs(ctx.unigram_counts, 1.0 if opts.sampler == "in-batch" else opts.alpha)
        elif opts.sampler == "log-uniform":
            q = log_uniform_probs(v)
        else:  # uniform; the target vocabulary's proposal is uniform over V', the kernel's is at h = 0
            q = torch.full((v,), 1.0 / v, dtype=torch.float64)
        self.register_buffer("log_q", torch.log(q).float())  # (V,), -inf where Q = 0
        self.sampler = self.make_sampler(q)
        if self.bias_col is not None:
            with torch.no_grad():
                self.bias_col.copy_(initial_bias(opts.bias_init, self.log_q.double(), opts.negatives)[:, None])

    def make_sampler(self, q: Tensor) -> Sampler:
        """The sampler of k negatives from Q that ``loss`` draws from."""
        opts = self.opts
        if not opts.replacement and opts.negatives > self.vocab_size:
            raise ConfigError(f"{self.name} option 'negatives': cannot draw {opts.negatives} distinct negatives from "
                              f"a vocabulary of {self.vocab_size} (fewer negatives, or replacement: true)")
        return Sampler(q, opts.negatives, opts.replacement, opts.shared)

    def _apply(self, fn, *args, **kwargs):  # keep the sampler's tables on the module's device
        out = super()._apply(fn, *args, **kwargs)
        self.sampler.to(self.log_q.device)
        return out

    @property
    def bias(self) -> Tensor | None:
        """The output bias as a (V,) view (None for heads without one)."""
        return None if self.bias_col is None else self.bias_col[:, 0]

    def sparse_params(self) -> list[nn.Parameter]:
        """Output rows are gathered, so their gradients are sparse: a step that does not touch all of V."""
        if not self.opts.sparse:
            return []
        return [self.weight] + ([self.bias_col] if self.bias_col is not None else [])

    def scores(self, hidden: Tensor, ids: Tensor | None = None) -> Tensor:
        """s(w, c) for all words (N, V) or the given ids: (k,) shared -> (N, k); (N, k) -> (N, k)."""
        if ids is None:
            return F.linear(hidden, self.weight, self.bias)
        w = F.embedding(ids, self.weight, sparse=self.opts.sparse)  # (k, d) or (N, k, d)
        s = hidden @ w.t() if ids.dim() == 1 else torch.einsum("nd,nkd->nk", hidden, w)
        if self.bias_col is not None:
            s = s + F.embedding(ids, self.bias_col, sparse=self.opts.sparse).squeeze(-1)
        return s

    def test_logits(self, s: Tensor) -> Tensor:
        """Unnormalised test-time log-probabilities from all scores s (N, V)."""
        return s

    def self_normalisation(self, hidden: Tensor, target: Tensor,
                           chunk_size: int | None = None) -> tuple[Tensor, Tensor]:
        """(unnormalised log p of the targets (N,), log Z (N,)): how far the model is from normalised.
        Their difference is the exact log p(target | h). Chunked over rows: memory O(chunk x V)."""
        weight, bias, _ = self.affine_logits()  # test logits = h W^T + (b + a constant per word)

        def rows(h: Tensor, t: Tensor) -> Tensor:
            return torch.stack(linear_score_and_log_z(h, weight, bias, t), dim=1)  # (c, 2), blocked over V

        score, log_z = chunked_rows(rows, hidden, target, chunk_size or self.opts.chunk_size).unbind(1)
        return score, log_z

    def log_prob(self, hidden: Tensor) -> Tensor:
        return F.log_softmax(self.test_logits(self.scores(hidden)), dim=-1)

    def affine_logits(self):  # test_logits adds a constant per word (an offset, log Z, NEGLM's log Q)
        at_zero = self.scores(self.weight.new_zeros(1, self.weight.shape[1]))  # the bias, or 0 (NEG, NEGLM)
        return self.weight, self.test_logits(at_zero)[0], self.vocab_size

    def target_log_prob(self, hidden: Tensor, target: Tensor, chunk_size: int | None = None) -> Tensor:
        score, log_z = self.self_normalisation(hidden, target, chunk_size)
        return score - log_z

    def loss(self, hidden: Tensor, target: Tensor) -> Tensor:
        return self.loss_given(hidden, target, self.sampler.sample(hidden.shape[0]))

    def loss_given(self, hidden: Tensor, target: Tensor, neg: Negatives) -> Tensor:
        raise NotImplementedError


UNIGRAM_LIKE = ("unigram", "uniform", "log-uniform")


@register("sampled-softmax", family="sampled objectives")
class SampledSoftmax(_Sampled):
    """Softmax over the target and sampled negatives, each logit corrected by the log of its expected count
    under the proposal. The proposal (``sampler``) is the method (docs/methods.md):
    - ``unigram`` / ``uniform`` / ``log-uniform``: k draws from a fixed Q (TensorFlow's sampled_softmax_loss);
    - ``target-vocabulary``: Jean et al. (2015)'s own method, a softmax over each partition's target
      vocabulary V' (uniform proposal over V': the corrections cancel; no accidental hits, the target is in V');
    - ``in-batch``: the batch's distinct targets as every position's negatives, corrected by their inclusion
      probability 1 - (1 - Q(w))^B for B target positions drawn from the unigram Q;
    - ``quadratic-kernel``: Blanc & Rendle (2018), k draws per position from q(w | h) proportional to
      alpha (h . w)^2 + 1 through a tree of sufficient statistics (kernel_tree.py), corrected by log(k q)."""

    @dataclass(frozen=True)
    class Options(SamplerOptions):
        sampler: str = field(default="unigram", metadata={
            "enum": [*UNIGRAM_LIKE, "target-vocabulary", "in-batch", "quadratic-kernel"],
            "description": "the proposal: a fixed Q over frequency-sorted ids (unigram, uniform, log-uniform), "
                           "Jean et al.'s target-vocabulary, in-batch, or Blanc & Rendle's quadratic-kernel "
                           "(docs/methods.md)"})
        replacement: bool = field(default=False, metadata={"description": "draw negatives with replacement"})
        remove_accidental_hits: bool = field(default=True, metadata={"description": "mask negatives equal to the target"})
        bias_init: str = bias_init_field("zero")
        tau: int = field(default=2000, metadata={"minimum": 1, "description": (
            "target-vocabulary: a partition of consecutive batches ends when its distinct targets reach tau")})
        fill: bool = field(default=False, metadata={"description": (
            "target-vocabulary: top each partition's V' up to tau with the most frequent words")})
        kernel_alpha: float = field(default=1.0, metadata={"exclusiveMinimum": 0, "description": (
            "quadratic-kernel: alpha of q(w | h) proportional to alpha (h . w)^2 + 1")})
        bucket_size: int = field(default=64, metadata={"minimum": 1, "description": (
            "quadratic-kernel: words per leaf of the tree (a d x d statistic per leaf, not per word)")})
        refresh_every: int = field(default=1, metadata={"minimum": 1, "description": (
            "quadratic-kernel: training steps between rebuilds of the tree from the output embeddings")})
        kernel_bias: bool = field(default=False, metadata={"description": (
            "quadratic-kernel: true, the kernel of the whole score, alpha (h . w + b_w)^2 + 1 (h extended by 1, w "
            "by its bias, where a model may keep word frequency); false, alpha (h . w)^2 + 1, as Blanc & Rendle "
            "write it")})

    def __init__(self, ctx: HeadContext, opts: Options):
        super().__init__(ctx, opts)
        self.plans_epochs = opts.sampler == "target-vocabulary"
        self.plan: Plan | None = None
        self.tree = KernelTree(opts.kernel_alpha, opts.bucket_size) if opts.sampler == "quadratic-kernel" else None
        self._since_build = 0
        self.columns = [0, 0]  # score columns per position summed over training steps, and the steps
        # (target-vocabulary, in-batch: their number is the data's)

    def _apply(self, fn, *args, **kwargs):  # a moved or cast head rebuilds its tree from its weights
        out = super()._apply(fn, *args, **kwargs)
        if getattr(self, "tree", None) is not None:
            self.tree.levels = []
        return out

    def make_sampler(self, q: Tensor) -> Sampler:
        if self.opts.sampler in UNIGRAM_LIKE:
            return super().make_sampler(q)
        # in-batch: the inclusion probability of B targets drawn from Q is the expected count of B draws
        # without replacement; the other two do not draw from Q
        return Sampler(q, 1, replacement=self.opts.sampler != "in-batch")

    def forward_macs(self, exact: bool) -> float:
        """Training: the scores of the target and the negatives. Their number is the data's for two proposals:
        V' (target-vocabulary) and the batch's distinct targets (in-batch), averaged over the training steps so
        far (before any: tau, and k + 1)."""
        if exact or self.opts.sampler in UNIGRAM_LIKE + ("quadratic-kernel",):
            return super().forward_macs(exact)
        if self.columns[1]:
            return self.in_dim * self.columns[0] / self.columns[1]
        return self.in_dim * (self.opts.tau if self.opts.sampler == "target-vocabulary" else self.opts.negatives + 1)

    def flops_per_token(self, train: bool) -> float:
        """The quadratic kernel's proposal is arithmetic too (kernel_tree.draw_macs: the tree's levels and a
        bucket's scores), and so is a rebuild, d^2 per word every ``refresh_every`` steps of the sweep's 64 x 35
        positions. Counted beside the products, once (no backward)."""
        flops = super().flops_per_token(train)
        if not train or self.opts.sampler != "quadratic-kernel":
            return flops
        d, v = self.in_dim + self.opts.kernel_bias, self.vocab_size  # the kernel's vectors (+ the bias column)
        rebuild = v * d * d / (self.opts.refresh_every * 64 * 35)
        return flops + 2.0 * (draw_macs(v, d, self.opts.negatives, self.opts.bucket_size) + rebuild)

    def count_columns(self, n: int) -> None:
        if self.training:
            self.columns[0] += n
            self.columns[1] += 1

    def plan_epoch(self, targets: list[Tensor], start: int) -> None:
        self.plan = Plan.of(targets, self.opts.tau, self.vocab_size, self.opts.fill, start)

    def loss(self, hidden: Tensor, target: Tensor) -> Tensor:
        sampler = self.opts.sampler
        if sampler == "target-vocabulary":
            return self.target_vocabulary_loss(hidden, target, self.target_vocabulary(target))
        if sampler == "in-batch":
            return self.loss_given(hidden, target, self.in_batch(target))
        if sampler == "quadratic-kernel":
            return self.loss_given(hidden, target, self.kernel_draws(hidden, target))
        return super().loss(hidden, target)

    def target_vocabulary(self, target: Tensor) -> Tensor:
        """This step's V' (sorted ids): its partition's from the epoch's plan, else the batch's own."""
        ids = self.plan.take(target) if self.plan is not None and self.training else None
        if ids is None:
            ids = torch.unique(target)
            ids = fill_frequent(ids, self.opts.tau, self.vocab_size) if self.opts.fill else ids
        return ids

    def target_vocabulary_loss(self, hidden: Tensor, target: Tensor, vocab: Tensor) -> Tensor:
        """Mean over positions of -s(y) + log sum_{w in V'} exp s(w) (Jean et al. 2015, eq. 9 with a uniform
        proposal over V': every correction is the same constant and cancels). vocab: sorted V', holding y."""
        logits = self.scores(hidden, vocab)  # (N, |V'|), one product for every position
        self.count_columns(vocab.numel())
        at = torch.searchsorted(vocab, target)  # y's column
        return (torch.logsumexp(logits, dim=1) - logits.gather(1, at[:, None]).squeeze(1)).mean()

    def in_batch(self, target: Tensor) -> Negatives:
        """The batch's distinct targets, shared by every position (a position's own target is an accidental
        hit, removed in ``loss_given``), each expected 1 - (1 - Q(w))^B times among the B targets."""
        ids = torch.unique(target)
        b = target.numel()
        self.count_columns(ids.numel() + 1)
        return Negatives(ids, self.sampler.expected_count(ids, b), b)

    def kernel_draws(self, hidden: Tensor, target: Tensor) -> Negatives:
        """k draws per position from the kernel tree (rebuilt every ``refresh_every`` steps) with expected
        counts k q(w | h), and the target's own k q(y | h)."""
        with torch.autocast(hidden.device.type, enabled=False):  # the proposal in fp32 under bf16 training too:
            if not self.tree.levels or self._since_build >= self.opts.refresh_every:  # q is the one sampled from
                self.tree.build(self.kernel_rows(self.weight.detach(), self.bias_col.detach()))
                self._since_build = 0
            self._since_build += 1
            k = self.opts.negatives
            hidden = self.kernel_rows(hidden.detach(), hidden.new_ones(hidden.shape[0], 1))
            ids = self.tree.sample(hidden, k)  # (N, k)
            h = hidden.double()
            both = self.tree.log_q(h, torch.cat([target[:, None], ids], dim=1)).exp() * k  # (N, 1 + k)
        return Negatives(ids, both[:, 1:], k, target_count=both[:, 0])

    def kernel_rows(self, x: Tensor, extra: Tensor) -> Tensor:
        """The kernel's vectors: x itself, or x extended by a column (w by its bias b, h by 1) with
        ``kernel_bias``, so that their dot product is the whole score h . w + b_w."""
        return torch.cat([x, extra.to(x.dtype)], dim=1) if self.opts.kernel_bias else x

    def true_expected_count(self, target: Tensor, neg: Negatives) -> Tensor:
        if neg.target_count is not None:
            return neg.target_count
        draws = neg.draws.squeeze(1) if isinstance(neg.draws, Tensor) else neg.draws
        return self.sampler.expected_count(target, draws)

    def loss_given(self, hidden: Tensor, target: Tensor, neg: Negatives) -> Tensor:
        ids = neg.ids
        true = self.scores(hidden, target[:, None]).squeeze(1)  # (N,)
        true = true - torch.log(self.true_expected_count(target, neg)).to(true.dtype)
        sampled = self.scores(hidden, ids) - torch.log(neg.expected_count).to(true.dtype)  # (N, k)
        if self.opts.remove_accidental_hits:
            hits = (ids[None, :] if ids.dim() == 1 else ids) == target[:, None]
            sampled = sampled.masked_fill(hits, float("-inf"))
        logits = torch.cat([true[:, None], sampled], dim=1)  # (N, 1 + k), target at 0
        return (torch.logsumexp(logits, dim=1) - true).mean()


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


class _Logistic(_Sampled):
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
