"""The single params file: loading, JSON-schema validation, and per-run resolution.

Snakemake (``workflow/rules/common.smk``) and every CLI step call :func:`load`, so a wrong
key or value fails before any job starts, with the offending key path and the allowed values.
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from .errors import ConfigError
from .params_files import Replace, chain, overlay, resolve  # noqa: F401  (config's names, as before)
from .params_files import _read
from .settings import ModelConfig, TrainConfig, same_value  # noqa: F401  (config's names, as before)

SCHEMA_PATH = Path(__file__).parent / "schema" / "params.schema.yaml"
DEFAULT_PARAMS = "params.yaml"
MIRROR_ENV = "LMBENCH_MIRROR"
STATISTICS_DEFAULTS = {"reference": "softmax", "confidence": 0.95, "interval": "t", "resamples": 9999,
                       "contrasts": []}


# An integer is an int as written: JSON schema takes 2.0 for an integer, and 2.0 epochs or a seed of 1.0 then
# failed deep inside (slice indices, numpy's SeedSequence) and hashed apart from 2 and 1.
_Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda checker, x: isinstance(x, int) and not isinstance(x, bool)))


def schema() -> dict:
    """The params schema, with each registered head's options schema spliced in."""
    from .head_options import head_options

    s = yaml.safe_load(SCHEMA_PATH.read_text())
    heads = head_options()
    method = s["$defs"]["method"]
    method["properties"] = {"type": {"enum": sorted(heads)}}
    method["allOf"] = [{"if": {"properties": {"type": {"const": name}}}, "then": options}
                       for name, options in sorted(heads.items())]
    return s


def _format_error(err: jsonschema.ValidationError, source: str) -> str:
    where = ".".join(str(p) for p in err.absolute_path) or "<top level>"
    msg = err.message
    if err.validator == "additionalProperties":
        allowed = sorted((err.schema.get("properties") or {}).keys())
        msg += f"; allowed keys here: {allowed}"
    elif err.validator == "required":
        pass
    elif err.validator == "enum":
        msg = f"{err.instance!r} is not allowed; allowed values: {err.validator_value}"
    elif err.validator == "type" and err.validator_value == "integer" and isinstance(err.instance, float) \
            and err.instance.is_integer():
        msg = f"{err.instance!r} is not an integer; write it as {int(err.instance)}"
    elif err.validator in ("pattern", "minLength") and "description" in err.schema:
        msg += f" ({err.schema['description']})"
    elif err.validator == "const":
        msg = f"{err.instance!r} is not allowed; allowed value: {err.validator_value!r}"
    return f"{source}: key '{where}': {msg}"


def validate(params: dict, source: str = DEFAULT_PARAMS, origin=None) -> dict:
    """Validate ``params`` and check cross-references; return it with defaults filled in. ``origin(keys)``:
    the file of an ``extends:`` chain that wrote a key path (a schema error names it)."""
    _check_finite(params, lambda keys: origin(keys) if origin else source)
    validator = _Validator(schema())
    errors = sorted(validator.iter_errors(params), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if errors:
        # The deepest errors are the most specific (a bad method option, not "allOf failed").
        leaves = [e for e in errors if not e.context] or errors
        raise ConfigError("invalid config:\n  " + "\n  ".join(
            _format_error(e, origin(list(e.absolute_path)) if origin else source) for e in leaves))
    params["run"].setdefault("seeds", [0])
    params["run"].setdefault("extra", {"datasets": [], "methods": []})
    params.setdefault("statistics", {})
    for k, v in STATISTICS_DEFAULTS.items():
        params["statistics"].setdefault(k, v)
    params.setdefault("tuning", {"enabled": False})
    params.setdefault("keep_models", True)
    _check_names(params, source)
    if params["tuning"]["enabled"]:
        _check_tuning(params, source)
    for name in params["datasets"]:
        _check_dataset(params, name, source)
    return params


def _check_finite(node, source_of, keys: tuple = ()) -> None:
    """No NaN or infinity anywhere in a params file (YAML writes them ``.nan`` and ``.inf``): JSON schema's
    bounds let both through (``nan >= 0`` is false, but so is ``nan < 0``), and a NaN compares false with
    everything downstream (a confidence of NaN made every difference a verdict)."""
    if isinstance(node, float) and not math.isfinite(node):
        where = ".".join(map(str, keys)) or "<top level>"
        raise ConfigError(f"{source_of(list(keys))}: key '{where}': {node!r} is not a finite number")
    if isinstance(node, dict):
        for k, v in node.items():
            _check_finite(v, source_of, (*keys, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            _check_finite(v, source_of, (*keys, i))


def _undefined(source: str, key: str, name, section: str, params: dict) -> ConfigError:
    return ConfigError(f"{source}: key '{key}': {name!r} is not defined under '{section}'; "
                       f"defined: {sorted(params[section])}")


def _check_names(params: dict, source: str) -> None:
    """Every name a section refers to is defined where it should be."""
    step = params["bench"].get("step") or {}
    extra = params["run"]["extra"]
    for key, section, names in (("run.datasets", "datasets", params["run"]["datasets"]),
                                ("run.methods", "methods", params["run"]["methods"]),
                                ("run.extra.datasets", "datasets", extra["datasets"]),
                                ("run.extra.methods", "methods", extra["methods"]),
                                ("bench.methods", "methods", params["bench"]["methods"]),
                                ("matrix.methods", "methods", params["matrix"]["methods"]),
                                ("bench.step.methods", "methods", step.get("methods", [])),
                                ("bench.step.dataset", "datasets", [step["dataset"]] if step else []),
                                ("paper.ppl", "methods", list((params.get("paper") or {}).get("ppl", {})))):
        for name in names:
            if name not in params[section]:
                e = _undefined(source, key, name, section, params)
                if key.startswith("run.extra"):  # most likely inherited through extends: from the default run
                    e = ConfigError(f"{e}; a file that extends params.yaml and sets its own run inherits the "
                                    f"default run's second crossing unless it says `run: {{extra: {{datasets: [], "
                                    f"methods: []}}}}`")
                raise e
    both = sorted(set(params["run"]["datasets"]) & set(extra["datasets"]))
    if both:
        raise ConfigError(f"{source}: key 'run.extra.datasets': {both} also in run.datasets; a dataset belongs to "
                          f"one crossing (its methods are run.methods or run.extra.methods)")
    if bool(extra["datasets"]) != bool(extra["methods"]):
        raise ConfigError(f"{source}: key 'run.extra': give both datasets and methods (or neither); got {extra}")
    ref = params["statistics"]["reference"]
    for key, run in (("run.methods", params["run"]["methods"]), ("run.extra.methods", extra["methods"])):
        if len(run) > 1 and ref not in run:
            raise ConfigError(f"{source}: key 'statistics.reference': {ref!r} is not one of the methods run "
                              f"({key}: {run}): every comparison would say 'no paired reference'")
    for i, (method, control) in enumerate(params["statistics"]["contrasts"]):
        for name in (method, control):
            if name not in params["methods"]:
                raise _undefined(source, f"statistics.contrasts.{i}", name, "methods", params)
        if method == control:
            raise ConfigError(f"{source}: key 'statistics.contrasts.{i}': {method!r} against itself")


def _check_tuning(params: dict, source: str) -> None:
    """The trial budget, a learning-rate range for every optimizer a tuned dataset uses, and every point of a
    method's space (its range's ends, each of its choices) a value the method's options accept."""
    from .head_options import head_options

    tuning = params["tuning"]
    for key in ("trials", "seed", "epochs", "lr"):
        if key not in tuning:
            raise ConfigError(f"{source}: key 'tuning.{key}' is required when tuning.enabled is true")
    for ds in run_datasets(params):
        opt = train_config(params, ds).optimizer
        if opt not in tuning["lr"]:
            raise ConfigError(f"{source}: key 'tuning.lr.{opt}': no learning-rate range for the optimizer {opt!r} "
                              f"of dataset {ds!r}; given for: {sorted(tuning['lr'])}")
        lo, hi = tuning["lr"][opt]
        if not 0 < lo < hi:
            raise ConfigError(f"{source}: key 'tuning.lr.{opt}': need 0 < low < high, got [{lo}, {hi}]")
    for name, space in (tuning.get("space") or {}).items():
        if name not in params["methods"]:
            raise _undefined(source, f"tuning.space.{name}", name, "methods", params)
        method = params["methods"][name]
        options = head_options()[method["type"]]
        fields = set(options["properties"]) - {"type"}
        check = _Validator(options)
        for opt, dim in space.items():
            if opt not in fields:
                raise ConfigError(f"{source}: key 'tuning.space.{name}.{opt}': not an option of "
                                  f"{method['type']!r}; options: {sorted(fields)}")
            for what, value in _space_values(dim):
                bad = next(check.iter_errors({**method, opt: value}), None)
                if bad is not None:
                    raise ConfigError(f"{source}: key 'tuning.space.{name}.{opt}.{what}': {value!r} is not a "
                                      f"value of option {opt!r} of {method['type']!r} ({bad.message})")
            if "choices" not in dim and not (dim["low"] < dim["high"] and (dim["low"] > 0 or not dim.get("log"))):
                raise ConfigError(f"{source}: key 'tuning.space.{name}.{opt}': need low < high (and low > 0 "
                                  f"when log)")


def _space_values(dim: dict) -> list[tuple[str, Any]]:
    if "choices" in dim:
        return [(f"choices.{i}", c) for i, c in enumerate(dim["choices"])]
    ends = [("low", dim["low"]), ("high", dim["high"])]
    return [(k, int(v) if dim.get("integer") else v) for k, v in ends]


def _check_training(params: dict, name: str, source: str) -> None:
    """A training key written for a schedule or stage that this dataset does not use is an error, not a
    setting silently ignored (``lr_decay`` is required by the schema, so it is never reported)."""
    written = _merged(params, name, "training")
    tc = TrainConfig(**written)
    averaging = tc.schedule == "nt-asgd" or bool(tc.finetune_epochs)  # finetuning is nt-asgd
    unused = {"decay_start": (tc.schedule != "fixed-then-geometric", "schedule fixed-then-geometric"),
              "nonmono": (not averaging, "schedule nt-asgd or finetuning"),
              "asgd_start_epoch": (not averaging, "schedule nt-asgd or finetuning"),
              "bptt_max_delta": (not tc.variable_bptt, "variable_bptt: true"),
              "finetune_lr": (not tc.finetune_epochs, "finetune_epochs > 0"),
              "anytime_points": (tc.budget_seconds is None and tc.budget_tokens is None,
                                 "budget_seconds or budget_tokens")}
    if tc.budget_seconds is not None and tc.budget_tokens is not None:
        raise ConfigError(f"{source}: key 'training.budget_tokens' (dataset {name}): set beside budget_seconds; a run "
                          f"has one budget (a time budget's replay is budget_tokens alone)")
    for key, (ignored, needs) in unused.items():
        if ignored and written.get(key) is not None:
            raise ConfigError(f"{source}: key 'training.{key}' (dataset {name}): set to {written[key]!r}, but it "
                              f"only acts with {needs} (training.schedule is {tc.schedule!r}); remove it")


def _check_dataset(params: dict, name: str, source: str) -> None:
    """A dataset's training keys, then the rules its corpus type (``synthetic.check``) and its encoders
    (``encoders.check_model``: each encoder's own ``check``) state for themselves."""
    _check_training(params, name, source)
    from .encoders import check_model
    from .synthetic import check as check_synthetic

    c = params["datasets"][name]["corpus"]
    problem = check_synthetic(c) if c["type"] == "synthetic" else None
    if problem:
        raise ConfigError(f"{source}: key 'datasets.{name}.{problem[0]}': {problem[1]}")
    problem = check_model(model_config(params, name), train_config(params, name).bptt)
    if problem:
        raise ConfigError(f"{source}: key '{problem[0]}' (dataset {name}): {problem[1]}")


def load(path: str | os.PathLike = DEFAULT_PARAMS) -> dict:
    """The params file ``path`` laid out (``extends:``) and validated; a schema error names the file of the
    chain that wrote the offending key."""
    raws = [(f, _read(f)) for f in chain(path)]

    def origin(keys) -> str:
        for f, raw in raws:  # the file itself first: the last word on a key is its own
            node = raw
            for k in keys:
                if not (isinstance(node, dict) and k in node):
                    break
                node = node[k]
            else:
                return str(f)
        return str(path)

    return validate(resolve(path), str(path), origin if len(raws) > 1 else None)


def _merged(params: dict, dataset: str, section: str) -> dict:
    merged = copy.deepcopy(params[section])
    merged.update(params["datasets"][dataset].get(section, {}))
    return merged


def model_config(params: dict, dataset: str) -> ModelConfig:
    return ModelConfig(**_merged(params, dataset, "model"))


def train_config(params: dict, dataset: str) -> TrainConfig:
    return TrainConfig(**_merged(params, dataset, "training"))


def data_config(params: dict, dataset: str) -> dict:
    """Everything that determines a dataset's prepared artifacts (the top-level ``seed`` makes the data)."""
    ds = params["datasets"][dataset]
    return {"dataset": dataset, "corpus": ds["corpus"], "tokenizer": ds["tokenizer"],
            "noise": params["noise"], "seed": params["seed"]}


def run_seeds(params: dict) -> list[int]:
    """The run seeds every (dataset, method) fans out over (``run.seeds``)."""
    return list(params["run"]["seeds"])


def run_datasets(params: dict) -> list[str]:
    """Every dataset a params file trains on: ``run.datasets``, then ``run.extra.datasets``."""
    return [*params["run"]["datasets"], *params["run"]["extra"]["datasets"]]


def dataset_methods(params: dict, dataset: str) -> list[str]:
    """The methods that run on ``dataset``: ``run.extra.methods`` for a dataset of the second crossing (a
    large vocabulary that runs the sampling family alone, say), else ``run.methods``."""
    extra = params["run"]["extra"]
    return list(extra["methods"] if dataset in extra["datasets"] else params["run"]["methods"])


def run_pairs(params: dict) -> list[tuple[str, str]]:
    """Every (dataset, method) of both crossings, in order; each runs once per seed of ``run.seeds``."""
    return [(d, m) for d in run_datasets(params) for m in dataset_methods(params, d)]


def run_config(params: dict, dataset: str, method: str, seed: int | None = None,
               overrides: dict | None = None) -> dict:
    """Everything that determines one trained run; stored in its checkpoint and metrics.

    ``seed`` is the run seed (initialisation, dropout, negative sampling; default: the first of
    ``run.seeds``); the data seed stays in ``data.seed``. ``overrides`` = ``{"training": {...},
    "method": {...}, "tuning": {...}}`` replaces keys of those sections (a tuning trial's point, or
    the settings a tuning selected) and records where they came from under ``tuning``.
    """
    if dataset not in params["datasets"]:
        raise ConfigError(f"unknown dataset {dataset!r}; defined: {sorted(params['datasets'])}")
    if method not in params["methods"]:
        raise ConfigError(f"unknown method {method!r}; defined: {sorted(params['methods'])}")
    overrides = overrides or {}
    training = {**dataclasses.asdict(train_config(params, dataset)), **overrides.get("training", {})}
    cfg = {
        "data": data_config(params, dataset),
        "method_name": method,
        "method": {**params["methods"][method], **overrides.get("method", {})},
        "model": dataclasses.asdict(model_config(params, dataset)),
        "training": dataclasses.asdict(TrainConfig(**training)),
        "evaluation": _merged(params, dataset, "evaluation"),
        "seed": run_seeds(params)[0] if seed is None else int(seed),
    }
    if overrides.get("tuning"):
        cfg["tuning"] = overrides["tuning"]
    return canonical(cfg)


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
    from .head_options import head_options, option_defaults

    out = dict(cfg)
    for section, cls in (("model", ModelConfig), ("training", TrainConfig)):
        if isinstance(out.get(section), dict):
            out[section] = without_defaults(cls, out[section])
    method = out.get("method")
    if isinstance(method, dict) and method.get("type") in head_options():
        out["method"] = drop_defaults(method, option_defaults(method["type"]))  # a head's: from its options schema
    return out


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


def mirror_dir(params: dict) -> Path | None:
    m = os.environ.get(MIRROR_ENV) or params.get("mirror")
    return Path(m) if m else None
