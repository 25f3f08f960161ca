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
from typing import NamedTuple

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


def size_bins(bounds: Tensor) -> Tensor:
    """(C,) each class's bin: floor(log2 |c|). Classes of one bin differ in size by less than 2x, so padding them
    to the bin's largest wastes at most half of a block; a vocabulary of V words has at most log2 V + 1 bins."""
    return torch.floor(torch.log2(torch.diff(bounds).double())).long()


class Block(NamedTuple):
    """One padded block of classes (see :func:`_bin_blocks`)."""

    rows: Tensor  # (P, R): the row of each slot (padding: row 0)
    ok: Tensor  # (P, R): which slots are rows
    ids: Tensor  # (P, K): the word of each column (padding: the class's last word, so a row of ids ascends)
    add: Tensor  # (P, 1, K): 0, or -inf for a padded column
    dest: Tensor  # (P * K,): each column's place among the touched words (padding: M, a row that is dropped)


SPLIT_WASTE = 1 << 16  # padded logits a block may waste before it is split: about 4M MACs at d = 64, what the
# ~60 operators of one more block cost on a CPU thread


def _block_keys(size_bin, counts, sizes):
    """Each present class's block: its size bin, split by the number of targets (floor log2) where padding the
    bin's classes to its busiest would more than double their rows and waste more than ``SPLIT_WASTE`` logits.
    So a block's columns are at most twice what its targets need, and its rows too but for a bounded slack; a
    batch of N targets makes at most (log2 V + 1)(log2 N + 1) blocks, one per size bin where targets spread evenly
    (as under ``clustering: mass``). By size alone, ``clustering: count`` under a Zipfian law (classes of one
    size, the first holding most targets) padded every class to the first's targets: 123x the products the
    targets need at 100k words (docs/bench.md)."""
    import numpy as np

    key = size_bin * 64  # log2 N < 64: room for the count bins
    for k in np.unique(size_bin):
        sel = size_bin == k
        padded, needed = sel.sum() * counts[sel].max(), counts[sel].sum()
        if padded > 2 * needed and (padded - needed) * sizes[sel].max() > SPLIT_WASTE:
            key[sel] += np.floor(np.log2(counts[sel])).astype(np.int64)
    return key


def _bin_blocks(cls: Tensor, bounds: Tensor, bins: Tensor) -> tuple[list[Block], Tensor]:
    """The targets' classes as padded blocks (:func:`_block_keys`: a size bin, split by the targets' count where
    it pays), and the touched words (M,): every word of every present class, in id order (a row-sparse gradient's
    rows). P is a block's present classes, R the most targets one has, K its largest class. Built on the host in
    one pass (the targets' classes come over once) and sent in one copy, so a block costs no index arithmetic on
    the device, and the backward writes each block's gradient straight to its rows (``dest``): no sort, no
    concatenation."""
    import numpy as np

    c = cls.cpu().numpy()
    b, bnd = bins.cpu().numpy(), bounds.cpu().numpy()
    order = np.argsort(c, kind="stable")
    present, first, counts = np.unique(c[order], return_index=True, return_counts=True)
    sizes = bnd[present + 1] - bnd[present]
    offset = np.cumsum(sizes) - sizes  # each present class's first place among the touched words
    m = int(sizes.sum())
    pieces, shapes = [np.repeat(bnd[present] - offset, sizes) + np.arange(m)], []
    key = _block_keys(b[present], counts, sizes)
    for k in np.unique(key):
        sel = np.nonzero(key == k)[0]
        r, size = int(counts[sel].max()), sizes[sel]
        kk = int(size.max())
        j = np.arange(r)
        ok = j < counts[sel, None]
        rows = np.where(ok, order[np.minimum(first[sel, None] + j, len(order) - 1)], 0)
        w = np.arange(kk)
        pad = w >= size[:, None]
        ids = np.where(pad, bnd[present[sel] + 1, None] - 1, bnd[present[sel], None] + w)  # ascending in a class
        dest = np.where(pad, m, offset[sel, None] + w)
        pieces += [rows.ravel(), ok.ravel(), ids.ravel(), pad.ravel(), dest.ravel()]
        shapes.append((len(sel), r, kk))
    flat = torch.from_numpy(np.concatenate(pieces).astype(np.int64)).to(cls.device)
    touched, at, out = flat[:m], m, []
    for p, r, kk in shapes:
        rows, ok, ids, pad, dest = flat[at:at + 2 * p * r + 3 * p * kk].split([p * r, p * r, p * kk, p * kk, p * kk])
        at += 2 * p * r + 3 * p * kk
        add = torch.zeros(p, 1, kk, device=cls.device).masked_fill_(pad.view(p, 1, kk).bool(), -math.inf)
        out.append(Block(rows.view(p, r), ok.view(p, r).bool(), ids.view(p, kk), add, dest))
    return out, touched


def _rows_of(x: Tensor, index: Tensor) -> Tensor:
    """x's rows at ``index`` (any shape), by ``index_select``: on the CPU a copy of whole rows, where indexing
    (``x[index]``) copies element by element (measured at 1M words: the gather was a third of the step)."""
    return x.index_select(0, index.reshape(-1)).view(*index.shape, *x.shape[1:])


class WithinClass(torch.autograd.Function):
    """log p(y | class of y, h) for every row, with its backward written out, and no loop over classes: the
    classes present among the targets are grouped by size bin (``size_bins``: at most log2 V + 1; a bin split by the
    targets' count where padding would more than double its rows, :func:`_block_keys`), and each block is one
    batched product: logits (P, R, K) = h_blocks (P, R, d) @ W_blocks (P, K, d)^T + b, padded
    words at -inf, padded rows ignored. The backward writes G = grad (onehot(y) - softmax) once per block: dh = G W,
    dW = G^T h and db = sum of G, each block copied once to its rows (``Block.dest``) of one gradient over the
    touched words; row-sparse and already coalesced (the touched words in id order) with ``sparse``, dense
    otherwise."""

    @staticmethod
    def forward(ctx, hidden, weight, bias_col, target, bounds, word_class, sparse, bins):
        out = hidden.new_empty(target.shape[0])
        blocks, touched = _bin_blocks(word_class[target], bounds, bins)
        saved = []
        for blk in blocks:
            h, w = _rows_of(hidden, blk.rows), _rows_of(weight, blk.ids)  # (P, R, d), (P, K, d)
            bias = _rows_of(bias_col, blk.ids).view(blk.add.shape)  # (P, 1, K)
            logits = torch.baddbmm(blk.add.to(hidden.dtype) + bias, h, w.transpose(1, 2))
            y = torch.searchsorted(blk.ids, target[blk.rows]).clamp_(max=blk.ids.shape[1] - 1)  # (P, R): target's column
            lse = torch.logsumexp(logits, dim=2, keepdim=True)
            p = torch.exp(logits - lse)  # (P, R, K)
            out[blk.rows[blk.ok]] = (logits.gather(2, y[..., None]) - lse).squeeze(2)[blk.ok]
            saved.append((blk, y, p, h, w))
        ctx.saved, ctx.touched = saved, touched
        ctx.sparse, ctx.shape = sparse, weight.shape
        ctx.save_for_backward(hidden)
        return out

    @staticmethod
    def backward(ctx, grad):
        (hidden,) = ctx.saved_tensors
        grad_h = torch.zeros_like(hidden)
        m, d = ctx.touched.shape[0], ctx.shape[1]
        grad_w, grad_b = hidden.new_empty(m + 1, d), hidden.new_empty(m + 1)  # row m: the padded columns' (dropped)
        for blk, y, p, h, w in ctx.saved:
            ok = blk.ok
            g = torch.neg(p).scatter_add_(2, y[..., None], ok[..., None].to(p.dtype))  # onehot - p; padded rows: -p
            g.mul_((grad[blk.rows] * ok)[..., None])  # padded rows carry no gradient
            grad_h.index_put_((blk.rows[ok],), torch.bmm(g, w)[ok])  # each row lies in one class: no clash
            grad_w.index_copy_(0, blk.dest, torch.bmm(g.transpose(1, 2), h).view(-1, d))  # (P K, d) to its rows
            grad_b.index_copy_(0, blk.dest, g.sum(1).view(-1))
        grad_w, grad_b = grad_w[:m], grad_b[:m, None]
        if ctx.sparse:
            dw = torch.sparse_coo_tensor(ctx.touched[None], grad_w, ctx.shape, is_coalesced=True)
            db = torch.sparse_coo_tensor(ctx.touched[None], grad_b, (ctx.shape[0], 1), is_coalesced=True)
        else:
            dw = hidden.new_zeros(ctx.shape).index_copy_(0, ctx.touched, grad_w)
            db = hidden.new_zeros(ctx.shape[0], 1).index_copy_(0, ctx.touched, grad_b)
        return grad_h, dw, db, None, None, None, None, None


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
        self.register_buffer("bins", size_bins(bounds), persistent=False)  # (C,) derived: not in model.pt
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
                                 self.opts.sparse, self.bins)

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
