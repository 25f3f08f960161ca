"""The checks a summary's readers run first (figures, report, publish, summarize itself): a run's record made by
the config asked for, a summary whose runs, verdicts and tables are what ``summarize`` made from the records as
they are now, and a matrix fit or bench table made under the current settings. Each refusal is one line naming
the file and the command that remakes it."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..config import canonical, first_difference, run_hash, run_pairs, run_seeds
from ..config.runspec import final_config
from ..io import paths
from ..io.artifacts import read_csv, read_json
from ..io.digests import SEAL, check_file, check_seal, sealed, sha256_of
from ..io.errors import StaleError, not_there


def check_current(path, record: dict, cfg: dict) -> None:
    """Refuse a run's record (metrics.json) that another config made, naming the file and the first key
    that differs: a summary never presents a number made under other settings as current."""
    made, want = run_hash(record["config"]), run_hash(cfg)  # a record of an earlier version: by what made it
    if made != want:
        key = first_difference(canonical(record["config"]), canonical(cfg)) or "?"
        raise StaleError(f"{path} was made under another config (key '{key}' differs; hash "
                         f"{made}, this config: {want}): rerun its run's steps "
                         f"(`snakemake` does)")


def check_summary_current(params: dict, summary: pd.DataFrame | None = None) -> None:
    """Refuse a summary (summary.csv, its verdicts) that another config made: every run's row must carry the
    hash its current config gives, and summary.json the current ``statistics`` (figures, report and publish
    read the summary, never the runs)."""
    info = check_tables(params) or {}
    path = paths.summary_path(params)
    if summary is None and not path.is_file():
        raise StaleError(f"{path} {not_there(path)}: nothing is summarised there yet; run `python -m pipeline_src "
                         f"summarize` after the runs (or `snakemake`, which runs everything up to the report)")
    if summary is None:
        summary = read_csv(path, "dataset", "method", "seed", "config_hash")
    rows = list(summary.drop_duplicates(["dataset", "method", "seed"]).itertuples())
    for r in rows:
        want = run_hash(final_config(params, r.dataset, r.method, int(r.seed)))
        if r.config_hash != want:
            raise StaleError(f"{path}: run {r.dataset}/{r.method}/seed{r.seed} was made by another config (hash "
                             f"{r.config_hash}; this config: {want}): rerun the pipeline (`snakemake`)")
    runs = {(r.dataset, r.method, int(r.seed)) for r in rows}
    want = {(d, m, s) for d, m in run_pairs(params) for s in run_seeds(params)}
    extra = sorted(runs - want)
    if extra:
        d, m, s = extra[0]
        raise StaleError(f"{path} holds {len(extra)} run(s) this config does not make ({d}/{m}/seed{s} first): "
                         f"rerun `python -m pipeline_src summarize` (or `snakemake`)")
    listed = set(info.get("missing") or [])
    for d, m, s in sorted(want - runs):  # listed missing, and finished since: the summary no longer says what is
        metrics = paths.run_dir(params, d, m, s) / paths.METRICS
        if f"{d}/{m}/seed{s}" in listed and metrics.is_file() and \
                run_hash(read_json(metrics, "config")["config"]) == run_hash(final_config(params, d, m, s)):
            raise StaleError(f"{path} lists {d}/{m}/seed{s} as missing, but it has finished since ({metrics}): rerun "
                             f"`python -m pipeline_src summarize --partial` (or `snakemake`)")
    absent = sorted((d, m, s) for d, m, s in want - runs if f"{d}/{m}/seed{s}" not in listed)
    if absent:
        d, m, s = absent[0]
        raise StaleError(f"{path} lacks {len(absent)} run(s) this config makes ({d}/{m}/seed{s} first) and does not "
                         f"list them as missing: rerun `snakemake`, or `python -m pipeline_src summarize --partial`")
    made = info.get("statistics")
    if made is not None and made != params["statistics"]:
        key = first_difference(made, params["statistics"])
        raise StaleError(f"{path}: its verdicts were made under other statistics (key 'statistics.{key}' differs): "
                         f"rerun `python -m pipeline_src summarize` (or `snakemake`)")


def check_matrix_fit(params: dict, path, fit: dict, rerun: str) -> None:
    """Refuse a matrix fit whose content was edited, or that other ``matrix:`` settings (or other head options
    of its methods) made."""
    check_seal(path, fit, rerun)
    want = {"config": params["matrix"], "methods": {m: params["methods"][m] for m in params["matrix"]["methods"]}}
    for key in ("config", "methods"):
        where = first_difference(fit[key], want[key])
        if where is not None:
            raise StaleError(f"{path} was made under other matrix settings (key "
                             f"'{'matrix' if key == 'config' else 'methods'}.{where}' differs): rerun {rerun} (or "
                             f"`snakemake`)")


def check_tables(params: dict) -> dict | None:
    """Refuse a results folder whose tables are not the ones its summary.json says ``summarize`` wrote (a table
    edited by hand, or copied in from another run): one line naming the file. This guards against accidents and
    mixed folders, not against someone who rewrites summary.json too. A summary without its summary.json, or
    with one from before the digests, is refused too (summarize remakes it in seconds). Returns summary.json's
    content (None when there is no summary)."""
    info = paths.summary_path(params).with_suffix(".json")
    if not paths.summary_path(params).exists():
        return None  # no summary: its readers say so
    made = read_json(info) if info.exists() else {}
    if "tables" not in made:  # removed, or from before the digests: remake it
        raise StaleError(f"{paths.summary_path(params)} has no record of the tables summarize wrote ({info} "
                         f"{'is missing' if not info.exists() else 'predates table digests'}): rerun "
                         f"`python -m pipeline_src summarize` (or delete summary.csv and run `snakemake`)")
    for name, digest in (made.get("records") or {}).items():  # the runs it summarised: still there, unchanged
        path = Path(params["results_dir"]) / name
        if not path.is_file():
            raise StaleError(f"{info} summarises {path}, which is gone: the tables hold a run no record backs; "
                             f"rerun the run (delete {paths.summary_path(params)} and run `snakemake`)")
        rec = read_json(path)
        if digest is not None and (rec.get(SEAL) != digest or not sealed(rec)):  # the seal, and the content under it
            raise StaleError(f"{path} changed after {info} summarised it: rerun `python -m pipeline_src summarize`"
                             f" (or `snakemake`)")
    for name, digest in (made.get("tables") or {}).items():
        path = Path(params["results_dir"]) / name
        if not path.is_file():
            raise StaleError(f"{path} is missing but {info} lists it: rerun `python -m pipeline_src summarize`")
        if sha256_of(path) != digest:
            raise StaleError(f"{path} is not the table summarize wrote beside {info} (its sha256 differs: edited, or "
                             f"from another run): rerun `python -m pipeline_src summarize` (or `snakemake`)")
    return made


def check_bench(params: dict, params_file: str = "params.yaml") -> None:
    """Refuse a bench.csv that other ``bench:`` settings (or other head options of its methods) made, or whose
    content is not what the bench wrote beside bench.json (nothing to check without a bench.csv)."""
    path = paths.bench_path(params)
    if not path.is_file():
        return
    meta_path = path.with_suffix(".json")
    rerun = f"`python -m pipeline_src bench --config {params_file}` (or `snakemake`)"
    meta = read_json(meta_path, "bench")
    where = first_difference(meta["bench"], params["bench"])
    if where is not None:
        raise StaleError(f"{path} was made under other bench settings (key 'bench.{where}' differs): rerun {rerun}")
    want = {m: params["methods"][m] for m in params["bench"]["methods"]}
    if "methods" in meta and first_difference(meta["methods"], want) is not None:
        raise StaleError(f"{path} was made under other head options (key 'methods."
                         f"{first_difference(meta['methods'], want)}' differs): rerun {rerun}")
    check_file(path, meta.get("bench_csv_sha256"), meta_path, rerun)
