"""The finetuning stage (training.finetune_epochs): AWD-LSTM's and MoS's finetune.py."""
import json

import pytest
import torch
from conftest import write_params

from pipeline_src.config import config_hash, run_config, train_hash, validate
from pipeline_src.io import paths
from pipeline_src.training.averaging import ParameterAverage
from pipeline_src.training.loop import finetune_config, train

CPU = torch.device("cpu")


@pytest.fixture
def trained(tiny_data, tmp_path):
    p, _, prep = tiny_data
    cfg = run_config(p, "tiny", "softmax")
    cfg["training"].update(epochs=2, finetune_epochs=3, finetune_lr=0.005)
    out = tmp_path / "run"
    return cfg, prep, out, train(cfg, prep, out, CPU)


def test_the_finetuning_config_is_the_trained_ones_with_its_own_budget_and_rate(trained):
    cfg, *_ = trained
    ft = finetune_config(cfg)
    assert ft["finetune_of"] == train_hash(cfg) and config_hash(ft) != config_hash(cfg)
    assert ft["training"]["epochs"] == 3 and ft["training"]["lr"] == 0.005
    assert ft["training"]["schedule"] == "nt-asgd" and ft["training"]["keep"] == "best"
    assert ft["model"] == cfg["model"] and ft["method"] == cfg["method"]


def test_finetuning_starts_from_the_trained_weights_averages_from_the_first_step_keeps_the_best(trained, tmp_path,
                                                                                               monkeypatch):
    cfg, prep, out, summary = trained
    kept = torch.load(out / "model.pt", weights_only=False)["model"]
    at_start = []
    start = ParameterAverage.start

    def spy(self, model):  # averaging begins before any finetuning step, from the trained weights
        at_start.append({k: v.detach().clone() for k, v in model.state_dict().items()})
        start(self, model)

    monkeypatch.setattr(ParameterAverage, "start", spy)
    ft = train(finetune_config(cfg), prep, tmp_path / "ft", CPU, init=out / "model.pt")
    assert len(at_start) == 1 and all(torch.equal(at_start[0][k], kept[k]) for k in kept)
    assert ft["start_valid_nll"] == pytest.approx(summary["best_valid_nll"], rel=1e-6)  # the trained model's
    hist = [float(r.split(",")[3]) for r in (tmp_path / "ft" / "history.csv").read_text().splitlines()[1:]]
    assert ft["best_valid_nll"] == min([ft["start_valid_nll"], *hist])
    got = torch.load(tmp_path / "ft" / "model.pt", weights_only=False)
    assert got["epoch"] == ft["best_epoch"] and got["config"]["finetune_of"] == train_hash(cfg)
    if ft["best_epoch"] == 0:  # no finetuning epoch validated better: the trained weights stay
        assert all(torch.equal(got["model"][k], kept[k]) for k in kept)
    else:
        assert hist[ft["best_epoch"] - 1] == ft["best_valid_nll"] < ft["start_valid_nll"]


def test_finetuning_ends_when_validation_stops_improving(trained, tmp_path, monkeypatch):
    import pipeline_src.training.epoch as T

    cfg, prep, out, _ = trained
    seen = []

    def rule(previous, current, nonmono):  # finetune.py's test on the averaged validation losses
        seen.append((list(previous), current, nonmono))
        return len(seen) == 2

    monkeypatch.setattr(T, "nt_asgd_trigger", rule)
    ft = train(finetune_config(cfg), prep, tmp_path / "ft", CPU, init=out / "model.pt")
    assert ft["finetune_stopped_at"] == 2 and len((tmp_path / "ft" / "history.csv").read_text().splitlines()) == 3
    assert len(seen[1][0]) == 1 and seen[1][2] == cfg["training"].get("nonmono", 5)
    assert not (tmp_path / "ft" / "checkpoint.pt").exists()


def test_finetune_and_evaluate_through_the_cli(tiny, tmp_path, capsys):
    from pipeline_src.cli import main

    tiny["datasets"]["tiny"]["training"].update(epochs=2, finetune_epochs=2)
    cfg = write_params(tiny, tmp_path / "p.yaml")
    run = ["--config", str(cfg), "--dataset", "tiny", "--method", "softmax", "--seed", "0"]
    assert main(["fetch", *run[:4]]) == 0 and main(["prepare", *run[:4]]) == 0
    assert main(["finetune", *run]) == 2 and "model.pt is missing" in capsys.readouterr().err  # train first
    assert main(["train", *run]) == 0 and main(["finetune", *run]) == 0 and main(["evaluate", *run]) == 0
    p = validate(tiny)
    m = json.loads(paths.metrics_path(p, "tiny", "softmax", 0).read_text())
    ft = json.loads((paths.finetune_dir(p, "tiny", "softmax", 0) / "train.json").read_text())
    assert m["config_hash"] == config_hash(run_config(p, "tiny", "softmax", 0))  # the run is the trained one
    assert m["finetune"]["best_valid_nll"] == ft["best_valid_nll"] and m["before_finetune"]["test"]["ppl"] > 1
    assert m["splits"]["valid"]["nll"] <= m["before_finetune"]["valid"]["nll"] + 1e-6  # kept only if better
    tiny["datasets"]["tiny"]["training"]["finetune_epochs"] = 0
    write_params(tiny, cfg)
    assert main(["finetune", *run]) == 2 and "finetune_epochs' is 0" in capsys.readouterr().err


def test_finetuning_a_run_with_points_past_its_own_epochs_is_not_refused(tiny_data, tmp_path):
    """A review's bad case: the trained run's anytime epochs (here 3, within its 4 epochs) lie past finetuning's
    2 epochs; the reachability check of the trained run refused its finetuning, naming training.epochs (2)."""
    p, _, prep = tiny_data
    cfg = run_config(p, "tiny", "softmax")
    cfg["training"].update(epochs=4, finetune_epochs=2, budget_tokens=10**6, anytime_epochs=[1, 3], valid_tokens=400)
    validate({**p, "datasets": {"tiny": {**p["datasets"]["tiny"], "training": {
        **p["datasets"]["tiny"].get("training", {}), **cfg["training"]}}}})
    out = tmp_path / "run"
    assert [pt["epochs"] for pt in train(cfg, prep, out, CPU)["budget"]["token_points"]] == [1, 3]
    train(finetune_config(cfg), prep, tmp_path / "ft", CPU, init=out / "model.pt")  # refused before the fix
    epochs = len((tmp_path / "ft" / "history.csv").read_text().splitlines()) - 1  # the finetuning's own epochs
    assert 1 <= epochs <= 2 and (tmp_path / "ft" / "model.pt").is_file()
