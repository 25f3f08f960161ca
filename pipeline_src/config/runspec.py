"""A run resolved once: the params file and a run's coordinates turned into one frozen spec.

The CLI (and Snakemake's hash rule) build a :class:`RunSpec` at the edge with :func:`resolve_run`; train,
finetune, evaluate, summarize and the step bench take its config and never go back to the params file
for a run's settings. Tuning only decides: a trial's point (:func:`tuning.trial_point`) and the settings
a selection chose (:func:`tuning.selected_settings`); :func:`config.run_config` lays them over the
params. The order a reader follows is the order the pipeline runs: cli -> runspec -> tuning (what was
decided) -> config (the config) -> train.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path

from ..io import paths
from ..io.errors import ConfigError
from . import tuning
from .identity import config_hash, run_hash, train_hash
from .runs import model_settings, run_config, run_seeds, training_settings
from .settings import ModelConfig, TrainConfig


@dataclass(frozen=True)
class RunSpec:
    dataset: str
    method: str
    seed: int  # the run seed (a tuning trial's is tuning.seed)
    trial: int | None  # a tuning trial, or None for a final run
    source: str  # where its settings came from: the params file, a trial's point, or a selection
    out_dir: Path  # where its model and records go
    _config: dict = field(repr=False)

    @property
    def config(self) -> dict:
        """The canonical run config (a copy: the spec itself never changes)."""
        return copy.deepcopy(self._config)

    @property
    def hash(self) -> str:
        return run_hash(self._config)

    @property
    def train_hash(self) -> str:
        return train_hash(self._config)

    @property
    def model(self) -> ModelConfig:
        """The model section as typed settings (``config.runs.model_settings``)."""
        return model_settings(self._config)

    @property
    def training(self) -> TrainConfig:
        """The training section as typed settings (``config.runs.training_settings``)."""
        return training_settings(self._config)

    @property
    def label(self) -> str:
        run = f"trial {self.trial}" if self.trial is not None else f"seed {self.seed}"
        return f"{self.dataset}/{self.method} {run}"


def resolve_run(params: dict, dataset: str, method: str, seed: int | None = None,
                trial: int | None = None, as_written: bool = False) -> RunSpec:
    """The one way a run's settings are decided: a final run (``seed``) takes the params file's settings, or
    those its tuning selected; a tuning trial (``trial``) takes its quasi-random point and the trial budget.
    ``as_written``: a final run's params-file settings even when tuning selects them, which is what the hash
    files key it by (Snakemake and DVC read those before the selection exists; the selection is an input of
    its own); likewise a promoted trial of successive halving is keyed by its place, its rung-0 trials being
    its inputs (:func:`tuning.trial_point`)."""
    if (seed is None) == (trial is None):
        raise ConfigError("give exactly one of --seed (a final run) and --trial (a tuning trial)")
    if trial is not None:
        ranked = None
        promoted = tuning.rung(params, dataset, trial) and trial < tuning.trial_count(params, dataset)
        if promoted and not as_written:  # a promoted repeat: rung 0 decides its point (past the last: out of range)
            ranked = tuning.ranking(tuning.trial_rows(rung0_trials(params, dataset, method)))
        t_seed, overrides = tuning.trial_point(params, dataset, method, trial, ranked)
        cfg = run_config(params, dataset, method, seed=t_seed, overrides=overrides)
        return RunSpec(dataset, method, t_seed, trial, f"tuning trial {trial}",
                       paths.trial_dir(params, dataset, method, trial), cfg)
    if seed not in run_seeds(params):
        raise ConfigError(f"seed {seed} is not in run.seeds {run_seeds(params)}")
    chosen, tuned = None, (params.get("tuning") or {}).get("enabled")
    if tuned and not as_written:
        chosen = tuning.selected_settings(params, dataset, method, selection_key(params, dataset, method))
    elif tuned and tuning.replays_tokens(params, dataset):  # the hash files key a replay apart from a timed run
        chosen = {"tuning": {"replays_trial_tokens": True}}
    cfg = run_config(params, dataset, method, seed, overrides=chosen)
    return RunSpec(dataset, method, seed, None, _source(chosen), paths.run_dir(params, dataset, method, seed), cfg)


def _source(chosen: dict | None) -> str:
    """Where a final run's settings came from, for people: the params file, or tuning's selected trial (and, under
    ``tuning.replay_tokens``, the tokens it reached, which the run replays)."""
    t = (chosen or {}).get("tuning") or {}
    if t.get("selected_trial") is None:
        return "the params file"
    replayed = t.get("replays_trial_tokens")
    return f"tuning's selected trial {t['selected_trial']}" + (f" and its {replayed:,} tokens" if replayed else "")


def selection_key(params: dict, dataset: str, method: str, specs: list[RunSpec] | None = None) -> str:
    """What a selection depends on: the training hash of every trial of the method (``specs``: those trials,
    when the caller has already resolved them)."""
    return config_hash([spec.train_hash for spec in (specs or trials(params, dataset, method))])


def trials(params: dict, dataset: str, method: str) -> list[RunSpec]:
    """Every tuning trial of a method, resolved (what ``select`` compares); a promoted one needs its rung-0
    trials' records (a missing one is a FileNotFoundError naming it)."""
    first = rung0_trials(params, dataset, method)
    return first + [resolve_run(params, dataset, method, trial=i)
                    for i in range(len(first), tuning.trial_count(params, dataset))]


def rung0_trials(params: dict, dataset: str, method: str) -> list[RunSpec]:
    """The ``tuning.trials`` trials of the design (all of them without successive halving), resolved."""
    return [resolve_run(params, dataset, method, trial=i) for i in range(tuning.settings(params)["trials"])]


def final_config(params: dict, dataset: str, method: str, seed: int) -> dict:
    """A final run's config (:func:`resolve_run` with a seed)."""
    return resolve_run(params, dataset, method, seed=seed).config


def trial_config(params: dict, dataset: str, method: str, trial: int) -> dict:
    """A tuning trial's config (:func:`resolve_run` with a trial)."""
    return resolve_run(params, dataset, method, trial=trial).config
