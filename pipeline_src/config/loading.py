"""Params files as written: YAML read strictly (a key given twice is an error, the file must be UTF-8) and an
``extends:`` chain laid out into one mapping (:func:`resolve`). Validation is :mod:`pipeline_src.config`'s."""
from __future__ import annotations

import copy
import os
from pathlib import Path

import yaml

from ..io.errors import ConfigError, not_there


class Replace(dict):
    """A mapping written ``key: !replace {...}`` in a params file: it replaces its base's mapping under
    ``extends:`` instead of merging into it (:func:`overlay`)."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (YAML's "last one wins" hides typos)."""

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor`: merged keys may be overridden
                continue
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} appears twice in one mapping (first at line {seen[key] + 1})",
                    key_node.start_mark)
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


def _construct_replace(loader: yaml.SafeLoader, node: yaml.Node) -> Replace:
    if not isinstance(node, yaml.MappingNode):
        raise yaml.constructor.ConstructorError(None, None, "!replace takes a mapping", node.start_mark)
    return Replace(loader.construct_mapping(node, deep=True))


_UniqueKeyLoader.add_constructor("!replace", _construct_replace)


def _read(path: Path, extended_by: Path | None = None) -> dict:
    by = f" (extended by {extended_by})" if extended_by else ""
    if not path.exists():
        raise ConfigError(f"config file {path}{by} {not_there(path)}")
    if path.is_dir():
        raise ConfigError(f"reading config: {path}{by} is a directory; give the path of a params file")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise ConfigError(f"{path}{by}: not UTF-8 text (byte {data[e.start]:#04x} at line {line}); save it as "
                          f"UTF-8") from None
    try:
        params = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as e:
        raise ConfigError(_yaml_error(path, e)) from None
    if not isinstance(params, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    if isinstance(params, Replace):  # it would merge like any other file, silently
        raise ConfigError(f"{path}: !replace tags the whole file; tag the keys whose mapping replaces the base's "
                          f"(`key: !replace {{...}}`), the file's own keys need no tag")
    return params


def _yaml_error(path: Path, e: yaml.YAMLError) -> str:
    """One line: the file, the line and column the parser stopped at, what it expected, and where the construct
    it was reading began (PyYAML's message spans several lines and names "<unicode string>")."""
    mark = getattr(e, "problem_mark", None)
    if mark is None:
        return f"{path}: not valid YAML: {' '.join(str(e).split())}"
    what = " ".join(str(getattr(e, "problem", None) or "").split()) or "invalid here"
    context, start = getattr(e, "context", None), getattr(e, "context_mark", None)
    where = f" ({' '.join(context.split())} that began at line {start.line + 1})" if context and start else ""
    return f"{path}:{mark.line + 1}:{mark.column + 1}: not valid YAML: {what}{where}"


def overlay(base: dict, over: dict) -> dict:
    """``over`` laid over ``base``: mappings merge key by key, at every depth; a mapping written
    ``!replace {...}`` and anything else (a number, a list such as run.methods) replace the base's value."""
    out = _plain(base)
    for k, v in over.items():
        # an empty mapping replaces: `references: {}` means none, not "the base's, unchanged"
        merge = isinstance(v, dict) and bool(v) and not isinstance(v, Replace) and isinstance(out.get(k), dict)
        out[k] = overlay(out[k], v) if merge else _plain(v)
    return out


def _plain(v):
    """A deep copy with every :class:`Replace` turned into a plain dict (what validation and YAML expect)."""
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return copy.deepcopy(v)


def resolve(path: str | os.PathLike, _chain: tuple[Path, ...] = ()) -> dict:
    """A params file with its ``extends:`` chain laid out: ``extends: base.yaml`` (relative to the file)
    takes that file, itself possibly extending another, and lays this file's keys over it. This is how a
    small file shrinks a paper config for a test or a smoke run, and how Snakemake (``--config
    params=FILE``), the CLI (``--config FILE``) and DVC (``python -m pipeline_src resolve``) see one config."""
    path = Path(path)
    if path.resolve() in [p.resolve() for p in _chain]:
        raise ConfigError(f"{path}: key 'extends' makes a cycle: {' -> '.join(map(str, (*_chain, path)))}")
    params = _read(path, _chain[-1] if _chain else None)
    base = params.pop("extends", None)
    if base is None:
        return _plain(params)
    if not isinstance(base, str) or not base.strip():
        raise ConfigError(f"{path}: key 'extends': expected the path of a params file, got {base!r}")
    return overlay(resolve(path.parent / base, (*_chain, path)), params)


def chain(path: str | os.PathLike) -> list[Path]:
    """The files :func:`resolve` reads for ``path``: the file itself, then its ``extends:`` bases in order."""
    files = [Path(path)]
    while isinstance(base := _read(files[-1], files[-2] if len(files) > 1 else None).get("extends"), str) \
            and base.strip() and len(files) < 64:  # a cycle, an empty base: resolve() names them
        files.append(files[-1].parent / base)
    return files


def is_params_file(path: Path, keys: set[str]) -> bool:
    """Whether ``path`` holds a params file (a YAML mapping of params ``keys`` and ``extends``: what ``resolve
    --out`` may replace, e.g. params.yaml for DVC), not a corpus, a model, a README."""
    try:
        obj = yaml.safe_load(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError):
        return False
    return isinstance(obj, dict) and set(obj) <= keys | {"extends"}
