"""Training loop: truncated BPTT, SGD/Adam, clipping, an LR schedule (schedules.py), checkpoints, resume.

It knows nothing about the output layer: it calls ``model.loss`` and (for validation)
``evaluate.stream_log_probs``. Outputs in the run directory:
  model.pt      best-validation weights (``training.keep: best``) or the last epoch's (``last``; then
                model-best.pt holds the best-validation ones), with the run config that made them
  history.csv   one row per epoch, rewritten atomically after every epoch
  train.json    training summary (tokens/s, peak memory, wall time, parameters, config hash)
  checkpoint.pt resume state while training runs (deleted when the run completes): weights,
                optimizer, RNG states, LSTM state, position in the epoch, best weights so far

Divergence: the training loss is summed on the device and read back every ``CHECK_EVERY`` steps
(no host synchronisation per step); a non-finite sum, or a validation nll above log |V| (worse than
the uniform distribution; 2 log |V| for heads trained by a sampled surrogate, whose exact
distribution is not what they fit), ends the run as ``diverged``: the checkpoint is removed so no
rerun resumes into the same state; a tuning trial records it (``status: diverged`` in train.json),
a final run raises ``Diverged``.

Preemption: SIGTERM or SIGINT makes the loop write a checkpoint after the current step and raise
``Stopped``; SIGKILL loses at most ``checkpoint_every_steps`` steps (or the current epoch). Either way
the next call resumes and ends bitwise identical to an uninterrupted run on CPU.
"""
from __future__ import annotations

import csv
import io
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch.profiler import record_function
from tqdm import tqdm

from .artifacts import read_json
from .atomic import atomic_path, exclusive, write_json, write_text
from .averaging import ParameterAverage
from .batching import batchify, num_segments, segments, variable_lengths, variable_segments
from .config import ModelConfig, TrainConfig, config_hash, train_hash
from .evaluate import stream_log_probs
from .model import LanguageModel
from .optim import build_optimizer, clip_grad_norm
from .prepare import load_split
from .schedules import asgd_switch, lr_at, next_lr, nt_asgd_trigger
from .runtime import (StopRequest, environment, load_average, peak_memory_mb, reset_peak_memory, rng_state,
                      seed_everything, set_rng_state)

HISTORY_FIELDS = ["epoch", "lr", "train_loss", "valid_nll", "valid_ppl", "train_tokens_per_s", "epoch_time_s",
                  "wall_time_s", "best"]


PREVIOUS = "checkpoint.prev.pt"  # the generation before checkpoint.pt
CHECK_EVERY = 25  # steps between reads of the summed training loss (the non-finite check)


class ResumeError(RuntimeError):
    pass


class Diverged(RuntimeError):
    """The run's loss became non-finite or its validation perplexity worse than uniform."""

    def __init__(self, info: dict) -> None:
        super().__init__(f"diverged at epoch {info['epoch']}, steps {info['steps']} (lr {info['lr']:.4g}): "
                         f"{info['reason']}; lower training.lr or set training.clip")
        self.info = info


def safe_exp(x: float) -> float:
    """exp that returns inf instead of raising OverflowError (a diverged run's perplexity)."""
    return math.exp(x) if x < 709.0 else math.inf


class Stopped(RuntimeError):
    """Training stopped by a signal after writing its checkpoint; rerun to resume."""

    def __init__(self, signum: int, where: str, ckpt: Path) -> None:
        super().__init__(f"stopped by signal {signum} at {where}; checkpoint saved to {ckpt}; rerun to resume")
        self.signum = signum


def build_model(run_cfg: dict, prepared: Path) -> LanguageModel:
    meta = read_json(prepared / "meta.json", "vocab_size")
    counts = torch.from_numpy(np.load(prepared / "noise.npz")["counts"])
    return LanguageModel(meta["vocab_size"], ModelConfig(**run_cfg["model"]), run_cfg["method"], counts)


def _save(path: Path, obj: dict) -> None:
    with atomic_path(path) as tmp:
        torch.save(obj, tmp)


def _load_checkpoint(path: Path, device: torch.device) -> dict | None:
    """The newest readable checkpoint: ``checkpoint.pt``, else the previous generation, else None
    (start afresh). An unreadable file is set aside as ``<name>.corrupt`` and the choice is said."""
    from .provenance import UnreadableError, load_torch

    for p in (path, path.with_name(PREVIOUS)):
        if not p.exists():
            continue
        try:
            ck = load_torch(p, device, "")
        except UnreadableError as e:
            bad = p.with_name(p.name + ".corrupt")
            os.replace(p, bad)
            print(f"warning: {str(e).split(': the file')[0]}: set aside as {bad}", file=sys.stderr)
            continue
        ck["_path"] = p
        return ck
    if path.with_name(path.name + ".corrupt").exists() or path.with_name(PREVIOUS + ".corrupt").exists():
        print(f"warning: no readable checkpoint left in {path.parent}: training starts afresh", file=sys.stderr)
    return None


def _history_csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=HISTORY_FIELDS, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def train_step(model: LanguageModel, optimizer, x: torch.Tensor, y: torch.Tensor, hidden: tuple,
               tc: TrainConfig) -> tuple[torch.Tensor, tuple]:
    """One optimizer step on the segment x -> y (T, B), at the learning rates set in ``optimizer``:
    the loss (a detached fp32 scalar, left on the device) and the state to carry. The bench times this
    very function (pipeline_src/stepbench.py); the ``record_function`` labels name its parts there and
    cost nothing without a profiler."""
    hidden = tuple(h.detach() for h in hidden)
    with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=tc.precision == "bf16"):
        loss, hidden = model.loss(x, y, hidden)
    loss = loss.float()
    optimizer.zero_grad(set_to_none=True)
    with record_function("backward"):
        loss.backward()
    if tc.clip:
        with record_function("clip"):
            clip_grad_norm(model.parameters(), tc.clip)
    with record_function("optimizer"):
        optimizer.step()
    return loss.detach(), hidden


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
            (out_dir / "checkpoint.pt").unlink(missing_ok=True)  # a rerun must not resume into the blow-up
            (out_dir / PREVIOUS).unlink(missing_ok=True)
            if not trial:
                raise
            summary = {"status": "diverged", "diverged": e.info, "config": run_cfg, "config_hash": config_hash(run_cfg),
                       "seed": run_cfg["seed"], "best_valid_nll": math.inf, **e.info.get("cost", {})}
            write_json(out_dir / "train.json", summary)
            return summary


def _diverged(st: dict, lr: float, first_step: int, last_step: int, reason: str, cost: dict) -> Diverged:
    return Diverged({"epoch": st["epoch"] + 1, "steps": f"{first_step}-{last_step}", "lr": lr, "reason": reason,
                     "cost": cost})


def _train(run_cfg: dict, prepared: Path, out_dir: Path, device: torch.device, stop_after_steps: int | None,
           stop: StopRequest, trial: bool, init: Path | None = None) -> dict | None:
    tc = TrainConfig(**run_cfg["training"])
    chash = config_hash(run_cfg)
    out_dir.mkdir(parents=True, exist_ok=True)
    ckpt_path = out_dir / "checkpoint.pt"

    seed_everything(run_cfg["seed"])
    model = build_model(run_cfg, prepared).to(device)
    optimizer = build_optimizer(model, tc)
    # whole splits live on the device: no host-to-device copy, no loader between the GPU and its batches
    train_data = batchify(load_split(prepared, "train"), tc.batch_size, device)
    valid_data = batchify(load_split(prepared, "valid"), tc.eval_batch_size, device)
    n_seg = num_segments(train_data, tc.bptt)
    if tc.max_steps_per_epoch:
        n_seg = min(n_seg, tc.max_steps_per_epoch)

    first_lr = lr_at(tc, 1) if tc.schedule == "fixed-then-geometric" else tc.lr
    st = {"epoch": 0, "step_in_epoch": 0, "lr": first_lr, "best_valid_nll": math.inf, "history": [],
          "train_time_s": 0.0, "train_tokens": 0, "wall_time_s": 0.0, "loss_sum": 0.0, "loss_count": 0}
    hidden = model.init_state(tc.batch_size, device)
    best_model = None  # best-validation weights so far (CPU copies); model.pt is written from them at the end
    average = ParameterAverage()  # nt-asgd: the mean of the weights once triggered
    ck = _load_checkpoint(ckpt_path, device)
    if ck is not None:
        if train_hash(ck["config"]) != train_hash(run_cfg):  # how often it checkpoints may change meanwhile
            raise ResumeError(f"{ckpt_path} was written by a different config (hash {ck['config_hash']}, "
                              f"now {chash}); delete it to start this run afresh")
        model.load_state_dict(ck["model"])
        optimizer.load_state_dict(ck["optimizer"])
        st = ck["state"]
        hidden = tuple(h.to(device) for h in ck["hidden"])
        set_rng_state(ck["rng"])
        best_model = ck["best_model"]
        average.load_state_dict(ck.get("average"), device)
        print(f"resumed from {ck['_path']}: epoch {st['epoch'] + 1}, step {st['step_in_epoch']}", file=sys.stderr)

    def checkpoint() -> None:
        if ckpt_path.exists():  # keep one previous generation: a damaged newest one is not the end of the run
            os.replace(ckpt_path, ckpt_path.with_name(PREVIOUS))
        _save(ckpt_path, {"config": run_cfg, "config_hash": chash, "model": model.state_dict(),
                          "optimizer": optimizer.state_dict(), "state": st, "hidden": hidden, "rng": rng_state(),
                          "best_model": best_model, **({"average": average.state_dict()} if average.active else {})})

    def weights() -> dict:
        """CPU copies of the weights to keep: the averaged ones once nt-asgd averages."""
        with average.applied(model):
            return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}

    finetune = "finetune_of" in run_cfg
    if finetune and ck is None:  # start from the trained weights, averaging from the first step
        from .provenance import load_torch

        model.load_state_dict(load_torch(init, device, "rerun its training")["model"])
        average.start(model)
        lp, _ = stream_log_probs(model, valid_data, tc.bptt)
        st["best_valid_nll"] = st["start_valid_nll"] = float(-lp.double().mean())
        best_model = {"model": {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()},
                      "epoch": 0, "valid_nll": st["best_valid_nll"]}  # epoch 0: the trained weights

    vocab_size = model.head.vocab_size
    uniform_nll = math.log(vocab_size)
    nll_limit = uniform_nll if model.head.trains_exact_likelihood else 2 * uniform_nll

    def cost() -> dict:
        """What the run cost so far, and the setup that makes its timings comparable."""
        tokens = st["train_tokens"] + st.get("epoch_tokens", 0)
        seconds = st["train_time_s"] + st.get("epoch_train_time_s", 0.0)
        return {"params": model.num_params(), "train_tokens": tokens, "train_time_s": seconds,
                "tokens_per_s_train": tokens / max(seconds, 1e-9),
                "wall_time_s": wall0 + time.perf_counter() - t_call, "peak_mem_mb_train": peak_memory_mb(device),
                "head_flops_per_token_train": model.head.flops_per_token(train=True),
                "head_flops_per_token_eval": model.head.flops_per_token(train=False),
                "environment": environment(device, env_start)}

    env_start = load_average()
    reset_peak_memory(device)
    t_call = time.perf_counter()
    wall0 = st["wall_time_s"]
    steps_this_call = 0
    while st["epoch"] < tc.epochs and not st.get("finetune_stopped_at"):
        model.train()
        for g in optimizer.param_groups:
            g["lr"] = st["lr"] * g["lr_mult"]
        if st["step_in_epoch"] == 0:
            if not tc.carry_state:  # else the state flows on from the previous epoch's last segment
                hidden = model.init_state(tc.batch_size, device)
            st["loss_sum"], st["loss_count"] = 0.0, 0
            st["epoch_train_time_s"], st["epoch_tokens"] = 0.0, 0
        # the epoch's summed loss lives on the device; read back every CHECK_EVERY steps
        loss_acc = torch.tensor(st["loss_sum"], dtype=torch.float64, device=device)
        checked = st["step_in_epoch"]

        def check_loss(last: int) -> None:
            nonlocal checked
            st["loss_sum"] = float(loss_acc)
            if not math.isfinite(st["loss_sum"]):
                raise _diverged(st, st["lr"], checked + 1, last, "non-finite training loss", cost())
            checked = last
            bar.set_postfix(loss=f"{st['loss_sum'] / max(st['loss_count'], 1):.3f}", lr=st["lr"], refresh=False)
        if tc.variable_bptt:  # the epoch's lengths are fixed by (seed, epoch): a resumed run cuts them alike
            cap = tc.bptt + tc.bptt_max_delta if tc.bptt_max_delta is not None else None
            lengths = variable_lengths(train_data.shape[0], tc.bptt, run_cfg["seed"], st["epoch"], cap)
            epoch_steps = min(len(lengths), tc.max_steps_per_epoch or len(lengths))
            batches = variable_segments(train_data, lengths, start=st["step_in_epoch"])
        else:
            epoch_steps, batches = n_seg, segments(train_data, tc.bptt, start=st["step_in_epoch"])
        bar = tqdm(total=epoch_steps, initial=st["step_in_epoch"], desc=f"epoch {st['epoch'] + 1}/{tc.epochs}",
                   file=sys.stderr, mininterval=1.0 if sys.stderr.isatty() else 30.0, leave=False)
        for k, x, y in batches:
            if k >= epoch_steps:
                break
            t0 = time.perf_counter()
            if tc.variable_bptt:  # a shorter segment takes a proportionally smaller step (Merity et al.)
                for g in optimizer.param_groups:
                    g["lr"] = st["lr"] * g["lr_mult"] * x.shape[0] / tc.bptt
            loss, hidden = train_step(model, optimizer, x, y, hidden, tc)
            if average.active:
                average.update(model)
            dt = time.perf_counter() - t0
            st["epoch_train_time_s"] += dt
            st["epoch_tokens"] += y.numel()
            loss_acc += loss.double() * y.numel()
            st["loss_count"] += y.numel()
            st["step_in_epoch"] = k + 1
            bar.update(1)
            steps_this_call += 1
            if st["step_in_epoch"] % CHECK_EVERY == 0:
                check_loss(st["step_in_epoch"])
            if tc.checkpoint_every_steps and st["step_in_epoch"] % tc.checkpoint_every_steps == 0:
                check_loss(st["step_in_epoch"])
                st["wall_time_s"] = wall0 + time.perf_counter() - t_call
                checkpoint()
            if stop or (stop_after_steps is not None and steps_this_call >= stop_after_steps):
                check_loss(st["step_in_epoch"])
                st["wall_time_s"] = wall0 + time.perf_counter() - t_call
                checkpoint()
                bar.close()
                if stop:
                    raise Stopped(stop.signum, f"epoch {st['epoch'] + 1}, step {st['step_in_epoch']}", ckpt_path)
                return None
        check_loss(st["step_in_epoch"])
        bar.close()

        with average.applied(model):
            lp, _ = stream_log_probs(model, valid_data, tc.bptt)
        valid_nll = float(-lp.double().mean())
        if not math.isfinite(valid_nll) or valid_nll > nll_limit:
            raise _diverged(st, st["lr"], 1, st["step_in_epoch"],
                            f"validation perplexity {safe_exp(valid_nll):.4g} is worse than "
                            f"{'uniform' if nll_limit == uniform_nll else 'uniform squared'} "
                            f"({safe_exp(nll_limit):.4g}, |V| = {vocab_size})", cost())
        improved = valid_nll < st["best_valid_nll"]
        st["train_time_s"] += st["epoch_train_time_s"]
        st["train_tokens"] += st["epoch_tokens"]
        st["history"].append({
            "epoch": st["epoch"] + 1, "lr": st["lr"], "train_loss": st["loss_sum"] / max(st["loss_count"], 1),
            "valid_nll": valid_nll, "valid_ppl": safe_exp(valid_nll),
            "train_tokens_per_s": st["epoch_tokens"] / max(st["epoch_train_time_s"], 1e-9),
            "epoch_time_s": st["epoch_train_time_s"], "wall_time_s": wall0 + time.perf_counter() - t_call,
            "best": improved})
        row = st["history"][-1]
        print(f"epoch {row['epoch']:3d} | lr {row['lr']:.4g} | train loss {row['train_loss']:.4f} | "
              f"valid ppl {row['valid_ppl']:.2f} | {row['train_tokens_per_s']:.0f} tok/s", file=sys.stderr)
        st["epoch_train_time_s"], st["epoch_tokens"] = 0.0, 0  # now counted in the totals
        if improved:
            st["best_valid_nll"] = valid_nll
            best_model = {"model": weights(), "epoch": st["epoch"] + 1, "valid_nll": valid_nll}
        if finetune and nt_asgd_trigger([r["valid_nll"] for r in st["history"][:-1]], valid_nll, tc.nonmono):
            st["finetune_stopped_at"] = st["epoch"] + 1  # finetune.py's "Done!": validation stopped improving
        if (tc.schedule == "nt-asgd" and not average.active
                and asgd_switch(tc, st["epoch"] + 1, [r["valid_nll"] for r in st["history"][:-1]], valid_nll)):
            average.start(model)
            st["averaging_from_epoch"] = st["epoch"] + 2
            why = (f"epoch {tc.asgd_start_epoch} reached" if tc.asgd_start_epoch is not None
                   else "validation stopped improving")
            print(f"nt-asgd: {why}; averaging the weights from epoch {st['averaging_from_epoch']} on",
                  file=sys.stderr)
        st["lr"] = next_lr(tc, st["epoch"] + 1, st["lr"], improved)
        st["epoch"] += 1
        st["step_in_epoch"] = 0
        st["wall_time_s"] = wall0 + time.perf_counter() - t_call
        write_text(out_dir / "history.csv", _history_csv(st["history"]))
        checkpoint()
        if stop:
            raise Stopped(stop.signum, f"the end of epoch {st['epoch']}", ckpt_path)

    summary = {
        "status": "ok", "config": run_cfg, "config_hash": chash, "seed": run_cfg["seed"], "device": str(device),
        "torch": torch.__version__, "threads": torch.get_num_threads(), **cost(), "wall_time_s": st["wall_time_s"],
        "epochs": tc.epochs, "best_epoch": int(np.argmin([r["valid_nll"] for r in st["history"]]) + 1),
        "best_valid_nll": st["best_valid_nll"], "last_valid_nll": st["history"][-1]["valid_nll"], "kept": tc.keep,
        **({"averaging_from_epoch": st["averaging_from_epoch"]} if "averaging_from_epoch" in st else {}),
    }
    if finetune:  # epoch 0 = no finetuning epoch validated better than the trained weights
        summary.update(best_epoch=best_model["epoch"], start_valid_nll=st["start_valid_nll"],
                       finetune_stopped_at=st.get("finetune_stopped_at"))
    if not trial:
        if tc.keep == "last":  # the paper's protocol tests the last epoch; the best one is kept beside it
            last = st["history"][-1]
            _save(out_dir / "model-best.pt", {"config": run_cfg, "config_hash": chash, **best_model})
            best_model = {"model": weights(), "epoch": last["epoch"], "valid_nll": last["valid_nll"]}
        _save(out_dir / "model.pt", {"config": run_cfg, "config_hash": chash, **best_model})
    write_json(out_dir / "train.json", summary)
    ckpt_path.unlink()
    ckpt_path.with_name(PREVIOUS).unlink(missing_ok=True)
    return summary
