"""The budget as an axis: which output layer wins as compute grows. Reads the budget points of long runs
(``training.budget_points``: rows of anytime.csv with ``multiple`` set, each scored on test with the weights at
that point) and answers, per dataset:

- ``ranking``: at each multiple of the sweep's budget (1x = the tokens a method reaches in the sweep's time
  budget), the headline's reading (test perplexity with its interval over seeds, the paired difference against
  the reference, Holm-corrected verdicts), computed by ``stats.headline`` on the runs as they stood at that point;
- ``crossover``: for a pair of methods, the budget from which one stays ahead, with the interval of budgets over
  which the paired difference's interval holds 0 around that crossing (or "none within" the range measured);
- ``fit_curve`` / ``extrapolated_crossover``: a power law with an irreducible floor fitted to a method's mean test
  nll against the multiple, its error on held-out larger budgets, and where two fits cross beyond the range
  measured: extrapolations, said as such;
- ``gpu_hours``: what a multiple costs on a GPU, from the bench's measured step times there and, as a lower
  bound, from the FLOPs of a step at a published dense GEMM rate.

The x axis is compute, not tokens: a method's 1x is its own tokens in the same seconds, so the methods meet at
equal cost (Chen, Grangier & Auli 2016), not at equal data.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..cost.resources import lstm_flops_per_token  # noqa: F401 (the GPU tables' encoder FLOPs; its home)
from .stats import headline, mean_ci

# NVIDIA H100 SXM5, dense (no sparsity) peak rates, from NVIDIA's H100 Tensor Core GPU datasheet (2023):
# 989.4 TFLOPS BF16 / FP16 tensor, 494.7 TFLOPS TF32 tensor, 66.9 TFLOPS FP32 (non-tensor)
H100_DENSE_TFLOPS = {"bf16": 989.4, "tf32": 494.7, "fp32": 66.9}
H100_SOURCE = "NVIDIA H100 Tensor Core GPU datasheet (SXM5, dense, without sparsity)"


def point_runs(points: pd.DataFrame, summary: pd.DataFrame) -> pd.DataFrame:
    """anytime.csv's budget points as per-run rows ``stats.headline`` reads: the test nll at the point, the run's
    unigram line and the validation perplexity at the point (so "learned" is read at that budget too). A point
    without a test score is left out; an infinite one (a test word scored probability 0) stays."""
    if "multiple" not in points or "test_nll" not in points:  # no run kept budget points
        return pd.DataFrame(columns=["dataset", "vocab", "method", "seed", "multiple", "tokens", "split", "nll",
                                     "type", "kept_valid_ppl", "unigram_valid_ppl"])
    pts = points.dropna(subset=["multiple", "test_nll"])  # a point without its test score: nothing to rank
    valid = summary[summary.split == "valid"].set_index(["dataset", "method", "seed"])
    line = valid.unigram_valid_ppl if "unigram_valid_ppl" in valid else pd.Series(dtype=float)
    kind = valid["type"] if "type" in valid else pd.Series(dtype=object)
    key = list(zip(pts.dataset, pts.method, pts.seed))
    vocab = summary[summary.split == "test"].groupby("dataset").vocab.first() if "vocab" in summary else {}
    return pd.DataFrame({"dataset": pts.dataset.to_numpy(), "vocab": [vocab.get(d) for d in pts.dataset],
                         "method": pts.method.to_numpy(),
                         "seed": pts.seed.to_numpy(), "multiple": pts.multiple.astype(float).to_numpy(),
                         "tokens": pts.tokens.to_numpy(), "split": "test", "nll": pts.test_nll.astype(float).to_numpy(),
                         "type": [kind.get(k) for k in key], "kept_valid_ppl": pts.valid_ppl.to_numpy(),
                         "unigram_valid_ppl": [line.get(k, math.nan) for k in key]})


def _with_valid(rows: pd.DataFrame) -> pd.DataFrame:
    """The test rows and, beside them, each point's validation nll as a valid row: the headline chooses a stand-in
    reference on those (not on the test numbers it then compares)."""
    valid = rows.assign(split="valid", nll=np.log(rows.kept_valid_ppl.astype(float)))
    return pd.concat([rows, valid], ignore_index=True)


def ranking(runs: pd.DataFrame, reference: str, confidence: float = 0.95) -> pd.DataFrame:
    """Per dataset and multiple (``point_runs``' rows), the headline as it stood at that budget, ranked."""
    out = []
    for m, g in runs.groupby("multiple"):
        h = headline(_with_valid(g.drop(columns=["multiple", "tokens"])), reference, confidence)
        h.insert(1, "multiple", m)
        out.append(h.sort_values(["dataset", "nll"]))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=["dataset", "gpu_seconds", "method",
                                                                               "multiple", "nll", "reference"])


def _paired_curve(runs: pd.DataFrame, dataset: str, a: str, b: str, confidence: float) -> pd.DataFrame:
    """Per multiple: nll of ``a`` minus nll of ``b`` over the seeds both have, mean and interval."""
    own = runs[runs.dataset == dataset].set_index(["method", "multiple", "seed"]).nll.sort_index()
    rows = []
    for m in sorted(runs[runs.dataset == dataset].multiple.unique()):
        try:
            d = (own.loc[(a, m)] - own.loc[(b, m)]).dropna()
        except KeyError:
            continue
        mu, lo, hi = mean_ci(d.to_numpy(), confidence) if len(d) else (math.nan,) * 3
        rows.append({"multiple": m, "delta": mu, "low": lo, "high": hi, "seeds": len(d)})
    return pd.DataFrame(rows, columns=["multiple", "delta", "low", "high", "seeds"])


def _zero(x0: float, y0: float, x1: float, y1: float) -> float:
    """Where the line through (log x0, y0), (log x1, y1) crosses 0, as a multiple."""
    t = y0 / (y0 - y1)
    return float(math.exp(math.log(x0) + t * (math.log(x1) - math.log(x0))))


def crossover(runs: pd.DataFrame, dataset: str, a: str, b: str, confidence: float = 0.95) -> dict:
    """The budget from which one of ``a`` and ``b`` stays ahead, read on the paired difference of test nll
    (a − b, mean and interval over seeds at each multiple, joined log-linearly between multiples). ``leader``: the
    better by the mean at the largest multiple; ``at``: where the mean last changes sign, None when the leader is
    ahead at every multiple measured; ``low``/``high``: the stretch of budgets around ``at`` (or, without one,
    the last stretch) over which the interval holds 0, None where it runs past the range measured;
    ``separated``: the interval at the largest multiple excludes 0 (else there is no crossover to state); with one
    paired seed there is no interval, so never separated (``seeds``: the pairs at the largest multiple)."""
    c = _paired_curve(runs, dataset, a, b, confidence).dropna(subset=["delta"])
    if c.empty:
        return {"a": a, "b": b, "leader": None, "at": None, "low": None, "high": None, "separated": False,
                "seeds": 0, "range": (None, None)}
    xs, d = c.multiple.to_numpy(float), c.delta.to_numpy(float)
    lo, hi = c.low.fillna(c.delta).to_numpy(float), c.high.fillna(c.delta).to_numpy(float)  # one seed: none
    leader = a if d[-1] < 0 else b
    sign = np.sign(d)
    last = next((i for i in range(len(d) - 1, 0, -1) if sign[i - 1] != sign[i]), None)  # the last change of sign
    at = None if last is None else _zero(xs[last - 1], d[last - 1], xs[last], d[last])
    grid = np.linspace(math.log(xs[0]), math.log(xs[-1]), 4001)
    holds = (np.interp(grid, np.log(xs), lo) <= 0) & (np.interp(grid, np.log(xs), hi) >= 0)
    low = high = None
    k = int(np.argmin(np.abs(grid - math.log(at)))) if at is not None else \
        (int(np.nonzero(holds)[0][-1]) if holds.any() else None)
    if k is not None and holds[k]:
        i, j = k, k
        while i > 0 and holds[i - 1]:
            i -= 1
        while j < len(grid) - 1 and holds[j + 1]:
            j += 1
        low = None if i == 0 else float(math.exp(grid[i]))
        high = None if j == len(grid) - 1 else float(math.exp(grid[j]))
    elif at is not None:  # an interval too narrow for the grid at the crossing (no spread): the crossing itself
        low = high = at
    seeds = int(c.seeds.iloc[-1])
    return {"a": a, "b": b, "leader": leader, "at": at, "low": low, "high": high,
            "separated": bool(not holds[-1] and seeds >= 2), "seeds": seeds, "range": (float(xs[0]), float(xs[-1]))}


def crossover_text(c: dict) -> str:
    """One line for people: who stays ahead, from which budget, how sure."""
    lo_x, hi_x = c["range"]
    if c["leader"] is None:
        return f"{c['a']} and {c['b']}: no seed run by both at a shared budget, so no paired reading"
    other = c["b"] if c["leader"] == c["a"] else c["a"]
    if c.get("seeds", 2) < 2:
        return f"{c['a']} vs {c['b']}: one paired seed at {hi_x:g}x, no interval: no crossover stated"
    if not c["separated"]:
        return (f"{c['a']} vs {c['b']}: not separated at {hi_x:g}x ({c['leader']} ahead by the mean): "
                f"no crossover within {hi_x:g}x")
    lo = f"{c['low']:.2g}x" if c["low"] is not None else f"below {lo_x:g}x"
    hi = f"{c['high']:.2g}x" if c["high"] is not None else f"beyond {hi_x:g}x"
    if c["at"] is None:
        when = f"ahead at every budget from {lo_x:g}x"
        sure = f"; separated from {c['high']:.2g}x on" if c["high"] is not None else ""
        return f"{c['leader']} over {other}: {when}{sure}"
    return f"{c['leader']} overtakes {other} at {c['at']:.2g}x [{lo}, {hi}] and stays ahead to {hi_x:g}x"


ALPHA_MAX = 3.0  # the fits' largest exponent: a curve that flattens faster (converged) sits at it


def power_law(x, floor, scale, alpha):
    """nll(B) = floor + scale * B^-alpha: an irreducible floor and a power-law excess (Kaplan et al. 2020's form
    in compute, B the multiple of the sweep's budget)."""
    return floor + scale * np.power(x, -alpha)


def fit_curve(multiples, nll, hold_out: int = 2) -> dict:
    """Fit ``power_law`` to a method's mean test nll at each multiple, on all but the ``hold_out`` largest; the
    error of the fit there (predicted minus measured, nats/token) is its held-out error; then the parameters
    refitted on every point (for extrapolating). Needs at least 4 finite points to fit (3 parameters and one
    spare); ``points`` counts those used."""
    from scipy.optimize import curve_fit

    x, y = np.asarray(multiples, float), np.asarray(nll, float)
    keep = np.isfinite(y)  # a point scored infinite (a word at probability 0) has no place on a power law
    x, y = x[keep], y[keep]
    order = np.argsort(x)
    x, y = x[order], y[order]

    def fit(xx, yy):
        p0 = (max(yy.min() - 0.1, 0.0), max(yy[0] - yy.min(), 1e-3), 0.5)
        params, _ = curve_fit(power_law, xx, yy, p0=p0, bounds=([0.0, 0.0, 1e-3], [np.inf, np.inf, ALPHA_MAX]),
                              maxfev=20000)
        return params

    out = {"points": len(x), "held_out": [], "params": None}
    if hold_out and len(x) - hold_out >= 4:
        p = fit(x[:-hold_out], y[:-hold_out])
        out["held_out"] = [{"multiple": float(m), "measured": float(v), "predicted": float(power_law(m, *p)),
                            "error": float(power_law(m, *p) - v)} for m, v in zip(x[-hold_out:], y[-hold_out:])]
    if len(x) >= 4:
        out["params"] = dict(zip(("floor", "scale", "alpha"), map(float, fit(x, y))))
    return out


def extrapolated_crossover(fa: dict, fb: dict, start: float, stop: float = 1000.0) -> float | None:
    """The first multiple in (``start``, ``stop``] at which two fitted curves cross (an extrapolation), or None."""
    from scipy.optimize import brentq

    if not fa.get("params") or not fb.get("params"):
        return None
    f = lambda x: power_law(x, **fa["params"]) - power_law(x, **fb["params"])  # noqa: E731
    grid = np.geomspace(start, stop, 400)
    v = f(grid)
    k = np.nonzero(np.sign(v[1:]) != np.sign(v[:-1]))[0]
    return float(brentq(f, grid[k[0]], grid[k[0] + 1])) if len(k) else None


def gpu_hours(unit_tokens: float, multiples, tokens_per_s: float | None, flops_per_token: float | None,
              precision: str = "bf16") -> list[dict]:
    """What ``multiples`` of a method's 1x (``unit_tokens``) cost on one GPU: measured, from the bench's tokens/s
    on that GPU; and a lower bound, ``flops_per_token`` (a training step's FLOPs per token) at the H100's
    published dense rate for ``precision``."""
    rate = H100_DENSE_TFLOPS[precision] * 1e12
    return [{"multiple": float(m), "tokens": float(m * unit_tokens),
             "measured_h": m * unit_tokens / tokens_per_s / 3600 if tokens_per_s else math.nan,
             "floor_h": m * unit_tokens * flops_per_token / rate / 3600 if flops_per_token else math.nan}
            for m in multiples]


def gpu_table(cells: pd.DataFrame, dataset: str, unit_tokens: dict, head_flops: dict, model: dict,
              multiples=(1, 10, 100), precision: str = "bf16") -> pd.DataFrame:
    """Per method and multiple: what that budget costs on one GPU, measured (``cells``: the bench's cell table on
    that GPU, its ``tokens_per_s`` at the sweep's shapes) and as a floor (the head's training FLOPs per token,
    ``head_flops``, plus the LSTM encoder's, at the H100's published dense rate). ``unit_tokens``: each method's 1x."""
    own = cells[cells.dataset == dataset].set_index("method")
    enc = lstm_flops_per_token(model["emb_dim"], model["hidden_dim"], model.get("layers", 1))
    rows = []
    for m, unit in unit_tokens.items():
        rate = float(own.tokens_per_s[m]) if m in own.index else None
        per_token = head_flops.get(m)
        for r in gpu_hours(unit, multiples, rate, None if per_token is None else per_token + enc, precision):
            rows.append({"method": m, **r})
    return pd.DataFrame(rows, columns=["method", "multiple", "tokens", "measured_h", "floor_h"])


EQUAL_TIME_COLUMNS = ["dataset", "vocab", "method", "seed", "multiple", "tokens", "split", "nll", "type",
                      "kept_valid_ppl", "unigram_valid_ppl", "gpu_seconds"]


def gpu_equal_time(runs: pd.DataFrame, cells: pd.DataFrame, dataset: str, unit_tokens: dict,
                   budgets: int = 3) -> pd.DataFrame:
    """The same runs read at equal seconds on the GPU of ``cells`` (its tokens/s per method at the sweep's shapes):
    G seconds there buy method m the multiple G · tokens_per_s[m] / unit_tokens[m] of its own 1x, and each seed's
    test nll at that multiple is interpolated linearly in log multiple between its measured points. Only budgets
    G at which every seed of every method lies within its measured multiples are read (no curve is extended):
    ``budgets`` of them spaced evenly in log G over that window (one, its middle, where the window is narrower
    than a factor of 2), none where there is no such window. Rows as ``point_runs``' with ``multiple`` the
    method's own and ``gpu_seconds`` the G they share; ``ranking_at_gpu_time`` reads them grouped by G. Methods
    the GPU bench did not time are left out (``gpu_left_out`` names them)."""
    own = runs[runs.dataset == dataset]
    rate = cells[cells.dataset == dataset].set_index("method").tokens_per_s
    methods = [m for m in own.method.unique() if m in rate.index and m in unit_tokens]
    empty = pd.DataFrame(columns=EQUAL_TIME_COLUMNS)
    if not methods:
        return empty
    per_x = {m: unit_tokens[m] / float(rate[m]) for m in methods}  # GPU seconds of one multiple
    span = own[own.method.isin(methods)].groupby(["method", "seed"]).multiple.agg(["min", "max"]).reset_index()
    low = max(r.min * per_x[r.method] for r in span.itertuples())
    high = min(r.max * per_x[r.method] for r in span.itertuples())
    if low > high:
        return empty
    grid = np.geomspace(low, high, budgets) if high >= 2 * low else [math.sqrt(low * high)]
    rows = []
    for g in np.unique(grid):
        for m in methods:
            x = g / per_x[m]
            for seed, s in own[own.method == m].groupby("seed"):
                s = s.sort_values("multiple")
                at = lambda v: float(np.interp(math.log(x), np.log(s.multiple.to_numpy(float)), v))  # noqa: E731
                rows.append({**s.iloc[0].to_dict(), "multiple": float(x), "tokens": x * unit_tokens[m],
                             "nll": at(s.nll.to_numpy(float)), "gpu_seconds": float(g),  # and "learned" read there:
                             "kept_valid_ppl": math.exp(at(np.log(s.kept_valid_ppl.to_numpy(float))))})
    return pd.DataFrame(rows).reindex(columns=EQUAL_TIME_COLUMNS)


def gpu_left_out(runs: pd.DataFrame, cells: pd.DataFrame, dataset: str) -> list[str]:
    """The methods of ``dataset``'s long runs that the GPU bench did not time (no GPU reading for them)."""
    timed = set(cells[cells.dataset == dataset].method)
    return [m for m in runs[runs.dataset == dataset].method.unique() if m not in timed]


def ranking_at_gpu_time(rows: pd.DataFrame, reference: str, confidence: float = 0.95) -> pd.DataFrame:
    """``gpu_equal_time``'s rows ranked at each shared GPU budget as the headline reads them, with each method's
    own multiple there."""
    out = []
    for g, at in rows.groupby("gpu_seconds"):
        h = headline(_with_valid(at.drop(columns=["multiple", "tokens", "gpu_seconds"])), reference, confidence)
        h.insert(1, "gpu_seconds", g)
        h["multiple"] = h.method.map(at.groupby("method").multiple.first())
        out.append(h.sort_values(["dataset", "nll"]))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=["dataset", "gpu_seconds", "method",
                                                                               "multiple", "nll", "reference"])
