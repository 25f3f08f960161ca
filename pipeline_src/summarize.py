"""Aggregate per-run metrics (``summary.csv``), learning curves (``history.csv``) and matrix fits (``matrix.csv``)."""
from __future__ import annotations

import json

import pandas as pd

from . import paths
from .atomic import atomic_path

SUMMARY_COLUMNS = ["dataset", "method", "split", "nll", "ppl", "true_nll", "gap_nll", "log_z_mean", "log_z_std",
                   "unnormalised_ppl", "tokens",
                   "tokens_per_s_train", "tokens_per_s_eval", "peak_mem_mb", "params", "seed", "epochs",
                   "best_epoch", "wall_time_s", "logprob_rank", "rank_contexts", "head_dim", "device", "config_hash"]


def summary_rows(metrics: dict) -> list[dict]:
    rows = []
    rank = metrics.get("rank") or {}
    for split, m in metrics["splits"].items():
        rows.append({"dataset": metrics["dataset"], "method": metrics["method"], "split": split,
                     "nll": m["nll"], "ppl": m["ppl"], "true_nll": m.get("true_nll"), "gap_nll": m.get("gap_nll"),
                     "log_z_mean": m.get("log_z_mean"), "log_z_std": m.get("log_z_std"),
                     "unnormalised_ppl": m.get("unnormalised_ppl"),
                     "tokens": m["tokens"], "tokens_per_s_train": metrics["tokens_per_s_train"],
                     "tokens_per_s_eval": m["tokens_per_s_eval"], "peak_mem_mb": metrics["peak_mem_mb"],
                     "params": metrics["params"], "seed": metrics["seed"], "epochs": metrics["epochs"],
                     "best_epoch": metrics["best_epoch"], "wall_time_s": metrics["wall_time_s"],
                     "logprob_rank": rank.get("rank"), "rank_contexts": rank.get("contexts"),
                     "head_dim": rank.get("head_dim"),
                     "device": metrics["device"], "config_hash": metrics["config_hash"]})
    return rows


def summarize(params: dict) -> pd.DataFrame:
    rows, curves = [], []
    for dataset in params["run"]["datasets"]:
        for method in params["run"]["methods"]:
            path = paths.metrics_path(params, dataset, method)
            if not path.exists():
                raise FileNotFoundError(f"{path} is missing: run `python -m pipeline_src evaluate "
                                        f"--dataset {dataset} --method {method}` first")
            rows.extend(summary_rows(json.loads(path.read_text())))
            hist = pd.read_csv(paths.run_dir(params, dataset, method) / "history.csv")
            curves.append(hist.assign(dataset=dataset, method=method))
    matrix_rows = []
    for vocab in params["matrix"]["vocab_sizes"]:
        for dim in params["matrix"]["dims"]:
            path = paths.matrix_fit_path(params, vocab, dim)
            if not path.exists():
                raise FileNotFoundError(f"{path} is missing: run `python -m pipeline_src matrix "
                                        f"--vocab {vocab} --dim {dim}` first")
            matrix_rows.extend(json.loads(path.read_text())["rows"])
    df = pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
    history = pd.concat(curves, ignore_index=True)
    history = history[["dataset", "method"] + [c for c in history.columns if c not in ("dataset", "method")]]
    matrix = pd.DataFrame(matrix_rows)
    for out, frame in ((paths.summary_path(params), df), (paths.history_path(params), history),
                       (paths.matrix_summary_path(params), matrix)):
        with atomic_path(out) as tmp:
            frame.to_csv(tmp, index=False)
    return df
