"""The sections a run is made of: a dataset's model, training and data settings (the top level's, with the
dataset's own keys over them), the crossings of datasets, methods and seeds, and one run's whole config."""
from __future__ import annotations

import copy
import dataclasses
import os
from pathlib import Path

from ..io.errors import ConfigError
from .identity import canonical
from .settings import ModelConfig, TrainConfig

MIRROR_ENV = "LMBENCH_MIRROR"


def _merged(params: dict, dataset: str, section: str) -> dict:
    merged = copy.deepcopy(params.get(section) or {})
    merged.update(params["datasets"][dataset].get(section) or {})
    return merged


def dataset_section(params: dict, dataset: str, section: str) -> dict:
    """A dataset's ``section`` (``training``, ``model``, ...) as its runs see it, as a plain dict: the top level's
    with the dataset's own keys over it (``train_config`` and ``model_config`` make the dataclasses of the same)."""
    return _merged(params, dataset, section)


def evaluation_config(params: dict, dataset: str) -> dict:
    """The dataset's evaluation settings over the file's (the same for every method)."""
    return _merged(params, dataset, "evaluation")


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


def model_settings(cfg: dict) -> ModelConfig:
    """A run config's model section as typed settings: the one place a stored or resolved run config's section
    becomes a dataclass again (its canonical form left the defaults out)."""
    return ModelConfig(**cfg["model"])


def training_settings(cfg: dict) -> TrainConfig:
    """A run config's training section as typed settings (see :func:`model_settings`)."""
    return TrainConfig(**cfg["training"])


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
    frozen = training.pop("budget_tokens_by_method", None) or {}
    training.pop("budget_calibration", None)  # where the frozen tokens came from: said in the report, no run's hash
    picked = training.pop("lr_by_method", None) or {}
    if method in picked and "lr" not in overrides.get("training", {}):  # a tuning's pick, frozen (freeze-settings)
        training["lr"] = float(picked[method])
    if method in frozen:  # a time budget frozen into this method's tokens: the same run on any machine
        training.update(budget_tokens=int(frozen[method]), budget_seconds=None)
    fraction = (overrides.get("tuning") or {}).get("budget_fraction")
    if fraction is not None:  # a rung-0 trial of successive halving: its share of the run budget (of each cap)
        if training.get("budget_tokens"):
            training["budget_tokens"] = max(1, round(fraction * training["budget_tokens"]))
        if training.get("budget_seconds"):
            training["budget_seconds"] = fraction * training["budget_seconds"]
        if not (training.get("budget_tokens") or training.get("budget_seconds")):
            raise ConfigError(f"key 'tuning.halving' (dataset {dataset}): successive halving shares out a run "
                              f"budget, but this dataset's runs have none: set training.budget_seconds or "
                              f"training.budget_tokens")
    tops = training.pop("ladder_top_by_method", None) or {}
    if training.get("ladder"):  # schedule wsd: the run trains to its largest rung (training/ladder.py)
        rungs = sorted(int(r) for r in training["ladder"])
        top = int(tops[method]) if method in tops and int(tops[method]) < rungs[-1] else None
        training.update(ladder=rungs, ladder_top=top, budget_tokens=top or rungs[-1], budget_seconds=None)
    points = sorted(training.pop("budget_points", None) or [])
    if points:  # multiples of the token budget: the run trains to the largest and keeps its weights at each
        unit = training.get("budget_tokens")
        if unit is None:
            raise ConfigError(f"key 'training.budget_points' (dataset {dataset}, method {method}): multiples of a "
                              f"token budget, but this run has none: set training.budget_tokens or "
                              f"training.budget_tokens_by_method.{method}")
        training.update(budget_tokens=round(points[-1] * unit),
                        snapshots=[[float(m), round(m * unit)] for m in points])
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


def mirror_dir(params: dict) -> Path | None:
    m = os.environ.get(MIRROR_ENV) or params.get("mirror")
    return Path(m) if m else None
