"""The README's grids over several token-ladder publications (``ladders:`` and ``equal-times:`` blocks): each
publication's ``ladder-advice.csv`` and ``equal-time.csv`` (``ladder_tables.py``) joined into one grid, a row per
dataset, with what a partial publication lacks and which are not published yet; and ``speed-loo:``, the check of
a profile's tokens/s read across vocabulary sizes (``profiles.speed_leave_one_out``)."""
from __future__ import annotations

import pandas as pd

from ..io.errors import ConfigError
from .ladder_tables import time_cell, equal_data_markdown, speed_notes
from .markdown import frame_markdown, partial_label
from .profiles import load_profile, speed_leave_one_out


def ladders_markdown(publications: list[str]) -> str:
    """The equal-data grid of several token-ladder publications (``benchmarks/NAME/ladder-advice.csv``), one row
    per dataset in their order; a publication not published yet is one line under it, and a partial one says so."""
    frames, unpublished = [], []
    for name, table, label in _published(publications, "ladder-advice.csv"):
        if table is None:
            unpublished.append(name)
        else:
            frames.append(table.assign(dataset=table.dataset + label))
    return (equal_data_markdown(pd.concat(frames, ignore_index=True)) if frames else "") + _unpublished(unpublished)


def _unpublished(names: list[str]) -> str:
    return f"\n*Not published yet: {', '.join(names)}.*\n" if names else ""


# ladder_tables.seconds_read's labels (without a capped method, and with one) -> the grid's column
WHEN_COLUMNS = (("a minute", "a minute"),
                ("the top rung for the fastest", "the first top reached"),
                ("the first top reached", "the first top reached"),
                ("the top rung for the slowest", "the last top reached"),
                ("the last top reached", "the last top reached"))


def equal_times_markdown(publications: list[str]) -> str:
    """The equal-time grid of several token-ladder publications (``equal-time.csv``): one row per (profile,
    dataset), one column per budget ``seconds_read`` names, each cell the verdict with its seconds (and, where not
    a minute, whose top rung they are); the tokens/s read from other rows named under it."""
    rows, tables, unpublished = [], [], []
    for name, table, label in _published(publications, "equal-time.csv"):
        if table is None:
            unpublished.append(name)
            continue
        tables.append(table)
        for (profile, ds), g in table.groupby(["profile", "dataset"], sort=False):
            row = {"machine (profile)": profile, "dataset": ds + label}
            for r in g.itertuples():
                if pd.isna(r.seconds):
                    row.update({col: "no profile row for its shapes" for _, col in WHEN_COLUMNS})
                    continue
                col = next(c for prefix, c in WHEN_COLUMNS if r.when.startswith(prefix))
                whose = r.when.split("(", 1)[1].split(")", 1)[0] if "(" in r.when else ""
                row[col] = ("" if col == "a minute" else f"{r.seconds:,.0f} s ({whose}'s top): ") + time_cell(r)
            rows.append(row)
    frame = pd.DataFrame(rows).sort_values("machine (profile)", kind="stable") if rows else None
    return ((frame_markdown(frame) + speed_notes(pd.concat(tables, ignore_index=True))) if rows else "") + \
        _unpublished(unpublished)


def speed_loo_markdown(profiles: list[str]) -> str:
    """The |V| reading checked on each named profile (``profiles.speed_leave_one_out``): one row per method, one
    column per (profile, dataset read), the tokens/s read from the neighbouring vocabulary sizes over the measured."""
    cols, notes = {}, []
    for name in profiles:
        loo = speed_leave_one_out(load_profile(name)[0])
        for ds, g in loo.groupby("dataset", sort=False):
            cols[f"{name}: {ds}"] = g.set_index("method").ratio
            notes.append(f"\n*{name}: {ds} {g.read_from.iloc[0]}, itself left out.*\n")
    if not cols:
        return ("*No profile named has a vocabulary size between two others of its shapes (or its sizes are unknown: "
                "a profile of your own carries no params): nothing to check.*\n")
    frame = pd.DataFrame(cols).map(lambda x: "—" if pd.isna(x) else f"{x:.2f}x")
    return frame_markdown(frame.rename_axis("method (read / measured tokens/s)").reset_index()) + "".join(notes)


def _published(publications: list[str], file: str):
    """(name, the publication's ``file`` or None where not published, its label: "" or " (partial: ...)")."""
    from ..io import paths
    from ..io.artifacts import read_json
    from ..io.paths import REPOSITORY

    for name in publications:
        pub = REPOSITORY / "benchmarks" / name
        if not (pub / paths.PROVENANCE).is_file():
            yield name, None, ""
            continue
        if not (pub / file).is_file():
            raise ConfigError(f"results-table of {', '.join(publications)}: benchmarks/{name} is published but is no "
                              f"token-ladder publication (it has no {file})")
        runs = read_json(pub / paths.PROVENANCE).get("runs") or {}
        yield name, pd.read_csv(pub / file), partial_label("", runs)
