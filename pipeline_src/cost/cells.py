"""What each cell of a sweep (method x dataset) can train in its budget: whole training steps at the sweep's own
shapes and optimizer, against the step's own floor.

``python -m pipeline_src bench-cells --config config/bench-cells.yaml`` builds, for every dataset in
``bench.cells.datasets`` and method in ``bench.cells.methods``, the run the sweep trains (its model, batch x bptt,
optimizer and the method's options as the params file sets them, before tuning) on the dataset's real batches, and
times ``training.step.train_step`` itself: forward, backward, clipping and the optimizer step, encoder included.

The step's own floor (a roofline, as :func:`pipeline_src.cost.bench.own_floors` builds a head's) is the sum of

- the recurrent kernels alone at the step's shapes (``nn.LSTM`` forward and backward, MKL-DNN on CPU);
- the head's products: its declared training FLOPs at the GEMM rate of the dense softmax's three products at
  this width on ``RATE_ROWS`` rows and V words, at most ``RATE_VOCAB`` (the heads run their products on chunks of rows; the
  rate does not depend on V once the weight leaves the caches, and 2,240 x 1M logits are 9 GB), or the bytes of the head's touched elements at the
  measured copy bandwidth, whichever is slower;
- the optimizer's bytes over every parameter element of the model the step's gradient touched (12 B for SGD, 28
  for Adam), at the measured bandwidth: a dense input embedding of 1M words is touched whole by every dense step.

``tokens_in_budget`` is the step's tokens/s times the dataset's ``training.budget_seconds``: what the sweep's
time budget buys at this step's speed (validation and anytime points are outside the budget's clock).

Beside each cell whose step the own-floor work changed, the same cell as training ran it before (``before_*``,
:func:`_as_before`: torch's SparseAdam, the hierarchical softmax's autograd path, torch's adaptive module, the
infrequent self-normalised loss through autograd), timed in the same run, the two alternating round by round.
"""
from __future__ import annotations

import statistics
import sys
import time

import pandas as pd
import torch

from ..config import ConfigError, TrainConfig, train_config
from ..data.batching import batchify
from ..data.prepare import load_split
from ..io import paths
from ..io.artifacts import read_json
from ..io.atomic import atomic_path, write_json
from ..io.runtime import cpu_model, huge_pages, load_average, seed_everything
from ..training.optim import RowSparseAdam
from .bench import UPDATE_BYTES, floor_ms, memory_bandwidth, products_floor_ms, sync, touched_elements
from .stepbench import _head_runner, lstm_floor_ms, profile_steps

HELD_ABOVE = 2.0  # a step above this multiple of its own floor (the softmax: SOFTMAX_HELD_ABOVE) is profiled, and
SOFTMAX_HELD_ABOVE = 1.3  # the operators that hold it named in cell-bench.csv's held_by (issue 79's goals)
RATE_VOCAB = 32768  # the GEMM rate of the floor: the three products of RATE_ROWS rows and RATE_VOCAB words, the
RATE_ROWS = 128     # the sweep heads' chunk_size (a head runs its products on chunks of rows: 2,240 x 32,768 logits
# are memory-bound, and cache-resident chunks of 128 rows run faster than chunks of 256)


def run_cell_bench(params: dict, device: torch.device) -> pd.DataFrame:
    """Every cell's step, tokens/s and tokens in the budget against its own floor; writes cell-bench.csv (+ .json)."""
    from ..config.runs import run_seeds
    from ..config.runspec import resolve_run
    from ..data.checks import check_prepared

    spec = params["bench"].get("cells")
    if not spec:
        raise ConfigError("key 'bench.cells' is missing: it names the datasets and methods whose steps to time")
    out = paths.cell_bench_path(params)
    paths.check_writable(out, out.with_suffix(".json"))  # before minutes of measuring, not after
    if device.type == "cpu":
        torch.set_num_threads(spec.get("threads", 1))
    bandwidth, rows = memory_bandwidth(device, 3), []
    for ds in spec["datasets"]:
        prepared = check_prepared(params, ds)
        cfgs = {m: resolve_run(params, ds, m, seed=run_seeds(params)[0], as_written=True).config for m in spec["methods"]}
        vocab = read_json(prepared / paths.META, "vocab_size")["vocab_size"]
        floors = _shared_floors(next(iter(cfgs.values())), min(vocab, RATE_VOCAB), device)
        floors["budget_s"] = train_config(params, ds).budget_seconds  # the dataset's time budget (not a frozen one)
        for m, cfg in cfgs.items():
            rows.append({**_cell(ds, m, cfg, prepared, floors, bandwidth, spec, device), "vocab": vocab})
    df = pd.DataFrame(rows)
    with atomic_path(out) as tmp:
        df.to_csv(tmp, index=False)
    write_json(out.with_suffix(".json"), {"cells": spec, "device": str(device), "threads": torch.get_num_threads(),
                                          "torch": torch.__version__, "cpu_model": cpu_model(),
                                          "load_average": load_average(), "huge_pages": huge_pages(),
                                          "rate_vocab": RATE_VOCAB,
                                          "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None})
    print(df[SHOWN].to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    return df


def alternating_ms(params: dict, dataset: str, methods: list[str], device: torch.device, rounds: int = 5,
                   min_seconds: float = 1.0) -> dict[str, list[float]]:
    """Each method's ms per training step at ``dataset``'s shapes, its rounds alternating with the others' (a busy
    moment or a slower machine hits every method alike, so their ratios hold on any machine): ``compare``'s
    measure of a new head's speed relative to a published one's."""
    from ..config.runs import run_seeds
    from ..config.runspec import resolve_run
    from ..data.checks import check_prepared

    prepared = check_prepared(params, dataset)
    if device.type == "cpu":
        torch.set_num_threads(1)  # as each training job runs
    runners = []
    for m in methods:
        cfg = resolve_run(params, dataset, m, seed=run_seeds(params)[0], as_written=True).config
        tc = TrainConfig(**cfg["training"])
        seed_everything(0)
        runners.append(_head_runner(cfg, prepared, batchify(load_split(prepared, "train"), tc.batch_size, device),
                                    device))
    for step, batches in runners:
        step(next(batches))  # warm up: allocator, kernels, caches
    times: dict[str, list[float]] = {m: [] for m in methods}
    for _ in range(rounds):
        for m, (step, batches) in zip(methods, runners):
            times[m].append(_round_ms(step, batches, min_seconds, device))
    return times


SHOWN = ["dataset", "method", "step_ms", "own_floor_ms", "step_vs_own", "tokens_per_s", "tokens_in_budget",
         "before_step_ms", "before_tokens_in_budget", "speedup_vs_before", "lstm_ms", "head_floor_ms",
         "update_floor_ms", "held_by"]


def _shared_floors(cfg: dict, rate_vocab: int, device: torch.device) -> dict:
    """The recurrent kernels' time and the GEMM rate at this dataset's shapes (the same for every method)."""
    mc, tc = cfg["model"], TrainConfig(**cfg["training"])
    n, d = tc.batch_size * tc.bptt, mc["hidden_dim"]
    g = torch.Generator().manual_seed(1)
    h, w = torch.randn(RATE_ROWS, d, generator=g).to(device), torch.randn(rate_vocab, d, generator=g).to(device)
    gemm_ms, _ = floor_ms(h, w, device, repeats=25, warmup=5)
    return {"rows": n, "lstm_ms": lstm_floor_ms(tc.bptt, tc.batch_size, mc["emb_dim"], d, mc["layers"], device, 5),
            "gemm_flops_per_s": 3 * 2 * RATE_ROWS * rate_vocab * d / (gemm_ms / 1e3)}


def _cell(ds: str, m: str, cfg: dict, prepared, floors: dict, bandwidth: float, spec: dict,
          device: torch.device) -> dict:
    tc = TrainConfig(**cfg["training"])
    floors = {**floors, "optimizer": tc.optimizer}  # the cell's own
    seed_everything(0)
    data = batchify(load_split(prepared, "train"), tc.batch_size, device)  # (steps, B)
    step, batches = _head_runner(cfg, prepared, data, device)
    model = step.model
    seed_everything(0)
    before, before_batches = _head_runner(cfg, prepared, data, device)
    runners = [(step, batches)] + ([(before, before_batches)] if _as_before(before) else [])
    times: list[list[float]] = [[] for _ in runners]
    for s, b in runners:
        s(next(b))  # warm up: allocator, kernels, caches
    for _ in range(spec.get("rounds", 2)):  # the two alternate round by round: a busy moment hits both
        for t, (s, b) in zip(times, runners):
            t.append(_round_ms(s, b, spec.get("min_seconds", 3.0), device))
    ms = statistics.median(times[0])
    prev = statistics.median(times[1]) if len(runners) > 1 else float("nan")
    head_touched, all_touched = touched_elements(model.head), touched_elements(model)
    n = floors["rows"]
    head = products_floor_ms(model.head.flops_per_token(train=True) * n, head_touched, floors["gemm_flops_per_s"],
                             bandwidth)
    update = 1e3 * all_touched * UPDATE_BYTES[floors["optimizer"]] / bandwidth
    own = floors["lstm_ms"] + head + update
    row = {"dataset": ds, "method": m, "step_ms": ms, "own_floor_ms": own, "step_vs_own": ms / own,
           "tokens_per_s": n / ms * 1e3, "tokens_in_budget": n / ms * 1e3 * (floors["budget_s"] or float("nan")),
           "lstm_ms": floors["lstm_ms"], "head_floor_ms": head, "update_floor_ms": update, "touched": all_touched,
           "head_touched": head_touched, "rows": n, "optimizer": floors["optimizer"],
           "gemm_gflops": floors["gemm_flops_per_s"] / 1e9, "bandwidth_gbs": bandwidth / 1e9,
           # the same cell as training ran it before the own-floor work (_as_before); NaN where nothing changed
           "before_step_ms": prev, "before_tokens_in_budget": n / prev * 1e3 * (floors["budget_s"] or float("nan")),
           "speedup_vs_before": prev / ms}
    limit = SOFTMAX_HELD_ABOVE if m == "softmax" else HELD_ABOVE
    row["held_by"] = held_by(step, batches, device) if row["step_vs_own"] > limit else ""
    print(f"bench-cells {ds} {m}: {ms:.1f} ms/step ({row['step_vs_own']:.2f}x its own floor), "
          f"{row['tokens_per_s']:.0f} tokens/s", file=sys.stderr)
    return row


def held_by(step, batches, device: torch.device, steps: int = 2, top: int = 3) -> str:
    """What holds a step above its floor: the ``top`` ATen operators by their own time over ``steps`` profiled
    steps (``torch.profiler``; on a GPU their device time), each with its share of the operators' total, e.g.
    "aten::bmm 20%, aten::index_copy_ 15%, aten::baddbmm 11%"."""
    prof, _ = profile_steps(step, batches, steps, device)
    attr = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    ops = [(e.key, getattr(e, attr, 0.0)) for e in prof.key_averages() if e.key.startswith("aten::")]
    total = sum(t for _, t in ops)
    if total <= 0:
        return ""
    return ", ".join(f"{k} {100 * t / total:.0f}%" for k, t in sorted(ops, key=lambda o: -o[1])[:top])


def _as_before(step) -> bool:
    """Turn a runner's step into what training ran before the own-floor work: torch's ``SparseAdam`` for the
    row-sparse parameters (not :class:`RowSparseAdam`, bitwise the same update), a hierarchical softmax's
    within-class softmaxes through autograd (not its fused function, the same values and gradients), adaptive
    softmax through ``torch.nn.AdaptiveLogSoftmaxWithLoss`` (not its own fused tails), and the infrequent
    self-normalised loss through autograd (not fused). False when the cell has none of them."""
    changed = False
    opts = step.optimizer.optimizers
    for i, o in enumerate(opts):
        if isinstance(o, RowSparseAdam):
            opts[i] = torch.optim.SparseAdam([{"params": g["params"], "lr": g["lr"], "lr_mult": g["lr_mult"]}
                                              for g in o.param_groups], lr=o.defaults["lr"])
            changed = True
    head = step.model.head
    if hasattr(head, "_within_autograd"):
        head._within = head._within_autograd  # this instance only
        changed = True
    if hasattr(head, "module_loss"):  # adaptive softmax: torch's module instead of its own fused tails
        head.loss = head.module_loss
        changed = True
    if getattr(getattr(head, "opts", None), "variant", None) == "infrequent":  # its loss through autograd
        head.loss = head._infrequent_autograd
        changed = True
    return changed


def _round_ms(step, batches, min_seconds: float, device: torch.device) -> float:
    """Mean ms per step over at least two steps and ``min_seconds``."""
    sync(device)
    t0, k = time.perf_counter(), 0
    while k < 2 or time.perf_counter() - t0 < min_seconds:
        step(next(batches))
        k += 1
    sync(device)
    return (time.perf_counter() - t0) * 1e3 / k
