"""One epoch of a run's steps, the end of an epoch, the summary (the run itself, set up or resumed: start.py).

Hooks at the end of an epoch: the learning-rate schedule (``schedules.py``), NT-ASGD's averaging switch,
and finetuning's stop (the nonmono rule on the averaged weights' validation)."""
from __future__ import annotations

import csv
import io
import sys

import numpy as np
import torch
from tqdm import tqdm

from ..config import run_hash
from ..data.batching import num_segments, segments, variable_lengths, variable_segments
from ..io import paths
from ..io.atomic import write_json, write_text
from ..io.digests import seal
from ..io.errors import Diverged, ResumeError, Stopped
from . import checkpoints
from .budget import anytime_point, snapshot_point, step_clock, token_point
from .guard import CHECK_EVERY, LossGuard, check_validation, collapse, safe_exp
from .ladder import branch, branches_cost, ladder_step
from .schedules import STEP_SCHEDULES, asgd_switch, next_lr, nt_asgd_trigger, step_lr
from .start import Run
from .step import train_step

HISTORY_FIELDS = ["epoch", "lr", "train_loss", "valid_nll", "valid_ppl", "train_tokens_per_s", "epoch_time_s",
                  "wall_time_s", "best"]


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
    while (epochs := run.budget.epochs_due(st, run.epoch_targets)) is not None:
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
