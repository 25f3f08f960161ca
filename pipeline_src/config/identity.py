"""A run's identity: the canonical form of its config (defaults dropped, so adding an option with a default
moves no published hash), the hashes taken of it, and the first key at which two configs differ.
docs/development.md says exactly what enters a run's hash."""
from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from .settings import ModelConfig, TrainConfig, same_value


def field_defaults(cls) -> dict:
    """The default of every field of a dataclass that has one (tuples as lists, as YAML and JSON write them)."""
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = list(f.default) if isinstance(f.default, tuple) else f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def without_defaults(cls, values: dict) -> dict:
    """``values`` without the keys that hold their field's default in ``cls``: the one rule that keeps a run's
    hash (and so every published result) unchanged when an option with a default is added later."""
    return drop_defaults(values, field_defaults(cls))


def drop_defaults(values: dict, defaults: dict) -> dict:
    return {k: v for k, v in values.items() if not (k in defaults and same_value(v, defaults[k]))}


def canonical(cfg: dict) -> dict:
    """A run config in the form its hash is taken of: its model, training and method sections without the
    keys that hold their defaults (:func:`without_defaults`). Idempotent, and accepts a config written
    by any earlier version (one that spelled some defaults out), so a stored run is compared by what made it."""
    from ..heads.options import head_options, option_defaults

    out = dict(cfg)
    for section, cls in (("model", ModelConfig), ("training", TrainConfig)):
        if isinstance(out.get(section), dict):
            out[section] = without_defaults(cls, out[section])
    method = out.get("method")
    if isinstance(method, dict) and method.get("type") in head_options():
        out["method"] = drop_defaults(method, option_defaults(method["type"]))  # a head's: from its options schema
    elif isinstance(method, dict) and isinstance(method.get("type"), str) and _plugin(method["type"]):
        # a head from outside the repository: its source file is part of what made the run
        from ..heads.base import plugin_class
        from ..heads.plugins import source_sha256

        out["method"] = {**drop_defaults(method, option_defaults(method["type"])),
                         "source_sha256": source_sha256(plugin_class(method["type"]))}
    return out


def _plugin(type_name: str) -> bool:
    from ..heads.options import head_options
    from ..heads.plugins import is_plugin

    return is_plugin(type_name, set(head_options()))


def run_hash(cfg: dict) -> str:
    """A run's identity: the hash of its :func:`canonical` config (metrics, summaries, publications)."""
    return config_hash(canonical(cfg))


def config_hash(cfg: Any) -> str:
    """Stable short hash of a JSON-able config (key order does not matter)."""
    blob = json.dumps(cfg, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


# What a run config holds that does not make the trained model: how it is scored afterwards, and how often
# training checkpoints on the way. A change to these re-evaluates (or changes nothing) but never retrains.
NOT_TRAINING = {"evaluation": None, "training": ("checkpoint_every_steps",)}


def training_part(cfg: dict) -> dict:
    """A run config without :data:`NOT_TRAINING`: what a trained model, a checkpoint and a trial depend on."""
    out = {k: v for k, v in cfg.items() if not (k in NOT_TRAINING and NOT_TRAINING[k] is None)}
    for section, keys in NOT_TRAINING.items():
        if keys and section in out:
            out[section] = {k: v for k, v in out[section].items() if k not in keys}
    return out


def train_hash(cfg: dict) -> str:
    """The hash of :func:`training_part`: equal for two configs that train the same model. (A result's
    identity is :func:`run_hash` of the whole run config: metrics, summaries and publications use that.)"""
    return config_hash(training_part(canonical(cfg)))


def first_difference(a, b, where: str = "") -> str | None:
    """The first key path at which two JSON-like values differ (None when equal)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                return f"{where}{k}"
            d = first_difference(a[k], b[k], f"{where}{k}.")
            if d is not None:
                return d
        return None
    return None if a == b else where.rstrip(".") or "<top level>"
