"""``sampled-softmax`` (Jean et al. 2015): a softmax over the target and the negatives with logits
s - log E[count] (the proposal's expected count; k Q with replacement), accidental hits (negatives equal to
the row's target) removed. Test: the full softmax over s. Its proposal is an option (docs/methods.md): a fixed Q,
Jean et al.'s target vocabulary, the batch's targets, or Blanc & Rendle's quadratic kernel.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from .base import HeadContext, register
from .kernel_tree import KernelTree, draw_macs
from .partitions import Plan, fill_frequent
from .sampled import SamplerOptions, SampledObjective, bias_init_field
from .sampling import Negatives, Sampler

UNIGRAM_LIKE = ("unigram", "uniform", "log-uniform")


@register("sampled-softmax", family="sampled objectives")
class SampledSoftmax(SampledObjective):
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
            ids, s = self.tree.sample(hidden, k, scores=True)  # (N, k) ids and their kernel scores h . w
            h = hidden.double()
            log_z = self.tree.log_z(h)  # (N,)
            drawn = self.tree.log_q_of_scores(s, h, log_z).exp() * k  # (N, k): no second gather of the snapshot
            own = self.tree.log_q(h, target[:, None], log_z).exp()[:, 0] * k  # (N,): the target's row alone
        return Negatives(ids, drawn, k, target_count=own)

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
