"""What the pipeline knows of every head without importing torch: its options (type name -> the JSON schema of
its ``Options``, defaults included), its family and its training cost (``register``'s arguments). The config
is validated, the reports styled and Snakemake's jobs ordered from this, without importing torch: a second saved in every light pipeline step (fetch, prepare,
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
    from .base import options_schema, registry

    heads = sorted(registry().items())
    return {"options": {name: options_schema(cls) for name, cls in heads},
            "family": {name: cls.family for name, cls in heads},
            "train_cost": {name: cls.train_cost for name, cls in heads}}


def head_options() -> dict[str, dict]:
    """Each registered head's options schema: ``{"additionalProperties": false, "properties": {...},
    "required": [...]}`` with each option's ``default`` where it has one."""
    return _facts()["options"]


def head_families() -> dict[str, str]:
    """Each registered head's family (one of ``FAMILIES``)."""
    return _facts()["family"]


def train_cost(type_name: str) -> int:
    """A head's relative training cost per token (2 for a head this pipeline does not know)."""
    return _facts()["train_cost"].get(type_name, 2)


@functools.lru_cache(maxsize=1)
def _facts() -> dict[str, dict]:
    """Read once per process (``canonical`` asks for the options per run config; the source hash reads every
    head's file)."""
    cache = HEADS / "__pycache__" / f"heads-{_source_key()}.json"
    try:
        data = json.loads(cache.read_text())
        if isinstance(data, dict) and set(data) == {"options", "family", "train_cost"}:
            return data
    except (OSError, ValueError):
        pass  # none yet, or damaged: rebuilt below
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


def options_of(type_name: str) -> dict:
    """A head type's options schema: a registered head's, or a plugin's (``heads/plugins.py``: imports it)."""
    built_in = head_options()
    if type_name in built_in:
        return built_in[type_name]
    from ..io.errors import ConfigError
    from .base import options_schema, plugin_class

    cls = plugin_class(type_name)
    try:
        return options_schema(cls)
    except Exception as e:  # an Options field this schema cannot express (a list, a Literal, a missing annotation)
        raise ConfigError(f"method type {type_name!r}: {cls.__name__}.Options has a field the options schema cannot "
                          f"express (int, float, bool, str, tuple[...] or one of them | None): "
                          f"{type(e).__name__}: {e}") from None


def option_defaults(type_name: str) -> dict:
    return {k: v["default"] for k, v in options_of(type_name)["properties"].items()
            if isinstance(v, dict) and "default" in v}
