"""Tokens as the axis (pipeline_src/training/ladder.py, schedules.step_lr): step-level schedules computed by hand,
and a ladder of budgets in one run whose every rung's model is, bit for bit, the model of a run to that rung alone
(warmup-stable-decay with a cooldown branch per rung), however the run is interrupted."""
import copy

import pytest
import torch

from pipeline_src.config import ConfigError, TrainConfig, run_config, validate
from pipeline_src.training.loop import train
from pipeline_src.training.schedules import step_lr

CPU = torch.device("cpu")
BASE = dict(epochs=1, batch_size=8, bptt=10, optimizer="sgd", lr=1.0, clip=None, lr_decay=2, eval_batch_size=4)


def test_step_level_rates_are_the_hand_computed_ones():
    wsd = TrainConfig(**BASE, schedule="wsd", warmup_tokens=100, ladder=[1000], cooldown_fraction=0.2)
    assert step_lr(wsd, 0, 10) == pytest.approx(0.1)  # warmup: the step that ends at 10 of 100 tokens
    assert step_lr(wsd, 90, 10) == 1.0 and step_lr(wsd, 500, 10) == 1.0  # the trunk: constant after it
    branch = (800, 1000)  # rung 1000 forked at 800 = 1000 - 0.2 * 1000
    assert step_lr(wsd, 800, 10, branch) == 1.0
    assert step_lr(wsd, 850, 10, branch) == pytest.approx(1 - 0.5)  # 1 - sqrt(50 / 200)
    assert step_lr(wsd, 990, 10, branch) == pytest.approx(1 - (190 / 200) ** 0.5)
    assert step_lr(wsd, 1000, 10, branch) == 0.0
    linear = TrainConfig(**{**BASE, "lr": 0.5}, schedule="wsd", ladder=[1000], cooldown_shape="linear")
    assert step_lr(linear, 850, 10, branch) == pytest.approx(0.5 * 0.75)
    cos = TrainConfig(**BASE, schedule="cosine", budget_tokens=1000)
    assert [step_lr(cos, t, 10) for t in (0, 250, 500, 1000, 1200)] == pytest.approx(
        [1.0, 0.5 * (1 + 2 ** -0.5), 0.5, 0.0, 0.0])


def _cfg(p, method="softmax", **training):
    cfg = run_config(p, "tiny", method)
    if method == "sampled-softmax":  # a 30-word language: a few negatives
        cfg["method"]["negatives"] = 5
    cfg["training"].update(epochs=50, schedule="wsd", keep="last", warmup_tokens=160, cooldown_fraction=0.2,
                           budget_tokens=None, **training)
    cfg["training"]["budget_tokens"] = max(cfg["training"]["ladder"])
    return cfg


def _rung(path, rung, top):
    return torch.load(path / "points" / f"{rung / top:g}x.pt", weights_only=False)


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("method", ["softmax", "sampled-softmax"])  # dropout's and the sampler's RNG both restored
def test_each_rung_s_model_is_a_run_to_that_rung_alone(tiny_data, tmp_path, method):
    p, _, prep = tiny_data
    ladder = [800, 2000, 4000]  # 10, 25 and 50 steps of 80 tokens; forks at 640, 1600, 3200
    s = train(_cfg(p, method, ladder=ladder), prep, tmp_path / "ladder", CPU)
    rungs = {pt["rung"]: pt for pt in s["budget"]["snapshots"]}
    assert sorted(rungs) == ladder and s["ladder"]["forks"] == [640, 1600, 3200]
    for r, pt in rungs.items():  # exactly the rung's tokens (to the step that reaches them), its cooldown f R
        assert r <= pt["tokens"] < r + 80 and pt["fork_tokens"] == pytest.approx(0.8 * r, abs=80)
        last_step = (pt["tokens"] - 80 - pt["fork_tokens"]) / (r - pt["fork_tokens"])  # the share done before it
        assert pt["lr_end"] == pytest.approx(p["datasets"]["tiny"]["training"]["lr"] * (1 - last_step ** 0.5))
        assert pt["branch_tokens"] == pt["tokens"] - pt["fork_tokens"]
    assert s["ladder"]["branches"]["tokens"] == sum(rungs[r]["branch_tokens"] for r in (800, 2000))
    assert s["budget"]["reached"]["tokens"] == rungs[4000]["tokens"]  # the top branch ends the run
    assert not any((tmp_path / "ladder" / f).exists() for f in ("fork.pt", "checkpoint.pt", "checkpoint.prev.pt"))
    trunk = [a["tokens"] for a in s["budget"]["anytime"]]  # the trunk's validations, as a run without branches has them
    assert trunk == sorted(trunk) and all(t % 400 < 80 for t in trunk)
    for r in (2000, 4000):  # the same rung as a ladder of its own: the branches before it left no trace
        alone = train(_cfg(p, method, ladder=[r]), prep, tmp_path / f"alone{r}", CPU)
        assert alone["budget"]["snapshots"][0]["tokens"] == rungs[r]["tokens"]
        assert _same(_rung(tmp_path / "ladder", r, 4000)["model"], _rung(tmp_path / f"alone{r}", r, r)["model"])
        assert alone["budget"]["snapshots"][0]["valid_nll"] == rungs[r]["valid_nll"]
    last = torch.load(tmp_path / "ladder" / "model.pt", weights_only=False)["model"]
    assert _same(last, _rung(tmp_path / "ladder", 4000, 4000)["model"])  # model.pt: the top rung's model


def test_a_ladder_run_resumes_inside_a_branch_and_on_the_trunk(tiny_data, tmp_path):
    p, _, prep = tiny_data
    cfg = _cfg(p, ladder=[800, 2000])
    whole = train(cfg, prep, tmp_path / "whole", CPU)
    for pause in (9, 15, 22):  # inside rung 800's branch, on the trunk after it, inside rung 2000's branch
        out = tmp_path / f"paused{pause}"
        assert train(cfg, prep, out, CPU, stop_after_steps=pause) is None
        assert (out / "fork.pt").exists() == (pause != 15)
        resumed = train(cfg, prep, out, CPU)
        for r in (800, 2000):
            assert _same(_rung(out, r, 2000)["model"], _rung(tmp_path / "whole", r, 2000)["model"]), (pause, r)
        assert [pt["tokens"] for pt in resumed["budget"]["snapshots"]] == \
            [pt["tokens"] for pt in whole["budget"]["snapshots"]]


def test_a_rung_the_epochs_cannot_reach_is_one_line(tiny_data, tmp_path):
    p, _, prep = tiny_data
    cfg = _cfg(p, ladder=[800, 100000])
    cfg["training"]["epochs"] = 2
    with pytest.raises(ConfigError, match=r"key 'training.epochs': 2 epochs .* end before the ladder's rung 100,000"):
        train(cfg, prep, tmp_path / "run", CPU)


@pytest.mark.parametrize("training, says", [
    ({"schedule": "wsd"}, r"key 'training.ladder' \(dataset tiny\): schedule wsd anneals at each rung"),
    ({"schedule": "wsd", "ladder": [1000], "keep": "last", "budget_seconds": 5},
     r"key 'training.budget_seconds' \(dataset tiny\): set beside training.ladder"),
    ({"schedule": "wsd", "ladder": [1000], "keep": "last", "warmup_tokens": 900},
     r"key 'training.warmup_tokens' .* do not end before the first rung's cooldown starts at 800"),
    ({"schedule": "wsd", "ladder": [1000]}, r"key 'training.keep' .*set keep: last"),
    ({"schedule": "cosine"}, r"key 'training.schedule' \(dataset tiny\): cosine decays to 0 at the run's token budget"),
    ({"ladder": [1000]}, r"key 'training.ladder' \(dataset tiny\): set to \[1000\], but it only acts with schedule wsd"),
    # the probe's cases: a cooldown shorter than one step (80 tokens) divided by zero or never annealed
    ({"schedule": "wsd", "ladder": [160, 2000], "keep": "last"},
     r"key 'training.cooldown_fraction' .*rung 160 cools down for 32 tokens, less than one step \(80"),
    ({"schedule": "wsd", "ladder": [1000, 2000], "keep": "last", "cooldown_fraction": 0.05},
     r"rung 1000 cools down for 50 tokens"),
    ({"schedule": "wsd", "ladder": [1000], "keep": "last", "cooldown_fraction": 0.95},
     r"key 'training.cooldown_fraction' .*cooldown would start at 50 tokens, before the trunk's first step"),
    ({"schedule": "cosine", "budget_tokens": 1000, "warmup_tokens": 5000},
     r"key 'training.warmup_tokens' .*do not end before the budget's 1000"),
])
def test_a_step_schedule_without_what_it_needs_is_refused_at_check_config(tiny, training, says):
    p = copy.deepcopy(tiny)
    p["datasets"]["tiny"]["training"].update(training)
    with pytest.raises(ConfigError, match=says):
        validate(p)


def test_an_empty_ladder_in_a_child_file_unsets_its_base_s(tiny):
    """The second probe's weak case: a file extending a ladder config could not switch to cosine, its `ladder: []`
    read as set."""
    p = copy.deepcopy(tiny)
    p["datasets"]["tiny"]["training"].update(schedule="cosine", budget_tokens=1000, ladder=[])
    assert validate(p)["datasets"]["tiny"]["training"]["ladder"] == []


def test_a_ladder_run_config_trains_to_its_top_rung(tiny):
    p = copy.deepcopy(tiny)
    p["datasets"]["tiny"]["training"].update(schedule="wsd", ladder=[2000, 500, 1000], keep="last")
    cfg = run_config(validate(p), "tiny", "softmax")
    assert cfg["training"]["ladder"] == [500, 1000, 2000] and cfg["training"]["budget_tokens"] == 2000


def test_a_capped_method_trains_the_ladder_to_its_own_top_with_the_dataset_s_multiples(tiny_data, tmp_path):
    """``ladder_top_by_method``: the method too slow for the whole ladder (the softmax at 100k) stops at a rung of
    it; its rung models are those of the uncapped ladder, bit for bit, and carry the same multiples of the
    dataset's top, so that every method's rung R is read as the same point; the other methods' configs (and so
    their runs' hashes) are untouched."""
    p, _, prep = tiny_data
    p = copy.deepcopy(p)
    p["datasets"]["tiny"]["training"].update(schedule="wsd", ladder=[800, 2000, 4000], keep="last",
                                             warmup_tokens=160, epochs=50)
    plain = validate(copy.deepcopy(p))
    p["datasets"]["tiny"]["training"]["ladder_top_by_method"] = {"softmax": 2000}
    capped = validate(p)
    assert run_config(capped, "tiny", "sampled-softmax") == run_config(plain, "tiny", "sampled-softmax")
    cfg = run_config(capped, "tiny", "softmax")
    assert cfg["training"]["ladder"] == [800, 2000, 4000]
    assert cfg["training"]["ladder_top"] == 2000 and cfg["training"]["budget_tokens"] == 2000
    s = train(cfg, prep, tmp_path / "capped", CPU)
    assert [pt["rung"] for pt in s["budget"]["snapshots"]] == [800, 2000]
    assert s["ladder"]["rungs"] == [800, 2000] and s["ladder"]["of_ladder_top"] == 4000
    assert s["budget"]["reached"]["tokens"] < 2080 and s["ladder"]["branches"]["tokens"] == \
        s["budget"]["snapshots"][0]["branch_tokens"]  # rung 800's cooldown; rung 2000's ends the run
    assert sorted(f.name for f in (tmp_path / "capped" / "points").glob("*.pt")) == ["0.2x.pt", "0.5x.pt"]
    whole = train(run_config(plain, "tiny", "softmax"), prep, tmp_path / "whole", CPU)
    for r in (800, 2000):
        assert _same(_rung(tmp_path / "capped", r, 4000)["model"], _rung(tmp_path / "whole", r, 4000)["model"])
    assert whole["budget"]["snapshots"][1]["valid_nll"] == s["budget"]["snapshots"][1]["valid_nll"]


def test_a_capped_method_is_tuned_at_an_eighth_of_its_own_top():
    from conftest import ROOT

    from pipeline_src.config import load
    from pipeline_src.config.runspec import resolve_run

    p = load(ROOT / "config" / "token-axis.yaml")
    p["datasets"]["zipf-10k"]["training"]["ladder_top_by_method"] = {"softmax": 4000000}
    p = validate(p)
    trial = resolve_run(p, "zipf-10k", "softmax", trial=0).config["training"]
    assert trial["ladder"] == [500000] and trial["budget_tokens"] == 500000 and trial.get("ladder_top") is None
    assert resolve_run(p, "zipf-10k", "nce", trial=0).config["training"]["ladder"] == [2000000]
    final = run_config(p, "zipf-10k", "softmax", seed=1)["training"]  # a final run's, before its selected rate
    assert final["ladder_top"] == 4000000 and final["budget_tokens"] == 4000000


@pytest.mark.parametrize("tops, says", [
    ({"softmax": 1500}, r"key 'training.ladder_top_by_method.softmax' \(dataset tiny\): 1500 is not a rung of the "
                        r"ladder \[1000, 2000\]"),
    ({"nope": 1000}, r"training.ladder_top_by_method.nope"),
])
def test_a_ladder_cap_off_the_ladder_or_for_no_method_is_refused(tiny, tops, says):
    p = copy.deepcopy(tiny)
    p["datasets"]["tiny"]["training"].update(schedule="wsd", ladder=[1000, 2000], keep="last",
                                             ladder_top_by_method=tops)
    with pytest.raises(ConfigError, match=says):
        validate(p)


def test_a_ladder_s_trials_train_its_tuning_rung_over_the_whole_rate_range():
    """Tuning that serves the ladder: every trial is a one-rung ladder at tuning.rung_tokens (its finals train the
    whole ladder), and latin-grid tries the rate range's two ends (latin-hypercube's top trial was 0.0485 of a range
    to 0.1)."""
    from conftest import ROOT

    from pipeline_src.config import load
    from pipeline_src.config.runspec import resolve_run
    from pipeline_src.config.tuning import points

    p = load(ROOT / "config" / "token-axis.yaml")
    trials = [resolve_run(p, "zipf-10k", "nce", trial=t).config["training"] for t in range(8)]
    assert {(tuple(t["ladder"]), t["budget_tokens"]) for t in trials} == {((2000000,), 2000000)}
    rates = sorted(t["lr"] for t in trials)
    assert rates[0] == pytest.approx(3e-4) and rates[-1] == pytest.approx(0.1)
    assert all(b / a == pytest.approx((0.1 / 3e-4) ** (1 / 7)) for a, b in zip(rates, rates[1:]))
    assert [pt["training"]["lr"] for pt in points(p, "zipf-10k", "softmax")] == \
        [pt["training"]["lr"] for pt in points(p, "zipf-10k", "nce")]  # the same rates for every method
    hyper = copy.deepcopy(p)
    hyper["tuning"]["design"] = "latin-hypercube"
    assert max(pt["training"]["lr"] for pt in points(hyper, "zipf-10k", "nce")) < 0.09


def test_the_trials_validate_as_often_as_tuning_anytime_points_says_and_unset_as_before():
    """At 100,000 words an NCE or sampled-softmax 2M trial spent 64-90% of its time on its anytime validations,
    which a pick does not read: tuning.anytime_points sets the trials' alone. Unset, a trial is the run it was (the
    published trials' hashes do not move)."""
    import json

    from conftest import ROOT

    from pipeline_src.config import load
    from pipeline_src.config.identity import run_hash
    from pipeline_src.config.runspec import resolve_run

    p = load(ROOT / "config" / "token-axis.yaml")
    trial = resolve_run(p, "zipf-10k", "nce", trial=0).config
    stored = json.loads((ROOT / "benchmarks/token-axis/records/tuning/zipf-10k/nce/trial0/train.json").read_text())
    assert run_hash(trial) == stored["config_hash"] and trial["training"]["anytime_points"] == 32
    p["tuning"]["anytime_points"] = 4
    assert resolve_run(p, "zipf-10k", "nce", trial=0).config["training"]["anytime_points"] == 4
    assert resolve_run(p, "zipf-10k", "nce", seed=1, as_written=True).config["training"]["anytime_points"] == 32
    p["tuning"]["anytime_points"] = 0
    with pytest.raises(ConfigError, match="anytime_points"):
        validate(p)


@pytest.mark.parametrize("tuning, says", [
    ({"rung_tokens": 1500}, r"key 'tuning.rung_tokens': 1500 is not a rung of the ladder of dataset 'tiny'"),
    ({"design": "latin-grid", "trials": 1}, r"key 'tuning.trials': latin-grid tries the rate range's two ends"),
])
def test_a_tuning_rung_off_the_ladder_is_refused(tiny, tuning, says):
    p = copy.deepcopy(tiny)
    p["datasets"]["tiny"]["training"].update(schedule="wsd", ladder=[1000, 2000], keep="last")
    p["tuning"] = {"enabled": True, "trials": 4, "seed": 0, "epochs": 2, "lr": {"adam": [0.001, 0.1]}, **tuning}
    with pytest.raises(ConfigError, match=says):
        validate(p)


def test_a_rung_s_file_swapped_for_another_s_is_refused_by_evaluate(tiny_data, tmp_path):
    """The probe's bad case: points/0.2x.pt replaced by 1x.pt was scored as rung 0.2's test number."""
    import shutil

    from pipeline_src.evaluation.run import score_snapshots
    from pipeline_src.training.step import build_model

    p, _, prep = tiny_data
    cfg = _cfg(p, ladder=[800, 2000])
    s = train(cfg, prep, tmp_path / "run", CPU)
    points = s["budget"]["snapshots"]
    model = build_model(cfg, prep)
    ev = {"batch_size": 4}
    assert len(score_snapshots(tmp_path / "run", points, model, cfg, ev, prep, CPU, "train")) == 2
    shutil.copyfile(tmp_path / "run/points/1x.pt", tmp_path / "run/points/0.4x.pt")
    with pytest.raises(ConfigError, match=r"0.4x.pt holds the weights at tokens 2000, not the 800"):
        score_snapshots(tmp_path / "run", points, model, cfg, ev, prep, CPU, "train")
