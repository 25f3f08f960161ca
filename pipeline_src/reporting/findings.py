"""Sentences the report states from the verdict tables: what a declared contrast between two sampled heads
says about where their rows come from (the objective, or a setting such as the initial bias)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..heads.options import head_families

SAMPLED = {t for t, f in head_families().items() if f == "sampled objectives"}
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


COLLAPSE_COLUMNS = ["dataset", "method", "flagged", "runs", "when", "unigram_valid_ppl", "stuck", "final_valid_ppl",
                    "reading"]
READING = {  # what a row with runs still no better than the unigram model at the end says, by when they were flagged
    "epoch": "a failure to train (a collapse)",
    "first validation": "a failure to train in the time (a collapse, or a budget too short to leave the context-free "
                        "solution)"}


def collapse_table(summary: pd.DataFrame) -> pd.DataFrame:
    """One row per (dataset, method) with runs whose validation after the first epoch was no better than the
    unigram model's (``collapsed`` in summary.csv; under a budget, the first validation may close a budget spent
    inside the first epoch): how many of its runs were flagged, when (``when``, a key of ``WHEN``), the unigram
    line, how many of them are still no better at the end (``stuck``: a context-free solution, not the method's
    numbers), their final validation perplexity (exp of the mean nll over the stuck runs, or over all flagged
    ones when none is stuck; runs that diverged left out, NaN when every one did) and the ``reading``: "slow
    start" (none stuck), "collapse" (flagged after the first epoch), "under-trained" (a budget spent inside the
    first epoch: the first validation was the last) or "collapse or under-trained" (runs that disagree). Both
    sides of the comparison are on the same tokens: ``kept_valid_ppl`` is measured on the validation tokens the
    unigram line was (``training.valid_tokens``); summaries written before that column compare ``ppl`` on the
    split."""
    if "collapsed" not in summary or not summary.collapsed.fillna(False).astype(bool).any():
        return pd.DataFrame(columns=COLLAPSE_COLUMNS)
    from .figures import budgeted
    valid = summary[summary.split == "valid"].drop_duplicates(["dataset", "method", "seed"])
    flagged = valid[valid.collapsed.fillna(False).astype(bool)]
    rows = []
    for (dataset, method), g in flagged.groupby(["dataset", "method"], sort=True):
        line = g.unigram_valid_ppl if "unigram_valid_ppl" in g else pd.Series(float("nan"), index=g.index)
        final = g.kept_valid_ppl.fillna(g.ppl) if "kept_valid_ppl" in g else g.ppl
        stuck = ~(final < line)  # a run without the line (an earlier version) counts as stuck
        when = _when_collapsed(g, budgeted(summary, dataset))
        reading = "slow start" if not stuck.any() else \
            {"epoch": "collapse", "budget": "under-trained"}.get(when, "collapse or under-trained")
        rows.append({"dataset": dataset, "method": method, "flagged": len(g),
                     "runs": valid[(valid.dataset == dataset) & (valid.method == method)].seed.nunique(),
                     "when": when, "unigram_valid_ppl": line.mean() if line.notna().any() else float("nan"),
                     "stuck": int(stuck.sum()), "final_valid_ppl": _geomean(final[stuck] if stuck.any() else final),
                     "reading": reading})
    return pd.DataFrame(rows, columns=COLLAPSE_COLUMNS)


def collapse_findings(summary: pd.DataFrame) -> list[str]:
    """``collapse_table`` as one sentence per row, by its reading: a collapse (runs still no better at the end:
    read the row as a failure to train), under-trained (a budget that ended inside the first epoch) or a slow
    start."""
    out = []
    for r in collapse_table(summary).itertuples():
        model = "the unigram model" if pd.isna(r.unigram_valid_ppl) else \
            f"the unigram model (valid ppl {r.unigram_valid_ppl:.1f})"
        head = f"**{r.method}** on {r.dataset}: {r.flagged} of {r.runs} runs no better than {model} {WHEN[r.when]}"
        final = "— (every one diverged)" if pd.isna(r.final_valid_ppl) else f"{r.final_valid_ppl:.1f}"
        if r.reading == "under-trained":  # the first validation was the last: the budget ended inside epoch 1
            out.append(f"**{r.method}** on {r.dataset}: {r.flagged} of {r.runs} runs still no better than {model} when "
                       f"their budget ended, inside the first epoch (final valid ppl {final}): read its row as "
                       "under-trained in the time, not as the method's quality.")
        elif r.stuck:
            out.append(f"{head}, {r.stuck} of them still not at the end (final valid ppl {final}): read its row as "
                       f"{READING[r.when]}, not as the method's quality.")
        else:
            out.append(f"{head}; all of them ended below it (final valid ppl {final}): a slow start.")
    return out


def _geomean(ppl: pd.Series) -> float:
    """Perplexities over seeds as the headline averages them: exp of the mean nll."""
    return float(np.exp(np.log(ppl.astype(float)).mean()))  # NaN (a diverged run) skipped; all NaN: NaN


WHEN = {"budget": "at the end of their budget (inside the first epoch)", "epoch": "after the first epoch",
        "first validation": "at their first validation (the end of the first epoch or of the budget, whichever came "
                            "first)"}


def _when_collapsed(flagged: pd.DataFrame, budgeted: bool) -> str:
    """When the flagged runs' first validation came (a key of ``WHEN``): each run's own record
    (``collapse_budget_ended``) where every one has it and they agree, else what the dataset allows (a budget
    may end inside the first epoch)."""
    ended = flagged.collapse_budget_ended if "collapse_budget_ended" in flagged else pd.Series(dtype=object)
    if len(ended) and ended.notna().all() and ended.nunique() == 1:
        return "budget" if bool(ended.iloc[0]) else "epoch"
    return "first validation" if budgeted else "epoch"


def zero_probability_findings(summary: pd.DataFrame) -> list[str]:
    """One sentence per method whose test distribution gives some words probability 0 (NEGLM's factor Q(w)
    for a word with no training count): a test set holding one of them would score infinite perplexity."""
    if "zero_prob_words" not in summary:
        return []
    rows = summary[summary.zero_prob_words.fillna(0) > 0].drop_duplicates(["dataset", "method"])
    return [f"**{r.method}** on {r.dataset} gives {int(r.zero_prob_words)} word{'s' * (r.zero_prob_words != 1)} "
            f"probability 0 (no training count, so Q(w) = 0): it cannot score a text that contains "
            f"{'them' if r.zero_prob_words != 1 else 'it'} (`smooth_q: true` floors Q)."
            for r in rows.itertuples()]


def reference_findings(head: pd.DataFrame, refs: pd.DataFrame | None, dataset: str) -> list[str]:
    """Per count-based reference row of ``dataset`` (references.csv): its test perplexity, and which neural
    output layers beat it on mean test perplexity over seeds, by how much, and whether their whole interval
    lies below it (the reference has no seeds: it is deterministic)."""
    if refs is None or refs.empty:
        return []
    out = []
    h = head[head.dataset == dataset].sort_values("nll")
    for r in refs[(refs.dataset == dataset) & (refs.split == "test")].itertuples():
        def pct(ppl):
            return f"{100 * (ppl / r.ppl - 1):+.1f}%"

        beat = [f"{m.method} {m.ppl:.2f} ({pct(m.ppl)}{'' if pd.isna(m.nll_high) or m.nll_high < r.nll else ', its interval reaches it'})"
                for m in h.itertuples() if m.nll < r.nll]
        rest = h[h.nll >= r.nll]
        if beat:
            others = f"{len(rest)} at or above it" + (f", the closest {rest.method.iloc[0]} ({pct(rest.ppl.iloc[0])})"
                                                       if len(rest) else "")
        else:
            others = (f"none of the {len(rest)} neural rows; the closest is {rest.method.iloc[0]} at "
                      f"{rest.ppl.iloc[0]:.2f} ({pct(rest.ppl.iloc[0])})")
        out.append(f"**Kneser-Ney** (interpolated, modified discounts, order {r.order} chosen on valid; count-based, "
                   f"fitted in {r.fit_seconds:.2g} s): test ppl **{r.ppl:.2f}**. "
                   + (f"Neural output layers below it: {', '.join(beat)}; {others}." if beat else
                      f"Neural output layers below it: {others}."))
    return out


def seeds_line(summary: pd.DataFrame) -> str:
    """How many run seeds each method has, counted per method and dataset: "3 run seeds per method", or, when a
    partial summary holds fewer for some, each count with the methods that have it."""
    test = summary[summary.split == "test"]
    counts = test.groupby(["dataset", "method"], sort=False).seed.nunique()
    seeds = sorted(int(s) for s in test.seed.unique())
    if counts.nunique() <= 1:
        n = int(counts.iloc[0]) if len(counts) else 0
        return f"{n} run seed{'s' if n != 1 else ''} per method ({seeds})"
    groups = [f"{int(n)} for {', '.join(f'{d}/{m}' for d, m in counts[counts == n].index)}"
              for n in sorted(counts.unique(), reverse=True)]
    return f"Run seeds per method differ: {'; '.join(groups)} (of seeds {seeds})"


def partial_notice(info: dict | None, listed: int = 12) -> str | None:
    """The line a report of a partial summary opens with (``summary.json`` of ``summarize --partial``): how many
    runs it holds of how many, and the missing ones by name (a run that diverged has no metrics: it is missing)."""
    if not info or not info.get("partial"):
        return None
    missing = info.get("missing") or []
    names = ", ".join(missing[:listed]) + (f" and {len(missing) - listed} more" if len(missing) > listed else "")
    return (f"**Partial results: this summary holds {info['runs']} of {info['of']} runs.** Missing (not finished, "
            f"or diverged): {names}. Every table and verdict below is over the runs that finished.")
