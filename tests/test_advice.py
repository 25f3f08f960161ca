"""What to use (reporting/advice.py): the best method that learned, its paired margin over the runner-up, and the
README's glance table, checked against hand computations."""
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from pipeline_src.io.errors import ConfigError
from pipeline_src.reporting.advice import two_axes, what_to_use
from pipeline_src.reporting.tables import advice_markdown, axes_markdown, glance_markdown

ROOT = Path(__file__).resolve().parents[1]


def _tables():
    nll = {"softmax": [5.0, 5.1, 5.2], "a": [4.0, 4.2, 4.1], "b": [4.3, 4.25, 4.4], "collapsed": [3.0, 3.1, 3.2]}
    summary = pd.DataFrame([{"dataset": "d", "vocab": 1000, "method": m, "seed": s, "split": split,
                             "nll": x + (0.05 if split == "valid" else 0.0)}
                            for m, xs in nll.items() for s, x in zip((1, 2, 3), xs) for split in ("test", "valid")])
    head = pd.DataFrame({"dataset": "d", "method": list(nll), "reference": "softmax",
                         "status": ["learned", "learned", "learned", "did not learn, 1 of 3 seeds"],
                         "nll": [np.mean(v) for v in nll.values()],
                         "ppl": [math.exp(np.mean(v)) for v in nll.values()],
                         "ppl_low": 0.0, "ppl_high": 0.0})
    refs = pd.DataFrame({"dataset": ["d", "d"], "split": ["valid", "test"], "ppl": [70.0, 80.0]})
    return summary, head, refs


def test_the_answer_skips_a_method_that_did_not_learn_and_pairs_the_margin_over_seeds():
    summary, head, refs = _tables()
    row = what_to_use(summary, head, refs).iloc[0]
    assert row.use == "a" and row.runner_up == "b"  # "collapsed" has the lowest nll but did not learn
    diff = np.array([4.0, 4.2, 4.1]) - np.array([4.3, 4.25, 4.4])
    half = stats.t.ppf(0.975, 2) * diff.std(ddof=1) / math.sqrt(3)
    assert row.margin_nll == pytest.approx(diff.mean()) and row.pairs == 3
    assert row.margin_low == pytest.approx(diff.mean() - half) and row.margin_high == pytest.approx(diff.mean() + half)
    # "clear": the Holm-adjusted p of a against b, among a's comparisons with every other method that learned
    p = {m: stats.ttest_rel([4.0, 4.2, 4.1], other).pvalue for m, other in (("b", [4.3, 4.25, 4.4]),
                                                                              ("softmax", [5.0, 5.1, 5.2]))}
    holm_b = max(2 * min(p.values()), p["b"]) if p["b"] >= p["softmax"] else 2 * p["b"]
    assert row.margin_p == pytest.approx(p["b"]) and row.margin_p_holm == pytest.approx(min(holm_b, 1.0))
    assert row.clear == (row.margin_p_holm < 0.05) and row.compared == 2 and row.chosen_on == "valid nll"
    assert row.kn_ppl == 80.0 and row.reference_ppl == head.ppl[0]
    text = advice_markdown(what_to_use(summary, head, refs))
    assert (("**a**" in text) == bool(row.clear)) and ("not separated" in text) != bool(row.clear)
    assert f"Holm p {row.margin_p_holm:.2g}" in text and "unadjusted 95% CI" in text
    alone = what_to_use(summary[summary.method != "softmax"], head[head.method != "softmax"], refs)
    assert alone.use[0] == "a" and alone.reference_status[0] == "not run"  # a size the reference cannot reach
    assert "| softmax — (not run) |" in advice_markdown(alone)
    nobody = head.assign(status="did not learn, 3 of 3 seeds")
    assert "no method learned (4 tried)" in advice_markdown(what_to_use(summary, nobody, refs))


def test_the_winner_is_chosen_on_validation_not_on_the_test_numbers_it_reports():
    """A made-up pair where the test-chosen and the validation-chosen winners differ: b is best on test by a hair,
    a on validation; the answer is a, and its margin over b (on test) is then positive, so never 'separated'."""
    rows = []
    for m, valid, test in (("a", [4.00, 4.01, 4.02], [4.11, 4.10, 4.12]), ("b", [4.05, 4.06, 4.07], [4.10, 4.09, 4.11]),
                           ("softmax", [5.0, 5.1, 5.2], [5.0, 5.1, 5.2])):
        for seed, v, t in zip((1, 2, 3), valid, test):
            rows += [{"dataset": "d", "vocab": 10, "method": m, "seed": seed, "split": "valid", "nll": v},
                     {"dataset": "d", "vocab": 10, "method": m, "seed": seed, "split": "test", "nll": t}]
    summary = pd.DataFrame(rows)
    test_means = summary[summary.split == "test"].groupby("method").nll.mean()
    head = pd.DataFrame({"dataset": "d", "method": ["softmax", "a", "b"], "reference": "softmax", "status": "learned",
                         "nll": [test_means[m] for m in ("softmax", "a", "b")],
                         "ppl": [math.exp(test_means[m]) for m in ("softmax", "a", "b")], "ppl_low": 0.0,
                         "ppl_high": 0.0})
    assert test_means.idxmin() == "b"  # what choosing on test would answer
    row = what_to_use(summary, head).iloc[0]
    assert row.use == "a" and row.runner_up == "b" and row.margin_nll == pytest.approx(0.01) and not row.clear
    # budget points carry their validation perplexity on the test rows (kept_valid_ppl): chosen on it too
    points = summary[summary.split == "test"].assign(kept_valid_ppl=np.exp(summary[summary.split == "valid"].nll.to_numpy()))
    assert what_to_use(points, head).iloc[0].use == "a"


def test_the_readme_glance_reads_each_publication_in_order_of_vocabulary():
    text = glance_markdown(["default", "large-vocab"])
    lines = [ln for ln in text.splitlines() if ln.startswith("| large-vocab")]
    assert [ln.split("|")[2].strip().split(" ")[0] for ln in lines] == ["zipf-10k", "zipf-100k", "zipf-1m"]
    assert "no method learned" in lines[-1] and text.count("| default |") == 2
    # large-vocab was published partial (72 of its 81 runs): each of its rows says so (the third probe: they did not)
    assert all(ln.startswith("| large-vocab (partial: 72 of 81 runs) |") for ln in lines)
    # a review's weak case: ptb-narrow is partial for two matrix fits alone, and read "partial: 12 of 12 runs"
    ptb = glance_markdown(["ptb-narrow"])
    assert "| ptb-narrow (partial: all 12 runs; missing 2: matrix) |" in ptb and "12 of 12" not in ptb


def _advice_row(dataset, vocab, multiple, **kw):
    row = {"dataset": dataset, "vocab": vocab, "multiple": multiple, "use": None, "runner_up": None, "methods": 4,
           "margin_nll": math.nan, "margin_low": math.nan, "margin_high": math.nan, "pairs": math.nan, "clear": None}
    return {**row, **kw}


def test_what_to_use_over_vocabulary_and_budget_reads_each_cell_as_sure_or_not():
    """advice.two_axes: one row per dataset in the order given, one column per budget (0.25x, 1x, 3x, 10x); each
    cell says the method and how sure: ahead with its interval, the only one that learned, not separated, none."""
    advice = pd.DataFrame([
        _advice_row("big", 1000, 0.25),  # nothing learned
        _advice_row("big", 1000, 1.0, use="a"),  # one learned
        _advice_row("big", 1000, 3.0, use="a", runner_up="b", margin_nll=-0.02, margin_low=-0.05,
                    margin_high=0.01, pairs=3, clear=False),
        _advice_row("small", 10, 1.0, use="b", runner_up="a", margin_nll=-0.1, margin_low=-0.15, margin_high=-0.05,
                    pairs=3, clear=True),
        _advice_row("small", 10, 0.5, use="a", runner_up="b", margin_nll=-0.3, pairs=1)])  # not a column
    grid = two_axes(advice)
    assert list(grid.columns) == ["dataset", "vocab", "0.25x", "1x", "3x", "10x"]
    assert list(grid.dataset) == ["big", "small"]  # the order given, not by vocabulary
    big, small = grid.iloc[0], grid.iloc[1]
    assert big["0.25x"] == "none learned (4 tried)" and big["1x"] == "**a** (the only one that learned)"
    assert big["3x"] == "a or b: not separated" and big["10x"] == "not run"
    assert small["1x"] == "**b**, -0.100 [-0.150, -0.050] vs a" and small["3x"] == "not run"
    one_pair = two_axes(advice, multiples=(0.5,)).iloc[1]["0.5x"]
    assert one_pair == "a, then b (no interval)"  # one seed pair: no claim of a margin


def test_the_two_axes_table_reads_the_committed_budget_axis_publications():
    """The README's grid from benchmarks/NAME/budget-advice.csv: each cell is that file's row at that multiple,
    with the seeds the margins pair; a publication that does not exist is one clear error."""
    text = axes_markdown(["budget-axis", "budget-axis-100k"])
    rows = {ln.split("|")[1].strip(): [c.strip() for c in ln.split("|")[2:-1]] for ln in text.splitlines()[2:]}
    assert list(rows) == ["zipf-10k (10,001), 3 seeds", "zipf-100k (100,001), 2 seeds"]
    ten = pd.read_csv(ROOT / "benchmarks" / "budget-axis" / "budget-advice.csv").set_index("multiple").loc[1.0]
    assert rows["zipf-10k (10,001), 3 seeds"][1] == (f"**{ten.use}**, {ten.margin_nll:+.3f} [{ten.margin_low:+.3f}, "
                                                     f"{ten.margin_high:+.3f}], Holm p {ten.margin_p_holm:.2g} vs "
                                                     f"{ten.runner_up}")
    hundred = rows["zipf-100k (100,001), 2 seeds"]
    assert hundred[1].endswith(": not separated") and hundred[3] == "**sampled-softmax** (the only one that learned)"
    with pytest.raises(ConfigError, match="benchmarks/no-such-run/budget-advice.csv does not exist"):
        axes_markdown(["budget-axis", "no-such-run"])
