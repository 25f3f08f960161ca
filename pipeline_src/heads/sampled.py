"""Shared machinery of the sampling-based objectives: their options, the noise distribution Q and its sampler,
the output embedding and bias, and exact chunked evaluation; each objective is its own module
(``sampled_softmax.py``, ``logistic.py``).

Training touches only the target and k negative rows of the output embedding; evaluation is exact.
Every loss is also available for negatives given from outside (``loss_given``), so it can be checked
against brute force and reproduced. Scores: s(w, c) = h . w (+ b_w where the method has a bias).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..io.errors import ConfigError
from .base import HeadContext, OutputLayer, output_embedding
from .kernels import chunked_rows, init_range_field, linear_log_mass, linear_score_and_log_z
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


class SampledObjective(OutputLayer):
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

    def log_mass(self, hidden: Tensor, member: Tensor) -> Tensor:
        weight, bias, _ = self.affine_logits()  # test logits = h W^T + (b + a constant per word)
        return linear_log_mass(hidden, weight, bias, member)

    def loss(self, hidden: Tensor, target: Tensor) -> Tensor:
        return self.loss_given(hidden, target, self.sampler.sample(hidden.shape[0]))

    def loss_given(self, hidden: Tensor, target: Tensor, neg: Negatives) -> Tensor:
        raise NotImplementedError
