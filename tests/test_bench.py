import torch

from pipeline_src.bench import peak_bytes, run_bench, time_fn

CPU = torch.device("cpu")


def test_peak_bytes_sees_a_known_allocation():
    def alloc():
        x = torch.ones(1_000_000)  # 4 MB alive at once with y
        y = torch.ones(500_000)
        del x, y

    got = peak_bytes(alloc, CPU)
    assert 6_000_000 <= got <= 6_500_000


def test_time_fn_returns_a_median_in_ms():
    assert time_fn(lambda: None, CPU, repeats=3, warmup=0) < 1.0


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
    assert (tiny["results_dir"] + "/bench.csv").endswith("bench.csv")
