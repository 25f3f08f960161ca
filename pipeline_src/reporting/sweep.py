"""A sweep over vocabulary sizes read as Chen, Grangier & Auli (2016) read theirs: at each |V|, who wins under
the budget and by how much; from which size on each method beats the full softmax; where (frequent, middle or
rare words) each loses to the truth. Reads the headline (per dataset and method, verdicts against
``statistics.reference``) and the per-run summary; the datasets of one sweep differ in their vocabulary.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..data.bands import BANDS
from ..io.errors import ConfigError
from .stats import learned_methods

SIZE_COLUMNS = ["vocab", "dataset", "method", "status", "verdict_reference", "ppl", "ppl_low", "ppl_high", "delta_nll",
                "delta_low", "delta_high", "verdict", "rank_at_size", "tokens_reached", *[f"{b}_gap_nll" for b in BANDS],
                *[f"{b}_ppl" for b in BANDS]]
VERDICTS = ("better", "no clear difference", "worse")  # anything else (one seed, no paired reference): no verdict


def sizes(summary: pd.DataFrame) -> pd.Series:
    """|V| per dataset (from the test rows), or a one-line error when a size is unknown or two datasets share
    one: a sweep reads one dataset per vocabulary size."""
    vocab = summary[summary.split == "test"].groupby("dataset").vocab.first()
    if vocab.isna().any():
        raise ConfigError(f"summary.csv has no vocabulary size for {', '.join(vocab[vocab.isna()].index)}: "
                          "summarize again (it reads each dataset's meta.json)")
    shared = vocab[vocab.duplicated(keep=False)]
    if len(shared):
        groups = "; ".join(f"{', '.join(sorted(g.index))} share |V| = {int(v):,}" for v, g in shared.groupby(shared))
        raise ConfigError(f"datasets {groups}: a sweep reads one dataset per vocabulary size")
    return vocab.astype(int)


def is_sweep(summary: pd.DataFrame) -> bool:
    """Two datasets or more, each with its own known |V|: what the per-size reading needs."""
    try:
        return "vocab" in summary and len(sizes(summary)) > 1
    except ConfigError:
        return False


def by_size(head: pd.DataFrame, summary: pd.DataFrame) -> pd.DataFrame:
    """One row per (|V|, method): the headline's test perplexity, interval and verdict against the reference,
    its rank at that size among the methods that learned (1 = lowest perplexity; a run without a perplexity ranks
    last; a method that did not learn has none), the tokens its budget
    bought, and per frequency band on the test split the mean gap to the truth (nats; NaN without a truth) and
    the perplexity over seeds (exp of the mean nll: what real text, without a truth, is read by)."""
    test = summary[summary.split == "test"]
    bands = test.groupby(["dataset", "method"])[[f"{b}_gap_nll" for b in BANDS if f"{b}_gap_nll" in test]].mean()
    band_ppl = [f"{b}_ppl" for b in BANDS if f"{b}_ppl" in test]
    if band_ppl:  # NaN where the band has no test token
        logs = np.log(test[band_ppl].astype(float)).join(test[["dataset", "method"]])
        bands = bands.join(np.exp(logs.groupby(["dataset", "method"])[band_ppl].mean()))
    out = head.copy()
    out["vocab"] = out.dataset.map(sizes(summary))
    out = out.join(bands, on=["dataset", "method"])
    learned = learned_methods(out)
    ppl = out.ppl.where(learned)  # a method that did not learn has no rank (NaN), one that diverged ranks last
    out["rank_at_size"] = ppl.groupby(out.vocab).rank(method="min", na_option="bottom").where(learned).astype("Int64")
    return out.reindex(columns=SIZE_COLUMNS).sort_values(["vocab", "rank_at_size", "method"], ignore_index=True)


def winners(table: pd.DataFrame) -> pd.DataFrame:
    """Per |V|: the method with the lowest test perplexity, the runner-up (None when one method with a
    perplexity ran at that size), whether their intervals are apart (``clear``: the winner's upper end below the
    runner-up's lower end) and whether there are intervals to compare at all (``intervals``: not with one
    seed). A method without a perplexity (every run diverged) or that did not learn (a seed at or above its unigram
    line: ``status``) neither wins nor comes second; a size where no method has one is left out."""
    rows = []
    learned = learned_methods(table)
    for vocab, at in table[table.ppl.notna() & learned].groupby("vocab"):
        at = at.sort_values(["ppl", "method"], kind="stable")
        first = at.iloc[0]
        second = at.iloc[1] if len(at) > 1 else None
        intervals = second is not None and pd.notna(first.ppl_high) and pd.notna(second.ppl_low)
        rows.append({"vocab": vocab, "winner": first.method, "ppl": first.ppl,
                     "runner_up": None if second is None else second.method,
                     "runner_up_ppl": None if second is None else second.ppl,
                     "tie": second is not None and first.ppl == second.ppl,
                     "intervals": intervals, "clear": bool(intervals and first.ppl_high < second.ppl_low)})
    return pd.DataFrame(rows, columns=["vocab", "winner", "ppl", "runner_up", "runner_up_ppl", "tie", "intervals",
                                       "clear"]).astype({"runner_up": object, "runner_up_ppl": object})


def crossovers(table: pd.DataFrame, reference: str) -> pd.DataFrame:
    """Per method run at two sizes or more: the smallest |V| from which it is better than ``reference`` (a
    "better" verdict) at that size and at every larger size of the sweep (``from_vocab``; NaN when it never
    is; a larger size it did not run at, or ran at without a verdict, does not count as better), and the
    sizes at which it is better, with no clear difference, worse, without a verdict (one seed, no paired
    reference) or not run. A method run at one size has no crossover to speak of and is left out. A size where
    ``reference`` did not run (one its budget cannot reach) is no size of the crossover: ``from_vocab`` reads
    "from there on, at every larger size the reference ran at" (the method's verdict there is listed all the same)."""
    every = sorted(table.vocab.unique())
    ran = set(table.vocab[table.method == reference])
    span = [v for v in every if v in ran] if ran else every
    rows = []
    for method, own in table[table.method != reference].groupby("method"):
        if own.vocab.nunique() < 2:
            continue
        if "verdict_reference" in own:  # a verdict against another method (the reference did not learn) is none
            same = own.verdict_reference.isna() | (own.verdict_reference == reference)  # NaN: a headline from before
            own = own.assign(verdict=own.verdict.where(same, "no verdict"))
        verdict = dict(zip(own.vocab, own.verdict))
        better = [verdict.get(v) == "better" for v in span]
        start = next((i for i in range(len(span)) if all(better[i:])), None)
        rows.append({"method": method, "from_vocab": span[start] if start is not None else float("nan"),
                     **{v: [int(x) for x in every if verdict.get(x) == v] for v in VERDICTS},
                     "no verdict": [int(x) for x in every if x in verdict and verdict[x] not in VERDICTS],
                     "not run": [int(x) for x in every if x not in verdict]})
    return pd.DataFrame(rows, columns=["method", "from_vocab", *VERDICTS, "no verdict", "not run"])


def winner_lines(table: pd.DataFrame, refs: pd.DataFrame | None = None) -> list[str]:
    """One markdown bullet per |V|: the winner, how it stands against the runner-up, and the count-based
    reference at that size where ``refs`` (references.csv) has one; the wording publish and the report share.
    A size where no method has a perplexity says so."""
    kn = {} if refs is None or refs.empty or "vocab" not in refs else \
        {int(r.vocab): r for r in refs[refs.split == "test"].itertuples() if pd.notna(r.vocab)}
    won = {int(w.vocab): _winner_line(w, kn.get(int(w.vocab))) for w in winners(table).itertuples()}
    def none(v) -> str:
        at = table[table.vocab == v]
        if at.ppl.notna().any():  # perplexities, but from methods that did not learn
            return (f"- |V| = {int(v):,}: no method learned at this size (every one has a seed at or above its "
                    f"unigram line): no winner.")
        return f"- |V| = {int(v):,}: no method has a test perplexity at this size (every run diverged)."
    return [won.get(int(v), none(v)) for v in sorted(table.vocab.unique())]


def crossover_lines(table: pd.DataFrame, reference: str) -> list[str]:
    """One markdown bullet per method run at two sizes or more: where it overtakes ``reference`` for good, and
    its verdict at every size."""
    return [_crossover_line(c) for c in crossovers(table, reference).to_dict("records")]


def _winner_line(w, kn) -> str:
    line = f"- |V| = {w.vocab:,}: **{w.winner}** ({w.ppl:.1f})"
    if w.runner_up is None or pd.isna(w.runner_up):
        line += ", the only method run at this size"
    else:
        apart = ("the same perplexity as the runner-up" if w.tie else
                 "its interval clear of the runner-up's" if w.clear else
                 "intervals overlapping the runner-up's" if w.intervals else "one seed: no intervals to compare")
        line += f", runner-up {w.runner_up} ({w.runner_up_ppl:.1f}); {apart}"
    if kn is not None:
        line += f"; count-based {kn.method}-{kn.order}: {kn.ppl:.1f}"
    return line + "."


def _crossover_line(c: dict) -> str:
    if pd.notna(c["from_vocab"]):
        start = f"better from |V| = {int(c['from_vocab']):,} on"
    else:
        start = "not better for good" if c["better"] else \
            "never better" if c["no clear difference"] or c["worse"] else "no verdict at any size"
    parts = [f"better at {_sizes(c['better'])}", f"no clear difference at {_sizes(c['no clear difference'])}",
             f"worse at {_sizes(c['worse'])}"]
    parts += [f"no verdict at {_sizes(c['no verdict'])}"] if c["no verdict"] else []
    parts += [f"not run at {_sizes(c['not run'])}"] if c["not run"] else []
    return f"- {c['method']}: {start} ({'; '.join(parts)})."


def _sizes(vocabs: list[int]) -> str:
    return ", ".join(f"{v:,}" for v in vocabs) or "none"


def equal_tokens(points: pd.DataFrame) -> pd.DataFrame:
    """The equal-data reading beside the equal-time one: per dataset, method and epochs of data
    (``training.anytime_epochs``, the rows of anytime.csv with ``epochs`` set), the validation perplexity at that
    data, exp of the mean nll over the seeds that reached it, and how many did (``seeds``; a method whose budget
    ended before the point has none there)."""
    cols = ["dataset", "method", "epochs", "tokens", "valid_ppl", "seeds"]
    if "epochs" not in points or points.epochs.isna().all():
        return pd.DataFrame(columns=cols)
    at = points[points.epochs.notna()]
    out = at.groupby(["dataset", "method", "epochs"], sort=False).agg(
        tokens=("tokens", "mean"), valid_nll=("valid_nll", "mean"), seeds=("seed", "nunique")).reset_index()
    out["valid_ppl"] = np.exp(out.valid_nll)
    return out[cols].sort_values(["dataset", "epochs", "valid_ppl"], ignore_index=True)


EQUAL_TOKENS_CAPTION = ("validation perplexity on the fixed validation subset after the same epochs of training data, "
                        "the mean nll over the seeds that reached it; empty where a method's budget ended first")


def equal_tokens_table(points: pd.DataFrame) -> pd.DataFrame:
    """:func:`equal_tokens` for people: one row per dataset and method, a column per amount of data ("after 0.25
    epochs"), each cell the validation perplexity, with "(k of n seeds)" where fewer of its seeds reached it. Its caption,
    wherever it is shown: ``EQUAL_TOKENS_CAPTION``."""
    eq = equal_tokens(points)
    if eq.empty:
        return pd.DataFrame(columns=["dataset", "method"])
    most = eq.groupby(["dataset", "method"]).seeds.transform("max")
    cells = eq.assign(cell=[f"{p:.1f}" + ("" if s == n else f" ({s} of {n} seeds)")
                            for p, s, n in zip(eq.valid_ppl, eq.seeds, most)])
    wide = cells.pivot_table(index=["dataset", "method"], columns="epochs", values="cell", aggfunc="first",
                             sort=False).rename_axis(columns=None).reset_index()
    return wide.rename(columns=lambda e: e if isinstance(e, str) else f"after {e:g} epochs")


def delta_to_best(table: pd.DataFrame, summary: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """What the sweep figure draws, one row per (|V|, method) of ``by_size``'s table. A method that learned at a
    size (``panel`` "learned"): its test nll minus that of the best method there (``rank_at_size`` 1), paired
    over the seeds both ran, with its Student-t interval (0 for the best itself; ``best`` names it). One that did
    not (``panel`` "did not learn"): how far its kept validation perplexity ended from its unigram line,
    log(kept valid ppl) − log(unigram valid ppl) in nats/token, the mean over seeds and the lowest and highest
    seed (above 0 on a seed is what "did not learn" means); a run that diverged is +inf."""
    from .stats import mean_ci

    test = summary[summary.split == "test"].set_index(["dataset", "method", "seed"]).sort_index()
    valid = summary[summary.split == "valid"]
    rows = []
    for vocab, at in table.groupby("vocab"):
        best = at[at.rank_at_size == 1]
        best = best.iloc[0] if len(best) else None
        learned = learned_methods(at)
        for r in at.itertuples():
            row = {"vocab": vocab, "dataset": r.dataset, "method": r.method,
                   "best": None if best is None else best.method}
            if best is not None and learned[r.Index] and pd.notna(r.ppl):
                own = test.loc[(r.dataset, r.method)].nll
                ref = test.loc[(best.dataset, best.method)].nll
                diff = (own - ref).dropna()
                mu, lo, hi = mean_ci(diff.to_numpy(), confidence) if len(diff) else (np.nan,) * 3
                rows.append({**row, "panel": "learned", "y": mu, "low": lo, "high": hi, "seeds": len(diff)})
                continue
            v = valid[(valid.dataset == r.dataset) & (valid.method == r.method)]
            gap = np.log(v.kept_valid_ppl.astype(float)) - np.log(v.unigram_valid_ppl.astype(float)) \
                if {"kept_valid_ppl", "unigram_valid_ppl"} <= set(v) else pd.Series(dtype=float)
            gap = gap.replace(np.nan, np.inf)  # no kept perplexity: the run diverged
            rows.append({**row, "panel": "did not learn", "y": float(gap.mean()) if len(gap) else np.inf,
                         "low": float(gap.min()) if len(gap) else np.nan,
                         "high": float(gap.max()) if len(gap) else np.nan, "seeds": len(gap)})
    return pd.DataFrame(rows, columns=["vocab", "dataset", "method", "best", "panel", "y", "low", "high", "seeds"])
