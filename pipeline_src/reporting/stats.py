"""Verdicts over seeds: intervals, paired differences, Holm's correction, tuning curves.

Intervals are Student-t intervals of the mean over run seeds (``scipy.stats.ttest_1samp(...)
.confidence_interval``; ``statistics.interval: t``, the default), for a method's mean test nll and for
the paired per-seed difference against a reference or control. The t interval keeps its coverage at
2-5 seeds (it widens with t's quantile: 12.7 standard errors at n = 2, 4.3 at n = 3); the percentile
bootstrap (``statistics.interval: bootstrap``, ``scipy.stats.bootstrap``) has only C(2n-1, n) distinct
resamples (10 at n = 3) and covers far less than its nominal level there (tests/test_stats.py simulates
both on normal data). p-values are paired t-tests over seeds, Holm-corrected across the comparisons
of a dataset (``statsmodels.stats.multitest.multipletests``). Besides the comparison of every method
with the reference, ``contrasts`` pairs a method with its own control (a variant with its base, MoS
with MoC), Holm-corrected as a family of its own. Perplexities are reported as exp(mean nll) and their
intervals as exp of the nll interval (a geometric mean over seeds). With one seed no interval is given.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

INTERVALS = ("t", "bootstrap")


def mean_ci(x, confidence: float = 0.95, resamples: int = 9999, seed: int = 0,
            interval: str = "t") -> tuple[float, float, float]:
    """(mean, low, high) of ``x``: a Student-t interval (``interval="t"``) or scipy's percentile bootstrap
    (``"bootstrap"``, ``resamples`` resamples); NaNs for the interval if len(x) < 2."""
    from scipy.stats import bootstrap, ttest_1samp

    x = np.asarray(x, dtype=np.float64)
    m = float(x.mean())
    if len(x) < 2:
        return m, math.nan, math.nan
    if np.all(x == x[0]):  # no spread: every resample has the same mean, and t's standard error is 0
        return m, m, m
    if interval == "t":
        ci = ttest_1samp(x, 0.0).confidence_interval(confidence_level=confidence)
        return m, float(ci.low), float(ci.high)
    if interval != "bootstrap":
        raise ValueError(f"interval {interval!r}: one of {INTERVALS}")
    res = bootstrap((x,), np.mean, confidence_level=confidence, n_resamples=resamples, method="percentile",
                    rng=np.random.default_rng(seed), vectorized=True)
    return m, float(res.confidence_interval.low), float(res.confidence_interval.high)


def paired_test_pvalue(diff) -> float:
    """Two-sided paired t-test p-value of mean(diff) = 0 (NaN below two pairs or with no spread)."""
    from scipy.stats import ttest_1samp

    d = np.asarray(diff, dtype=np.float64)
    if len(d) < 2:
        return math.nan
    if np.ptp(d) <= 1e-12 * max(1.0, float(np.abs(d).max())):  # no spread: the t statistic is undefined
        return 0.0 if d[0] != 0 else math.nan
    return float(ttest_1samp(d, 0.0).pvalue)


def holm(pvalues, alpha: float) -> np.ndarray:
    """Holm-adjusted p-values (NaNs stay NaN and take no part in the correction)."""
    from statsmodels.stats.multitest import multipletests

    p = np.asarray(pvalues, dtype=np.float64)
    out = np.full_like(p, np.nan)
    ok = ~np.isnan(p)
    if ok.any():
        out[ok] = multipletests(p[ok], alpha=alpha, method="holm")[1]
    return out


HEADLINE_COLUMNS = ["dataset", "method", "type", "seeds", "status", "nll", "nll_low", "nll_high", "ppl", "ppl_low",
                    "ppl_high", "reference", "verdict_reference", "pairs", "delta_nll", "delta_low", "delta_high",
                    "ppl_ratio", "improve_share",
                    "p_value", "p_holm", "verdict", "gap_nll", "tokens_per_s_train", "train_time_s", "peak_mem_mb",
                    "params", "head_flops_per_token_train", "head_flops_per_token_eval", "logprob_rank", "head_dim",
                    "best_model_ppl", "paper_ppl", "vs_paper", "reference_note"]

LEARNED = "learned"


def learned_runs(runs: pd.DataFrame) -> pd.Series:
    """Per run row: whether its kept weights' validation perplexity is below its unigram line (the add-one unigram
    model of the train counts on the same validation tokens; a diverged run has none and did not learn); a run
    without the line counts as learned (records from before it)."""
    if not {"kept_valid_ppl", "unigram_valid_ppl"} <= set(runs.columns):
        return pd.Series(True, index=runs.index)
    kept, line = runs.kept_valid_ppl.astype(float), runs.unigram_valid_ppl.astype(float)
    return ~(line.notna() & (kept.isna() | (kept >= line)))


def learned_methods(head: pd.DataFrame) -> pd.Series:
    """Per headline row: whether its method learned (``status``; a headline from before the column: every row)."""
    if "status" not in head:
        return pd.Series(True, index=head.index)
    return head.status.isna() | (head.status == LEARNED)


def learn_status(runs: pd.DataFrame) -> str:
    """A method's runs (one row per seed): ``learned``, or ``did not learn, k of n seeds`` when any seed ended at or
    above its unigram line: such a method gets no verdict and cannot win, rank or cross over."""
    ok = learned_runs(runs)
    return LEARNED if ok.all() else f"did not learn, {int((~ok).sum())} of {len(ok)} seeds"


def verdict_reference(runs: pd.DataFrame, status: dict, reference: str) -> str | None:
    """The method verdicts compare against: ``reference`` where it learned, else (it did not learn, or did not run
    at this dataset: a size its budget cannot reach) the best method that did, chosen by its mean nll on ``runs``
    (the validation split's rows, so the stand-in is not picked on the numbers it is then tested on), else None
    (no verdict). A dataset where a single method ran keeps the reference: there is nothing to compare."""
    if status.get(reference) == LEARNED or (reference not in status and len(status) < 2):
        return reference
    learned = [m for m, s in status.items() if s == LEARNED]
    if not learned:
        return None
    means = runs[runs.method.isin(learned)].groupby("method").nll.mean()
    return min(learned, key=lambda m: (means.get(m, math.inf), m))


def headline(summary: pd.DataFrame, reference: str, confidence: float = 0.95, resamples: int = 9999,
             split: str = "test", paper: dict | None = None, interval: str = "t") -> pd.DataFrame:
    """Per dataset and method, over run seeds: mean test nll / ppl with intervals, and the paired
    difference of nll against ``reference`` (method - reference, nats/token; negative = better) with
    its interval, the share of seeds that improve, the Holm-corrected p-value and a verdict. With
    ``paper`` (the params file's ``paper:`` section), each method's published figure and the relative
    distance to it (``vs_paper``: ppl / paper - 1)."""
    alpha = 1.0 - confidence
    rows = []
    df = summary[summary.split == split]
    valid = summary[summary.split == "valid"]
    for ds, g in df.groupby("dataset", sort=False):
        status = {m: learn_status(gm) for m, gm in g.groupby("method", sort=False)}
        chooser = valid[valid.dataset == ds] if (valid.dataset == ds).any() else g  # a stand-in chosen on valid
        ref_used = verdict_reference(chooser, status, reference)
        ref = g[g.method == ref_used].set_index("seed").nll
        block = []
        for method, gm in g.groupby("method", sort=False):
            nll = gm.set_index("seed").nll.sort_index()
            m, lo, hi = mean_ci(nll.values, confidence, resamples, interval=interval)
            row = {"dataset": ds, "method": method, "type": gm["type"].iloc[0] if "type" in gm else None,
                   "seeds": len(nll), "nll": m, "nll_low": lo, "nll_high": hi,
                   "ppl": math.exp(m), "ppl_low": math.exp(lo) if not math.isnan(lo) else math.nan,
                   "ppl_high": math.exp(hi) if not math.isnan(hi) else math.nan, "reference": reference,
                   "verdict_reference": ref_used, "status": status[method]}
            for col in ("gap_nll", "tokens_per_s_train", "train_time_s", "tokens_reached", "peak_mem_mb", "params",
                        "head_flops_per_token_train", "head_flops_per_token_eval", "logprob_rank", "head_dim"):
                if col in gm and gm[col].notna().any():
                    row[col] = float(gm[col].mean())
            if "zero_prob_tokens" in gm and (gm.zero_prob_tokens.fillna(0) > 0).any():  # an infinite nll's cause
                row["zero_prob_tokens"] = int(gm.zero_prob_tokens.fillna(0).sum())  # over its seeds
            if "best_model_nll" in gm and gm.best_model_nll.notna().all():  # keep: last; the best-valid epoch's
                row["best_model_ppl"] = math.exp(float(gm.best_model_nll.mean()))
            published = ((paper or {}).get("ppl") or {}).get(method)
            if published is not None and (paper or {}).get("split", "test") == split:
                row.update(paper_ppl=float(published), vs_paper=row["ppl"] / published - 1)
            if method != ref_used and status[method] == LEARNED and ref_used is not None:
                row.update(paired(nll, ref, confidence, resamples, interval))
            if method == ref_used and ref_used != reference:
                why = "did not learn" if reference in status else "did not run at this dataset"
                row["reference_note"] = (f"{reference} {why}: the reference is the method that learned with the "
                                         f"lowest validation nll")
            block.append(row)
        out = pd.DataFrame(block)
        if "p_value" in out:
            out["p_holm"] = holm(out.p_value.values, alpha)
        rows.append(out)
    res = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=HEADLINE_COLUMNS)
    budget = "tokens_reached" in res and res.tokens_reached.notna().any()  # runs under a budget: what it bought
    zero = "zero_prob_tokens" in res  # only where some run scored a test word 0 (published tables stay as they are)
    res = res.reindex(columns=HEADLINE_COLUMNS + (["tokens_reached"] if budget else [])
                      + (["zero_prob_tokens"] if zero else []))
    res["verdict"] = [verdict(r, alpha) for r in res.to_dict("records")]
    return res.sort_values(["dataset", "nll"], kind="stable").reset_index(drop=True)


def paired(nll: pd.Series, ref: pd.Series, confidence: float, resamples: int, interval: str = "t") -> dict:
    """The paired difference ``nll - ref`` over the seeds both have (two nll Series indexed by seed):
    its mean and interval, the perplexity ratio, the share of seeds that improve and the t-test p-value;
    empty when no seed is shared."""
    common = nll.index.intersection(ref.index)
    if not len(common):
        return {}
    diff = (nll.loc[common] - ref.loc[common]).values
    d, dlo, dhi = mean_ci(diff, confidence, resamples, interval=interval)
    return dict(pairs=len(common), delta_nll=d, delta_low=dlo, delta_high=dhi, ppl_ratio=math.exp(d),
                improve_share=float((diff < 0).mean()), p_value=paired_test_pvalue(diff))


CONTRAST_COLUMNS = ["dataset", "method", "control", "seeds", "control_seeds", "ppl", "control_ppl", "pairs",
                    "delta_nll", "delta_low", "delta_high", "ppl_ratio", "improve_share", "p_value", "p_holm",
                    "verdict"]


def contrasts(summary: pd.DataFrame, pairs, confidence: float = 0.95, resamples: int = 9999,
              split: str = "test", interval: str = "t") -> pd.DataFrame:
    """Per dataset, each method against its own control (``pairs``: [method, control] pairs, the params
    file's ``statistics.contrasts``; e.g. a variant against its base, MoS against MoC): the paired
    difference of test nll over shared seeds, Holm-corrected across a dataset's contrasts (a family
    apart from the headline's comparisons with the reference). A pair with a side not run is left out."""
    alpha = 1.0 - confidence
    rows = []
    df = summary[summary.split == split]
    for ds, g in df.groupby("dataset", sort=False):
        nll = {m: gm.set_index("seed").nll.sort_index() for m, gm in g.groupby("method", sort=False)}
        status = {m: learn_status(gm) for m, gm in g.groupby("method", sort=False)}
        block = []
        for method, control in pairs:
            if method not in nll or control not in nll:
                continue
            row = {"dataset": ds, "method": method, "control": control,
                   "seeds": len(nll[method]), "control_seeds": len(nll[control]),
                   "ppl": math.exp(nll[method].mean()), "control_ppl": math.exp(nll[control].mean())}
            bad = next((f"{m} {status[m]}" for m in (method, control) if status[m] != LEARNED), None)
            if bad is None:
                row.update(paired(nll[method], nll[control], confidence, resamples, interval))
            else:  # no verdict rests on a run that did not learn
                row["status"] = bad
            block.append(row)
        if block:
            frame = pd.DataFrame(block)
            out = frame.reindex(columns=CONTRAST_COLUMNS)
            out["p_holm"] = holm(out.p_value.values, alpha)
            out["verdict"] = [verdict({**r, "reference": r["control"]}, alpha) for r in out.to_dict("records")]
            if "status" in frame:  # a side that did not learn: that is the verdict
                out["verdict"] = frame.status.where(frame.status.notna(), out.verdict)
            rows.append(out)
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=CONTRAST_COLUMNS)


def verdict(row: dict, alpha: float) -> str:
    status = row.get("status")
    if isinstance(status, str) and status != LEARNED:  # no verdict from a run that did not learn
        return status
    ref = row.get("verdict_reference", row["reference"])  # the reference, or the best method that learned
    if not isinstance(ref, str):
        return "no verdict: no method learned"
    if row["method"] == ref:
        return "reference"
    if "pairs" not in row or pd.isna(row.get("pairs")):
        return "no paired reference"
    if row["pairs"] < 2:
        return "one seed: no verdict"
    d = row.get("delta_nll")
    if d is not None and not pd.isna(d) and math.isinf(d):  # a word scored probability 0 (an infinite nll) on
        return "worse" if d > 0 else "better"                # a seed: the t-test's p is NaN, the answer is plain
    p = row.get("p_holm")
    if p is None or pd.isna(p) or p >= alpha:
        return "no clear difference"
    return "better" if row["delta_nll"] < 0 else "worse"


def expected_best(scores, n_max: int | None = None) -> np.ndarray:
    """Expected best (lowest) score among n trials drawn with replacement from ``scores``, n = 1..N
    (Dodge et al. 2019's expected validation performance, for a score to minimise)."""
    v = np.sort(np.asarray(scores, dtype=np.float64))
    n_total = len(v)
    n_max = n_max or n_total
    # P(min of n draws = v_(i)) = P(X >= v_(i))^n - P(X > v_(i))^n, with ties handled by ranks
    ge = 1.0 - np.searchsorted(v, v, side="left") / n_total
    gt = 1.0 - np.searchsorted(v, v, side="right") / n_total
    out = []
    for n in range(1, n_max + 1):
        w = ge ** n - gt ** n
        # each distinct value counted once: weights of tied entries are equal, divide by multiplicity
        mult = np.searchsorted(v, v, side="right") - np.searchsorted(v, v, side="left")
        out.append(float(np.sum(np.where(w > 0, v * w / mult, 0.0))))  # inf (diverged) draws may have weight 0
    return np.array(out)
