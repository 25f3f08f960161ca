"""Training loop: truncated BPTT, SGD/Adam, clipping, an LR schedule (schedules.py), checkpoints, resume.

It knows no particular output layer: it calls ``model.loss``, validates through ``data/streaming.py``
(the head's ``target_log_prob``) and reads only what the ``OutputLayer`` contract declares (whether the head
trains the exact likelihood, its FLOPs per token, its sparse parameters and learning-rate groups). Outputs
in the run directory (their names: ``io/paths.py``):
  model.pt      best-validation weights (``training.keep: best``) or the last epoch's (``last``; then
                model-best.pt holds the best-validation ones), with the run config that made them
  history.csv   one row per epoch, rewritten atomically after every epoch
  train.json    training summary (tokens/s, peak memory, wall time, parameters, config hash)
  checkpoint.pt resume state while training runs (deleted when the run completes): weights,
                optimizer, RNG states, LSTM state, position in the epoch, best weights so far

Divergence (``training/guard.py``): a non-finite training loss or a validation perplexity worse than
uniform ends the run as ``diverged``: the checkpoint is removed so no rerun resumes into the same state;
a tuning trial records it (``status: diverged`` in train.json), a final run raises ``Diverged``.

The parts (``training/``): the run's state, one step, checkpoints, the divergence guard, an epoch and its
end with the schedule, NT-ASGD averaging and finetuning as hooks. This file is the loop that joins them.

Preemption: SIGTERM or SIGINT makes the loop write a checkpoint after the current step and raise
``Stopped``; SIGKILL loses at most ``checkpoint_every_steps`` steps (or the current epoch). Either way
the next call resumes and ends bitwise identical to an uninterrupted run on CPU.
"""
from __future__ import annotations

import math
from pathlib import Path

import torch

from ..config import run_hash, train_hash
from ..io import paths
from ..io.atomic import exclusive, write_json
from ..io.digests import seal
from ..io.runtime import StopRequest
from . import checkpoints
from .epoch import end_epoch, finish, finished, train_epoch
from .start import setup
from .guard import Diverged


def finetune_config(run_cfg: dict) -> dict:
    """The finetuning run of a trained run, as AWD-LSTM's and MoS's finetune.py do it: from the trained
    run's kept weights, up to ``finetune_epochs`` epochs at a constant ``finetune_lr`` (default: lr), the weights
    averaged from the first step (their ``ASGD(t0=0, lambd=0)``) and validated with that mean after each
    epoch; it ends when validation stops improving (the nonmono rule) and keeps the best mean, which
    replaces the trained weights only where its validation is better (it starts as the best)."""
    tc = run_cfg["training"]
    lr = tc.get("finetune_lr") or tc["lr"]
    return {**run_cfg, "training": {**tc, "epochs": tc["finetune_epochs"], "lr": lr, "schedule": "nt-asgd",
                                    "keep": "best"}, "finetune_of": train_hash(run_cfg)}


def train(run_cfg: dict, prepared: Path, out_dir: Path, device: torch.device,
          stop_after_steps: int | None = None, trial: bool = False, init: Path | None = None) -> dict | None:
    """Train one (dataset, method) run into ``out_dir``; resume from ``checkpoint.pt`` if present.

    ``stop_after_steps`` simulates an interruption (tests): return None after that many
    optimizer steps in this call, leaving only the checkpoint behind. A SIGTERM / SIGINT received
    meanwhile raises ``Stopped`` once the checkpoint is written. ``trial``: a tuning trial, which
    writes no model.pt and records a divergence in train.json instead of raising ``Diverged``. ``init``:
    the trained run's model.pt that a finetuning run (``finetune_config``) starts from.
    """
    stop = StopRequest()
    with exclusive(out_dir, "train"), stop.installed():
        try:
            return _train(run_cfg, prepared, out_dir, device, stop_after_steps, stop, trial, init)
        except Diverged as e:
            checkpoints.remove(out_dir)  # a rerun must not resume into the blow-up
            if not trial:  # the line names the method's own rate options too (PLIF's lr_scale), where set
                m = run_cfg["method"]
                rates = {f"methods.{run_cfg['method_name']}.{k}": v for k, v in sorted(m.items())
                         if "lr" in k.split("_") and isinstance(v, (int, float)) and v != 1}
                raise Diverged({**e.info, "rate_options": rates}) from None
            summary = {"status": "diverged", "diverged": e.info, "config": run_cfg, "config_hash": run_hash(run_cfg),
                       "seed": run_cfg["seed"], "best_valid_nll": math.inf, **e.info.get("cost", {})}
            write_json(out_dir / paths.TRAIN_RECORD, seal(summary))
            return summary


def _train(run_cfg: dict, prepared: Path, out_dir: Path, device: torch.device, stop_after_steps: int | None,
           stop: StopRequest, trial: bool, init: Path | None = None) -> dict | None:
    """The loop: epochs of steps until the stopping rule says done; each epoch ends with validation, the
    hooks and a checkpoint. None when ``stop_after_steps`` paused it (a checkpoint holds the run)."""
    run = setup(run_cfg, prepared, out_dir, device, init)
    steps = 0

    def should_pause() -> bool:  # called once after every step
        nonlocal steps
        steps += 1
        return stop_after_steps is not None and steps >= stop_after_steps

    while not finished(run):
        if not train_epoch(run, stop, should_pause):
            return None
        if run.rewound:  # a ladder's branch ended: the trunk was restored mid-epoch and goes on from there
            run.rewound = False
            continue
        end_epoch(run, stop)
    return finish(run, trial)
