"""Every head's options as data (type name -> the JSON schema of its ``Options``, defaults included), so a
config is validated without importing torch: a second saved in every light pipeline step (fetch, prepare,
summarize, figures, report, hashes) and every Snakemake start.

Built from the heads' registry (:func:`pipeline_src.heads.base.options_schema`) the first time, then read from a
cache in ``heads/__pycache__`` named by a hash of the heads' source files: editing a head rebuilds it, as
Python's bytecode cache is rebuilt. A cache that cannot be written (a read-only install) is simply rebuilt
each time.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from pathlib import Path

HEADS = Path(__file__).resolve().parent  # this folder: the heads whose source keys the cache


def _source_key() -> str:
    h = hashlib.sha256()
    for f in sorted(HEADS.glob("*.py")):
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:20]


def build() -> dict[str, dict]:
    """From the registry itself (imports torch)."""
    from . import options_schema, registry

    return {name: options_schema(cls) for name, cls in sorted(registry().items())}


@functools.lru_cache(maxsize=1)
def head_options() -> dict[str, dict]:
    """Each registered head's options schema: ``{"additionalProperties": false, "properties": {...},
    "required": [...]}`` with each option's ``default`` where it has one. Read once per process (``canonical``
    asks for it per run config; the source hash reads every head's file)."""
    cache = HEADS / "__pycache__" / f"options-{_source_key()}.json"
    try:
        return json.loads(cache.read_text())
    except (OSError, ValueError):
        pass
    data = build()
    try:
        cache.parent.mkdir(exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache.parent, prefix=".options.", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
        os.replace(tmp, cache)  # whole or not at all: parallel jobs may build it at once
    except OSError:
        pass
    return data


def option_defaults(type_name: str) -> dict:
    return {k: v["default"] for k, v in head_options()[type_name]["properties"].items()
            if isinstance(v, dict) and "default" in v}
