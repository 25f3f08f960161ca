"""Markdown for people: a table of already formatted cells and the numbers in it (``∞`` for an infinite value,
``—`` where there is none), shared by the publications' tables (``tables.py``) and the benches' (``bench_tables.py``)."""
from __future__ import annotations

import math

import pandas as pd


def markdown_table(cols: list[str], rows) -> str:
    """A Markdown table: a header of ``cols`` and one line per row of already formatted cells."""
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return "\n".join(lines)


def fmt_millions(tokens: float) -> str:
    return "—" if pd.isna(tokens) else f"{tokens / 1e6:.2f}M"


def fmt_num(x: float, digits: int, signed: bool = False) -> str:
    """A table's number: ``∞`` for an infinity (a word scored probability 0), ``—`` where there is none."""
    if x is None or pd.isna(x):
        return "—"
    if math.isinf(x):
        return ("+" if signed and x > 0 else "-" if x < 0 else "") + "∞"
    return f"{x:{'+' if signed else ''}.{digits}f}"


def fmt_ci(m: float, lo: float, hi: float, digits: int, signed: bool = False) -> str:
    if lo is None or math.isnan(lo) or math.isinf(m):  # an infinite mean has no interval worth printing
        return fmt_num(m, digits, signed)
    return f"{fmt_num(m, digits, signed)} [{fmt_num(lo, digits, signed)}, {fmt_num(hi, digits, signed)}]"


def frame_markdown(df: pd.DataFrame) -> str:
    """A DataFrame of already formatted cells as a Markdown table (empty cells stay empty)."""
    return markdown_table([str(c) for c in df.columns], ([("" if pd.isna(v) else str(v)) for v in r]
                                                          for r in df.itertuples(index=False))) + "\n"


def partial_label(name: str, runs: dict) -> str:
    """A publication's name in the glance (or its label in a ladder grid), with what a partial one lacks (its provenance's ``runs``): runs not
    finished, or, with every run there, the other outputs missing (matrix fits, references), by kind."""
    if not runs.get("partial"):
        return name
    if runs.get("runs", 0) < runs.get("of", 0):
        return f"{name} (partial: {runs['runs']} of {runs['of']} runs)"
    kinds = sorted({m.split("/")[0] for m in runs.get("missing") or []})
    return f"{name} (partial: all {runs.get('of')} runs; missing {len(runs.get('missing') or [])}: {', '.join(kinds)})"
