"""The params file checked: the JSON schema (each head's options spliced in; its errors in one line,
``schema_errors.py``), then every rule the schema cannot state: names that must be defined and tuning ranges here,
each dataset's training, corpus and encoder rules in ``dataset_rules.py``. :func:`load` reads a params file and
validates it: Snakemake (``workflow/rules/common.smk``) and every CLI step call it, so a wrong key or value fails
before any job starts, naming the key and the file.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from ..io.errors import ConfigError
from .dataset_rules import check_dataset, undefined
from .loading import _read, chain, resolve
from .runs import run_datasets, train_config
from .schema_errors import format_error, offending

SCHEMA_PATH = Path(__file__).parent / "schema" / "params.schema.yaml"
DEFAULT_PARAMS = "params.yaml"
STATISTICS_DEFAULTS = {"reference": "softmax", "confidence": 0.95, "interval": "t", "resamples": 9999,
                       "contrasts": []}


# An integer is an int as written: JSON schema takes 2.0 for an integer, and 2.0 epochs or a seed of 1.0 then
# failed deep inside (slice indices, numpy's SeedSequence) and hashed apart from 2 and 1.
_Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda checker, x: isinstance(x, int) and not isinstance(x, bool)))


def schema(plugins: dict | None = None) -> dict:
    """The params schema, with each registered head's options schema spliced in (and ``plugins``': type ->
    options schema of the heads from outside the repository a params file names, heads/plugins.py)."""
    from ..heads.options import head_options

    s = yaml.safe_load(SCHEMA_PATH.read_text())
    heads = {**head_options(), **(plugins or {})}
    method = s["$defs"]["method"]
    method["properties"] = {"type": {"enum": sorted(heads)}}
    method["allOf"] = [{"if": {"properties": {"type": {"const": name}}}, "then": options}
                       for name, options in sorted(heads.items())]
    return s


def _plugin_options(params: dict, source: str, origin) -> dict:
    """The options schema of each head from outside the repository that ``methods`` names (loading it: a
    missing module or a class that is no output layer is one line naming the key)."""
    from ..heads.options import head_options, options_of
    from ..heads.plugins import is_plugin

    built_in, out = set(head_options()), {}
    methods = params.get("methods")
    for name, method in (methods.items() if isinstance(methods, dict) else ()):  # else the schema says what is wrong
        t = method.get("type") if isinstance(method, dict) else None
        if isinstance(t, str) and t not in out and is_plugin(t, built_in):
            where = origin(["methods", name, "type"]) if origin else source
            try:
                out[t] = options_of(t)
            except ConfigError as e:
                raise ConfigError(f"{where}: key 'methods.{name}.type': {e}") from None
    return out


def validate(params: dict, source: str = DEFAULT_PARAMS, origin=None) -> dict:
    """Validate ``params`` and check cross-references; return it with defaults filled in. ``origin(keys)``:
    the file of an ``extends:`` chain that wrote a key path (a schema error names it)."""
    if not isinstance(params, dict):  # a damaged provenance.json's params, say
        raise ConfigError(f"{source}: expected a mapping of params, found {type(params).__name__}")
    _check_finite(params, lambda keys: origin(keys) if origin else source)
    validator = _Validator(schema(_plugin_options(params, source, origin)))
    errors = sorted(validator.iter_errors(params), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if errors:
        # The deepest errors are the most specific (a bad method option, not "allOf failed").
        leaves = [e for e in errors if not e.context] or errors
        raise ConfigError("invalid config:\n  " + "\n  ".join(
            format_error(e, origin(offending(e)) if origin else source) for e in leaves))
    params["run"].setdefault("seeds", [0])
    params["run"].setdefault("extra", {"datasets": [], "methods": []})
    params.setdefault("statistics", {})
    for k, v in STATISTICS_DEFAULTS.items():
        params["statistics"].setdefault(k, v)
    params.setdefault("tuning", {"enabled": False})
    params.setdefault("keep_models", True)
    _check_names(params, source, origin)
    if params["tuning"]["enabled"]:
        _check_tuning(params, source)
    for name in params["datasets"]:
        check_dataset(params, name, source)
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


def _check_names(params: dict, source: str, origin=None) -> None:
    """Every name a section refers to is defined where it should be (an undefined one blamed on the file of the
    ``extends:`` chain that wrote the list)."""
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
                e = undefined(origin(key.split(".")) if origin else source, key, name, section, params)
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
    # statistics.reference need not run everywhere (a size its budget cannot reach, or `compare` at such a
    # size): where it did not, the best method that learned stands in, named in the row (reporting/stats.py);
    # but it is a method the file defines (a misspelt one made every size compare against a stand-in)
    if params["statistics"]["reference"] not in params["methods"]:
        e = undefined(origin(["statistics", "reference"]) if origin else source, "statistics.reference",
                       params["statistics"]["reference"], "methods", params)
        raise ConfigError(f"{e} (the reference is softmax unless statistics.reference names another)")
    for ds in params["statistics"].get("speed_spread_accepted") or {}:
        if ds not in params["datasets"]:
            raise undefined(source, "statistics.speed_spread_accepted", ds, "datasets", params)
    for i, (method, control) in enumerate(params["statistics"]["contrasts"]):
        for name in (method, control):
            if name not in params["methods"]:
                raise undefined(source, f"statistics.contrasts.{i}", name, "methods", params)
        if method == control:
            raise ConfigError(f"{source}: key 'statistics.contrasts.{i}': {method!r} against itself")


def _check_tuning(params: dict, source: str) -> None:
    """The trial budget, a learning-rate range for every optimizer a tuned dataset uses, and every point of a
    method's space (its range's ends, each of its choices) a value the method's options accept."""
    from ..heads.options import options_of

    tuning = params["tuning"]
    for key in ("trials", "seed", "epochs", "lr"):
        if key not in tuning:
            raise ConfigError(f"{source}: key 'tuning.{key}' is required when tuning.enabled is true")
    if tuning.get("design") == "latin-grid" and tuning["trials"] < 2:
        raise ConfigError(f"{source}: key 'tuning.trials': latin-grid tries the rate range's two ends, so it needs at "
                          f"least 2 trials (got {tuning['trials']})")
    rung = tuning.get("rung_tokens")
    for ds in run_datasets(params) if rung else ():
        ladder = train_config(params, ds).ladder
        if not ladder or rung not in ladder:
            raise ConfigError(f"{source}: key 'tuning.rung_tokens': {rung} is not a rung of the ladder of dataset {ds!r} "
                              f"(training.ladder: {ladder or 'none; rung_tokens needs schedule wsd'}); the trials "
                              f"train the rung the picks are made at: name one of its rungs")
    for ds in run_datasets(params):
        opt = train_config(params, ds).optimizer
        if opt not in tuning["lr"]:
            raise ConfigError(f"{source}: key 'tuning.lr.{opt}': no learning-rate range for the optimizer {opt!r} "
                              f"of dataset {ds!r}; given for: {sorted(tuning['lr'])}")
        lo, hi = tuning["lr"][opt]
        if not 0 < lo < hi:
            raise ConfigError(f"{source}: key 'tuning.lr.{opt}': need 0 < low < high, got [{lo}, {hi}]")
    for name, ranges in (tuning.get("lr_ranges") or {}).items():
        if name not in params["methods"]:
            raise undefined(source, f"tuning.lr_ranges.{name}", name, "methods", params)
        for ds, (lo, hi) in ranges.items():
            if ds not in params["datasets"]:
                raise undefined(source, f"tuning.lr_ranges.{name}.{ds}", ds, "datasets", params)
            if not 0 < lo < hi:
                raise ConfigError(f"{source}: key 'tuning.lr_ranges.{name}.{ds}': need 0 < low < high, got "
                                  f"[{lo}, {hi}]")
    _check_halving(params, source)
    _check_replay(params, source)
    for name, space in (tuning.get("space") or {}).items():
        if name not in params["methods"]:
            raise undefined(source, f"tuning.space.{name}", name, "methods", params)
        method = params["methods"][name]
        options = options_of(method["type"])
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


def _check_halving(params: dict, source: str) -> None:
    """Successive halving names datasets that exist, promotes no more trials than there are, and shares out a
    budget each listed dataset's runs have (seconds, tokens or frozen tokens; a method the frozen tokens leave out
    without seconds to fall back on is named when its trial is resolved, by ``run_config``)."""
    halving = params["tuning"].get("halving")
    if not halving:
        return
    if halving["promote"] > params["tuning"]["trials"]:
        raise ConfigError(f"{source}: key 'tuning.halving.promote': {halving['promote']} is more than the "
                          f"{params['tuning']['trials']} trials of tuning.trials")
    for ds in halving["datasets"]:
        if ds not in params["datasets"]:
            raise undefined(source, "tuning.halving.datasets", ds, "datasets", params)
        tc = train_config(params, ds)
        if tc.budget_seconds is None and tc.budget_tokens is None and not tc.budget_tokens_by_method:
            raise ConfigError(f"{source}: key 'tuning.halving.datasets': dataset {ds!r} has no run budget to share "
                              f"out (set its training.budget_seconds or training.budget_tokens)")


def _check_replay(params: dict, source: str) -> None:
    """A token replay names datasets that exist and tune under a time budget (the tokens their trials reached)."""
    replay = params["tuning"].get("replay_tokens")
    for ds in (replay or {}).get("datasets", ()):
        if ds not in params["datasets"]:
            raise undefined(source, "tuning.replay_tokens.datasets", ds, "datasets", params)
        tc = train_config(params, ds)
        if tc.budget_seconds is None or tc.budget_tokens_by_method:
            raise ConfigError(f"{source}: key 'tuning.replay_tokens.datasets': dataset {ds!r} does not tune under "
                              f"a time budget (training.budget_seconds, no frozen tokens): its trials reached no "
                              f"tokens to replay")


def _space_values(dim: dict) -> list[tuple[str, Any]]:
    if "choices" in dim:
        return [(f"choices.{i}", c) for i, c in enumerate(dim["choices"])]
    ends = [("low", dim["low"]), ("high", dim["high"])]
    return [(k, int(v) if dim.get("integer") else v) for k, v in ends]


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
