"""Equal budgets (pipeline_src/training/budget.py): a run stops at its budget of tokens or training seconds,
validates at fixed fractions of it, keeps validation out of the budget, resumes with its accounting, and a
time budget replays as the token budget it reached, to the same model."""
import copy
import json
import math

import pytest
import torch
from conftest import ROOT

from pipeline_src.config import ConfigError, run_config, validate
from pipeline_src.training.loop import train

CPU = torch.device("cpu")


def _cfg(p, **training):
    cfg = run_config(p, "tiny", "softmax")
    cfg["training"].update(epochs=50, **training)
    return cfg


def _weights(path):
    return torch.load(path / "model.pt", weights_only=False)["model"]


def test_a_token_budget_stops_at_the_step_that_reaches_it_and_draws_its_anytime_curve(tiny_data, tmp_path, capsys):
    p, raw, prep = tiny_data
    tokens_per_step = 8 * 10
    s = train(_cfg(p, budget_tokens=2000, anytime_points=4, valid_tokens=400), prep, tmp_path / "run", CPU)
    err = capsys.readouterr().err  # the console shows the budget's progress, not "epoch 1/50" of a mere bound
    assert "budget of 2,000 tokens" in err and "epoch 1/" not in err
    reached = s["budget"]["reached"]
    assert reached["tokens"] == math.ceil(2000 / tokens_per_step) * tokens_per_step  # the step that reaches it
    assert s["budget"]["spent"] and s["epochs"] == 50 and len(s["budget"]["anytime"]) == 4
    fractions = [pt["tokens"] / 2000 for pt in s["budget"]["anytime"]]
    for k, f in enumerate(fractions, start=1):  # each point at the first step past k/4 of the budget
        assert k / 4 <= f < k / 4 + tokens_per_step / 2000
    assert (tmp_path / "run/anytime.csv").read_text().splitlines()[0].startswith("point,fraction,train_seconds,tokens")
    # the anytime points validate on the fixed subset: the last one is the model's state at the end
    assert s["budget"]["anytime"][-1]["valid_nll"] == pytest.approx(s["last_valid_nll"], abs=1e-12)
    # summarize's anytime.csv rows: one per point, keyed by the run
    from pipeline_src.reporting.rows import anytime_rows
    rows = anytime_rows({**s, "dataset": "tiny", "method": "softmax"})
    assert [(r["point"], r["tokens"], r["valid_nll"]) for r in rows] == \
        [(p["point"], p["tokens"], p["valid_nll"]) for p in s["budget"]["anytime"]]
    assert {(r["dataset"], r["method"], r["seed"]) for r in rows} == {("tiny", "softmax", s["seed"])}


def test_points_at_equal_data_validate_after_the_step_that_reaches_each_epoch_count(tiny_data, tmp_path):
    """``anytime_epochs``: a validation at the first step whose tokens reach 0.5, 1 and 2 epochs of train; the
    1-epoch point is the model that ends the first epoch, validated on the same subset as the epoch's own."""
    from pipeline_src.data.prepare import load_split
    from pipeline_src.reporting.rows import anytime_rows

    p, raw, prep = tiny_data
    tokens_per_step = 8 * 10
    epoch = (len(load_split(prep, "train")) // 8 - 1) * 8  # the tokens one epoch scores (batch 8)
    s = train(_cfg(p, budget_tokens=3 * epoch, anytime_points=2, anytime_epochs=[2, 0.5, 1], valid_tokens=400),
              prep, tmp_path / "run", CPU)
    pts = s["budget"]["token_points"]
    assert [pt["epochs"] for pt in pts] == [0.5, 1, 2]
    for pt in pts:
        assert pt["epochs"] * epoch <= pt["tokens"] < pt["epochs"] * epoch + tokens_per_step
    first = (tmp_path / "run/history.csv").read_text().splitlines()
    valid_nll = float(first[1].split(",")[first[0].split(",").index("valid_nll")])  # epoch 1's own validation
    assert pts[1]["tokens"] == epoch and pts[1]["valid_nll"] == pytest.approx(valid_nll, abs=1e-12)
    rows = anytime_rows({**s, "dataset": "tiny", "method": "softmax"})
    assert [r["epochs"] for r in rows if r["point"] is None] == [0.5, 1, 2]
    assert len([r for r in rows if r["point"] is not None]) == 2  # the anytime curve's points stay as they were


def test_a_time_budget_keeps_validation_out_and_replays_as_the_tokens_it_reached(tiny_data, tmp_path, monkeypatch):
    import time

    from pipeline_src.training.start import Run

    p, raw, prep = tiny_data
    real = Run.validate

    def slow(self):  # validation that costs time: it must not be charged to the budget
        time.sleep(0.15)
        return real(self)

    monkeypatch.setattr(Run, "validate", slow)
    timed = train(_cfg(p, budget_seconds=0.6, anytime_points=3), prep, tmp_path / "timed", CPU)
    b = timed["budget"]
    assert b["reached"]["seconds"] >= 0.6 and b["validation_s"] >= 3 * 0.15
    assert timed["wall_time_s"] >= b["reached"]["seconds"] + 3 * 0.15  # validation ran beside the budget
    monkeypatch.setattr(Run, "validate", real)
    replay = train(_cfg(p, budget_tokens=b["reached"]["tokens"]), prep, tmp_path / "replay", CPU)
    assert replay["budget"]["reached"]["tokens"] == b["reached"]["tokens"]
    assert replay["budget"]["reached"]["steps"] == b["reached"]["steps"]
    a, r = _weights(tmp_path / "timed"), _weights(tmp_path / "replay")
    assert all(torch.equal(a[k], r[k]) for k in a)  # the same model, bit for bit
    assert replay["best_valid_nll"] == timed["best_valid_nll"]


def test_a_budgeted_run_resumes_with_its_accounting(tiny_data, tmp_path):
    p, raw, prep = tiny_data
    cfg = _cfg(p, budget_tokens=3000, anytime_points=5)
    whole = train(cfg, prep, tmp_path / "whole", CPU)
    assert train(cfg, prep, tmp_path / "paused", CPU, stop_after_steps=17) is None  # mid-epoch, mid-budget
    resumed = train(cfg, prep, tmp_path / "paused", CPU)
    assert resumed["budget"]["reached"] == {**whole["budget"]["reached"], "seconds": resumed["budget"]["reached"]["seconds"]}
    keep = ("point", "tokens", "steps", "valid_nll")
    assert [{k: pt[k] for k in keep} for pt in resumed["budget"]["anytime"]] == \
        [{k: pt[k] for k in keep} for pt in whole["budget"]["anytime"]]
    a, r = _weights(tmp_path / "whole"), _weights(tmp_path / "paused")
    assert all(torch.equal(a[k], r[k]) for k in a)


def test_a_time_budgeted_run_resumes_only_on_a_machine_like_the_first(tiny_data, tmp_path, monkeypatch):
    """Its remaining seconds would buy other tokens elsewhere: a resume on other kernels is refused in one line;
    on the same machine it goes on, and its record lists every call's probe."""
    from pipeline_src.io.errors import ResumeError
    from pipeline_src.io.runtime import PROBE
    from pipeline_src.reporting.machine import timed_record
    from pipeline_src.training import start  # where a call's machine is probed

    p, raw, prep = tiny_data
    cfg = _cfg(p, budget_seconds=0.5, anytime_points=1, budget_clock="cpu")
    monkeypatch.setattr(start, "gemm_gflops", lambda clock: 60.0)
    assert train(cfg, prep, tmp_path / "run", CPU, stop_after_steps=5) is None
    first = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=False)["state"]["machines"]
    assert first == [{"kernels": torch.backends.cpu.get_cpu_capability(), "gemm_gflops": 60.0}]
    monkeypatch.setattr(start, "kernels", lambda device: "OTHER")  # the next session lands on another machine
    with pytest.raises(ResumeError, match=rf"started on {first[0]['kernels']} kernels and would resume on OTHER: its "
                                          r"remaining seconds would buy other tokens"):
        train(cfg, prep, tmp_path / "run", CPU)
    monkeypatch.undo()
    monkeypatch.setattr(start, "gemm_gflops", lambda clock: 30.0)  # the same kernels, half the speed: resumed, recorded
    done = train(cfg, prep, tmp_path / "run", CPU)
    assert done["environment"]["gemm_probe"] == PROBE and done["budget"]["reached"]["seconds"] >= 0.5
    assert [c["gemm_gflops"] for c in done["environment"]["calls"]] == [60.0, 30.0]
    assert timed_record("tiny/softmax/seed0", done).probes == (60.0, 30.0)  # summarize holds both to the rest


def test_budget_keys_are_checked_and_leave_every_earlier_hash_alone(tiny):
    from pipeline_src.config import run_hash

    p = validate(copy.deepcopy(tiny))
    before = run_hash(run_config(p, "tiny", "softmax"))
    p["training"]["budget_tokens"] = None  # a key at its default is not part of the run
    assert run_hash(run_config(p, "tiny", "softmax")) == before
    for bad, match in (({"budget_tokens": 10, "budget_seconds": 1.0}, "one budget"),
                       ({"anytime_points": 5}, r"anytime_points.*only acts with budget_seconds, budget_tokens \(or "
                                               r"budget_tokens_by_method\) or a ladder"),
                       # the third probe: accepted by check-config, then ignored (anytime_epochs) or refused by
                       # every train (budget_points)
                       ({"anytime_epochs": [0.5, 1]}, r"'training.anytime_epochs' \(dataset tiny\): set to \[0.5, 1\], "
                                                      r"but it only acts with budget_seconds"),
                       ({"budget_points": [0.5, 1, 2], "budget_seconds": 1.0},
                        r"'training.budget_points'.*only acts with a token budget: budget_tokens or "
                        r"budget_tokens_by_method")):
        q = copy.deepcopy(tiny)
        q["datasets"]["tiny"]["training"].update(bad)
        with pytest.raises(ConfigError, match=match):
            validate(q)
    q = copy.deepcopy(tiny)  # a budget per method is a budget: its anytime curve is read
    q["datasets"]["tiny"]["training"].update(anytime_points=5, budget_tokens_by_method={"softmax": 800})
    assert run_config(validate(q), "tiny", "softmax")["training"]["budget_tokens"] == 800


def test_a_cpu_clock_budget_counts_this_process_s_cpu_time_not_time_spent_waiting(tiny_data, tmp_path, monkeypatch):
    """Under ``budget_clock: cpu`` a step that waits (here: sleeps, as a step does when other work holds
    the core) costs only the CPU it used, so the run takes more steps for the same budget than under the
    wall clock, and its recorded seconds are CPU seconds. One thread, as the pipeline runs it: idle OpenMP
    threads spinning would be CPU time too."""
    import time

    from pipeline_src.config import TrainConfig
    from pipeline_src.training import budget, epoch

    p, raw, prep = tiny_data
    real = epoch.train_step

    def waiting(*a, **k):
        time.sleep(0.02)
        return real(*a, **k)

    monkeypatch.setattr(epoch, "train_step", waiting)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        wall = train(_cfg(p, budget_seconds=0.3, anytime_points=1), prep, tmp_path / "wall", CPU)
        t0 = time.perf_counter()
        cpu = train(_cfg(p, budget_seconds=0.3, anytime_points=1, budget_clock="cpu"), prep, tmp_path / "cpu", CPU)
        elapsed = time.perf_counter() - t0
    finally:
        torch.set_num_threads(threads)
    w, c = wall["budget"]["reached"], cpu["budget"]["reached"]
    assert w["steps"] <= 0.3 / 0.02 + 1  # the wall clock charges the waits: at most 16 steps
    assert c["steps"] > 2 * w["steps"] and c["seconds"] >= 0.3
    assert elapsed >= c["steps"] * 0.02 > c["seconds"]  # the waits were not charged
    tc = TrainConfig(**{**run_config(p, "tiny", "softmax")["training"], "budget_clock": "cpu"})
    with pytest.raises(ConfigError, match="key 'training.budget_clock': 'cpu' .* on cuda"):
        budget.step_clock(tc, torch.device("cuda"))


def test_a_time_budget_frozen_per_method_is_that_method_s_token_budget_alone(tiny_data, tmp_path, monkeypatch):
    """training.budget_tokens_by_method: a listed method's runs stop after the step that reaches its tokens (the
    same run on any machine: two runs give the same weights), the others keep the time budget, and one method's
    number moves no other method's hash; freeze-budgets prints the block from a publication's runs."""
    import pandas as pd
    import yaml

    from pipeline_src.config import run_hash

    p, raw, prep = tiny_data
    p = copy.deepcopy(p)
    p["methods"]["nce"] = {"type": "nce", "negatives": 5}
    p["datasets"]["tiny"]["training"].update(budget_seconds=30.0, epochs=50,
                                             budget_tokens_by_method={"softmax": 1600})
    p = validate(p)
    soft, nce = run_config(p, "tiny", "softmax"), run_config(p, "tiny", "nce")
    assert soft["training"]["budget_tokens"] == 1600 and "budget_seconds" not in soft["training"]
    assert nce["training"]["budget_seconds"] == 30.0 and "budget_tokens_by_method" not in nce["training"]
    other = copy.deepcopy(p)
    other["datasets"]["tiny"]["training"]["budget_tokens_by_method"] = {"softmax": 1600, "nce": 800}
    assert run_hash(run_config(other, "tiny", "softmax")) == run_hash(soft)  # softmax's number alone makes it
    runs = [train(soft, prep, tmp_path / f"run{i}", CPU) for i in (0, 1)]
    assert runs[0]["budget"]["reached"]["tokens"] == runs[1]["budget"]["reached"]["tokens"] == 1600
    a, b = _weights(tmp_path / "run0"), _weights(tmp_path / "run1")
    assert all(torch.equal(a[k], b[k]) for k in a)
    bad = copy.deepcopy(p)
    bad["datasets"]["tiny"]["training"]["budget_tokens_by_method"] = {"nope": 10}
    with pytest.raises(ConfigError, match=r"training.budget_tokens_by_method.nope .*not defined under 'methods'"):
        validate(bad)
    # freeze-budgets: each method's mean tokens over its seeds, in whole steps (batch 8 x bptt 10 here)
    import pipeline_src.reporting.publish as pub
    from pipeline_src.records.budgets import frozen_budgets

    out = tmp_path / "benchmarks" / "calib"
    out.mkdir(parents=True)
    monkeypatch.setattr(pub, "BENCHMARKS", tmp_path / "benchmarks")
    pd.DataFrame({"dataset": "tiny", "method": ["softmax", "softmax", "nce"], "split": "test", "seed": [0, 1, 0],
                  "tokens_reached": [1600, 1680, 8000], "budget_seconds": 30.0}).to_csv(out / "summary.csv", index=False)
    p["run"]["seeds"] = [0, 1]  # the seeds of its rows (a publication's rows are of its run seeds)
    (out / "provenance.json").write_text(json.dumps({"params": p, "commit": "abc" * 14, "cpu_model": "a CPU",
                                                      "published": "2026-11-26"}))
    text = frozen_budgets("calib")
    assert "a CPU" in text and "tokens/s: softmax 56, nce 267" in text
    assert yaml.safe_load(text) == {"datasets": {"tiny": {"training": {"budget_calibration": "benchmarks/calib",
                                                                        "budget_tokens_by_method":
                                                                        {"softmax": 1680, "nce": 8000}}}}}


def test_the_default_run_s_large_vocabulary_half_trains_frozen_tokens_with_its_calibration_stated():
    """params.yaml: every zipf-5k method has a frozen token budget (the same steps on any machine, no time
    budget left), none of it in a run's hash but its own number, and the calibration it came from is what
    the report states (the publication's machine, date and each method's tokens/s)."""
    from pipeline_src.config import load, run_config, run_hash, train_config
    from pipeline_src.reporting.calibration import calibrations

    p = load(str(ROOT / "params.yaml"))
    tc = train_config(p, "zipf-5k")
    methods = p["run"]["extra"]["methods"]
    assert set(tc.budget_tokens_by_method) == set(methods)
    for m in methods:
        t = run_config(p, "zipf-5k", m)["training"]
        assert t["budget_tokens"] == tc.budget_tokens_by_method[m] and t.get("budget_seconds") is None
        assert "budget_calibration" not in t and "budget_tokens_by_method" not in t
    cal = calibrations(p)["zipf-5k"]
    assert cal["publication"] == "benchmarks/default-calibration" and cal["seconds"] == tc.budget_seconds
    for m in methods:
        assert cal["tokens_per_s"][m] == pytest.approx(tc.budget_tokens_by_method[m] / tc.budget_seconds)
    moved = copy.deepcopy(p)
    moved["datasets"]["zipf-5k"]["training"]["budget_calibration"] = "benchmarks/elsewhere"
    assert run_hash(run_config(moved, "zipf-5k", "nce")) == run_hash(run_config(p, "zipf-5k", "nce"))
    # ... but it must name a publication: the third probe's `benchmarks/nosuch` was refused only by summarize,
    # after every run had trained
    with pytest.raises(ConfigError, match=r"'training.budget_calibration' \(dataset zipf-5k\): benchmarks/elsewhere "
                                          r"is no publication \(no provenance.json\)"):
        validate(moved)
    alone = copy.deepcopy(moved)  # the fourth probe: without frozen tokens it was not checked at all
    alone["datasets"]["zipf-5k"]["training"]["budget_tokens_by_method"] = {}
    with pytest.raises(ConfigError, match=r"'training.budget_calibration' \(dataset zipf-5k\): benchmarks/elsewhere "
                                          r"is no publication"):
        validate(alone)


def test_one_long_run_gives_every_shorter_budget_to_the_bit_across_an_interruption(tiny_data, tmp_path):
    """``training.budget_points``: the run trains to the largest multiple of its token budget and keeps its weights
    at the step that first reaches each one. The schedule never reads the budget (the learning rate changes at
    epoch ends; anytime validations change nothing), so the weights kept at 1x are, bit for bit, those of a run
    whose budget is 1x, here through an epoch end (a plateau step) and an interruption of the long run before 1x;
    evaluate's test score of each point is that of ``evaluate`` on the same weights."""
    from pipeline_src.data.prepare import load_split
    from pipeline_src.evaluation.evaluate import evaluate
    from pipeline_src.evaluation.run import score_snapshots
    from pipeline_src.training.step import build_model

    p, raw, prep = tiny_data
    epoch = (len(load_split(prep, "train")) // 8 - 1) * 8
    unit = int(1.5 * epoch) + 7  # not a multiple of a step's 80 tokens, past the first epoch's end
    long_p = copy.deepcopy(p)
    long_p["datasets"]["tiny"].setdefault("training", {}).update(budget_tokens=unit, budget_points=[3, 0.25, 1])
    long_cfg = run_config(long_p, "tiny", "softmax")
    assert long_cfg["training"]["budget_tokens"] == 3 * unit
    assert long_cfg["training"]["snapshots"] == [[0.25, round(unit / 4)], [1.0, unit], [3.0, 3 * unit]]
    long_cfg["training"].update(epochs=50, keep="last", anytime_points=5, valid_tokens=400, lr_decay=2.0)
    assert train(long_cfg, prep, tmp_path / "long", CPU, stop_after_steps=unit // 80 // 2) is None  # interrupted
    s = train(long_cfg, prep, tmp_path / "long", CPU)  # resumed from its checkpoint
    kept = s["budget"]["snapshots"]
    assert [k["multiple"] for k in kept] == [0.25, 1.0, 3.0]
    for k, target in zip(kept, (round(unit / 4), unit, 3 * unit)):
        assert target <= k["tokens"] < target + 80  # the step that first reaches it
    short_cfg = run_config(p, "tiny", "softmax")
    short_cfg["training"].update(epochs=50, keep="last", budget_tokens=unit, anytime_points=3, valid_tokens=400,
                                 lr_decay=2.0)
    short = train(short_cfg, prep, tmp_path / "short", CPU)
    assert short["budget"]["reached"]["tokens"] == kept[1]["tokens"]
    one_x = torch.load(tmp_path / "long/points/1x.pt", weights_only=False)["model"]
    last = _weights(tmp_path / "short")
    assert one_x.keys() == last.keys() and all(torch.equal(one_x[k], last[k]) for k in last)
    three_x = torch.load(tmp_path / "long/points/3x.pt", weights_only=False)["model"]
    assert all(torch.equal(three_x[k], v) for k, v in _weights(tmp_path / "long").items())  # the end is 3x
    assert not all(torch.equal(three_x[k], last[k]) for k in last)
    # test scores: each point's weights through evaluate() give the same nll as score_snapshots
    model = build_model(long_cfg, prep)
    scored = score_snapshots(tmp_path / "long", kept, model, long_cfg, long_cfg["evaluation"], prep, CPU, "retrain")
    model.load_state_dict(last)
    full = evaluate(model, short_cfg, prep, raw, CPU, argmax=False)["test"]["nll"]
    assert scored[1]["test_nll"] == pytest.approx(full, abs=1e-9) and scored[2]["test_nll"] != scored[1]["test_nll"]
    from pipeline_src.reporting.rows import anytime_rows, anytime_table
    rows = anytime_rows({**s, "budget": {**s["budget"], "snapshots": scored}, "dataset": "tiny", "method": "softmax"})
    table = anytime_table(rows)
    assert table.dropna(subset=["multiple"])[["multiple", "test_nll"]].values.tolist() == \
        [[k["multiple"], k["test_nll"]] for k in scored]
    assert "multiple" not in anytime_table([r for r in rows if r.get("multiple") is None]).columns  # old tables as they were


def test_budget_points_need_a_token_budget(tiny_data):
    p, raw, prep = tiny_data
    q = copy.deepcopy(p)
    q["datasets"]["tiny"].setdefault("training", {}).update(budget_seconds=10, budget_points=[1, 10])
    with pytest.raises(ConfigError, match=r"training.budget_points.*dataset tiny, method softmax.*has none: set "
                                          r"training.budget_tokens or training.budget_tokens_by_method.softmax"):
        run_config(q, "tiny", "softmax")


def test_freeze_settings_replays_a_publication_s_tuning_picks_without_tuning(tmp_path):
    """freeze-settings on the committed large-vocabulary sweep at 10k: each method's definition with its selected
    trial's options, training.lr_by_method with every digit of the selected rate, and the frozen token budgets;
    a params file built from the block gives each final run exactly the picked settings and 1x tokens, with no
    tuning. A tuning trial keeps its own point's rate."""
    import pandas as pd
    import yaml

    from pipeline_src.config import load
    from pipeline_src.records.budgets import frozen_settings

    text = frozen_settings("large-vocab", "zipf-10k")
    block = yaml.safe_load(text)
    picks = pd.read_csv(ROOT / "benchmarks/large-vocab/tuning.csv").query("dataset == 'zipf-10k' and selected")
    lrs = block["datasets"]["zipf-10k"]["training"]["lr_by_method"]
    assert lrs == {r.method: r.lr for r in picks.itertuples()}  # every digit
    assert block["methods"]["nce"]["negatives"] == int(picks.set_index("method").opt_negatives["nce"])
    assert block["methods"]["hierarchical-softmax"]["clustering"] == picks.set_index("method").opt_clustering[
        "hierarchical-softmax"]
    tokens = block["datasets"]["zipf-10k"]["training"]["budget_tokens_by_method"]
    summary = pd.read_csv(ROOT / "benchmarks/large-vocab/summary.csv").query("dataset == 'zipf-10k' and split == 'test'")
    assert tokens["nce"] >= summary[summary.method == "nce"].tokens_reached.mean() and tokens["nce"] % (64 * 35) == 0
    params = yaml.safe_load((ROOT / "config/large-vocab.yaml").read_text())
    params.update(extends=str(ROOT / "config/large-vocab.yaml"), results_dir=str(tmp_path / "r"),
                  methods=block["methods"], tuning={"enabled": False})
    params["run"] = {**params["run"], "datasets": ["zipf-10k"], "methods": list(block["methods"])}
    params["datasets"] = {"zipf-10k": {"training": block["datasets"]["zipf-10k"]["training"]}}
    path = tmp_path / "frozen.yaml"
    path.write_text(yaml.safe_dump(params))
    p = load(str(path))
    cfg = run_config(p, "zipf-10k", "nce", seed=1)
    assert cfg["training"]["lr"] == lrs["nce"] and cfg["training"]["budget_tokens"] == tokens["nce"]
    assert cfg["method"]["negatives"] == block["methods"]["nce"]["negatives"] and "lr_by_method" not in cfg["training"]
    trial = run_config(p, "zipf-10k", "nce", seed=1, overrides={"training": {"lr": 0.05}})
    assert trial["training"]["lr"] == 0.05
    with pytest.raises(ConfigError, match=r"tuning.csv: no trial at dataset 'zipf-7k'"):
        frozen_settings("large-vocab", "zipf-7k")


@pytest.mark.parametrize("config, name, dataset", [
    ("budget-axis.yaml", "large-vocab-rerun", "zipf-10k"),
    ("budget-axis-100k.yaml", "large-vocab-rerun", "zipf-100k"),
    ("budget-axis-wt2.yaml", "wt2-budget-rerun", "wikitext-2"),
])
def test_each_budget_axis_config_runs_its_publication_s_picks_as_committed(config, name, dataset):
    """A long-run params file is freeze-settings' block of its publication, copied: each method it runs has its
    picked options, every digit of its picked rate and its frozen 1x tokens as the committed publication gives them
    now. A restated publication whose picks moved fails here until the params file is refrozen."""
    import yaml

    from pipeline_src.config import load
    from pipeline_src.records.budgets import frozen_settings

    block = yaml.safe_load(frozen_settings(name, dataset))
    p = load(str(ROOT / "config" / config))
    assert p["run"]["datasets"] == [dataset] and p["tuning"]["enabled"] is False
    frozen = block["datasets"][dataset]["training"]
    for m in p["run"]["methods"]:
        cfg = run_config(p, dataset, m, seed=1)
        picked = run_config({**p, "methods": {**p["methods"], m: block["methods"][m]}}, dataset, m, seed=1)
        assert cfg["method"] == picked["method"], m  # as run (defaults written out or left off alike)
        assert cfg["training"]["lr"] == frozen["lr_by_method"][m], m
        one_x = frozen["budget_tokens_by_method"][m]
        assert [1.0, one_x] in cfg["training"]["snapshots"], m  # 1x: the publication's frozen tokens
        assert cfg["training"]["budget_tokens"] == 10 * one_x == cfg["training"]["snapshots"][-1][1], m  # to 10x


@pytest.mark.parametrize("training, says", [
    ({"budget_tokens": 2000, "anytime_epochs": [0.5, 1000000]},
     r"'training.anytime_epochs': epoch 1e\+06 lies past training.epochs \(50\)"),
    ({"budget_tokens": 10**9, "snapshots": [[0.5, 5 * 10**8], [1.0, 10**9]]},
     r"'training.budget_points': the point 0.5x \(500,000,000 tokens\) lies past what training.epochs allows "
     r"\(50 epochs of [\d,]+ tokens: at most [\d,]+\)"),
])
def test_a_point_the_run_cannot_reach_is_refused_before_the_first_step(tiny_data, tmp_path, training, says):
    """The third probe's weak case: an anytime epoch or budget point past the run's end (1000x, or
    anytime_epochs: [1000000]) was dropped without a word; now one line before any training."""
    p, _, prep = tiny_data
    with pytest.raises(ConfigError, match=says):
        train(_cfg(p, valid_tokens=400, **training), prep, tmp_path / "run", CPU)
    assert not any((tmp_path / "run").glob("checkpoint*"))  # refused before the first step


def test_the_reachable_tokens_are_the_targets_an_epoch_scores(tiny_data, tmp_path):
    """A review's weak case: the bound was epochs x the split's tokens, but an epoch scores (rows - 1) x batch
    targets, and ``max_steps_per_epoch`` cuts it to that many segments: a point just past either was accepted,
    then dropped without a word."""
    p, _, prep = tiny_data
    from pipeline_src.data.prepare import load_split

    rows = len(load_split(prep, "train")) // 8  # batch 8, bptt 10
    for extra, most in (({}, 50 * (rows - 1) * 8), ({"max_steps_per_epoch": 2}, 50 * 2 * 10 * 8)):
        with pytest.raises(ConfigError, match=rf"at most {most:,}\)"):
            train(_cfg(p, budget_tokens=2 * most, snapshots=[[0.5, most + 8], [1.0, 2 * most]], valid_tokens=400,
                       **extra), prep, tmp_path / "run", CPU)
        assert not any((tmp_path / "run").glob("checkpoint*"))
    # a second review: an anytime epoch is a whole pass's tokens, which the cut makes unreachable within the epochs
    with pytest.raises(ConfigError, match=r"'training.anytime_epochs': epoch 2 .*max_steps_per_epoch \(2\)"):
        train(_cfg(p, budget_tokens=10**6, anytime_epochs=[2], max_steps_per_epoch=2, valid_tokens=400), prep,
              tmp_path / "run", CPU)
    # variable-length BPTT cut by max_steps_per_epoch: the bound is what the epochs' own lengths score, exactly
    def var(**training):  # 3 epochs of 2 variable-length steps each
        cfg = _cfg(p, max_steps_per_epoch=2, variable_bptt=True, valid_tokens=400, **training)
        cfg["training"]["epochs"] = 3
        return cfg

    scored = train(var(), prep, tmp_path / "var", CPU)["train_tokens"]
    with pytest.raises(ConfigError, match=rf"at most {scored:,}\)"):
        train(var(budget_tokens=2 * scored, snapshots=[[0.5, scored + 8], [1.0, 2 * scored]]), prep,
              tmp_path / "var2", CPU)
    assert train(var(budget_tokens=scored, snapshots=[[0.5, scored // 2], [1.0, scored]]), prep, tmp_path / "var3",
                 CPU)["budget"]["reached"]["tokens"] == scored  # the bound itself is reached
