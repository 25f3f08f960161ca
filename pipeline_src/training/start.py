"""The start of one call of ``train``: the :class:`Run` it works on (config, model, optimizer, data on the device,
state), set up from the seed, resumed from a checkpoint, or started from a trained model (finetuning); and the
points the run would end before, refused before its first step."""
from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..config import TrainConfig, run_hash, train_hash, training_settings
from ..data.batching import batchify
from ..data.prepare import load_split, unigram_nll
from ..data.streaming import stream_log_probs
from ..io import paths
from ..io.errors import ResumeError
from ..io.runtime import (
    environment,
    gemm_gflops,
    kernels,
    load_average,
    peak_memory_mb,
    reset_peak_memory,
    rng_state,
    seed_everything,
    set_rng_state,
)
from . import checkpoints
from .averaging import ParameterAverage
from .budget import Budget, same_machine, step_clock
from .ladder import Ladder
from .optim import build_optimizer
from .schedules import lr_at
from .state import RunState
from .step import build_model, check_precision


@dataclass
class Run:
    """Everything one call of ``train`` works on: the config, the model and its optimizer, the data on the
    device, the mutable state, the weights kept so far, and the clock of this call."""
    cfg: dict
    tc: TrainConfig
    out_dir: Path
    device: torch.device
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    train_data: torch.Tensor  # (T, batch_size)
    valid_data: torch.Tensor  # (T, eval_batch_size)
    st: RunState
    hidden: tuple
    average: ParameterAverage  # nt-asgd: the mean of the weights once triggered
    best_model: dict | None  # best-validation weights so far (CPU copies); model.pt is written from them
    unigram_nll: float = math.inf  # the add-one unigram model's nll on the validation tokens (the collapse line)
    budget: Budget | None = None  # training.budget_seconds / budget_tokens (budget.py)
    t_call: float = 0.0  # this call's start (perf_counter) and the wall time before it
    wall0: float = 0.0
    env_start: float | None = None
    gflops: float | None = None  # the machine's speed at this call's start (time budgets: runtime.gemm_gflops)
    ladder: Ladder | None = None  # schedule wsd: the rungs and their cooldown branches (ladder.py)
    rewound: bool = False  # a branch just ended and the trunk was restored mid-epoch: the epoch goes on from there

    @property
    def finetune(self) -> bool:
        return "finetune_of" in self.cfg

    def wall(self) -> float:
        return self.wall0 + time.perf_counter() - self.t_call

    def weights(self) -> dict:
        """CPU copies of the weights to keep: the averaged ones once nt-asgd averages."""
        with self.average.applied(self.model):
            return {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}

    def cost(self) -> dict:
        """What the run cost so far, and the setup that makes its timings comparable."""
        head = self.model.head
        return {"params": self.model.num_params(), "train_tokens": self.st.tokens, "train_time_s": self.st.seconds,
                "tokens_per_s_train": self.st.tokens / max(self.st.seconds, 1e-9), "wall_time_s": self.wall(),
                "peak_mem_mb_train": peak_memory_mb(self.device),
                "head_flops_per_token_train": head.flops_per_token(train=True),
                "head_flops_per_token_eval": head.flops_per_token(train=False),
                "environment": {**environment(self.device, self.env_start, self.gflops),
                                **({"calls": self.st.machines} if self.st.machines else {})}}

    def validate(self) -> float:
        """Exact validation nll (the averaged weights once nt-asgd averages)."""
        with self.average.applied(self.model):
            lp, _ = stream_log_probs(self.model, self.valid_data, self.tc.bptt)
        return float(-lp.double().mean())

    def state_dict(self) -> dict:
        """Everything training resumes from: weights, optimizer, state, LSTM state, RNG states, best weights."""
        self.st.wall_time_s = self.wall()
        return {"config": self.cfg, "config_hash": run_hash(self.cfg), "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(), "state": self.st.to_dict(), "hidden": self.hidden,
                "rng": rng_state(), "best_model": self.best_model,
                **({"average": self.average.state_dict()} if self.average.active else {})}

    @property
    def epoch_targets(self) -> int:
        """The targets one whole pass over the training split scores: (rows - 1) x batch."""
        return (self.train_data.shape[0] - 1) * self.train_data.shape[1]

    def load_state(self, ck: dict) -> None:
        """Training as :meth:`state_dict` saved it (a checkpoint, or a ladder's fork)."""
        self.model.load_state_dict(ck["model"])
        self.optimizer.load_state_dict(ck["optimizer"])
        self.st = RunState.from_dict(ck["state"])
        self.hidden = tuple(h.to(self.device) for h in ck["hidden"])
        set_rng_state(ck["rng"])
        self.best_model = ck["best_model"]
        self.average.load_state_dict(ck.get("average"), self.device)

    def checkpoint(self) -> None:
        checkpoints.save_generation(self.out_dir, self.state_dict())


def setup(cfg: dict, prepared: Path, out_dir: Path, device: torch.device, init: Path | None) -> Run:
    """The run's model, optimizer and data, from its checkpoint when there is one (else from ``init``'s
    trained weights for a finetuning run, else from the seed)."""
    tc = training_settings(cfg)
    step_clock(tc, device)  # a clock that cannot time this device is refused before any work
    check_precision(tc, device)  # as is bf16 on a CPU without AVX-512
    out_dir.mkdir(parents=True, exist_ok=True)
    seed_everything(cfg["seed"])
    model = build_model(cfg, prepared).to(device)
    optimizer = build_optimizer(model, tc)
    # whole splits live on the device: no host-to-device copy, no loader between the GPU and its batches
    train_data = batchify(load_split(prepared, "train"), tc.batch_size, device)
    valid_data = batchify(load_split(prepared, "valid")[:tc.valid_tokens], tc.eval_batch_size, device)
    first_lr = lr_at(tc, 1) if tc.schedule == "fixed-then-geometric" else tc.lr  # (step schedules: set every step)
    run = Run(cfg, tc, out_dir, device, model, optimizer, train_data, valid_data, RunState(lr=first_lr),
              model.init_state(tc.batch_size, device), ParameterAverage(), None,
              unigram_nll(np.load(prepared / paths.NOISE)["counts"], valid_data.cpu().numpy()), Budget.of(tc),
              ladder=Ladder.of(tc))
    if not run.finetune:  # finetuning's epochs are training.finetune_epochs, its points the trained run's
        _check_reachable(run)
    if not _resume(run) and run.finetune:
        _start_finetuning(run, init)
    run.env_start = load_average()
    if tc.budget_seconds is not None:  # a time budget's tokens depend on the machine: one machine a run
        run.gflops = gemm_gflops(step_clock(tc, device)) if device.type == "cpu" else None
        same_machine(run.st, kernels(device), run.gflops, str(out_dir))
    reset_peak_memory(device)
    run.t_call, run.wall0 = time.perf_counter(), run.st.wall_time_s
    return run


def _check_reachable(run: Run) -> None:
    """Refuse, before the first step, a point the run would end before: a budget point, a ladder's top rung
    (its tokens past ``training.epochs`` full passes over the training split) or an ``anytime_epochs`` value past
    ``training.epochs``. Such a point was dropped without a word (budget points, anytime epochs) or refused only
    once the run had trained (the ladder). An anytime epoch past a method's own token budget is not refused: the
    points at equal data are read where each method reaches them, and a slow method's frozen budget may end first."""
    from ..config import ConfigError

    tc = run.tc
    most = _reachable_tokens(run)  # the tokens training.epochs can score, at most
    per_epoch = f"{most // tc.epochs:,}" if not (tc.variable_bptt and tc.max_steps_per_epoch) else \
        f"about {most // tc.epochs:,}"
    late = [e for e in tc.anytime_epochs if e > tc.epochs]
    if late:
        raise ConfigError(f"key 'training.anytime_epochs': epoch {late[0]:g} lies past training.epochs "
                          f"({tc.epochs}), so no validation would be made there; raise training.epochs or drop it")
    full = run.epoch_targets  # an anytime epoch's tokens: a whole pass
    cut = [e for e in tc.anytime_epochs if e * full > most]
    if cut:
        raise ConfigError(f"key 'training.anytime_epochs': epoch {cut[0]:g} ({cut[0] * full:,.0f} tokens, whole passes "
                          f"over the split) lies past what training.max_steps_per_epoch ({tc.max_steps_per_epoch}) "
                          f"lets {tc.epochs} epochs score (at most {most:,}); drop it or lift the cut")
    far = [(m, t) for m, t in tc.snapshots if t > most]
    if far:
        raise ConfigError(f"key 'training.budget_points': the point {far[0][0]:g}x ({far[0][1]:,} tokens) lies past "
                          f"what training.epochs allows ({tc.epochs} epochs of {per_epoch} tokens: at "
                          f"most {most:,}); raise training.epochs or drop the point")
    if run.ladder is not None and run.ladder.top > most:
        raise ConfigError(f"key 'training.epochs': {tc.epochs} epochs ({per_epoch} tokens each, at "
                          f"most {most:,}) end before the ladder's rung {run.ladder.top:,} (training.ladder); raise "
                          f"training.epochs (it is only a bound under a ladder) or drop the rungs it cannot reach")


def _reachable_tokens(run: Run) -> int:
    """The targets ``training.epochs`` epochs score: each (rows - 1) x batch (the last row predicts nothing),
    cut by ``max_steps_per_epoch`` to that many segments (of ``bptt`` rows, or with variable-length BPTT the
    epoch's own lengths, fixed by (seed, epoch) as the epoch draws them)."""
    tc = run.tc
    rows, batch = run.train_data.shape[0], run.train_data.shape[1]  # train_data (rows, B)
    if not tc.max_steps_per_epoch:
        return tc.epochs * run.epoch_targets
    if not tc.variable_bptt:
        return tc.epochs * min(rows - 1, tc.max_steps_per_epoch * tc.bptt) * batch
    from ..data.batching import variable_lengths

    cap = tc.bptt + tc.bptt_max_delta if tc.bptt_max_delta is not None else None
    return batch * sum(sum(variable_lengths(rows, tc.bptt, run.cfg["seed"], e, cap)[:tc.max_steps_per_epoch])
                       for e in range(tc.epochs))


def _resume(run: Run) -> bool:
    ck = checkpoints.load_newest(run.out_dir, run.device)
    if ck is None:
        return False
    if train_hash(ck["config"]) != train_hash(run.cfg):  # how often it checkpoints may change meanwhile
        old = [run.out_dir / n for n in (checkpoints.CHECKPOINT, checkpoints.PREVIOUS, paths.FORK)
               if (run.out_dir / n).exists()]  # every generation at once: the next would be refused alike
        raise ResumeError(
            f"{ck['_path']} was written by a different config (hash {ck['config_hash']}, now "
            f"{run_hash(run.cfg)}); delete {'it' if len(old) == 1 else 'the run checkpoints'} to start this run "
            f"afresh: `rm {' '.join(str(p) for p in old)}`")
    run.load_state(ck)
    print(f"resumed from {ck['_path']}: epoch {run.st.epoch + 1}, step {run.st.step_in_epoch}", file=sys.stderr)
    return True


def _start_finetuning(run: Run, init: Path) -> None:
    """From the trained weights, averaging from the first step; they are the best so far (epoch 0)."""
    from .checkpoints import load_torch

    run.model.load_state_dict(load_torch(init, run.device, "rerun its training")["model"])
    run.average.start(run.model)
    run.st.best_valid_nll = run.st.start_valid_nll = run.validate()
    run.best_model = {"model": {k: v.detach().to("cpu", copy=True) for k, v in run.model.state_dict().items()},
                      "epoch": 0, "valid_nll": run.st.best_valid_nll}
