"""Sentences the report states from the verdict tables: what a declared contrast between two sampled heads
says about where their rows come from (the objective, or a setting such as the initial bias)."""
from __future__ import annotations

import pandas as pd

SAMPLED = {"sampled-softmax", "nce", "neg", "neglm", "neglm-b"}
ONE_OBJECTIVE = {"nce", "neglm-b"}  # with a learned bias, one objective in two parametrisations (docs/methods.md)


def sampled_findings(contrasts: pd.DataFrame | None, summary: pd.DataFrame) -> list[str]:
    """One sentence per declared contrast whose method and control are both sampled heads, with its numbers."""
    if contrasts is None or contrasts.empty:
        return []
    kind = summary.drop_duplicates("method").set_index("method")["type"].to_dict()
    many = contrasts.dataset.nunique() > 1
    out = []
    for r in contrasts.itertuples():
        a, b = kind.get(r.method), kind.get(r.control)
        if a not in SAMPLED or b not in SAMPLED or pd.isna(r.delta_nll):
            continue
        interval = "" if pd.isna(r.delta_low) else f" [{r.delta_low:+.3f}, {r.delta_high:+.3f}]"
        head = (f"{r.dataset}: " if many else "") + (
            f"**{r.method}** against **{r.control}**: test ppl {r.ppl:.1f} against {r.control_ppl:.1f}, "
            f"Δ nll {r.delta_nll:+.3f}{interval} over {int(r.pairs)} seeds ({r.verdict})")
        if a == b:
            why = f"; both are {a}, so this part of the row is a setting, not the objective."
        elif {a, b} == ONE_OBJECTIVE:
            why = ("; NCE and NEGLM-B are one objective in two parametrisations: they differ by where their output "
                   "bias starts and, at test time, by NEGLM-B's factor Q(w), which gives a word Q never draws "
                   "probability 0.")
        else:
            why = f" ({a} against {b}: two objectives)."
        out.append(head + why)
    return out
