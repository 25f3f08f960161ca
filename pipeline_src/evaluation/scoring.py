"""A model's log-probabilities scored per frequency band of the target (``data/bands.py``): nll and perplexity,
and, where the corpus has an exact truth, the true nll and the gap to it. Used for every corpus, with or
without a truth, by the neural runs' evaluation and the Kneser-Ney rows alike.

A band's mean nll conditions on the target being in that band, so a model that moves mass toward a band lowers
that band's nll whatever it does elsewhere: it is not a proper score. The **band split** is: by the chain rule
each token's loss is −log q(w|c) = −log q(b(w)|c) − log q(w | b(w), c), with q(b|c) the model's mass on band b's
words. The first part, averaged over all tokens, is the log-loss of predicting the band (a proper score); per
band, the means of both parts add up to the band's nll exactly, and on a synthetic language the truth's split
beside them says which part a gap is in (:func:`band_log_mass` for a model, ``data/truth.py`` for the truth)."""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..data.bands import BANDS, band_nll, frequency_bands
from ..data.streaming import stream

CHUNK_ROWS = 128  # rows of (N, V) log-probabilities alive at once in the band pass


def per_band(nll: np.ndarray, targets: np.ndarray, counts: np.ndarray, true_lp: np.ndarray | None,
             alloc: np.ndarray | None = None, true_alloc: np.ndarray | None = None) -> dict:
    """Test (or valid) nll and perplexity per frequency band of the target (:mod:`bands`), with the true nll
    and the gap to it where the corpus has a truth. With ``alloc`` (each token's −log q(band of its target |
    context)), each band's ``alloc_nll`` and ``within_nll`` (their sum is its nll), and with ``true_alloc`` the
    truth's (``true_alloc_nll``, ``true_within_nll``) and the gaps of each part (``alloc_gap``, ``within_gap``)."""
    out = band_nll(nll, targets, counts)
    if true_lp is not None:
        for name, row in band_nll(-true_lp, targets, counts).items():
            if row["nll"] is not None:
                out[name].update(true_nll=row["nll"], gap_nll=out[name]["nll"] - row["nll"])
    if alloc is not None:
        _split(out, alloc, np.asarray(nll, dtype=np.float64) - alloc, targets, counts, "")
        if true_alloc is not None and true_lp is not None:
            _split(out, true_alloc, -np.asarray(true_lp, dtype=np.float64) - true_alloc, targets, counts, "true_")
            for row in out.values():
                if row.get("alloc_nll") is not None and row.get("true_alloc_nll") is not None:
                    row.update(alloc_gap=row["alloc_nll"] - row["true_alloc_nll"],
                               within_gap=row["within_nll"] - row["true_within_nll"])
    return out


def _split(out: dict, alloc: np.ndarray, within: np.ndarray, targets: np.ndarray, counts: np.ndarray,
           prefix: str) -> None:
    for part, values in (("alloc", alloc), ("within", within)):
        for name, row in band_nll(values, targets, counts).items():
            if row["nll"] is not None:
                out[name][f"{prefix}{part}_nll"] = row["nll"]


def band_of_ids(counts: np.ndarray) -> np.ndarray:
    """(V,) each word id's band index (into :data:`BANDS`), from the train counts."""
    return frequency_bands(counts).astype(np.int64)


@torch.no_grad()
def band_log_mass(model, data: Tensor, bptt: int, band_of_id: np.ndarray) -> Tensor:
    """(L-1, B) log q(band of the target | context) at every scored position of ``data`` (L, B): the model's
    exact distribution summed over each band's words (``head.log_mass``, :data:`CHUNK_ROWS` rows at a time)."""
    bands = torch.from_numpy(band_of_id).to(data.device)
    member = F.one_hot(bands, len(BANDS)).float().t().contiguous()  # (bands, V)

    def fn(h: Tensor, y: Tensor) -> tuple[Tensor]:
        out = h.new_empty(h.shape[0], dtype=torch.float32)
        for i in range(0, h.shape[0], CHUNK_ROWS):
            log_mass = model.head.log_mass(h[i:i + CHUNK_ROWS], member).float()  # (n, bands)
            out[i:i + CHUNK_ROWS] = log_mass.gather(1, bands[y[i:i + CHUNK_ROWS]][:, None]).squeeze(1)
        return (out,)

    (res,), _ = stream(model, data, bptt, fn)
    return res
