"""The headline figures of one dataset, drawn from the result tables only: the forest plot of paired
differences against the reference, quality against cost (time and memory, with the Pareto front) and the
validation learning curves. The report notebook shows them inline; the `figures` step writes the same
figures as SVG files, which Snakemake's own report (`snakemake --report`) carries with captions."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from ..io import paths
from ..io.artifacts import read_csv
from ..io.atomic import atomic_path
from .stats import learned_methods
from .style import family_legend, method_styles, pareto_front

FIGURES = paths.FIGURES  # one SVG each per dataset, in results/figures/<dataset>/


def _plt():
    import matplotlib.pyplot as plt  # the notebook's inline backend, or agg (set by write)

    return plt


def styles(summary: pd.DataFrame) -> dict[str, dict]:
    """One colour and marker per method of the run, the same in every figure."""
    return method_styles(dict(zip(summary.method, summary.type)),
                         [set(g.method) for _, g in summary.groupby("dataset")] if "dataset" in summary else None)


def forest(head: pd.DataFrame, dataset: str, level: int, style: dict):
    """Mean paired test-nll difference against the reference with its interval, one line per method.
    ``None`` when the reference is not in the run (nothing is paired)."""
    plt = _plt()
    own = head[head.dataset == dataset]
    reference = head.reference.iloc[0]
    if "verdict_reference" in own and own.verdict_reference.notna().any():  # a stand-in: the reference did not learn
        reference = own.verdict_reference.dropna().iloc[0]
    h = own[own.method != reference].dropna(subset=["delta_nll"])
    h = h.sort_values("delta_nll", ascending=False)
    if h.empty:
        return None
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(h) + 1.2))
    finite = h[np.isfinite(h.delta_nll)]
    lo = min([0.0, *finite.delta_nll, *finite.delta_low.dropna()])
    hi = max([0.0, *finite.delta_nll, *finite.delta_high[np.isfinite(finite.delta_high)]])
    edge = hi + 0.15 * ((hi - lo) or 1.0)  # where an infinite difference is drawn
    for i, r in enumerate(h.itertuples()):
        st = style[r.method]
        if not math.isfinite(r.delta_nll):  # a word scored probability 0: drawn at the edge, said in words
            ax.plot(edge, i, marker=">", color=st["color"], ms=8, mec="k", mew=0.5)
            ax.annotate("+∞ (a test word scored probability 0)", (edge, i), xytext=(-6, 0),
                        textcoords="offset points", ha="right", va="center", fontsize=8)
            continue
        if not math.isnan(r.delta_low) and math.isfinite(r.delta_high):
            ax.plot([r.delta_low, r.delta_high], [i, i], color=st["color"], lw=2)
        ax.plot(r.delta_nll, i, marker=st["marker"], color=st["color"], ms=8, mec="k", mew=0.5)
    ax.axvline(0, color="k", lw=1)
    extra = {f"{level}% interval over seeds": {"color": "0.45", "lw": 2}}
    if not np.isfinite(h.delta_nll).all():
        extra["+∞ (a test word scored probability 0)"] = {"marker": ">", "color": "0.45", "mec": "k", "ls": ""}
    family_legend(ax, style, list(h.method), **extra)
    ax.set_yticks(range(len(h)))
    ax.set_yticklabels(h.method)
    ax.set_xlabel(f"test nll − {reference} test nll (nats/token), {level}% interval over seeds")
    ax.set_title(dataset)
    fig.tight_layout()
    return fig


def no_forest(head: pd.DataFrame, dataset: str) -> str:
    """Why a dataset has no forest plot (``forest`` gave ``None``), in one line."""
    reference = head.reference.iloc[0]
    if reference not in set(head[head.dataset == dataset].method):
        return f"{dataset}: no paired reference ({reference} is not in this run)"
    return f"{dataset}: no method has a paired difference against {reference} (no other method, or no shared seeds)"


def pareto(head: pd.DataFrame, dataset: str, style: dict):
    """Mean test perplexity against training time and against peak memory; the Pareto front joined, over the
    methods that learned (a row that did not is drawn hollow: cheap is no merit there). Under a time budget every
    run trains for the same time: the first panel then shows what a training token cost."""
    plt = _plt()
    h = head[head.dataset == dataset]
    learned = learned_methods(h)
    time = ("train_time_s", "training time per run (s)")
    if "tokens_reached" in h and len(h) and h.tokens_reached.notna().all():
        h = h.assign(s_per_mtok=h.train_time_s / h.tokens_reached * 1e6)
        time = ("s_per_mtok", "training seconds per million tokens (the budget's clock)")
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, col, label in ((axes[0], *time),
                           (axes[1], "peak_mem_mb", "peak memory (MB): the process's RSS on a CPU, tensors on a GPU")):
        for r, ok in zip(h.itertuples(), learned):
            st = style[r.method]
            ax.plot(getattr(r, col), r.ppl, marker=st["marker"], color=st["color"], ms=9, ls="",
                    mec="k" if ok else st["color"], mew=0.5 if ok else 1.5, mfc=st["color"] if ok else "none",
                    label=r.method if ok else f"{r.method} (did not learn)")
        did = h[learned.to_numpy(bool)]
        f = did[pareto_front(did[col], did.ppl).to_numpy(bool)].sort_values(col)  # none learned: no front
        ax.plot(f[col], f.ppl, "k--", lw=1, label="Pareto front")
        _readable_axis(ax.xaxis, ax.set_xscale, h[col])
        _readable_axis(ax.yaxis, ax.set_yscale, h.ppl)
        ax.set_xlabel(label)
        ax.set_ylabel("test perplexity")
    axes[0].set_title(dataset)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    fig.tight_layout()
    return fig


def _readable_axis(axis, set_scale, values: pd.Series) -> None:
    """A log axis with labelled ticks at 1, 2 and 5 times powers of ten (finer within one decade), in plain
    numbers (not 3.4 x 10^2);
    a linear one when the values span less than a factor of 4 (a log axis would show one tick, or none)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

    v = values.dropna()
    v = v[v > 0]
    if len(v) and v.max() / v.min() < 4:
        set_scale("linear")
        axis.set_major_locator(MaxNLocator(5))
    else:
        set_scale("log")  # within a decade, 1, 2 and 5 label too little: finer steps
        subs = (1.0, 2.0, 5.0) if v.max() / v.min() >= 10 else (1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0)
        axis.set_major_locator(LogLocator(base=10, subs=subs))
        axis.set_minor_formatter(NullFormatter())
    axis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))


def _ppl_bands(ax, frame: pd.DataFrame, by: str, x: str, style: dict) -> None:
    """Per method, the mean over seeds of ``valid_ppl`` (and of ``x``) at each ``by``, with a band from the
    lowest to the highest seed."""
    for m, g in frame.groupby("method", sort=False):
        st = style[m]
        agg = g.groupby(by).agg(x=(x, "mean"), mean=("valid_ppl", "mean"), low=("valid_ppl", "min"),
                                high=("valid_ppl", "max"))
        ax.plot(agg.x, agg["mean"], color=st["color"], marker=st["marker"], ms=5, mec="k", mew=0.4,
                label=m)  # markers big enough to tell two methods of one colour apart (the pair is unique)
        ax.fill_between(agg.x, agg.low, agg.high, color=st["color"], alpha=0.2, lw=0)


def _valid_ppl_figure(frame: pd.DataFrame, summary: pd.DataFrame, dataset: str, style: dict, by: str, x: str,
                      xlabel: str, ylabel: str, truth_label: str):
    """Validation perplexity curves of one dataset with the synthetic language's true valid perplexity as a
    dashed line (``curves`` per epoch, ``anytime`` per budget point)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 4.2))
    own = frame[frame.dataset == dataset]
    _ppl_bands(ax, own, by, x, style)
    truth = summary[(summary.dataset == dataset) & (summary.split == "valid")]
    truth = truth.true_nll.dropna() if "true_nll" in truth else pd.Series(dtype=float)
    shown = own.valid_ppl
    if len(truth):
        ax.axhline(math.exp(float(truth.iloc[0])), color="k", ls="--", label=truth_label)
        shown = pd.concat([shown, pd.Series([math.exp(float(truth.iloc[0]))])])
    _readable_axis(ax.yaxis, ax.set_yscale, shown)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(dataset)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8)
    fig.tight_layout()
    return fig


def curves(history: pd.DataFrame, summary: pd.DataFrame, dataset: str, style: dict):
    """Validation perplexity per epoch: mean over seeds, band from the lowest to the highest seed; the
    true perplexity of a synthetic language as a dashed line."""
    return _valid_ppl_figure(history, summary, dataset, style, "epoch", "epoch", "epoch", "valid perplexity",
                             "truth")


def budgeted(summary: pd.DataFrame, dataset: str) -> bool:
    """The dataset's runs trained under a time or token budget: their curve is the anytime one (a budget of
    seconds can end inside the first epoch, where a per-epoch curve has one point)."""
    own = summary[summary.dataset == dataset]
    return "budget_seconds" in own and bool(own.budget_seconds.notna().any() or own.tokens_reached.notna().any())


def anytime(points: pd.DataFrame, summary: pd.DataFrame, dataset: str, style: dict):
    """Validation perplexity against training seconds under a budget (the anytime curve): at each point, the
    mean over seeds of the seconds and of the perplexity, the band from the lowest to the highest seed; the
    truth of a synthetic language's whole valid split as a dashed line. The points at equal data
    (``epochs`` set) are not on it: they are the equal-tokens table's."""
    if "epochs" in points:
        points = points[points.epochs.isna()]
    return _valid_ppl_figure(points, summary, dataset, style, "point", "train_seconds",
                             "training seconds (the budget's clock)", "valid perplexity (the fixed subset)",
                             "truth (whole valid split)")


def by_vocab(table: pd.DataFrame, summary: pd.DataFrame, refs: pd.DataFrame | None, style: dict,
             confidence: float = 0.95):
    """A sweep over vocabulary sizes at a glance (``sweep.by_size``'s table, sizes in order). Left: each method
    that learned at a size, its test nll minus the best method's there (paired over seeds, with its interval;
    0 is the best, the figure's scale is the leaders' margins), and Kneser-Ney's distance to the same best.
    Right: the rows that did not learn, by how far their validation perplexity ended from the unigram line
    (nats/token; above 0 is worse than predicting every word by its frequency), a diverged run at the top edge.
    A method's points are joined only between neighbouring sizes of the sweep where it has a point at both."""
    from matplotlib.ticker import FuncFormatter

    from .sweep import delta_to_best

    plt = _plt()
    d = delta_to_best(table, summary, confidence)
    sizes = sorted(table.vocab.unique())
    failed = d[d.panel == "did not learn"]
    fig, axes = plt.subplots(1, 2 if len(failed) else 1, figsize=(13 if len(failed) else 9, 4.6), squeeze=False,
                             gridspec_kw={"width_ratios": [3, 2]} if len(failed) else None)
    ax = axes[0, 0]
    methods = list(dict.fromkeys(table.method))
    spread = {m: 10 ** (0.012 * (i - (len(methods) - 1) / 2)) for i, m in enumerate(methods)}
    learned = d[d.panel == "learned"]
    for m in methods:
        _size_line(ax, learned[learned.method == m], sizes, spread[m], style[m], m)
    kn = refs[(refs.split == "test") & refs.vocab.notna()] if refs is not None and not refs.empty \
        and "vocab" in refs else pd.DataFrame()
    best = table[table.rank_at_size == 1].set_index("vocab").ppl
    kn = kn[kn.vocab.isin(best.index)]
    if len(kn):
        ky = np.log(kn.ppl.to_numpy(float)) - np.log(best.reindex(kn.vocab).to_numpy(float))
        ax.plot(kn.vocab, ky, ls="none", marker="x", color="k", ms=8, mew=1.5,
                label=f"{kn.method.iloc[0]}-{kn.order.iloc[0]} (count-based)")
    ax.axhline(0.0, color="0.4", lw=1, ls=":")
    ax.set_ylabel(f"test nll − the size's best (nats/token), {round(100 * confidence)}% interval")
    ax.set_title("methods that learned, against the best at each size")
    if len(failed):
        fx = axes[0, 1]
        finite = failed[np.isfinite(failed.y)]
        top = max([0.5, *finite.high.dropna(), *finite.y]) * 1.15
        for m in methods:
            own = failed[failed.method == m].assign(y=lambda f: f.y.where(np.isfinite(f.y), top),
                                                     high=lambda f: f.high.where(np.isfinite(f.high), top))
            _size_line(fx, own, sizes, spread[m], style[m], m)
        if (~np.isfinite(failed.y)).any():
            fx.axhline(top, color="k", lw=0.8, ls="--", label="diverged (drawn at the edge)")
        fx.axhline(0.0, color="k", lw=1, label="unigram line")
        fx.set_ylabel("valid nll − unigram valid nll (nats/token)")
        fx.set_title("did not learn: above the unigram line on a seed")
    for a in axes.flat:
        a.set_xscale("log")
        a.set_xticks(sizes, [f"{v:,}" for v in sizes])
        a.minorticks_off()
        a.set_xlim(min(sizes) / 1.6, max(sizes) * 1.6)
        a.set_xlabel("vocabulary size |V|")
        a.yaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    shown = {}
    for a in axes.flat:  # one legend for both panels, outside them
        for handle, label in zip(*a.get_legend_handles_labels()):
            shown.setdefault(label, handle)
    fig.tight_layout()
    fig.legend(shown.values(), shown.keys(), loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    return fig


def _size_line(ax, own: pd.DataFrame, sizes: list, spread: float, st: dict, label: str) -> None:
    """One method across the sweep's sizes: a point with its interval at each size it has, a line only between
    neighbouring sizes it has both of (NaN breaks the line where it is missing)."""
    if own.empty:
        return
    at = own.set_index("vocab").reindex(sizes)
    x = np.asarray(sizes, dtype=float) * spread
    y = at.y.to_numpy(float)
    lo, hi = at.low.fillna(at.y).to_numpy(float), at.high.fillna(at.y).to_numpy(float)
    ax.errorbar(x, y, yerr=[y - lo, hi - y], color=st["color"], marker=st["marker"], ms=6, mec="k", mew=0.5,
                capsize=2, lw=1.2, label=label)


def tuning_by_lr(trials: pd.DataFrame, dataset: str, style: dict):
    """Each method's tuning trials at one dataset (tuning.csv): validation perplexity against the learning rate
    (log-log), one small panel a method, the method's first tuned option as the marker, its pick ringed and an
    edge pick (the lowest or highest rate tried: the range may not hold the optimum) named in the panel's title.
    A diverged trial is drawn at the top of its panel as an x."""
    import matplotlib.ticker
    import numpy as np

    plt = _plt()
    own = trials[trials.dataset == dataset]
    methods = list(dict.fromkeys(own.method))
    cols = min(4, len(methods))
    rows = -(-len(methods) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.1 * cols, 2.4 * rows), squeeze=False, sharex=True)
    markers = ["o", "s", "^", "D", "v", "P"]
    for ax, m in zip(axes.flat, methods):
        g = own[own.method == m]
        # the option that splits the markers: a list of choices (a few values), not a range (every trial its own)
        opt = next((c for c in g.columns if c.startswith("opt_") and _choices(g[c].dropna())), None)
        ok = g[np.isfinite(g.valid_ppl.astype(float))]
        top = ok.valid_ppl.max() if len(ok) else 1.0
        values = list(dict.fromkeys(g[opt].astype(str))) if opt else [None]
        shown = {v: v[:-2] if v.endswith(".0") else v for v in values if v is not None}  # 800.0 (a NaN column) -> 800
        full = ok.rung.fillna(0).astype(int) > 0 if "rung" in ok else pd.Series(False, index=ok.index)
        for k, v in enumerate(values):
            part = ok[~full] if opt is None else ok[~full & (ok[opt].astype(str) == v)]
            ax.plot(part.lr, part.valid_ppl, markers[k % len(markers)], color=style[m]["color"], mec="k", mew=0.4,
                    ms=5, ls="none", label=None if opt is None else f"{opt[4:]} {shown[v]}")
        if full.any():  # successive halving: the promoted trials again at the full budget, joined to their rung 0
            again = ok[full]
            for lr, ppl in zip(again.lr, again.valid_ppl):
                first = ok[~full & (ok.lr == lr)].valid_ppl
                if len(first):
                    ax.plot([lr, lr], [first.iloc[0], ppl], color=style[m]["color"], lw=0.8, ls=":")
            ax.plot(again.lr, again.valid_ppl, "*", color=style[m]["color"], mec="k", mew=0.4, ms=8, ls="none",
                    label="full budget")
        bad = g[~np.isfinite(g.valid_ppl.astype(float))]
        if len(bad):
            ax.plot(bad.lr, [top] * len(bad), "x", color="k", ms=6, label="diverged")
        pick = g[g.selected]
        ax.plot(pick.lr, pick.valid_ppl, "o", ms=11, mfc="none", mec="k", mew=1.2, label="pick")
        edge = pick.lr_edge.dropna().iloc[0] if "lr_edge" in pick and pick.lr_edge.notna().any() else None
        ax.set_title(m + (f" (pick at the {edge} rate)" if edge else ""), fontsize=8, color="C3" if edge else "k")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.tick_params(labelsize=7)
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())  # the decades labelled, not every minor tick
        if opt is not None or full.any():
            ax.legend(fontsize=6, loc="best")
    for ax in list(axes.flat)[len(methods):]:
        ax.axis("off")
    for ax in axes[-1]:
        ax.set_xlabel("learning rate", fontsize=8)
    for ax in axes[:, 0]:
        ax.set_ylabel("valid perplexity", fontsize=8)
    fig.suptitle(f"{dataset}: tuning trials (each method's own option as the marker, its pick ringed)", fontsize=9)
    fig.tight_layout()
    return fig


def _choices(values: pd.Series) -> bool:
    """Whether a tuned option's values look like a list of choices: a few, and none a non-integer number (a range's
    draws are each their own value)."""
    if not 0 < values.astype(str).nunique() <= 5:
        return False
    numbers = pd.to_numeric(values, errors="coerce")
    return bool(numbers.isna().any() or (numbers == numbers.round()).all())


def _placeholder(text: str):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 1.2))
    ax.axis("off")
    ax.text(0.5, 0.5, text, ha="center", va="center")
    return fig


def write(params: dict, dataset: str) -> list[Path]:
    """Draw the dataset's figures from summary.csv, headline.csv and history.csv; write each SVG atomically."""
    import matplotlib

    matplotlib.use("agg")
    plt = _plt()
    from .summary_checks import check_summary_current

    check_summary_current(params)  # first: a folder with nothing summarised yet is said so, in one line
    summary = read_csv(paths.summary_path(params), "dataset", "method", "seed", "config_hash")
    head = read_csv(paths.headline_path(params))
    history = read_csv(paths.history_path(params))
    if dataset not in set(head.dataset):
        from ..config import run_datasets

        hint = "rerun summarize" if dataset in run_datasets(params) else "it is not one of this config's run datasets"
        raise FileNotFoundError(f"{paths.headline_path(params)}: no row for dataset {dataset!r}; "
                                f"has {sorted(set(head.dataset))} ({hint})")
    style = styles(summary)
    level = int(round(params["statistics"]["confidence"] * 100))
    made = {
        "forest": forest(head, dataset, level, style)
        or _placeholder(no_forest(head, dataset)),
        "pareto": pareto(head, dataset, style),
        "curves": anytime(read_csv(paths.anytime_path(params)), summary, dataset, style)
        if budgeted(summary, dataset) else curves(history, summary, dataset, style),
    }
    out = []
    for name in FIGURES:
        path = paths.figure_path(params, dataset, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path, suffix=".svg") as tmp:
            made[name].savefig(tmp, format="svg", bbox_inches="tight", metadata={"Date": None})
        plt.close(made[name])
        out.append(path)
    return out


CLIP_OVER_UNIGRAM = 1.25  # the budget figure's axis ends a little above the unigram line: a mean above it did not learn


def budget_curves(runs: pd.DataFrame, summary: pd.DataFrame, refs: pd.DataFrame | None, dataset: str, style: dict,
                  top_tokens: float | None = None):
    """Test perplexity against the budget (multiples of the sweep's, log axes) for one dataset's long runs
    (``budget_axis.point_runs``): per method the mean over seeds (exp of the mean nll) with a band from the
    lowest to the highest seed; the unigram line (valid), the count-based reference and the truth (test) where
    known, as horizontal lines. ``top_tokens``: a token ladder's top rung (its multiples are rung / top), drawn
    against tokens."""
    plt = _plt()
    own = runs[runs.dataset == dataset]
    fig, ax = plt.subplots(figsize=(9, 4.4))
    shown = []
    for m, g in own.groupby("method", sort=False):
        agg = g.groupby("multiple").nll.agg(["mean", "min", "max"])
        agg.index = agg.index * (top_tokens or 1.0)
        st = style[m]
        ax.plot(agg.index, np.exp(agg["mean"]), color=st["color"], marker=st["marker"], ms=5, mec="k", mew=0.4,
                label=m)
        ax.fill_between(agg.index, np.exp(agg["min"]), np.exp(agg["max"]), color=st["color"], alpha=0.2, lw=0)
        shown += list(np.exp(agg["mean"]))
    line = own.unigram_valid_ppl.dropna()
    if len(line):
        ax.axhline(float(line.iloc[0]), color="0.3", ls=":", label="unigram (valid)")
    kn = refs[(refs.dataset == dataset) & (refs.split == "test")] if refs is not None and len(refs) else pd.DataFrame()
    for r in kn.itertuples():
        ax.axhline(r.ppl, color="k", ls="--", lw=1, label=f"{r.method}-{r.order} (count-based)")
        shown.append(r.ppl)
    test = summary[(summary.dataset == dataset) & (summary.split == "test")]
    if "true_nll" in test and test.true_nll.notna().any():
        ax.axhline(math.exp(float(test.true_nll.dropna().iloc[0])), color="k", lw=1.2, label="truth")
        shown.append(math.exp(float(test.true_nll.dropna().iloc[0])))
    ax.set_xscale("log")
    xs = sorted(own.multiple.unique())
    if top_tokens:
        ax.set_xticks([x * top_tokens for x in xs], [f"{x * top_tokens / 1e6:g}M" for x in xs])
        ax.set_xlabel("training tokens (each rung's annealed model: the same tokens for every method)")
    else:
        ax.set_xticks(xs, [f"{x:g}x" for x in xs])
        ax.set_xlabel("training budget (multiples of the sweep's: the same seconds per method at 1x)")
    ax.minorticks_off()
    top = float(line.iloc[0]) * CLIP_OVER_UNIGRAM if len(line) else math.inf
    off = [v for v in shown if v > top]  # means of runs that did not learn: above the axis, said so
    _readable_axis(ax.yaxis, ax.set_yscale, pd.Series([v for v in shown if v <= top] + ([top] if off else [])))
    if off:
        ax.set_ylim(top=top)
        ax.text(0.01, 0.02, f"{len(off)} mean(s) above {top:,.0f} ({CLIP_OVER_UNIGRAM:g}x the unigram's), off the axis: "
                f"did not learn", transform=ax.transAxes, va="bottom", fontsize=7)
    ax.set_ylabel("test perplexity")
    ax.set_title(f"{dataset}: the ranking as {'data' if top_tokens else 'compute'} grows")
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8)
    fig.tight_layout()
    return fig
