"""A publication's committed per-run rows (``summary.csv``, ``tuning.csv``) read as the facts that ``restate``,
``freeze-budgets`` and ``freeze-settings`` rest verdicts and frozen budgets on.

Those commands write no run: what they print or rewrite is only as good as the rows they read, so a row that
cannot be a run's is refused with one line naming the file, its line and the cell, never read as a blank, a
string or a duplicate that moves a verdict. Two layers:

- **Digest.** A publication records each table's sha256 when it is published (``provenance.json``,
  ``runs.tables``); a per-run table whose bytes differ was edited after publishing, and is refused outright.
- **Rows.** Publications from before the digests get the checks the digest would have made unnecessary: every
  line as wide as the header, whole-number seeds, one row per (dataset, method, seed, split) or (dataset, method,
  trial), datasets and methods the publication's params define, numbers where numbers belong (a test nll may be
  infinite only in a run that did not learn), and a ``selected`` column of True / False with one pick per cell.
"""
from __future__ import annotations

import csv
import math
from pathlib import Path

import pandas as pd

from ..io import paths
from ..io.artifacts import REBUILD, read_csv, read_json
from ..io.digests import sha256_of
from ..io.errors import ArtifactError

KEYS = {"summary.csv": ("dataset", "method", "seed", "split"), "tuning.csv": ("dataset", "method", "trial")}


def read_published(pub: Path, file: str, *columns: str) -> pd.DataFrame:
    """``pub / file`` (summary.csv or tuning.csv) with ``columns``, checked against its recorded digest and row
    by row; an :class:`ArtifactError` of one line (file, line, cell, and how to get the committed file back)
    for a table that cannot be the publication's."""
    path = pub / file
    fix = f"restore it (`git checkout -- {path}`) or republish"
    prov = read_json(pub / paths.PROVENANCE)
    runs = prov.get("runs") if isinstance(prov.get("runs"), dict) else {}  # the summary record it was published with
    digest = (runs.get("tables") or {}).get(file)
    if digest is not None and path.is_file() and sha256_of(path) != digest:
        raise ArtifactError(f"{path}: not the file that was published (its sha256 differs from the one "
                            f"{pub / paths.PROVENANCE} recorded): it was edited since; {fix}")
    try:
        frame = read_csv(path, *KEYS[file], *columns)
    except ArtifactError as e:
        raise ArtifactError(str(e).replace(REBUILD, fix)) from None
    _check_width(path, fix)
    params = prov.get("params") if isinstance(prov.get("params"), dict) else {}
    return _check_rows(frame, path, file, params, fix)


def _check_width(path: Path, fix: str) -> None:
    """Every line holds as many cells as the header (pandas pads a short line with blanks)."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = csv.reader(f)
        width = len(next(rows))
        for line, row in enumerate(rows, start=2):
            if len(row) != width:
                raise ArtifactError(f"{path}, line {line}: {len(row)} cells where the header has {width}; {fix}")


def _check_rows(frame: pd.DataFrame, path: Path, file: str, params: dict, fix: str) -> pd.DataFrame:
    """The frame, its key columns whole numbers where they count, every row a run the publication can hold."""
    def refuse(i: int, what: str):
        raise ArtifactError(f"{path}, line {i + 2}: {what}; {fix}")

    for col in ("seed", "trial"):
        if col in frame.columns:
            num = pd.to_numeric(frame[col], errors="coerce")
            for i in frame.index[num.isna() | (num != num.round())]:
                refuse(i, f"{col} {_show(frame.at[i, col])} is not a whole number")
            frame[col] = num.astype(int)
    for col, defined in (("dataset", params.get("datasets")), ("method", params.get("methods"))):
        if isinstance(defined, dict):
            for i in frame.index[~frame[col].isin(list(defined))]:
                refuse(i, f"{col} {_show(frame.at[i, col])} is not defined in the params it was published with")
    for i in frame.index[frame.duplicated(list(KEYS[file]), keep="first")]:
        refuse(i, "a second row for " + ", ".join(f"{k} {frame.at[i, k]}" for k in KEYS[file]))
    _check_numbers(frame, refuse)
    if "selected" in frame.columns:
        _check_selected(frame, refuse)
    return frame


def _check_numbers(frame: pd.DataFrame, refuse) -> None:
    """nll a number (infinite only in a run that did not learn), tokens and the rate finite and positive."""
    did_not_learn = frame["status"].eq("did not learn") if "status" in frame.columns else pd.Series(False, frame.index)
    for col, blank_ok in (("nll", False), ("tokens_reached", True), ("lr", False)):
        if col not in frame.columns:
            continue
        num = pd.to_numeric(frame[col], errors="coerce")
        for i in frame.index:
            v, raw = num.at[i], frame.at[i, col]
            if math.isnan(v):
                if not (blank_ok and pd.isna(raw)):
                    refuse(i, f"{col} is blank" if pd.isna(raw) else f"{col} {_show(raw)} is not a number")
            elif col == "nll" and math.isinf(v) and not did_not_learn.at[i]:
                refuse(i, f"nll {_show(raw)} in a run whose status says it learned")
            elif col != "nll" and not (math.isfinite(v) and v > 0):
                refuse(i, f"{col} {_show(raw)} is not a finite positive number")
        frame[col] = num


def _check_selected(frame: pd.DataFrame, refuse) -> None:
    """``selected`` is True or False (as pandas wrote it), and each (dataset, method) has at most one pick."""
    text = frame["selected"].astype(str)
    for i in frame.index[~text.isin(["True", "False"])]:
        refuse(i, f"selected {_show(frame.at[i, 'selected'])} is neither True nor False")
    frame["selected"] = text.eq("True")
    picks = frame[frame.selected]
    for i in picks.index[picks.duplicated(["dataset", "method"], keep="first")]:
        refuse(i, f"a second selected trial for {frame.at[i, 'method']} at {frame.at[i, 'dataset']}")


def _show(value) -> str:
    """A cell as the file holds it, quoted: 'abc', '-1', 'inf' (blank for an empty one)."""
    return "blank" if pd.isna(value) else f"'{value}'"
