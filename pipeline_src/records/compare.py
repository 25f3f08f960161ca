"""A new output layer against a publication's rows, without retraining them (``python -m pipeline_src compare``).

``compare --head mypkg.heads:MyHead --against default`` takes the publication's params as it recorded them
(``benchmarks/NAME/provenance.json``), adds the head as one more method of the crossings that run the chosen
datasets, and points ``results_dir`` at ``results/compare/<as>``. The published rows come back through
``restore`` from the publication's records (each checked against its sha256 and against the config the params
give it now: a stale publication is refused, not half-compared); Snakemake trains and evaluates only the new
head's runs (its seeds, its budget, the same encoder and data), the bench times it beside the reference against
the matmul floor and its own, and a partial summary (no matrix experiment) recomputes the headline with the new
head in the Holm family. The card (``reporting/card.py``) is one page from those tables.

What is the same as the published rows: the params (data, encoder, training settings, seeds, statistics), hence
the frozen token budgets of the methods that have one. What is not: a head with no frozen budget on a dataset
under a time budget trains under ``budget_seconds`` of this machine's clock (the card says so, with its tokens/s
beside the calibration's).
"""
from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

from ..config import ConfigError, run_datasets, run_pairs, run_seeds, validate
from ..io import paths
from ..io.artifacts import read_json

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


def compare_params(head: str, options: dict, against: str, name: str, datasets: list[str] | None) -> dict:
    """The publication's params with ``name`` = {type: head, **options} added to the crossings of ``datasets``
    (default: all of them), results under results/compare/<name>, models not kept (the records are restored)."""
    import re

    from ..heads.options import options_of
    from ..reporting.publish import check_name

    if not re.match(NAME_PATTERN, name):
        raise ConfigError(f"compare --as {name!r}: a method name is letters, digits, '_', '.' and '-'")
    pub = check_name(against, "compare")
    prov_path = pub / paths.PROVENANCE
    params = validate(copy.deepcopy(read_json(prov_path, "params")["params"]), str(prov_path))
    if name in params["methods"]:
        raise ConfigError(f"compare --as {name}: already a method of benchmarks/{against} "
                          f"({sorted(params['methods'])}); choose another name")
    options_of(head)  # a missing module or a class that is no output layer: one line, before anything runs
    ran = run_datasets(params)
    chosen = list(datasets or ran)
    if unknown := [d for d in chosen if d not in ran]:
        raise ConfigError(f"compare --dataset {unknown[0]}: benchmarks/{against} ran {ran}")
    params["methods"][name] = {"type": head, **options}
    run = params["run"]
    crossings = [{"datasets": [d for d in c["datasets"] if d in chosen], "methods": [*c["methods"], name]}
                 for c in (run, run.get("extra") or {"datasets": [], "methods": []})]
    crossings = [c for c in crossings if c["datasets"]]  # the first one kept is run's own (it is required)
    params["run"] = {**run, **crossings[0], "extra": crossings[1] if len(crossings) > 1 else {"datasets": [], "methods": []}}
    reference = params["statistics"]["reference"]
    params["statistics"]["contrasts"] = [c for c in params["statistics"].get("contrasts", [])
                                         if all(m in _methods(params) for m in c)]
    params.update(results_dir=f"results/compare/{name}", keep_models=False)
    params["bench"] = {**params["bench"], "methods": [m for m in (reference, name) if m in params["methods"]]}
    return validate(params, f"compare --head {head} --against {against}")


def _methods(params: dict) -> set[str]:
    return {m for _, m in run_pairs(params)}


def run_compare(params: dict, params_file: Path, against: str, threads: int | None = None, say=print) -> Path:
    """Prepare the data, restore the publication's records, train and evaluate what is missing (the new head's
    runs), bench it, summarise (partial: no matrix experiment) and render the card; returns the card's path."""
    from ..reporting.card import render_card
    from ..reporting.publish import check_name
    from ..reporting.summarize import summarize
    from .stash import restore

    root = paths.REPOSITORY
    snake = [sys.executable, "-m", "snakemake", "--cores", str(threads or "all")]
    prepared = [str(paths.prepared_dir(params, d)) for d in run_datasets(params)]
    _snakemake([*snake, *prepared, "--config", f"params={params_file}"], root, "prepare the data")
    n, stale = restore(params, check_name(against, "compare"), say=say)
    new = [m for m in _methods(params) if m not in read_json(
        check_name(against) / paths.PROVENANCE, "params")["params"]["methods"]]
    if stale:
        raise ConfigError(f"compare --against {against}: {len(stale)} published records are not what the current "
                          f"code makes of their config (first: {stale[0]}); rerun and republish {against} first")
    say(f"restored {n} published records; training {new[0]}'s runs")
    targets = [str(paths.metrics_path(params, d, m, s)) for d, m in run_pairs(params) for s in run_seeds(params)]
    targets += [str(paths.bench_path(params))]
    _snakemake([*snake, *targets, "--config", f"params={params_file}"], root, f"train and evaluate {new[0]}")
    summarize(params, partial=True, one_machine=False)  # the new head may run elsewhere: the card says so
    return render_card(params, params_file, against, new[0])


def _snakemake(cmd: list[str], cwd: Path, what: str) -> None:
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if r.returncode != 0:
        tail = "\n".join((r.stdout + r.stderr).strip().splitlines()[-15:])
        raise ConfigError(f"compare: snakemake failed to {what} (exit {r.returncode}); its last lines:\n{tail}")
