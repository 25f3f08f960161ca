"""Speed and memory of every output layer against the floor a softmax layer cannot avoid.

For N rows of size d and a vocabulary V, any exact softmax layer must compute three matrix
products per training step: logits = h W^T (N x V), dh = G W (N x d) and dW = G^T h (V x d).
The bench times those three products alone (the *floor*), then each registered head's
forward+backward (``head.loss`` + ``backward``; ``update_ms`` adds a plain SGD update, which touches
only the gathered rows of a sampled head) and exact evaluation (``head.target_log_prob``,
compared with the one-product floor h W^T), in the same process and the same run, and reports
ratios. Peak memory is the high-water mark of tensor bytes allocated during one training step
(from the PyTorch profiler's allocator events on CPU, ``max_memory_allocated`` on CUDA), next to
that of the unchunked reference ``F.linear`` + ``F.cross_entropy``.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from typing import Callable

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from ..heads import HeadContext, build_head
from ..heads.kernels import scratch_bytes
from ..io import paths
from ..io.atomic import atomic_path, write_json
from ..io.digests import sha256_of
from ..io.runtime import huge_pages
from ..training.optim import RowSparseAdam


def sync(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA), so that a timer reads finished work; nothing on the CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_fn(fn: Callable[[], None], device: torch.device, repeats: int, warmup: int) -> float:
    """Median wall time of ``fn`` in milliseconds."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def peak_bytes(fn: Callable[[], None], device: torch.device, clear: Callable[[], None] = lambda: None) -> int:
    """Extra tensor bytes alive at the high-water mark while ``fn`` runs, from the state ``clear`` leaves
    (no gradients of an earlier call, so the step's own allocations are what is measured)."""
    clear()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - base
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    fd, trace = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(trace)
        events = json.load(open(trace))["traceEvents"]
    finally:
        os.unlink(trace)
    return peak_from_events([e for e in events if e.get("name") == "[memory]"])


def peak_from_events(mem: list[dict]) -> int:
    """The high-water mark of the bytes allocated since the start, from the profiler's memory events:
    a running sum of their ``Bytes`` in time order. (Taking the first event of the trace as the start
    level came out negative, -0.37 MB for neglm-b in one report: the trace is not in time order when
    several threads allocate, and a step's first event can be a free of an earlier call's gradient.)"""
    level = peak = 0
    for e in sorted(mem, key=lambda e: e["ts"]):
        level += e["args"]["Bytes"]
        peak = max(peak, level)
    return peak


def zipf_counts(v: int) -> torch.Tensor:
    return torch.from_numpy((1e7 / np.arange(1, v + 1)).astype(np.int64))


def bench_one(method: str, spec: dict, v: int, n: int, d: int, device: torch.device, repeats: int,
              warmup: int) -> dict:
    g = torch.Generator().manual_seed(0)
    counts = zipf_counts(v)
    head = build_head(spec, HeadContext(vocab_size=v, in_dim=d, unigram_counts=counts)).to(device)
    h = torch.randn(n, d, generator=g).to(device).requires_grad_()
    target = torch.multinomial(counts.double(), n, replacement=True, generator=g).to(device)

    def clear() -> None:
        head.zero_grad(set_to_none=True)
        h.grad = None

    def step() -> None:
        clear()
        head.loss(h, target).backward()

    sgd = torch.optim.SGD(head.parameters(), lr=1e-6)  # handles the sampled heads' sparse gradients

    def step_and_update() -> None:
        step()
        sgd.step()

    # Adam as training runs it (training/optim.py): its lazy sparse variant for rows with sparse gradients
    sparse_ids = {id(p) for p in head.sparse_params()}
    adams = adam_optimizers(head, sparse_ids, RowSparseAdam)

    def step_and_adam() -> None:
        step()
        for opt in adams:
            opt.step()

    def torch_sparse_adam() -> None:  # the peer: torch's own SparseAdam (what training used before RowSparseAdam)
        step()
        for opt in peers:
            opt.step()

    peers = adam_optimizers(head, sparse_ids, torch.optim.SparseAdam)

    def evaluate() -> None:
        with torch.no_grad():
            head.target_log_prob(h, target)

    out = {"method": method, "train_ms": time_fn(step, device, repeats, warmup),
           "touched": touched_elements(head),  # the gradient the timed steps left
           "train_flop": head.flops_per_token(train=True) * n, "eval_flop": head.flops_per_token(train=False) * n,
           "update_ms": time_fn(step_and_update, device, repeats, warmup),
           "adam_ms": time_fn(step_and_adam, device, repeats, warmup),
           "torch_sparse_adam_ms": time_fn(torch_sparse_adam, device, repeats, warmup) if sparse_ids else float("nan"),
           "eval_ms": time_fn(evaluate, device, repeats, warmup),
           "peak_mem_mb": (peak_bytes(step, device, clear) + scratch_bytes(head)) / 2**20,  # + blocks kept
           "params": sum(p.numel() for p in head.parameters()),
           "param_mb": sum(p.numel() * p.element_size() for p in head.parameters()) / 2**20,
           "adam_state_mb": sum(t.numel() * t.element_size() for opt in adams for st in opt.state.values()
                                for t in st.values() if torch.is_tensor(t)) / 2**20}
    return out


def adam_optimizers(head: torch.nn.Module, sparse_ids: set[int], sparse_cls) -> list[torch.optim.Optimizer]:
    """Adam for the head's dense parameters and ``sparse_cls`` (a sparse Adam) for those in ``sparse_ids``."""
    groups = ((sparse_cls, [p for p in head.parameters() if id(p) in sparse_ids]),
              (torch.optim.Adam, [p for p in head.parameters() if id(p) not in sparse_ids]))
    return [cls(ps, lr=1e-6) for cls, ps in groups if ps]


def touched_elements(head: torch.nn.Module) -> int:
    """Parameter elements the step's gradient holds: every element of a dense gradient, the rows present in a
    sparse one (what an optimizer must read and write)."""
    total = 0
    for p in head.parameters():
        if p.grad is None:
            continue
        if p.grad.is_sparse:
            g = p.grad.coalesce()
            total += g._values().numel()
        else:
            total += p.numel()
    return total


# bytes an update moves per parameter element it touches, in fp32: SGD reads the weight and its gradient and
# writes the weight; Adam also reads and writes its two moments
UPDATE_BYTES = {"sgd": 3 * 4, "adam": 7 * 4}


def memory_bandwidth(device: torch.device, repeats: int, mb: int = 256) -> float:
    """Bytes per second of a large copy (read + write), this machine's measured memory bandwidth."""
    src = torch.ones(mb * 2**18, device=device)
    dst = torch.empty_like(src)
    ms = time_fn(lambda: dst.copy_(src), device, max(repeats, 3), 1)
    return 2 * src.numel() * 4 / (ms / 1e3)


# bytes a step's products move per parameter element they use, in fp32: the weight read by the forward product,
# read again by the input-gradient product, and its gradient written
PRODUCT_BYTES = 3 * 4


def products_floor_ms(flop: float, touched: int, gemm_flops_per_s: float, bandwidth: float) -> float:
    """A step's products at the GEMM rate, or the bytes of the parameter elements they use at the bandwidth."""
    return 1e3 * max(flop / gemm_flops_per_s, touched * PRODUCT_BYTES / bandwidth)


def own_floors(row: dict, gemm_flops_per_s: float, bandwidth: float) -> dict:
    """A head's own floor, a roofline: its products at the measured GEMM rate or the bytes they must move at the
    measured bandwidth, whichever is slower (a class of a hierarchical softmax is scored for one or two rows: a
    matrix-vector product, bound by reading its rows, not by arithmetic). Training: its FLOPs (forward and both
    gradient products) against :data:`PRODUCT_BYTES` for each parameter element the step touched; evaluation:
    one forward. An update adds the bytes it moves over the touched elements (:data:`UPDATE_BYTES`)."""
    step = products_floor_ms(row["train_flop"], row["touched"], gemm_flops_per_s, bandwidth)
    own = {"own_floor_ms": step, "own_eval_floor_ms": 1e3 * row["eval_flop"] / gemm_flops_per_s}
    for opt, col in (("sgd", "update"), ("adam", "adam")):
        own[f"own_{col}_floor_ms"] = step + 1e3 * row["touched"] * UPDATE_BYTES[opt] / bandwidth
    own.update(train_vs_own=row["train_ms"] / own["own_floor_ms"], update_vs_own=row["update_ms"] / own["own_update_floor_ms"],
               adam_vs_own=row["adam_ms"] / own["own_adam_floor_ms"], eval_vs_own=row["eval_ms"] / own["own_eval_floor_ms"])
    return own


def floor_ms(h: torch.Tensor, w: torch.Tensor, device: torch.device, repeats: int, warmup: int) -> tuple[float, float]:
    """Times of the three products of a training step and of the one product of evaluation."""
    grad_logits = torch.randn(h.shape[0], w.shape[0], generator=torch.Generator().manual_seed(2)).to(device)

    def three_products() -> None:
        torch.mm(h, w.t())  # logits (N, V)
        torch.mm(grad_logits, w)  # dh (N, d)
        torch.mm(grad_logits.t(), h)  # dW (V, d)

    return (time_fn(three_products, device, repeats, warmup),
            time_fn(lambda: torch.mm(h, w.t()), device, repeats, warmup))


def floor_and_reference(v: int, n: int, d: int, device: torch.device, repeats: int, warmup: int) -> dict:
    g = torch.Generator().manual_seed(1)
    h = torch.randn(n, d, generator=g).to(device)
    w = torch.randn(v, d, generator=g).to(device)
    floor, floor_eval = floor_ms(h, w, device, repeats, warmup)
    hr, wr = h.clone().requires_grad_(), w.clone().requires_grad_()
    br = torch.zeros(v, device=device, requires_grad=True)
    target = torch.randint(0, v, (n,), generator=g).to(device)

    def clear() -> None:
        hr.grad = wr.grad = br.grad = None

    def reference() -> None:
        clear()
        F.cross_entropy(F.linear(hr, wr, br), target).backward()

    out = {"floor_ms": floor, "floor_eval_ms": floor_eval, "reference_ms": time_fn(reference, device, repeats, warmup),
           "reference_peak_mem_mb": peak_bytes(reference, device, clear) / 2**20}
    return {**out, **library_peer(hr, wr, br, target, clear, device, repeats, warmup)}


LCE_PEERS = {"lce_auto": {}, "lce_chunk256": {"batch_chunk_size": 256, "acc_policy": "compact"}}


def library_peer(h: torch.Tensor, w: torch.Tensor, b: torch.Tensor, target: torch.Tensor, clear, device: torch.device,
                 repeats: int, warmup: int) -> dict:
    """PyTorch's own chunked softmax loss, ``F.linear_cross_entropy`` (2.13+), with its automatic options
    and with 256-row chunks and the compact accumulation policy: the step's time and peak memory, and
    the largest difference of its loss from F.linear + F.cross_entropy's. Empty on older PyTorch."""
    if not hasattr(F, "linear_cross_entropy"):
        return {}
    with torch.no_grad():
        exact = F.cross_entropy(F.linear(h, w, b).double(), target).item()
    out = {}
    for name, opts in LCE_PEERS.items():
        options = torch.nn.LinearCrossEntropyOptions(**opts)

        def step() -> None:
            clear()
            F.linear_cross_entropy(h, w, target, linear_bias=b, options=options).backward()

        with torch.no_grad():
            got = F.linear_cross_entropy(h, w, target, linear_bias=b, options=options).item()
        out.update({f"{name}_ms": time_fn(step, device, repeats, warmup),
                    f"{name}_peak_mem_mb": peak_bytes(step, device, clear) / 2**20,
                    f"{name}_loss_error": abs(got - exact)})
    return out


def run_bench(params: dict, device: torch.device, quick: bool = False) -> pd.DataFrame:
    b = params["bench"]
    vocab_sizes, n, d, repeats = b["vocab_sizes"], b["tokens"], b["dim"], b["repeats"]
    if quick:
        vocab_sizes, n, d, repeats = [min(vocab_sizes), 2 * min(vocab_sizes)], min(n, 64), min(d, 32), 2
    rows = []
    bandwidth = memory_bandwidth(device, repeats)
    for v in vocab_sizes:
        ref = floor_and_reference(v, n, d, device, repeats, b.get("warmup", 1))
        gemm = 3 * 2 * n * v * d / (ref["floor_ms"] / 1e3)  # the three products' measured rate at this V
        for method in b["methods"]:
            r = bench_one(method, params["methods"][method], v, n, d, device, repeats, b.get("warmup", 1))
            rows.append({"vocab": v, **r, **ref, **own_floors(r, gemm, bandwidth),
                         "gemm_gflops": gemm / 1e9, "bandwidth_gbs": bandwidth / 1e9,
                         "train_vs_floor": r["train_ms"] / ref["floor_ms"],
                         "eval_vs_floor": r["eval_ms"] / ref["floor_eval_ms"],
                         "mem_vs_reference": r["peak_mem_mb"] / ref["reference_peak_mem_mb"]})
            print(f"bench V={v} {method}: {r['train_ms']:.1f} ms/step ({rows[-1]['train_vs_floor']:.2f}x floor)",
                  file=sys.stderr)
    df = pd.DataFrame(rows)
    cols = ["vocab", "method", "train_ms", "update_ms", "adam_ms", "floor_ms", "train_vs_floor", "eval_ms",
            "floor_eval_ms", "eval_vs_floor", "peak_mem_mb", "param_mb", "adam_state_mb", "reference_peak_mem_mb",
            "mem_vs_reference", "reference_ms", "params",
            # each head's own floor: a roofline of its products, plus its update's bytes (own_floors)
            "own_floor_ms", "own_update_floor_ms", "own_adam_floor_ms", "own_eval_floor_ms", "train_vs_own",
            "update_vs_own", "adam_vs_own", "eval_vs_own", "torch_sparse_adam_ms", "touched", "train_flop",
            "eval_flop", "gemm_gflops", "bandwidth_gbs"]
    cols += [c for c in df.columns if c.startswith("lce_")]  # the library peer, where PyTorch has it
    df = df[cols]
    out = paths.bench_path(params)
    with atomic_path(out) as tmp:
        df.to_csv(tmp, index=False)
    write_json(out.with_suffix(".json"), {"tokens": n, "dim": d, "repeats": repeats, "device": str(device),
                                          "threads": torch.get_num_threads(), "torch": torch.__version__,
                                          "huge_pages": huge_pages(), "quick": quick, "bench": b, "bench_csv_sha256": sha256_of(out),
                                          "methods": {m: params["methods"][m] for m in b["methods"]}})
    print(f"N = {n} rows, d = {d}, {device}, {torch.get_num_threads()} threads; times are medians of {repeats}")
    print(df.to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    return df
