"""What a publication holds: which tables a results folder has to publish (a summary's, or a bench's alone), the
tables copied into ``benchmarks/NAME`` and those an earlier publication there copied, and the checks a summary
must pass first (no perplexity from a handful of tokens). ``publish.py`` writes the publication around them."""
from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd

from ..config import run_datasets
from ..data.checks import MIN_SCORED_TOKENS
from ..io import paths
from ..io.artifacts import read_csv, read_json
from ..io.atomic import atomic_path
from ..io.errors import ConfigError, OutputError




def check_scored_tokens(summary: pd.DataFrame, path: Path) -> None:
    """Refuse to publish a perplexity scored on fewer than MIN_SCORED_TOKENS tokens of a split."""
    if "tokens" not in summary or "split" not in summary:
        return
    few = summary[pd.to_numeric(summary["tokens"], errors="coerce") < MIN_SCORED_TOKENS]
    if len(few):
        r = few.iloc[0]
        raise ConfigError(f"{path}: {r.dataset}'s {r.split} split scored {int(r.tokens)} tokens, fewer than "
                          f"{MIN_SCORED_TOKENS}: a perplexity from so few is noise, not one to publish; give the "
                          f"dataset a longer {r.split} split (its corpus's {r.split}_tokens, or its {r.split} file)")


NO_RUNS = {"dataset": [], "method": [], "seed": [], "config_hash": []}


def what_to_publish(params: dict, params_file: Path, results: Path) -> tuple[str, pd.DataFrame, str]:
    """What ``results_dir`` holds to publish: ``runs`` (a summary), or alone a ``bench``, a ``step`` bench or
    count-based ``refs``; its per-run rows (none but for runs) and the command that made it."""
    summary = paths.summary_path(params)
    if not summary.exists() and paths.bench_path(params).exists():  # `bench` alone: a timing table
        bench_meta = read_json(paths.bench_path(params).with_suffix(".json"), "bench", "quick", "threads")
        if bench_meta["bench"] != params["bench"] or bench_meta["quick"]:
            raise ConfigError(f"{paths.bench_path(params)} was made by another bench config (or --quick): rerun "
                              f"`python -m pipeline_src bench --config {params_file}` before publishing")
        return "bench", pd.DataFrame(NO_RUNS), (f"python -m pipeline_src bench --config {params_file} "
                                                f"--threads {bench_meta['threads']}")
    if not summary.exists() and paths.step_bench_path(params).exists():  # `bench-step` alone: whole steps
        meta = read_json(paths.step_bench_path(params).with_suffix(".json"), "step")
        if meta["step"] != params["bench"].get("step"):
            raise ConfigError(f"{paths.step_bench_path(params)} was made by another bench.step: rerun "
                              f"`python -m pipeline_src bench-step --config {params_file}` before publishing")
        return "step", pd.DataFrame(NO_RUNS), f"python -m pipeline_src bench-step --config {params_file}"
    if not summary.exists() and paths.cell_bench_path(params).exists():  # `bench-cells` alone: the sweep's cells
        meta = read_json(paths.cell_bench_path(params).with_suffix(".json"), "cells")
        if meta["cells"] != params["bench"].get("cells"):
            raise ConfigError(f"{paths.cell_bench_path(params)} was made by another bench.cells: rerun "
                              f"`python -m pipeline_src bench-cells --config {params_file}` before publishing")
        return "cells", pd.DataFrame(NO_RUNS), f"python -m pipeline_src bench-cells --config {params_file}"
    if not summary.exists() and (results / "references").is_dir():  # `reference` alone: every dataset's, current
        from .summarize import _write, reference_rows

        _write(paths.references_summary_path(params), reference_rows(params, False, []))
        return "refs", pd.DataFrame(NO_RUNS), " && ".join(
            f"python -m pipeline_src reference --config {params_file} --dataset {d} --name {r}"
            for d in run_datasets(params) for r in params.get("references", {}))
    if not summary.exists():
        raise ConfigError(f"{results} has no summary.csv, bench.csv, step-bench.csv, cell-bench.csv or references: "
                          f"nothing to publish")
    info = summary.with_suffix(".json")
    partial = info.exists() and read_json(info, "partial")["partial"]  # then published after the finished runs
    return "runs", read_csv(summary, "dataset", "method", "seed", "config_hash"), (
        f"python -m pipeline_src summarize --partial --config {params_file}" if partial
        else f"snakemake --cores all --config params={params_file}")


def copy_tables(params: dict, results: Path, out: Path, kind: str, say) -> list[str]:
    """Copy the tables ``results_dir`` holds (of a summary, only those its summary.json lists) to ``out``,
    removing what an earlier publication there copied and this one does not; the files copied."""
    earlier = earlier_files(out)
    out.mkdir(parents=True, exist_ok=True)
    info = paths.summary_path(params).with_suffix(".json")
    alone = kind in ("bench", "step", "cells")  # a bench's tables, not a summary's
    made = set(read_json(info).get("tables") or []) if info.is_file() and not alone else None
    copied = []
    for t in paths.TABLES:
        if made is not None and t in paths.SUMMARY_TABLES and t not in made:
            continue  # not this summary's (an earlier one's, made under other settings)
        for f in table_files(results, t):  # a table, or a folder's files (headline-metrics/)
            with atomic_path(out / f) as tmp:  # whole or not at all: an interrupted copy leaves the old file
                shutil.copyfile(results / f, tmp)
            copied.append(f)
    stale = sorted(set(earlier or []) - set(copied))
    for t in stale:  # only what the earlier publication itself copied; anything else in the folder stays
        (out / t).unlink(missing_ok=True)
    if earlier is not None:
        say(f"replacing the earlier publication {out}" + (f"; removed its files this run does not make: "
                                                            f"{', '.join(stale)}" if stale else ""))
    return copied


def table_files(folder: Path, table: str) -> list[str]:
    """``table`` under ``folder`` as the files a publication lists: itself, or, for a folder of tables, each of its
    files (relative paths, in order); none where it is absent."""
    path = folder / table
    if table in paths.TABLE_FOLDERS:
        return sorted(f.relative_to(folder).as_posix() for f in path.rglob("*") if f.is_file())
    return [table] if path.is_file() else []


def is_table(name: str) -> bool:
    """A publication's file that one of ``paths.TABLES`` made: the table itself or a file of a folder of tables."""
    return name in paths.TABLES or name.split("/", 1)[0] in paths.TABLE_FOLDERS or name in LEGACY_TABLES


LEGACY_TABLES = ("headline-metrics.json",)  # tables no longer made: a publication's copy is removed when it is remade


def stale_views(files: list[str], tables: dict) -> list[str]:
    """Of a publication's ``files``, those a restate that writes ``tables`` leaves stale: a table no longer made,
    or a file of a folder of tables remade whole without it (a method gone from headline-metrics/)."""
    remade = {t.split("/", 1)[0] for t in tables if "/" in t} & set(paths.TABLE_FOLDERS)
    return [f for f in files if f not in tables and (f in LEGACY_TABLES or ("/" in f and f.split("/", 1)[0] in remade))]


def earlier_files(out: Path) -> list[str] | None:
    """The tables an earlier publication at ``out`` copied (its provenance.json), None if there is none."""
    prov = out / paths.PROVENANCE
    if not prov.is_file():
        # records/ and earlier-data/: `stash` and the data its records were scored on (records/stash.py)
        if out.is_dir() and any(f.name not in ("records", paths.EARLIER_DATA) for f in out.iterdir()):
            raise OutputError(f"{out} exists and is not a publication (no provenance.json): refusing to write "
                              f"into it; choose another --name")
        return None
    return [t for t in read_json(prov, "files")["files"] if is_table(t)]
