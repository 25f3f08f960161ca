"""A random sparse n-gram language with known truth: the embedded default benchmark.

Symbols: index 0 is ``<eos>`` (written as a line end, so the word tokenizer's ``<eos>`` is
exactly this symbol), then ``w0001`` .. ``w{M-1}``. A context is the n-1 previous symbols of
the stream (index = base-M number); each context's next-symbol distribution is drawn from a
Dirichlet(beta) on ``support`` random symbols, mixed with ``smoothing`` x uniform so every
log-probability is finite. Streams start from the all-``<eos>`` context.

Written next to the text: ``truth.npz`` (the exact conditional log-probabilities, contexts x M)
and ``truth.json`` (the true test cross-entropy, entropy rate, rank of the log-prob matrix).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..io import paths
from ..io.atomic import atomic_path, write_json
from .linalg import numerical_rank

EOS = "<eos>"




def symbols(m: int) -> list[str]:
    width = len(str(m - 1))
    return [EOS] + [f"w{i:0{width}d}" for i in range(1, m)]


def _log_dirichlet(rng: np.random.Generator, beta: float, shape: tuple[int, int]) -> np.ndarray:
    """log of Dirichlet(beta) rows, exact in log space even when beta is tiny.

    Gamma(b) = Gamma(b + 1) * U^(1/b), so log G = log Gamma(b+1) + log(U) / b never underflows.
    """
    log_g = np.log(rng.gamma(beta + 1.0, size=shape)) + np.log(rng.random(shape)) / beta
    return log_g - np.logaddexp.reduce(log_g, axis=1, keepdims=True)


def true_log_probs(m: int, order: int, beta: float, support: int | None, smoothing: float,
                   rng: np.random.Generator) -> np.ndarray:
    """(M^(n-1), M) matrix of log p(next | context), rows normalised, float64."""
    rows = m ** (order - 1)
    s = m if support is None else min(support, m)
    logp_s = _log_dirichlet(rng, beta, (rows, s))  # (rows, s)
    cols = np.argsort(rng.random((rows, m)), axis=1)[:, :s]  # a random support per row
    logp = np.full((rows, m), -np.inf)
    np.put_along_axis(logp, cols, logp_s, axis=1)
    if smoothing > 0:
        logp = np.logaddexp(np.log1p(-smoothing) + logp, np.log(smoothing / m))
    return logp


def context_index(history: np.ndarray, m: int) -> int:
    idx = 0
    for s in history:
        idx = idx * m + int(s)
    return idx


def sample_stream(logp: np.ndarray, order: int, n_tokens: int, rng: np.random.Generator) -> np.ndarray:
    """At least ``n_tokens`` symbols, continued until an ``<eos>`` so the text ends with a full line."""
    m = logp.shape[1]
    cdf = np.cumsum(np.exp(logp), axis=1)
    cdf /= cdf[:, -1:]
    out: list[int] = []
    ctx = 0  # all-<eos> context
    mod = m ** (order - 2) if order > 2 else 1
    while True:
        u = rng.random(max(n_tokens - len(out), 1024))
        for x in u:
            tok = int(np.searchsorted(cdf[ctx], x, side="right"))
            tok = min(tok, m - 1)
            out.append(tok)
            ctx = (ctx % mod) * m + tok if order > 2 else tok
            if len(out) >= n_tokens and tok == 0:
                return np.asarray(out, dtype=np.int64)


def stream_log_probs(logp: np.ndarray, order: int, stream: np.ndarray) -> np.ndarray:
    """log p(stream[t] | previous n-1 symbols), with the all-<eos> context before the start."""
    return logp[stream_contexts(order, logp.shape[1], stream), stream]


def stream_contexts(order: int, m: int, stream: np.ndarray) -> np.ndarray:
    """(T,) the row of the (m^(n-1), m) table each token is drawn from: its previous n-1 symbols, with the
    all-<eos> context before the start."""
    padded = np.concatenate([np.zeros(order - 1, dtype=np.int64), stream])
    ctx = np.zeros(len(stream), dtype=np.int64)
    for j in range(order - 1):
        ctx = ctx * m + padded[j:j + len(stream)]
    return ctx


def write_text(path: Path, stream: np.ndarray, names: list[str]) -> None:
    """One line per sentence; the ``<eos>`` symbol becomes the line end."""
    lines, cur = [], []
    for tok in stream:
        if tok == 0:
            lines.append(" ".join(cur))
            cur = []
        else:
            cur.append(names[tok])
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")


def generate(spec: dict, out_dir: Path, seed: int) -> dict:
    """Write train/valid/test text, ``closed_vocab.txt``, ``truth.npz`` and ``truth.json`` atomically."""
    m, order = spec["vocab_size"], spec["order"]
    seed = spec.get("seed", seed)
    rng = np.random.default_rng(seed)
    logp = true_log_probs(m, order, spec["dirichlet_beta"], spec.get("support"), spec.get("smoothing", 0.001), rng)
    names = symbols(m)
    truth = {"vocab_size": m, "order": order, "contexts": logp.shape[0], "seed": seed, "spec": spec}
    with atomic_path(out_dir, marker=paths.SOURCE) as tmp:
        tmp.mkdir()
        for split in ("train", "valid", "test"):
            stream = sample_stream(logp, order, spec[f"{split}_tokens"], rng)
            write_text(tmp / f"{split}.txt", stream, names)
            nll = -stream_log_probs(logp, order, stream)
            truth[f"{split}_tokens"] = int(len(stream))
            truth[f"{split}_nll"] = float(nll.mean())
        (tmp / paths.CLOSED_VOCAB).write_text("".join(f"{s}\n" for s in names), encoding="utf-8")
        np.savez_compressed(tmp / paths.TRUTH, log_prob=logp.astype(np.float32), symbols=np.array(names))
        if np.isfinite(logp).all():
            rank, tol = numerical_rank(logp)
            truth.update(log_prob_rank=rank, rank_tolerance=tol)
        else:
            truth.update(log_prob_rank=None, rank_tolerance=None)  # -inf entries: rank undefined
        truth["test_ppl"] = float(np.exp(truth["test_nll"]))
        write_json(tmp / paths.TRUTH_SUMMARY, truth)
        write_json(tmp / paths.SOURCE, {"corpus": "synthetic", "spec": spec, "seed": seed})
    return truth
