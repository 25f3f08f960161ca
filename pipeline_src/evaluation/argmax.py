"""Which words can an output layer never predict? (Grivas, Bogoychev & Lopez, ACL 2022.)

A head whose test-time logits are affine in one context vector c, ``z = W c + b`` (``OutputLayer.affine_logits``),
makes word i the argmax for some c exactly when the linear program

    maximise t  subject to  (w_i - w_j)^T c + (b_i - b_j) >= t  for every other row j,  t <= 1,  c free

has an optimum t* > 0. Otherwise the word is *unargmaxable*: no context, however chosen, makes it the most
likely word (with d < V - 1 this happens, e.g. to a word whose (w, b) lies inside the convex hull of
others'). Most words are settled by cheap sufficient checks first: a context along the word's own output
vector, ``c = s (w_i - mean w)`` at growing scales s, that makes it the argmax, then a perceptron walk from
there towards the word's strongest rival. The rest go to the exact LP (scipy's HiGHS). The contexts range over all of R^d: a bounded encoder output (an LSTM's tanh) can only
make more words unargmaxable, never fewer.

For every head, affine or not, :func:`reached` is the empirical check on the same contexts for all: the
words that are the argmax of at least one evaluated context.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from ..data.bands import BANDS, frequency_bands

LP_MAX_VOCAB = 50_000  # the LP diagnostic runs up to this many rows (V LPs over V constraints each)
SCALES = (1.0, 10.0, 100.0, 1000.0)
TOL = 1e-9  # t* at or below this: no context gives the word a strictly largest logit


def cheap_argmaxable(w: np.ndarray, b: np.ndarray, chunk: int = 1024) -> np.ndarray:
    """(V,) True where a context along the word's centred output vector makes it the strict argmax (a
    sufficient condition only)."""
    w, b = np.asarray(w, np.float64), np.asarray(b, np.float64)
    dirs = w - w.mean(axis=0)
    found = np.zeros(len(w), dtype=bool)
    for s in SCALES:
        left = np.flatnonzero(~found)  # a larger scale only for the words no smaller one settled
        for lo in range(0, len(left), chunk):
            rows = left[lo:lo + chunk]
            z = s * dirs[rows] @ w.T + b  # (c, V): row k is the logits at word rows[k]'s context
            own = z[np.arange(len(rows)), rows].copy()
            z[np.arange(len(rows)), rows] = -np.inf
            found[rows] |= own > z.max(axis=1) + TOL
    return found


def perceptron_argmaxable(w: np.ndarray, b: np.ndarray, words: np.ndarray, steps: int = 200) -> np.ndarray:
    """(len(words),) True where a perceptron walk finds a context that makes the word the strict argmax (a
    sufficient condition only): from c = w_i - mean w, step towards w_i - w_j for the row j that beats it,
    so the walk stops at a witness when one exists with some margin (the perceptron's convergence)."""
    w, b = np.asarray(w, np.float64), np.asarray(b, np.float64)
    words = np.asarray(words, dtype=np.int64)
    c = w[words] - w.mean(axis=0)  # (p, d)
    found = np.zeros(len(words), dtype=bool)
    rows = np.arange(len(words))
    for _ in range(steps):
        live = rows[~found]
        if not len(live):
            break
        z = c[live] @ w.T + b  # (l, V)
        own = z[np.arange(len(live)), words[live]].copy()
        z[np.arange(len(live)), words[live]] = -np.inf
        rival = z.argmax(axis=1)
        found[live] = own > z[np.arange(len(live)), rival] + TOL
        step = w[words[live]] - w[rival]  # (l, d): the direction that raises the word over its rival
        norm = np.linalg.norm(step, axis=1, keepdims=True)
        c[live] += np.where(norm > 0, step / np.maximum(norm, 1e-300), 0.0) * np.linalg.norm(c[live], axis=1, keepdims=True) * 0.1
    return found


def lp_margin(w: np.ndarray, b: np.ndarray, i: int) -> float:
    """t*: the largest margin by which word i's logit can exceed every other row's (capped at 1)."""
    from scipy.optimize import linprog

    others = np.delete(np.arange(len(w)), i)
    a = np.hstack([w[others] - w[i], np.ones((len(others), 1))])  # (w_j - w_i)^T c + t <= b_i - b_j
    cost = np.zeros(w.shape[1] + 1)
    cost[-1] = -1.0
    bounds = [(None, None)] * w.shape[1] + [(None, 1.0)]
    res = linprog(cost, A_ub=a, b_ub=b[i] - b[others], bounds=bounds, method="highs")
    if res.status != 0:
        raise RuntimeError(f"argmax LP for word {i}: {res.message}")
    return float(-res.fun)


def diagnose(w, b, counts: np.ndarray, words: int | None = None) -> dict:
    """The argmaxability of the first ``words`` rows of (W, b) (all by default; the rest only compete),
    with the frequency band of every unargmaxable word and the time the checks took."""
    w = np.asarray(w, np.float64)
    b = np.asarray(b, np.float64)
    words = len(w) if words is None else words
    if np.isnan(b).any() or np.isposinf(b).any():
        raise ValueError("argmax diagnostic: the bias has NaN or +inf entries")
    # a row with bias -inf (NEGLM's log Q of a word unseen in train) is never predicted and never competes
    live = np.flatnonzero(np.isfinite(b))
    wl, bl = w[live], b[live]
    t0 = time.perf_counter()
    ok_live = cheap_argmaxable(wl, bl)
    hard = np.flatnonzero(~ok_live)
    if len(hard):
        ok_live[hard] = perceptron_argmaxable(wl, bl, hard)
    cheap_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    pending = np.flatnonzero(~ok_live & (live < words))
    for i in pending:
        ok_live[i] = lp_margin(wl, bl, int(i)) > TOL
    lp_s = time.perf_counter() - t0
    ok = np.zeros(len(w), dtype=bool)
    ok[live] = ok_live
    ok = ok[:words]
    bad = np.flatnonzero(~ok)
    band = frequency_bands(counts)[:words]
    return {"rows": len(w), "words": words, "unargmaxable": len(bad), "unargmaxable_share": len(bad) / words,
            "by_band": {name: int((band[bad] == k).sum()) for k, name in enumerate(BANDS)},
            "unargmaxable_ids": bad.tolist()[:100], "never_predicted": int(words - (live < words).sum()),
            "settled_cheaply": int((live < words).sum()) - len(pending), "lp_solved": len(pending),
            "cheap_s": cheap_s, "lp_s": lp_s, "lp_s_per_word": lp_s / max(len(pending), 1)}


@torch.no_grad()
def reached(model, data, bptt: int, vocab: int) -> np.ndarray:
    """(V,) True for the words that are the argmax of the model's distribution at some position of ``data``."""
    from ..data.streaming import stream

    (top,), _ = stream(model, data, bptt, lambda h, y: (_argmax_rows(model.head, h),))
    return np.bincount(top.reshape(-1).numpy(), minlength=vocab) > 0


def _argmax_rows(head, h, chunk: int = 256):
    return torch.cat([head.log_prob(h[i:i + chunk]).argmax(dim=-1) for i in range(0, len(h), chunk)])


def argmax_diagnostic(model, data, bptt: int, counts: np.ndarray) -> dict:
    """Both checks for one trained model: the exact one where the head's logits are affine and its rows are
    at most :data:`LP_MAX_VOCAB`, and the empirical one on ``data`` (the test split) always."""
    v = len(counts)
    t0 = time.perf_counter()
    hit = reached(model, data, bptt, v)
    band = frequency_bands(counts)
    out = {"reached": int(hit.sum()), "reached_share": float(hit.mean()),
           "reached_by_band": {name: float(hit[band == k].mean()) if (band == k).any() else None
                               for k, name in enumerate(BANDS)},
           "reached_s": time.perf_counter() - t0}
    affine = model.head.affine_logits()
    if affine is None:
        out["exact"] = {"defined": False, "why": model.head.affine_why}
    elif len(affine[0]) > LP_MAX_VOCAB:
        out["exact"] = {"defined": True, "skipped": f"{len(affine[0])} rows > {LP_MAX_VOCAB}"}
    else:
        w, b, words = affine
        out["exact"] = {"defined": True, **diagnose(w.detach().cpu(), b.detach().cpu(), counts, words)}
    return out
