"""The params file, from YAML to typed run configs: one package, its parts in pipeline order.

  settings.py    the model and training dataclasses with their defaults (imports nothing else of the project)
  loading.py     YAML read strictly, ``extends:`` chains laid out, overlays
  validation.py  the schema and the cross-field rules of names and tuning; ``load``
  dataset_rules.py  each dataset's own rules: training keys, schedules, its corpus type's and its encoder's
  schema_errors.py  a schema error as one line naming the file and the key
  runs.py        the sections a run is made of, the crossings of datasets x methods x seeds, ``run_config``
  identity.py    the canonical form of a run config and the hashes taken of it
  runspec.py     a run resolved once (``resolve_run``) into a frozen spec: config, seed, folder, label
  tuning.py      a method's tuning trials (Sobol points) and the settings the tuning selected

What a caller needs is importable from here (``from pipeline_src.config import load``).
"""
from ..io.errors import ConfigError
from .identity import (NOT_TRAINING, canonical, config_hash, drop_defaults, field_defaults, first_difference,
                       run_hash, train_hash, training_part, without_defaults)
from .loading import Replace, chain, is_params_file, overlay, resolve
from .runs import (MIRROR_ENV, data_config, dataset_methods, mirror_dir, model_config, model_settings, run_config,
                   run_datasets, run_pairs, run_seeds, train_config, training_settings)
from .settings import ModelConfig, TrainConfig, same_value
from .validation import DEFAULT_PARAMS, SCHEMA_PATH, STATISTICS_DEFAULTS, load, schema, validate

__all__ = ["canonical", "chain", "config_hash", "ConfigError", "data_config", "dataset_methods",
           "DEFAULT_PARAMS", "drop_defaults", "field_defaults", "first_difference", "is_params_file", "load",
           "mirror_dir", "MIRROR_ENV", "model_config", "model_settings", "ModelConfig", "NOT_TRAINING", "overlay",
           "Replace", "resolve", "run_config", "run_datasets", "run_hash", "run_pairs", "run_seeds", "same_value",
           "schema", "SCHEMA_PATH", "STATISTICS_DEFAULTS", "train_config", "train_hash", "TrainConfig",
           "training_part", "training_settings", "validate", "without_defaults"]
