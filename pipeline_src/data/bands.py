"""Frequency bands of a vocabulary, by train count: where an output layer's perplexity is won or lost.

- ``frequent``: the 1% most frequent word types in train (at least one type);
- ``rare``: types seen fewer than 10 times in train, unseen ones included;
- ``middle``: the rest.
A type that is both (a tiny corpus) is ``frequent``. Per-band perplexity is exp of the mean nll over the
test tokens whose target falls in the band (Chen, Grangier & Auli 2016 report the same split of the loss).
"""
from __future__ import annotations

import math

import numpy as np

BANDS = ("frequent", "middle", "rare")
TOP_SHARE = 0.01
RARE_BELOW = 10


def frequency_bands(counts: np.ndarray) -> np.ndarray:
    """(V,) the band index (into :data:`BANDS`) of every word id, from its train count."""
    counts = np.asarray(counts)
    band = np.where(counts < RARE_BELOW, 2, 1)
    top = max(1, math.ceil(TOP_SHARE * counts.size))
    order = np.lexsort((np.arange(counts.size), -counts))  # by count, then id: deterministic ties
    band[order[:top]] = 0
    return band


def band_nll(nll: np.ndarray, targets: np.ndarray, counts: np.ndarray) -> dict:
    """{band: {"tokens", "nll", "ppl"}} over the scored tokens (``nll`` and ``targets`` aligned)."""
    band = frequency_bands(counts)[np.asarray(targets, dtype=np.int64)]
    out = {}
    for i, name in enumerate(BANDS):
        sel = band == i
        mean = float(np.asarray(nll, dtype=np.float64)[sel].mean()) if sel.any() else None
        out[name] = {"tokens": int(sel.sum()), "nll": mean, "ppl": math.exp(mean) if mean is not None else None}
    return out
