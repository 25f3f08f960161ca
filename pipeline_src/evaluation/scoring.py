"""A model's log-probabilities scored per frequency band of the target (``data/bands.py``): nll and perplexity,
and, where the corpus has an exact truth, the true nll and the gap to it. Used for every corpus, with or
without a truth, by the neural runs' evaluation and the Kneser-Ney rows alike."""
from __future__ import annotations

import numpy as np

from ..data.bands import band_nll


def per_band(nll: np.ndarray, targets: np.ndarray, counts: np.ndarray, true_lp: np.ndarray | None) -> dict:
    """Test (or valid) nll and perplexity per frequency band of the target (:mod:`bands`), with the true nll
    and the gap to it where the corpus has a truth."""
    out = band_nll(nll, targets, counts)
    if true_lp is not None:
        for name, row in band_nll(-true_lp, targets, counts).items():
            if row["nll"] is not None:
                out[name].update(true_nll=row["nll"], gap_nll=out[name]["nll"] - row["nll"])
    return out
