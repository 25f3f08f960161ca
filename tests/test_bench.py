import pandas as pd
import pytest
import torch

from pipeline_src.cost.bench import peak_bytes, peak_from_events, run_bench, time_fn
from pipeline_src.io import paths

CPU = torch.device("cpu")


def test_peak_bytes_sees_a_known_allocation():
    def alloc():
        x = torch.ones(1_000_000)  # 4 MB alive at once with y
        y = torch.ones(500_000)
        del x, y

    got = peak_bytes(alloc, CPU)
    assert 6_000_000 <= got <= 6_500_000


def test_peak_from_profiler_events_is_a_running_sum_in_time_order():
    """The old rule (first event's total minus its bytes as the base) gave a negative peak when the
    trace's first event was not the earliest, or was a free of memory allocated before the step."""
    ev = lambda ts, b, total: {"ts": ts, "args": {"Bytes": b, "Total Allocated": total}}  # noqa: E731
    events = [ev(1, -500, 700), ev(2, 100, 800), ev(3, -100, 700)]  # frees 500 left by an earlier call first
    old = max(e["args"]["Total Allocated"] for e in events) - (events[0]["args"]["Total Allocated"] -
                                                                events[0]["args"]["Bytes"])
    assert old == -400 and peak_from_events(events) == 0  # frees, then a smaller allocation: nothing extra
    assert peak_from_events([ev(3, -400, 300), ev(1, 400, 400), ev(2, 300, 700)]) == 700  # trace out of order


def test_every_heads_step_peak_is_positive(tiny):
    from pipeline_src.config import validate
    from pipeline_src.cost.bench import bench_one

    p = validate(tiny)
    for name, spec in {**p["methods"], "neglm-b": {"type": "neglm-b", "negatives": 20},
                       "sampled-softmax": {"type": "sampled-softmax", "negatives": 20}}.items():
        r = bench_one(name, spec, 300, 64, 16, CPU, repeats=1, warmup=1)
        assert r["peak_mem_mb"] > 0, name


def test_the_library_peer_is_exact_and_in_the_table(tiny):
    import pandas as pd
    import torch.nn.functional as F

    from pipeline_src.reporting.bench_tables import bench_markdown

    df = run_bench(tiny, CPU)
    if not hasattr(F, "linear_cross_entropy"):  # PyTorch before 2.13: no peer, no columns
        assert not [c for c in df.columns if c.startswith("lce_")]
        return
    r = df.iloc[0]
    assert r.lce_auto_ms > 0 and r.lce_chunk256_ms > 0 and r.lce_auto_peak_mem_mb > 0
    assert r.lce_auto_loss_error < 1e-5 and r.lce_chunk256_loss_error < 1e-5  # the same loss as F.cross_entropy
    table = bench_markdown(pd.DataFrame(df))
    assert "F.linear_cross_entropy, auto" in table and table.strip().splitlines()[-1].startswith("| 50 |")


def test_a_ratio_far_below_the_floor_keeps_two_significant_digits():
    """A sampled step at 1M words is 0.00057 of the softmax's floor: two decimals wrote it as 0.00."""
    from pipeline_src.reporting.style import fmt_ratio

    assert [fmt_ratio(x) for x in (1.0834, 0.1, 0.0999, 0.000575, float("nan"))] == ["1.08", "0.10", "0.1", "0.00057", "—"]


def test_time_fn_returns_a_median_in_ms(monkeypatch):
    import pipeline_src.cost.bench as bench

    now = [0.0]  # a clock each call advances by its own duration: no sleeping, so a busy machine cannot move it
    monkeypatch.setattr(bench.time, "perf_counter", lambda: now[0])
    durations = iter([0.5, 0.001, 0.02, 0.002])  # a warmup call, then a median of 2 ms (the mean is 7.7 ms)

    def fn():
        now[0] += next(durations)

    assert time_fn(fn, CPU, repeats=3, warmup=1) == pytest.approx(2.0)


def test_bench_table(tiny, capsys):
    df = run_bench(tiny, CPU)
    assert list(df.vocab) == [50] and list(df.method) == ["softmax"]
    row = df.iloc[0]
    assert row.train_ms > 0 and row.floor_ms > 0
    assert row.train_vs_floor == row.train_ms / row.floor_ms
    assert row.params == 50 * 8 + 50
    assert 0 < row.peak_mem_mb and 0 < row.reference_peak_mem_mb
    out = capsys.readouterr().out
    assert "train_vs_floor" in out and "softmax" in out
    written = pd.read_csv(paths.bench_path(tiny))
    assert list(written.method) == ["softmax"] and written.train_ms.iloc[0] == pytest.approx(row.train_ms)


def test_own_floor_is_the_heads_flops_and_its_updates_bytes(tiny):
    """The own floor recomputes from the row's recorded FLOPs, touched elements, GEMM rate and bandwidth;
    the softmax touches every element of its head, a sampled head only its target and negative rows."""
    from pipeline_src.cost.bench import UPDATE_BYTES, bench_one, own_floors

    df = run_bench(tiny, CPU)
    r = df.iloc[0]
    assert r.touched == 50 * 8 + 50  # softmax: all of W and b
    assert r.train_flop == pytest.approx(2 * 3 * 50 * 8 * tiny["bench"]["tokens"])  # three (N, V, d) products
    gemm, bw = r.gemm_gflops * 1e9, r.bandwidth_gbs * 1e9
    assert r.own_floor_ms == pytest.approx(1e3 * max(r.train_flop / gemm, r.touched * 12 / bw))  # a roofline
    assert r.own_adam_floor_ms == pytest.approx(r.own_floor_ms + 1e3 * r.touched * UPDATE_BYTES["adam"] / bw)
    assert r.adam_vs_own == pytest.approx(r.adam_ms / r.own_adam_floor_ms)
    got = bench_one("ss", {"type": "sampled-softmax", "negatives": 7, "sampler": "uniform", "replacement": False},
                    300, 20, 16, CPU, repeats=1, warmup=0)
    assert 8 * 17 <= got["touched"] <= (7 + 20) * 17  # the 7 negatives' and the targets' rows (d + bias each)
    own = own_floors({**got, "train_ms": 1.0, "update_ms": 1.0, "adam_ms": 1.0, "eval_ms": 1.0}, 1e15, 1e9)
    assert own["own_floor_ms"] == pytest.approx(1e3 * got["touched"] * 12 / 1e9)  # memory-bound at this rate
    assert own["own_update_floor_ms"] - own["own_floor_ms"] == pytest.approx(1e3 * got["touched"] * 12 / 1e9)


def test_the_own_floor_table_drops_the_sparse_adam_column_where_no_head_was_timed_against_it():
    """A column whose every cell is empty is no column (the compare card's bench had only dense heads)."""
    from pipeline_src.reporting.bench_tables import own_floor_markdown

    row = dict(vocab=2000, method="softmax", own_floor_ms=11.38, train_vs_own=1.01, update_vs_own=1.02,
               adam_vs_own=2.28, eval_vs_own=2.7, touched=402000, adam_ms=3.0, torch_sparse_adam_ms=float("nan"))
    dense = own_floor_markdown(pd.DataFrame([row]))
    assert "SparseAdam" not in dense and dense.splitlines()[2].count("|") == 9  # 8 columns
    sparse = own_floor_markdown(pd.DataFrame([row, {**row, "method": "hierarchical-softmax", "torch_sparse_adam_ms": 5.0}]))
    assert "Adam (ms): ours / torch's SparseAdam" in sparse and "| 3.0 / 5.0 |" in sparse
    assert sparse.splitlines()[2].endswith("| 402,000 |  |")  # the dense head's cell stays empty in that column
