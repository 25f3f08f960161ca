"""Exact evaluation: perplexity from fully normalised log-probabilities, never from a training surrogate."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from ..data.bands import BANDS
from ..data.batching import batchify, scored_positions
from ..data.streaming import stream, stream_log_probs  # noqa: F401  (evaluate's names, as before)
from ..data.truth import load_truth
from ..io import paths
from ..io.atomic import write_json
from ..io.digests import seal, sha256_of
from .argmax import LP_MAX_VOCAB, argmax_diagnostic
from .scoring import band_log_mass, band_of_ids, per_band


def self_normalisation_stats(score: Tensor, log_z: Tensor) -> dict:
    """For heads meant to be used unnormalised: log Z(c) over a split and the 'perplexity' without it,
    from the unnormalised log-probabilities of the targets and the log normalisers."""
    s, z = score.double().flatten(), log_z.double().flatten()
    return {"log_z_mean": float(z.mean()), "log_z_std": float(z.std()),
            "unnormalised_nll": float(-s.mean()), "unnormalised_ppl": math.exp(float(-s.mean()))}


SPECTRUM_VALUES = 100  # leading singular values kept in metrics.json (rank.spectrum)


@torch.no_grad()
def log_prob_matrix(model, ids: np.ndarray, n_contexts: int, bptt: int, device: torch.device) -> np.ndarray:
    """Rows log p(. | c) for the first ``n_contexts`` positions of a stream (one stream, carried state)."""
    model.eval()
    data = torch.from_numpy(ids[:n_contexts].astype(np.int64)).view(-1, 1).to(device)  # (n, 1)
    dtype = next(model.parameters()).dtype
    state = tuple(x.to(dtype) for x in model.init_state(1, device))
    rows = []
    for i in range(0, data.shape[0], bptt):
        h, state = model.encoder(data[i:i + bptt], state)
        rows.append(model.head.log_prob(h.reshape(-1, h.shape[-1])).double().cpu())
    return torch.cat(rows).numpy()


def rank_diagnostic(model, ids: np.ndarray, n_contexts: int, bptt: int, device: torch.device) -> dict:
    """Numerical rank of the model's log-prob matrix over the first ``n_contexts`` contexts.

    The matrix is computed in float64 (a double copy of the model) so that the one tolerance used
    everywhere, Press's 0.5 sqrt(m + n + 1) sigma_max eps(float64) (linalg.numerical_rank), separates
    structure from rounding. A softmax over d-dimensional contexts with an output bias gives
    log P = H W^T + 1 b^T - lse 1^T, of rank at most d + 2 (d + 1 without the bias, Yang et al. 2018).
    A full numerical rank need not mean the matrix is far from rank d + 2: ``residual_beyond_bound`` is
    its relative Frobenius distance from the nearest matrix of rank <= d + 2 (0 for a softmax), and
    ``spectrum`` its leading singular values over the largest.
    """
    import copy

    from ..data.linalg import numerical_rank, residual_beyond, singular_values

    lp = log_prob_matrix(copy.deepcopy(model).double(), ids, n_contexts, bptt, device)
    finite = np.isfinite(lp).all(axis=0)  # words a head gives probability 0 (NEGLM: Q(w) = 0) are left out
    kept = lp[:, finite]  # one copy of the (contexts x words) matrix, not one per use
    s = singular_values(kept)
    rank, tol = numerical_rank(kept, s)
    bound = model.head.rank_dim + 2
    return {"contexts": int(lp.shape[0]), "vocab": int(lp.shape[1]), "rank": rank, "tolerance": tol,
            "zero_probability_words": int((~finite).sum()),
            "head_dim": model.head.rank_dim, "softmax_bound": bound,
            "residual_beyond_bound": residual_beyond(s, bound),
            "spectrum": [float(f"{x:.4g}") for x in s[:SPECTRUM_VALUES] / max(s[0], 1e-300)] if s.size else []}


def evaluate(model, run_cfg: dict, prepared: Path, raw: Path, device: torch.device, argmax: bool = True) -> dict:
    from ..data.prepare import load_split

    bs = run_cfg["evaluation"]["batch_size"]
    bptt = run_cfg["training"]["bptt"]
    truth = load_truth(raw, prepared)
    counts = np.load(prepared / paths.NOISE)["counts"]  # the train counts that define the frequency bands
    out = {}
    for split in ("valid", "test"):
        ids = load_split(prepared, split)
        data = batchify(ids, bs, device)
        if model.head.self_normalised:  # one pass gives both: log p = score - log Z
            (score, log_z), seconds = stream(model, data, bptt, model.head.self_normalisation)
            lp, extra = score.double() - log_z.double(), self_normalisation_stats(score, log_z)
        else:
            lp, seconds = stream_log_probs(model, data, bptt)
            extra = {}
        nll = float(-lp.double().mean())
        row = {"nll": nll, "ppl": math.exp(nll), "tokens": int(lp.numel()),
               "zero_prob_tokens": int((~torch.isfinite(lp)).sum()),  # scored probability 0: an infinite nll
               "tokens_per_s_eval": lp.numel() / max(seconds, 1e-9), **extra}
        positions = scored_positions(len(ids), bs)  # (L-1, B), aligned with lp
        true_lp = None
        if truth is not None:
            true_lp = truth.log_probs_at(ids, positions.reshape(-1), split)
            true_nll = float(-true_lp.mean())
            row.update(true_nll=true_nll, gap_nll=nll - true_nll)
            line = truth.memoryless_at(ids, positions.reshape(-1), split)
            if line is not None:  # the topic language: the row's gap to the best memoryless model too
                row.update(memoryless_nll=float(-line.mean()), memory_gap_nll=nll - float(-line.mean()))
        alloc = true_alloc = None
        if split == "test":  # the band split (scoring.py): the band's part of each token's loss, and the truth's
            bands = band_of_ids(counts)  # each word id's band, for the model's masses and the truth's
            alloc = -band_log_mass(model, data, bptt, bands).double().numpy().reshape(-1)
            row["band_alloc_nll"] = float(alloc.mean())  # the log-loss of predicting the target's band: proper
            mass = None if truth is None else truth.band_log_mass_at(ids, positions.reshape(-1), split,
                                                                     bands, len(BANDS))
            if mass is not None:
                true_alloc = -mass
                row.update(true_band_alloc_nll=float(true_alloc.mean()),
                           band_alloc_gap=row["band_alloc_nll"] - float(true_alloc.mean()))
        row["bands"] = per_band(-lp.double().numpy().reshape(-1), ids[positions.reshape(-1)], counts, true_lp,
                                alloc, true_alloc)
        out[split] = row
    n_ctx = run_cfg["evaluation"].get("rank_contexts", 0)
    if n_ctx:
        out["rank"] = rank_diagnostic(model, load_split(prepared, "valid"), n_ctx, bptt, device)
    argmax = argmax and run_cfg["evaluation"].get("argmax", True)  # off per dataset: its LPs cost V^2 d
    if argmax and len(counts) <= LP_MAX_VOCAB:  # which words no context can make the argmax (argmax.py)
        out["argmax"] = argmax_diagnostic(model, batchify(load_split(prepared, "test"), bs, device), bptt, counts)
    return out


def write_metrics(path: Path, train_summary: dict, split_metrics: dict, dataset: str, method: str,
                  peak_mem_mb_eval: float) -> dict:
    split_metrics = dict(split_metrics)
    rank = split_metrics.pop("rank", None)
    argmax = split_metrics.pop("argmax", None)
    metrics = {"dataset": dataset, "method": method, **{k: v for k, v in train_summary.items() if k != "config"},
               "peak_mem_mb": max(train_summary["peak_mem_mb_train"], peak_mem_mb_eval),
               "splits": split_metrics, "rank": rank, **({"argmax": argmax} if argmax else {}),
               "config": train_summary["config"]}
    history = Path(path).parent / paths.HISTORY  # what summarize reads beside it: held to this digest
    if history.is_file():
        metrics["history_sha256"] = sha256_of(history)
    write_json(path, seal(metrics))
    return metrics
