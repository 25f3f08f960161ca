"""The single params file: loading, JSON-schema validation, and per-run resolution.

Snakemake (``workflow/rules/common.smk``) and every CLI step call :func:`load`, so a wrong
key or value fails before any job starts, with the offending key path and the allowed values.
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

SCHEMA_PATH = Path(__file__).parent / "schema" / "params.schema.yaml"
DEFAULT_PARAMS = "params.yaml"
MIRROR_ENV = "LMBENCH_MIRROR"


class ConfigError(ValueError):
    """A params file that does not match the schema or refers to something undefined."""


@dataclass(frozen=True)
class ModelConfig:
    emb_dim: int
    hidden_dim: int
    layers: int
    dropout: float
    tie_weights: bool


@dataclass(frozen=True)
class TrainConfig:
    epochs: int
    batch_size: int
    bptt: int
    optimizer: str
    lr: float
    clip: float | None
    lr_decay: float
    eval_batch_size: int
    weight_decay: float = 0.0
    max_steps_per_epoch: int | None = None
    checkpoint_every_steps: int | None = None
    precision: str = "fp32"  # "bf16": autocast the training forward pass (meant for GPUs; runs on CPU too)


def schema() -> dict:
    """The params schema, with each registered head's options schema spliced in."""
    from .heads import options_schema, registry

    s = yaml.safe_load(SCHEMA_PATH.read_text())
    heads = registry()
    method = s["$defs"]["method"]
    method["properties"] = {"type": {"enum": sorted(heads)}}
    method["allOf"] = [{"if": {"properties": {"type": {"const": name}}}, "then": options_schema(cls)}
                       for name, cls in sorted(heads.items())]
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
    elif err.validator == "const":
        msg = f"{err.instance!r} is not allowed; allowed value: {err.validator_value!r}"
    return f"{source}: key '{where}': {msg}"


def validate(params: dict, source: str = DEFAULT_PARAMS) -> dict:
    """Validate ``params`` and check cross-references; return it with defaults filled in."""
    validator = jsonschema.Draft202012Validator(schema())
    errors = sorted(validator.iter_errors(params), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if errors:
        # The deepest errors are the most specific (a bad method option, not "allOf failed").
        leaves = [e for e in errors if not e.context] or errors
        raise ConfigError("invalid config:\n  " + "\n  ".join(_format_error(e, source) for e in leaves))
    for key, section in (("run.datasets", "datasets"), ("run.methods", "methods"), ("bench.methods", "methods"),
                         ("matrix.methods", "methods")):
        first, second = key.split(".")
        for name in params[first][second]:
            if name not in params[section]:
                raise ConfigError(f"{source}: key '{key}': {name!r} is not defined under '{section}'; "
                                  f"defined: {sorted(params[section])}")
    for name, ds in params["datasets"].items():
        c = ds["corpus"]
        if c["type"] == "synthetic":
            rows = c["vocab_size"] ** (c["order"] - 1)
            if rows * c["vocab_size"] > 50_000_000:
                raise ConfigError(f"{source}: key 'datasets.{name}.corpus': vocab_size**order = "
                                  f"{rows * c['vocab_size']:,} table entries; at most 50,000,000 are supported")
    return params


def load(path: str | os.PathLike = DEFAULT_PARAMS) -> dict:
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"config file {path} does not exist")
    try:
        params = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(params, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return validate(params, str(path))


def _merged(params: dict, dataset: str, section: str) -> dict:
    merged = copy.deepcopy(params[section])
    merged.update(params["datasets"][dataset].get(section, {}))
    return merged


def model_config(params: dict, dataset: str) -> ModelConfig:
    return ModelConfig(**_merged(params, dataset, "model"))


def train_config(params: dict, dataset: str) -> TrainConfig:
    return TrainConfig(**_merged(params, dataset, "training"))


def data_config(params: dict, dataset: str) -> dict:
    """Everything that determines a dataset's prepared artifacts."""
    ds = params["datasets"][dataset]
    return {"dataset": dataset, "corpus": ds["corpus"], "tokenizer": ds["tokenizer"],
            "noise": params["noise"], "seed": params["seed"]}


def run_config(params: dict, dataset: str, method: str) -> dict:
    """Everything that determines one trained run; stored in its checkpoint and metrics."""
    if dataset not in params["datasets"]:
        raise ConfigError(f"unknown dataset {dataset!r}; defined: {sorted(params['datasets'])}")
    if method not in params["methods"]:
        raise ConfigError(f"unknown method {method!r}; defined: {sorted(params['methods'])}")
    return {
        "data": data_config(params, dataset),
        "method_name": method,
        "method": params["methods"][method],
        "model": dataclasses.asdict(model_config(params, dataset)),
        "training": dataclasses.asdict(train_config(params, dataset)),
        "evaluation": params["evaluation"],
        "seed": params["seed"],
    }


def config_hash(cfg: Any) -> str:
    """Stable short hash of a JSON-able config (key order does not matter)."""
    blob = json.dumps(cfg, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def mirror_dir(params: dict) -> Path | None:
    m = os.environ.get(MIRROR_ENV) or params.get("mirror")
    return Path(m) if m else None
