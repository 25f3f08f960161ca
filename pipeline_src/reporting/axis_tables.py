"""The budget axis's tables: what ``summarize`` writes beside the headline when long runs kept budget points
(``training.budget_points``), so the report, the docs and a reader of the publication read the same numbers:

- ``budget-ranking.csv``: per dataset and multiple, the headline as it stood at that budget (``budget_axis.ranking``);
- ``budget-advice.csv``: what to use over (|V|, budget): the best method that learned, its margin over the
  runner-up with its unadjusted interval, and whether it is separated: chosen on validation, Holm-adjusted p below
  1 - confidence (``advice.what_to_use_by_budget``);
- ``crossovers.csv``: per pair of methods that learned (every seed) at one budget at least, the measured crossover
  (``budget_axis.crossover``) read at the budgets where both learned, and, beyond the largest budget, where their
  fitted curves cross (an extrapolation, for methods that learned there);
- ``budget-fits.csv``: per method that learned at the largest budget, the power law with a floor fitted to its
  mean test nll, and its error on the two largest budgets when they are held out;
- ``gpu-hours.csv``: what 1x, 10x and 100x cost on one GPU, measured from a GPU cell bench
  (``statistics.gpu_cells``) and as a floor from the step's FLOPs at the H100's published dense rate;
- ``gpu-equal-time.csv``: the same runs ranked at equal seconds on that GPU (``budget_axis.gpu_equal_time``: each
  method at the multiple of its own 1x that those seconds buy it there, read on its measured curve).
"""
from __future__ import annotations

from itertools import combinations
from pathlib import Path

import pandas as pd

from ..io.artifacts import read_csv
from . import budget_axis
from .advice import what_to_use_by_budget

NAMES = ("budget-ranking.csv", "budget-advice.csv", "crossovers.csv", "budget-fits.csv", "gpu-hours.csv",
         "gpu-equal-time.csv")


def axis_tables(anytime: pd.DataFrame, summary: pd.DataFrame, refs: pd.DataFrame, params: dict) -> dict:
    """The tables above by file name; empty when no run kept budget points."""
    st = params["statistics"]
    runs = budget_axis.point_runs(anytime, summary)
    if runs.empty:
        return {}
    ranked = budget_axis.ranking(runs, st["reference"], st["confidence"])
    out = {"budget-ranking.csv": ranked,
           "budget-advice.csv": what_to_use_by_budget(runs, ranked, refs, st["confidence"])}
    crossings, fits = [], []
    for ds in runs.dataset.unique():
        c, f = _pairs_and_fits(runs, ranked, ds, st["confidence"])
        crossings += c
        fits += f
    out["crossovers.csv"] = pd.DataFrame(crossings, columns=CROSSOVER_COLUMNS)
    out["budget-fits.csv"] = pd.DataFrame(fits, columns=FIT_COLUMNS)
    if st.get("gpu_cells"):
        cells = _gpu_cells(Path(st["gpu_cells"]))
        unit = {ds: _unit_tokens(g) for ds, g in runs.groupby("dataset", sort=False)}
        out["gpu-hours.csv"] = gpu_hours_table(runs, summary, params, cells, st["gpu_cells"], unit)
        equal = [budget_axis.gpu_equal_time(runs, cells, ds, unit[ds]) for ds in unit]
        out["gpu-equal-time.csv"] = budget_axis.ranking_at_gpu_time(pd.concat(equal, ignore_index=True),
                                                                     st["reference"], st["confidence"])
    return out


def _unit_tokens(runs: pd.DataFrame) -> dict:
    """Each method's 1x in tokens: the median over its points of tokens / multiple (a point is kept at the first
    step past its multiple, so this is 1x to within a step, with or without a 1x point)."""
    return (runs.tokens.astype(float) / runs.multiple.astype(float)).groupby(runs.method, sort=False).median().to_dict()


def _gpu_cells(cells_file: Path) -> pd.DataFrame:
    from ..config import ConfigError

    if not cells_file.is_file():
        raise ConfigError(f"statistics.gpu_cells names {cells_file}, which does not exist (a GPU cell bench's "
                          f"cell-bench.csv, e.g. benchmarks/bench-cells-gpu/cell-bench.csv)")
    return read_csv(cells_file, "dataset", "method", "tokens_per_s")


CROSSOVER_COLUMNS = ["dataset", "a", "b", "leader", "at", "low", "high", "separated", "from", "to", "text",
                     "fits_cross_at"]
FIT_COLUMNS = ["dataset", "method", "points", "floor", "scale", "alpha", "held_out_multiple", "held_out_measured",
               "held_out_predicted", "held_out_error"]


def learned_budgets(ranked: pd.DataFrame, dataset: str) -> dict[str, list[float]]:
    """Per method that learned (every seed) at one budget at least, the budgets at which it did; the methods in
    the largest budget's order, best first."""
    r = ranked[ranked.dataset == dataset]
    ok = r[r.status.isna() | (r.status == "learned")]
    order = r[r.multiple == r.multiple.max()].sort_values("nll").method.tolist()
    order += [m for m in r.method.unique() if m not in order]
    return {m: sorted(ok[ok.method == m].multiple.astype(float)) for m in order if (ok.method == m).any()}


def _pair(runs: pd.DataFrame, ds: str, a: str, b: str, shared: list[float], every: list[float],
          confidence: float) -> dict:
    """A pair's crossover, read at the budgets where both learned (``shared``): a run that did not learn is no
    evidence of a crossover (docs/statistics.md)."""
    if len(shared) < 2:
        return {"dataset": ds, "a": a, "b": b, "leader": None, "at": None, "low": None, "high": None,
                "separated": False, "seeds": 0, "from": shared[0] if shared else None,
                "to": shared[-1] if shared else None,
                "text": f"{a} and {b}: both learned at {len(shared)} budget(s) only: no crossover read"}
    c = budget_axis.crossover(runs[runs.multiple.isin(shared)], ds, a, b, confidence)
    where = "" if shared == every else (" (read at the budgets where both learned: "
                                        + ", ".join(f"{m:g}x" for m in shared) + ")")
    return {"dataset": ds, **{k: v for k, v in c.items() if k != "range"}, "from": c["range"][0],
            "to": c["range"][1], "text": budget_axis.crossover_text(c) + where}


def _pairs_and_fits(runs: pd.DataFrame, ranked: pd.DataFrame, ds: str, confidence: float) -> tuple[list, list]:
    """Fits for the methods that learned at the largest budget; a crossover for each pair of methods that
    learned somewhere, read where both did (``_pair``), with the fits' extrapolated crossing where both have one."""
    every = sorted(runs[runs.dataset == ds].multiple.astype(float).unique())
    budgets = learned_budgets(ranked, ds)
    learned = [m for m, b in budgets.items() if every[-1] in b]  # at the largest budget, best first
    mean = runs[runs.dataset == ds].groupby(["method", "multiple"]).nll.mean()
    fitted = {m: budget_axis.fit_curve(mean[m].index, mean[m].values) for m in learned}
    fits = []
    for m, f in fitted.items():
        base = {"dataset": ds, "method": m, "points": f["points"], **(f["params"] or {})}
        fits += [{**base, **{f"held_out_{k}": v for k, v in h.items()}} for h in f["held_out"]] or [base]
    crossings = []
    for a, b in combinations(budgets, 2):
        shared = sorted(set(budgets[a]) & set(budgets[b]))
        row = _pair(runs, ds, a, b, shared, every, confidence)
        row["fits_cross_at"] = (budget_axis.extrapolated_crossover(fitted[a], fitted[b], every[-1])
                                if a in fitted and b in fitted else None)
        crossings.append(row)
    return crossings, fits


def gpu_hours_table(runs: pd.DataFrame, summary: pd.DataFrame, params: dict, cells: pd.DataFrame,
                    source: str, unit: dict) -> pd.DataFrame:
    """``budget_axis.gpu_table`` per dataset of the long runs: 1x is each method's tokens in ``unit[dataset]``
    (``_unit_tokens``); the head's training FLOPs per token are the runs' own (``head_flops_per_token_train``)."""
    from ..config.runs import model_config

    test = summary[summary.split == "test"]
    out = []
    for ds in unit:
        flops = test[test.dataset == ds].groupby("method").head_flops_per_token_train.first().to_dict()
        mc = model_config(params, ds)
        flops = flops if mc.encoder == "lstm" else {}  # the floor counts an LSTM encoder's FLOPs only
        model = {"emb_dim": mc.emb_dim, "hidden_dim": mc.hidden_dim, "layers": mc.layers}
        t = budget_axis.gpu_table(cells, ds, unit[ds], flops, model)
        out.append(t.assign(dataset=ds, gpu_cells=source))
    cols = ["dataset", "method", "multiple", "tokens", "measured_h", "floor_h", "gpu_cells"]
    return pd.concat(out, ignore_index=True)[cols] if out else pd.DataFrame(columns=cols)
