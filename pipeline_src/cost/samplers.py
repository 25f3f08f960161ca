"""What a proposal costs and how biased the sampled softmax's gradient is under it.

``kernel_costs``: Blanc & Rendle's tree (heads/kernel_tree.py) at each vocabulary size: the time to rebuild it
from the output embeddings (its *update*), the time per draw, and its memory, beside the unigram alias
sampler's time per draw.

``gradient_bias``: for a trained model's contexts H and targets y, the full softmax's gradient g = d/dH of the
mean cross-entropy, and the mean of the sampled softmax's gradient estimate over ``reps`` independent draws of
m negatives, for each proposal and m: the relative bias ||E[g_m] - g|| / ||g|| (Blanc & Rendle 2018, fig. 2:
an adaptive proposal needs far fewer samples than a unigram one for the same bias). The mean of ``reps`` draws
carries Monte Carlo noise of about the estimate's spread / sqrt(reps); it is reported beside the bias.
"""
from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F

from ..heads import HeadContext, build_head
from ..heads.kernel_tree import KernelTree
from ..heads.sampling import AliasSampler
from .bench import time_fn, zipf_counts


def kernel_costs(vocab_sizes: list[int], dim: int, positions: int, draws: int, bucket_size: int, alpha: float,
                 device: torch.device, repeats: int = 3) -> pd.DataFrame:
    rows = []
    for v in vocab_sizes:
        g = torch.Generator().manual_seed(0)
        w = (torch.randn(v, dim, generator=g) * 0.1).to(device)
        h = torch.randn(positions, dim, generator=g).to(device)
        tree = KernelTree(alpha, bucket_size)
        build_ms = time_fn(lambda: tree.build(w), device, repeats, 1)
        sample_ms = time_fn(lambda: tree.sample(h, draws), device, repeats, 1)
        alias = AliasSampler(zipf_counts(v).double()).to(device)
        alias_ms = time_fn(lambda: alias.sample((positions * draws,)), device, repeats, 1)
        n = positions * draws
        rows.append({"vocab": v, "dim": dim, "bucket_size": bucket_size, "levels": len(tree.levels) - 1,
                     "rebuild_ms": build_ms, "draws": n, "sample_ms": sample_ms, "us_per_draw": 1e3 * sample_ms / n,
                     "unigram_us_per_draw": 1e3 * alias_ms / n, "tree_mb": tree.bytes() / 2**20})
        print(f"kernel tree V={v}: rebuild {build_ms:.1f} ms, {rows[-1]['us_per_draw']:.2f} us/draw", file=sys.stderr)
    return pd.DataFrame(rows)


def _full_gradient(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    h = h.detach().clone().requires_grad_()
    F.cross_entropy(F.linear(h, weight, bias), y).backward()
    return h.grad


def gradient_bias(h: torch.Tensor, y: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, counts: torch.Tensor,
                  proposals: dict[str, dict], sizes: list[int], reps: int, seed: int = 0) -> pd.DataFrame:
    """Relative bias of the sampled softmax's gradient with respect to the contexts, per proposal and m."""
    v, d = weight.shape
    g = _full_gradient(h, weight, bias, y)
    rows = []
    for name, spec in proposals.items():
        for m in sizes:
            # one tree for all reps: the weights do not change between them (refresh_every: only the kernel's)
            head = build_head({**spec, "type": "sampled-softmax", "negatives": m, "sparse": False,
                               "refresh_every": reps + 1},
                              HeadContext(vocab_size=v, in_dim=d, unigram_counts=counts)).double()
            with torch.no_grad():
                head.weight.copy_(weight)
                head.bias_col.copy_(bias[:, None])
            torch.manual_seed(seed)
            total, sq = torch.zeros_like(g), 0.0
            for _ in range(reps):
                x = h.detach().clone().requires_grad_()
                head.loss(x, y).backward()
                total += x.grad
                sq += float((x.grad - g).pow(2).sum())
            mean = total / reps
            spread = math.sqrt(max(sq / reps - float((mean - g).pow(2).sum()), 0.0))
            rows.append({"proposal": name, "m": m, "bias": float((mean - g).norm() / g.norm()),
                         "noise": spread / math.sqrt(reps) / float(g.norm()), "reps": reps, "positions": len(y)})
            print(f"bias {name} m={m}: {rows[-1]['bias']:.4f} (noise {rows[-1]['noise']:.4f})", file=sys.stderr)
    return pd.DataFrame(rows)


def model_contexts(model_path: Path, prepared: Path, positions: int, device: torch.device):
    """A trained run's contexts H (N, d) and targets y (N,) on the start of the validation split, its output
    layer's W and b, and the train counts."""
    import numpy as np

    from ..data.batching import batchify
    from ..data.prepare import load_split
    from ..io import paths
    from ..training.checkpoints import load_torch
    from ..training.step import build_model

    ckpt = load_torch(model_path, device, "train the run with keep_models: true")
    model = build_model(ckpt["config"], prepared).to(device)
    model.load_state_dict(ckpt["model"])
    model.eval()
    width = max(1, -(-positions // 35))  # columns of 35 positions enough to hold ``positions``
    data = batchify(load_split(prepared, "valid"), width, device)[:36]
    with torch.no_grad():
        out, _ = model.encoder(data[:-1], model.init_state(width, device))
    h = out.reshape(-1, out.shape[-1])[:positions].double()  # the estimates in float64
    y = data[1:].reshape(-1)[:positions]
    head = model.head
    if not hasattr(head, "weight") or getattr(head, "bias", None) is None:
        raise ValueError(f"{model_path}: the bias curve needs a head with one output embedding and bias (softmax)")
    counts = torch.from_numpy(np.load(prepared / paths.NOISE)["counts"])
    return h, y, head.weight.detach().double(), head.bias.detach().double(), counts


def _check_proposal(params: dict, flag: str, method: str, sampler: str) -> None:
    """``method`` is a sampled softmax of the params file drawing from ``sampler``: a bench of any other method
    would time the kernel's defaults (or the unigram's) under its name."""
    from ..config import ConfigError

    opts = params["methods"].get(method)
    if opts is None or opts.get("type") != "sampled-softmax" or opts.get("sampler", "unigram") != sampler:
        what = "no method of the params file" if opts is None else \
            f"type {opts.get('type')}" + (f", sampler {opts.get('sampler', 'unigram')}"
                                          if opts.get("type") == "sampled-softmax" else "")
        fits = sorted(m for m, o in params["methods"].items()
                      if o.get("type") == "sampled-softmax" and o.get("sampler", "unigram") == sampler)
        raise ConfigError(f"bench-samplers {flag} {method}: {what}, not a sampled softmax with sampler {sampler}; "
                          f"the params file's: {', '.join(fits) or 'none'}")


def run_sampler_bench(params: dict, device: torch.device, args) -> list[pd.DataFrame]:
    """``bench-samplers``: the kernel proposal's costs at ``bench.vocab_sizes`` (sampler-costs.csv), and with
    ``args.model`` the gradient's bias of the unigram and kernel proposals on that model (sampler-bias.csv)."""
    from ..data.checks import check_prepared
    from ..heads.sampled_softmax import SampledSoftmax
    from ..io import paths
    from ..io.atomic import atomic_path

    _check_proposal(params, "--kernel", args.kernel, "quadratic-kernel")
    if args.model:
        _check_proposal(params, "--unigram", args.unigram, "unigram")
    kernel = {**dataclasses.asdict(SampledSoftmax.Options()), **params["methods"][args.kernel]}
    b = params["bench"]
    costs = kernel_costs(b["vocab_sizes"], b["dim"] + kernel["kernel_bias"], args.positions, kernel["negatives"],
                         kernel["bucket_size"], kernel["kernel_alpha"], device)  # its vectors: d (+ 1 for the bias)
    out = paths.sampler_costs_path(params)
    tables = [(out, costs)]
    if args.model:
        h, y, w, bias, counts = model_contexts(Path(args.model), check_prepared(params, args.dataset),
                                               args.bias_positions, device)
        proposals = {m: {k: v for k, v in params["methods"][m].items() if k not in ("type", "negatives")}
                     for m in (args.unigram, args.kernel)}
        tables.append((out.with_name("sampler-bias.csv"),
                       gradient_bias(h, y, w, bias, counts, proposals, args.sizes, args.reps)))
    for path, df in tables:
        with atomic_path(path) as tmp:
            df.to_csv(tmp, index=False)
        print(df.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
        print(f"wrote {path}")
    return [df for _, df in tables]
