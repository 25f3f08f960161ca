"""Output layers from outside this repository: bring your own head without editing it.

A method's ``type`` may name a class instead of a registered head:

- ``"mypkg.heads:MyHead"``: a module importable where the pipeline runs (installed, or on ``PYTHONPATH``);
- ``"path/to/my_head.py:MyHead"``: a file (relative to the working directory: the repository root under
  Snakemake, DVC and SLURM alike);
- a plain name that an installed package registers in the entry-point group ``pipeline_src.heads``
  (``[project.entry-points."pipeline_src.heads"] my-head = "mypkg.heads:MyHead"``).

The class must subclass :class:`pipeline_src.heads.base.OutputLayer`, with an ``Options`` dataclass (validated like a
built-in head's: schema, defaults, one-line errors naming the key) and a ``family`` among ``FAMILIES``. Its source
file's digest enters the run's identity (``source_sha256`` in the canonical method section), so editing it reruns
its runs; a built-in head's hash is unchanged. ``python -m pipeline_src check-head TYPE`` holds it to the contract
(:mod:`pipeline_src.heads.conformance`).
"""
from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import inspect
import sys
from pathlib import Path

from ..io.errors import ConfigError

ENTRY_GROUP = "pipeline_src.heads"


@functools.lru_cache(maxsize=1)
def entry_points() -> dict[str, str]:
    """Installed packages' heads: entry-point name -> ``"module:Class"``."""
    from importlib.metadata import entry_points as eps

    return {ep.name: ep.value for ep in eps(group=ENTRY_GROUP)}


def is_plugin(type_name: str, builtin: set[str] | frozenset[str] = frozenset()) -> bool:
    """A type that is not a built-in head: ``module:Class``, ``file.py:Class`` or an entry point's name."""
    return type_name not in builtin and (":" in type_name or type_name in entry_points())


def find(type_name: str):
    """What a plugin type names (``module:Attr``, ``file.py:Attr`` or an entry point's target), not yet checked
    (:func:`pipeline_src.heads.base.plugin_class` checks it is an output layer); a one-line ConfigError for a
    missing module, file or attribute."""
    target = entry_points().get(type_name, type_name)
    if ":" not in target:
        raise ConfigError(f"method type {type_name!r}: not a registered head, an installed entry point (group "
                          f"{ENTRY_GROUP!r}) or 'module:Class' / 'file.py:Class'")
    where, _, attr = target.rpartition(":")
    found = getattr(_module(type_name, where), attr, None)
    if found is None:
        raise ConfigError(f"method type {type_name!r}: {where} has no {attr!r}")
    return found


def _module(type_name: str, where: str):
    if where.endswith(".py"):
        path = Path(where)
        if not path.is_file():
            raise ConfigError(f"method type {type_name!r}: no file {path} (relative to {Path.cwd()})")
        name = f"pipeline_src_plugin_{hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]}"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses and pickling look their module up by name
        try:
            spec.loader.exec_module(module)
        except Exception as e:  # the user's code: say where it failed, in one line
            raise ConfigError(f"method type {type_name!r}: importing {path} failed: {type(e).__name__}: {e}") from e
        return module
    try:
        return importlib.import_module(where)
    except ModuleNotFoundError as e:
        raise ConfigError(f"method type {type_name!r}: no module {e.name!r} (install its package or put it on "
                          f"PYTHONPATH)") from e
    except Exception as e:
        raise ConfigError(f"method type {type_name!r}: importing {where} failed: {type(e).__name__}: {e}") from e


def source_sha256(cls) -> str:
    """The digest of the file that defines a plugin's class: its part of a run's identity."""
    return hashlib.sha256(Path(inspect.getsourcefile(cls)).read_bytes()).hexdigest()[:16]
