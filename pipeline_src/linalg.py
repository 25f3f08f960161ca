"""Numerical rank with one documented tolerance for every matrix in the benchmark."""
from __future__ import annotations

import numpy as np


def numerical_rank(a: np.ndarray) -> tuple[int, float]:
    """Rank of ``a`` (computed in float64) and the tolerance used.

    Singular values below ``0.5 * sqrt(m + n + 1) * sigma_max * eps(float64)`` count as zero
    (Press et al., Numerical Recipes, 3rd ed., section 2.6). The same rule is used for the true
    log-probability matrix of the synthetic language and for trained models' matrices.
    """
    a = np.asarray(a, dtype=np.float64)
    s = np.linalg.svd(a, compute_uv=False)
    if s.size == 0:
        return 0, 0.0
    m, n = a.shape
    tol = 0.5 * np.sqrt(m + n + 1) * s[0] * np.finfo(np.float64).eps
    return int((s > tol).sum()), float(tol)
