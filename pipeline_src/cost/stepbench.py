"""Whole training steps: the project's, its floor, and the PyTorch example's (the peer), in one run.

``python -m pipeline_src bench-step --config config/ptb-baseline.yaml`` times, on the real batches of
``bench.step.dataset``, for each thread count in ``bench.step.threads``:

- **project**: ``training.step.train_step`` itself (forward, backward, clipping, optimizer step) of each method in
  ``bench.step.methods``, built from the params file's model and training settings;
- **peer**: the step of PyTorch's word-language-model example, rebuilt here from its published
  description (embedding, dropout, ``nn.LSTM``, dropout, a tied ``nn.Linear`` decoder, ``log_softmax`` +
  ``NLLLoss``, ``clip_grad_norm_``, the manual SGD update ``p.data.add_(p.grad, alpha=-lr)``, and its
  ``loss.item()`` per step) at the same sizes, on the same batches;
- **floor**: the step's matrix products and recurrent kernels alone at the same shapes: the softmax
  layer's three products (h W^T, G W, G^T h with N = batch x bptt rows) plus the LSTM's forward and
  backward (``nn.LSTM`` without dropout, MKL-DNN on CPU, cuDNN on CUDA). Beside it, the one elementwise
  pass no exact softmax layer avoids: a fused row softmax over the step's (N x V) logits.

Project and peer alternate round by round (A B A B ...), so a busy moment hits both; each entry is the
median over rounds of the mean time per step. At the first thread count the project's steps are also
profiled (``torch.profiler``): each op's self time is charged to the part of the step it ran in (the
``record_function`` labels of ``train_step`` and ``LanguageModel.loss``) and split into matrix products,
recurrent kernels and other ops; what the ops leave of the profiled step is Python and dispatch (with
the profiler's own overhead, which also inflates small ops: the unprofiled step is given beside it).
"""
from __future__ import annotations

import statistics
import sys
import time
from collections import defaultdict

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from ..config import ConfigError, TrainConfig, training_settings
from ..data.batching import batchify, segments
from ..data.prepare import load_split
from ..heads.kernels import softmax_
from ..io import paths
from ..io.artifacts import read_json
from ..io.atomic import atomic_path, write_json
from ..io.runtime import cpu_model, huge_pages, load_average, seed_everything
from ..training.optim import build_optimizer
from ..training.step import build_model, train_step
from .bench import floor_ms, sync, time_fn

PARTS = ("encoder", "head", "backward", "clip", "optimizer")  # record_function labels of train_step
MATMUL_OPS = {"aten::mm", "aten::addmm", "aten::addmm_", "aten::bmm", "aten::baddbmm", "aten::matmul"}


class PeerLM(nn.Module):
    """The PyTorch example's RNNModel (LSTM): embedding -> dropout -> LSTM -> dropout -> decoder -> log_softmax."""

    def __init__(self, vocab: int, emb: int, hidden: int, layers: int, dropout: float, tie: bool):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(vocab, emb)
        self.rnn = nn.LSTM(emb, hidden, layers, dropout=dropout)
        self.decoder = nn.Linear(hidden, vocab)
        if tie:
            self.decoder.weight = self.encoder.weight
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        if not tie:
            nn.init.uniform_(self.decoder.weight, -0.1, 0.1)
        self.vocab = vocab

    def forward(self, tokens, hidden):  # tokens (T, B)
        out, hidden = self.rnn(self.drop(self.encoder(tokens)), hidden)  # (T, B, hidden)
        logits = self.decoder(self.drop(out)).view(-1, self.vocab)  # (T B, V)
        return F.log_softmax(logits, dim=1), hidden


def peer_step_fn(model: PeerLM, lr: float, clip: float):
    """The example's training step: (x, y, state) -> (new state, the loss it read back)."""
    criterion = nn.NLLLoss()

    def step(x, y, hidden):
        hidden = tuple(h.detach() for h in hidden)  # the example's repackage_hidden
        model.zero_grad()
        out, hidden = model(x, hidden)
        loss = criterion(out, y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)
        return hidden, loss.item()  # the example reads the loss back every step
    return step


def lstm_floor_ms(t: int, b: int, emb: int, hidden: int, layers: int, device, repeats: int) -> float:
    """Forward + backward of the bare recurrent kernels at the step's shapes."""
    g = torch.Generator().manual_seed(3)
    lstm = nn.LSTM(emb, hidden, layers).to(device)
    x = torch.randn(t, b, emb, generator=g).to(device).requires_grad_()
    grad = torch.randn(t, b, hidden, generator=g).to(device)

    def fwd_bwd():
        lstm.zero_grad(set_to_none=True)
        x.grad = None
        y, _ = lstm(x)
        y.backward(grad)
    return time_fn(fwd_bwd, device, repeats, warmup=2)


def _timed_steps(step, batches, n: int, device) -> float:
    """Mean ms per step over n steps (the batches cycle)."""
    sync(device)
    t0 = time.perf_counter()
    for _ in range(n):
        step(next(batches))
    sync(device)
    return (time.perf_counter() - t0) * 1e3 / n


def _cycle(data, bptt: int):
    while True:
        for _, x, y in segments(data, bptt):
            yield x, y


def profile_steps(step, batches, n: int, device: torch.device = torch.device("cpu")):
    """Run ``n`` steps under ``torch.profiler`` (on a GPU its device activity too): the profile and the wall ms a
    profiled step took. The step bench's breakdown and the cell bench's ``held_by`` read it."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=acts) as prof:
        t0 = time.perf_counter()
        for _ in range(n):
            step(next(batches))
        sync(device)
        wall = (time.perf_counter() - t0) * 1e3 / n
    return prof, wall


def breakdown(step, batches, n: int, step_ms: float) -> dict[str, float]:
    """ms per profiled step by part x kind, from the profiler's op self times (first thread count only);
    what the ops leave of the profiled step is Python and dispatch, with the profiler's own overhead
    (which also inflates small ops): the unprofiled step ``step_ms`` is given beside it."""
    prof, wall = profile_steps(step, batches, n)
    out: dict[str, float] = defaultdict(float)
    for e in prof.events():
        if e.name in PARTS or e.name.startswith("ProfilerStep"):
            continue
        part, p = "other", e.cpu_parent
        while p is not None:
            if p.name in PARTS:
                part = p.name
                break
            p = p.cpu_parent
        if part == "other" and e.cpu_parent is None and e.name.startswith("autograd::engine"):
            part = "backward"
        kind = ("matrix products" if e.name in MATMUL_OPS else
                "recurrent kernels" if "rnn" in e.name.lower() or "lstm" in e.name.lower() else "other ops")
        out[f"{part}: {kind}"] += e.self_cpu_time_total / 1e3 / n
    out["python and dispatch (and the profiler's overhead)"] = wall - sum(out.values())
    out["step, profiled"] = wall
    out["step, not profiled"] = step_ms
    return dict(out)


def run_step_bench(params: dict, device: torch.device) -> pd.DataFrame:
    """Whole training steps of ``bench.step.methods`` against their floor and the PyTorch example's step, at
    each thread count; writes step-bench.csv, step-breakdown.csv and step-bench.json."""
    from ..data.checks import check_prepared

    spec, ds, cfgs = _step_configs(params)
    prepared = check_prepared(params, ds)
    mc, tc = next(iter(cfgs.values()))["model"], TrainConfig(**next(iter(cfgs.values()))["training"])
    data = batchify(load_split(prepared, "train"), tc.batch_size, device)  # (steps, B)
    vocab = read_json(prepared / paths.META, "vocab_size")["vocab_size"]
    n_rows, steps, rounds = tc.bptt * tc.batch_size, spec.get("steps", 50), spec.get("rounds", 4)
    seed = params["run"].get("seeds", [0])[0]
    rows, parts = [], {}
    for threads in spec["threads"]:
        if device.type == "cpu":
            torch.set_num_threads(threads)
        floors = _floors(mc, tc, vocab, n_rows, device, rounds)
        seed_everything(seed)
        runners = {"peer": _peer_runner(mc, tc, vocab, data, device)}
        for m, cfg in cfgs.items():
            seed_everything(seed)
            runners[m] = _head_runner(cfg, prepared, data, device)
        times = _timed_rounds(runners, steps, rounds, device)
        rows += [_row(threads, m, times, floors, n_rows) for m in cfgs]
        if threads == spec["threads"][0]:
            for m in cfgs:
                parts[m] = breakdown(*runners[m], max(5, steps // 4), statistics.median(times[m]))
    df = pd.DataFrame(rows)
    bd = pd.DataFrame([{"method": m, "part": k, "ms_per_step": v} for m, p in parts.items() for k, v in p.items()])
    _write(params, df, bd, {"step": spec, "dataset": ds, "vocab": vocab, "rows_per_step": n_rows,
                            "device": str(device), "model": mc, "training": dict(next(iter(cfgs.values()))["training"])})
    print(f"{ds}: V = {vocab}, {tc.batch_size} x {tc.bptt} rows per step, {device}; medians of {rounds} rounds "
          f"of {steps} steps")
    print(df.to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    print(f"\nwhere a step's time goes ({spec['threads'][0]} thread(s), profiled; ms per step)")
    print(bd.pivot(index="part", columns="method", values="ms_per_step").to_string(float_format=lambda x: f"{x:.1f}"))
    return df


def _step_configs(params: dict) -> tuple[dict, str, dict]:
    """``bench.step``, its dataset and each method's final run config; the peer needs a plain LSTM and SGD."""
    from ..config.runspec import final_config

    spec = params["bench"].get("step")
    if not spec:
        raise ConfigError("key 'bench.step' is missing: it names the dataset, methods and thread counts to time")
    ds = spec["dataset"]
    seed = params["run"].get("seeds", [0])[0]
    cfgs = {m: final_config(params, ds, m, seed) for m in spec["methods"]}
    mc, tc = next(iter(cfgs.values()))["model"], TrainConfig(**next(iter(cfgs.values()))["training"])
    if mc.get("encoder", "lstm") != "lstm" or mc.get("proj_dim") or tc.optimizer != "sgd":
        raise ConfigError(f"key 'bench.step' (dataset {ds}): the peer is the PyTorch example's step, a plain LSTM "
                          f"trained by SGD; give a params file with model.encoder lstm, no model.proj_dim and "
                          f"training.optimizer sgd")
    return spec, ds, cfgs


def _floors(mc: dict, tc: TrainConfig, vocab: int, n_rows: int, device: torch.device, rounds: int) -> dict:
    """The step's floor: the head's three matrix products and the LSTM's cuDNN/MKL step; and one softmax pass."""
    g = torch.Generator().manual_seed(1)
    h = torch.randn(n_rows, mc["emb_dim"] if mc["tie_weights"] else mc["hidden_dim"], generator=g).to(device)
    w = torch.randn(vocab, h.shape[1], generator=g).to(device)
    gemm_ms, _ = floor_ms(h, w, device, repeats=rounds * 3, warmup=2)
    logits = torch.randn(n_rows, vocab, generator=g).to(device)
    softmax_ms = time_fn(lambda: softmax_(logits), device, repeats=rounds * 3, warmup=2)  # exp + sum, once
    rnn_ms = lstm_floor_ms(tc.bptt, tc.batch_size, mc["emb_dim"], mc["hidden_dim"], mc["layers"], device,
                           repeats=rounds * 3)
    return {"gemm": gemm_ms, "softmax": softmax_ms, "rnn": rnn_ms}


def _peer_runner(mc: dict, tc: TrainConfig, vocab: int, data: torch.Tensor, device: torch.device):
    """The PyTorch example's step (built from the current RNG state), and its endless batches."""
    peer = PeerLM(vocab, mc["emb_dim"], mc["hidden_dim"], mc["layers"], mc["dropout"], mc["tie_weights"]).to(device)
    step = peer_step_fn(peer, tc.lr, tc.clip)
    state = [tuple(torch.zeros(mc["layers"], tc.batch_size, mc["hidden_dim"], device=device) for _ in "hc")]

    def call(xy):
        state[0], _ = step(*xy, state[0])
    return call, _cycle(data, tc.bptt)


def _head_runner(cfg: dict, prepared, data: torch.Tensor, device: torch.device):
    """The project's step of one method (``training.step.train_step``, built from the current RNG state)."""
    model = build_model(cfg, prepared).to(device)
    model.train()
    mtc = training_settings(cfg)
    opt = build_optimizer(model, mtc)
    state = [model.init_state(mtc.batch_size, device)]

    def call(xy):
        _, state[0] = train_step(model, opt, xy[0], xy[1], state[0], mtc)
    call.model, call.optimizer = model, opt  # what the step trains and with what (read by the cell bench)
    return call, _cycle(data, mtc.bptt)


def _timed_rounds(runners: dict, steps: int, rounds: int, device: torch.device) -> dict:
    """Per runner, the time of ``steps`` steps in each of ``rounds`` interleaved rounds, after a warm-up."""
    order = [m for m in runners if m != "peer"] + ["peer"]
    for m in order:  # warm up: allocator, kernels, caches
        _timed_steps(*runners[m], 3, device)
    times = defaultdict(list)
    for _ in range(rounds):
        for m in order:
            times[m].append(_timed_steps(*runners[m], steps, device))
    return times


def _row(threads: int, m: str, times: dict, floors: dict, n_rows: int) -> dict:
    ms, peer_ms = statistics.median(times[m]), statistics.median(times["peer"])
    floor = floors["gemm"] + floors["rnn"]
    print(f"bench-step {threads} thread(s) {m}: {ms:.1f} ms/step, peer {peer_ms:.1f}, floor {floor:.1f}",
          file=sys.stderr)
    return {"threads": threads, "method": m, "step_ms": ms, "peer_ms": peer_ms, "floor_ms": floor,
            "head_gemm_ms": floors["gemm"], "lstm_ms": floors["rnn"], "softmax_pass_ms": floors["softmax"],
            "step_vs_floor": ms / floor, "step_vs_floor_and_softmax": ms / (floor + floors["softmax"]),
            "peer_vs_floor": peer_ms / floor, "speedup_vs_peer": peer_ms / ms,
            "tokens_per_s": n_rows / ms * 1e3, "peer_tokens_per_s": n_rows / peer_ms * 1e3}


def _write(params: dict, df: pd.DataFrame, bd: pd.DataFrame, meta: dict) -> None:
    out = paths.step_bench_path(params)
    with atomic_path(out) as tmp:
        df.to_csv(tmp, index=False)
    with atomic_path(out.with_name("step-breakdown.csv")) as tmp:
        bd.to_csv(tmp, index=False)
    write_json(out.with_suffix(".json"), {**meta, "torch": torch.__version__, "cpu_model": cpu_model(),
                                          "load_average": load_average(), "huge_pages": huge_pages()})
