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


def source_files(cls) -> list[Path]:
    """The user's source a plugin's class rests on: every module of its top-level package when it lives in one
    (a sibling module it imports a constant from is code of the head), else its own file and, read from its import
    statements, the modules and packages of its own folder that it imports, and theirs (its import closure within
    the user's files)."""
    own = Path(inspect.getsourcefile(cls)).resolve()
    top = (cls.__module__ or "").split(".")[0]
    package = sys.modules.get(top)
    roots = [Path(p).resolve() for p in getattr(package, "__path__", [])] if package is not None else []
    if roots:
        return sorted({f.resolve() for r in roots for f in r.rglob("*.py")} | {own})
    seen, todo = set(), [own]
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        for name in _imported_names(f):
            mod, pkg = own.parent / f"{name}.py", own.parent / name
            if mod.is_file():
                todo.append(mod.resolve())
            elif (pkg / "__init__.py").is_file():
                seen |= {g.resolve() for g in pkg.rglob("*.py")}
    return sorted(seen)


def _imported_names(file: Path) -> set[str]:
    """The first part of every module name ``file`` imports (``import a.b``, ``from a import b``; a relative
    ``from . import b`` names ``b``)."""
    import ast

    try:
        tree = ast.parse(file.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
            elif node.level > 0:
                names |= {node.module.split(".")[0]} if node.module else {a.name for a in node.names}
    return names


def source_sha256(cls) -> str:
    """The digest of the user's source a plugin's class rests on (:func:`source_files`, each file's name relative
    to the first's folder and its bytes): its part of a run's identity."""
    files = source_files(cls)
    base = Path(inspect.getsourcefile(cls)).resolve().parent
    if files == [Path(inspect.getsourcefile(cls)).resolve()]:  # a file alone: its digest, as before packages counted
        return hashlib.sha256(files[0].read_bytes()).hexdigest()[:16]
    h = hashlib.sha256()
    for f in files:
        try:
            name = f.relative_to(base).as_posix()
        except ValueError:
            name = f.as_posix()
        h.update(name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]
