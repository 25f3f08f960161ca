"""Numerical rank with one documented tolerance for every matrix in the benchmark."""
from __future__ import annotations

import numpy as np


def singular_values(a: np.ndarray) -> np.ndarray:
    """Singular values of ``a`` in float64, largest first."""
    return np.linalg.svd(np.asarray(a, dtype=np.float64), compute_uv=False)


def residual_beyond(s: np.ndarray, k: int) -> float:
    """||A - A_k||_F / ||A||_F for the best rank-k approximation A_k (Eckart-Young: the singular values
    past the k-th), from A's singular values ``s``: how far A is from every matrix of rank <= k."""
    total = float(np.square(s).sum())
    return float(np.sqrt(np.square(s[k:]).sum() / total)) if total > 0 else 0.0


def numerical_rank(a: np.ndarray, s: np.ndarray | None = None) -> tuple[int, float]:
    """Rank of ``a`` (computed in float64) and the tolerance used.

    Singular values below ``0.5 * sqrt(m + n + 1) * sigma_max * eps(float64)`` count as zero
    (Press et al., Numerical Recipes, 3rd ed., section 2.6). The same rule is used for the true
    log-probability matrix of the synthetic language and for trained models' matrices.
    """
    a = np.asarray(a, dtype=np.float64)
    s = singular_values(a) if s is None else s  # ``s``: a's singular values, when already computed
    if s.size == 0:
        return 0, 0.0
    m, n = a.shape
    tol = 0.5 * np.sqrt(m + n + 1) * s[0] * np.finfo(np.float64).eps
    return int((s > tol).sum()), float(tol)
