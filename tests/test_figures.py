"""The headline figures read as a person reads them: labelled ticks on every axis."""
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


def test_every_method_has_its_own_colour_and_marker():
    from pipeline_src.reporting.style import method_styles

    mixed = method_styles({"softmax": "softmax", "moc": "moc", "mos": "mos", "nce": "nce", "neglm": "neglm"})
    assert len({(s["color"], s["marker"]) for s in mixed.values()}) == 5
    assert mixed["nce"]["marker"] == mixed["neglm"]["marker"] != mixed["mos"]["marker"]  # a family shares one
    # variants of one family only (config/sampled-init.yaml): shades of one hue with one marker were hard to
    # tell apart, so each takes its own colour and its own marker
    one = method_styles({"nce": "nce", "nce-zero-init": "nce", "neglm-b": "neglm-b", "neglm-b-nce-init": "neglm-b"})
    assert len({s["color"] for s in one.values()}) == 4 and len({s["marker"] for s in one.values()}) == 4


def test_every_head_type_has_a_family():
    """A head without one was drawn in tab10's blue or orange with an X, beside the softmax's blues and the
    adaptive softmax's oranges (the large-vocabulary sweep's hierarchical and differentiated softmax)."""
    from pipeline_src.heads.base import registry
    from pipeline_src.reporting.style import FAMILY_OF, method_styles

    assert len(registry()) >= 18 and sorted(set(registry()) - set(FAMILY_OF)) == []
    sweep = {m: m for m in ("softmax", "sampled-softmax", "nce", "neglm", "neglm-b", "adaptive-softmax",
                            "hierarchical-softmax", "differentiated-softmax", "self-normalised-softmax")}
    styles = method_styles(sweep)
    assert len({s["color"] for s in styles.values()}) == 9 and "X" not in {s["marker"] for s in styles.values()}


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


def test_the_sweep_figure_plots_each_method_s_gap_to_the_truth_across_sizes_and_the_count_based_row():
    import math

    import matplotlib

    matplotlib.use("agg")
    from pipeline_src.reporting.figures import by_vocab
    from pipeline_src.reporting.sweep import by_size

    true = {"z10k": 5.0, "z1m": 6.0}
    ppl = {("z10k", "softmax"): 400.0, ("z10k", "nce"): 500.0, ("z1m", "softmax"): 3000.0, ("z1m", "nce"): 1500.0}
    head = pd.DataFrame([{"dataset": d, "method": m, "ppl": p, "ppl_low": p * 0.9, "ppl_high": p * 1.1,
                          "verdict": "reference" if m == "softmax" else "better", "delta_nll": 0.0,
                          "delta_low": None, "delta_high": None, "tokens_reached": 1} for (d, m), p in ppl.items()])
    runs = pd.DataFrame([{"dataset": d, "vocab": {"z10k": 10_000, "z1m": 1_000_000}[d], "method": m, "seed": 1,
                          "split": "test", "true_nll": true[d], "type": m} for d, m in ppl])
    refs = pd.DataFrame([{"dataset": "z1m", "vocab": 1_000_000, "method": "kn", "order": 3, "split": "test",
                          "ppl": 2000.0, "gap_nll": 1.6}])
    style = {"softmax": {"color": "C0", "marker": "o"}, "nce": {"color": "C1", "marker": "s"}}
    ax = by_vocab(by_size(head, runs), runs, refs, style).axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    nce = [line for line in ax.get_lines() if line.get_color() == "C1" and len(line.get_ydata()) == 2][0]
    assert list(nce.get_ydata()) == pytest.approx([math.log(500.0) - 5.0, math.log(1500.0) - 6.0])
    assert list(lines["kn-3 (count-based)"].get_ydata()) == [1.6]
    assert "true nll" in ax.get_ylabel() and [t.get_text() for t in ax.get_xticklabels()] == ["10,000", "1,000,000"]
    blind = runs.drop(columns="true_nll")  # no truth (real text): the perplexity itself, on a log axis
    ax = by_vocab(by_size(head, blind), blind, None, style).axes[0]
    nce = [line for line in ax.get_lines() if line.get_color() == "C1" and len(line.get_ydata()) == 2][0]
    assert list(nce.get_ydata()) == [500.0, 1500.0] and ax.get_yscale() == "log" and ax.get_ylabel() == "test perplexity"


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
