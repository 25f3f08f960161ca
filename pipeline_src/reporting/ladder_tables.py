"""A token ladder's tables (``training.schedule: wsd`` with ``training.ladder``; ``training/ladder.py``): what
``summarize`` writes beside the budget axis's when the runs trained a ladder, so that the report, the README and
``advise`` read the same numbers.

- ``ladder-advice.csv``: **equal data**. What to use at each rung, in tokens (``budget-advice.csv``'s rows, whose
  ``multiple`` is the rung over the top, with the rung's ``tokens``, the ``epochs`` of the training split it is, and
  the methods ``not_trained`` to it: those ``training.ladder_top_by_method`` stops below it);
- ``equal-time.csv``: **equal time on a machine**. For each hardware profile (``profiles.PROFILES``) and each of
  ``seconds_read``'s budgets, what to use when every method trains that many seconds on that machine, each seed
  read from its ladder at its method's tokens (``profiles.advise``), with the tokens each method reads at and the
  methods whose tokens lie outside the measured rungs;
- ``ladder-loo.csv``: the interpolation's check: each inner rung of each seed read from its two neighbours against
  its measurement (``profiles.leave_one_out``).
"""
from __future__ import annotations

import math

import pandas as pd

from ..config.runs import dataset_section
from ..io.errors import ConfigError
from .advice import COLUMNS
from .profiles import (PROFILES, advise, cell_shape, ladder_points, ladder_runs, leave_one_out, load_profile,
                       options_differ, speeds, trained_options)

NAMES = ("ladder-advice.csv", "equal-time.csv", "ladder-loo.csv")
SECONDS = 60.0  # the equal-time budget every grid shows: a minute of training steps
EQUAL_TIME_COLUMNS = ["profile", "machine", "dataset", "seconds", "when", "speed_from", "options_differ", "tokens_read",
                      "outside", "no_speed", *COLUMNS[1:]]


def ladders(params: dict) -> dict[str, list[float]]:
    """Each run dataset that trains a token ladder, with its rungs in tokens (smallest first)."""
    out = {}
    for ds in params["run"]["datasets"]:
        tr = dataset_section(params, ds, "training")
        if tr.get("ladder"):
            out[ds] = sorted(float(r) for r in tr["ladder"])
    return out


def ladder_tables(anytime: pd.DataFrame, summary: pd.DataFrame, budget_advice: pd.DataFrame | None,
                  params: dict, split_tokens: dict[str, int | None], tuning: pd.DataFrame | None = None) -> dict:
    """The tables above by file name; empty when no dataset trained a ladder. ``split_tokens``: each ladder
    dataset's training split in tokens (None where unknown), for the epochs a rung is; ``tuning``: the trials
    (``tuning.csv``): the options each run trained with (the params' and the picks', ``trained_options``) are set
    beside the options each profile measured, in the equal-time rows."""
    rungs = {ds: r for ds, r in ladders(params).items() if (anytime.dataset == ds).any()}
    if not rungs or budget_advice is None or budget_advice.empty:
        return {}
    advice = budget_advice[budget_advice.dataset.isin(rungs)].copy()
    top = advice.dataset.map(lambda d: rungs[d][-1])
    advice.insert(2, "tokens", (advice.multiple.astype(float) * top).round())
    advice.insert(3, "epochs", [t / split_tokens[d] if split_tokens.get(d) else math.nan
                                for d, t in zip(advice.dataset, advice.tokens)])
    advice["not_trained"] = [_not_trained(params, d, t) for d, t in zip(advice.dataset, advice.tokens)]
    points = ladder_points(anytime[anytime.dataset.isin(rungs)])
    confidence = params["statistics"]["confidence"]
    return {"ladder-advice.csv": advice, "ladder-loo.csv": leave_one_out(points),
            "equal-time.csv": equal_time(anytime, summary, rungs, confidence,
                                         {ds: cell_shape(params, ds) for ds in rungs},
                                         trained_options(params, tuning, ladder_runs(summary)),
                                         {ds: capped_below(params, ds, r[-1]) for ds, r in rungs.items()})}


def capped_below(params: dict, dataset: str, tokens: float) -> dict[str, float]:
    """The methods ``training.ladder_top_by_method`` stops below ``tokens`` at ``dataset``, with their own tops."""
    tops = dataset_section(params, dataset, "training").get("ladder_top_by_method") or {}
    return {m: float(t) for m, t in tops.items() if float(t) < tokens}


def _not_trained(params: dict, dataset: str, tokens: float) -> str:
    """The run methods capped below a rung, each with its own top: not in that rung's comparison."""
    tops = capped_below(params, dataset, tokens)
    return "; ".join(f"{m} stops at {_rung(top)}" for m, top in sorted(tops.items(), key=lambda kv: kv[1])
                     if m in params["run"].get("methods", tops))


def seconds_read(speed: pd.Series, top: float, bottom: float,
                 tops: dict[str, float] | None = None) -> list[tuple[float, str]]:
    """The equal-time budgets a grid shows for one dataset on one profile (``speed``: tokens/s by method; the
    ladder from ``bottom`` to ``top`` tokens; ``tops``: a method's own top where ``training.ladder_top_by_method``
    stops it lower): ``SECONDS``; the first time a method reaches its top, the longest at which every method can
    lie inside the ladder (it does when the one of fewest tokens/s then reaches ``bottom``); and the last time one
    does (the others are then outside), left out where it is the first. With one top for all, the first is the
    method of most tokens/s and the last the one of fewest ("the fastest", "the slowest"); where a method stops
    lower, they are named for when they reach their tops ("the first top reached", "the last top reached")."""
    own = {m: float(t) for m, t in (tops or {}).items() if m in speed.index and float(t) < top}
    reach = pd.Series({m: own.get(m, top) for m in speed.index}) / speed  # seconds to its top
    first, last = reach.idxmin(), reach.idxmax()
    fewest = speed.idxmin()
    below = f"the slowest ({fewest})" if not own else f"the one of fewest tokens/s ({fewest})"
    inside = "every method inside" if reach[first] * speed[fewest] >= bottom else f"{below} below the ladder"
    if not own:
        out = [(reach[first], f"the top rung for the fastest ({first}): {inside}"),
               (reach[last], f"the top rung for the slowest ({last})")]
    else:
        mark = {m: f", its own {_rung(own[m])}" if m in own else "" for m in (first, last)}
        out = [(reach[first], f"the first top reached ({first}){mark[first]}: {inside}"),
               (reach[last], f"the last top reached ({last}){mark[last]}")]
    return [(SECONDS, "a minute"), *out[:1 if reach[last] == reach[first] else 2]]


def equal_time(anytime: pd.DataFrame, summary: pd.DataFrame, rungs: dict[str, list[float]],
               confidence: float, shapes: dict[str, str] | None = None,
               picks: dict[tuple[str, str], dict] | None = None,
               tops: dict[str, dict[str, float]] | None = None) -> pd.DataFrame:
    """``equal-time.csv``: one row per (profile, dataset, seconds); a dataset the profile has no row for, nor
    rows of its shapes (``shapes``: each dataset's ``cell_shape``) to read it from, is one row that says so. Each
    row names the methods whose tokens/s the profile measured at other head options than the ladder trained them
    with (``picks``, by (dataset, method): ``profiles.trained_options``); ``tops``, by dataset: the methods
    ``training.ladder_top_by_method`` stops below the ladder's top, with their own."""
    rows = []
    for name in PROFILES:
        profile, machine = load_profile(name)
        for ds, r in rungs.items():
            vocab = summary[summary.dataset == ds].vocab.dropna() if "vocab" in summary else pd.Series(dtype=float)
            speed, source = speeds(profile, ds, float(vocab.iloc[0]) if len(vocab) else None, (shapes or {}).get(ds))
            speed = speed[speed.index.isin(anytime[anytime.dataset == ds].method.unique())]
            if speed.empty:
                rows.append({"profile": name, "machine": machine, "dataset": ds,
                             "when": f"{name} has no row for {ds}'s shapes"})
                continue
            differ = options_differ(profile, {m: o for (d, m), o in (picks or {}).items() if d == ds})
            for seconds, when in seconds_read(speed, r[-1], r[0], (tops or {}).get(ds)):
                rows.append({"profile": name, "machine": machine, "dataset": ds, "seconds": seconds, "when": when,
                             "speed_from": source, "options_differ": differ,
                             **_reading(anytime, summary, profile, seconds, ds, confidence, (shapes or {}).get(ds))})
    return pd.DataFrame(rows).reindex(columns=EQUAL_TIME_COLUMNS)


def _reading(anytime, summary, profile, seconds: float, dataset: str, confidence: float, shape: str | None) -> dict:
    """One equal-time verdict: the advice row's fields, each method's tokens, and those outside the ladder."""
    try:
        table, read = advise(anytime, summary, profile, seconds, dataset, confidence, shape)
    except ConfigError:
        return {}
    tokens = read[~read.no_speed].groupby("method", sort=False).tokens.first().sort_values()
    out = {"tokens_read": "; ".join(f"{m} {t / 1e6:.3g}M" for m, t in tokens.items()),
           "outside": ", ".join(sorted(read[read.outside].method.unique())),
           "no_speed": ", ".join(sorted(read[read.no_speed].method.unique()))}
    if not table.empty:
        out.update({k: v for k, v in table.iloc[0].items() if k in COLUMNS[1:]})
    return out


# --- the tables in Markdown (README and docs blocks, the report) -------------------------------------------------

def _rung(tokens: float) -> str:
    return f"{tokens / 1e6:g}M"


def equal_data_markdown(advice: pd.DataFrame) -> str:
    """``ladder-advice.csv`` as a grid: one row per dataset, one column per rung (tokens), each cell the method
    to use and how sure (``advice.budget_cell``); a rung that repeats the training split says how many epochs."""
    from .advice import budget_cell
    from .markdown import frame_markdown

    rows = []
    for ds, g in advice.groupby("dataset", sort=False):
        seeds = g.pairs.max()
        row = {"dataset, seeds": f"{ds}, {seeds:.0f} seed{'' if seeds == 1 else 's'}" if g.pairs.notna().any() else ds}
        for r in g.sort_values("tokens").itertuples():
            epochs = f" ({r.epochs:.1f} epochs)" if pd.notna(r.epochs) and r.epochs > 1.0 else ""
            capped = f"; {r.not_trained}" if isinstance(getattr(r, "not_trained", None), str) and r.not_trained else ""
            row[_rung(r.tokens) + " tokens"] = budget_cell(r) + epochs + capped
        rows.append(row)
    return frame_markdown(pd.DataFrame(rows))


def equal_time_markdown(table: pd.DataFrame) -> str:
    """``equal-time.csv`` as a grid: one row per (profile, seconds), one column per dataset, each cell the method
    to use at those seconds on that machine, read from the ladder, and the methods outside the measured rungs;
    under it, where a dataset's tokens/s were read from other rows of the profile, which."""
    from .markdown import frame_markdown

    rows = []
    for (profile, when), g in table.groupby(["profile", "when"], sort=False):
        secs = g.seconds.dropna()
        row = {"machine (profile)": profile, "seconds of training": (f"{secs.iloc[0]:,.0f} s: {when}"
                                                                    if len(secs) else when)}
        for r in g.itertuples():
            if pd.isna(r.seconds):
                row[r.dataset] = "no profile row for its shapes"
                continue
            row[r.dataset] = time_cell(r)
        rows.append(row)
    return frame_markdown(pd.DataFrame(rows)) + speed_notes(table)


def speed_notes(table: pd.DataFrame) -> str:
    """The lines under an equal-time grid: each dataset whose tokens/s were not measured at its own shapes
    (``profiles.speeds``), and each profile whose tokens/s are of other head options than the ladder trained with
    (``profiles.options_differ``), one line per reading, naming the profiles and datasets it holds for."""
    lines = []
    for column, same, tail in (
            ("speed_from", "{ds} on {who}", "no row of its own; each method's tokens/s {what}."),
            ("options_differ", "{who}, {ds}", "tokens/s measured at other head options than the ladder trained with, "
                                              "so those methods' tokens at equal time are those options': {what}.")):
        if column not in table:
            continue
        hit = table[table[column].map(lambda v: isinstance(v, str) and v != "")]
        for what, g in hit.groupby(column, sort=False):
            by = {p: _listed(dict.fromkeys(d.dataset)) for p, d in g.groupby("profile", sort=False)}
            if len(set(by.values())) == 1:  # every profile at the same datasets: "d on p and q" / "p and q, d"
                head = same.format(ds=next(iter(by.values())), who=_listed(by))
            else:  # the pairs as they are, not their cross product
                head = "; ".join(f"{p} at {d}" for p, d in by.items())
            lines.append(f"*{head}: {tail.format(what=what)}*")
    return "\n" + " ".join(lines) + "\n" if lines else ""  # one paragraph under the grid


def _listed(names) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    names = list(names)
    return ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else "".join(names)


def time_cell(r) -> str:
    """One equal-time cell: ``budget_cell`` among the methods inside the measured rungs, those outside, and those
    the profile has no tokens/s for (never read, so never silently left out)."""
    from .advice import budget_cell

    outside = r.outside if isinstance(r.outside, str) and r.outside else ""
    unmeasured = getattr(r, "no_speed", "")
    unmeasured = f"; no tokens/s on the profile: {unmeasured}" if isinstance(unmeasured, str) and unmeasured else ""
    if not isinstance(r.use, str):  # none learned among those inside (``methods`` of them), or none inside
        if not getattr(r, "methods", math.nan) > 0:
            return "no method inside the measured range" + unmeasured
        return budget_cell(r) + (f"; outside the measured range: {outside}" if outside else "") + unmeasured
    if outside and not isinstance(r.runner_up, str) and not getattr(r, "methods", 1) > 1:
        return f"{r.use} alone inside the measured range (outside it: {outside}): no verdict" + unmeasured
    return budget_cell(r) + (f"; outside the measured range: {outside}" if outside else "") + unmeasured


def leave_one_out_markdown(loo: pd.DataFrame) -> str:
    """``ladder-loo.csv`` per dataset and method: how far an inner rung read from its two neighbours lies from
    its measurement (|error| in test nll, nats; as perplexity, exp of it)."""
    from .markdown import frame_markdown

    if loo.empty:
        return "*No inner rung to read from its neighbours.*\n"
    err = loo.assign(abs_error=loo.error.abs())
    t = err.groupby(["dataset", "method"], sort=False).agg(readings=("error", "size"),
                                                          median=("abs_error", "median"), worst=("abs_error", "max"),
                                                          bias=("error", "mean")).reset_index()
    t["median abs. error (nats)"] = t["median"].map(lambda x: f"{x:.4f} ({math.expm1(x):.1%} in ppl)")
    t["worst abs. error"] = t.worst.map(lambda x: f"{x:.4f} ({math.expm1(x):.1%})")
    t["mean error (read - measured)"] = t.bias.map(lambda x: f"{x:+.4f}")
    return frame_markdown(t.drop(columns=["median", "worst", "bias"]))


# --- the ladder against plain cosine runs to the same budgets (config/token-axis-cosine.yaml) -------------------

def against_cosine(anytime: pd.DataFrame, cosine: pd.DataFrame, budgets: dict[str, int],
                   confidence: float = 0.95) -> pd.DataFrame:
    """Each cosine run (``cosine``: its summary.csv; ``budgets``: cosine method -> its token budget) against the
    ladder's rung model at the same tokens (``anytime``: the ladder's anytime.csv), for the ladder method of the
    cosine method's type, paired over seeds: Δ test nll = cosine - ladder (negative: the cosine run is better)."""
    from .stats import paired

    points = ladder_points(anytime)
    test = cosine[cosine.split == "test"]
    rows = []
    for (ds, m), g in test.groupby(["dataset", "method"], sort=False):
        kind, rung = g.type.iloc[0], float(budgets.get(m, math.nan))
        lad = points[(points.dataset == ds) & (points.method == kind) & (points.tokens >= rung)
                     & (points.tokens < rung * 1.01)]
        ladder_nll, cos_nll = lad.set_index("seed").test_nll, g.set_index("seed").nll.astype(float)
        seeds = cos_nll.index.intersection(ladder_nll.index)
        if len(seeds) == 0:  # the cosine run is not of this ladder (another dataset, rung or seeds): no pair
            continue
        d = paired(cos_nll.loc[seeds], ladder_nll.loc[seeds], confidence, 0)
        rows.append({"dataset": ds, "method": kind, "tokens": rung, "cosine_run": m,
                     "seeds": d.get("pairs", 0), "ladder_ppl": math.exp(ladder_nll.loc[seeds].mean()),
                     "cosine_ppl": math.exp(cos_nll.loc[seeds].mean()), "delta_nll": d.get("delta_nll"),
                     "delta_low": d.get("delta_low"), "delta_high": d.get("delta_high"), "p_value": d.get("p_value")})
    return pd.DataFrame(rows, columns=COSINE_COLUMNS).sort_values("tokens", ignore_index=True)


COSINE_COLUMNS = ["dataset", "method", "tokens", "cosine_run", "seeds", "ladder_ppl", "cosine_ppl", "delta_nll",
                  "delta_low", "delta_high", "p_value"]


def against_cosine_markdown(table: pd.DataFrame, level: int = 95) -> str:
    from .markdown import frame_markdown

    if table.empty:
        return ("*No cosine run pairs with this ladder: none is of its datasets, rungs and seeds (the cosine "
                "publication checks another run).*\n")

    t = pd.DataFrame({
        "dataset, method": table.dataset + ", " + table.method,
        "tokens": table.tokens.map(_rung), "seeds": table.seeds,
        "ladder's rung model (WSD), test ppl": table.ladder_ppl.map(lambda x: f"{x:,.1f}"),
        "cosine run to those tokens, test ppl": table.cosine_ppl.map(lambda x: f"{x:,.1f}"),
        f"Δ test nll, cosine - ladder [{level}% CI], p": [
            f"{r.delta_nll:+.4f} [{r.delta_low:+.4f}, {r.delta_high:+.4f}], p {r.p_value:.2g}"
            for r in table.itertuples()]})
    return frame_markdown(t)


# --- does one rate serve the whole ladder? (config/token-axis-rates.yaml) ----------------------------------------

SIDES = ("lower", "higher")


def rate_check(ladder_anytime: pd.DataFrame, ladder_summary: pd.DataFrame, rates_anytime: pd.DataFrame,
               rates_summary: pd.DataFrame) -> pd.DataFrame:
    """At each rung the rate check trained (its methods are ``<method>-lower-rate`` and ``<method>-higher-rate``,
    one seed), the pick's seed of the ladder beside its two neighbouring rates: validation and test perplexity
    at each (NaN for a side the check did not run), and which is best on validation there."""
    rates = ladder_points(rates_anytime)
    pick = ladder_points(ladder_anytime)
    lr = pd.concat([ladder_summary, rates_summary]).drop_duplicates(["method", "seed"]).set_index(
        ["method", "seed"]).lr
    rows: dict[tuple, dict] = {}  # (dataset, method, tokens) -> its row
    for (ds, m, seed), g in rates.groupby(["dataset", "method", "seed"], sort=False):
        base, side = _variant(m)
        if base is None:
            continue
        for r in g.itertuples():
            row = rows.get((ds, base, r.tokens))
            if row is None:
                at = pick[(pick.method == base) & (pick.seed == seed) & (abs(pick.tokens - r.tokens) < 0.01 * r.tokens)]
                row = rows[(ds, base, r.tokens)] = {
                    "dataset": ds, "method": base, "seed": seed, "tokens": r.tokens,
                    "pick_lr": lr.get((base, seed), math.nan),
                    "pick_valid_ppl": math.exp(at.valid_nll.iloc[0]) if len(at) else math.nan,
                    "pick_test_ppl": math.exp(at.test_nll.iloc[0]) if len(at) else math.nan}
            row.update({f"{side}_lr": lr.get((m, seed), math.nan), f"{side}_valid_ppl": math.exp(r.valid_nll),
                        f"{side}_test_ppl": math.exp(r.test_nll)})
    out = pd.DataFrame(list(rows.values()))
    if out.empty:
        return out
    valid = out.reindex(columns=[f"{s}_valid_ppl" for s in ("lower", "pick", "higher")])  # a side not run: NaN
    both = valid.count(axis=1) >= 2  # a best among two or three; one alone is no comparison
    out["best_on_valid"] = pd.Series(math.nan, index=out.index, dtype=object)
    out.loc[both, "best_on_valid"] = valid[both].idxmin(axis=1).str.removesuffix("_valid_ppl")
    return out.sort_values(["dataset", "method", "tokens"], ignore_index=True)


def _variant(method: str) -> tuple[str | None, str | None]:
    for side in SIDES:
        if method.endswith(f"-{side}-rate"):
            return method.removesuffix(f"-{side}-rate"), side
    return None, None


def rate_check_markdown(table: pd.DataFrame) -> str:
    from .markdown import frame_markdown

    def cell(r, side: str) -> str:
        ppl, rate = getattr(r, f"{side}_valid_ppl", math.nan), getattr(r, f"{side}_lr", math.nan)
        text = "—" if pd.isna(ppl) else f"{ppl:,.1f} (lr {rate:.3g})"
        return f"**{text}**" if r.best_on_valid == side else text

    t = pd.DataFrame([{"dataset, method": f"{r.dataset}, {r.method}", "rung": f"{r.tokens / 1e6:.2g}M",
                       "lower rate": cell(r, "lower"), "the pick": cell(r, "pick"), "higher rate": cell(r, "higher")}
                      for r in table.itertuples()])
    return frame_markdown(t)


def rate_sweep(ladder_anytime: pd.DataFrame, ladder_summary: pd.DataFrame,
               checks: list[tuple[pd.DataFrame, pd.DataFrame]]) -> pd.DataFrame:
    """Every rate tried for a method at each rung, seed 1 of the ladder's pick and the checks' runs (the rate
    check's ``<method>-lower-rate`` / ``-higher-rate``, a retune's ``<method>-rate-<x>``): one row per (dataset,
    method, rung, rate) with its validation and test perplexity, for the methods the last check retuned."""
    frames = [(ladder_anytime, ladder_summary), *checks]
    lr = pd.concat([s for _, s in frames]).drop_duplicates(["method", "seed"]).set_index(["method", "seed"]).lr
    retuned = {_base(m) for m in checks[-1][1].method.unique()} - {None}
    rows = []
    for anytime, _ in frames:
        for r in ladder_points(anytime).itertuples():
            base = r.method if r.method in retuned else _base(r.method)
            if base not in retuned or r.seed != 1:
                continue
            rows.append({"dataset": r.dataset, "method": base, "tokens": r.tokens, "lr": lr.get((r.method, r.seed)),
                         "valid_ppl": math.exp(r.valid_nll), "test_ppl": math.exp(r.test_nll)})
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    keep = []
    for _, g in out.groupby(["dataset", "method"]):  # the rungs every rate reached (the checks': 0.5M and 8M)
        common = set.intersection(*(set(x.tokens) for _, x in g.groupby("lr")))
        keep.append(g[g.tokens.isin(common)])
    return pd.concat(keep).sort_values(["dataset", "method", "tokens", "lr"], ignore_index=True)


def _base(method: str) -> str | None:
    base, _ = _variant(method)
    if base is not None:
        return base
    head, sep, rate = method.rpartition("-rate-")
    return head if sep and rate.replace(".", "", 1).isdigit() else None


def rate_sweep_markdown(table: pd.DataFrame) -> str:
    """One row per (method, rung), one column per rate tried (validation perplexity; the best in bold, — where
    that rate was not tried)."""
    from .markdown import frame_markdown

    rates = sorted(table.lr.unique())
    rows = []
    for (ds, m, t), g in table.groupby(["dataset", "method", "tokens"], sort=False):
        best = g.valid_ppl.min()
        row = {"dataset, method": f"{ds}, {m}", "rung": f"{t / 1e6:.2g}M"}
        by = g.set_index("lr").valid_ppl
        for rate in rates:
            v = by.get(rate)
            row[f"lr {rate:.3g}"] = "—" if v is None else (f"**{v:,.1f}**" if v == best else f"{v:,.1f}")
        rows.append(row)
    return frame_markdown(pd.DataFrame(rows))
