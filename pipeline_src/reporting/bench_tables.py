"""The benches' Markdown tables (README and docs/cost.md): each head's step and evaluation against its floor, whole
training steps against their floor and the PyTorch example's, each sweep cell's step, the kernel sampler's costs and
bias, and where a step's time goes. ``tables.render_table`` picks one by the file's name."""
from __future__ import annotations

import pandas as pd

from .markdown import fmt_millions, fmt_num, markdown_table
from .style import fmt_ratio


def bench_markdown(bench: pd.DataFrame) -> str:
    """A bench table: each head's step and exact evaluation against the floor measured in the same run,
    and its step's peak memory against F.linear + F.cross_entropy's."""
    adam = "adam_ms" in bench  # benches since the Adam step and the optimizer state were timed
    cols = ["V", "method", "step (ms)", "+ update (ms)", *(["+ Adam (ms)"] if adam else []), "x floor", "eval x floor",
            "peak memory (MB)", "x F.cross_entropy's", *(["params / Adam state (MB)"] if adam else [])]

    def row(r) -> list[str]:
        cells = [f"{r.vocab:,}", r.method, f"{r.train_ms:,.1f}", f"{r.update_ms:,.1f}"]
        cells += [f"{r.adam_ms:,.1f}"] if adam else []
        cells += [fmt_ratio(r.train_vs_floor), fmt_ratio(r.eval_vs_floor), f"{r.peak_mem_mb:,.1f}", fmt_ratio(r.mem_vs_reference)]
        return cells + ([f"{r.param_mb:,.1f} / {r.adam_state_mb:,.1f}"] if adam else [])

    lines = [markdown_table(cols, (row(r) for r in bench.itertuples()))]
    if "own_floor_ms" in bench:  # benches since each head's own floor
        lines += ["", own_floor_markdown(bench).rstrip("\n")]
    if "lce_auto_ms" in bench:  # the library peer of the softmax loss, once per V
        lines += ["", "| V | step (ms): F.linear + F.cross_entropy | F.linear_cross_entropy, auto | "
                      "chunks of 256, compact | x floor (auto / 256) | peak MB (auto / 256) | loss error (auto / 256) |",
                  "|---|---|---|---|---|---|---|"]
        for r in bench.drop_duplicates("vocab").itertuples():
            lines.append(f"| {r.vocab:,} | {r.reference_ms:,.1f} | {r.lce_auto_ms:,.1f} | {r.lce_chunk256_ms:,.1f} | "
                         f"{r.lce_auto_ms / r.floor_ms:.2f} / {r.lce_chunk256_ms / r.floor_ms:.2f} | "
                         f"{r.lce_auto_peak_mem_mb:,.1f} / {r.lce_chunk256_peak_mem_mb:,.1f} | "
                         f"{r.lce_auto_loss_error:.1e} / {r.lce_chunk256_loss_error:.1e} |")
    return "\n".join(lines) + "\n"


def own_floor_markdown(bench: pd.DataFrame) -> str:
    """Each head against its own floor (cost/bench.py's own_floors): a roofline of its products (FLOPs at the GEMM
    rate measured in the run, or the bytes of the parameter elements its step touched at the measured bandwidth),
    plus for an update the bytes it moves over those elements."""
    sparse = bench.torch_sparse_adam_ms.notna().any()  # a row-sparse head timed beside torch's SparseAdam
    cols = ["V", "method", "own floor (ms)", "step x own", "+ SGD x own", "+ Adam x own", "eval x own",
            "elements touched", *(["Adam (ms): ours / torch's SparseAdam"] if sparse else [])]

    def row(r) -> list[str]:
        peer = "" if pd.isna(r.torch_sparse_adam_ms) else f"{r.adam_ms:,.1f} / {r.torch_sparse_adam_ms:,.1f}"
        return [f"{r.vocab:,}", r.method, f"{r.own_floor_ms:,.2f}", fmt_ratio(r.train_vs_own), fmt_ratio(r.update_vs_own),
                fmt_ratio(r.adam_vs_own), fmt_ratio(r.eval_vs_own), f"{int(r.touched):,}", *([peer] if sparse else [])]

    return markdown_table(cols, (row(r) for r in bench.itertuples())) + "\n"


def sampler_costs_markdown(df: pd.DataFrame) -> str:
    """The kernel proposal's tree at each V: its rebuild (the update), a draw, its memory, beside a unigram draw."""
    cols = ["V", "tree levels", "rebuild (ms)", "draws", "draws (ms)", "µs per draw", "unigram µs per draw",
            "tree (MB)"]
    return markdown_table(cols, ([f"{r.vocab:,}", str(r.levels), f"{r.rebuild_ms:,.1f}", f"{r.draws:,}",
                                  f"{r.sample_ms:,.0f}", f"{r.us_per_draw:.2f}", f"{r.unigram_us_per_draw:.3f}",
                                  f"{r.tree_mb:,.1f}"] for r in df.itertuples())) + "\n"


def sampler_bias_markdown(df: pd.DataFrame) -> str:
    """The sampled softmax's gradient bias per proposal (rows) and number of samples m (columns)."""
    sizes = sorted(df.m.unique())
    rows = [[proposal, *[f"{g.set_index('m').bias[m]:.3f} (± {g.set_index('m').noise[m]:.3f})" for m in sizes]]
            for proposal, g in df.groupby("proposal", sort=False)]
    return markdown_table(["proposal", *[f"m = {m}" for m in sizes]], rows) + "\n"


def step_bench_markdown(df: pd.DataFrame) -> str:
    """Whole training steps: the project's and the peer's against the floor measured in the same run."""
    cols = ["threads", "method", "step (ms)", "x floor", "x floor + softmax pass", "PyTorch example (ms)",
            "its x floor", "speed-up", "floor (ms): head products + LSTM", "softmax pass (ms)", "tokens/s"]
    return markdown_table(cols, ([str(r.threads), r.method, f"{r.step_ms:.1f}", f"{r.step_vs_floor:.2f}",
                                  f"{r.step_vs_floor_and_softmax:.2f}", f"{r.peer_ms:.1f}", f"{r.peer_vs_floor:.2f}",
                                  f"{r.speedup_vs_peer:.2f}", f"{r.floor_ms:.1f}: {r.head_gemm_ms:.1f} + {r.lstm_ms:.1f}",
                                  f"{r.softmax_pass_ms:.1f}", f"{r.tokens_per_s:,.0f}"] for r in df.itertuples())) + "\n"


def cell_bench_markdown(df: pd.DataFrame) -> str:
    """Each sweep cell's whole step against its own floor, and the tokens its budget buys, now and before; where
    the bench profiled a step above its goal, the operators that hold it (``held_by``, a bench from before it: no
    column)."""
    held = "held_by" in df.columns
    cols = ["V", "method", "step (ms)", "own floor (ms): LSTM + head + update", "x own floor", "tokens/s",
            "tokens in budget", "before: step (ms)", "before: tokens in budget", "speed-up"] + \
        (["held by (its operators' own time)"] if held else [])
    vocab = {"zipf-10k": "10k", "zipf-100k": "100k", "zipf-1m": "1M"}
    return markdown_table(cols, ([vocab.get(r.dataset, r.dataset), r.method, fmt_num(r.step_ms, 1),
                                  f"{r.own_floor_ms:.1f}: {r.lstm_ms:.1f} + {r.head_floor_ms:.1f} + "
                                  f"{r.update_floor_ms:.1f}",
                                  f"{r.step_vs_own:.2f}", f"{r.tokens_per_s:,.0f}", fmt_millions(r.tokens_in_budget),
                                  fmt_num(r.before_step_ms, 1), fmt_millions(r.before_tokens_in_budget),
                                  "—" if pd.isna(r.speedup_vs_before) else f"{r.speedup_vs_before:.2f}x"]
                                 + ([r.held_by if isinstance(r.held_by, str) and r.held_by else "—"] if held else [])
                                 for r in df.itertuples())) + "\n"


def step_breakdown_markdown(df: pd.DataFrame) -> str:
    """Where a step's time goes, ms per step by part of the step and kind of op, one column per method."""
    wide = df.pivot(index="part", columns="method", values="ms_per_step")
    last = ["step, profiled", "step, not profiled"]
    order = [p for p in wide.index if p not in last] + last
    return markdown_table(["part: kind of op", *wide.columns],
                          ([part, *(f"{v:.1f}" for v in wide.loc[part])] for part in order)) + "\n"
