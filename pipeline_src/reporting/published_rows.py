"""A publication's committed per-run rows (``summary.csv``, ``tuning.csv``) read as the facts that ``restate``,
``freeze-budgets`` and ``freeze-settings`` rest verdicts and frozen budgets on.

Those commands write no run: what they print or rewrite is only as good as the rows they read, so a row that
cannot be a run's is refused with one line naming the file, its line and the cell, never read as a blank, a
string or a duplicate that moves a verdict. Two layers:

- **Digest.** A publication records each table's sha256 when it is published (``provenance.json``,
  ``runs.tables``); a table whose bytes differ was edited after publishing, and is refused outright
  (:func:`check_digest`, also for the other tables ``restate`` reads). A table whose digest matches is the
  pipeline's own and is read as it is.
- **Rows.** Publications from before the digests get the checks the digest makes unnecessary: every line as wide
  as the header, splits ``valid`` / ``test``, seeds among the published run seeds, one row per (dataset, method,
  seed, split) or (dataset, method, trial), datasets and methods the publication's params define, numbers where
  numbers belong (a test nll may be +inf only where the run did not learn or gave a test word probability 0), and
  a ``selected`` column of True / False with one pick per cell. A deleted row is not seen: only the digest sees it.
"""
from __future__ import annotations

import csv
import math
from pathlib import Path

import pandas as pd

from ..io import paths
from ..io.artifacts import read_csv, read_json
from ..io.digests import sha256_of
from ..io.errors import ArtifactError

KEYS = {"summary.csv": ("dataset", "method", "seed", "split"), "tuning.csv": ("dataset", "method", "trial")}


def check_digest(pub: Path, file: str, prov: dict | None = None) -> bool:
    """Whether ``pub / file`` is byte for byte the table its publication recorded (True), or the publication
    recorded no digest for it (False); an :class:`ArtifactError` when it was edited since. ``prov``: its
    provenance.json, when the caller has read it already."""
    prov = read_json(pub / paths.PROVENANCE) if prov is None else prov
    runs = prov.get("runs") if isinstance(prov.get("runs"), dict) else {}  # the summary record it was published with
    digest = (runs.get("tables") or {}).get(file)
    path = pub / file
    if digest is None or not path.is_file():
        return False
    if sha256_of(path) != digest:
        raise ArtifactError(f"{path}: not the file that was published (its sha256 differs from the one "
                            f"{pub / paths.PROVENANCE} recorded): it was edited since; restore it "
                            f"(`git checkout -- {path}`) or republish")
    return True


def read_published(pub: Path, file: str, *columns: str) -> pd.DataFrame:
    """``pub / file`` (summary.csv or tuning.csv) with ``columns``, checked against its recorded digest or, without
    one, row by row; an :class:`ArtifactError` of one line (file, line, cell, what to do) for a table that cannot
    be the publication's."""
    path = pub / file
    prov = read_json(pub / paths.PROVENANCE)
    strict = not check_digest(pub, file, prov)
    fix = f"restore it (`git checkout -- {path}`) or republish"
    frame = read_csv(path)  # its errors say to restore it (a file under benchmarks/)
    missing = [c for c in (*KEYS[file], *columns) if c not in frame.columns]
    if missing:  # a publication from before that column (or an edited header): only a new one has it
        raise ArtifactError(f"{path}: column {missing[0]!r} is missing (published before it existed, or edited); "
                            f"republish it with the current code")
    params = prov.get("params") if isinstance(prov.get("params"), dict) else {}
    if strict:
        _check_width(path, fix)
    return _read_rows(frame, path, file, params, fix, strict)


def _check_width(path: Path, fix: str) -> None:
    """Every line holds as many cells as the header (pandas pads a short line with blanks)."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = csv.reader(f)
        width = len(next(rows))
        for line, row in enumerate(rows, start=2):
            if len(row) != width:
                raise ArtifactError(f"{path}, line {line}: {len(row)} cells where the header has {width}; {fix}")


def _read_rows(frame: pd.DataFrame, path: Path, file: str, params: dict, fix: str, strict: bool) -> pd.DataFrame:
    """The frame with its seeds and trials as ints, its numbers as floats and ``selected`` as bools; with
    ``strict``, each row first checked to be a run the publication can hold."""
    def refuse(i: int, what: str):
        raise ArtifactError(f"{path}, line {i + 2}: {what}; {fix}")

    if strict:
        _check_keys(frame, file, params, refuse)
        _check_numbers(frame, refuse)
        if "selected" in frame.columns:
            _check_selected(frame, refuse)
    for col in ("seed", "trial"):
        if col in frame.columns:
            frame[col] = pd.to_numeric(frame[col]).astype(int)
    for col in ("nll", "tokens_reached", "lr"):
        if col in frame.columns:
            frame[col] = pd.to_numeric(frame[col], errors="coerce")
    if "selected" in frame.columns:
        frame["selected"] = frame["selected"].astype(str).eq("True")
    return frame


def _check_keys(frame: pd.DataFrame, file: str, params: dict, refuse) -> None:
    """Whole finite seeds among the run seeds (trials from 0), splits valid / test, defined datasets and methods,
    one row per key."""
    from ..config import run_seeds

    seeds = set(run_seeds(params)) if isinstance(params.get("run"), dict) else None
    for col in ("seed", "trial"):
        if col in frame.columns:
            num = pd.to_numeric(frame[col], errors="coerce")
            for i in frame.index:
                v = num.at[i]
                if not (math.isfinite(v) and v == round(v)):
                    refuse(i, f"{col} {_show(frame.at[i, col])} is not a whole number")
                if col == "seed" and seeds is not None and int(v) not in seeds:
                    refuse(i, f"seed {int(v)} is not one of the published run seeds {sorted(seeds)}")
                if col == "trial" and v < 0:
                    refuse(i, f"trial {int(v)} is negative")
    if "split" in frame.columns:
        for i in frame.index[~frame["split"].isin(["valid", "test"])]:
            refuse(i, f"split {_show(frame.at[i, 'split'])} is neither valid nor test")
    for col, defined in (("dataset", params.get("datasets")), ("method", params.get("methods"))):
        if isinstance(defined, dict):
            for i in frame.index[~frame[col].isin(list(defined))]:
                refuse(i, f"{col} {_show(frame.at[i, col])} is not defined in the params it was published with")
    for i in frame.index[frame.duplicated(list(KEYS[file]), keep="first")]:
        refuse(i, "a second row for " + ", ".join(f"{k} {frame.at[i, k]}" for k in KEYS[file]))


def _check_numbers(frame: pd.DataFrame, refuse) -> None:
    """nll a number (+inf only where the run did not learn or gave a test word probability 0), tokens and the rate
    finite and positive."""
    infinite_ok = frame["status"].eq("did not learn") if "status" in frame.columns else pd.Series(False, frame.index)
    if "zero_prob_tokens" in frame.columns:  # a word the run gives probability 0 (NEGLM's unseen words): nll +inf
        infinite_ok |= pd.to_numeric(frame["zero_prob_tokens"], errors="coerce").fillna(0) > 0
    for col, blank_ok in (("nll", False), ("tokens_reached", True), ("lr", False)):
        if col not in frame.columns:
            continue
        num = pd.to_numeric(frame[col], errors="coerce")
        for i in frame.index:
            v, raw = num.at[i], frame.at[i, col]
            if math.isnan(v):
                if not (blank_ok and pd.isna(raw)):
                    refuse(i, f"{col} is blank" if pd.isna(raw) else f"{col} {_show(raw)} is not a number")
            elif col == "nll" and math.isinf(v) and not (v > 0 and infinite_ok.at[i]):
                refuse(i, f"nll {_show(raw)} in a run that learned and gave no test word probability 0")
            elif col != "nll" and not (math.isfinite(v) and v > 0):
                refuse(i, f"{col} {_show(raw)} is not a finite positive number")


def _check_selected(frame: pd.DataFrame, refuse) -> None:
    """``selected`` is True or False (as pandas wrote it), and each (dataset, method) has at most one pick."""
    text = frame["selected"].astype(str)
    for i in frame.index[~text.isin(["True", "False"])]:
        refuse(i, f"selected {_show(frame.at[i, 'selected'])} is neither True nor False")
    picks = frame[text.eq("True")]
    for i in picks.index[picks.duplicated(["dataset", "method"], keep="first")]:
        refuse(i, f"a second selected trial for {frame.at[i, 'method']} at {frame.at[i, 'dataset']}")


def _show(value) -> str:
    """A cell as pandas read it, quoted: 'abc', '-1.0', 'inf' (blank for an empty one)."""
    return "blank" if pd.isna(value) else f"'{value}'"
