"""Reading the pipeline's own artifacts (JSON records, CSV tables) with one clear line when one is damaged.

A truncated, hand-edited or half-copied file gives an :class:`~pipeline_src.io.errors.ArtifactError` naming
the file and what is wrong (invalid JSON at a line, a missing key or column, an empty table), never a
traceback from inside the parser. A missing file stays a ``FileNotFoundError`` (the callers say which step
makes it). Checkpoints are read by :func:`pipeline_src.training.checkpoints.load_torch`.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from .atomic import INFINITY
from .errors import ArtifactError

REBUILD = "delete it and rerun the step that makes it (or `snakemake`)"
COMMITTED = "a committed publication's file: `git checkout -- {path}` restores it (or publish it again)"


def _advice(path: Path) -> str:
    """What to do about a bad file: a pipeline output is rebuilt; a file under ``benchmarks/`` (a publication or
    stashed records, committed) is restored from git, since no step of a fresh run makes it again."""
    return COMMITTED.format(path=path) if "benchmarks" in path.parts else REBUILD


Advice = str | Callable[[], str] | None  # what to do about a bad file; a function where saying it costs work


def _bad(path: Path, what: str, advice: Advice) -> ArtifactError:
    """The one line for a bad file: what is wrong, then what to do (the default's, or ``advice``, asked only now)."""
    return ArtifactError(f"{path}: {what}; {advice() if callable(advice) else advice or _advice(path)}")


def _not_utf8(path: Path, e: UnicodeDecodeError) -> str:
    """Where a file stops being UTF-8, as the params file's reader says it: the first bad byte and its line (pandas
    names a byte position in the chunk it read, so the file is decoded again here)."""
    data = path.read_bytes()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as whole:
        e = whole
    line = data.count(b"\n", 0, e.start) + 1
    return f"not UTF-8 text (byte 0x{data[e.start]:02x} at line {line})"


def read_json(path: str | Path, *keys: str, advice: Advice = None, mapping: bool = False) -> Any:
    """The JSON in ``path``; with ``keys`` (or ``mapping``), a mapping that must hold each of them. ``advice``
    replaces the default of what to do about a bad file (where the file is a user's input, not the pipeline's
    output)."""
    path = Path(path)
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise _bad(path, f"not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})", advice) from None
    except UnicodeDecodeError as e:
        raise _bad(path, _not_utf8(path, e), advice) from None
    obj = _infinities(obj)
    if keys or mapping:
        if not isinstance(obj, dict):
            raise _bad(path, f"expected a JSON object, found {type(obj).__name__}", advice)
        missing = [k for k in keys if k not in obj]
        if missing:
            raise _bad(path, f"key {missing[0]!r} is missing", advice)
    return obj


def _infinities(obj: Any) -> Any:
    """The strings ``"Infinity"`` and ``"-Infinity"`` as the floats :func:`~pipeline_src.io.atomic.write_json`
    wrote them from."""
    if isinstance(obj, str):
        return INFINITY.get(obj, obj)
    if isinstance(obj, dict):
        return {k: _infinities(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_infinities(v) for v in obj]
    return obj


def read_csv(path: str | Path, *columns: str, advice: Advice = None):
    """The table in ``path`` as a DataFrame; with ``columns``, each of them must be there (``advice``: as
    :func:`read_json`)."""
    import pandas as pd

    path = Path(path)
    try:
        df = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise _bad(path, "empty file, no header", advice) from None
    except UnicodeDecodeError as e:
        raise _bad(path, _not_utf8(path, e), advice) from None
    except pd.errors.ParserError as e:
        raise _bad(path, f"not a readable CSV table ({str(e).splitlines()[0][:120]})", advice) from None
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise _bad(path, f"column {missing[0]!r} is missing", advice)
    return df
