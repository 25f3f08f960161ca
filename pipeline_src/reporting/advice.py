"""What to use, per dataset: the answer a report opens with and the README's glance table.

Among the methods that learned (no seed at or above its unigram line: ``stats.learned_runs``), the one with the
lowest mean test nll, its margin over the runner-up as a paired difference over the seeds both have (Student-t
interval, unadjusted: one comparison, chosen after the fact, so read "clear" as "the interval excludes zero", not
as a test), the reference's row beside it, and the count-based Kneser-Ney row.
"""
from __future__ import annotations

import math

import pandas as pd

from .stats import paired

COLUMNS = ["dataset", "vocab", "use", "ppl", "ppl_low", "ppl_high", "runner_up", "runner_up_ppl", "margin_nll",
           "margin_low", "margin_high", "pairs", "clear", "reference", "reference_ppl", "reference_status", "kn_ppl",
           "learned", "methods"]


def what_to_use(summary: pd.DataFrame, head: pd.DataFrame, refs: pd.DataFrame | None = None,
                confidence: float = 0.95) -> pd.DataFrame:
    """One row per dataset of ``head`` (the headline), from the per-seed test rows of ``summary``."""
    rows = []
    test = summary[summary.split == "test"]
    for ds, h in head.groupby("dataset", sort=False):
        learned = h[h.status.isna() | (h.status == "learned")] if "status" in h else h
        ranked = learned.sort_values("nll")
        ref_name = h.reference.dropna().iloc[0] if h.reference.notna().any() else None
        ref = h[h.method == ref_name]
        kn = refs[(refs.dataset == ds) & (refs.split == "test")] if refs is not None and not refs.empty else None
        g = test[test.dataset == ds]
        row = {"dataset": ds, "vocab": int(g.vocab.iloc[0]) if "vocab" in g and len(g) else None,
               "learned": len(ranked), "methods": len(h),
               "reference": ref_name, "reference_ppl": float(ref.ppl.iloc[0]) if len(ref) else math.nan,
               "reference_status": (ref.status.iloc[0] if "status" in ref and len(ref) and isinstance(
                   ref.status.iloc[0], str) else "learned"),
               "kn_ppl": float(kn.ppl.iloc[0]) if kn is not None and len(kn) else math.nan}
        if len(ranked):
            best = ranked.iloc[0]
            row.update(use=best.method, ppl=best.ppl, ppl_low=best.ppl_low, ppl_high=best.ppl_high)
        if len(ranked) > 1:
            second = ranked.iloc[1]
            seeds = {m: g[g.method == m].set_index("seed").nll for m in (best.method, second.method)}
            d = paired(seeds[best.method], seeds[second.method], confidence, 0)
            row.update(runner_up=second.method, runner_up_ppl=second.ppl)
            if d:
                row.update(margin_nll=d["delta_nll"], margin_low=d["delta_low"], margin_high=d["delta_high"],
                           pairs=d["pairs"], clear=bool(d["delta_high"] < 0))
        rows.append(row)
    return pd.DataFrame(rows).reindex(columns=COLUMNS).sort_values("vocab", kind="stable", ignore_index=True)


def advice_markdown(table: pd.DataFrame, level: int = 95, publication: str | None = None) -> str:
    """The what-to-use table in Markdown: one row per dataset (``publication`` adds a first column)."""
    from .tables import markdown_table

    def fmt(x: float, digits: int = 1) -> str:
        return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:,.{digits}f}"

    cols = (["run"] if publication else []) + ["dataset (words)", "use", "test ppl", f"margin over the runner-up "
            f"(Δ nll, {level}% CI)", "runner-up", "reference", "Kneser-Ney"]
    out = []
    for r in table.itertuples():
        name = f"{r.dataset} ({r.vocab:,})" if isinstance(r.vocab, (int, float)) and not pd.isna(r.vocab) else r.dataset
        if not isinstance(r.use, str):
            cells = [name, f"no method learned ({r.methods} tried)", "—", "—", "—"]
        else:
            margin = "one method learned" if not isinstance(r.runner_up, str) else (
                f"{r.margin_nll:+.3f} [{r.margin_low:+.3f}, {r.margin_high:+.3f}] over {int(r.pairs)} seeds"
                + ("" if r.clear else ": not separated") if not pd.isna(r.margin_nll) else "no paired seeds")
            cells = [name, f"**{r.use}**", f"{fmt(r.ppl)} [{fmt(r.ppl_low)}, {fmt(r.ppl_high)}]", margin,
                     f"{r.runner_up} ({fmt(r.runner_up_ppl)})" if isinstance(r.runner_up, str) else "—"]
        ref = "—" if not isinstance(r.reference, str) else (
            f"{r.reference} {fmt(r.reference_ppl)}" + ("" if r.reference_status == "learned" else
                                                        f" ({r.reference_status})"))
        out.append(([publication] if publication else []) + cells + [ref, fmt(r.kn_ppl)])
    return markdown_table(cols, out) + "\n"


def glance_markdown(publications: list[str]) -> str:
    """The README's glance table: what to use in each dataset of each named publication (benchmarks/NAME)."""
    from ..io.artifacts import read_json
    from .publish import BENCHMARKS

    parts = []
    for name in publications:
        pub = BENCHMARKS / name
        refs = pub / "references.csv"
        prov = read_json(pub / "provenance.json")
        level = int(round(100 * (prov["params"].get("statistics") or {}).get("confidence", 0.95)))
        table = what_to_use(pd.read_csv(pub / "summary.csv"), pd.read_csv(pub / "headline.csv"),
                            pd.read_csv(refs) if refs.is_file() and refs.stat().st_size > 1 else None, level / 100)
        parts.append(advice_markdown(table, level, name).split("\n", 2))
    header = parts[0][:2]
    return "\n".join(header + [p[2].rstrip("\n") for p in parts]) + "\n"
