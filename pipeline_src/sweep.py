"""A sweep over vocabulary sizes read as Chen, Grangier & Auli (2016) read theirs: at each |V|, who wins under
the budget and by how much; from which size on each method beats the full softmax; where (frequent, middle or
rare words) each loses to the truth. Reads the headline (per dataset and method, verdicts against
``statistics.reference``) and the per-run summary; the datasets of one sweep differ in their vocabulary.
"""
from __future__ import annotations

import pandas as pd

from .bands import BANDS

SIZE_COLUMNS = ["vocab", "method", "ppl", "ppl_low", "ppl_high", "delta_nll", "delta_low", "delta_high", "verdict",
                "rank_at_size", "tokens_reached", *[f"{b}_gap_nll" for b in BANDS]]


def by_size(head: pd.DataFrame, summary: pd.DataFrame) -> pd.DataFrame:
    """One row per (|V|, method): the headline's test perplexity, interval and verdict against the reference,
    its rank at that size (1 = lowest perplexity), the tokens its budget bought, and the mean gap to the truth
    per frequency band on the test split (nats; NaN without a known truth)."""
    test = summary[summary.split == "test"]
    vocab = test.groupby("dataset").vocab.first()
    bands = test.groupby(["dataset", "method"])[[f"{b}_gap_nll" for b in BANDS if f"{b}_gap_nll" in test]].mean()
    out = head.copy()
    out["vocab"] = out.dataset.map(vocab).astype(int)
    out = out.join(bands, on=["dataset", "method"])
    out["rank_at_size"] = out.groupby("vocab").ppl.rank(method="min").astype(int)
    return out.reindex(columns=SIZE_COLUMNS).sort_values(["vocab", "rank_at_size", "method"], ignore_index=True)


def winners(table: pd.DataFrame) -> pd.DataFrame:
    """Per |V|: the method with the lowest test perplexity, the runner-up, and whether their intervals are
    apart (``clear``: the winner's upper end below the runner-up's lower end; with one seed, never)."""
    rows = []
    for vocab, at in table.groupby("vocab"):
        at = at.sort_values("ppl")
        first = at.iloc[0]
        second = at.iloc[1] if len(at) > 1 else None
        clear = bool(second is not None and pd.notna(first.ppl_high) and pd.notna(second.ppl_low)
                     and first.ppl_high < second.ppl_low)
        rows.append({"vocab": vocab, "winner": first.method, "ppl": first.ppl,
                     "runner_up": None if second is None else second.method,
                     "runner_up_ppl": None if second is None else second.ppl, "clear": clear})
    return pd.DataFrame(rows, columns=["vocab", "winner", "ppl", "runner_up", "runner_up_ppl", "clear"])


def crossovers(table: pd.DataFrame, reference: str) -> pd.DataFrame:
    """Per method run at two sizes or more: the smallest |V| from which it is better than ``reference`` (a
    "better" verdict) at that size and at every larger one it ran at (``from_vocab``; NaN when it never is),
    and the sizes at which it is better, with no clear difference, or worse. A method run at one size has no
    crossover to speak of (the default run's two crossings: each method at one language) and is left out."""
    rows = []
    for method, own in table[table.method != reference].groupby("method"):
        own = own.sort_values("vocab")
        if own.vocab.nunique() < 2:
            continue
        better = own.verdict.eq("better").tolist()
        start = next((i for i in range(len(better)) if all(better[i:])), None)
        rows.append({"method": method, "from_vocab": own.vocab.iloc[start] if start is not None else float("nan"),
                     **{v: [int(x) for x in own.vocab[own.verdict == v]]
                        for v in ("better", "no clear difference", "worse")}})
    return pd.DataFrame(rows, columns=["method", "from_vocab", "better", "no clear difference", "worse"])
