"""Interpolated Kneser-Ney n-gram language models: the count-based reference row of every table.

The estimator is Chen & Goodman's (1998) interpolated *modified* Kneser-Ney, as SRILM (``-kndiscount
-interpolate``) and KenLM build it:

    p_k(w | h) = (max(a_k(hw) - D_k(a_k(hw)), 0) + gamma_k(h) p_{k-1}(w | h')) / sum_v a_k(hv)
    gamma_k(h) = sum_v D_k(a_k(hv))          (= D1 N1(h.) + D2 N2(h.) + D3+ N3+(h.))
    p_0(w)     = 1 / |V|

where h' drops the oldest word of h, and the adjusted count a_k is the raw count at the highest order and the
number of distinct left extensions (the continuation count N1+(. hw)) below it, except for an n-gram that
starts at a sentence boundary, which cannot be extended and keeps its raw count (KenLM's rule). A context
never seen as a prefix backs off whole: p_k(w | h) = p_{k-1}(w | h'). Three discounts per order,
D(c) = c - (c + 1) Y n_{c+1} / n_c with Y = n1 / (n1 + 2 n2), from that order's count-of-counts of adjusted
counts (c = 1, 2, 3+; Ney's single discount where a count-of-counts is 0); every discount is clipped to
[0, c], so each distribution sums to one exactly.
``discount=<number>`` (or one number per order) is absolute discounting with a single fixed discount, NLTK's
``KneserNeyInterpolated`` (whose lowest level is the uniform distribution: a discount of ``inf`` at order 1).

Sentences: with ``sentences=True`` n-grams never cross an ``<eos>``: the ``<eos>`` that ends one sentence is
the next one's ``<s>`` (never predicted as a context-free token; a split starts after a virtual one), as
SRILM scores one sentence at a time with ``</s>`` predicted and counted. With ``sentences=False`` a split is
one stream (the sparse n-gram synthetic language, whose truth crosses lines).

Implementation: every n-gram gets an integer id order by order (the id of its (k-1)-gram prefix times |V| plus
its last word, made dense with ``np.unique``), so fitting and scoring are a few sorts and bincounts over the
tokens: memory linear in tokens and distinct n-grams, never a table over the vocabulary.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass
class _Order:
    """One order k of a fitted model: its distinct k-grams, sorted by key, and each context's statistics."""
    keys: np.ndarray      # (G,) int64, sorted: prefix id * V + last word (k = 1: the word)
    adjusted: np.ndarray  # (G,) adjusted count a_k
    discount: np.ndarray  # (G,) D_k(a_k), clipped to [0, a_k]
    total: np.ndarray     # (P,) per (k-1)-gram context id: sum of a_k over its k-grams (k = 1: one entry)
    gamma: np.ndarray     # (P,) per context: the discounted mass, sum of D_k(a_k)
    discounts: tuple      # (D1, D2, D3+) as estimated (before clipping per n-gram)


def modified_discounts(adjusted: np.ndarray) -> tuple[float, float, float]:
    """Chen & Goodman's D1, D2, D3+ from the count-of-counts n1..n4 of one order's adjusted counts. Where the
    estimate is undefined or leaves (0, c) (a count-of-counts is 0, or n_{c+1} > n_c in tiny data: a discount of
    0 would give an unseen continuation probability 0), every discount of the order is Ney's single
    D = n1 / (n1 + 2 n2), or 0.5 when that is 0 or 1 (KenLM refuses such data instead)."""
    n = [int(np.count_nonzero(adjusted == c)) for c in (1, 2, 3, 4)]
    if min(n) > 0:
        y = n[0] / (n[0] + 2 * n[1])
        d = tuple(c - (c + 1) * y * n[c] / n[c - 1] for c in (1, 2, 3))
        if all(0 < x < c for c, x in zip((1, 2, 3), d)):
            return d
    y = n[0] / (n[0] + 2 * n[1]) if n[0] + n[1] else 0.0
    y = y if 0 < y < 1 else 0.5
    return (y, y, y)


class KneserNey:
    """An interpolated Kneser-Ney model of ``order`` over word ids ``0 .. vocab_size - 1``."""

    def __init__(self, order: int, vocab_size: int, discount="modified", sentences: bool = True, eos: int = 0):
        if order < 1:
            raise ValueError(f"Kneser-Ney order must be at least 1, got {order}")
        if isinstance(discount, str) and discount != "modified":
            raise ValueError(f"Kneser-Ney discount must be 'modified' or a number, got {discount!r}")
        if not isinstance(discount, str):
            discount = [float(discount)] * order if np.isscalar(discount) else [float(d) for d in discount]
            if len(discount) != order or min(discount) < 0:
                raise ValueError(f"Kneser-Ney discounts: one number >= 0 per order ({order}), got {discount}")
        self.order, self.V, self.discount, self.sentences, self.eos = order, vocab_size, discount, sentences, eos
        self.levels: list[_Order] = []

    # -- the n-grams of a stream ----------------------------------------------------------------------
    def _stream(self, tokens: np.ndarray) -> tuple[np.ndarray, int, np.ndarray]:
        """(tokens with a virtual <eos> in front when sentences are kept, index of the first predicted
        position, (T,) the earliest position a context may reach back to)."""
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.size and (tokens.min() < 0 or tokens.max() >= self.V):
            raise ValueError(f"token ids must lie in [0, {self.V}), got [{tokens.min()}, {tokens.max()}]")
        if not self.sentences:
            return tokens, 0, np.zeros(tokens.size, dtype=np.int64)
        tokens = np.concatenate([[self.eos], tokens])
        pos = np.arange(tokens.size)
        last_eos = np.maximum.accumulate(np.where(tokens == self.eos, pos, 0))
        lo = np.concatenate([[0], last_eos[:-1]])  # the last <eos> strictly before each position
        return tokens, 1, lo

    @staticmethod
    def _lookup(keys: np.ndarray, query: np.ndarray) -> np.ndarray:
        """Index of each query key in the sorted ``keys``, -1 where absent (or where the query is -1)."""
        if keys.size == 0:
            return np.full(query.shape, -1, dtype=np.int64)
        at = np.minimum(np.searchsorted(keys, query), keys.size - 1)
        return np.where((query >= 0) & (keys[at] == query), at, -1)

    def _allowed(self, k: int, first: int, lo: np.ndarray, n: int) -> np.ndarray:
        """(n,) whether the k-gram ending at each position lies inside its sentence (or the stream)."""
        pos = np.arange(n)
        return (pos >= first) & (pos - k + 1 >= lo)

    # -- fitting ---------------------------------------------------------------------------------------
    def fit(self, tokens: np.ndarray) -> "KneserNey":
        toks, first, lo = self._stream(tokens)
        n = toks.size
        gram_ids = [toks]  # order 1: the word ids themselves (every word is an entry, seen or not)
        ok = self._allowed(1, first, lo, n)
        raw = [(np.arange(self.V, dtype=np.int64), np.bincount(toks[ok], minlength=self.V))]
        suffix, starts_boundary = [None], [None]
        for k in range(2, self.order + 1):
            ok = self._allowed(k, first, lo, n)
            prev = np.concatenate([[-1], gram_ids[-1][:-1]])  # the (k-1)-gram ending one step earlier
            uniq, first_at, inv, counts = np.unique(prev[ok] * self.V + toks[ok], return_index=True,
                                                    return_inverse=True, return_counts=True)
            gid = np.full(n, -1, dtype=np.int64)
            gid[ok] = inv
            pos = np.flatnonzero(ok)[first_at]  # where each distinct k-gram first ends
            raw.append((uniq, counts))
            suffix.append(gram_ids[-1][pos])  # its last k-1 words: the order-(k-1) id ending there too
            starts_boundary.append(self.sentences & (toks[pos - k + 1] == self.eos))
            gram_ids.append(gid)
        self.levels = [self._level(k, raw, suffix, starts_boundary) for k in range(1, self.order + 1)]
        return self

    def _level(self, k: int, raw: list, suffix: list, starts_boundary: list) -> _Order:
        keys, counts = raw[k - 1]
        if k == self.order:
            adjusted = counts
        else:  # continuation counts: distinct (k+1)-grams whose last k words are this k-gram
            adjusted = np.bincount(suffix[k], minlength=keys.size)
            if k > 1:  # an n-gram that starts at a sentence boundary has no left extension: its raw count
                adjusted = np.where(starts_boundary[k - 1], counts, adjusted)
        if self.discount == "modified":
            d = modified_discounts(adjusted)
            per = np.select([adjusted == 1, adjusted == 2, adjusted >= 3], list(d), 0.0)
        else:
            d = (self.discount[k - 1],) * 3
            per = np.full(keys.size, d[0])
        per = np.clip(per, 0.0, adjusted)
        contexts = keys // self.V if k > 1 else np.zeros(keys.size, dtype=np.int64)
        size = raw[k - 2][0].size if k > 1 else 1  # the number of (k-1)-grams (k = 2: the words)
        total = np.bincount(contexts, weights=adjusted, minlength=size)
        gamma = np.bincount(contexts, weights=per, minlength=size)
        return _Order(keys, adjusted.astype(np.float64), per, total, gamma, tuple(float(x) for x in d))

    # -- scoring ---------------------------------------------------------------------------------------
    def _interpolate(self, words: np.ndarray, contexts: list, grams: list) -> np.ndarray:
        """(N,) p(word | its context) from, per order k, the context id (-1: none) and the k-gram id."""
        p = np.full(words.shape, 1.0 / self.V)
        for k, level in enumerate(self.levels, start=1):
            ctx, g = contexts[k - 1], grams[k - 1]
            total = level.total[np.maximum(ctx, 0)]
            seen = (ctx >= 0) & (total > 0)
            gi = np.maximum(g, 0)
            kept = np.where(g >= 0, level.adjusted[gi] - level.discount[gi], 0.0)
            mixed = (kept + level.gamma[np.maximum(ctx, 0)] * p) / np.where(seen, total, 1.0)
            p = np.where(seen, mixed, p)
        return p

    def _positions(self, tokens: np.ndarray) -> tuple[np.ndarray, int, list, list]:
        """(the stream, its first predicted position, per order the context id of each position (-1: none), per
        order the k-gram id ending there (-1: unseen))."""
        toks, first, lo = self._stream(tokens)
        n = toks.size
        ok = self._allowed(1, first, lo, n)
        contexts, grams = [np.where(ok, 0, -1)], [toks]
        for k, level in enumerate(self.levels[1:], start=2):
            ok = self._allowed(k, first, lo, n)
            before = np.concatenate([[-1], grams[-1][:-1]])  # the (k-1)-gram id ending one step earlier
            before = np.where(ok, before, -1)
            contexts.append(before)
            grams.append(self._lookup(level.keys, np.where(before >= 0, before * self.V + toks, -1)))
        return toks, first, contexts, grams

    def log_prob(self, tokens: np.ndarray) -> np.ndarray:
        """(T,) natural log p(token_t | its history) for every token of a split (after fit)."""
        toks, first, contexts, grams = self._positions(tokens)
        return np.log(self._interpolate(toks, contexts, grams)[first:])

    def band_log_mass(self, tokens: np.ndarray, word_band: np.ndarray, bands: int) -> np.ndarray:
        """(T,) natural log of the mass the model puts on the band of each token's word given its history (the
        band split, evaluation/scoring.py): the interpolation of :meth:`_interpolate` summed over the band's
        words, order by order (the kept mass of a context's continuations in the band, plus gamma times the
        lower order's band mass), from |band| / V at order 0; never a sum over the vocabulary per position."""
        toks, first, contexts, _ = self._positions(tokens)
        target = np.asarray(word_band)[toks]
        m = (np.bincount(word_band, minlength=bands) / self.V)[target]
        for k, level in enumerate(self.levels, start=1):
            ctx = contexts[k - 1]
            prefix = level.keys // self.V if k > 1 else np.zeros(level.keys.size, dtype=np.int64)
            last = level.keys % self.V if k > 1 else level.keys
            kept = np.zeros((level.total.size, bands))  # per context: its continuations' kept mass in each band
            np.add.at(kept, (prefix, np.asarray(word_band)[last]), level.adjusted - level.discount)
            c = np.maximum(ctx, 0)
            total = level.total[c]
            seen = (ctx >= 0) & (total > 0)
            m = np.where(seen, (kept[c, target] + level.gamma[c] * m) / np.where(seen, total, 1.0), m)
        return np.log(m[first:])

    def next_probs(self, history) -> np.ndarray:
        """(V,) p(w | history) for every word w: the whole distribution after one context (tests, checks)."""
        history = [int(t) for t in history]
        if self.sentences:  # a context reaches back to the last <eos> (the sentence's <s>), no further
            history = history[max((i for i, t in enumerate(history) if t == self.eos), default=0):]
        history = history[max(0, len(history) - (self.order - 1)):] if self.order > 1 else []
        words = np.arange(self.V, dtype=np.int64)
        contexts, grams = [], []
        ctx = 0  # order-1 "context": the single entry
        for k, level in enumerate(self.levels, start=1):
            if k > 1:
                h = history[len(history) - (k - 1):] if len(history) >= k - 1 else None
                ctx = self._context_id(h) if h is not None else -1
            contexts.append(np.full(self.V, ctx, dtype=np.int64))
            key = words if k == 1 else (ctx * self.V + words if ctx >= 0 else np.full(self.V, -1))
            grams.append(self._lookup(level.keys, key))
        return self._interpolate(words, contexts, grams)

    def _context_id(self, h: list[int]) -> int:
        """The id of the (len h)-gram h among the fitted n-grams of that order, -1 if unseen."""
        gid = h[0]
        for j in range(1, len(h)):
            gid = int(self._lookup(self.levels[j].keys, np.array([gid * self.V + h[j]]))[0])
            if gid < 0:
                return -1
        return gid

    def perplexity(self, tokens: np.ndarray) -> float:
        return math.exp(-float(self.log_prob(tokens).mean()))
