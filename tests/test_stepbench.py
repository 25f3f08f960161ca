"""The whole-step bench: its peer is the PyTorch example's model and step, and its table and breakdown."""
import copy
import json
import re

import pytest
import torch
from conftest import write_params

from pipeline_src.config import ConfigError, TrainConfig, validate
from pipeline_src.cost.stepbench import PeerLM, peer_step_fn

CPU = torch.device("cpu")


def _sgd(tiny: dict) -> dict:
    p = copy.deepcopy(tiny)
    ds = p["datasets"]["tiny"]
    ds["training"].update({"optimizer": "sgd", "lr": 0.5})
    ds["model"]["layers"] = 2
    p["bench"]["step"] = {"dataset": "tiny", "methods": ["softmax"], "threads": [1], "steps": 2, "rounds": 1}
    return p


def test_the_peer_is_the_same_model_and_the_same_step(tiny_data):
    """Given the project's weights, the rebuilt example computes the same loss and, after one step of
    clipped SGD, the same weights: the bench compares two implementations of one algorithm."""
    from pipeline_src.config.runspec import final_config
    from pipeline_src.data.batching import batchify, segments
    from pipeline_src.data.prepare import load_split
    from pipeline_src.training.optim import build_optimizer
    from pipeline_src.training.step import build_model, train_step

    p, _, prep = tiny_data
    p = validate(_sgd(p))
    p["datasets"]["tiny"]["model"]["dropout"] = 0.0  # both deterministic
    cfg = final_config(p, "tiny", "softmax", 0)
    tc = TrainConfig(**cfg["training"])
    model = build_model(cfg, prep)
    m = cfg["model"]
    peer = PeerLM(model.head.vocab_size, m["emb_dim"], m["hidden_dim"], m["layers"], 0.0, True)
    peer.encoder.weight.data.copy_(model.encoder.embedding.weight)
    peer.decoder.bias.data.copy_(model.head.bias)
    peer.rnn.load_state_dict(model.encoder.lstm.state_dict())
    _, x, y = next(segments(batchify(load_split(prep, "train"), tc.batch_size, CPU), tc.bptt))
    state = model.init_state(tc.batch_size)
    before = model.encoder.embedding.weight.detach().clone()
    loss, new_state = train_step(model, build_optimizer(model, tc), x, y, state, tc)
    peer_state, peer_loss = peer_step_fn(peer, tc.lr, tc.clip)(x, y, tuple(s.clone() for s in state))
    for a, b in zip(new_state, peer_state):
        assert torch.allclose(a, b, atol=1e-6)
    pairs = [(model.encoder.embedding.weight, peer.encoder.weight), (model.head.bias, peer.decoder.bias),
             *zip(model.encoder.lstm.parameters(), peer.rnn.parameters())]
    for a, b in pairs:
        assert torch.allclose(a, b, atol=1e-6), "the two steps moved the weights differently"
    assert peer.decoder.weight is peer.encoder.weight  # tied, as the project's head is to its embedding
    assert peer_loss == pytest.approx(loss.item(), abs=1e-6)
    assert (model.encoder.embedding.weight - before).abs().max() > 1e-4  # the step did move the weights


def test_bench_step_writes_the_table_and_the_breakdown(tiny, tmp_path, monkeypatch):
    import pandas as pd

    from pipeline_src.cli import main
    from pipeline_src.io import paths

    cfg = write_params(_sgd(tiny), tmp_path / "p.yaml")
    for cmd in ("fetch", "prepare"):
        assert main([cmd, "--config", str(cfg), "--dataset", "tiny"]) == 0
    assert main(["bench-step", "--config", str(cfg)]) == 0
    p = validate(_sgd(tiny))
    df = pd.read_csv(paths.step_bench_path(p))
    r = df.iloc[0]
    assert (r.threads, r.method) == (1, "softmax")
    assert r.floor_ms == pytest.approx(r.head_gemm_ms + r.lstm_ms) and r.lstm_ms > 0 and r.head_gemm_ms > 0
    assert r.step_vs_floor == pytest.approx(r.step_ms / r.floor_ms)
    assert r.speedup_vs_peer == pytest.approx(r.peer_ms / r.step_ms)
    assert r.tokens_per_s == pytest.approx(8 * 10 / r.step_ms * 1e3)  # batch 8 x bptt 10 rows
    bd = pd.read_csv(paths.step_bench_path(p).with_name("step-breakdown.csv")).set_index("part").ms_per_step
    # each op lands in the part of the step it ran in: the head's products, the LSTM forward and backward
    for part in ("head: matrix products", "encoder: recurrent kernels", "backward: recurrent kernels",
                 "optimizer: other ops", "clip: other ops"):
        assert bd[part] > 0, part
    assert "head: recurrent kernels" not in bd and "encoder: matrix products" not in bd
    parts = bd.drop(["step, profiled", "step, not profiled"])
    assert parts.sum() == pytest.approx(bd["step, profiled"]) and bd["step, not profiled"] == pytest.approx(r.step_ms)
    assert r.softmax_pass_ms > 0 and r.step_vs_floor_and_softmax < r.step_vs_floor

    import pipeline_src.reporting.publish as pub
    from pipeline_src.reporting import (
        bench_tables as tables,  # published alone, with its command, both tables rendered
    )

    monkeypatch.setattr(pub, "BENCHMARKS", tmp_path / "benchmarks")
    monkeypatch.setattr(pub, "update_docs", lambda: [])
    out = pub.publish(p, cfg, "step-x")
    prov = __import__("json").loads((out / "provenance.json").read_text())
    assert prov["files"] == ["step-bench.csv", "step-bench.json", "step-breakdown.csv"]
    assert prov["command"] == f"python -m pipeline_src bench-step --config {cfg}"
    row = tables.step_bench_markdown(pd.read_csv(out / "step-bench.csv")).splitlines()[2]
    assert row.startswith("| 1 | softmax | ") and f"{r.step_vs_floor:.2f}" in row
    lines = tables.step_breakdown_markdown(pd.read_csv(out / "step-breakdown.csv")).splitlines()
    assert lines[-1].startswith("| step, not profiled |") and len(lines) == 2 + len(bd)
    p["bench"]["step"]["steps"] = 3  # the file no longer describes this config
    with pytest.raises(ConfigError, match="another bench.step"):
        pub.publish(p, cfg, "step-x")


def test_bench_step_refuses_what_the_peer_cannot_be(tiny, tmp_path, capsys):
    from pipeline_src.cli import main

    p = _sgd(tiny)
    p["datasets"]["tiny"]["training"]["optimizer"] = "adam"
    cfg = write_params(p, tmp_path / "p.yaml")
    for cmd in ("fetch", "prepare"):
        assert main([cmd, "--config", str(cfg), "--dataset", "tiny"]) == 0
    assert main(["bench-step", "--config", str(cfg)]) == 2
    assert "training.optimizer sgd" in capsys.readouterr().err
    p = _sgd(tiny)
    p["bench"]["step"]["methods"] = ["nope"]
    with pytest.raises(ConfigError, match="bench.step.methods"):
        validate(p)
    p = _sgd(tiny)
    del p["bench"]["step"]
    assert main(["bench-step", "--config", str(write_params(p, tmp_path / "q.yaml"))]) == 2
    assert "bench.step' is missing" in capsys.readouterr().err


def test_bench_cells_times_each_cell_against_the_sum_of_its_own_floor(tiny, tmp_path, monkeypatch):
    """Each cell's row recomputes: the floor is the recurrent kernels, the head's products (its declared FLOPs at
    the measured rate, or its touched elements' bytes at the measured bandwidth) and the optimizer's bytes over
    every element the step touched; the tokens its budget buys are its tokens/s times the budget. A sampled head
    touches a few rows (and the embedding becomes sparse with it); the softmax, all of its parameters."""
    import pandas as pd

    from pipeline_src.cli import main
    from pipeline_src.cost.bench import UPDATE_BYTES, products_floor_ms
    from pipeline_src.io import paths

    p = copy.deepcopy(tiny)
    p["methods"]["nce"] = {"type": "nce", "negatives": 5}
    p["datasets"]["tiny"]["training"].update(optimizer="adam", lr=0.01, budget_seconds=60)
    p["bench"]["cells"] = {"datasets": ["tiny"], "methods": ["softmax", "nce"], "rounds": 1, "min_seconds": 0.05}
    cfg = write_params(p, tmp_path / "p.yaml")
    for cmd in ("fetch", "prepare"):
        assert main([cmd, "--config", str(cfg), "--dataset", "tiny"]) == 0
    from pipeline_src.cost import cells

    monkeypatch.setattr(cells, "HELD_ABOVE", float("inf"))  # nce within its goal: not profiled; the softmax is
    monkeypatch.setattr(cells, "SOFTMAX_HELD_ABOVE", 0.0)
    assert main(["bench-cells", "--config", str(cfg)]) == 0
    df = pd.read_csv(paths.cell_bench_path(validate(p)), keep_default_na=False, na_values=[""]).set_index("method")
    held = re.findall(r"(aten::\w+) (\d+)%", df.loc["softmax", "held_by"])  # the operators that hold the step
    assert len(held) == 3 and sum(int(s) for _, s in held) <= 100
    assert [int(s) for _, s in held] == sorted((int(s) for _, s in held), reverse=True)
    assert pd.isna(df.loc["nce", "held_by"])
    soft, nce = df.loc["softmax"], df.loc["nce"]
    for r in (soft, nce):
        assert r.own_floor_ms == pytest.approx(r.lstm_ms + r.head_floor_ms + r.update_floor_ms)
        assert r.update_floor_ms == pytest.approx(1e3 * r.touched * UPDATE_BYTES["adam"] / (r.bandwidth_gbs * 1e9))
        assert r.step_vs_own == pytest.approx(r.step_ms / r.own_floor_ms)
        assert r.tokens_per_s == pytest.approx(8 * 10 / r.step_ms * 1e3)  # batch 8 x bptt 10 rows
        assert r.tokens_in_budget == pytest.approx(r.tokens_per_s * 60)
        assert r.lstm_ms > 0 and r.head_floor_ms > 0
    for r in (soft, nce):  # at least what the touched elements' bytes take (the roofline's other side)
        assert r.head_floor_ms >= products_floor_ms(0, r.head_touched, r.gemm_gflops * 1e9, r.bandwidth_gbs * 1e9)
    assert nce.head_touched < soft.head_touched and nce.touched < soft.touched  # a few rows, the embedding's too
    # the cell as training ran it before (torch's SparseAdam) beside it: the sampled head's only, the softmax has none
    assert pd.isna(soft.before_step_ms) and nce.before_step_ms > 0
    assert nce.speedup_vs_before == pytest.approx(nce.before_step_ms / nce.step_ms)
    assert nce.before_tokens_in_budget == pytest.approx(8 * 10 / nce.before_step_ms * 1e3 * 60)
    meta = json.loads((paths.prepared_dir(validate(p), "tiny") / paths.META).read_text())
    assert (df.vocab == meta["vocab_size"]).all()  # the model's |V|, for a profile's |V| reading of a real corpus


def test_the_prepared_gpu_heads_bench_runs_on_a_cpu_and_hands_back_its_table(tiny, tmp_path):
    """workflow/gpu/heads-bench.sh (issue 79, item 5), waiting for a lent GPU: the same script on a tiny cell with
    device cpu prepares the language, times each head as it is and as it was (adaptive softmax's *before* is torch's
    module) and leaves the table and its record under $OUT/heads-bench/."""
    import os
    import subprocess
    import sys

    import pandas as pd
    from conftest import ROOT

    p = copy.deepcopy(tiny)
    p["device"] = "cpu"
    p["methods"]["adaptive-softmax"] = {"type": "adaptive-softmax", "cutoffs": [10, 20]}
    p["datasets"]["tiny"]["training"].update(optimizer="adam", lr=0.01, budget_seconds=60)
    p["bench"]["cells"] = {"datasets": ["tiny"], "methods": ["softmax", "adaptive-softmax"], "rounds": 1,
                           "min_seconds": 0.05}
    cfg = write_params(p, tmp_path / "p.yaml")
    env = {**os.environ, "CONFIG": str(cfg), "DATASETS": "tiny", "OUT": str(tmp_path / "out"),
           "PYTHON": sys.executable, "PYTHONPATH": str(ROOT)}
    run = subprocess.run(["bash", str(ROOT / "workflow" / "gpu" / "heads-bench.sh")], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    back = tmp_path / "out" / "heads-bench"
    assert {f.name for f in back.iterdir()} >= {"cell-bench.csv", "cell-bench.json", "bench-cells.txt"}
    df = pd.read_csv(back / "cell-bench.csv").set_index("method")
    assert pd.isna(df.loc["softmax", "before_step_ms"]) and df.loc["adaptive-softmax", "before_step_ms"] > 0
    assert "adaptive-softmax" in (back / "bench-cells.txt").read_text()
