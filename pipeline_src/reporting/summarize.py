"""Aggregate per-run metrics (``summary.csv``), learning curves (``history.csv``), matrix fits
(``matrix.csv``), the verdicts over seeds (``headline.csv``), each method of ``statistics.contrasts``
against its own control (``contrasts.csv``, header only when none is declared), the count-based reference
rows of every dataset (``references.csv``: Kneser-Ney, no seeds) and, with tuning, every trial
(``tuning.csv``) and the expected best validation perplexity against the number of trials
(``tuning_curves.csv``)."""
from __future__ import annotations

import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..config import dataset_methods, first_difference, run_datasets, run_pairs, run_seeds
from ..config.runspec import final_config
from ..data.bands import BANDS
from ..io import paths
from ..io.artifacts import read_csv, read_json
from ..io.atomic import atomic_path, write_json
from ..io.digests import SEAL, check_file, check_seal, sha256_of
from ..io.errors import StaleError
from .axis_tables import NAMES as AXIS_TABLES
from .axis_tables import axis_tables
from .ladder_tables import NAMES as LADDER_TABLES
from .ladder_tables import ladder_tables
from .calibration import calibrations
from .machine import check_one_machine, machine_record, timed_record
from .rows import BAND_PARTS, SUMMARY_COLUMNS, anytime_rows, anytime_table, band_columns, summary_rows
from .stats import contrasts, expected_best, headline
from .summary_checks import check_current, check_matrix_fit


REFERENCE_COLUMNS = ["dataset", "method", "kind", "order", "split", "nll", "ppl", "true_nll", "gap_nll", "tokens",
                     "fit_seconds", "fit_seconds_all_orders", "train_tokens", "vocab",
                     *[f"{band}_{what}" for band in BANDS for what in ("ppl", "gap_nll", "tokens")], "config_hash",
                     # the band split (evaluation/scoring.py), on test
                     "band_alloc_nll", "band_alloc_gap",
                     *[f"{band}_{what}" for band in BANDS for what in BAND_PARTS[3:]]]


def reference_rows(params: dict, partial: bool, missing: list) -> pd.DataFrame:
    """Every dataset's count-based reference rows (``references``), each checked against the current
    config (its options and the data it read)."""
    from ..config import config_hash
    from ..evaluation.reference import reference_config

    rows = []
    for dataset in run_datasets(params):
        for name in params.get("references", {}):
            path = paths.reference_path(params, dataset, name)
            if not _finished(path, partial, missing, f"references/{dataset}/{name}",
                             f"reference --dataset {dataset} --name {name}"):
                continue
            rec = read_json(path, "config", "config_hash", "splits", "order")
            check_seal(path, rec, f"`python -m pipeline_src reference --dataset {dataset} --name {name}`")
            want = reference_config(params, dataset, name)
            if rec["config_hash"] != config_hash(want):
                key = first_difference(rec["config"], want) or "?"
                raise StaleError(f"{path} was made under another config (key '{key}' differs): rerun "
                                 f"`python -m pipeline_src reference --dataset {dataset} --name {name}` (or `snakemake`)")
            for split, m in rec["splits"].items():
                rows.append({"dataset": dataset, "method": rec["method"], "kind": rec["kind"], "order": rec["order"],
                             "split": split, **{k: m.get(k) for k in ("nll", "ppl", "true_nll", "gap_nll", "tokens")},
                             **{k: rec[k] for k in ("fit_seconds", "fit_seconds_all_orders", "train_tokens", "vocab")},
                             **band_columns(m), "config_hash": rec["config_hash"],
                             **{k: m.get(k) for k in ("band_alloc_nll", "band_alloc_gap")}})
    return pd.DataFrame(rows, columns=REFERENCE_COLUMNS)


def _vocab(params: dict, dataset: str) -> int | None:
    """|V| of a dataset as prepared (its meta.json), for ordering datasets by vocabulary size."""
    meta = paths.prepared_dir(params, dataset) / paths.META
    return read_json(meta, "vocab_size")["vocab_size"] if meta.exists() else None


def _finished(path, partial: bool, missing: list, label: str, command: str, hint: str = "") -> bool:
    """Whether a step's record exists; if not, ``partial`` lists it as missing, else it is an error naming the
    command that makes it."""
    if path.exists():
        return True
    if partial:
        missing.append(label)
        return False
    raise FileNotFoundError(f"{path} is missing: run `python -m pipeline_src {command}` first{hint}")


def _write(path, frame: pd.DataFrame) -> None:
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False)


def verdict_tables(summary: pd.DataFrame, params: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The headline (every method against the reference) and the contrasts (each against its own control)
    of per-run rows, under the params file's ``statistics``; ``restate`` recomputes published ones."""
    st = params["statistics"]
    head = headline(summary, st["reference"], st["confidence"], st["resamples"], paper=params.get("paper"),
                    interval=st["interval"])
    con = contrasts(summary, st["contrasts"], st["confidence"], st["resamples"], interval=st["interval"])
    return head, con


def summarize(params: dict, partial: bool = False, one_machine: bool = True) -> pd.DataFrame:
    """``partial``: summarise the runs that have finished and list the others in ``summary.json``
    (a long experiment publishes its results as they land; the tables then say how many runs they hold).
    ``one_machine``: refuse time-budgeted records from machines of different speed (``machine.py``; ``compare``
    lifts it: its card states the new head's machine beside the publication's calibration)."""
    missing: list = []
    runs = _read_runs(params, partial, missing)
    matrix_rows = _matrix_rows(params, partial, missing)
    if not runs.rows:
        raise FileNotFoundError(f"no finished run under {params['results_dir']}: nothing to summarise")
    df = pd.DataFrame(runs.rows, columns=SUMMARY_COLUMNS)
    history = pd.concat(runs.curves, ignore_index=True)
    history = history[["dataset", "method", "seed"] + [c for c in history.columns
                                                       if c not in ("dataset", "method", "seed")]]
    head, con = verdict_tables(df, params)
    # every record read and checked before any table is written: a refusal leaves the earlier tables whole
    tables = {paths.summary_path(params): df, paths.history_path(params): history,
              paths.anytime_path(params): anytime_table(runs.anytime),
              paths.matrix_summary_path(params): pd.DataFrame(matrix_rows), paths.headline_path(params): head,
              paths.contrasts_path(params): con,
              paths.references_summary_path(params): reference_rows(params, partial, missing)}
    refs = tables[paths.references_summary_path(params)]
    tables.update({Path(params["results_dir"]) / name: frame  # the budget axis, when long runs kept points
                   for name, frame in axis_tables(tables[paths.anytime_path(params)], df, refs, params).items()})
    timed, trials = runs.timed, None
    if (params.get("tuning") or {}).get("enabled"):
        trials, tcurves = tuning_tables(params, partial, missing)
        tables[paths.tuning_summary_path(params)] = trials
        tables[paths.tuning_curves_path(params)] = tcurves
        timed = timed + trial_records(params, trials)
    tables.update({Path(params["results_dir"]) / name: frame  # a token ladder: equal data and equal time
                   for name, frame in ladder_tables(tables[paths.anytime_path(params)], df,
                                                    tables.get(Path(params["results_dir"]) / "budget-advice.csv"),
                                                    params, _split_tokens(params), trials).items()})
    timed = [t for t in timed if t]
    accepted = {}
    if one_machine:
        accepted = check_one_machine(timed, params["results_dir"], params["statistics"].get("speed_spread_accepted"))
    for path, frame in tables.items():
        _write(path, frame)
    _write_dvc_views(params, head, history)
    _remove_stale(params, tables)
    machines = machine_record(timed)
    if accepted:  # a spread the params file accepts, with its reason and the readings that exceed the rule
        machines["speed_spread_accepted"] = accepted
    _write_info(params, tables, missing, runs.records, machines, runs.earlier_data)
    return df


@dataclass
class _Runs:
    """What the final runs' records hold, read and checked (``_read_runs``)."""
    rows: list = field(default_factory=list)  # summary rows, one per split
    curves: list = field(default_factory=list)  # each run's history.csv with its keys
    anytime: list = field(default_factory=list)  # anytime, equal-data and budget points
    records: dict = field(default_factory=dict)  # metrics.json path -> its content digest
    timed: list = field(default_factory=list)  # machine.Timed (None for a run without a time budget)
    earlier_data: dict = field(default_factory=dict)  # dataset -> the earlier preparation its runs were scored on


def _read_runs(params: dict, partial: bool, missing: list) -> _Runs:
    """Every final run's record, checked (seal, config, data, history); an unfinished one is listed in
    ``missing`` under ``partial``, else an error."""
    runs = _Runs()
    for dataset, method in run_pairs(params):
        for seed in run_seeds(params):
            path = paths.metrics_path(params, dataset, method, seed)
            if not _finished(path, partial, missing, f"{dataset}/{method}/seed{seed}",
                             f"evaluate --dataset {dataset} --method {method} --seed {seed}",
                             " (or `summarize --partial` to summarise the finished runs)"):
                continue
            metrics = read_json(path, "config_hash", "config")
            runs.records[Path(path).relative_to(params["results_dir"]).as_posix()] = metrics.get(SEAL)
            evaluate = f"`python -m pipeline_src evaluate --dataset {dataset} --method {method} --seed {seed}`"
            check_seal(path, metrics, evaluate)
            check_current(path, metrics, final_config(params, dataset, method, seed))
            _check_scored_data(params, dataset, path, metrics, evaluate, runs.earlier_data)
            runs.rows.extend(summary_rows(metrics, _vocab(params, dataset)))
            runs.timed.append(timed_record(f"{dataset}/{method}/seed{seed}", metrics, final=True))
            runs.anytime.extend(anytime_rows(metrics))
            hist_path = paths.run_dir(params, dataset, method, seed) / paths.HISTORY
            check_file(hist_path, metrics.get("history_sha256"), path, f"its run's train and {evaluate}")
            runs.curves.append(read_csv(hist_path).assign(dataset=dataset, method=method, seed=seed))
    return runs


def _check_scored_data(params: dict, dataset: str, path, metrics: dict, evaluate: str, earlier: dict) -> None:
    """A run scored on other data than the dataset's prepared data now is refused; one scored on an earlier
    preparation with the same tokens (``data.checks.scored_data``) is kept and noted in ``earlier``."""
    from ..data.checks import scored_data

    digest, meta = metrics.get("prepared_meta_sha256"), paths.prepared_dir(params, dataset) / paths.META
    if not digest or not meta.is_file():
        return
    how = scored_data(params, dataset, digest)
    if how not in ("current", "same tokens"):
        earlier = "" if how == "meta.json" else (f"; the earlier preparation it was scored on "
                                                  f"({paths.earlier_meta_path(params, dataset)}) differs in {how}")
        raise StaleError(f"{path} was scored on other data than {meta.parent} holds now (prepared again "
                         f"since{earlier}): rerun {evaluate} (or `snakemake`)")
    if how == "same tokens":
        earlier[dataset] = {"scored_on": digest, "prepared_now": sha256_of(meta), "differs": paths.NOISE}


def _matrix_rows(params: dict, partial: bool, missing: list) -> list:
    """The matrix-fitting experiment's rows, each fit checked against its config (none where ``matrix.methods`` is
    empty: the experiment is not part of the config)."""
    rows = []
    if not params["matrix"]["methods"]:
        return rows
    for vocab in params["matrix"]["vocab_sizes"]:
        for dim in params["matrix"]["dims"]:
            for seed in run_seeds(params):
                path = paths.matrix_fit_path(params, vocab, dim, seed)
                if not _finished(path, partial, missing, f"matrix/M{vocab}-d{dim}-seed{seed}",
                                 f"matrix --vocab {vocab} --dim {dim} --seed {seed}"):
                    continue
                fit = read_json(path, "rows", "config", "methods")
                check_matrix_fit(params, path, fit, f"`python -m pipeline_src matrix --vocab {vocab} --dim {dim} "
                                                    f"--seed {seed}`")
                rows.extend(fit["rows"])
    return rows


def _remove_stale(params: dict, tables: dict) -> None:
    """An earlier summary's tuning and budget-axis tables that this one did not write: not to be shown."""
    for stale in (paths.tuning_summary_path(params), paths.tuning_curves_path(params),
                  *(Path(params["results_dir"]) / name for name in AXIS_TABLES + LADDER_TABLES)):
        if stale not in tables:
            stale.unlink(missing_ok=True)


def _split_tokens(params: dict) -> dict[str, int | None]:
    """Each run dataset's training split in tokens, from its preparation's meta.json (None where not prepared)."""
    out = {}
    for ds in params["run"]["datasets"]:
        meta = paths.prepared_dir(params, ds) / paths.META
        out[ds] = read_json(meta)["splits"]["train"]["tokens"] if meta.is_file() else None
    return out


def _write_info(params: dict, tables: dict, missing: list, records: dict, machine: dict | None,
                earlier_data: dict) -> None:
    """summary.json: the tables by digest, what is missing, the statistics, the records and calibrations read,
    the machine of a time-budgeted experiment (``machine.machine_record``), and the datasets whose runs were
    scored on an earlier preparation with the same tokens (``data.checks.scored_data``)."""
    total = len(run_pairs(params)) * len(run_seeds(params))
    write_json(paths.summary_path(params).with_suffix(".json"),
               {"tables": {Path(p).relative_to(params["results_dir"]).as_posix(): sha256_of(p) for p in tables},
                "partial": bool(missing), "runs": total - sum(not m.startswith(("matrix/", "references/", "tuning/"))
                                                              for m in missing),
                "of": total, "missing": missing, "statistics": params["statistics"],
                "records": records,  # each run's metrics.json by its content digest: check_tables holds them
                "budget_calibrations": calibrations(params),  # where frozen token budgets came from
                "time_budget_machine": machine,  # what a time budget bought depends on it
                "gpu_cells": gpu_cells_record(params),  # the GPU bench the axis's GPU tables read, by digest
                **({"earlier_data": dict(sorted(earlier_data.items()))} if earlier_data else {})})


def trial_records(params: dict, trials: pd.DataFrame) -> list:
    """The tuning trials' records as ``machine.Timed`` (their train.json: the environment they ran in)."""
    out = []
    for r in trials.itertuples():
        path = paths.trial_dir(params, r.dataset, r.method, r.trial) / paths.TRAIN_RECORD
        if path.is_file():
            out.append(timed_record(f"{r.dataset}/{r.method}/trial{r.trial}", read_json(path), picked=r.selected))
    return out


def gpu_cells_record(params: dict) -> dict | None:
    """The GPU cell bench named by ``statistics.gpu_cells`` (path and sha256), when named and present."""
    cells = params["statistics"].get("gpu_cells")
    return {"path": cells, "sha256": sha256_of(cells)} if cells and Path(cells).is_file() else None


def dvc_views(head: pd.DataFrame, history: pd.DataFrame) -> tuple[dict, pd.DataFrame]:
    """What DVC shows: headline-metrics/ (`dvc metrics show`: a row a dataset and method, its test perplexity with
    the interval and the seeds; {file relative to results_dir: content}) and valid-curves.csv (`dvc plots show`:
    each method's mean validation perplexity per epoch over its seeds)."""
    metrics = {paths.headline_metric_file(r.dataset, r.method): {
        "test_ppl": _rounded(r.ppl), "ppl_low": _rounded(r.ppl_low), "ppl_high": _rounded(r.ppl_high),
        "seeds": int(r.seeds)} for r in head.itertuples()}
    curves = (history.groupby(["dataset", "method", "epoch"], sort=False).valid_nll.mean().reset_index()
              .assign(valid_ppl=lambda d: np.exp(d.valid_nll)).drop(columns="valid_nll"))
    return metrics, curves


def _rounded(x) -> float | None:
    return None if pd.isna(x) else round(float(x), 4)  # a diverged method's: no number


def _write_dvc_views(params: dict, head: pd.DataFrame, history: pd.DataFrame) -> None:
    metrics, curves = dvc_views(head, history)
    folder = paths.headline_metrics_path(params)
    if folder.is_dir():  # a method or dataset no longer in the run set leaves no row behind
        from ..io.tracked import refuse_tracked

        refuse_tracked(folder, "delete")  # never a committed publication's (a results_dir pointed at one)
        shutil.rmtree(folder)
    for name, content in metrics.items():
        write_json(Path(params["results_dir"]) / name, content)
    _write(paths.valid_curves_path(params), curves)


def tuning_tables(params: dict, partial: bool = False,
                  missing: list | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every trial with its selection, and the expected best validation perplexity after n trials
    (a diverged trial counts as a draw of the uniform distribution, nll = log |V|: no better than guessing).
    ``partial``: a selection not made yet is listed in ``missing`` instead."""
    rows, curves = [], []
    for dataset in run_datasets(params):
        if not paths.prepared_dir(params, dataset).exists() and partial:
            continue
        vocab = read_json(paths.prepared_dir(params, dataset) / paths.META, "vocab_size")["vocab_size"]
        for method in dataset_methods(params, dataset):
            path = paths.selected_path(params, dataset, method)
            if not _finished(path, partial, [] if missing is None else missing, f"tuning/{dataset}/{method}",
                             f"select --dataset {dataset} --method {method}"):
                continue
            sel = read_json(path, "trials", "trial")
            check_seal(path, sel, f"`python -m pipeline_src select --dataset {dataset} --method {method}`")
            lr_dim = sel.get("space", [{}])[0]
            for r in sel["trials"]:
                rows.append({**r, "selected": r["trial"] == sel["trial"],  # null: a diverged trial (JSON has no inf)
                             **{k: math.inf for k in ("valid_nll", "valid_ppl") if r.get(k, 0) is None},
                             "lr_low": lr_dim.get("low"), "lr_high": lr_dim.get("high"),  # the range tuned over
                             # the pick at the lowest or highest rate tried: the range may not hold the optimum
                             "lr_edge": sel.get("lr_edge") if r["trial"] == sel["trial"] else None})
            nll = [r["valid_nll"] if r["status"] == "ok" else math.log(vocab)  # the design's trials, one budget
                   for r in sel["trials"] if not r.get("rung")]  # (successive halving's repeats are its choice)
            for n, e in enumerate(expected_best(nll), start=1):
                curves.append({"dataset": dataset, "method": method, "trials": n, "expected_best_valid_nll": e,
                               "expected_best_valid_ppl": math.exp(e) if e < 709 else math.inf})
    return pd.DataFrame(rows), pd.DataFrame(curves)
