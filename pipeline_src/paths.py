"""Where every artifact lives. Snakemake rules, DVC stages and the CLI all use these names."""
from __future__ import annotations

from pathlib import Path


def raw_dir(params: dict, dataset: str) -> Path:
    return Path(params["data_dir"]) / "raw" / dataset


def prepared_dir(params: dict, dataset: str) -> Path:
    return Path(params["data_dir"]) / "prepared" / dataset


def run_dir(params: dict, dataset: str, method: str) -> Path:
    return Path(params["results_dir"]) / "runs" / dataset / method


def metrics_path(params: dict, dataset: str, method: str) -> Path:
    return run_dir(params, dataset, method) / "metrics.json"


def summary_path(params: dict) -> Path:
    return Path(params["results_dir"]) / "summary.csv"


def history_path(params: dict) -> Path:
    return Path(params["results_dir"]) / "history.csv"


def report_path(params: dict) -> Path:
    return Path(params["results_dir"]) / "report.html"


def bench_path(params: dict) -> Path:
    return Path(params["results_dir"]) / "bench.csv"


def matrix_fit_path(params: dict, vocab: int, dim: int) -> Path:
    return Path(params["results_dir"]) / "matrix" / f"M{vocab}-d{dim}.json"


def matrix_summary_path(params: dict) -> Path:
    return Path(params["results_dir"]) / "matrix.csv"
