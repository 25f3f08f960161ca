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


def test_peak_bytes_starts_from_the_cleared_state():
    """A step that begins by freeing the previous call's gradients measured its peak against memory it
    then freed: negative (neglm-b, V = 2000: -0.37 MB). Measured from the cleared state it is the step's."""
    old = {"grad": torch.ones(2_000_000)}  # 8 MB left by an earlier call

    def clear():
        old["grad"] = None

    def step():
        clear()
        x = torch.ones(250_000)  # 1 MB
        del x

    assert peak_bytes(step, CPU) < 0  # the old measurement's failure, reproduced
    old["grad"] = torch.ones(2_000_000)
    assert 1_000_000 <= peak_bytes(step, CPU, clear) <= 1_100_000


def test_every_heads_step_peak_is_positive(tiny):
    from pipeline_src.bench import bench_one

    from pipeline_src.config import validate

    p = validate(tiny)
    for name, spec in {**p["methods"], "neglm-b": {"type": "neglm-b", "negatives": 20},
                       "sampled-softmax": {"type": "sampled-softmax", "negatives": 20}}.items():
        r = bench_one(name, spec, 300, 64, 16, CPU, repeats=1, warmup=1)
        assert r["peak_mem_mb"] > 0, name


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
