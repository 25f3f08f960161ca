"""The report's own tables (DataFrames the notebook shows, not the publications' Markdown): one dataset's
frequency bands by the chain-rule split, and the topic language's rows against its two lines."""
from __future__ import annotations

import numpy as np
import pandas as pd


def band_table(test: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """One dataset's frequency bands for people, from its test rows of summary.csv: per method (best mean test nll
    first), means over seeds of the chain-rule split: predicting the target's band over all tokens (a proper score),
    then per band its loss and how it divides into the band's part and the within-band part. On a language with a
    truth every number is a gap to the truth's same part (nats/token); on real text, the nll itself. Rows from
    before the split get the band's perplexity beside the truth's in that band. Returns the table and a line with
    the test tokens in each band."""
    from ..data.bands import BANDS

    bands = [b for b in BANDS if f"{b}_tokens" in test and test[f"{b}_tokens"].fillna(0).max() > 0]
    tokens = ", ".join(f"{b} {int(test[f'{b}_tokens'].max()):,}" for b in bands)
    truth = "true_nll" in test and test.true_nll.notna().all()
    g = test.groupby("method", sort=False)
    order = g.nll.mean().sort_values().index
    out = pd.DataFrame({"method": order})
    split = "band_alloc_nll" in test and test.band_alloc_nll.notna().any()
    if split:
        kind = "gap" if truth else "nll"
        out["band prediction (proper)"] = g[f"band_alloc_{kind}"].mean().reindex(order).to_numpy()
        for b in bands:
            total = g[f"{b}_gap_nll"].mean() if truth else g[f"{b}_ppl"].apply(lambda s: float(np.log(s).mean()))
            out[f"{b}: {kind}"] = total.reindex(order).to_numpy()
            out[f"{b}: band's part"] = g[f"{b}_alloc_{kind}"].mean().reindex(order).to_numpy()
            out[f"{b}: within band"] = g[f"{b}_within_{kind}"].mean().reindex(order).to_numpy()
        out = out.round(3)
    else:
        for b in bands:
            ppl = g[f"{b}_ppl"].apply(lambda s: float(np.exp(np.log(s).mean()))).reindex(order)
            cell = [f"{p:,.1f}" for p in ppl]
            if truth and f"{b}_gap_nll" in test:
                true_ppl = ppl / np.exp(g[f"{b}_gap_nll"].mean().reindex(order))
                cell = [f"{p:,.1f} (truth {t:,.1f})" for p, t in zip(ppl, true_ppl)]
            out[f"{b} ppl (given the band: not a proper score)"] = cell
    return out, f"test tokens per band: {tokens}" if tokens else ""


def memory_worth(test: pd.DataFrame) -> float:
    """What reading the topic is worth on these rows' test tokens: memoryless minus truth, nats/token."""
    return float((test.memoryless_nll - test.true_nll).mean())


def _recovered(won: float, worth: float) -> str:
    """The share of memory's worth a row won below the memoryless line; above it, none (its gap column says by
    how much: a share below 0 would read as a quantity recovered)."""
    if not worth > 0:
        return "—"
    return f"{won / worth:.0%}" if won >= 0 else "none (above the line)"


def memory_table(test: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """One dataset's rows against the topic language's two lines (its test rows of summary.csv with
    ``memoryless_nll``): the gap to the truth and to the memoryless line (the truth with the topic averaged out:
    what a model that takes no evidence of the topic from what it has read achieves), means over seeds with their
    intervals, and the share of memory's worth (memoryless minus truth, nats/token) the row recovered: 0 = no
    better than ignoring the topic, 1 = the truth. Below the memoryless line the model read the topic off the
    document; the rest of its gap to the truth is what it (its encoder or its output layer) still loses. A method
    with a seed that ended at or above its unigram line says so (``stats.learn_status``): its gaps are read as a
    run that never left the context-free solution, not as what its output layer can express."""
    from .stats import learn_status, mean_ci
    from .style import fmt_interval

    rows = []
    for method, g in test.groupby("method", sort=False):
        worth = memory_worth(g)
        truth = mean_ci(g.gap_nll.to_numpy(float), confidence)
        memory = mean_ci(g.memory_gap_nll.to_numpy(float), confidence)
        rows.append({"method": method, "nll": float(g.nll.mean()),
                     "gap to the truth": fmt_interval(*truth, digits=3),
                     "gap to the memoryless line": fmt_interval(*memory, digits=3),
                     "memory's worth recovered": _recovered(-memory[0], worth),
                     "status": learn_status(g)})
    return pd.DataFrame(rows).sort_values("nll").drop(columns="nll")


def budget_ranking_table(ranked: pd.DataFrame, reference: str, level: int, by: str = "multiple") -> pd.DataFrame:
    """One dataset's budget-ranking.csv for people: a row per budget (``by``: the multiple, or the GPU seconds of
    gpu-equal-time.csv, whose cells add the multiple each method reaches there), a column per method (the best at
    the largest budget first), each cell the test perplexity [interval] and its verdict there (against the
    stand-in reference, named, where the reference did not learn at that budget; by multiple, "not trained" where
    a method has no run at that budget, its ladder stopping lower)."""
    from .style import fmt_interval

    def cell(r) -> str:
        ppl = fmt_interval(r.ppl, r.ppl_low, r.ppl_high, 1)
        at = f", at {r.multiple:.2g}x" if by != "multiple" else ""
        if pd.isna(r.verdict):
            return ppl + at
        if r.verdict == "reference":
            return ppl + (" (reference" if r.method == reference else " (stand-in reference") + at + ")"
        stand_in = isinstance(r.verdict_reference, str) and r.verdict_reference != reference
        named = f" vs {r.verdict_reference}" if stand_in and r.verdict in ("better", "worse", "no clear difference") \
            else ""
        return f"{ppl} ({r.verdict}{named}{at})"

    t = ranked.assign(cell=ranked.apply(cell, axis=1)).pivot_table(index=by, columns="method", values="cell",
                                                                   aggfunc="first")
    last = ranked[ranked[by] == ranked[by].max()].sort_values("nll").method.tolist()
    t = t[last + [m for m in t.columns if m not in last]].fillna("not trained" if by == "multiple" else "")
    label = (lambda m: f"{m:g}x") if by == "multiple" else (lambda g: f"{g:,.0f} s" if g >= 10 else f"{g:.2g} s")
    return t.rename(index=label).rename_axis(index="budget" if by == "multiple" else "GPU seconds",
                                             columns=None).reset_index()


def budget_fits_table(fits: pd.DataFrame) -> pd.DataFrame:
    """One dataset's budget-fits.csv for people: per method the fitted floor (as a perplexity) and exponent, and
    the held-out error at each held-out budget (nats/token, predicted minus measured)."""
    from .budget_axis import ALPHA_MAX

    rows = []
    for m, g in fits.groupby("method", sort=False):
        r = g.iloc[0]
        row = {"method": m, "points": int(r.points),
               "floor ppl": "" if pd.isna(r.floor) else f"{np.exp(r.floor):.1f}",
               "α": "" if pd.isna(r.alpha) else f"{r.alpha:.2f}" + (" (its bound: flat)" if r.alpha >= ALPHA_MAX - 1e-3 else "")}
        row.update({f"held-out error at {h.held_out_multiple:g}x (nats)": f"{h.held_out_error:+.3f}"
                    for h in g.itertuples() if pd.notna(h.held_out_multiple)})
        rows.append(row)
    return pd.DataFrame(rows)


def gpu_hours_people(gpu: pd.DataFrame) -> pd.DataFrame:
    """gpu-hours.csv for people: per method, the GPU-hours of each multiple, measured and as the FLOPs floor."""
    def hours(x: float) -> str:
        """A duration as people read it: ms, s, min or h, two or three significant digits."""
        if pd.isna(x):
            return ""
        s = x * 3600
        return (f"{s * 1e3:.3g} ms" if s < 1 else f"{s:.3g} s" if s < 60 else f"{s / 60:.3g} min" if s < 3600
                else f"{x:.3g} h")

    t = gpu.assign(cell=[(hours(a) if pd.notna(a) else "not timed on the GPU") + (f" (floor {hours(b)})"
                                                                                  if pd.notna(b) else "")
                         for a, b in zip(gpu.measured_h, gpu.floor_h)])
    t = t.pivot_table(index="method", columns="multiple", values="cell", aggfunc="first", sort=False)
    return t.rename(columns=lambda m: f"{m:g}x").rename_axis(columns=None).reset_index()


def gpu_hours_unmeasured(gpu: pd.DataFrame) -> str | None:
    """One dataset's gpu-hours.csv in one line where the GPU bench timed none of its methods (a table whose every cell
    said "not timed" told the reader nothing twelve times): what the FLOPs floor alone puts 1x at. None where some
    budget was measured (then :func:`gpu_hours_people` is the table)."""
    if gpu.measured_h.notna().any():
        return None
    one = gpu[gpu.multiple == 1].dropna(subset=["floor_h"]).sort_values("floor_h")
    floor = (f"; a training step's FLOPs alone put 1x at {one.floor_h.iloc[0] * 3.6e6:.3g} ms ({one.method.iloc[0]}) "
             f"to {one.floor_h.iloc[-1] * 3.6e6:.3g} ms ({one.method.iloc[-1]}), a floor, not a reading") if len(one) else ""
    return (f"not timed on the GPU: `{gpu.gpu_cells.iloc[0]}` has no cell at these shapes, so no budget is read in "
            f"GPU-hours or at equal GPU seconds{floor}.")


def gpu_equal_time_table(ranked: pd.DataFrame, reference: str, level: int) -> pd.DataFrame:
    """One dataset's gpu-equal-time.csv for people: a row per shared GPU budget, a column per method, each cell the
    test perplexity [interval], the verdict and the multiple of its own 1x the method reaches in those seconds."""
    return budget_ranking_table(ranked, reference, level, by="gpu_seconds")
