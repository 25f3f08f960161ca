"""A run set up or resumed (:class:`Run`), one epoch of steps, the end of an epoch, the summary.

Hooks at the end of an epoch: the learning-rate schedule (``schedules.py``), NT-ASGD's averaging switch,
and finetuning's stop (the nonmono rule on the averaged weights' validation)."""
from __future__ import annotations

import csv
import io
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from ..config import TrainConfig, run_hash, train_hash, training_settings
from ..data.batching import batchify, num_segments, segments, variable_lengths, variable_segments
from ..data.prepare import load_split, unigram_nll
from ..data.streaming import stream_log_probs
from ..io import paths
from ..io.atomic import write_json, write_text
from ..io.digests import seal
from ..io.errors import Diverged, ResumeError, Stopped
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
from .budget import Budget, anytime_point, same_machine, snapshot_point, step_clock, token_point
from .guard import CHECK_EVERY, LossGuard, check_validation, collapse, safe_exp
from .ladder import Ladder, branch, branches_cost, ladder_step
from .optim import build_optimizer
from .schedules import STEP_SCHEDULES, asgd_switch, lr_at, next_lr, nt_asgd_trigger, step_lr
from .state import RunState
from .step import build_model, check_precision, train_step

HISTORY_FIELDS = ["epoch", "lr", "train_loss", "valid_nll", "valid_ppl", "train_tokens_per_s", "epoch_time_s",
                  "wall_time_s", "best"]


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
    most = tc.epochs * run.train_data.numel()  # tokens: every training token once an epoch, at most
    late = [e for e in tc.anytime_epochs if e > tc.epochs]
    if late:
        raise ConfigError(f"key 'training.anytime_epochs': epoch {late[0]:g} lies past training.epochs "
                          f"({tc.epochs}), so no validation would be made there; raise training.epochs or drop it")
    far = [(m, t) for m, t in tc.snapshots if t > most]
    if far:
        raise ConfigError(f"key 'training.budget_points': the point {far[0][0]:g}x ({far[0][1]:,} tokens) lies past "
                          f"what training.epochs allows ({tc.epochs} epochs of {run.train_data.numel():,} tokens: at "
                          f"most {most:,}); raise training.epochs or drop the point")
    if run.ladder is not None and run.ladder.top > most:
        raise ConfigError(f"key 'training.epochs': {tc.epochs} epochs ({run.train_data.numel():,} tokens each, at "
                          f"most {most:,}) end before the ladder's rung {run.ladder.top:,} (training.ladder); raise "
                          f"training.epochs (it is only a bound under a ladder) or drop the rungs it cannot reach")


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


def finished(run: Run) -> bool:
    """The stopping rule: every epoch trained, the budget spent, or finetuning ended by its nonmono rule."""
    return run.st.epoch >= run.tc.epochs or run.st.budget_spent or run.st.finetune_stopped_at is not None


def _epoch_batches(run: Run, start: int | None = None):
    """This epoch's number of steps and its (k, x, y) segments from step ``start`` on (default: the current
    position)."""
    tc, st = run.tc, run.st
    start = st.step_in_epoch if start is None else start
    if tc.variable_bptt:  # the epoch's lengths are fixed by (seed, epoch): a resumed run cuts them alike
        cap = tc.bptt + tc.bptt_max_delta if tc.bptt_max_delta is not None else None
        lengths = variable_lengths(run.train_data.shape[0], tc.bptt, run.cfg["seed"], st.epoch, cap)
        return (min(len(lengths), tc.max_steps_per_epoch or len(lengths)),
                variable_segments(run.train_data, lengths, start=start))
    n_seg = num_segments(run.train_data, tc.bptt)
    return (min(n_seg, tc.max_steps_per_epoch or n_seg), segments(run.train_data, tc.bptt, start=start))


def _plan_epoch(run: Run, epoch_steps: int) -> None:
    """Hand a head that plans its epochs this epoch's targets from its first step, and where training is."""
    _, every = _epoch_batches(run, start=0)
    run.model.head.plan_epoch([y for k, _, y in every if k < epoch_steps], run.st.step_in_epoch)


def _start_epoch(run: Run) -> None:
    for g in run.optimizer.param_groups:
        g["lr"] = run.st.lr * g["lr_mult"]
    if run.st.step_in_epoch == 0:
        if not run.tc.carry_state:  # else the state flows on from the previous epoch's last segment
            run.hidden = run.model.init_state(run.tc.batch_size, run.device)
        run.st.loss_sum, run.st.loss_count = 0.0, 0
        run.st.epoch_train_time_s, run.st.epoch_tokens = 0.0, 0


def train_epoch(run: Run, stop, should_pause) -> bool:
    """Steps from the current position to the epoch's end; False when ``should_pause()`` (a test's
    interruption) or a signal (``stop``) ended it early after a checkpoint (a signal then raises)."""
    run.model.train()
    _start_epoch(run)
    st, tc = run.st, run.tc
    guard = LossGuard(st, run.device)
    epoch_steps, batches = _epoch_batches(run)
    if run.model.head.plans_epochs:
        _plan_epoch(run, epoch_steps)
    bar = _progress(run, epoch_steps)
    clock = step_clock(tc, run.device)
    for k, x, y in batches:
        if k >= epoch_steps:
            break
        t0 = clock()
        if tc.schedule in STEP_SCHEDULES:  # the rate of this step, from the tokens seen (schedules.step_lr)
            st.lr = step_lr(tc, st.tokens, y.numel(), branch(st))
            for g in run.optimizer.param_groups:
                g["lr"] = st.lr * g["lr_mult"]
        if tc.variable_bptt:  # a shorter segment takes a proportionally smaller step (Merity et al.)
            for g in run.optimizer.param_groups:
                g["lr"] = st.lr * g["lr_mult"] * x.shape[0] / tc.bptt
        loss, run.hidden = train_step(run.model, run.optimizer, x, y, run.hidden, tc)
        if run.average.active:
            run.average.update(run.model)
        st.epoch_train_time_s += clock() - t0
        st.epoch_tokens += y.numel()
        guard.add(loss, y.numel())
        st.step_in_epoch = k + 1
        st.steps += 1
        bar.update(1 if run.budget is None else min(100, int(100 * run.budget.used(st))) - bar.n)
        if run.budget is not None and _budget_step(run, guard, bar):
            break
        if st.step_in_epoch % CHECK_EVERY == 0:
            _check(guard, bar, run)
        if tc.checkpoint_every_steps and st.step_in_epoch % tc.checkpoint_every_steps == 0:
            _check(guard, bar, run)
            run.checkpoint()
        if stop or should_pause():
            _check(guard, bar, run)
            run.checkpoint()
            bar.close()
            if stop:
                raise Stopped(stop.signum, f"epoch {st.epoch + 1}, step {st.step_in_epoch}",
                              run.out_dir / checkpoints.CHECKPOINT)
            return False
    _check(guard, bar, run)
    bar.close()
    return True


def _progress(run: Run, epoch_steps: int):
    """The console's progress bar: the epoch's steps, or under a budget the share of the budget spent (a budgeted
    run's epochs are only a bound: "epoch 1/100" said nothing of how far it was)."""
    st, tc = run.st, run.tc
    common = dict(file=sys.stderr, mininterval=1.0 if sys.stderr.isatty() else 30.0, leave=False)
    if run.budget is None:
        return tqdm(total=epoch_steps, initial=st.step_in_epoch, desc=f"epoch {st.epoch + 1}/{tc.epochs}", **common)
    b = run.budget
    what = f"{b.seconds:g} s of training" if b.seconds is not None else f"{b.tokens:,} tokens"
    return tqdm(total=100, initial=min(100, int(100 * b.used(st))), unit="%", desc=f"budget of {what}", **common)


def _budget_step(run: Run, guard: LossGuard, bar) -> bool:
    """After a step under a budget: validate at each fraction it reaches; True once it is spent."""
    st = run.st
    if run.ladder is not None and st.branch is not None:  # a cooldown branch: ends at its rung, no trunk validation
        how = ladder_step(run, lambda: _check(guard, bar, run))
        run.rewound = how == "rewound"
        st.budget_spent = how == "spent"
        return how is not None
    while run.budget.due(st):
        _check(guard, bar, run)
        p = anytime_point(st, run.budget, run.validate)
        print(f"anytime {p['point']}/{run.budget.points}: {p['train_seconds']:.1f} s, {p['tokens']:,} tokens, "
              f"valid ppl {p['valid_ppl']:.2f}", file=sys.stderr)
    epoch_tokens = (run.train_data.shape[0] - 1) * run.train_data.shape[1]  # the tokens one epoch scores
    while (epochs := run.budget.epochs_due(st, epoch_tokens)) is not None:
        _check(guard, bar, run)
        p = token_point(st, epochs, run.validate)
        print(f"equal data, {epochs:g} epochs: {p['tokens']:,} tokens, valid ppl {p['valid_ppl']:.2f}",
              file=sys.stderr)
    while (due := run.budget.snapshot_due(st)) is not None:
        _check(guard, bar, run)
        multiple, _ = due
        path = paths.snapshot_path(run.out_dir, multiple)
        checkpoints.save(path, {"config": run.cfg, "config_hash": run_hash(run.cfg), "model": run.weights(),
                                "multiple": multiple, "tokens": st.tokens, "steps": st.steps})
        p = snapshot_point(st, multiple, path, run.validate)
        print(f"budget point {multiple:g}x: {p['tokens']:,} tokens, weights kept in {path.name}, "
              f"valid ppl {p['valid_ppl']:.2f}", file=sys.stderr)
    if run.ladder is not None:  # the trunk's validations first, so the fork (and a run to that rung alone) has them
        ladder_step(run, lambda: _check(guard, bar, run))
    st.budget_spent = run.budget.spent(st)
    return st.budget_spent


def _check(guard: LossGuard, bar, run: Run) -> None:
    try:
        guard.check(run.st.step_in_epoch, run.cost)
    except Diverged:
        bar.close()  # the bar's line is cleared, so the divergence is one line of its own
        raise
    bar.set_postfix(loss=f"{guard.mean:.3f}", lr=run.st.lr, refresh=False)


def end_epoch(run: Run, stop) -> None:
    """Validate, record the epoch, keep the best weights, run the hooks (finetuning's stop, NT-ASGD's
    switch), set the next learning rate, checkpoint; a signal received meanwhile then raises ``Stopped``."""
    st, tc = run.st, run.tc
    valid_nll = run.validate()
    check_validation(st, valid_nll, run.model.head.vocab_size, run.model.head.trains_exact_likelihood, run.cost)
    improved = valid_nll < st.best_valid_nll
    _record(run, valid_nll, improved)
    if st.epoch == 0 and not run.finetune and (flag := collapse(valid_nll, run.unigram_nll, bool(st.budget_spent))):
        st.collapsed = flag
        print(f"warning: {flag['message']}", file=sys.stderr)
    if improved:
        st.best_valid_nll = valid_nll
        run.best_model = {"model": run.weights(), "epoch": st.epoch + 1, "valid_nll": valid_nll}
    previous = [r["valid_nll"] for r in st.history[:-1]]
    if run.finetune and nt_asgd_trigger(previous, valid_nll, tc.nonmono):
        st.finetune_stopped_at = st.epoch + 1  # finetune.py's "Done!": validation stopped improving
    if tc.schedule == "nt-asgd" and not run.average.active and asgd_switch(tc, st.epoch + 1, previous, valid_nll):
        _start_averaging(run)
    st.lr = next_lr(tc, st.epoch + 1, st.lr, improved)
    st.epoch += 1
    st.step_in_epoch = 0
    write_text(run.out_dir / paths.HISTORY, _history_csv(st.history))
    run.checkpoint()
    if stop:
        raise Stopped(stop.signum, f"the end of epoch {st.epoch}", run.out_dir / checkpoints.CHECKPOINT)


def _record(run: Run, valid_nll: float, improved: bool) -> None:
    """The epoch's row of history.csv and its line in the log; its time and tokens join the totals."""
    st = run.st
    st.train_time_s += st.epoch_train_time_s
    st.train_tokens += st.epoch_tokens
    st.history.append({
        "epoch": st.epoch + 1, "lr": st.lr, "train_loss": st.loss_sum / max(st.loss_count, 1),
        "valid_nll": valid_nll, "valid_ppl": safe_exp(valid_nll),
        "train_tokens_per_s": st.epoch_tokens / max(st.epoch_train_time_s, 1e-9),
        "epoch_time_s": st.epoch_train_time_s, "wall_time_s": run.wall(), "best": improved})
    row = st.history[-1]
    print(f"epoch {row['epoch']:3d} | lr {row['lr']:.4g} | train loss {row['train_loss']:.4f} | "
          f"valid ppl {row['valid_ppl']:.2f} | {row['train_tokens_per_s']:.0f} tok/s", file=sys.stderr)
    st.epoch_train_time_s, st.epoch_tokens = 0.0, 0  # now counted in the totals


def _start_averaging(run: Run) -> None:
    run.average.start(run.model)
    run.st.averaging_from_epoch = run.st.epoch + 2
    why = (f"epoch {run.tc.asgd_start_epoch} reached" if run.tc.asgd_start_epoch is not None
           else "validation stopped improving")
    print(f"nt-asgd: {why}; averaging the weights from epoch {run.st.averaging_from_epoch} on", file=sys.stderr)


def _history_csv(rows: list[dict]) -> str:
    return _csv(rows, HISTORY_FIELDS)


def _csv(rows: list[dict], fields: list[str] | None = None) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields or list(rows[0]), lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def _check_ladder_done(run: Run) -> None:
    """Every rung has its model, or the run ended (its epochs) before the ladder did: one line naming the key."""
    from ..config import ConfigError

    done = {p.get("rung") for p in run.st.snapshots}
    missing = [r for r in run.ladder.rungs if r not in done]
    if missing:
        raise ConfigError(f"key 'training.epochs': {run.tc.epochs} epochs ({run.st.tokens:,} tokens) end before the "
                          f"ladder's rung {missing[0]:,} (training.ladder); raise training.epochs (it is only a "
                          f"bound under a ladder) or drop the rungs it cannot reach")


def finish(run: Run, trial: bool) -> dict:
    """The summary (train.json) and, unless a tuning trial, model.pt (and model-best.pt under keep: last);
    the checkpoints go."""
    st, tc, cfg = run.st, run.tc, run.cfg
    chash = run_hash(cfg)
    summary = {
        "status": "ok", "config": cfg, "config_hash": chash, "seed": cfg["seed"], "device": str(run.device),
        "torch": torch.__version__, "threads": torch.get_num_threads(), **run.cost(), "wall_time_s": st.wall_time_s,
        "epochs": tc.epochs, "best_epoch": int(np.argmin([r["valid_nll"] for r in st.history]) + 1),
        "best_valid_nll": st.best_valid_nll, "last_valid_nll": st.history[-1]["valid_nll"], "kept": tc.keep,
        **({"averaging_from_epoch": st.averaging_from_epoch} if st.averaging_from_epoch is not None else {}),
        "unigram_valid_ppl": safe_exp(run.unigram_nll),  # the collapse line, on the same validation tokens
        **({"collapsed": st.collapsed} if st.collapsed else {}),
        **({"budget": {**run.budget.describe(), "spent": st.budget_spent,
                       "reached": {"seconds": st.seconds, "tokens": st.tokens, "steps": st.steps},
                       "validation_s": st.validation_s, "anytime": st.anytime,
                       **({"token_points": st.token_points} if st.token_points else {}),
                       **({"snapshots": st.snapshots} if st.snapshots else {})}} if run.budget else {}),
    }
    if run.ladder is not None:
        _check_ladder_done(run)
        summary["ladder"] = {**run.ladder.describe(), "branches": branches_cost(st, run.ladder)}
    if run.finetune:  # epoch 0 = no finetuning epoch validated better than the trained weights
        summary.update(best_epoch=run.best_model["epoch"], start_valid_nll=st.start_valid_nll,
                       finetune_stopped_at=st.finetune_stopped_at)
    # every output is written again from the state (a rerun after a failed write, e.g. a full disk, may find
    # history.csv deleted by Snakemake as the failed job's output) and checked before the checkpoints go: the
    # checkpoint is the training, and it is removed only once every output of the run is in place
    outputs = [run.out_dir / paths.HISTORY, run.out_dir / paths.TRAIN_RECORD]
    write_text(run.out_dir / paths.HISTORY, _history_csv(st.history))
    if not trial:
        best = run.best_model
        outputs.append(run.out_dir / paths.MODEL)
        if tc.keep == "last":  # the paper's protocol tests the last epoch; the best one is kept beside it
            last = st.history[-1]
            checkpoints.save(run.out_dir / paths.BEST_MODEL, {"config": cfg, "config_hash": chash, **best})
            outputs.append(run.out_dir / paths.BEST_MODEL)
            best = {"model": run.weights(), "epoch": last["epoch"], "valid_nll": last["valid_nll"]}
        checkpoints.save(run.out_dir / paths.MODEL, {"config": cfg, "config_hash": chash, **best})
    if st.anytime:
        write_text(run.out_dir / paths.ANYTIME, _csv(st.anytime))
        outputs.append(run.out_dir / paths.ANYTIME)
    write_json(run.out_dir / paths.TRAIN_RECORD, seal(summary))
    missing = [p.name for p in outputs if not p.is_file() or p.stat().st_size == 0]
    if missing:  # never seen without an exception above; if it were, the checkpoint stays for a rerun
        raise ResumeError(f"{run.out_dir}: {', '.join(missing)} not written; the checkpoint is kept: rerun to "
                          f"complete the run from it")
    checkpoints.remove(run.out_dir)
    return summary
