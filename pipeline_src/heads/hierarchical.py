"""Two-level hierarchical (class-based) softmax (Goodman 2001; Mikolov et al. 2011).

p(w | h) = p(c(w) | h) p(w | c(w), h): a softmax over C word classes, then a softmax over the words of the
target's class only. Classes are contiguous ranges of the frequency-sorted vocabulary, made by frequency
binning (Mikolov et al. 2011): ``clustering: mass`` gives every class about 1/C of the train tokens (frequent
words get small classes, rare words large ones), ``count`` gives every class |V|/C words. A class that the
mass rule would leave empty (one word heavier than 1/C) is dropped, so C may come out smaller. The class
of every word is a buffer of the head: it is saved in model.pt with the run. A training step costs
O(d (C + |class of the target|)) per token, about O(d sqrt|V|) at C = sqrt|V|; exact evaluation O(d (C + |V|)).
The within-class softmaxes run as one autograd function with its backward written out (:class:`WithinClass`):
no copy of the classes' rows, and the weight's gradient written once, row-sparse and already coalesced.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..io.errors import ConfigError
from .base import HeadContext, OutputLayer, output_embedding, register
from .kernels import chunked_rows


def frequency_classes(counts: Tensor | None, v: int, classes: int, clustering: str) -> Tensor:
    """(C + 1,) class boundaries over word ids 0 .. v - 1 (frequency-sorted): class c holds ids
    [bounds[c], bounds[c + 1]). ``mass``: a word's class is floor(C x the train mass before it), empty
    classes dropped; ``count``: C ranges of (nearly) equal size."""
    classes = max(1, min(classes, v))
    if clustering == "count" or counts is None:
        bounds = torch.linspace(0, v, classes + 1).round().long()
        return torch.unique(bounds)
    c = counts.double()
    before = (c.cumsum(0) - c) / c.sum()  # the train mass of the words before each id
    label = torch.clamp((before * classes).floor().long(), max=classes - 1)  # non-decreasing in id
    starts = torch.nonzero(torch.diff(label, prepend=label[:1] - 1)).squeeze(1)
    return torch.cat([starts, torch.tensor([v])])


class WithinClass(torch.autograd.Function):
    """log p(y | class of y, h) for every row, with its backward written out: per class c present among the
    targets, logits = h_c W_c^T + b_c over the class's rows of W (a view, not a copy), and in the backward
    G = grad (onehot(y) - softmax) for its rows: dh_c = G W_c, and dW_c = G^T h_c, db_c = sum of G written
    straight into the gradient's rows. The weight's gradient is row-sparse and already coalesced (the
    present classes' rows, in id order) with ``sparse``; dense otherwise."""

    @staticmethod
    def forward(ctx, hidden, weight, bias_col, target, bounds, word_class, sparse):
        cls = word_class[target]
        order = torch.argsort(cls, stable=True)  # rows grouped by class
        present, counts = torch.unique_consecutive(cls[order], return_counts=True)
        out = hidden.new_empty(target.shape[0])
        saved = []
        for c, rows in zip(present.tolist(), torch.split(order, counts.tolist())):
            s, e = int(bounds[c]), int(bounds[c + 1])
            h = hidden[rows]
            logits = torch.addmm(bias_col[s:e, 0], h, weight[s:e].t())  # (rows, |c|)
            p = torch.softmax(logits, dim=1)
            y = target[rows] - s
            out[rows] = logits.gather(1, y[:, None]).squeeze(1) - torch.logsumexp(logits, dim=1)
            saved.append((c, s, e, rows, y, p))
        ctx.saved = saved
        ctx.sparse, ctx.shape = sparse, weight.shape
        ctx.save_for_backward(hidden, weight)
        return out

    @staticmethod
    def backward(ctx, grad):
        hidden, weight = ctx.saved_tensors
        grad_h = torch.zeros_like(hidden)
        total = sum(e - s for _, s, e, *_ in ctx.saved)
        grad_w = hidden.new_empty(total, weight.shape[1])  # the present classes' rows, in id order
        grad_b = hidden.new_empty(total, 1)
        ids, at = [], 0
        for c, s, e, rows, y, p in sorted(ctx.saved, key=lambda t: t[0]):
            g = (-p).scatter_add_(1, y[:, None], torch.ones_like(y, dtype=p.dtype)[:, None])  # onehot - p
            g.mul_(grad[rows][:, None])  # (rows, |c|)
            grad_h[rows] = g @ weight[s:e]
            torch.mm(g.t(), hidden[rows], out=grad_w[at:at + e - s])
            grad_b[at:at + e - s, 0] = g.sum(0)
            ids.append(torch.arange(s, e, device=hidden.device))
            at += e - s
        ids = torch.cat(ids) if ids else torch.zeros(0, dtype=torch.long, device=hidden.device)
        if ctx.sparse:
            dw = torch.sparse_coo_tensor(ids[None], grad_w, ctx.shape, is_coalesced=True)
            db = torch.sparse_coo_tensor(ids[None], grad_b, (ctx.shape[0], 1), is_coalesced=True)
        else:
            dw = hidden.new_zeros(ctx.shape).index_copy_(0, ids, grad_w)
            db = hidden.new_zeros(ctx.shape[0], 1).index_copy_(0, ids, grad_b)
        return grad_h, dw, db, None, None, None, None


@register("hierarchical-softmax", family="structured and self-normalised heads")
class HierarchicalSoftmax(OutputLayer):
    affine_why = "log p(w) = log p(class) + log p(w | class): two softmaxes, not one set of logits"

    @dataclass(frozen=True)
    class Options:
        classes: int | None = field(default=None, metadata={"minimum": 1, "description": (
            "number of word classes C (null = round(sqrt |V|)); fewer when frequency binning leaves a class empty")})
        clustering: str = field(default="mass", metadata={"enum": ["mass", "count"], "description": (
            "mass: each class about 1/C of the train tokens (Mikolov et al. 2011's frequency binning); "
            "count: each class |V|/C words")})
        sparse: bool = field(default=True, metadata={"description": (
            "sparse gradients for the output rows of the classes a step touches (an update independent of |V|)")})
        chunk_size: int = field(default=1024, metadata={"minimum": 1, "description": "rows per chunk in evaluation"})
        init_range: float = field(default=0.1, metadata={"exclusiveMinimum": 0,
                                  "description": "untied weights ~ U(-r, r)"})

    def __init__(self, ctx: HeadContext, opts: Options):
        super().__init__(ctx, opts)
        if opts.clustering == "mass" and ctx.unigram_counts is None:
            raise ConfigError("hierarchical-softmax option 'clustering: mass' needs the train counts (noise.npz)")
        c = opts.classes or max(1, round(math.sqrt(ctx.vocab_size)))
        bounds = frequency_classes(ctx.unigram_counts, ctx.vocab_size, c, opts.clustering)
        self.register_buffer("bounds", bounds)  # (C + 1,) saved with the run
        word_class = torch.repeat_interleave(torch.arange(len(bounds) - 1), torch.diff(bounds))
        self.register_buffer("word_class", word_class)  # (V,)
        self.n_classes = len(bounds) - 1
        self.class_weight = nn.Parameter(torch.empty(self.n_classes, ctx.in_dim).uniform_(-opts.init_range, opts.init_range))
        self.class_bias = nn.Parameter(torch.zeros(self.n_classes))
        self.weight, _ = output_embedding(ctx, opts.init_range)  # (V, d)
        # the bias as a (V, 1) column, so a class's rows are gathered with a sparse gradient (as the sampled heads')
        self.bias_col = nn.Parameter(torch.zeros(ctx.vocab_size, 1))
        counts = ctx.unigram_counts
        sizes = torch.diff(bounds).double()
        if counts is None or counts.sum() == 0:
            self.expected_class_size = float(sizes.mean())
        else:  # E over train targets of the size of their class: what a training step computes
            self.expected_class_size = float((counts.double() * sizes[word_class]).sum() / counts.sum())

    @property
    def bias(self) -> Tensor:
        return self.bias_col[:, 0]  # (V,)

    def sparse_params(self) -> list[nn.Parameter]:
        return [self.weight, self.bias_col] if self.opts.sparse else []

    def forward_macs(self, exact: bool) -> float:
        return self.in_dim * (self.n_classes + (self.vocab_size if exact else self.expected_class_size))

    def _class_log_prob(self, hidden: Tensor) -> Tensor:
        return F.log_softmax(F.linear(hidden, self.class_weight, self.class_bias), dim=-1)  # (N, C)

    def _within(self, hidden: Tensor, target: Tensor) -> Tensor:
        """(N,) log p(target | its class, h), one small softmax per class present among the targets: fused
        (:class:`WithinClass`, no copy of the classes' rows, one gradient block written per class), or by
        autograd under autocast, where the products run in bf16."""
        if torch.is_autocast_enabled(hidden.device.type):
            return self._within_autograd(hidden, target)
        return WithinClass.apply(hidden, self.weight, self.bias_col, target, self.bounds, self.word_class,
                                 self.opts.sparse)

    def _within_autograd(self, hidden: Tensor, target: Tensor) -> Tensor:
        """:meth:`_within` through autograd. The rows of every present class are gathered by one lookup (one
        sparse gradient: autograd sums the gradients of many lookups of one weight into a dense (V, d) block)."""
        cls = self.word_class[target]
        present = torch.unique(cls)  # (P,)
        starts, ends = self.bounds[present], self.bounds[present + 1]
        sizes = ends - starts
        ids = torch.repeat_interleave(starts - torch.cumsum(sizes, 0) + sizes, sizes) + torch.arange(
            int(sizes.sum()), device=hidden.device)  # every present class's word ids, class by class
        split = sizes.tolist()  # split, not slices: its backward is one concatenation, not one (M, d) block a class
        w_all = F.embedding(ids, self.weight, sparse=self.opts.sparse).split(split)  # (|c|, d) per class
        b_all = F.embedding(ids, self.bias_col, sparse=self.opts.sparse).squeeze(1).split(split)
        out = hidden.new_empty(target.shape[0])
        for c, s, w, b in zip(present.tolist(), starts.tolist(), w_all, b_all):
            rows = torch.nonzero(cls == c).squeeze(1)
            logits = F.linear(hidden[rows], w, b)  # (rows, |c|)
            out = out.index_put((rows,), (logits.gather(1, (target[rows] - s)[:, None]).squeeze(1)
                                          - torch.logsumexp(logits, dim=1)).to(out.dtype))  # bf16 under autocast
        return out

    def target_log_prob(self, hidden: Tensor, target: Tensor, chunk_size: int | None = None) -> Tensor:
        def one(h, t):
            return self._class_log_prob(h).gather(1, self.word_class[t][:, None]).squeeze(1) + self._within(h, t)

        return chunked_rows(one, hidden, target, chunk_size or self.opts.chunk_size)

    def loss(self, hidden: Tensor, target: Tensor) -> Tensor:
        return -self.target_log_prob(hidden, target, hidden.shape[0] or 1).mean()

    def _within_blocks(self, hidden: Tensor):
        """Class by class: (c, first word, last word + 1, log p(w | c, h) over the class's words (N, |c|))."""
        for c in range(self.n_classes):
            s, e = int(self.bounds[c]), int(self.bounds[c + 1])
            yield c, s, e, F.log_softmax(F.linear(hidden, self.weight[s:e], self.bias[s:e]), dim=-1)

    def log_mass(self, hidden: Tensor, member: Tensor) -> Tensor:
        """Each group's mass class by class: log p(c | h) + log of the sum over the class's words of
        p(w | c, h) member[g, w], joined over classes by logaddexp: no (N, V) tensor is formed."""
        member = member.to(hidden.dtype)
        class_lp = self._class_log_prob(hidden)  # (N, C)
        out = hidden.new_full((hidden.shape[0], member.shape[0]), -math.inf)  # (N, G)
        for c, s, e, within in self._within_blocks(hidden):
            out = torch.logaddexp(out, torch.log(within.exp() @ member[:, s:e].t()) + class_lp[:, c:c + 1])
        return out

    def log_prob(self, hidden: Tensor) -> Tensor:
        out = hidden.new_empty(hidden.shape[0], self.vocab_size)  # (N, V)
        class_lp = self._class_log_prob(hidden)  # (N, C)
        for c, s, e, within in self._within_blocks(hidden):
            out[:, s:e] = within + class_lp[:, c:c + 1]
        return out
