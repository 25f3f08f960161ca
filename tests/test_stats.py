"""Verdicts over seeds: the statistics are the libraries' (scipy, statsmodels), checked against them
and against brute force."""
import itertools
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from pipeline_src.reporting.stats import contrasts, expected_best, headline, holm, mean_ci, paired_test_pvalue


def test_t_interval_is_the_textbook_one():
    x = np.array([4.1, 3.7, 4.4])
    m, lo, hi = mean_ci(x, 0.95)
    half = sps.t.ppf(0.975, df=2) * x.std(ddof=1) / math.sqrt(3)  # 4.303 standard errors at n = 3
    assert m == pytest.approx(x.mean()) and (lo, hi) == pytest.approx((m - half, m + half))
    m, lo, hi = mean_ci([97.5, 97.6], 0.95)  # two seeds: 12.7 standard errors, not the two values
    assert (lo, hi) == pytest.approx((97.55 - 12.706 * 0.05, 97.55 + 12.706 * 0.05), abs=1e-3)


def test_the_t_interval_keeps_its_coverage_at_three_seeds_and_the_bootstrap_does_not():
    """Known normal data, n = 3 seeds: how often does each 95% interval hold the true mean?"""
    rng = np.random.default_rng(0)
    draws = rng.normal(5.0, 0.2, size=(4000, 3))
    t_cover = np.mean([lo <= 5.0 <= hi for lo, hi in (mean_ci(x)[1:] for x in draws)])
    boot_cover = np.mean([lo <= 5.0 <= hi for lo, hi in
                          (mean_ci(x, resamples=999, interval="bootstrap")[1:] for x in draws[:400])])
    assert abs(t_cover - 0.95) < 0.015  # 4000 draws: a standard error of 0.0034
    assert boot_cover < 0.85  # about 0.75 (10 distinct resamples); 400 draws: a standard error of 0.02


def test_bootstrap_interval_is_scipys_percentile_bootstrap():
    x = np.array([4.1, 3.7, 4.4, 3.9, 4.0, 4.6, 3.8])
    m, lo, hi = mean_ci(x, 0.9, 4999, seed=3, interval="bootstrap")
    ref = sps.bootstrap((x,), np.mean, confidence_level=0.9, n_resamples=4999, method="percentile",
                        rng=np.random.default_rng(3))
    assert m == pytest.approx(x.mean())
    assert (lo, hi) == pytest.approx((ref.confidence_interval.low, ref.confidence_interval.high))
    assert x.min() < lo < m < hi < x.max()


def test_one_seed_gives_no_interval_and_equal_values_a_point():
    m, lo, hi = mean_ci([2.5])
    assert m == 2.5 and math.isnan(lo) and math.isnan(hi)
    assert mean_ci([1.0, 1.0, 1.0]) == (1.0, 1.0, 1.0)


def test_paired_pvalue_is_a_paired_t_test_and_holm_is_holms():
    a, b = np.array([1.0, 1.2, 0.9, 1.1]), np.array([1.3, 1.4, 1.2, 1.5])
    assert paired_test_pvalue(a - b) == pytest.approx(sps.ttest_rel(a, b).pvalue)
    p = np.array([0.01, 0.04, 0.03, 0.2])
    # Holm by hand: sort, multiply by (m - rank), running maximum, cap at 1
    order = np.argsort(p)
    adj = np.maximum.accumulate([min(1.0, (len(p) - i) * p[j]) for i, j in enumerate(order)])
    want = np.empty_like(p)
    want[order] = adj
    assert holm(p, 0.05) == pytest.approx(want)
    assert np.isnan(holm([np.nan, 0.01], 0.05)[0]) and holm([np.nan, 0.01], 0.05)[1] == pytest.approx(0.01)


def _summary(nlls: dict) -> pd.DataFrame:
    rows = [{"dataset": "d", "method": m, "type": m, "seed": s, "split": "test", "nll": v}
            for m, vs in nlls.items() for s, v in enumerate(vs)]
    return pd.DataFrame(rows)


def test_headline_pairs_seeds_and_gives_verdicts():
    rng = np.random.default_rng(0)
    base = 4.0 + 0.3 * rng.standard_normal(6)  # seed effects shared by all methods: pairing removes them
    df = _summary({"softmax": base, "better": base - 0.05 + 0.005 * rng.standard_normal(6),
                   "same": base + 0.01 * np.array([1, -1, 2, -2, 0.5, -0.5]), "worse": base + 0.2})
    h = headline(df, "softmax", 0.95, 999).set_index("method")
    assert h.loc["softmax", "verdict"] == "reference" and h.loc["better", "verdict"] == "better"
    assert h.loc["worse", "verdict"] == "worse" and h.loc["same", "verdict"] == "no clear difference"
    assert h.loc["better", "improve_share"] == 1.0 and h.loc["worse", "improve_share"] == 0.0
    assert h.loc["worse", "delta_nll"] == pytest.approx(0.2) and h.loc["worse", "ppl_ratio"] == pytest.approx(math.exp(0.2))
    # unpaired intervals overlap (seed spread 0.3) while the paired one excludes zero
    assert h.loc["better", "nll_low"] < h.loc["softmax", "nll_high"] and h.loc["better", "delta_high"] < 0
    assert list(h.index) == list(h.sort_values("nll").index)  # ranked by mean nll


def test_a_method_with_an_infinite_test_nll_is_worse_not_undecided():
    """NEGLM's factor Q(w) = 0 gives an unseen word probability 0: an infinite nll on every seed made the paired
    t-test's p NaN, and the verdict read 'no clear difference'."""
    base = np.array([4.0, 4.1, 3.9])
    h = headline(_summary({"softmax": base, "zero": np.full(3, np.inf), "one": base + [0.1, np.inf, 0.1]}),
                 "softmax", 0.95, 999).set_index("method")
    assert h.loc["zero", "verdict"] == "worse" and h.loc["one", "verdict"] == "worse"
    assert h.loc["zero", "ppl"] == math.inf


def test_headline_with_one_seed_says_so():
    h = headline(_summary({"softmax": [4.0], "mos": [3.9]}), "softmax").set_index("method")
    assert h.loc["mos", "verdict"] == "one seed: no verdict" and math.isnan(h.loc["mos", "delta_low"])


def test_headline_compares_with_the_papers_figure_and_the_best_validation_model():
    df = _summary({"nce": [math.log(100.0), math.log(110.0)], "neglm": [math.log(98.0), math.log(99.0)]})
    df["best_model_nll"] = df.nll - 0.01
    paper = {"source": "x", "split": "test", "ppl": {"neglm": 98.35}}
    h = headline(df, "nce", 0.95, 999, paper=paper).set_index("method")
    want = math.exp((math.log(98.0) + math.log(99.0)) / 2)  # exp of the mean nll: a geometric mean
    assert h.loc["neglm", "paper_ppl"] == 98.35 and h.loc["neglm", "vs_paper"] == pytest.approx(want / 98.35 - 1)
    assert math.isnan(h.loc["nce", "paper_ppl"]) and h.loc["nce", "best_model_ppl"] == pytest.approx(
        math.exp(math.log(math.sqrt(100.0 * 110.0)) - 0.01))
    valid = headline(df.assign(split="valid"), "nce", 0.95, 999, split="valid", paper=paper)
    assert valid.paper_ppl.isna().all()  # the figures are test figures: not set beside validation


def test_contrasts_pair_each_method_with_its_own_control_over_shared_seeds():
    base = np.array([4.0, 4.3, 3.8, 4.1])
    df = _summary({"nce": base + 0.5, "neglm": base, "neglm-a075": base + np.array([0.03, 0.05, 0.04, 0.02]),
                   "neglm-b": base + np.array([0.01, -0.01, 0.02, -0.02]), "mos": base[:1] - 0.1})
    pairs = [["neglm-a075", "neglm"], ["neglm-b", "neglm"], ["mos", "neglm"], ["neg", "neglm"]]
    c = contrasts(df, pairs, 0.95, 999).set_index("method")
    assert list(c.index) == ["neglm-a075", "neglm-b", "mos"]  # neg did not run: its pair is left out
    assert (c.control == "neglm").all() and c.loc["neglm-a075", "pairs"] == 4
    d = np.array([0.03, 0.05, 0.04, 0.02])
    assert c.loc["neglm-a075", "delta_nll"] == pytest.approx(d.mean())
    assert (c.loc["neglm-a075", "delta_low"], c.loc["neglm-a075", "delta_high"]) == pytest.approx(mean_ci(d, 0.95, 999)[1:])
    assert c.loc["neglm-a075", "ppl"] == pytest.approx(math.exp((base + d).mean()))
    assert c.loc["neglm-a075", "control_ppl"] == pytest.approx(math.exp(base.mean()))
    # Holm over the two contrasts with p-values (mos has one seed: no test, no verdict)
    p = [sps.ttest_rel(base + d, base).pvalue, sps.ttest_rel(df[df.method == "neglm-b"].nll.values, base).pvalue]
    assert [c.loc["neglm-a075", "p_value"], c.loc["neglm-b", "p_value"]] == pytest.approx(p)
    assert [c.loc["neglm-a075", "p_holm"], c.loc["neglm-b", "p_holm"]] == pytest.approx(holm(p, 0.05))
    assert c.loc["neglm-a075", "verdict"] == "worse" and c.loc["neglm-b", "verdict"] == "no clear difference"
    assert c.loc["mos", "pairs"] == 1 and c.loc["mos", "verdict"] == "one seed: no verdict"
    assert contrasts(df, []).empty and set(contrasts(df, []).columns) == set(c.reset_index().columns)


def test_expected_best_matches_brute_force_over_all_draws():
    scores = [3.0, 1.0, 2.0, 2.0, 5.0]
    n = len(scores)
    got = expected_best(scores)
    for k in (1, 2, 3):
        draws = list(itertools.product(scores, repeat=k))  # every draw of k trials with replacement
        assert got[k - 1] == pytest.approx(np.mean([min(d) for d in draws]))
    assert got[0] == pytest.approx(np.mean(scores)) and np.all(np.diff(got) <= 0) and len(got) == n
    # a diverged trial (inf) is a bad draw, not a NaN
    assert not np.isnan(expected_best([1.0, math.inf, 2.0])).any()


def test_the_report_says_whether_a_sampled_row_is_the_objective_or_a_setting():
    from pipeline_src.reporting.findings import sampled_findings

    summary = pd.DataFrame({"method": ["nce", "nce-zero", "neglm-b", "neglm-b-nce", "mos", "moc"],
                            "type": ["nce", "nce", "neglm-b", "neglm-b", "mos", "moc"]})
    con = pd.DataFrame([
        {"dataset": "d", "method": "nce-zero", "control": "nce", "ppl": 973.0, "control_ppl": 154.1, "pairs": 3,
         "delta_nll": 1.843, "delta_low": 1.496, "delta_high": 2.190, "verdict": "worse"},
        {"dataset": "d", "method": "neglm-b-nce", "control": "nce", "ppl": 153.8, "control_ppl": 154.1, "pairs": 3,
         "delta_nll": -0.002, "delta_low": -0.01, "delta_high": 0.006, "verdict": "no clear difference"},
        {"dataset": "d", "method": "mos", "control": "moc", "ppl": 111.2, "control_ppl": 138.1, "pairs": 3,
         "delta_nll": -0.216, "delta_low": -0.266, "delta_high": -0.167, "verdict": "better"}])
    got = sampled_findings(con, summary)
    assert got == [
        "**nce-zero** against **nce**: test ppl 973.0 against 154.1, Δ nll +1.843 [+1.496, +2.190] over 3 seeds "
        "(worse); both are nce, so this part of the row is a setting, not the objective.",
        "**neglm-b-nce** against **nce**: test ppl 153.8 against 154.1, Δ nll -0.002 [-0.010, +0.006] over 3 "
        "seeds (no clear difference); NCE and NEGLM-B are one objective in two parametrisations: they differ by "
        "where their output bias starts and, at test time, by NEGLM-B's factor Q(w), which gives a word Q never "
        "draws probability 0."]  # MoS against MoC is not a sampled pair
    assert sampled_findings(con.iloc[:0], summary) == [] and sampled_findings(None, summary) == []


def _runs(rows):
    """Per-run test rows (dataset d) from (method, seed, nll, kept valid ppl); the unigram line is 100."""
    return pd.DataFrame([{"dataset": "d", "method": m, "seed": s, "split": "test", "nll": nll, "kept_valid_ppl": k,
                          "unigram_valid_ppl": 100.0} for m, s, nll, k in rows])


def test_no_verdict_from_a_method_that_did_not_learn_and_a_collapsed_reference_is_replaced():
    from pipeline_src.reporting.stats import headline

    rows = [(m, s, nll + 0.01 * s, k) for m, nll, k in (("softmax", 5.0, 90.0), ("a", 4.0, 95.0), ("b", 4.5, 80.0))
            for s in (1, 2, 3)]
    rows[4] = ("a", 2, 4.02, 100.0)  # a's second seed ends at its unigram line: a did not learn
    head = headline(_runs(rows), "softmax").set_index("method")
    assert head.loc["a", "status"] == head.loc["a", "verdict"] == "did not learn, 1 of 3 seeds"
    assert pd.isna(head.loc["a", "delta_nll"]) and pd.isna(head.loc["a", "p_holm"])  # no paired numbers either
    assert head.loc["b", "verdict"] == "better" and head.loc["softmax", "verdict"] == "reference"
    # the reference collapsed: the best method that learned is the reference, and the row says so
    rows = [(m, s, nll, 150.0 if m == "softmax" else k) for m, s, nll, k in rows]
    head = headline(_runs(rows), "softmax").set_index("method")
    assert set(head.verdict_reference) == {"b"} and head.loc["b", "verdict"] == "reference"
    assert head.loc["softmax", "verdict"] == "did not learn, 3 of 3 seeds"
    assert "softmax did not learn" in head.loc["b", "reference_note"]
    # nothing learned: no verdict at all
    head = headline(_runs([(m, s, nll, 150.0) for m, s, nll, _ in rows]), "softmax")
    assert set(head.verdict) == {"did not learn, 3 of 3 seeds"} and head.verdict_reference.isna().all()


def test_the_stand_in_is_chosen_on_valid_also_for_a_reference_not_run_and_contrasts_follow_the_rule():
    from pipeline_src.reporting.stats import contrasts, headline

    rows = [(m, s, nll + 0.01 * s, k) for m, nll, k in (("softmax", 5.0, 150.0), ("a", 4.0, 95.0), ("b", 4.5, 80.0))
            for s in (1, 2, 3)]
    test = _runs(rows)
    valid = test.assign(split="valid", nll=test.method.map({"softmax": 5.0, "a": 4.9, "b": 4.1}))  # b best on valid
    head = headline(pd.concat([test, valid]), "softmax").set_index("method")
    assert set(head.verdict_reference) == {"b"} and head.loc["a", "verdict"] == "better"  # a beats b on test
    assert "lowest validation nll" in head.loc["b", "reference_note"]
    # a reference that did not run at this dataset (a size its budget cannot reach): the same stand-in, said so
    both = pd.concat([test, valid])
    head = headline(both[both.method != "softmax"], "softmax").set_index("method")
    assert set(head.verdict_reference) == {"b"} and head.loc["a", "verdict"] == "better"
    assert head.loc["b", "reference_note"].startswith("softmax did not run at this dataset")
    from pipeline_src.reporting.tables import headline_markdown  # the docs' heading says which of the two it was

    assert "softmax not run here: verdicts against b" in headline_markdown(head.reset_index().assign(seeds=3))
    collapsed = headline(both.assign(kept_valid_ppl=both.kept_valid_ppl.where(both.method != "softmax", 150.0)),
                         "softmax")
    assert "softmax did not learn: verdicts against b" in headline_markdown(collapsed.assign(seeds=3))
    # one method alone: nothing to compare, no stand-in
    head = headline(test[test.method == "a"], "softmax").set_index("method")
    assert set(head.verdict) == {"no paired reference"} and pd.isna(head.get("reference_note", pd.Series([None]))).all()
    con = contrasts(test, [["a", "softmax"], ["a", "b"]]).set_index("control")
    assert con.loc["softmax", "verdict"] == "softmax did not learn, 3 of 3 seeds" and pd.isna(con.loc["softmax", "p_value"])
    assert con.loc["b", "verdict"] == "better"
