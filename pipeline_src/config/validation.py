"""The params file checked: the JSON schema (each head's options spliced in), then every rule the schema cannot
state: names that must be defined, tuning ranges, optimiser and schedule settings, each corpus type's and each
encoder's own rules. :func:`load` reads a params file and validates it: Snakemake (``workflow/rules/common.smk``)
and every CLI step call it, so a wrong key or value fails before any job starts, naming the key and the file.
"""
from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from ..io.errors import ConfigError
from .loading import _read, chain, resolve
from .runs import _merged, model_config, run_datasets, train_config
from .settings import ModelConfig, TrainConfig, same_value

SCHEMA_PATH = Path(__file__).parent / "schema" / "params.schema.yaml"
DEFAULT_PARAMS = "params.yaml"
STATISTICS_DEFAULTS = {"reference": "softmax", "confidence": 0.95, "interval": "t", "resamples": 9999,
                       "contrasts": []}
MAX_TABLE = 50_000_000  # entries of the dense truth table (contexts x M) a synthetic language may have


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


def _offending(err: jsonschema.ValidationError) -> list:
    """The key path that made ``err``: an unexpected key's own (the mapping holding it may come from another
    file of an ``extends:`` chain), else the value's."""
    path = list(err.absolute_path)
    if err.validator == "additionalProperties" and isinstance(err.instance, dict):
        extra = [k for k in err.instance if k not in (err.schema.get("properties") or {})]
        return path + extra[:1]
    return path


def _number_text(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _yaml_number(text: str) -> str:
    """``1e-3`` as YAML 1.1 reads a number: ``1.0e-03``."""
    mantissa, _, exponent = f"{float(text):e}".partition("e")
    return f"{float(mantissa):g}".rstrip("0") + ("" if "." in f"{float(mantissa):g}" else ".0") + "e" + exponent


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
    elif err.validator == "type" and err.validator_value in ("number", "integer") and isinstance(err.instance, str) \
            and _number_text(err.instance):
        msg = (f"{err.instance!r} is a string to YAML (1.1 reads an exponent as a number only with a dot and a sign: "
               f"1.0e-3, 1.0e+9); write {_yaml_number(err.instance)}")
    elif err.validator in ("pattern", "minLength") and "description" in err.schema:
        msg += f" ({err.schema['description']})"
    elif err.validator == "const":
        msg = f"{err.instance!r} is not allowed; allowed value: {err.validator_value!r}"
    return f"{source}: key '{where}': {msg}"


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
            _format_error(e, origin(_offending(e)) if origin else source) for e in leaves))
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
                e = _undefined(origin(key.split(".")) if origin else source, key, name, section, params)
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
        e = _undefined(origin(["statistics", "reference"]) if origin else source, "statistics.reference",
                       params["statistics"]["reference"], "methods", params)
        raise ConfigError(f"{e} (the reference is softmax unless statistics.reference names another)")
    for ds in params["statistics"].get("speed_spread_accepted") or {}:
        if ds not in params["datasets"]:
            raise _undefined(source, "statistics.speed_spread_accepted", ds, "datasets", params)
    for i, (method, control) in enumerate(params["statistics"]["contrasts"]):
        for name in (method, control):
            if name not in params["methods"]:
                raise _undefined(source, f"statistics.contrasts.{i}", name, "methods", params)
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
            raise _undefined(source, f"tuning.lr_ranges.{name}", name, "methods", params)
        for ds, (lo, hi) in ranges.items():
            if ds not in params["datasets"]:
                raise _undefined(source, f"tuning.lr_ranges.{name}.{ds}", ds, "datasets", params)
            if not 0 < lo < hi:
                raise ConfigError(f"{source}: key 'tuning.lr_ranges.{name}.{ds}': need 0 < low < high, got "
                                  f"[{lo}, {hi}]")
    _check_halving(params, source)
    _check_replay(params, source)
    for name, space in (tuning.get("space") or {}).items():
        if name not in params["methods"]:
            raise _undefined(source, f"tuning.space.{name}", name, "methods", params)
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
            raise _undefined(source, "tuning.halving.datasets", ds, "datasets", params)
        tc = train_config(params, ds)
        if tc.budget_seconds is None and tc.budget_tokens is None and not tc.budget_tokens_by_method:
            raise ConfigError(f"{source}: key 'tuning.halving.datasets': dataset {ds!r} has no run budget to share "
                              f"out (set its training.budget_seconds or training.budget_tokens)")


def _check_replay(params: dict, source: str) -> None:
    """A token replay names datasets that exist and tune under a time budget (the tokens their trials reached)."""
    replay = params["tuning"].get("replay_tokens")
    for ds in (replay or {}).get("datasets", ()):
        if ds not in params["datasets"]:
            raise _undefined(source, "tuning.replay_tokens.datasets", ds, "datasets", params)
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


def _check_training(params: dict, name: str, source: str) -> None:
    """A training key written for a schedule or stage that this dataset does not use is an error, not a
    setting silently ignored (``lr_decay`` is required by the schema, so it is never reported)."""
    written = _merged(params, name, "training")
    tc = TrainConfig(**written)
    averaging = tc.schedule == "nt-asgd" or bool(tc.finetune_epochs)  # finetuning is nt-asgd
    no_budget = (tc.budget_seconds is None and tc.budget_tokens is None and not tc.ladder
                 and not tc.budget_tokens_by_method)
    unused = {"decay_start": (tc.schedule != "fixed-then-geometric", "schedule fixed-then-geometric"),
              "nonmono": (not averaging, "schedule nt-asgd or finetuning"),
              "asgd_start_epoch": (not averaging, "schedule nt-asgd or finetuning"),
              "bptt_max_delta": (not tc.variable_bptt, "variable_bptt: true"),
              "finetune_lr": (not tc.finetune_epochs, "finetune_epochs > 0"),
              "anytime_points": (no_budget, "budget_seconds, budget_tokens (or budget_tokens_by_method) or a ladder"),
              "anytime_epochs": (no_budget, "budget_seconds, budget_tokens (or budget_tokens_by_method) or a ladder"),
              "budget_points": (tc.budget_tokens is None and not tc.budget_tokens_by_method and not tc.ladder,
                                "a token budget: budget_tokens or budget_tokens_by_method (its points are multiples "
                                "of it)")}
    step_level = tc.schedule in ("cosine", "wsd")
    unused.update({"warmup_tokens": (not step_level, "schedule cosine or wsd"),
                   "ladder": (tc.schedule != "wsd", "schedule wsd"),
                   "ladder_top_by_method": (tc.schedule != "wsd", "schedule wsd"),
                   "cooldown_fraction": (tc.schedule != "wsd", "schedule wsd"),
                   "cooldown_shape": (tc.schedule != "wsd", "schedule wsd")})
    _check_step_schedule(tc, written, name, source)
    if tc.budget_seconds is not None and tc.budget_tokens is not None:
        raise ConfigError(f"{source}: key 'training.budget_tokens' (dataset {name}): set beside budget_seconds; a run "
                          f"has one budget (a time budget's replay is budget_tokens alone)")
    if written.get("ladder_top") is not None:
        raise ConfigError(f"{source}: key 'training.ladder_top' (dataset {name}): a run's own cap, set from "
                          f"training.ladder_top_by_method; write that instead")
    for key in ("budget_tokens_by_method", "lr_by_method", "ladder_top_by_method"):
        for method in getattr(tc, key) if name in run_datasets(params) else ():  # a dataset not run is not held to
            if method not in params["methods"]:  # methods a file extending params.yaml may have replaced
                raise _undefined(source, f"training.{key}.{method} (dataset {name})", method, "methods", params)
    if tc.budget_calibration and tc.budget_tokens_by_method and name in run_datasets(params):
        from ..io.paths import PROVENANCE, REPOSITORY

        calibration = REPOSITORY / "benchmarks" / tc.budget_calibration.split("/", 1)[-1]
        if not (calibration / PROVENANCE).is_file():  # the report states it: refused here, not after every run
            raise ConfigError(f"{source}: key 'training.budget_calibration' (dataset {name}): "
                              f"{tc.budget_calibration} is no publication (no {PROVENANCE}): name the one the "
                              f"frozen tokens came from, or publish it first")
    for key, (ignored, needs) in unused.items():
        if ignored and written.get(key) not in (None, []):  # `ladder: []` in a child file unsets its base's
            raise ConfigError(f"{source}: key 'training.{key}' (dataset {name}): set to {written[key]!r}, but it "
                              f"only acts with {needs} (training.schedule is {tc.schedule!r}); remove it")


def _check_step_schedule(tc: TrainConfig, written: dict, name: str, source: str) -> None:
    """The step-level schedules know their budget in tokens: cosine ends at budget_tokens, wsd anneals at each
    rung of its ladder (training/ladder.py); neither reads a clock."""
    where = f"(dataset {name})"
    if tc.schedule == "cosine" and not tc.budget_tokens and not tc.budget_tokens_by_method:
        raise ConfigError(f"{source}: key 'training.schedule' {where}: cosine decays to 0 at the run's token budget, "
                          f"but it has none: set training.budget_tokens")
    if tc.schedule == "cosine" and tc.budget_tokens and tc.warmup_tokens >= tc.budget_tokens:
        raise ConfigError(f"{source}: key 'training.warmup_tokens' {where}: {tc.warmup_tokens} tokens of warmup do not "
                          f"end before the budget's {tc.budget_tokens}; shorten the warmup")
    if tc.schedule != "wsd":
        return
    if not tc.ladder:
        raise ConfigError(f"{source}: key 'training.ladder' {where}: schedule wsd anneals at each rung of a ladder of "
                          f"token budgets: set training.ladder (e.g. [500000, 1000000, 2000000])")
    for key in ("budget_seconds", "budget_points", "budget_tokens_by_method"):
        if written.get(key):
            raise ConfigError(f"{source}: key 'training.{key}' {where}: set beside training.ladder, which is the "
                              f"run's budgets (its largest rung ends the run); remove it")
    for method, top in tc.ladder_top_by_method.items():
        if top not in tc.ladder:
            raise ConfigError(f"{source}: key 'training.ladder_top_by_method.{method}' {where}: {top} is not a rung of "
                              f"the ladder {sorted(tc.ladder)}; a capped method stops at one of its rungs")
    if written.get("budget_tokens") is not None and written["budget_tokens"] != max(tc.ladder):
        raise ConfigError(f"{source}: key 'training.budget_tokens' {where}: {written['budget_tokens']} is not the "
                          f"ladder's top rung {max(tc.ladder)}; remove it (the ladder sets it)")
    step = tc.batch_size * tc.bptt
    short = min(tc.ladder, key=lambda r: round(tc.cooldown_fraction * r))
    if round(tc.cooldown_fraction * short) < step:
        raise ConfigError(f"{source}: key 'training.cooldown_fraction' {where}: rung {short} cools down for "
                          f"{round(tc.cooldown_fraction * short)} tokens, less than one step ({step} = batch_size x "
                          f"bptt): raise it or the rung")
    first_fork = min(tc.ladder) - round(tc.cooldown_fraction * min(tc.ladder))
    if first_fork < step:
        raise ConfigError(f"{source}: key 'training.cooldown_fraction' {where}: the first rung's cooldown would start "
                          f"at {first_fork} tokens, before the trunk's first step ({step}); lower it or raise the rung")
    if tc.warmup_tokens >= first_fork:
        raise ConfigError(f"{source}: key 'training.warmup_tokens' {where}: {tc.warmup_tokens} tokens of warmup do not "
                          f"end before the first rung's cooldown starts at {first_fork}; shorten the warmup")
    if tc.keep != "last":
        raise ConfigError(f"{source}: key 'training.keep' {where}: a ladder's models are each branch's final "
                          f"weights (the top rung's in model.pt): set keep: last")


def _check_dataset(params: dict, name: str, source: str) -> None:
    """A dataset's training keys, then the rules its corpus type (``_check_synthetic``) and its encoder
    (``check_model``) state for themselves."""
    _check_training(params, name, source)
    c = params["datasets"][name]["corpus"]
    problem = (_check_synthetic(c) if c["type"] == "synthetic" else
               _check_zipfian(c) if c["type"] in ("zipfian", "zipfian-topics") else None)
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


def _check_synthetic(corpus: dict) -> tuple[str, str] | None:
    """The corpus's own rules, as (key, why): its dense truth table must fit, and a context's support is some
    of the vocabulary (a larger one was silently clipped to vocab_size)."""
    entries = corpus["vocab_size"] ** corpus["order"]
    if entries > MAX_TABLE:
        return "corpus", f"vocab_size**order = {entries:,} table entries; at most {MAX_TABLE:,} are supported"
    if corpus.get("support") is not None and corpus["support"] > corpus["vocab_size"]:
        return "corpus.support", (f"{corpus['support']} is more than vocab_size {corpus['vocab_size']} (each "
                                  f"context's next-word support is a subset of the vocabulary)")
    return None


ZIPF_CLASSES = 128  # the schema's default classes of both Zipfian types (as data/zipfian.py's DEFAULTS)


def _check_zipfian(corpus: dict) -> tuple[str, str] | None:
    """A Zipfian language assigns each word to one of its classes: no more classes than words."""
    classes = corpus.get("classes", ZIPF_CLASSES)
    if classes > corpus["vocab_size"]:
        return "corpus.classes", (f"{classes} classes{'' if 'classes' in corpus else ' (the default)'} for "
                                  f"{corpus['vocab_size']} words: each word is in one class; set classes to at most "
                                  f"vocab_size")
    return None


def _check_awd_lstm(cfg: ModelConfig, bptt: int) -> tuple[str, str] | None:
    if cfg.proj_dim is not None:
        return "model.proj_dim", "not an awd-lstm option; size its last layer with model.last_dim"
    return None


def _check_transformer(cfg: ModelConfig, bptt: int) -> tuple[str, str] | None:
    if not cfg.context or not cfg.heads or cfg.emb_dim % cfg.heads:
        return "model.context' / 'model.heads", (f"the transformer needs both, with heads dividing emb_dim "
                                                f"({cfg.emb_dim})")
    if bptt > cfg.context:
        return "training.bptt", f"{bptt} tokens per segment do not fit the transformer's context of {cfg.context}"
    return None


ENCODER_CHECKS = {"awd-lstm": _check_awd_lstm, "transformer": _check_transformer}  # the first setting that cannot work


def check_model(cfg: ModelConfig, bptt: int) -> tuple[str, str] | None:
    """The model section's cross-field rules, as (key, why) for the first broken one: an option that belongs
    to another encoder (declared on its field), the chosen encoder's own rules (``ENCODER_CHECKS``), and the
    tied head's width."""
    for f in dataclasses.fields(ModelConfig):
        owner = f.metadata.get("encoder")
        if owner and owner != cfg.encoder and not same_value(getattr(cfg, f.name), f.default):
            return f"model.{f.name}", f"a{'n' * (owner[0] in 'aeiou')} {owner} option, but model.encoder is {cfg.encoder!r}"
    check = ENCODER_CHECKS.get(cfg.encoder)
    problem = check(cfg, bptt) if check else None
    if problem:
        return problem
    if cfg.tie_weights and cfg.proj_dim not in (None, cfg.emb_dim):
        return "model.proj_dim", (f"{cfg.proj_dim} with tie_weights true; a tied head's input is emb_dim "
                                  f"({cfg.emb_dim}): drop proj_dim or untie")
    return None
