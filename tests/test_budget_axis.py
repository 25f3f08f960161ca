"""The budget as an axis (pipeline_src/reporting/budget_axis.py): the ranking at each multiple of the sweep's budget
read as the headline reads it, the crossover of a pair with its interval, the power-law fits with their held-out
error and the GPU-hours, each against a hand computation."""
import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import ttest_1samp

from pipeline_src.reporting import budget_axis as ba

MULTIPLES = [0.25, 1.0, 3.0, 10.0]


def _runs(curves: dict, noise=(0.0, 0.01, -0.01)) -> pd.DataFrame:
    """anytime.csv's budget-point rows and summary.csv's valid rows for methods whose test nll at each multiple is
    ``curves[method]`` plus a per-seed offset."""
    points, valid = [], []
    for m, ys in curves.items():
        for seed, e in enumerate(noise, 1):
            for x, y in zip(MULTIPLES, ys):
                points.append({"dataset": "d", "method": m, "seed": seed, "multiple": x, "tokens": int(1000 * x),
                               "test_nll": y + e, "valid_ppl": math.exp(y + e)})
            valid.append({"dataset": "d", "method": m, "seed": seed, "split": "valid", "type": "softmax",
                          "unigram_valid_ppl": math.exp(6.0)})
    return ba.point_runs(pd.DataFrame(points), pd.DataFrame(valid))


def test_the_ranking_at_each_budget_is_the_headline_of_the_runs_as_they_stood_there():
    runs = _runs({"softmax": [5.8, 5.4, 5.0, 4.6], "nce": [5.3, 5.1, 5.05, 5.0], "late": [6.5, 5.9, 5.5, 5.2]})
    r = ba.ranking(runs, "softmax").set_index(["multiple", "method"])
    assert r.loc[(1.0, "nce"), "ppl"] == pytest.approx(math.exp(5.1))  # exp of the mean nll over seeds
    # nce − softmax at 0.25x: −0.5 on every seed (no spread): better; at 10x +0.4: worse
    assert r.loc[(0.25, "nce"), "delta_nll"] == pytest.approx(-0.5) and r.loc[(0.25, "nce"), "verdict"] == "better"
    assert r.loc[(10.0, "nce"), "verdict"] == "worse"
    # "late" sits above its unigram line (e^6) at 0.25x: at that budget it did not learn and gets no verdict
    assert r.loc[(0.25, "late"), "status"].startswith("did not learn") and r.loc[(1.0, "late"), "status"] == "learned"


def test_a_crossover_is_where_the_paired_difference_changes_sign_with_the_budgets_that_hold_zero():
    runs = _runs({"softmax": [5.8, 5.4, 5.0, 4.6], "nce": [5.3, 5.2, 5.1, 5.0]}, noise=(0.0, 0.05, -0.04))
    c = ba.crossover(runs, "d", "softmax", "nce")
    # softmax − nce: +0.5, +0.2, −0.1, −0.4 (the seeds' offsets cancel in the pair): the mean crosses 0 between
    # 1x and 3x, a third of the way in log budget from 3x: 3^(2/3)
    assert c["leader"] == "softmax" and c["separated"] and c["at"] == pytest.approx(3 ** (2 / 3))
    assert c["low"] == c["high"] == c["at"]  # no spread over seeds: the interval is the crossing itself
    # with spread, the interval is where the t interval holds 0, found on the log-linear joins by hand
    rng = np.random.default_rng(0)
    noisy = _runs({"softmax": [5.8, 5.4, 5.0, 4.6], "nce": [5.3, 5.2, 5.1, 5.0]})
    noisy.loc[noisy.method == "softmax", "nll"] += rng.normal(0, 0.1, (noisy.method == "softmax").sum())
    c = ba.crossover(noisy, "d", "softmax", "nce")
    own = noisy.set_index(["method", "multiple", "seed"]).nll.sort_index()
    ci = {x: ttest_1samp((own.loc[("softmax", x)] - own.loc[("nce", x)]).to_numpy(), 0).confidence_interval()
          for x in MULTIPLES}
    xs = np.log(MULTIPLES)
    grid = np.linspace(xs[0], xs[-1], 200001)
    lo = np.interp(grid, xs, [ci[x].low for x in MULTIPLES])
    hi = np.interp(grid, xs, [ci[x].high for x in MULTIPLES])
    inside = np.exp(grid[(lo <= 0) & (hi >= 0)])
    assert c["low"] == pytest.approx(max(inside.min(), 0.25), rel=2e-3)
    assert (c["high"] or 10.0) == pytest.approx(inside.max(), rel=2e-3)
    assert c["low"] <= c["at"] <= (c["high"] or 10.0)
    assert ba.crossover_text(c) == (f"softmax overtakes nce at {c['at']:.2g}x [{c['low']:.2g}x, {c['high']:.2g}x] "
                                    f"and stays ahead to 10x")


def test_no_crossover_is_claimed_where_the_leader_is_not_separated_at_the_largest_budget():
    runs = _runs({"a": [5.0, 4.9, 4.8, 4.7], "b": [5.2, 5.0, 4.85, 4.71]}, noise=(0.0, 0.0, 0.0))
    runs.loc[runs.method == "a", "nll"] += np.tile([0.0, 0.03, -0.03], 4)  # a's seeds spread by ±0.03
    c = ba.crossover(runs, "d", "a", "b")  # a − b: −0.2, −0.1, −0.05, −0.01 on the mean; at 10x within its spread
    assert c["leader"] == "a" and c["at"] is None and not c["separated"]
    assert ba.crossover_text(c) == "a vs b: not separated at 10x (a ahead by the mean): no crossover within 10x"


def test_the_power_law_fit_recovers_its_curve_and_reports_its_held_out_error():
    xs = np.array([0.25, 0.5, 1, 2, 3, 5, 10])
    truth = ba.power_law(xs, 4.0, 1.2, 0.6)
    fit = ba.fit_curve(xs, truth)
    assert fit["params"] == pytest.approx({"floor": 4.0, "scale": 1.2, "alpha": 0.6}, rel=1e-4)
    assert [h["multiple"] for h in fit["held_out"]] == [5.0, 10.0]
    assert all(abs(h["error"]) < 1e-4 for h in fit["held_out"])
    bent = truth + np.where(xs >= 5, 0.05, 0.0)  # the last two points above the curve: the fit misses them by 0.05
    assert [h["error"] for h in ba.fit_curve(xs, bent)["held_out"]] == pytest.approx([-0.05, -0.05], abs=2e-3)
    other = {"params": {"floor": 4.3, "scale": 0.3, "alpha": 0.6}}
    at = ba.extrapolated_crossover(fit, other, 2.0)  # 4 + 1.2 x^-0.6 = 4.3 + 0.3 x^-0.6  at  x = 3^(1/0.6)
    assert at == pytest.approx(3 ** (1 / 0.6), rel=1e-6) and ba.extrapolated_crossover(fit, other, 100.0) is None


def test_gpu_hours_from_measured_throughput_and_from_the_published_dense_rate():
    rows = ba.gpu_hours(2.5e6, [1, 10, 100], tokens_per_s=250_000, flops_per_token=6e6)
    assert [r["measured_h"] for r in rows] == pytest.approx([10 / 3600, 100 / 3600, 1000 / 3600])
    assert rows[2]["floor_h"] == pytest.approx(100 * 2.5e6 * 6e6 / 989.4e12 / 3600)


def test_the_budget_figure_draws_each_method_s_mean_over_seeds_against_the_multiple():
    import matplotlib

    matplotlib.use("agg")
    from pipeline_src.reporting import figures

    runs = _runs({"softmax": [5.8, 5.4, 5.0, 4.6], "nce": [5.3, 5.1, 5.05, 5.0]})
    summary = pd.DataFrame({"dataset": "d", "split": "test", "true_nll": [4.0]})
    refs = pd.DataFrame([{"dataset": "d", "split": "test", "method": "kn", "order": 3, "ppl": 150.0}])
    style = {"softmax": {"color": "C0", "marker": "o"}, "nce": {"color": "C1", "marker": "s"}}
    ax = figures.budget_curves(runs, summary, refs, "d", style).axes[0]
    nce = [ln for ln in ax.get_lines() if ln.get_label() == "nce"][0]
    assert list(nce.get_xdata()) == MULTIPLES
    assert list(nce.get_ydata()) == pytest.approx(np.exp([5.3, 5.1, 5.05, 5.0]))  # the seeds' offsets cancel
    labels = [ln.get_label() for ln in ax.get_lines()]
    assert "kn-3 (count-based)" in labels and "truth" in labels and "unigram (valid)" in labels
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0.25x", "1x", "3x", "10x"]
    assert ax.get_ylim()[1] < math.exp(6.0) * 1.25 and not ax.texts  # every mean below the unigram: nothing clipped
    # a method far above the unigram line at its first budget (WikiText-2's NCE at 0.5M: 166k against 1,000) would
    # squeeze every learned curve into the axis's bottom: the axis ends at 1.25x the unigram's and says what it left off
    runs = _runs({"softmax": [5.8, 5.4, 5.0, 4.6], "nce": [12.0, 5.1, 5.05, 5.0]})
    ax = figures.budget_curves(runs, summary, refs, "d", style).axes[0]
    assert ax.get_ylim()[1] == pytest.approx(math.exp(6.0) * 1.25)
    assert [t.get_text() for t in ax.texts] == ["1 mean(s) above 504 (1.25x the unigram's), off the axis: did not learn"]


def test_what_to_use_at_each_budget_is_the_best_learned_method_there_with_its_paired_margin():
    from pipeline_src.reporting.advice import what_to_use_by_budget

    runs = _runs({"softmax": [6.3, 5.4, 5.0, 4.6], "nce": [5.3, 5.1, 5.05, 5.0]}, noise=(0.0, 0.02, -0.01))
    runs.loc[runs.method == "softmax", "nll"] += np.tile([0.0, 0.01, 0.0, 0.02], 3)  # spread within the pair
    table = what_to_use_by_budget(runs, ba.ranking(runs, "softmax")).set_index("multiple")
    assert table.loc[0.25, "use"] == "nce" and table.loc[0.25, "learned"] == 1  # softmax above e^6: not learned
    assert table.loc[1.0, "use"] == "nce" and table.loc[1.0, "runner_up"] == "softmax"
    assert table.loc[10.0, "use"] == "softmax"
    d = runs.set_index(["method", "multiple", "seed"]).nll.sort_index()
    diff = (d.loc[("softmax", 10.0)] - d.loc[("nce", 10.0)]).to_numpy()
    ci = ttest_1samp(diff, 0).confidence_interval()
    assert table.loc[10.0, ["margin_nll", "margin_low", "margin_high"]].tolist() == pytest.approx(
        [diff.mean(), ci.low, ci.high])


def test_the_gpu_table_reads_the_bench_s_measured_rate_and_the_published_floor():
    cells = pd.DataFrame({"dataset": ["z", "z"], "method": ["softmax", "nce"], "tokens_per_s": [250_000.0, 300_000.0]})
    assert ba.lstm_flops_per_token(64, 64) == 24 * 64 * 128
    t = ba.gpu_table(cells, "z", {"softmax": 2.5e6, "nce": 2.5e7}, {"softmax": 3.9e6, "nce": 0.2e6},
                     {"emb_dim": 64, "hidden_dim": 64, "layers": 1}).set_index(["method", "multiple"])
    assert t.loc[("nce", 10.0), "measured_h"] == pytest.approx(2.5e8 / 300_000 / 3600)
    assert t.loc[("softmax", 100.0), "floor_h"] == pytest.approx(2.5e8 * (3.9e6 + 24 * 64 * 128) / 989.4e12 / 3600)


def test_a_gpu_table_with_nothing_timed_is_one_line_with_its_floors():
    """gpu-hours.csv of a dataset the GPU bench has no cell for: one line (which bench, and what the FLOPs floor puts
    1x at), not a table whose every cell says "not timed"; where one budget was measured, the table."""
    from pipeline_src.reporting.report_tables import gpu_hours_unmeasured
    from pipeline_src.reporting.tables import gpu_hours_markdown

    g = pd.DataFrame({"dataset": "w", "method": ["softmax", "softmax", "nce", "nce"], "multiple": [1.0, 10.0] * 2,
                      "measured_h": float("nan"), "floor_h": [2e-6, 2e-5, 5e-7, 5e-6], "gpu_cells": "b/cells.csv"})
    line = gpu_hours_unmeasured(g)
    assert line.startswith("not timed on the GPU: `b/cells.csv` has no cell at these shapes")
    assert "1x at 1.8 ms (nce) to 7.2 ms (softmax)" in line  # 5e-7 h and 2e-6 h
    assert gpu_hours_markdown(g) == f"**w**: {line}\n" and "|" not in gpu_hours_markdown(g)
    timed = g.assign(measured_h=[1e-5, 1e-4, float("nan"), float("nan")])
    assert gpu_hours_unmeasured(timed) is None and "| softmax |" in gpu_hours_markdown(timed)


def test_summarize_s_axis_tables_carry_the_crossovers_fits_and_gpu_hours_of_the_runs(tmp_path, monkeypatch):
    """axis_tables (what summarize writes): the crossovers are budget_axis.crossover's, each pair of methods that
    learned at the largest budget once; the fits' held-out errors are fit_curve's; the GPU-hours read 1x as the
    tokens of the 1x points and the runs' own head FLOPs, at the rate of the named cell bench."""
    from pipeline_src.config import ConfigError
    from pipeline_src.reporting import tables
    from pipeline_src.reporting.axis_tables import axis_tables

    curves = {"softmax": [5.8, 5.4, 5.0, 4.6], "nce": [5.3, 5.2, 5.1, 5.0], "late": [6.5, 6.3, 6.2, 6.1]}
    runs = _runs(curves)
    anytime = runs.rename(columns={"nll": "test_nll"}).assign(valid_ppl=runs.kept_valid_ppl)
    summary = pd.concat([runs.assign(split="valid"), runs.assign(split="test", head_flops_per_token_train=1e6)])
    summary = summary[summary.multiple == 1.0].drop(columns=["multiple", "tokens"])
    cells = tmp_path / "cell-bench.csv"
    pd.DataFrame({"dataset": ["d"], "method": ["nce"], "tokens_per_s": [2.0e5]}).to_csv(cells, index=False)
    params = {"statistics": {"reference": "softmax", "confidence": 0.95, "gpu_cells": str(cells)},
              "model": {"emb_dim": 64, "hidden_dim": 64, "layers": 1, "dropout": 0.0, "tie_weights": False},
              "datasets": {"d": {}}}
    t = axis_tables(anytime, summary, pd.DataFrame(columns=["dataset", "split", "ppl"]), params)
    pairs = t["crossovers.csv"]
    assert pairs[["a", "b"]].values.tolist() == [["softmax", "nce"]]  # "late" never beats e^6: not learned at 10x
    c = ba.crossover(runs, "d", "softmax", "nce")
    assert pairs["at"].iloc[0] == pytest.approx(c["at"])
    assert pairs.text.iloc[0] == ba.crossover_text(c)
    fits = t["budget-fits.csv"]
    assert set(fits.method) == {"softmax", "nce"} and fits.held_out_error.isna().all()  # 4 points: none to hold out
    gpu = t["gpu-hours.csv"].set_index(["method", "multiple"])
    assert gpu.loc[("nce", 10.0), "measured_h"] == pytest.approx(10 * 1000 / 2.0e5 / 3600)
    assert math.isnan(gpu.loc[("softmax", 1.0), "measured_h"])  # not in the cell bench
    assert gpu.loc[("softmax", 100.0), "floor_h"] == pytest.approx(
        100 * 1000 * (1e6 + 24 * 64 * 128) / 989.4e12 / 3600)
    for name, frame in t.items():  # as a publication holds them, rendered for the docs by file name
        frame.to_csv(tmp_path / name, index=False)
    monkeypatch.setattr(tables, "REPOSITORY", tmp_path)
    ranking = tables.render_table("budget-ranking.csv").splitlines()
    assert ranking[2] == "| budget | softmax | nce | late |"  # the best at the largest budget first
    row = next(r for r in ranking if r.startswith("| 10x |"))
    r = t["budget-ranking.csv"].set_index(["method", "multiple"])
    assert row.split(" | ")[2].startswith(f"{r.loc[('nce', 10.0), 'ppl']:.1f} [")
    assert row.split(" | ")[2].endswith("(worse)")  # 10x: softmax ahead
    assert tables.render_table("crossovers.csv").strip() == f"- d: {pairs.text.iloc[0]}" + (
        "" if pd.isna(pairs.fits_cross_at.iloc[0]) else f"; the fits cross at {pairs.fits_cross_at.iloc[0]:.3g}x "
                                                        "(extrapolated)")
    advice = tables.render_table("budget-advice.csv")
    assert "d at 0.25x" in advice and "d at 10x" in advice
    hours = tables.render_table("gpu-hours.csv")
    assert "50 ms (floor" in hours  # nce at 10x: 10,000 tokens at 200,000 a second, then its FLOPs floor
    params["statistics"]["gpu_cells"] = str(tmp_path / "missing.csv")
    with pytest.raises(ConfigError, match="statistics.gpu_cells names .*missing.csv"):
        axis_tables(anytime, summary, pd.DataFrame(columns=["dataset", "split", "ppl"]), params)


def test_a_crossover_is_read_only_at_the_budgets_where_both_methods_learned():
    """A run above its unigram line at a budget is no evidence there: each pair of methods that learned somewhere is
    read at the budgets where both learned (the softmax from 1x, "over" to 3x: it overfits past its line by 10x);
    "brief" learned at 0.25x only and pairs with nothing; fits (and their crossing) are for methods that learned
    at the largest budget."""
    from pipeline_src.reporting.axis_tables import _pairs_and_fits

    runs = _runs({"softmax": [6.3, 5.4, 5.0, 4.6], "nce": [5.3, 5.2, 5.1, 5.0], "over": [5.0, 5.1, 5.5, 6.2],
                  "brief": [5.9, 6.1, 6.2, 6.3]})
    pairs, fits = _pairs_and_fits(runs, ba.ranking(runs, "softmax"), "d", 0.95)
    got = {(r["a"], r["b"]): r for r in pairs}
    assert list(got)[:3] == [("softmax", "nce"), ("softmax", "over"), ("softmax", "brief")]  # 10x's order
    for (a, b), shared in {("softmax", "nce"): [1.0, 3.0, 10.0], ("softmax", "over"): [1.0, 3.0],
                           ("nce", "over"): [0.25, 1.0, 3.0]}.items():
        c = ba.crossover(runs[runs.multiple.isin(shared)], "d", a, b)
        assert (got[a, b]["from"], got[a, b]["to"]) == (shared[0], shared[-1])
        assert got[a, b]["at"] == pytest.approx(c["at"]) and got[a, b]["leader"] == c["leader"]
        assert got[a, b]["text"] == ba.crossover_text(c) + " (read at the budgets where both learned: " + ", ".join(
            f"{m:g}x" for m in shared) + ")"
    assert got["nce", "over"]["leader"] == "nce" and 1.0 < got["nce", "over"]["at"] < 3.0  # at 10x: "over" only
    assert got["nce", "brief"]["leader"] is None and got["nce", "brief"]["text"].endswith(
        "both learned at 1 budget(s) only: no crossover read")
    assert got["softmax", "nce"]["fits_cross_at"] is None or got["softmax", "nce"]["fits_cross_at"] > 10.0
    assert got["nce", "over"]["fits_cross_at"] is None  # "over" did not learn at 10x: no fit to extrapolate
    assert {f["method"] for f in fits} == {"softmax", "nce"}


def test_equal_seconds_on_a_gpu_read_each_curve_at_the_multiple_those_seconds_buy_it():
    """gpu_equal_time: G GPU seconds buy a method G · tokens/s / its 1x tokens of its own multiples; each seed's
    nll there is the log-linear interpolation of its measured points; only the window of G where every method is
    within its measured multiples is read (here 2.5-10 s: softmax's 0.25x and NCE's 10x)."""
    runs = _runs({"softmax": [5.8, 5.4, 5.0, 4.6], "nce": [5.3, 5.2, 5.1, 5.0]})
    cells = pd.DataFrame({"dataset": ["d", "d"], "method": ["softmax", "nce"], "tokens_per_s": [100.0, 1000.0]})
    eq = ba.gpu_equal_time(runs, cells, "d", {"softmax": 1000.0, "nce": 1000.0})  # 10 s and 1 s per multiple
    assert sorted(eq.gpu_seconds.unique()) == pytest.approx([2.5, 5.0, 10.0])
    at5 = eq[np.isclose(eq.gpu_seconds, 5.0)].set_index(["method", "seed"])
    assert at5.loc[("softmax", 1), "multiple"] == pytest.approx(0.5) and at5.loc[("nce", 1), "multiple"] == pytest.approx(5)
    assert at5.loc[("softmax", 2), "nll"] == pytest.approx(5.8 + 0.5 * (5.4 - 5.8) + 0.01)  # halfway in log x
    t = math.log(5 / 3) / math.log(10 / 3)
    assert at5.loc[("nce", 3), "nll"] == pytest.approx(5.1 + t * (5.0 - 5.1) - 0.01)
    ranked = ba.ranking_at_gpu_time(eq, "softmax")
    r5 = ranked[np.isclose(ranked.gpu_seconds, 5.0)].set_index("method")
    assert r5.loc["nce", "multiple"] == pytest.approx(5.0)
    assert r5.loc["nce", "delta_nll"] == pytest.approx(5.1 + t * (5.0 - 5.1) - 5.6)
    slow = cells.assign(tokens_per_s=[100.0, 10.0])  # NCE 100 s a multiple: the window moves to 25-100 s
    assert ba.gpu_equal_time(runs, slow, "d", {"softmax": 1000.0, "nce": 1000.0}).gpu_seconds.min() == pytest.approx(25)
    apart = cells.assign(tokens_per_s=[1.0, 1000.0])  # softmax 1000 s a multiple: no common window
    assert ba.gpu_equal_time(runs, apart, "d", {"softmax": 1000.0, "nce": 1000.0}).empty


def test_the_axis_states_nothing_it_has_no_evidence_for():
    """One paired seed states no crossover; a point without its test score is left out and an infinite one kept
    (the fit skips it); a stand-in reference is chosen on the points' validation nll, not on test; 1x is read
    without a 1x point; a seed whose points stop short narrows the GPU window (no curve is extended); and a GPU
    window that does not exist gives an empty table with its columns."""
    from pipeline_src.reporting import tables
    from pipeline_src.reporting.axis_tables import _unit_tokens

    one = _runs({"softmax": [5.8, 5.4, 5.0, 4.6], "nce": [5.3, 5.2, 5.1, 5.0]}, noise=(0.0,))
    c = ba.crossover(one, "d", "softmax", "nce")
    assert not c["separated"] and "one paired seed" in ba.crossover_text(c)

    pts = pd.DataFrame([{"dataset": "d", "method": "nce", "seed": s, "multiple": x, "tokens": 1000 * x,
                         "test_nll": y, "valid_ppl": 200.0} for s, x, y in
                        [(1, 1.0, 5.0), (2, 1.0, math.nan), (3, 1.0, math.inf)]])
    runs = ba.point_runs(pts, pd.DataFrame(columns=["dataset", "method", "seed", "split"]))
    assert sorted(runs.seed) == [1, 3] and math.isinf(runs.nll.max())
    f = ba.fit_curve([0.25, 1, 3, 10, 30], [5.8, 5.4, 5.0, math.inf, 4.5], hold_out=0)
    assert f["points"] == 4 and f["params"] is not None

    # softmax above its unigram line at 0.25x; neglm's validation is the better, nce's test the better
    rows = _runs({"softmax": [6.5, 5.4, 5.0, 4.6], "nce": [5.3, 5.2, 5.1, 5.0], "neglm": [5.35, 5.3, 5.2, 5.1]})
    rows.loc[(rows.method == "neglm") & (rows.multiple == 0.25), "kept_valid_ppl"] = math.exp(5.0)
    at = ba.ranking(rows, "softmax").query("multiple == 0.25").set_index("method")
    assert at.loc["neglm", "verdict"] == "reference" and at.loc["nce", "verdict_reference"] == "neglm"

    no_1x = rows[rows.multiple != 1.0]
    assert _unit_tokens(no_1x) == pytest.approx({"softmax": 1000.0, "nce": 1000.0, "neglm": 1000.0}, rel=1e-3)

    cells = pd.DataFrame({"dataset": "d", "method": ["softmax", "nce"], "tokens_per_s": [100.0, 1000.0]})
    short = _runs({"softmax": [5.8, 5.4, 5.0, 4.6], "nce": [5.3, 5.2, 5.1, 5.0]})
    short = short[~((short.method == "nce") & (short.seed == 3) & (short.multiple == 10.0))]  # nce seed 3 stops at 3x
    eq = ba.gpu_equal_time(short, cells, "d", {"softmax": 1000.0, "nce": 1000.0})
    # the window ends at NCE seed 3's 3x (1 s a multiple), not at its other seeds' 10x: 2.5-3 s, narrower than a
    # factor of 2, so one budget at its middle
    assert eq.gpu_seconds.unique().tolist() == pytest.approx([math.sqrt(2.5 * 3.0)])
    apart = cells.assign(tokens_per_s=[1.0, 1000.0])
    empty = ba.ranking_at_gpu_time(ba.gpu_equal_time(short, apart, "d", {"softmax": 1000.0, "nce": 1000.0}), "softmax")
    assert empty.empty and "gpu_seconds" in empty
    assert tables.gpu_equal_time_markdown(empty).startswith("*No GPU budget")


def test_a_method_whose_ladder_stops_lower_reads_not_trained_above_its_top():
    from pipeline_src.reporting.report_tables import budget_ranking_table

    rows = [{"method": m, "multiple": x, "ppl": p, "ppl_low": p - 1, "ppl_high": p + 1, "nll": math.log(p),
             "verdict": v, "verdict_reference": "a"}
            for m, x, p, v in [("a", 0.5, 100.0, "reference"), ("a", 1.0, 90.0, "reference"),
                               ("capped", 0.5, 120.0, "worse")]]
    t = budget_ranking_table(pd.DataFrame(rows), "a", 95).set_index("budget")
    assert t.loc["1x", "capped"] == "not trained"  # no run at 1x: said so, not an empty cell
    assert t.loc["0.5x", "capped"].endswith("(worse)") and t.loc["1x", "a"].endswith("(reference)")
