"""The hash files: one small file per step input holding the hash of the settings that step reads, so both
engines see a changed setting as a changed input file (Snakemake by its time, DVC by its content); and, after
Snakemake, recording what it made in DVC's lock file."""
from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path

from ..config import config_hash
from ..io import paths
from ..io.artifacts import read_json


def step_hashes(params: dict, born: dict[Path, str] | None = None) -> dict[Path, str]:
    """Every hash file's path and content: per final run, the hash of what trains it (``.train``) and of
    the whole run config (``.evaluate``); the bench's and the matrix experiment's settings, with only the
    methods each reads. A tuned run's file holds its params-file settings (its selection is an input too).
    ``born``: :func:`born_old`'s files, when the caller has them already."""
    from ..config import run_datasets
    from ..evaluation.reference import reference_config

    out = {}
    for ds, method, seed, spec in _final_specs(params):
        out[paths.run_hash_path(params, ds, method, seed, "train")] = spec.train_hash
        out[paths.run_hash_path(params, ds, method, seed, "evaluate")] = spec.hash
    for ds in run_datasets(params):
        for name in params.get("references", {}):
            out[paths.reference_hash_path(params, ds, name)] = config_hash(reference_config(params, ds, name))
    for step in ("bench", "matrix"):
        used = {m: params["methods"][m] for m in params[step]["methods"]}
        out[paths.hashes_dir(params) / step] = config_hash({step: params[step], "methods": used, "seed": params["seed"]})
    return {**out, **(born if born is not None else born_old(params))}


def _final_specs(params: dict):
    """(dataset, method, seed, its spec as the params file writes it) of every final run."""
    from ..config import run_pairs, run_seeds
    from ..config.runspec import resolve_run

    for ds, method in run_pairs(params):
        for seed in run_seeds(params):
            yield ds, method, seed, resolve_run(params, ds, method, seed=seed, as_written=True)


def made_already(params: dict) -> set[Path]:
    """The run hash files whose step's record is already there, made under that very hash (a run trained and
    evaluated by hand through the CLI before Snakemake ever wrote its hash files): a new one of these is written
    with the time 0, as :func:`born_old`'s, so Snakemake does not retrain a run for the file's first appearance."""
    from ..config import run_hash, train_hash

    out = set()
    for ds, method, seed, spec in _final_specs(params):
        for step, record, of in (("train", paths.TRAIN_RECORD, train_hash), ("evaluate", paths.METRICS, run_hash)):
            rec = spec.out_dir / record
            want = spec.train_hash if step == "train" else spec.hash
            if rec.is_file() and _made_under(rec, of) == want:
                out.add(paths.run_hash_path(params, ds, method, seed, step))
    return out


def _made_under(record: Path, of) -> str | None:
    """The hash (``of``: train_hash or run_hash) of the config a record names; None for a damaged record (not
    JSON, not a mapping, a config that is not one): such a record is not made already, and its step remakes it."""
    from ..io.errors import ArtifactError

    try:
        rec = read_json(record)
        cfg = rec.get("config") if isinstance(rec, dict) else None
        return of(cfg) if isinstance(cfg, dict) else None
    except (ArtifactError, AttributeError, TypeError, KeyError, ValueError):
        return None


def born_old(params: dict) -> dict[Path, str]:
    """The hash files added on 2026-11-26 (data, trials, statistics), so that every setting a rule reads is an
    input file and Snakemake needs no `params` rerun trigger (which reran what `dvc repro` had already remade).
    A new one is written with the time 0: its first appearance is not a change, so a results folder made before
    it is not rerun; a later change of its content is."""
    from ..config import data_config, run_datasets, run_pairs

    out = {paths.data_hash_path(params, ds): config_hash(data_config(params, ds)) for ds in run_datasets(params)}
    if (params.get("tuning") or {}).get("enabled"):
        from ..config.runspec import resolve_run
        from ..config.tuning import trial_count

        for ds, method in run_pairs(params):
            for t in range(trial_count(params, ds)):  # a promoted trial by its place (its point is rung 0's to decide)
                out[paths.trial_hash_path(params, ds, method, t)] = resolve_run(params, ds, method, trial=t,
                                                                                as_written=True).train_hash
    out[paths.statistics_hash_path(params)] = config_hash(params["statistics"])
    return out


SUMMARY_SENTINEL = "summary"


def record_hashes(params: dict) -> list[Path]:
    """Write the hash files whose hash changed (their time is what Snakemake compares, their content what
    DVC does; the hash is the first line, a second names the write), and mark a partial summary made by hand (``summarize --partial``) for a rebuild; return the
    files written. Snakemake calls this when it reads the DAG; DVC's ``hashes`` stage when params.yaml changed."""
    from ..io.atomic import write_text

    born = born_old(params)  # resolves every tuning trial: once
    want = {path: f"{h}\n" for path, h in step_hashes(params, born).items()}
    sentinel = paths.hashes_dir(params) / SUMMARY_SENTINEL
    info = paths.summary_path(params).with_suffix(".json")
    made = read_json(info, "partial") if info.is_file() else {}
    gone = [r for r in made.get("records") or {} if not (Path(params["results_dir"]) / r).is_file()]
    if made.get("partial") or gone:  # a newer sentinel than summary.csv: Snakemake resummarises every run, and
        # remakes a run whose folder was deleted (without this it said "Nothing to be done" and kept the run)
        want[sentinel] = (f"rebuild the {'partial ' if made.get('partial') else ''}summary of "
                          f"{info.stat().st_mtime_ns}{f' ({len(gone)} runs gone)' if gone else ''}\n")
    elif not sentinel.exists():
        want[sentinel] = "complete\n"
    made = made_already(params) if any(not p.is_file() for p in want) else set()
    written, stamp = [], f"written {datetime.now(timezone.utc).isoformat()} by process {os.getpid()}\n"
    for path, text in want.items():
        if not path.is_file() or path.read_text().split("\n", 1)[0] != text.rstrip("\n"):
            new = not path.is_file()
            # the second line makes every rewrite a new content: Snakemake skips an input that is newer than
            # its job's outputs but has the checksum its metadata recorded, so a setting changed back (after
            # `dvc repro` made the outputs under another) would otherwise rerun nothing
            write_text(path, text + stamp)
            if new and (path in born or path in made):
                os.utime(path, (0, 0))
            written.append(path)
    return written


def dvc_record(params_file: str, root: Path = Path(".")) -> str | None:
    """After Snakemake ran ``params.yaml`` in a DVC repository, ``dvc commit`` records what it made in
    dvc.lock, so ``dvc status`` lists only what really differs from the current settings (DVC otherwise has no
    record of outputs it did not make, and calls every stage changed). Another params file is not what
    dvc.yaml describes: nothing is recorded. Returns a line to print, or None when there is no DVC here."""
    import shutil
    import subprocess
    import sys

    dvc = shutil.which("dvc", path=str(Path(sys.executable).parent)) or shutil.which("dvc")
    if not (root / ".dvc").is_dir() or dvc is None:
        return None
    if Path(params_file).resolve() != (root / "params.yaml").resolve():
        return f"dvc.lock not updated: this run used {params_file}, and dvc.yaml describes params.yaml"
    r = subprocess.run([dvc, "commit", "--force", "--quiet"], cwd=root, capture_output=True, text=True)
    if r.returncode:
        why = (r.stderr.strip().splitlines() or ["?"])[-1]
        return f"warning: `dvc commit` failed ({why}); `dvc status` will list stages Snakemake made as changed"
    return "recorded Snakemake's outputs in dvc.lock (`dvc commit`): `dvc status` lists only what differs"
