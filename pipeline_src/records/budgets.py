"""Freeze a time budget into per-method token budgets from a publication's own runs (the recorded calibration).

A run under ``training.budget_seconds`` stops when its steps' seconds run out, so the tokens it trains on, and with
them its numbers, depend on the machine. ``python -m pipeline_src freeze-budgets --name PUB`` reads the publication's
per-run rows (``summary.csv``: each run's ``tokens_reached`` under its time budget) and prints, per dataset, the
``training.budget_tokens_by_method`` block that replays them: each method's mean tokens over its seeds, rounded to
whole steps, with the calibration it came from (machine, date, commit, seconds and tokens/s per method) as comments
above it. Pasted into a params file, every listed method's runs stop after the same step on any machine.
"""
from __future__ import annotations

import math

from ..io import paths
from ..io.artifacts import read_csv, read_json
from ..io.errors import ConfigError


def frozen_budgets(name: str) -> str:
    """The YAML block (with its calibration as comments) for each budgeted dataset of publication ``name``."""
    from ..reporting.publish import check_name

    pub = check_name(name, "freeze-budgets")
    if not (pub / "summary.csv").is_file():
        raise ConfigError(f"{pub} holds no summary.csv: no runs to freeze the budgets of")
    prov = read_json(pub / paths.PROVENANCE, "params", "commit", "cpu_model", "published")
    runs = read_csv(pub / "summary.csv", "dataset", "method", "split", "tokens_reached", "budget_seconds")
    runs = runs[(runs.split == "test") & runs.budget_seconds.notna() & runs.tokens_reached.notna()]
    if runs.empty:
        raise ConfigError(f"{pub / 'summary.csv'}: no run under a time budget (budget_seconds) to freeze")
    out = ["datasets:", f"  # frozen from benchmarks/{name} (commit {prov['commit'][:12]}, {prov['cpu_model']}, published "
           f"{prov['published']}): each method's mean tokens over its seeds under its time budget"]
    from ..config import train_config, validate

    params = validate(dict(prov["params"]), str(pub / paths.PROVENANCE))
    for ds, g in runs.groupby("dataset", sort=False):
        tc = train_config(params, ds)  # the dataset's training settings over the file's defaults
        step = tc.batch_size * tc.bptt  # tokens a step trains on
        seconds = float(g.budget_seconds.iloc[0])
        frozen = {m: int(math.ceil(gm.tokens_reached.mean() / step) * step) for m, gm in g.groupby("method", sort=False)}
        out.append(f"  # {ds}: {seconds:g} s of training steps; tokens/s: "
                   + ", ".join(f"{m} {t / seconds:,.0f}" for m, t in frozen.items()))
        out.append(f"  {ds}:\n    training:\n      budget_calibration: benchmarks/{name}\n      budget_tokens_by_method: {{"
                   + ", ".join(f"{m}: {t}" for m, t in frozen.items()) + "}")
    return "\n".join(out) + "\n"

