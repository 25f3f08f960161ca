"""Evaluating one final run (``python -m pipeline_src evaluate``): its model, or its finetuned model and the
trained one beside it, and under ``keep: last`` its best-validation epoch's, scored exactly and written to
metrics.json with the run's training record and the data it was scored on."""
from __future__ import annotations

from pathlib import Path

import torch

from ..io import paths
from ..io.artifacts import read_json
from ..io.digests import check_seal, sha256_of
from ..io.errors import ConfigError


def _model(run: Path, device, retrain: str) -> dict:
    """The run's model.pt, or one line: missing (not trained to its end, or it diverged and left none: the
    fourth probe's hint said to delete the missing file), or damaged (delete it and retrain)."""
    from ..io.errors import ArtifactError
    from ..training.checkpoints import load_torch

    if not (run / paths.MODEL).is_file():
        raise ArtifactError(f"{run / paths.MODEL} is missing: the run has not trained to its end (one that diverged "
                            f"leaves no model; its training log says so); run `{retrain}`")
    return load_torch(run / paths.MODEL, device, f"delete it and rerun `{retrain}`")


def _refuse_while_training(run, retrain: str) -> None:
    """A run still being trained (its folder's lock held by a live process) has no model to score yet: say so,
    not that its model.pt is missing."""
    from ..io.atomic import holder
    from ..io.errors import OutputError

    owner = holder(run)
    if owner is not None and not (run / paths.MODEL).exists():
        raise OutputError(f"{run} is being trained now (process {owner.get('pid', '?')} on {owner.get('host', '?')}): "
                          f"evaluate it when `{retrain}` has finished")


def evaluate_run(params: dict, dataset: str, method: str, seed: int, device: torch.device,
                 config: str | None = None) -> dict:
    """Score the run, write its metrics.json; returns the splits' scores (and rank, argmax diagnostics)."""
    from ..config import run_hash
    from ..config.runspec import final_config
    from ..data.checks import check_prepared
    from ..io.runtime import peak_memory_mb, reset_peak_memory
    from ..training.checkpoints import check_model, load_torch
    from ..training.loop import finetune_config
    from ..training.step import build_model
    from .evaluate import evaluate, write_metrics

    prepared = check_prepared(params, dataset)
    run = paths.run_dir(params, dataset, method, seed)
    at = f" --config {config}" if config and config != "params.yaml" else ""  # the hints name the params file
    retrain = f"python -m pipeline_src train{at} --dataset {dataset} --method {method} --seed {seed}"
    final = cfg = final_config(params, dataset, method, seed)
    no_rank = {**final["evaluation"], "rank_contexts": 0}  # the other models of a run: scored, rank not repeated
    _refuse_while_training(run, retrain)
    trained = None
    if cfg["training"].get("finetune_epochs"):  # the finetuned weights are the run's; the trained ones beside
        trained = _model(run, device, retrain)
        check_model(run / paths.MODEL, trained, cfg, retrain)
        run, cfg = paths.finetune_dir(params, dataset, method, seed), finetune_config(cfg)
        retrain = retrain.replace(" train ", " finetune ")
    ckpt = _model(run, device, retrain)
    check_model(run / paths.MODEL, ckpt, cfg, retrain)
    model = build_model(ckpt["config"], prepared).to(device)
    model.load_state_dict(ckpt["model"])
    reset_peak_memory(device)
    raw = paths.raw_dir(params, dataset)
    splits = evaluate(model, {**ckpt["config"], "evaluation": final["evaluation"]}, prepared, raw, device)
    summary = train_record(run / paths.TRAIN_RECORD, ckpt["config"], retrain)
    summary["kept_epoch"] = ckpt.get("epoch")
    if trained is not None:  # the run is the trained one (config, hash, cost); its scores are the finetuned model's
        finetuned = dict(summary)  # its config says how it ran (lr, epochs)
        summary = train_record(paths.run_dir(params, dataset, method, seed) / paths.TRAIN_RECORD,
                                trained["config"], retrain.replace(" finetune ", " train "))
        summary.update(kept_epoch=trained.get("epoch"), finetune=finetuned)
        model.load_state_dict(trained["model"])  # and the trained model scored the same way (papers give both)
        summary["before_finetune"] = evaluate(model, {**trained["config"], "evaluation": no_rank}, prepared, raw,
                                              device, argmax=False)
    if (run / paths.BEST_MODEL).exists() and ckpt["config"]["training"].get("keep") == "last":
        best = load_torch(run / paths.BEST_MODEL, device, f"delete the run directory and rerun `{retrain}`")
        check_model(run / paths.BEST_MODEL, best, ckpt["config"], retrain)
        model.load_state_dict(best["model"])  # the best-validation epoch's weights, scored the same way
        summary["best_valid_model"] = {"epoch": best["epoch"], **evaluate(
            model, {**ckpt["config"], "evaluation": no_rank}, prepared, raw, device, argmax=False)}
    if (summary.get("budget") or {}).get("snapshots"):  # the weights kept at each budget point, scored on test
        summary["budget"]["snapshots"] = score_snapshots(run, summary["budget"]["snapshots"], model, ckpt["config"],
                                                         final["evaluation"], prepared, device, retrain)
    # the result is this config's: its evaluation settings (which need no retraining) are the current ones
    summary.update(config=final, config_hash=run_hash(final))
    summary["prepared_meta_sha256"] = sha256_of(prepared / paths.META)  # the data it was scored on
    write_metrics(paths.metrics_path(params, dataset, method, seed), summary, splits, dataset,
                  method, peak_memory_mb(device))
    return splits


def train_record(path: Path, model_config: dict, retrain: str) -> dict:
    """A run's train.json (its cost, its epochs) as training wrote it, and the one of the model beside it: its
    cost and epochs become the run's reported numbers, so an edited one, or one copied from another run, is
    refused."""
    from ..config import train_hash

    record = read_json(path, "config_hash", "config")
    # one without a seal is refused: a committed one from before digests is sealed by `restore` once it matched
    # its stash's manifest, so an unsealed one here was written or edited by hand
    check_seal(path, record, f"`{retrain}`")
    if train_hash(record["config"]) != train_hash(model_config):
        raise ConfigError(f"{path} is not the record of the model beside it (another run's training config): "
                          f"rerun `{retrain}`")
    return record


def score_snapshots(run: Path, points: list[dict], model, cfg: dict, evaluation: dict, prepared: Path,
                    device: torch.device, retrain: str) -> list[dict]:
    """Each budget point's kept weights (``training.budget_points``: points/<m>x.pt) scored exactly on the test
    split: the points with ``test_nll`` and ``test_ppl`` added. A missing or foreign file is refused."""
    import math

    from ..data.batching import batchify
    from ..data.prepare import load_split
    from ..data.streaming import stream_log_probs
    from ..training.checkpoints import check_model, load_torch

    data = batchify(load_split(prepared, "test"), evaluation["batch_size"], device)
    out = []
    for p in points:
        path = run / paths.SNAPSHOTS / p["file"]
        kept = load_torch(path, device, f"delete the run directory and rerun `{retrain}`")
        check_model(path, kept, cfg, retrain)
        for key in ("tokens", "steps", "multiple", "rung"):  # the weights of this point, not another's file
            if key in p and key in kept and kept[key] != p[key]:
                raise ConfigError(f"{path} holds the weights at {key} {kept[key]}, not the {p[key]} train.json "
                                  f"records for it (a file copied or moved): delete the run directory and rerun "
                                  f"`{retrain}`")
        model.load_state_dict(kept["model"])
        lp, _ = stream_log_probs(model, data, cfg["training"]["bptt"])
        nll = float(-lp.double().mean())
        out.append({**p, "test_nll": nll, "test_ppl": math.exp(nll) if math.isfinite(nll) else math.inf})
    return out
