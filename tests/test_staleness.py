"""Nothing stale presented as current, and nothing rebuilt that needs no rebuild: a run's hash covers what
trains it, its evaluation settings re-evaluate it, and every step that reads a run's record checks that
the current settings made it. (The two engines crossing each other: tests/test_pipeline.py.)"""
import json
import os

import pytest
import torch
from conftest import tiny_params, write_params

from pipeline_src.cli import main
from pipeline_src.config import config_hash, load, run_config, train_hash
from pipeline_src.io import paths
from pipeline_src.records.hashes import SUMMARY_SENTINEL, record_hashes
from pipeline_src.training.loop import train

CPU = torch.device("cpu")
RUN = ("--dataset", "tiny", "--method", "softmax", "--seed", "0")


@pytest.fixture
def proj(default_params, tmp_path):
    p = tiny_params(default_params, tmp_path)
    return p, write_params(p, tmp_path / "params.yaml")


def _cli(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def _trained(capsys, cfg):
    for step in ("fetch", "prepare"):
        assert _cli(capsys, step, "--config", str(cfg), "--dataset", "tiny")[0] == 0
    for step in ("train", "evaluate"):
        assert _cli(capsys, step, "--config", str(cfg), *RUN)[0] == 0, capsys.readouterr()


def test_an_evaluation_setting_re_evaluates_without_retraining(capsys, proj, tmp_path):
    p, cfg = proj
    _trained(capsys, cfg)
    run = tmp_path / "results" / "runs" / "tiny" / "softmax" / "seed0"
    model_time = (run / "model.pt").stat().st_mtime_ns
    p["evaluation"]["rank_contexts"] = 40
    write_params(p, cfg)
    rc, out, err = _cli(capsys, "evaluate", "--config", str(cfg), *RUN)
    assert rc == 0, err
    metrics = json.loads((run / "metrics.json").read_text())
    new = run_config(load(cfg), "tiny", "softmax", 0)
    assert metrics["config_hash"] == config_hash(new) and metrics["rank"]["contexts"] == 40  # this config's result
    assert metrics["config"]["evaluation"]["rank_contexts"] == 40 and (run / "model.pt").stat().st_mtime_ns == model_time
    assert _cli(capsys, "summarize", "--config", str(cfg), "--partial")[0] == 0  # current for summarize too
    p["datasets"]["tiny"]["training"]["lr"] = 0.02  # a training setting: the model is another config's
    write_params(p, cfg)
    rc, _, err = _cli(capsys, "evaluate", "--config", str(cfg), *RUN)
    assert rc == 2 and "model.pt was trained under another config" in err and "Traceback" not in err


def test_checkpoint_every_steps_changes_neither_the_training_hash_nor_a_resume(tiny_data, tmp_path):
    p, _, prep = tiny_data
    cfg = run_config(p, "tiny", "softmax")
    assert train(cfg, prep, tmp_path / "run", CPU, stop_after_steps=5) is None
    other = json.loads(json.dumps(cfg))
    other["training"]["checkpoint_every_steps"] = 3
    other["evaluation"]["rank_contexts"] = 7
    assert train_hash(other) == train_hash(cfg) and config_hash(other) != config_hash(cfg)
    summary = train(other, prep, tmp_path / "run", CPU)  # resumes the checkpoint the first config wrote
    whole = train(cfg, prep, tmp_path / "whole", CPU)
    assert summary["best_valid_nll"] == whole["best_valid_nll"]  # the same training, bit for bit


def test_summarize_refuses_a_run_another_config_made_naming_the_key(capsys, proj):
    p, cfg = proj
    _trained(capsys, cfg)
    p["methods"]["softmax"]["chunk_size"] = 5
    write_params(p, cfg)
    rc, _, err = _cli(capsys, "summarize", "--config", str(cfg), "--partial")
    line = [x for x in err.splitlines() if x.startswith("error: ")]
    assert rc == 2 and len(line) == 1 and "Traceback" not in err
    assert "metrics.json was made under another config (key 'method.chunk_size' differs" in line[0]


def test_hash_files_change_only_when_their_settings_do(proj):
    p = load(proj[1])
    written = record_hashes(p)
    train_file = paths.run_hash_path(p, "tiny", "softmax", 0, "train")
    eval_file = paths.run_hash_path(p, "tiny", "softmax", 0, "evaluate")
    bench, matrix = paths.hashes_dir(p) / "bench", paths.hashes_dir(p) / "matrix"
    assert {train_file, eval_file, bench, matrix} <= set(written)
    first, stamp = train_file.read_text().split("\n", 1)
    assert first == train_hash(run_config(p, "tiny", "softmax", 0)) and stamp.startswith("written ")
    stamps = {f: f.stat().st_mtime_ns for f in written}
    assert record_hashes(p) == [] and all(f.stat().st_mtime_ns == t for f, t in stamps.items())
    p["evaluation"]["rank_contexts"] = 9  # re-evaluate, do not retrain
    assert record_hashes(p) == [eval_file]
    p["methods"]["mos"]["components"] = 3  # mos is in the matrix experiment, not in the bench or the runs
    assert record_hashes(p) == [matrix]
    p["methods"]["softmax"]["chunk_size"] = 5  # in all of them
    assert set(record_hashes(p)) == {train_file, eval_file, bench, matrix}


def test_a_partial_summary_made_by_hand_is_marked_for_a_rebuild(proj):
    p = load(proj[1])
    sentinel = paths.hashes_dir(p) / SUMMARY_SENTINEL
    record_hashes(p)
    assert sentinel.read_text().startswith("complete\n")
    info = paths.summary_path(p).with_suffix(".json")
    info.parent.mkdir(parents=True, exist_ok=True)
    info.write_text(json.dumps({"partial": True, "runs": 0, "of": 1, "missing": ["tiny/softmax/seed0"]}))
    os.utime(info, ns=(10**18, 10**18))
    assert record_hashes(p) == [sentinel] and "partial summary" in sentinel.read_text()
    assert record_hashes(p) == []  # once: the same partial file is not marked again
    info.write_text(json.dumps({"partial": False, "runs": 1, "of": 1, "missing": []}))
    assert record_hashes(p) == []  # a complete one leaves the sentinel alone (no needless rebuild)


def test_figures_and_the_report_refuse_a_summary_another_config_made(capsys, proj):
    p, cfg = proj
    _trained(capsys, cfg)
    assert _cli(capsys, "summarize", "--config", str(cfg), "--partial")[0] == 0
    assert _cli(capsys, "figures", "--config", str(cfg), "--dataset", "tiny")[0] == 0
    p["statistics"]["confidence"] = 0.9  # new verdicts are needed, not new runs
    write_params(p, cfg)
    for step in (("figures", "--dataset", "tiny"), ("report",)):
        rc, _, err = _cli(capsys, step[0], "--config", str(cfg), *step[1:])
        assert rc == 2 and "made under other statistics (key 'statistics.confidence' differs)" in err, err
    p["statistics"]["confidence"] = 0.95
    p["methods"]["softmax"]["chunk_size"] = 5  # the run itself is another config's
    write_params(p, cfg)
    rc, _, err = _cli(capsys, "figures", "--config", str(cfg), "--dataset", "tiny")
    assert rc == 2 and "run tiny/softmax/seed0 was made by another config" in err and "Traceback" not in err


def test_a_key_written_at_its_default_is_the_same_run_and_an_old_record_is_judged_by_what_made_it(proj):
    """The one hash rule (config.canonical): a model, training or method key that holds its default is left
    out, whether written or not, so a new option with a default never changes an old run's hash; a record
    written by an earlier version (defaults spelled out) hashes as the run it is."""
    from pipeline_src.config import canonical, run_hash

    p, _ = proj
    cfg = run_config(p, "tiny", "nce", 0)
    spelled = json.loads(json.dumps(p))
    spelled["training"].update(weight_decay=0.0, precision="fp32", keep="best")
    spelled["model"]["encoder"] = "lstm"
    spelled["methods"]["nce"].update(shared=True, bias_init="neg-log-v")  # NCE's default
    assert run_config(spelled, "tiny", "nce", 0) == cfg and run_hash(run_config(spelled, "tiny", "nce", 0)) == run_hash(cfg)
    old = json.loads(json.dumps(cfg))  # as an earlier version stored it: every training key spelled out
    old["training"].update(weight_decay=0.0, max_steps_per_epoch=None, checkpoint_every_steps=None, schedule="plateau")
    assert canonical(old) == cfg and canonical(canonical(old)) == canonical(old) and run_hash(old) == run_hash(cfg)
    assert train_hash(old) == train_hash(cfg)
    spelled["training"]["weight_decay"] = 1e-6  # a value that is not the default is the run's
    assert run_hash(run_config(spelled, "tiny", "nce", 0)) != run_hash(cfg)
    spelled["training"]["weight_decay"] = 0  # 0 and 0.0 are one value; False and 0 are not
    assert run_hash(run_config(spelled, "tiny", "nce", 0)) == run_hash(cfg)
    spelled["methods"]["nce"]["shared"] = 1
    assert canonical({"method": spelled["methods"]["nce"]})["method"].get("shared") == 1


def test_every_published_run_carries_the_hash_the_code_gives_its_config_now():
    """The hash rule's migration (benchmarks/hash-migration.json) and every publication agree with the code:
    each run of a publication made without tuning is rebuilt from its params and hashed."""
    import copy

    import pandas as pd
    from conftest import ROOT

    from pipeline_src.config import run_hash, validate

    migration = json.loads((ROOT / "benchmarks/hash-migration.json").read_text())["map"]
    checked = 0
    for pub in sorted((ROOT / "benchmarks").glob("*/summary.csv")):
        prov = json.loads((pub.parent / "provenance.json").read_text())
        if "hashes_migrated" in prov:  # published before the rule: every hash is the map's new one
            assert set(prov["run_config_hashes"]) <= set(migration.values()), pub
        if (pub.parent / "tuning.csv").exists():
            continue
        params = validate(copy.deepcopy(prov["params"]))
        for r in pd.read_csv(pub).drop_duplicates(["dataset", "method", "seed"]).itertuples():
            assert r.config_hash == run_hash(run_config(params, r.dataset, r.method, int(r.seed))), (pub, r)
            checked += 1
    assert checked >= 90
