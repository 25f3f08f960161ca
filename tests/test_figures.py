"""The headline figures read as a person reads them: labelled ticks on every axis."""
import math

import pandas as pd
import pytest

from pipeline_src.reporting import figures


def _labels(axis) -> list[str]:
    lo, hi = axis.get_view_interval()
    return [t.get_text() for t in axis.get_majorticklabels() if t.get_text() and lo <= t.get_position()[
        0 if axis.axis_name == "x" else 1] <= hi]


def test_pareto_axes_have_readable_tick_labels():
    """The default run's ranges: perplexity 94-596 (within one decade of 100 the log axis labelled only "100"),
    memory 340-350 MB (no power of ten in range: no label at all), time 4-43 s."""
    head = pd.DataFrame({"dataset": "d", "method": ["a", "b", "c", "d"], "ppl": [93.9, 125.7, 302.2, 596.2],
                         "train_time_s": [16, 5, 4, 43], "peak_mem_mb": [344.1, 345.0, 347.9, 349.2]})
    fig = figures.pareto(head, "d", figures.styles(head.assign(type=head.method)))
    fig.canvas.draw()
    time_ax, mem_ax = fig.axes[:2]
    for ax in (time_ax, mem_ax):
        assert len(_labels(ax.yaxis)) >= 3, _labels(ax.yaxis)  # e.g. 100, 200, 500
        assert len(_labels(ax.xaxis)) >= 2, _labels(ax.xaxis)
    assert all("10^" not in s and "times" not in s for s in _labels(time_ax.yaxis))  # plain numbers
    assert mem_ax.get_xscale() == "linear" and time_ax.get_xscale() == "log"
    assert "RSS on a CPU" in mem_ax.get_xlabel()  # what the number is: PyTorch's process, not the head
    # under a time budget every run trains 180 s: the time panel shows what a token cost instead
    timed = head.assign(train_time_s=[180.1, 180.0, 180.4, 181.0], tokens_reached=[1.9e5, 1.03e7, 2.75e6, 5.6e5])
    ax = figures.pareto(timed, "d", figures.styles(timed.assign(type=timed.method))).axes[0]
    assert ax.get_xlabel() == "training seconds per million tokens (the budget's clock)"
    xs = sorted(x for line in ax.lines[:4] for x in line.get_xdata())
    assert xs == pytest.approx(sorted(t / n * 1e6 for t, n in zip(timed.train_time_s, timed.tokens_reached)))


def test_the_pareto_front_joins_only_methods_that_learned():
    """A method that did not learn is cheap for nothing: drawn hollow, named so, and never on the front (at 100k
    words NEGLM, far above its unigram line, had been the front's cheapest point)."""
    head = pd.DataFrame({"dataset": "d", "method": ["a", "b", "c"], "ppl": [300.0, 320.0, 5000.0],
                         "train_time_s": [40.0, 20.0, 5.0], "peak_mem_mb": [500.0, 400.0, 300.0],
                         "status": ["learned", "learned", "did not learn, 3 of 3 seeds"]})
    for ax in figures.pareto(head, "d", figures.styles(head.assign(type=head.method))).axes[:2]:
        front = next(line for line in ax.lines if line.get_label() == "Pareto front")
        assert sorted(front.get_ydata()) == [300.0, 320.0]  # c, the cheapest, would dominate both ends otherwise
        hollow = next(line for line in ax.lines if line.get_label() == "c (did not learn)")
        assert hollow.get_markerfacecolor() == "none"
    style = figures.styles(head.assign(type=head.method))
    none = figures.pareto(head.assign(status="did not learn, 3 of 3 seeds"), "d", style)  # no front at all
    assert len(next(line for line in none.axes[0].lines if line.get_label() == "Pareto front").get_ydata()) == 0
    plain = figures.pareto(head.drop(columns="status"), "d", figures.styles(head.assign(type=head.method))).axes[0]
    assert 5000.0 in next(line for line in plain.lines if line.get_label() == "Pareto front").get_ydata()


def test_every_method_has_one_colour_and_marker_in_every_report():
    """Issue 80: hierarchical softmax was brown, blue or grey-green from one report to the next (the colours were
    handed out in the order of each run's methods). One fixed table now: the same method has the same style in
    every set of methods, and no two methods share a (colour, marker) pair."""
    from pipeline_src.reporting.style import known_methods, method_styles

    default = method_styles({"softmax": "softmax", "moc": "moc", "mos": "mos", "nce": "nce", "neglm": "neglm"})
    sweep = method_styles({m: m for m in ("softmax", "sampled-softmax", "nce", "adaptive-softmax",
                                          "hierarchical-softmax", "differentiated-softmax")})
    for m in ("softmax", "nce"):
        assert default[m] == sweep[m]
    table = method_styles(known_methods())
    assert len(table) >= 28 and len({(s["color"], s["marker"]) for s in table.values()}) == len(table)
    assert table["hierarchical-softmax"] == sweep["hierarchical-softmax"]
    # the token-axis grids' six methods each have a colour of their own (NCE and in-batch shared cyan)
    six = ("softmax", "hierarchical-softmax", "sampled-softmax", "sampled-softmax-in-batch", "nce", "adaptive-softmax")
    assert len({table[m]["color"] for m in six}) == 6
    # a method the table does not hold (a plugin, a config's variant) takes a pair no known method has
    mine = method_styles({"softmax": "softmax", "my-head": "softmax", "nce-zero-init": "nce"})
    pairs = {(s["color"], s["marker"]) for s in table.values()}
    assert mine["softmax"] == table["softmax"] and (mine["my-head"]["color"], mine["my-head"]["marker"]) not in pairs
    assert (mine["nce-zero-init"]["color"], mine["nce-zero-init"]["marker"]) not in pairs


def test_every_head_type_has_a_family():
    """A head without one was drawn in tab10's blue or orange with an X, beside the softmax's blues and the
    adaptive softmax's oranges (the large-vocabulary sweep's hierarchical and differentiated softmax)."""
    from pipeline_src.heads.base import registry
    from pipeline_src.reporting.style import FAMILY_OF, method_styles

    assert len(registry()) >= 18 and sorted(set(registry()) - set(FAMILY_OF)) == []
    sweep = {m: m for m in ("softmax", "sampled-softmax", "nce", "neglm", "neglm-b", "adaptive-softmax",
                            "hierarchical-softmax", "differentiated-softmax", "self-normalised-softmax")}
    styles = method_styles(sweep)
    assert len({(s["color"], s["marker"]) for s in styles.values()}) == 9 and "X" not in {s["marker"] for s in styles.values()}


def test_a_budgeted_dataset_s_curve_is_its_anytime_curve():
    """A 12-second budget ends inside the first epoch: the per-epoch curve would be one point per run, so the
    figures step draws validation perplexity against the budget's seconds for such a dataset, and the
    per-epoch curve for an epoch-trained one."""
    rows = []
    for ds, budget in (("budgeted", 12.0), ("epochs", None)):
        for m in ("a", "b"):
            for seed in (1, 2):
                for split in ("valid", "test"):
                    rows.append({"dataset": ds, "method": m, "type": m, "seed": seed, "split": split,
                                 "nll": 5.0 + seed / 10, "true_nll": 4.0, "budget_seconds": budget,
                                 "tokens_reached": 1000 if budget else None, "config_hash": "x"})
    summary = pd.DataFrame(rows)
    history = pd.DataFrame([{"dataset": ds, "method": m, "seed": s, "epoch": e, "valid_ppl": 300 - 10 * e}
                            for ds in ("budgeted", "epochs") for m in ("a", "b") for s in (1, 2) for e in (1, 2)])
    points = pd.DataFrame([{"dataset": "budgeted", "method": m, "seed": s, "point": k, "train_seconds": 4.0 * k,
                            "tokens": 100 * k, "valid_ppl": 400 - 20 * k} for m in ("a", "b") for s in (1, 2)
                           for k in (1, 2, 3)])
    assert figures.budgeted(summary, "budgeted") and not figures.budgeted(summary, "epochs")
    style = figures.styles(summary)
    budgeted = figures.anytime(points, summary, "budgeted", style)
    assert budgeted.axes[0].get_xlabel() == "training seconds (the budget's clock)"
    assert figures.curves(history, summary, "epochs", style).axes[0].get_xlabel() == "epoch"


def _sweep_runs():
    """Three sizes; at 10k both methods learned (softmax best), at 100k nce did not, at 1M only softmax ran."""
    import numpy as np

    nll = {("z10k", "softmax"): [5.0, 5.1, 5.2], ("z10k", "nce"): [5.3, 5.3, 5.6],
           ("z100k", "softmax"): [6.0, 6.1, 6.2], ("z100k", "nce"): [7.0, 7.2, 7.4], ("z1m", "softmax"): [8.0, 8.1, 8.2]}
    vocab = {"z10k": 10_000, "z100k": 100_000, "z1m": 1_000_000}
    unigram = {"z10k": 600.0, "z100k": 1300.0, "z1m": 4000.0}
    kept = {("z100k", "nce"): [1500.0, 1200.0, 1400.0]}  # seed 1 and 3 above the unigram line
    rows = []
    for (d, m), xs in nll.items():
        for seed, x in enumerate(xs, 1):
            k = kept.get((d, m), [100.0] * 3)[seed - 1]
            rows += [{"dataset": d, "vocab": vocab[d], "method": m, "type": m, "seed": seed, "split": split,
                      "nll": x, "kept_valid_ppl": k, "unigram_valid_ppl": unigram[d]} for split in ("valid", "test")]
    runs = pd.DataFrame(rows)
    head = []
    for (d, m), xs in nll.items():
        status = "did not learn, 2 of 3 seeds" if (d, m) in kept else "learned"
        p = float(np.exp(np.mean(xs)))
        head.append({"dataset": d, "method": m, "ppl": p, "ppl_low": p * 0.9, "ppl_high": p * 1.1, "status": status,
                     "verdict": "reference" if m == "softmax" else "better", "delta_nll": 0.0, "delta_low": None,
                     "delta_high": None, "tokens_reached": 1})
    return pd.DataFrame(head), runs


def test_the_sweep_figure_draws_each_method_against_the_best_at_each_size_and_failures_apart():
    import math

    import matplotlib
    import numpy as np
    from scipy.stats import ttest_1samp

    matplotlib.use("agg")
    from pipeline_src.reporting.figures import by_vocab
    from pipeline_src.reporting.sweep import by_size, delta_to_best

    head, runs = _sweep_runs()
    table = by_size(head, runs)
    d = delta_to_best(table, runs).set_index(["dataset", "method"])
    diff = np.array([0.3, 0.2, 0.4])  # nce − softmax at 10k, seed by seed
    ci = ttest_1samp(diff, 0.0).confidence_interval(0.95)
    assert d.loc[("z10k", "nce"), ["y", "low", "high"]].tolist() == pytest.approx([0.3, ci.low, ci.high])
    assert d.loc[("z10k", "softmax"), "y"] == 0.0 and d.loc[("z10k", "nce"), "panel"] == "learned"
    gaps = np.log([1500.0, 1200.0, 1400.0]) - math.log(1300.0)  # nce at 100k did not learn: its distance to the line
    assert d.loc[("z100k", "nce"), "panel"] == "did not learn"
    assert d.loc[("z100k", "nce"), ["y", "low", "high"]].tolist() == pytest.approx([gaps.mean(), gaps.min(), gaps.max()])
    refs = pd.DataFrame([{"dataset": "z1m", "vocab": 1_000_000, "method": "kn", "order": 3, "split": "test",
                          "ppl": math.exp(8.0), "gap_nll": 1.6}])
    style = {"softmax": {"color": "C0", "marker": "o"}, "nce": {"color": "C1", "marker": "s"}}
    fig = by_vocab(table, runs, refs, style)
    left, right = fig.axes[:2]
    nce = [ln for ln in left.get_lines() if ln.get_color() == "C1" and len(ln.get_xdata()) == 3][0]
    y = list(nce.get_ydata())  # 10k only: no line to 100k, where it did not learn, nor to 1M, where it did not run
    assert y[0] == pytest.approx(0.3) and math.isnan(y[1]) and math.isnan(y[2])
    kn = [ln for ln in left.get_lines() if ln.get_label() == "kn-3 (count-based)"][0]
    assert list(kn.get_ydata()) == pytest.approx([8.0 - 8.1])  # against the best at 1M, softmax's mean nll
    failed = [ln for ln in right.get_lines() if ln.get_color() == "C1" and len(ln.get_xdata()) == 3][0]
    assert failed.get_ydata()[1] == pytest.approx(gaps.mean())
    assert [t.get_text() for t in left.get_xticklabels()] == ["10,000", "100,000", "1,000,000"]
    assert "unigram" in right.get_ylabel() and "best" in left.get_ylabel()


def test_a_sweep_is_one_language_at_several_sizes():
    from pipeline_src.config.validation import load
    from pipeline_src.reporting.report import sweeps

    assert sweeps(load("config/large-vocab.yaml")) == [["zipf-10k", "zipf-100k", "zipf-1m"]]
    assert sweeps(load("params.yaml")) == []  # the synthetic language and the Zipfian one: two languages


def test_the_band_table_splits_each_band_by_the_chain_rule():
    from pipeline_src.reporting.report_tables import band_table

    rows = []
    for m, alloc, within in (("a", 0.1, 0.5), ("b", 0.3, 0.2)):
        for seed, shift in ((1, 0.0), (2, 0.02)):
            row = {"method": m, "seed": seed, "nll": 5.0 + alloc + within, "true_nll": 5.0,
                   "band_alloc_nll": 0.2, "band_alloc_gap": 0.01 + shift}
            for b in ("frequent", "middle", "rare"):
                row |= {f"{b}_tokens": 10, f"{b}_alloc_gap": alloc + shift, f"{b}_within_gap": within,
                        f"{b}_gap_nll": alloc + within + shift, f"{b}_ppl": 100.0}
            rows.append(row)
    t, tokens = band_table(pd.DataFrame(rows))
    assert t.method.tolist() == ["b", "a"]  # lower mean test nll first
    a = t.set_index("method").loc["a"]
    assert a["band prediction (proper)"] == pytest.approx(0.02)
    assert a["rare: gap"] == pytest.approx(a["rare: band's part"] + a["rare: within band"]) == pytest.approx(0.61)
    assert tokens == "test tokens per band: frequent 10, middle 10, rare 10"


def test_a_dozen_variants_of_two_heads_are_told_apart_by_colour_and_marker():
    from pipeline_src.reporting.style import method_styles

    first = {f"s{i}": "softmax" for i in range(6)} | {f"n{i}": "nce" for i in range(6)}
    styles = method_styles(first, [set(list(first)[:6]), set(list(first)[6:])])
    assert len({(s["color"], s["marker"]) for s in styles.values()}) == 12


def test_the_tuning_figure_draws_each_method_s_trials_against_the_rate_and_names_an_edge_pick():
    import math

    rows = []
    for m, best in (("softmax", 3), ("hs", 1)):
        for i, lr in enumerate([0.001, 0.003, 0.01, 0.03]):
            ppl = math.inf if (m == "hs" and i == 0) else 100.0 + abs(i - best) * 10
            rows.append({"dataset": "d", "method": m, "trial": i, "lr": lr, "valid_ppl": ppl, "selected": i == best,
                         "opt_clustering": ("mass", "count")[i % 2] if m == "hs" else None,
                         "lr_edge": "highest" if (m == "softmax" and i == best) else None})
    style = {"softmax": {"color": "C0"}, "hs": {"color": "C1"}}
    fig = figures.tuning_by_lr(pd.DataFrame(rows), "d", style)
    panels = [ax for ax in fig.axes if ax.axison]
    assert [ax.get_title() for ax in panels] == ["softmax (pick at the highest rate)", "hs"]
    ring = [ln for ln in panels[0].lines if ln.get_label() == "pick"][0]
    assert list(ring.get_xdata()) == [0.03] and list(ring.get_ydata()) == [100.0]
    hs = panels[1]
    assert sorted(ln.get_label() for ln in hs.lines) == ["clustering count", "clustering mass", "diverged", "pick"]
    assert sum(len(ln.get_xdata()) for ln in hs.lines if ln.get_label().startswith("clustering")) == 3  # finite ones


def test_the_tuning_figure_draws_promoted_trials_as_stars_joined_to_their_rung_0_trial():
    rows = [{"dataset": "d", "method": "nce", "trial": i, "rung": 0, "lr": lr, "valid_ppl": 200.0 - 10 * i,
             "selected": False, "opt_negatives": (50, 200)[i % 2], "lr_edge": None}
            for i, lr in enumerate([0.001, 0.003, 0.01, 0.03])]
    rows += [{"dataset": "d", "method": "nce", "trial": 4 + j, "rung": 1, "lr": lr, "valid_ppl": ppl,
              "selected": j == 0, "opt_negatives": neg, "lr_edge": None}
             for j, (lr, ppl, neg) in enumerate([(0.03, 120.0, 200), (0.01, 130.0, 50)])]
    fig = figures.tuning_by_lr(pd.DataFrame(rows), "d", {"nce": {"color": "C0"}})
    ax = [a for a in fig.axes if a.axison][0]
    stars = [ln for ln in ax.lines if ln.get_label() == "full budget"][0]
    assert list(stars.get_xdata()) == [0.03, 0.01] and list(stars.get_ydata()) == [120.0, 130.0]
    joins = [ln for ln in ax.lines if ln.get_linestyle() == ":"]
    assert sorted(tuple(ln.get_ydata()) for ln in joins) == [(170.0, 120.0), (180.0, 130.0)]  # from rung 0 up to it
    assert sum(len(ln.get_xdata()) for ln in ax.lines if ln.get_label().startswith("negatives")) == 4  # rung 0 only
    ring = [ln for ln in ax.lines if ln.get_label() == "pick"][0]
    assert list(ring.get_ydata()) == [120.0]


def test_the_dvc_plots_page_carries_vega_itself(tmp_path):
    """`dvc plots show` fills the template .dvc/config.local names: no CDN script tag is added (no {scripts}
    placeholder), and the page defines vegaEmbed itself, so it draws offline. The committed .dvc/config names no
    template: a fresh clone has none until `make setup` writes it (naming it there made every `dvc plots show`
    fail)."""
    import configparser

    from dvc_render.html import HTML

    from pipeline_src.reporting.offline_plots import TEMPLATE, name_template, write_template

    committed = configparser.ConfigParser()
    committed.read(TEMPLATE.parents[1] / "config")
    assert not committed.has_section("plots")
    template = tmp_path / ".dvc" / "plots" / "offline.html"
    (tmp_path / ".dvc" / "config.local").parent.mkdir(parents=True)
    (tmp_path / ".dvc" / "config.local").write_text("[core]\n    autostage = true\n")
    page = write_template(template).read_text(encoding="utf-8")
    cfg = configparser.ConfigParser()
    cfg.read(name_template(template))
    assert cfg["plots"]["html_template"] == "plots/offline.html" and cfg["core"]["autostage"] == "true"
    html = HTML(page).with_scripts('<script src="https://cdn.jsdelivr.net/npm/vega@5.20.2"></script>')
    html.with_element('<div id="p"></div>')
    out = html.embed()
    assert "cdn.jsdelivr" not in out and '<div id="p"></div>' in out
    assert "vegaEmbed" in out and "vegaLite" in out and len(out) > 500_000  # the libraries, inlined


def test_the_memory_table_reads_each_row_against_both_lines_of_the_topic_language():
    from pipeline_src.reporting.report_tables import memory_table

    rows = [{"method": m, "seed": s, "nll": nll, "true_nll": 4.0, "gap_nll": nll - 4.0, "memoryless_nll": 4.4,
             "memory_gap_nll": nll - 4.4, "kept_valid_ppl": math.exp(nll), "unigram_valid_ppl": 90.0}
            for m, base in (("a", 4.3), ("b", 4.6)) for s, nll in ((1, base - 0.01), (2, base + 0.01))]
    t = memory_table(pd.DataFrame(rows)).set_index("method")
    assert t.loc["a", "status"] == "learned"  # e^4.31 = 74.4 < 90 on both seeds
    assert t.loc["b", "status"] == "did not learn, 2 of 2 seeds"  # e^4.59 = 98.5 and e^4.61 at or above the line
    assert t.loc["a", "memory's worth recovered"] == "25%"  # (4.4 - 4.3) / (4.4 - 4.0)
    assert t.loc["b", "memory's worth recovered"] == "none (above the line)"  # 0.2 nats above it: nothing recovered
    assert t.loc["a", "gap to the memoryless line"].startswith("-0.100 [") and list(t.index) == ["a", "b"]


def test_a_memory_block_renders_a_topic_publications_rows_against_both_lines(tmp_path):
    from pipeline_src.io.errors import ConfigError
    from pipeline_src.reporting.tables import render_table

    rows = [{"dataset": "zipf-topics-10k", "method": m, "seed": s, "split": split, "nll": nll, "true_nll": 4.0,
             "gap_nll": nll - 4.0, "memoryless_nll": 4.4, "memory_gap_nll": nll - 4.4}
            for m, base in (("b", 4.6), ("a", 4.3)) for s, nll in ((1, base - 0.01), (2, base + 0.01))
            for split in ("valid", "test")]
    pd.DataFrame(rows).to_csv(tmp_path / "summary.csv", index=False)
    text = render_table(f"memory:{tmp_path}/summary.csv")
    assert "**zipf-topics-10k**" in text and "worth 0.400 nats/token" in text  # 4.4 - 4.0, the test rows'
    lines = [x for x in text.splitlines() if x.startswith("| a ") or x.startswith("| b ")]
    assert [x.split("|")[1].strip() for x in lines] == ["a", "b"]  # best first
    assert "| 25% |" in lines[0] and "-0.100 [" in lines[0]
    pd.DataFrame(rows).drop(columns=["memoryless_nll", "memory_gap_nll"]).to_csv(tmp_path / "summary.csv", index=False)
    with pytest.raises(ConfigError, match="memory: blocks read a topic language's summary.csv"):
        render_table(f"memory:{tmp_path}/summary.csv")
