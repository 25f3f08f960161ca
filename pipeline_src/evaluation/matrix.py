"""The synthetic matrix experiment of Ganea et al. (2019): can a head express a given P*(. | c)?

N contexts get free embeddings c_i in R^d (no encoder); M words share the head's output embedding
of size d. Target rows P*(. | c_i) are drawn from a sparse Dirichlet(beta) (the same target for every
method and d at a given M and seed). Each head is fitted directly, full batch, by minimising the
cross-entropy  -1/N sum_i sum_w P*(w | c_i) log q(w | c_i)  with Adam. Reported per method, M, d:
the share of contexts whose most likely word is right (mode matching), the cross-entropy, the KL to
P* (cross-entropy minus the entropy of P*), and the numerical rank of log q.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from ..data.linalg import numerical_rank
from ..data.synthetic import _log_dirichlet
from ..heads import HeadContext, build_head
from ..io.atomic import write_json
from ..io.digests import seal


def target(n_contexts: int, vocab: int, beta: float, seed: int) -> np.ndarray:
    """(N, M) log P*, rows from Dirichlet(beta), exact in log space (entries may be ~ -1e3)."""
    return _log_dirichlet(np.random.default_rng([seed, vocab, n_contexts]), beta, (n_contexts, vocab))


def fit(spec: dict, log_p_star: np.ndarray, dim: int, steps: int, lr: float, seed: int) -> dict:
    """Fit one head in float32 (as training does); measure the fitted head in float64."""
    n, m = log_p_star.shape
    torch.manual_seed(seed)
    head = build_head(spec, HeadContext(vocab_size=m, in_dim=dim))
    head.eval()  # no dropout: this is a pure expressiveness test
    ctx = torch.nn.Parameter(torch.randn(n, dim) / dim ** 0.5)
    p_star32 = torch.from_numpy(np.exp(log_p_star)).float()
    opt = torch.optim.Adam([ctx, *head.parameters()], lr=lr)
    t0 = time.perf_counter()
    for _ in range(steps):
        ce = -(p_star32 * head.log_prob(ctx)).sum(1).mean()
        opt.zero_grad(set_to_none=True)
        ce.backward()
        opt.step()
    head, ctx = head.double(), ctx.detach().double()
    p_star = torch.from_numpy(np.exp(log_p_star))
    with torch.no_grad():
        logq = head.log_prob(ctx)
        ce = float(-(p_star * logq).sum(1).mean())
        entropy = float(-(p_star * torch.from_numpy(log_p_star)).sum(1).mean())
        mode = float((logq.argmax(1) == p_star.argmax(1)).double().mean())
    rank, _ = numerical_rank(logq.numpy())
    return {"cross_entropy": ce, "kl": ce - entropy, "entropy": entropy, "mode_match": mode, "logq_rank": rank,
            "fit_time_s": time.perf_counter() - t0}


def run(params: dict, vocab: int, dim: int, seed: int, out: Path) -> list[dict]:
    """Fit every ``matrix.methods`` head at one (M, d); the target comes from the data seed
    (``seed`` at the top level), the initialisation from the run ``seed``."""
    cfg = params["matrix"]
    log_p_star = target(cfg["contexts"], vocab, cfg["dirichlet_beta"], params["seed"])
    rows = []
    for method in cfg["methods"]:
        r = fit(params["methods"][method], log_p_star, dim, cfg["steps"], cfg["lr"], seed)
        rows.append({"method": method, "vocab": vocab, "dim": dim, "seed": seed, "contexts": cfg["contexts"], **r})
        print(f"matrix M={vocab} d={dim} {method}: mode match {r['mode_match']:.3f}, KL {r['kl']:.4f}, "
              f"rank {r['logq_rank']}")
    write_json(out, seal({"rows": rows, "config": cfg, "methods": {m: params["methods"][m] for m in cfg["methods"]},
                          "seed": seed, "data_seed": params["seed"]}))
    return rows
