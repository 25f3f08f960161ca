"""Where every artifact lives. Snakemake rules, DVC stages and the CLI all use these names."""
from __future__ import annotations

from pathlib import Path


def raw_dir(params: dict, dataset: str) -> Path:
    return Path(params["data_dir"]) / "raw" / dataset


def prepared_dir(params: dict, dataset: str) -> Path:
    return Path(params["data_dir"]) / "prepared" / dataset


def run_dir(params: dict, dataset: str, method: str, seed: int) -> Path:
    """One final run: a (dataset, method) at one run seed."""
    return Path(params["results_dir"]) / "runs" / dataset / method / f"seed{seed}"


def finetune_dir(params: dict, dataset: str, method: str, seed: int) -> Path:
    """The finetuning stage of a final run (training.finetune_epochs)."""
    return run_dir(params, dataset, method, seed) / "finetune"


def metrics_path(params: dict, dataset: str, method: str, seed: int) -> Path:
    return run_dir(params, dataset, method, seed) / "metrics.json"


def tuning_dir(params: dict, dataset: str, method: str) -> Path:
    return Path(params["results_dir"]) / "tuning" / dataset / method


def trial_dir(params: dict, dataset: str, method: str, trial: int) -> Path:
    return tuning_dir(params, dataset, method) / f"trial{trial}"


def selected_path(params: dict, dataset: str, method: str) -> Path:
    """The settings a tuning selected for (dataset, method), read by its final runs."""
    return tuning_dir(params, dataset, method) / "selected.json"


def tuning_summary_path(params: dict) -> Path:
    return Path(params["results_dir"]) / "tuning.csv"


def headline_path(params: dict) -> Path:
    """Per dataset and method: means and intervals over seeds, deltas against the reference."""
    return Path(params["results_dir"]) / "headline.csv"


def contrasts_path(params: dict) -> Path:
    """Per dataset, each method of ``statistics.contrasts`` against its own control."""
    return Path(params["results_dir"]) / "contrasts.csv"


def summary_path(params: dict) -> Path:
    return Path(params["results_dir"]) / "summary.csv"


def history_path(params: dict) -> Path:
    return Path(params["results_dir"]) / "history.csv"


def anytime_path(params: dict) -> Path:
    """Every budgeted run's anytime curve (valid ppl against training seconds and tokens)."""
    return Path(params["results_dir"]) / "anytime.csv"


def report_path(params: dict) -> Path:
    return Path(params["results_dir"]) / "report.html"


def bench_path(params: dict) -> Path:
    return Path(params["results_dir"]) / "bench.csv"


def step_bench_path(params: dict) -> Path:
    """Whole training steps against their floor and the peer (pipeline_src/stepbench.py)."""
    return Path(params["results_dir"]) / "step-bench.csv"


def matrix_fit_path(params: dict, vocab: int, dim: int, seed: int) -> Path:
    return Path(params["results_dir"]) / "matrix" / f"M{vocab}-d{dim}-seed{seed}.json"


def matrix_summary_path(params: dict) -> Path:
    return Path(params["results_dir"]) / "matrix.csv"


def hashes_dir(params: dict) -> Path:
    """Small files holding the config hash of each step's inputs (``provenance.record_hashes``): inputs of the
    Snakemake rules and the DVC stages, rewritten only when a hash changes."""
    return Path(params["results_dir"]) / "hashes"


def run_hash_path(params: dict, dataset: str, method: str, seed: int, step: str) -> Path:
    """``step``: ``train`` (what makes the model) or ``evaluate`` (that and how it is scored)."""
    return hashes_dir(params) / dataset / method / f"seed{seed}.{step}"


def reference_path(params: dict, dataset: str, name: str) -> Path:
    """A count-based reference row (``references``: Kneser-Ney), one per dataset: no seeds."""
    return Path(params["results_dir"]) / "references" / dataset / f"{name}.json"


def references_summary_path(params: dict) -> Path:
    return Path(params["results_dir"]) / "references.csv"


def reference_hash_path(params: dict, dataset: str, name: str) -> Path:
    return hashes_dir(params) / dataset / f"{name}.reference"
