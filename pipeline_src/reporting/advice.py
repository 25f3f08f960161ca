"""What to use, per dataset: the answer a report opens with and the README's glance table (formatted by
``tables.advice_markdown`` and ``tables.glance_markdown``); over (|V|, budget) from the long runs' advice tables
(``two_axes``, formatted by ``tables.axes_markdown``).

Among the methods that learned (no seed at or above its unigram line: ``stats.learned_runs``), the one to use is
the one with the lowest mean **validation** nll, and the runner-up the next (test numbers are never read to pick
them: picking on test and then reporting test overstates the margin). The winner is compared on test with every
other method that learned, paired over the seeds both have; the p-values of those comparisons are Holm-adjusted
within the dataset (and budget), and the margin over the runner-up is **clear** (bold, "separated") when its
adjusted p is below 1 - confidence and the winner is the better on test. The interval shown beside it is the
unadjusted Student-t interval of the paired difference, labelled so. Beside them, the reference's row and the
count-based Kneser-Ney row.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .stats import holm, learned_methods, paired

COLUMNS = ["dataset", "vocab", "use", "ppl", "ppl_low", "ppl_high", "runner_up", "runner_up_ppl", "margin_nll",
           "margin_low", "margin_high", "pairs", "clear", "reference", "reference_ppl", "reference_status", "kn_ppl",
           "learned", "methods", "margin_p", "margin_p_holm", "compared", "chosen_on"]


def valid_nll(summary: pd.DataFrame) -> pd.Series:
    """Each (method, seed)'s validation nll: the summary's valid rows, or, for budget points (test rows that carry
    the point's validation perplexity), log(kept_valid_ppl)."""
    valid = summary[summary.split == "valid"]
    if len(valid):
        return valid.set_index(["method", "seed"]).nll.astype(float)
    test = summary[summary.split == "test"]
    return pd.Series(np.log(test.kept_valid_ppl.astype(float)).to_numpy(),
                     index=pd.MultiIndex.from_frame(test[["method", "seed"]]))


def what_to_use(summary: pd.DataFrame, head: pd.DataFrame, refs: pd.DataFrame | None = None,
                confidence: float = 0.95) -> pd.DataFrame:
    """One row per dataset of ``head`` (the headline), from the per-seed rows of ``summary`` (valid rows choose,
    test rows compare)."""
    rows = []
    test = summary[summary.split == "test"]
    for ds, h in head.groupby("dataset", sort=False):
        learned = h[learned_methods(h)]
        g = test[test.dataset == ds]
        chosen = valid_nll(summary[summary.dataset == ds]).groupby(level="method").mean()
        order = sorted(learned.method, key=lambda m: (chosen.get(m, math.inf), m))
        ranked = learned.set_index("method").loc[order].reset_index()
        ref_name = h.reference.dropna().iloc[0] if h.reference.notna().any() else None
        ref = h[h.method == ref_name]
        kn = refs[(refs.dataset == ds) & (refs.split == "test")] if refs is not None and not refs.empty else None
        row = {"dataset": ds, "vocab": int(g.vocab.iloc[0]) if "vocab" in g and len(g) and pd.notna(g.vocab.iloc[0])
               else None,
               "learned": len(ranked), "methods": len(h), "chosen_on": "valid nll",
               "reference": ref_name, "reference_ppl": float(ref.ppl.iloc[0]) if len(ref) else math.nan,
               "reference_status": ("not run" if not len(ref) else ref.status.iloc[0] if "status" in ref and
                                    isinstance(ref.status.iloc[0], str) else "learned"),  # (a size it cannot reach)
               "kn_ppl": float(kn.ppl.iloc[0]) if kn is not None and len(kn) else math.nan}
        if len(ranked):
            best = ranked.iloc[0]
            row.update(use=best.method, ppl=best.ppl, ppl_low=best.ppl_low, ppl_high=best.ppl_high)
        if len(ranked) > 1:
            row.update(_margin(g, ranked, confidence))
        rows.append(row)
    return pd.DataFrame(rows).reindex(columns=COLUMNS).sort_values("vocab", kind="stable", ignore_index=True)


def _margin(test: pd.DataFrame, ranked: pd.DataFrame, confidence: float) -> dict:
    """The winner (``ranked``'s first row) against every other method that learned, on test, paired over seeds:
    the runner-up's margin with its unadjusted interval, and the Holm-adjusted p-value of that comparison among
    all of them."""
    seeds = {m: test[test.method == m].set_index("seed").nll for m in ranked.method}
    best, second = ranked.iloc[0], ranked.iloc[1]
    d = {m: paired(seeds[best.method], seeds[m], confidence, 0) for m in ranked.method[1:]}
    p = dict(zip(d, holm([x.get("p_value", math.nan) for x in d.values()], 1 - confidence)))
    out = {"runner_up": second.method, "runner_up_ppl": second.ppl, "compared": len(d)}
    m = d[second.method]
    if m:
        adj = p[second.method]
        out.update(margin_nll=m["delta_nll"], margin_low=m["delta_low"], margin_high=m["delta_high"],
                   pairs=m["pairs"], margin_p=m["p_value"], margin_p_holm=adj,
                   clear=bool(m["delta_nll"] < 0 and not math.isnan(adj) and adj < 1 - confidence))
    return out


def what_to_use_by_budget(runs: pd.DataFrame, ranked: pd.DataFrame, refs: pd.DataFrame | None = None,
                          confidence: float = 0.95) -> pd.DataFrame:
    """``what_to_use`` at each budget of long runs: ``runs`` are ``budget_axis.point_runs``' per-seed rows and
    ``ranked`` their ``budget_axis.ranking``; one row per (dataset, multiple), smallest budget first, learned
    read at that budget."""
    out = []
    for m, g in runs.groupby("multiple"):
        table = what_to_use(g.drop(columns=["multiple", "tokens"]), ranked[ranked.multiple == m], refs, confidence)
        out.append(table.assign(multiple=m))
    if not out:
        return pd.DataFrame(columns=["multiple", *COLUMNS])
    res = pd.concat(out, ignore_index=True)
    return res[["multiple", *COLUMNS]].sort_values(["dataset", "multiple"], kind="stable", ignore_index=True)


AXIS_MULTIPLES = (0.25, 1.0, 3.0, 10.0)  # the budgets a reader compares: a quarter, the sweep's own, 3x and 10x


def budget_cell(r) -> str:
    """One (|V|, budget) cell of ``two_axes``: the method to use and how sure, in words (Δ nll over the runner-up,
    paired over seeds, with its interval)."""
    if not isinstance(r.use, str):
        return f"none learned ({int(r.methods)} tried)"
    if not isinstance(r.runner_up, str):
        return f"**{r.use}** (the only one that learned)"
    if pd.isna(r.margin_low):
        return f"{r.use}, then {r.runner_up} (no interval)"
    margin = f"{r.margin_nll:+.3f} [{r.margin_low:+.3f}, {r.margin_high:+.3f}]{holm_note(r)}"
    return f"**{r.use}**, {margin} vs {r.runner_up}" if r.clear else f"{r.use} or {r.runner_up}: not separated"


def holm_note(r) -> str:
    """", Holm p 0.012" after an (unadjusted) interval: the adjusted p that decides "separated"."""
    p = getattr(r, "margin_p_holm", math.nan)
    return "" if p is None or pd.isna(p) else f", Holm p {p:.2g}"


def two_axes(advice: pd.DataFrame, multiples: tuple[float, ...] = AXIS_MULTIPLES) -> pd.DataFrame:
    """What to use over (|V|, budget): ``advice`` is one or more ``budget-advice.csv`` tables
    (``what_to_use_by_budget``); one row per dataset in their order, one column per multiple (``{m:g}x``), each
    cell ``budget_cell``; a multiple a dataset's runs did not reach reads "not run"."""
    rows = []
    for ds, g in advice.groupby("dataset", sort=False):
        vocab = g.vocab.iloc[0]
        row = {"dataset": ds, "vocab": None if pd.isna(vocab) else int(vocab)}
        for m in multiples:
            at = g[g.multiple == m]
            row[f"{m:g}x"] = budget_cell(next(at.itertuples())) if len(at) else "not run"
        rows.append(row)
    return pd.DataFrame(rows, columns=["dataset", "vocab", *(f"{m:g}x" for m in multiples)])
