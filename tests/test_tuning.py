"""The equal tuning budget: quasi-random points drawn up front, shared learning rates, selection,
diverged trials as results."""
import json
import math
import sys

import numpy as np
import pytest
import torch
from conftest import tiny_params

from pipeline_src.config import ConfigError, data_config, validate
from pipeline_src.config.runspec import final_config, selection_key, trial_config, trials
from pipeline_src.config.tuning import edge_of, points, select
from pipeline_src.data.prepare import prepare
from pipeline_src.data.synthetic import generate
from pipeline_src.io import paths
from pipeline_src.training.loop import train

CPU = torch.device("cpu")


def tuned(base, tmp_path, trials=4, lr=(1e-3, 1e-1)):
    p = tiny_params(base, tmp_path)
    p["methods"]["adaptive-softmax"] = {"type": "adaptive-softmax"}
    p["methods"]["mos"] = {"type": "mos", "components": 2}
    p["tuning"] = {"enabled": True, "trials": trials, "seed": 7, "epochs": 1, "lr": {"adam": list(lr), "sgd": [1, 40]},
                   "space": {"adaptive-softmax": {"div_value": {"low": 1.5, "high": 4.0},
                                                  "cutoffs": {"choices": [[5], [10], [5, 15]]}},
                             "mos": {"context_dropout": {"low": 0.0, "high": 0.5}}}}
    return validate(p)


def test_points_are_reproducible_quasi_random_and_share_the_learning_rates(default_params, tmp_path):
    p = tuned(default_params, tmp_path, trials=8)
    soft, ada, mos = (points(p, "tiny", m) for m in ("softmax", "adaptive-softmax", "mos"))
    assert points(p, "tiny", "adaptive-softmax") == ada  # drawn up front, the same every time
    lrs = [pt["training"]["lr"] for pt in soft]
    assert lrs == [pt["training"]["lr"] for pt in ada] == [pt["training"]["lr"] for pt in mos]
    assert all(1e-3 <= x <= 1e-1 for x in lrs) and len(set(lrs)) == 8
    # a scrambled Sobol sequence: 8 points put exactly one learning rate in each eighth of the log range
    u = (np.log(lrs) - math.log(1e-3)) / (math.log(1e-1) - math.log(1e-3))
    assert sorted(np.floor(u * 8).astype(int)) == list(range(8))
    assert soft[0]["method"] == {} and set(ada[0]["method"]) == {"div_value", "cutoffs"}
    assert all(1.5 <= pt["method"]["div_value"] <= 4.0 and pt["method"]["cutoffs"] in ([5], [10], [5, 15]) for pt in ada)
    # another tuning seed draws other points; adding a method's dimension moves no other method's points
    assert points(dict(p, tuning={**p["tuning"], "seed": 8}), "tiny", "softmax") != soft
    p2 = dict(p, tuning={**p["tuning"], "space": {"mos": p["tuning"]["space"]["mos"]}})
    assert points(p2, "tiny", "mos") == mos and points(p2, "tiny", "softmax") == soft


def test_trial_config_applies_the_point_and_the_trial_budget(default_params, tmp_path):
    p = tuned(default_params, tmp_path)
    cfg = trial_config(p, "tiny", "adaptive-softmax", 2)
    pt = points(p, "tiny", "adaptive-softmax")[2]
    assert cfg["training"]["lr"] == pt["training"]["lr"] and cfg["training"]["epochs"] == 1
    assert cfg["method"]["div_value"] == pt["method"]["div_value"] and cfg["seed"] == 7
    assert cfg["tuning"] == {"trial": 2, "point": pt}
    with pytest.raises(ConfigError, match="out of range"):
        trial_config(p, "tiny", "softmax", 4)


def test_bad_tuning_space_is_named(default_params, tmp_path):
    p = tiny_params(default_params, tmp_path)
    p["tuning"] = {"enabled": True, "trials": 2, "seed": 0, "epochs": 1, "lr": {"adam": [1e-3, 1e-2]},
                   "space": {"softmax": {"knots": {"low": 1, "high": 2}}}}
    with pytest.raises(ConfigError, match=r"tuning.space.softmax.knots.*not an option of 'softmax'"):
        validate(p)


def test_trials_select_the_best_and_a_diverged_trial_is_a_result(default_params, tmp_path):
    # lr up to 1e4 with Adam and no clipping: the high trials diverge
    p = tuned(default_params, tmp_path, trials=4, lr=(1e-3, 1e4))
    p["datasets"]["tiny"]["training"]["clip"] = None
    raw, prep = paths.raw_dir(p, "tiny"), paths.prepared_dir(p, "tiny")
    generate(p["datasets"]["tiny"]["corpus"], raw, p["seed"])
    prepare(raw, prep, data_config(p, "tiny"))
    status = {}
    for i in range(4):
        s = train(trial_config(p, "tiny", "softmax", i), prep, paths.trial_dir(p, "tiny", "softmax", i), CPU,
                  trial=True)
        status[i] = s["status"]
        assert not (paths.trial_dir(p, "tiny", "softmax", i) / "checkpoint.pt").exists()
        assert not (paths.trial_dir(p, "tiny", "softmax", i) / "model.pt").exists()  # trials keep no weights
    lrs = [pt["training"]["lr"] for pt in points(p, "tiny", "softmax")]
    assert "diverged" in status.values() and "ok" in status.values(), (status, lrs)
    bad = next(i for i, s in status.items() if s == "diverged")
    info = json.loads((paths.trial_dir(p, "tiny", "softmax", bad) / "train.json").read_text())["diverged"]
    assert info["lr"] == pytest.approx(lrs[bad]) and info["epoch"] == 1 and info["reason"]
    sel = select(p, "tiny", "softmax", trials(p, "tiny", "softmax"), selection_key(p, "tiny", "softmax"))
    ok = [r for r in sel["trials"] if r["status"] == "ok"]
    assert sel["trial"] == min(ok, key=lambda r: r["valid_nll"])["trial"]
    final = final_config(p, "tiny", "softmax", 0)
    assert final["training"]["lr"] == lrs[sel["trial"]] and final["training"]["epochs"] == 3
    assert final["tuning"]["selected_trial"] == sel["trial"] and final["seed"] == 0
    # a trial made under another config is refused by name, not silently selected
    p["tuning"]["epochs"] = 2
    with pytest.raises(ConfigError, match="trial0.*another config"):
        select(p, "tiny", "softmax", trials(p, "tiny", "softmax"), selection_key(p, "tiny", "softmax"))
    with pytest.raises(ConfigError, match="selected under another tuning setup"):
        final_config(p, "tiny", "softmax", 0)


def test_a_run_is_resolved_once_into_a_frozen_spec(default_params, tmp_path):
    """pipeline_src/config/runspec.py: the params and a run's coordinates become one spec; its config is a copy, its
    hash the canonical config's, and a trial's spec carries the trial's seed, budget and directory."""
    import dataclasses

    from pipeline_src.config import run_config, run_hash
    from pipeline_src.config.runspec import resolve_run
    from pipeline_src.io import paths

    plain = validate(tiny_params(default_params, tmp_path))
    spec = resolve_run(plain, "tiny", "softmax", seed=0)
    assert spec.hash == run_hash(run_config(plain, "tiny", "softmax", 0)) and spec.source == "the params file"
    assert spec.out_dir == paths.run_dir(plain, "tiny", "softmax", 0) and spec.label == "tiny/softmax seed 0"
    cfg = spec.config
    cfg["training"]["lr"] = 99.0  # a caller's copy: the spec is unchanged
    assert spec.config["training"]["lr"] != 99.0 and spec.hash == run_hash(run_config(plain, "tiny", "softmax", 0))
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.seed = 1
    p = tuned(default_params, tmp_path)
    trial = resolve_run(p, "tiny", "mos", trial=3)
    assert trial.seed == 7 and trial.config["training"]["epochs"] == 1 and trial.source == "tuning trial 3"
    assert trial.out_dir == paths.trial_dir(p, "tiny", "mos", 3) and trial.config["tuning"]["trial"] == 3
    for bad in ({}, {"seed": 0, "trial": 1}):
        with pytest.raises(ConfigError, match="exactly one of --seed"):
            resolve_run(p, "tiny", "mos", **bad)
    with pytest.raises(ConfigError, match="seed 5 is not in run.seeds"):
        resolve_run(plain, "tiny", "softmax", seed=5)


def test_a_partial_summary_of_a_tuned_sweep_lists_the_selections_not_made_yet(default_params, tmp_path):
    from pipeline_src.reporting.summarize import tuning_tables

    p = tuned(default_params, tmp_path, trials=2)
    p["run"]["methods"] = ["softmax", "adaptive-softmax"]
    raw, prep = paths.raw_dir(p, "tiny"), paths.prepared_dir(p, "tiny")
    generate(p["datasets"]["tiny"]["corpus"], raw, p["seed"])
    prepare(raw, prep, data_config(p, "tiny"))
    for i in range(2):
        train(trial_config(p, "tiny", "softmax", i), prep, paths.trial_dir(p, "tiny", "softmax", i), CPU, trial=True)
    select(p, "tiny", "softmax", trials(p, "tiny", "softmax"), selection_key(p, "tiny", "softmax"))
    with pytest.raises(FileNotFoundError, match="select --dataset tiny --method adaptive-softmax"):
        tuning_tables(p)
    missing = []
    rows, curves = tuning_tables(p, partial=True, missing=missing)
    assert missing == ["tuning/tiny/adaptive-softmax"]
    assert set(rows.method) == {"softmax"} and len(rows) == 2 and list(curves.trials) == [1, 2]


def test_latin_hypercube_covers_the_range_and_crosses_options_with_the_rate(default_params, tmp_path):
    p = tuned(default_params, tmp_path, trials=8)
    p["tuning"]["design"] = "latin-hypercube"
    ada, soft = points(p, "tiny", "adaptive-softmax"), points(p, "tiny", "softmax")
    assert points(p, "tiny", "adaptive-softmax") == ada  # drawn up front, the same every time
    lrs = np.array([pt["training"]["lr"] for pt in ada])
    assert list(lrs) == [pt["training"]["lr"] for pt in soft]  # every method sees the same rates in the same order
    u = (np.log(lrs) - math.log(1e-3)) / (math.log(1e-1) - math.log(1e-3))
    assert sorted(np.floor(u * 8).astype(int)) == list(range(8))  # every eighth of the log range holds a trial
    # the first list of choices is crossed with the rate: each value at a rate of the lower and the upper half
    low_half = u < 0.5
    for c in ([5], [10], [5, 15]):
        has = np.array([pt["method"]["cutoffs"] == c for pt in ada])
        assert (has & low_half).any() and (has & ~low_half).any(), c
    # a range of the method's own is a Latin hypercube column of its own
    dv = np.array([pt["method"]["div_value"] for pt in ada])
    assert sorted(np.floor((dv - 1.5) / 2.5 * 8).astype(int)) == list(range(8))
    # the Sobol design is still the default (the earlier publications' points stay reproducible)
    p_sobol = dict(p, tuning={k: v for k, v in p["tuning"].items() if k != "design"})
    assert points(p_sobol, "tiny", "adaptive-softmax") != ada


def test_a_widened_range_moves_one_cell_and_an_edge_pick_is_flagged(default_params, tmp_path):
    p = tuned(default_params, tmp_path, trials=8)
    p["tuning"].update(design="latin-hypercube", lr_ranges={"softmax": {"tiny": [0.01, 1.0]}})
    lrs = [pt["training"]["lr"] for pt in points(p, "tiny", "softmax")]
    assert min(lrs) >= 0.01 and max(lrs) <= 1.0
    u = (np.log(lrs) - math.log(0.01)) / (math.log(1.0) - math.log(0.01))
    assert sorted(np.floor(u * 8).astype(int)) == list(range(8))
    assert all(pt["training"]["lr"] <= 0.1 for pt in points(p, "tiny", "adaptive-softmax"))  # not widened
    p["tuning"]["lr_ranges"] = {"softmax": {"tiny": [1.0, 0.01]}}
    with pytest.raises(ConfigError, match=r"tuning.lr_ranges.softmax.tiny.*below"):
        points(p, "tiny", "softmax")
    assert edge_of(0.1, [0.1, 0.2, 0.3]) == "lowest" and edge_of(0.3, [0.1, 0.2, 0.3]) == "highest"
    assert edge_of(0.2, [0.1, 0.2, 0.3]) is None


def test_a_widened_range_of_an_unknown_cell_is_named(default_params, tmp_path):
    p = tuned(default_params, tmp_path)
    for ranges, key in (({"nope": {"tiny": [0.01, 1.0]}}, "tuning.lr_ranges.nope"),
                        ({"softmax": {"elsewhere": [0.01, 1.0]}}, "tuning.lr_ranges.softmax.elsewhere"),
                        ({"softmax": {"tiny": [1.0, 0.01]}}, "tuning.lr_ranges.softmax.tiny")):
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            validate(dict(p, tuning={**p["tuning"], "lr_ranges": ranges}))


def halving_params(base, tmp_path, promote=2):
    """Four trials at half of a 2,000-token budget, the best ``promote`` again at the whole of it."""
    p = tuned(base, tmp_path, trials=4, lr=(1e-3, 3e-1))
    p["datasets"]["tiny"]["training"].update(budget_tokens=2000, epochs=50)
    p["tuning"]["halving"] = {"datasets": ["tiny"], "fraction": 0.5, "promote": promote}
    return validate(p)


def test_successive_halving_promotes_the_best_trials_to_the_full_budget_and_picks_among_them(default_params,
                                                                                            tmp_path):
    from pipeline_src.config.runspec import resolve_run
    from pipeline_src.config.tuning import ranking, trial_count, trial_rows
    from pipeline_src.data.fetch import fetch_dataset
    from pipeline_src.records.stash import current_records
    from pipeline_src.reporting.summarize import tuning_tables

    p = halving_params(default_params, tmp_path)
    assert trial_count(p, "tiny") == 6
    pts = points(p, "tiny", "softmax")
    first = trial_config(p, "tiny", "softmax", 1)  # rung 0: the design's point at half the budget
    assert first["training"]["budget_tokens"] == 1000 and first["training"]["lr"] == pts[1]["training"]["lr"]
    assert first["tuning"] == {"trial": 1, "point": pts[1], "rung": 0, "budget_fraction": 0.5}
    # a promoted trial before its rung 0 ran: keyed by its place (the hash files), not resolvable as a run
    placed = resolve_run(p, "tiny", "softmax", trial=4, as_written=True).config
    assert placed["tuning"] == {"trial": 4, "rung": 1, "promoted_rank": 0}
    assert placed["training"]["budget_tokens"] == 2000
    with pytest.raises(FileNotFoundError, match="trial0"):
        trial_config(p, "tiny", "softmax", 4)
    with pytest.raises(ConfigError, match=r"trial 6 is out of range: tuning.trials = 4 \+ tuning.halving.promote = 2"):
        trial_config(p, "tiny", "softmax", 6)
    raw, prep = paths.raw_dir(p, "tiny"), paths.prepared_dir(p, "tiny")
    fetch_dataset(p, "tiny", say=lambda s: None)  # recorded as fetched: restore checks the data is current
    prepare(raw, prep, data_config(p, "tiny"))
    run = {}
    for i in range(4):
        run[i] = train(trial_config(p, "tiny", "softmax", i), prep, paths.trial_dir(p, "tiny", "softmax", i), CPU,
                       trial=True)
        assert 1000 <= run[i]["train_tokens"] < 1000 + 8 * 10  # the half budget: the step that reaches 1,000 tokens
    by_nll = sorted(range(4), key=lambda i: (run[i]["best_valid_nll"], i))
    assert ranking(trial_rows(trials(p, "tiny", "softmax")[:4])) == by_nll
    for place, i in enumerate((4, 5)):  # the best two rung-0 points again, at the whole budget
        cfg = trial_config(p, "tiny", "softmax", i)
        assert cfg["tuning"]["promoted_from"] == by_nll[place] and cfg["tuning"]["point"] == pts[by_nll[place]]
        assert cfg["training"]["budget_tokens"] == 2000
        assert cfg["training"]["lr"] == pts[by_nll[place]]["training"]["lr"]
        run[i] = train(cfg, prep, paths.trial_dir(p, "tiny", "softmax", i), CPU, trial=True)
        assert 2000 <= run[i]["train_tokens"] < 2000 + 8 * 10
    sel = select(p, "tiny", "softmax", trials(p, "tiny", "softmax"), selection_key(p, "tiny", "softmax"))
    assert sel["trial"] == min((4, 5), key=lambda i: (run[i]["best_valid_nll"], i))  # never a half-budget trial
    assert [r["rung"] for r in sel["trials"]] == [0, 0, 0, 0, 1, 1] and "promoted to the full budget" in sel["summary"]
    final = final_config(p, "tiny", "softmax", 0)
    assert final["training"]["budget_tokens"] == 2000 and final["training"]["lr"] == sel["settings"]["training"]["lr"]
    rows, curves = tuning_tables(dict(p, run={**p["run"], "methods": ["softmax"]}))
    assert list(rows.rung) == [0, 0, 0, 0, 1, 1] and rows.selected.sum() == 1
    assert list(curves.trials) == [1, 2, 3, 4]  # the expected best of the design's trials, one budget
    # the stash takes rung 0, the promoted trials and the selection; without a rung-0 record a promoted one is
    # not current (its point is not known), and the selection neither
    kept = [f.parent.name for f in current_records(p)[0] if f.name == "train.json"]
    assert kept == [f"trial{i}" for i in range(6)]
    # restored in pipeline order: a rung-0 record written again leaves no promoted trial or selection older than it
    import shutil

    from pipeline_src.records.stash import restore, stash

    stash(p, "lv.yaml", tmp_path / "pub")
    record = {i: paths.trial_dir(p, "tiny", "softmax", i) / "train.json" for i in range(6)}
    shutil.rmtree(record[0].parent)  # as in a clone that has the rest
    assert restore(p, tmp_path / "pub", say=lambda s: None) == (1, [])
    later = [record[4], record[5], paths.selected_path(p, "tiny", "softmax")]
    assert all(f.stat().st_mtime_ns >= record[0].stat().st_mtime_ns for f in later)
    (paths.trial_dir(p, "tiny", "softmax", by_nll[0]) / "train.json").unlink()
    kept, stale = current_records(p)
    assert [f.parent.name for f in kept] == [f"trial{i}" for i in range(4) if i != by_nll[0]]
    assert [s.split("/")[-2] for s in stale] == ["trial4", "trial5", "softmax"]  # and the selection they made
    assert "rung-0 trials are not all current" in stale[0] and "selected.json" in stale[2]
    # an edited rung-0 record is stale, and so are the promoted trials it decided (no stash stops on it)
    (paths.trial_dir(p, "tiny", "softmax", by_nll[0]) / "train.json").write_text(
        (paths.trial_dir(p, "tiny", "softmax", by_nll[1]) / "train.json").read_text())
    kept, stale = current_records(p)
    assert f"trial{by_nll[0]}" in stale[0] and [s.split("/")[-2] for s in stale[1:]] == ["trial4", "trial5", "softmax"]


@pytest.mark.parametrize("change, message", [
    ({"promote": 5}, r"tuning.halving.promote': 5 is more than the 4 trials"),
    ({"datasets": ["nowhere"]}, r"tuning.halving.datasets': 'nowhere' is not defined under 'datasets'"),
    ({"fraction": 1.0}, r"tuning.halving.fraction"),
])
def test_a_bad_halving_setting_is_named(default_params, tmp_path, change, message):
    p = halving_params(default_params, tmp_path)
    p["tuning"]["halving"].update(change)
    with pytest.raises(ConfigError, match=message):
        validate(p)


def test_halving_needs_a_budget_to_share_out(default_params, tmp_path):
    p = halving_params(default_params, tmp_path)
    del p["datasets"]["tiny"]["training"]["budget_tokens"]
    with pytest.raises(ConfigError, match=r"tuning.halving.datasets': dataset 'tiny' has no run budget"):
        validate(p)


def test_the_dag_of_a_halving_size_waits_for_rung_0_before_its_promoted_trials(tmp_path):
    """config/large-vocab.yaml's 1M words: 8 trials and 2 promoted repeats per method, each repeat an input of
    every rung-0 trial's record (Snakemake cannot know which it repeats before they ran); 10k words tune as before."""
    import re
    import subprocess

    from conftest import ROOT, clean_env

    params = tmp_path / "lv.yaml"
    params.write_text(f"extends: {ROOT / 'config/large-vocab.yaml'}\nresults_dir: {tmp_path / 'r'}\n"
                      f"data_dir: {tmp_path / 'd'}\n")
    targets = [str(tmp_path / "r/tuning" / ds / "nce/selected.json") for ds in ("zipf-1m", "zipf-10k")]
    r = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", *targets, "--config",
                        f"params={params}"], cwd=ROOT, capture_output=True, text=True, env=clean_env(tmp_path),
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:] + r.stdout[-3000:]
    jobs = re.findall(r"rule trial:\n    input: ([^\n]*)\n    output: [^\n]*/tuning/([^/]+)/nce/trial(\d+)/", r.stdout)
    trials = {(ds, int(t)): inputs for inputs, ds, t in jobs}
    assert sorted(t for ds, t in trials if ds == "zipf-1m") == list(range(10))
    assert sorted(t for ds, t in trials if ds == "zipf-10k") == list(range(8))
    for (ds, t), inputs in trials.items():
        rung0 = sorted(int(x) for x in re.findall(r"nce/trial(\d+)/train.json", inputs))
        assert rung0 == (list(range(8)) if ds == "zipf-1m" and t >= 8 else []), (ds, t, inputs)


def test_restore_beside_another_run_of_a_trial_holds_back_what_the_stash_made_from_its_own(default_params, tmp_path):
    """A rung-0 trial folder that holds another run stays whole, and the stash's promoted trials and selection,
    made from the stash's trial, are not restored beside it (they would not hold); the method's other trials are."""
    import shutil

    from pipeline_src.data.fetch import fetch_dataset
    from pipeline_src.records.stash import current_records, restore, stash

    p = halving_params(default_params, tmp_path)
    prep = paths.prepared_dir(p, "tiny")
    fetch_dataset(p, "tiny", say=lambda s: None)
    prepare(paths.raw_dir(p, "tiny"), prep, data_config(p, "tiny"))
    for i in range(6):  # rung 0, then the two promoted (their points read rung 0's records)
        train(trial_config(p, "tiny", "softmax", i), prep, paths.trial_dir(p, "tiny", "softmax", i), CPU, trial=True)
    select(p, "tiny", "softmax", trials(p, "tiny", "softmax"), selection_key(p, "tiny", "softmax"))
    stash(p, "lv.yaml", tmp_path / "pub")
    clone = validate({**p, "results_dir": str(tmp_path / "clone")})
    mine = paths.trial_dir(clone, "tiny", "softmax", 2) / "train.json"  # another run of trial 2 in the clone
    mine.parent.mkdir(parents=True)
    record = json.loads((paths.trial_dir(p, "tiny", "softmax", 2) / "train.json").read_text())
    mine.write_text(json.dumps({**record, "best_valid_nll": record["best_valid_nll"] + 0.5}))
    n, stale = restore(clone, tmp_path / "pub", say=lambda s: None)
    restored = sorted(f.parent.name for f in (tmp_path / "clone" / "tuning").rglob("train.json"))
    assert restored == ["trial0", "trial1", "trial2", "trial3"] and n == 3  # the other rung-0 records
    assert json.loads(mine.read_text())["best_valid_nll"] == record["best_valid_nll"] + 0.5  # left whole
    assert not paths.selected_path(clone, "tiny", "softmax").exists()
    held = [s for s in stale if "not restored, the stash's was made from a record" in s]
    assert sorted(s.split(":")[0].rsplit("/", 1)[-1] for s in held) == ["softmax", "trial4", "trial5"]
    assert any("softmax/trial2: holds a record with other content" in s for s in stale)
    shutil.rmtree(mine.parent)  # the user deletes their run: a second restore puts back the rest
    assert restore(clone, tmp_path / "pub", say=lambda s: None) == (4, [])  # trials 2, 4, 5, the selection
    assert len([f for f in current_records(clone)[0] if f.name == "train.json"]) == 6


def test_replayed_finals_train_the_tokens_their_selected_trial_reached_in_its_time_budget(default_params, tmp_path):
    """tuning.replay_tokens: a final run takes its pick's reached tokens as a token budget (the same steps on any
    machine); at the trial's own seed it is the trial again, step for step. The hash files key a replay apart
    from the timed final, and a dataset without a time budget has no tokens to replay."""
    from pipeline_src.config.runspec import resolve_run

    p = tuned(default_params, tmp_path, trials=3, lr=(3e-3, 3e-2))
    p["datasets"]["tiny"]["training"].update(budget_seconds=0.3, epochs=50)
    p["tuning"].update(epochs=50, replay_tokens={"datasets": ["tiny"]})
    p["run"]["seeds"] = [p["tuning"]["seed"]]
    p = validate(p)
    timed = dict(p, tuning={k: v for k, v in p["tuning"].items() if k != "replay_tokens"})
    seed = p["tuning"]["seed"]
    assert (resolve_run(p, "tiny", "softmax", seed=seed, as_written=True).train_hash
            != resolve_run(timed, "tiny", "softmax", seed=seed, as_written=True).train_hash)
    raw, prep = paths.raw_dir(p, "tiny"), paths.prepared_dir(p, "tiny")
    generate(p["datasets"]["tiny"]["corpus"], raw, p["seed"])
    prepare(raw, prep, data_config(p, "tiny"))
    run = {i: train(trial_config(p, "tiny", "softmax", i), prep, paths.trial_dir(p, "tiny", "softmax", i), CPU,
                    trial=True) for i in range(3)}
    sel = select(p, "tiny", "softmax", trials(p, "tiny", "softmax"), selection_key(p, "tiny", "softmax"))
    picked = run[sel["trial"]]["budget"]["reached"]
    assert picked["tokens"] < 50 * 6000  # the time budget ended the trial, not its epochs
    spec = resolve_run(p, "tiny", "softmax", seed=seed)
    assert spec.config["training"]["budget_tokens"] == picked["tokens"]
    assert "budget_seconds" not in spec.config["training"]
    assert spec.config["tuning"]["replays_trial_tokens"] == picked["tokens"] and f"{picked['tokens']:,} tokens" in spec.source
    assert final_config(timed, "tiny", "softmax", seed)["training"]["budget_seconds"] == 0.3  # without: the time budget
    final = train(spec.config, prep, spec.out_dir, CPU)
    assert final["budget"]["reached"]["steps"] == picked["steps"]
    assert final["best_valid_nll"] == run[sel["trial"]]["best_valid_nll"]  # the trial again, step for step
    (paths.trial_dir(p, "tiny", "softmax", sel["trial"]) / "train.json").unlink()
    with pytest.raises(FileNotFoundError, match=f"trial{sel['trial']}.*replay_tokens"):
        resolve_run(p, "tiny", "softmax", seed=seed)
    untimed = dict(p, tuning=dict(p["tuning"]))
    untimed["datasets"] = {"tiny": {**p["datasets"]["tiny"], "training": {
        k: v for k, v in p["datasets"]["tiny"]["training"].items() if k != "budget_seconds"}}}
    with pytest.raises(ConfigError, match=r"tuning.replay_tokens.datasets': dataset 'tiny' does not tune under a time"):
        validate(untimed)
    with pytest.raises(ConfigError, match=r"tuning.replay_tokens.datasets.*'nowhere' is not defined under 'datasets'"):
        validate(dict(p, tuning={**p["tuning"], "replay_tokens": {"datasets": ["nowhere"]}}))


def test_freeze_budgets_reads_replayed_finals_as_their_time_budget_s_tokens(default_params, tmp_path, monkeypatch):
    """A replayed size's finals have no budget_seconds of their own: their tokens are the time budget's (their
    trials'), frozen like a timed run's; without tuning.replay_tokens such rows are no time budget at all."""
    import pandas as pd
    import yaml

    import pipeline_src.reporting.publish as pub
    from pipeline_src.records.budgets import frozen_budgets

    p = tuned(default_params, tmp_path, trials=3)
    p["datasets"]["tiny"]["training"].update(budget_seconds=30.0, epochs=50)
    p["tuning"]["replay_tokens"] = {"datasets": ["tiny"]}
    p = validate(p)
    out = tmp_path / "benchmarks" / "calib"
    out.mkdir(parents=True)
    monkeypatch.setattr(pub, "BENCHMARKS", tmp_path / "benchmarks")
    pd.DataFrame({"dataset": "tiny", "method": ["softmax", "softmax", "mos"], "split": "test", "seed": [0, 1, 0],
                  "tokens_reached": [1600, 1600, 800], "budget_seconds": math.nan}).to_csv(out / "summary.csv",
                                                                                          index=False)
    p["run"]["seeds"] = [0, 1]  # the seeds of its rows
    prov = {"params": p, "commit": "abc" * 14, "cpu_model": "a CPU", "published": "2026-11-28"}
    (out / "provenance.json").write_text(json.dumps(prov))
    trials_ran_on = {"by_dataset": {"tiny": {"cpu_models": ["Trial CPU"], "kernels": ["AVX2"], "records": 6}}}
    (out / "summary.json").write_text(json.dumps({"time_budget_machine": trials_ran_on}))
    text = frozen_budgets("calib")
    assert "tokens/s: softmax 53, mos 27" in text and "30 s of training steps on Trial CPU (AVX2 kernels)" in text
    assert "a CPU" not in text  # the machine that ran the finals and published is not the calibration's
    assert yaml.safe_load(text)["datasets"]["tiny"]["training"]["budget_tokens_by_method"] == {"softmax": 1600,
                                                                                              "mos": 800}
    prov["params"] = dict(p, tuning={k: v for k, v in p["tuning"].items() if k != "replay_tokens"})
    (out / "provenance.json").write_text(json.dumps(prov))
    with pytest.raises(ConfigError, match="no run under a time budget"):
        frozen_budgets("calib")


def test_freeze_budgets_of_a_publication_with_frozen_tokens_names_where_they_came_from():
    """The third probe: `freeze-budgets --name default` (the docs' own example) was refused without a word of
    where its frozen budgets came from."""
    from pipeline_src.records.budgets import frozen_budgets

    with pytest.raises(ConfigError, match=r"no run under a time budget \(budget_seconds\) to freeze; its budgets "
                                          r"were frozen from benchmarks/default-calibration: `python -m pipeline_src "
                                          r"freeze-budgets --name default-calibration`"):
        frozen_budgets("default")


def test_the_picks_table_writes_whole_option_values_in_full_and_real_ones_to_three_digits():
    """tau 16,000 and 1,000 negatives read as set (the ':.3g' format printed 1.6e+04 and 1e+03); an option a method
    does not have is blank."""
    import pandas as pd

    from pipeline_src.reporting.tables import selected_markdown

    trials = pd.DataFrame([
        {"dataset": "d", "method": "a", "trial": 1, "lr": 0.0105, "selected": True, "valid_ppl": 200.0,
         "status": "ok", "opt_tau": 16000.0, "opt_alpha": float("nan")},
        {"dataset": "d", "method": "b", "trial": 0, "lr": 0.00412, "selected": True, "valid_ppl": 190.0,
         "status": "ok", "opt_tau": float("nan"), "opt_alpha": 3.425224},
    ])
    rows = [line.split(" | ") for line in selected_markdown(trials).splitlines()[2:]]
    assert [r[4:6] for r in rows] == [["16,000", ""], ["", "3.43"]]
