"""Adaptive softmax (Grave et al. 2017), the practical baseline for large vocabularies.

The parameters of ``torch.nn.AdaptiveLogSoftmaxWithLoss`` on the frequency-sorted vocabulary: a head
softmax over the most frequent words plus one entry per tail cluster, tail clusters with projections
shrunk by ``div_value``. Exact and normalised by construction; no weight tying. Training runs the project's
own fused tails (``loss``): the head's and each tail's cross-entropy through the chunked linear cross-entropy
the full softmax uses (``kernels.linear_cross_entropy``: logits written once into a reused block, softmax in
place, the gradients formed in the same pass), where torch's module writes each tail's logits, their
log-softmax, a gather and, backward, a scatter into zeros and the log-softmax's backward. The values and
gradients are torch's module's (``tests/test_large_vocab_heads.py``); evaluation uses the module itself.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..io.errors import ConfigError
from .base import HeadContext, OutputLayer, register
from .kernels import Scratch, chunked_rows, default_cutoffs, linear_cross_entropy, linear_log_mass


def tail_div_value(d: int, clusters: int, div_value: float, min_tail_dim: int) -> float:
    """The divisor actually used: ``div_value``, lowered where needed so that the last tail cluster's
    projection d // div^clusters is at least ``min_tail_dim`` wide (Grave et al.'s div 4 was chosen for d of
    512-1024, where the last of two tails is 32 wide; at d = 16 it is 1). 1.0 (no reduction) at the least."""
    if min_tail_dim <= 1 or int(d // div_value ** clusters) >= min_tail_dim:
        return div_value
    div = (d / min_tail_dim) ** (1.0 / clusters)
    while div > 1.0 and int(d // div ** clusters) < min_tail_dim:  # floating point at the boundary
        div = math.nextafter(div, 1.0)
    return max(div, 1.0)


TRAIN_BLOCK_ELEMENTS = 1 << 24  # a training block's logits: 64 MB in float32


def _block_rows(words: int) -> int:
    """Rows of the head's or a tail's logits formed at once in training: as many as keep the block within
    ``TRAIN_BLOCK_ELEMENTS`` (torch's module forms a tail's logits for all its rows at once, three times over:
    logits, log-softmax and its gradient). At the sweep's shapes the head and every tail but the largest at 100k
    and 1M words are one block, so its operator count does not grow with the rows a tail holds (GPU launches);
    ``chunk_size`` is evaluation's."""
    return max(1, TRAIN_BLOCK_ELEMENTS // max(1, words))


@register("adaptive-softmax", family="structured and self-normalised heads")
class AdaptiveSoftmax(OutputLayer):
    @dataclass(frozen=True)
    class Options:
        cutoffs: tuple[int, ...] = field(default=(), metadata={
            "description": "ids where tail clusters start (increasing, < V); empty = 5% and 25% of V"})
        div_value: float = field(default=4.0, metadata={"exclusiveMinimum": 1, "description": "tail size divisor"})
        min_tail_dim: int = field(default=1, metadata={"minimum": 1, "description": (
            "narrowest tail projection: div_value is lowered (to 1 at the least) so that the last cluster's "
            "projection d // div^clusters is at least min(this, d) wide; 1 = div_value as given. 32 keeps Grave et "
            "al.'s div 4 at d = 512 (tails 128 and 32) and uses div 1 at d = 16")})
        head_bias: bool = field(default=True, metadata={"description": "bias in the head softmax"})
        chunk_size: int = field(default=1024, metadata={"minimum": 1, "description": "rows per chunk in evaluation"})

    def __init__(self, ctx: HeadContext, opts: Options):
        super().__init__(ctx, opts)
        cutoffs = list(opts.cutoffs) or default_cutoffs(ctx.vocab_size)
        if not cutoffs or sorted(set(cutoffs)) != cutoffs or cutoffs[-1] >= ctx.vocab_size or cutoffs[0] < 1:
            raise ConfigError(f"adaptive-softmax option 'cutoffs': {cutoffs} must be increasing integers in [1, {ctx.vocab_size})")
        least = min(opts.min_tail_dim, ctx.in_dim)  # a tail is never wider than the head's input
        self.div_value = tail_div_value(ctx.in_dim, len(cutoffs), opts.div_value, least)
        if int(ctx.in_dim // self.div_value ** len(cutoffs)) < 1:
            raise ConfigError(f"adaptive-softmax option 'div_value': the last tail cluster's projection d // div_value^{len(cutoffs)} "
                             f"= {ctx.in_dim} // {opts.div_value}^{len(cutoffs)} is empty; lower div_value or use fewer cutoffs")
        self.unigram_counts = None if ctx.unigram_counts is None else ctx.unigram_counts.double()
        self.asm = nn.AdaptiveLogSoftmaxWithLoss(ctx.in_dim, ctx.vocab_size, cutoffs, div_value=self.div_value,
                                                 head_bias=opts.head_bias)
        self.register_buffer("edges", torch.tensor(cutoffs), persistent=False)  # where each tail cluster starts
        self.scratch = [Scratch() for _ in range(len(cutoffs) + 1)]  # the head's logits block, then each tail's

    def forward_macs(self, exact: bool) -> float:
        """Head softmax over the shortlist and one entry per cluster; tail cluster i costs d d_i + d_i V_i.
        Exact evaluation computes every tail for every token; training only the target's, so its
        expected cost weights each tail by the train frequency of its words."""
        d = self.in_dim
        macs = float(d * self.asm.head_size)
        edges = self.asm.cutoffs  # [c0, c1, ..., V]
        counts = self.unigram_counts
        for i, tail in enumerate(self.asm.tail):
            proj, out = tail[0], tail[1]
            cost = d * proj.out_features + proj.out_features * out.out_features
            if exact or counts is None:
                share = 1.0
            else:
                share = float(counts[edges[i]:edges[i + 1]].sum() / counts.sum())
            macs += share * cost
        return macs

    def loss(self, hidden: Tensor, target: Tensor) -> Tensor:
        """mean_i [-log p(c_i | h_i) - log p(t_i | c_i, h_i)]: the head's cross-entropy over every row against
        its target's word (shortlist) or cluster, plus each tail's over the rows whose target it holds, in
        that tail's projected space: torch's module's loss, each part fused and chunked. One tail at a time
        (a bounded loop: the clusters, two by default); the rows a tail holds are found on the device."""
        asm, n = self.asm, hidden.shape[0]  # hidden (N, d), target (N,)
        cluster = torch.bucketize(target, self.edges, right=True)  # (N,): 0 the shortlist, i + 1 tail i
        head_target = torch.where(cluster == 0, target, asm.shortlist_size - 1 + cluster)
        total = linear_cross_entropy(hidden, asm.head.weight, asm.head.bias, head_target,
                                     _block_rows(asm.head.out_features), self.scratch[0]) * n
        for i, (proj, words) in enumerate(asm.tail):
            rows = (cluster == i + 1).nonzero().squeeze(1)  # (n_i,)
            if rows.numel() == 0:
                continue
            z = F.linear(hidden.index_select(0, rows), proj.weight)  # (n_i, d_i)
            within = target.index_select(0, rows) - self.edges[i]  # (n_i,) ids inside the cluster
            total = total + linear_cross_entropy(z, words.weight, None, within, _block_rows(words.out_features),
                                                 self.scratch[i + 1]) * rows.numel()
        return total / n

    def module_loss(self, hidden: Tensor, target: Tensor) -> Tensor:
        """The same loss through ``torch.nn.AdaptiveLogSoftmaxWithLoss`` itself: the reference ``loss`` is held
        to, and the *before* of the bench. In float32 under bf16 autocast: torch's module writes autocast's
        float32 log_softmax into a tensor of its input's dtype, which fails on CUDA (index_copy_ dtype mismatch)."""
        if torch.is_autocast_enabled(hidden.device.type) or hidden.dtype in (torch.bfloat16, torch.float16):
            with torch.autocast(hidden.device.type, enabled=False):
                return self.asm(hidden.float(), target).loss
        return self.asm(hidden, target).loss

    def affine_logits(self):
        """The head cluster: the shortlist words' logits and one per tail cluster, affine in h. A shortlist
        word that wins the head wins overall (a tail word's p is at most its cluster's); one that cannot win
        the head might still win overall, so its count is an upper bound for the shortlist."""
        head = self.asm.head
        bias = head.bias if head.bias is not None else head.weight.new_zeros(head.out_features)
        return head.weight, bias, self.asm.shortlist_size

    def log_prob(self, hidden: Tensor) -> Tensor:
        return self.asm.log_prob(hidden)

    def log_mass(self, hidden: Tensor, member: Tensor) -> Tensor:
        """Each group's mass from the head's log-probabilities (its shortlist words, and each tail cluster's share)
        and each tail's within-cluster masses, blocked over its words (``linear_log_mass``): no (N, V) tensor."""
        asm, member = self.asm, member.to(hidden.dtype)
        head_lp = F.log_softmax(asm.head(hidden), dim=-1)  # (N, shortlist + clusters)
        sl = asm.shortlist_size
        out = torch.log(head_lp[:, :sl].exp() @ member[:, :sl].t())  # (N, G): the shortlist words
        for i, (proj, words) in enumerate(asm.tail):
            s, e = asm.cutoffs[i], asm.cutoffs[i + 1]
            within = linear_log_mass(proj(hidden), words.weight, None, member[:, s:e])  # log q(g | cluster i, h)
            out = torch.logaddexp(out, within + head_lp[:, sl + i:sl + i + 1])
        return out

    def target_log_prob(self, hidden: Tensor, target: Tensor, chunk_size: int | None = None) -> Tensor:
        return chunked_rows(lambda h, t: self.asm(h, t).output, hidden, target, chunk_size or self.opts.chunk_size)
