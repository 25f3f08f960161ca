"""Freeze a time budget into per-method token budgets from a publication's own runs (the recorded calibration).

A run under ``training.budget_seconds`` stops when its steps' seconds run out, so the tokens it trains on, and with
them its numbers, depend on the machine. ``python -m pipeline_src freeze-budgets --name PUB`` reads the publication's
per-run rows (``summary.csv``: each run's ``tokens_reached`` under its time budget) and prints, per dataset, the
``training.budget_tokens_by_method`` block that replays them: each method's mean tokens over its seeds, rounded to
whole steps, with the calibration it came from (machine, date, commit, seconds and tokens/s per method) as comments
above it. Pasted into a params file, every listed method's runs stop after the same step on any machine.
"""
from __future__ import annotations

import copy
import math
import textwrap
from pathlib import Path

from ..io import paths
from ..io.artifacts import read_json
from ..io.errors import ConfigError


class NoBudget(ConfigError):
    """A publication with no run under a time budget: nothing to freeze (``freeze-settings`` then freezes the
    picks alone; any other problem with its runs stops it)."""


def frozen_budgets(name: str) -> str:
    """The YAML block (with its calibration as comments) for each budgeted dataset of publication ``name``."""
    out = ["datasets:"]
    for ds, (comment, frozen) in _budgets(name).items():
        if len(out) == 1:
            out.append(comment[0])
        out.append(comment[1])
        out.append(_dataset_block(ds, {"budget_calibration": f"benchmarks/{name}", "budget_tokens_by_method": frozen}))
    return "\n".join(out) + "\n"


def _dataset_block(dataset: str, training: dict) -> str:
    """``datasets.<dataset>.training`` as YAML lines under a ``datasets:`` key (a mapping of numbers on one line)."""
    import yaml

    text = yaml.safe_dump({dataset: {"training": training}}, sort_keys=False, default_flow_style=None, width=10**6)
    return textwrap.indent(text.rstrip(), "  ")


def _budgets(name: str) -> dict:
    """Per budgeted dataset of ``name``: its comment lines (the publication, then the dataset's seconds and tokens/s)
    and each method's mean tokens over its seeds, rounded up to whole steps."""
    from ..config import train_config, validate
    from ..config.tuning import replays_tokens
    from ..reporting.machine import budget_machine
    from ..reporting.publish import check_name
    from ..reporting.published_rows import read_published

    pub = check_name(name, "freeze-budgets")
    if not (pub / "summary.csv").is_file():
        raise NoBudget(f"{pub} holds no summary.csv: no runs to freeze the budgets of")
    prov = read_json(pub / paths.PROVENANCE, "params", "commit", "cpu_model", "published")
    params = validate(copy.deepcopy(prov["params"]), str(pub / paths.PROVENANCE))
    runs = read_published(pub, "summary.csv")
    if not {"tokens_reached", "budget_seconds"} <= set(runs.columns):  # published before time budgets existed
        raise NoBudget(f"{pub / 'summary.csv'}: no run under a time budget (no budget_seconds column) to freeze")
    replayed = runs.dataset.map(lambda ds: replays_tokens(params, ds))  # their trials' tokens in the time budget
    runs = runs[(runs.split == "test") & (runs.budget_seconds.notna() | replayed)]
    for r in runs[runs.tokens_reached.isna()].itertuples():  # a seed left out would move its method's mean
        raise ConfigError(f"{pub / 'summary.csv'}: {r.method} seed {r.seed} at {r.dataset} ran under a time budget "
                          f"but has no tokens_reached: its method's budget cannot be frozen")
    if runs.empty:
        settings = [train_config(params, ds).budget_calibration for ds in params["datasets"]]
        calibrations = sorted({str(c) for c in settings if c})
        where = (f"; its budgets were frozen from {', '.join(calibrations)}: `python -m pipeline_src freeze-budgets "
                 f"--name {Path(calibrations[0]).name}`" if calibrations else "")
        raise NoBudget(f"{pub / 'summary.csv'}: no run under a time budget (budget_seconds) to freeze{where}")
    first = (f"  # frozen from benchmarks/{name} (commit {prov['commit'][:12]}, published {prov['published']}): "
             f"each method's mean tokens over its seeds under its time budget (or its selected trial's, which "
             f"tuning.replay_tokens replays)")
    out = {}
    for ds, g in runs.groupby("dataset", sort=False):
        tc = train_config(params, ds)  # the dataset's training settings over the file's defaults
        step = tc.batch_size * tc.bptt  # tokens a step trains on
        seconds = float(tc.budget_seconds)  # the time budget, the trials' under a replay
        frozen = {m: int(math.ceil(gm.tokens_reached.mean() / step) * step) for m, gm in g.groupby("method", sort=False)}
        machine = budget_machine(pub, ds, prov["cpu_model"])  # where those seconds were spent
        out[ds] = ([first, f"  # {ds}: {seconds:g} s of training steps on {machine}; tokens/s: "
                    + ", ".join(f"{m} {t / seconds:,.0f}" for m, t in frozen.items())], frozen)
    return out


def frozen_settings(name: str, dataset: str) -> str:
    """The params block that replays publication ``name``'s tuning picks at ``dataset`` without tuning: each
    method's definition with its selected trial's options, ``training.lr_by_method`` with the selected rates, and,
    where the dataset ran under a time budget, its ``budget_tokens_by_method`` (the 1x of a longer run), with where
    each came from as comments. A method without a selection there is refused by name."""
    import yaml

    from ..config import validate
    from ..reporting.publish import check_name
    from ..reporting.published_rows import read_published

    pub = check_name(name, "freeze-settings")
    if not (pub / "tuning.csv").is_file():
        raise ConfigError(f"{pub} holds no tuning.csv: no tuning picks to freeze")
    prov = read_json(pub / paths.PROVENANCE, "params", "commit", "published")
    params = validate(copy.deepcopy(prov["params"]), str(pub / paths.PROVENANCE))
    trials = read_published(pub, "tuning.csv", "lr", "selected")  # selected: True / False, one pick per cell
    methods = list(dict.fromkeys(trials[trials.dataset == dataset].method))
    if not methods:
        raise ConfigError(f"{pub / 'tuning.csv'}: no trial at dataset {dataset!r}; it has "
                          f"{sorted(set(trials.dataset))}")
    picks = trials[(trials.dataset == dataset) & trials.selected]
    missing = [m for m in methods if m not in set(picks.method)]
    if missing:
        raise ConfigError(f"{pub / 'tuning.csv'}: no selected trial for {', '.join(missing)} at {dataset} (its "
                          f"tuning did not finish): nothing to freeze for them")
    opts = [c for c in picks.columns if c.startswith("opt_")]
    blocks = {r.method: {**params["methods"][r.method],
                         **{c[4:]: _plain(getattr(r, c)) for c in opts if not _missing(getattr(r, c))}}
              for r in picks.itertuples()}
    training = {"lr_by_method": {r.method: float(r.lr) for r in picks.itertuples()}}  # every digit: the same run
    out = [f"# frozen from benchmarks/{name} (commit {prov['commit'][:12]}, published {prov['published']}): the "
           f"selected trial of each method at {dataset}",
           yaml.safe_dump({"methods": blocks}, sort_keys=False, default_flow_style=None, width=118).rstrip(),
           "datasets:"]
    try:
        budgets = _budgets(name)
    except NoBudget:  # no summary, or no run under a time budget: no tokens to freeze (any other problem stops it)
        budgets = {}
    if dataset in budgets:  # the dataset ran under a time budget: each method's tokens in it, the 1x of a longer run
        out.append(budgets[dataset][0][1])
        training.update(budget_calibration=f"benchmarks/{name}", budget_tokens_by_method=budgets[dataset][1])
    out.append(_dataset_block(dataset, training))
    return "\n".join(out) + "\n"


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _plain(v):
    """A tuned option as YAML writes it: 200.0 -> 200, numpy scalars -> Python ones."""
    v = v.item() if hasattr(v, "item") else v
    return int(v) if isinstance(v, float) and v.is_integer() else v
