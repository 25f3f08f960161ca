"""Where every artifact lives: each folder and file name is spelled here once. The CLI's steps, Snakemake's
rules (``workflow/rules/common.smk`` makes its wildcard patterns from these functions) and, through the drift
test of ``tests/test_pipeline.py``, DVC's stages all use these names."""
from __future__ import annotations

from pathlib import Path

from .tracked import CODE_FOLDERS, OWN_FOLDERS, REPOSITORY, committed_folders  # noqa: F401 (read here and from paths)

# A dataset's raw folder (data/raw/<dataset>)
SOURCE = "source.json"  # where the corpus came from; written last, so it marks a complete folder
FETCHED = "fetched.json"  # the hash of the config that fetched it
TRUTH = "truth.npz"  # a language with exact truth: its tables
TRUTH_SUMMARY = "truth.json"  # and its true perplexities, rank and order
# A dataset's prepared folder (data/prepared/<dataset>)
META = "meta.json"  # sizes, the data config and its hash, every file's digest; written last
VOCAB = "vocab.txt"
CLOSED_VOCAB = "closed_vocab.txt"  # raw/<ds> of a synthetic language: its whole vocabulary, seen or not
NOISE = "noise.npz"  # the train counts (frequency bands, unigram noise)
# A run's folder (results/runs/<dataset>/<method>/seed<k>, a tuning trial's, a finetuning stage's)
MODEL = "model.pt"  # the weights kept (training.keep) with the config that made them
BEST_MODEL = "model-best.pt"  # the best-validation weights when model.pt holds the last epoch's
HISTORY = "history.csv"  # one row per epoch (and per anytime point)
TRAIN_RECORD = "train.json"  # what training measured
METRICS = "metrics.json"  # what evaluation measured
ANYTIME = "anytime.csv"  # a budgeted run's validations at equal fractions of its budget
SNAPSHOTS = "points"  # a run's weights at each of training.budget_points (points/<multiple>x.pt)
CHECKPOINT = "checkpoint.pt"  # the resume state while a run trains (deleted when it completes)
PREVIOUS_CHECKPOINT = "checkpoint.prev.pt"  # the generation before it, kept in case the newest is damaged
FORK = "fork.pt"  # a ladder run's trunk while a cooldown branch runs from it (training/ladder.py)
SELECTED = "selected.json"  # a tuning's choice, read by its final runs
RECORDS_MANIFEST = "records.json"  # a stash of records (a publication's records/ folder): every file's digest
EARLIER_DATA = "earlier-data"  # a publication's (and results_dir's) <dataset>.meta.json of an earlier preparation
PROVENANCE = "provenance.json"  # a publication's commit, params file and the tables it copied
HEADLINE_METRICS = "headline-metrics"  # a folder: one small file a dataset and method, a row each of `dvc metrics show`
# The result tables under results_dir, in the order a publication lists them; it copies every one that exists.
TABLES = ("summary.csv", "summary.json", "headline.csv", "contrasts.csv", "references.csv", "history.csv", "anytime.csv",
          "matrix.csv", "bench.csv", "bench.json", "tuning.csv", "tuning_curves.csv", "step-bench.csv", "step-bench.json",
          "step-breakdown.csv", "sampler-costs.csv", "sampler-bias.csv", "cell-bench.csv", "cell-bench.json",
          "budget-ranking.csv", "budget-advice.csv", "crossovers.csv", "budget-fits.csv", "gpu-hours.csv",
          "gpu-equal-time.csv", "ladder-advice.csv", "equal-time.csv", "ladder-loo.csv",
          HEADLINE_METRICS, "valid-curves.csv")  # the last two: what DVC shows (dvc.yaml's top-level entries)
TABLE_FOLDERS = (HEADLINE_METRICS,)  # of TABLES, the folders of tables: a publication lists (and seals) each file
SUMMARY_TABLES = ("summary.csv", "headline.csv", "contrasts.csv", "references.csv", "history.csv", "anytime.csv",
                  "matrix.csv", "tuning.csv", "tuning_curves.csv", "budget-ranking.csv", "budget-advice.csv",
                  "crossovers.csv", "budget-fits.csv", "gpu-hours.csv",
                  "gpu-equal-time.csv", "ladder-advice.csv", "equal-time.csv",
                  "ladder-loo.csv")  # summarize's own: summary.json lists their digests


def raw_dir(params: dict, dataset: str) -> Path:
    return Path(params["data_dir"]) / "raw" / dataset


def prepared_dir(params: dict, dataset: str) -> Path:
    return Path(params["data_dir"]) / "prepared" / dataset


def snapshot_path(run: Path, multiple: float) -> Path:
    """Where a run keeps its weights at ``multiple`` of its token budget (``training.budget_points``)."""
    return run / SNAPSHOTS / f"{multiple:g}x.pt"


def run_dir(params: dict, dataset: str, method: str, seed: int) -> Path:
    """One final run: a (dataset, method) at one run seed."""
    return Path(params["results_dir"]) / "runs" / dataset / method / f"seed{seed}"


def finetune_dir(params: dict, dataset: str, method: str, seed: int) -> Path:
    """The finetuning stage of a final run (training.finetune_epochs)."""
    return run_dir(params, dataset, method, seed) / "finetune"


def metrics_path(params: dict, dataset: str, method: str, seed: int) -> Path:
    return run_dir(params, dataset, method, seed) / METRICS


def tuning_dir(params: dict, dataset: str, method: str) -> Path:
    return Path(params["results_dir"]) / "tuning" / dataset / method


def trial_dir(params: dict, dataset: str, method: str, trial: int) -> Path:
    return tuning_dir(params, dataset, method) / f"trial{trial}"


def selected_path(params: dict, dataset: str, method: str) -> Path:
    """The settings a tuning selected for (dataset, method), read by its final runs."""
    return tuning_dir(params, dataset, method) / SELECTED


def tuning_summary_path(params: dict) -> Path:
    return Path(params["results_dir"]) / "tuning.csv"


def tuning_curves_path(params: dict) -> Path:
    """Each tuned method's best validation perplexity after k trials (the tuning's curve)."""
    return Path(params["results_dir"]) / "tuning_curves.csv"


def headline_path(params: dict) -> Path:
    """Per dataset and method: means and intervals over seeds, deltas against the reference."""
    return Path(params["results_dir"]) / "headline.csv"


def contrasts_path(params: dict) -> Path:
    """Per dataset, each method of ``statistics.contrasts`` against its own control."""
    return Path(params["results_dir"]) / "contrasts.csv"


def summary_path(params: dict) -> Path:
    return Path(params["results_dir"]) / "summary.csv"


def headline_metrics_path(params: dict) -> Path:
    """The run set's compact metrics for `dvc metrics show`, a folder of ``<dataset>/<method>.json`` (DVC shows a
    row a file: one a dataset and method, a few columns: test perplexity, its interval, seeds). The verdicts are in
    headline.csv; the per-run metrics.json files are outputs, not metrics (186 columns each)."""
    return Path(params["results_dir"]) / HEADLINE_METRICS


def headline_metric_file(dataset: str, method: str) -> str:
    """One dataset's and method's file in :func:`headline_metrics_path`, relative to results_dir."""
    return f"{HEADLINE_METRICS}/{dataset}/{method}.json"


def valid_curves_path(params: dict) -> Path:
    """Validation perplexity per epoch, mean over seeds, one row per dataset, method and epoch (`dvc plots show`
    draws one line per method, one panel per dataset: .dvc/plots/by_method.json)."""
    return Path(params["results_dir"]) / "valid-curves.csv"


def history_path(params: dict) -> Path:
    return Path(params["results_dir"]) / "history.csv"


def anytime_path(params: dict) -> Path:
    """Every budgeted run's anytime curve (valid ppl against training seconds and tokens)."""
    return Path(params["results_dir"]) / "anytime.csv"


def report_path(params: dict) -> Path:
    return Path(params["results_dir"]) / "report.html"


def bench_path(params: dict) -> Path:
    return Path(params["results_dir"]) / "bench.csv"


def sampler_costs_path(params: dict) -> Path:
    """The kernel proposal's rebuild and draw costs (pipeline_src/cost/samplers.py); ``sampler-bias.csv`` beside."""
    return Path(params["results_dir"]) / "sampler-costs.csv"


def step_bench_path(params: dict) -> Path:
    """Whole training steps against their floor and the peer (pipeline_src/cost/stepbench.py)."""
    return Path(params["results_dir"]) / "step-bench.csv"


def cell_bench_path(params: dict) -> Path:
    """Each sweep cell's whole training step against its own floor (pipeline_src/cost/cells.py)."""
    return Path(params["results_dir"]) / "cell-bench.csv"


def matrix_fit_path(params: dict, vocab: int, dim: int, seed: int) -> Path:
    return Path(params["results_dir"]) / "matrix" / f"M{vocab}-d{dim}-seed{seed}.json"


def matrix_summary_path(params: dict) -> Path:
    return Path(params["results_dir"]) / "matrix.csv"


FIGURES = ("forest", "pareto", "curves")  # one SVG each per dataset


def figures_dir(params: dict, dataset: str) -> Path:
    return Path(params["results_dir"]) / "figures" / dataset


def figure_path(params: dict, dataset: str, name: str) -> Path:
    return figures_dir(params, dataset) / f"{name}.svg"


def hashes_dir(params: dict) -> Path:
    """Small files holding the config hash of each step's inputs (``records/hashes.py``): inputs of the
    Snakemake rules and the DVC stages, rewritten only when a hash changes."""
    return Path(params["results_dir"]) / "hashes"


def run_hash_path(params: dict, dataset: str, method: str, seed: int, step: str) -> Path:
    """``step``: ``train`` (what makes the model) or ``evaluate`` (that and how it is scored)."""
    return hashes_dir(params) / dataset / method / f"seed{seed}.{step}"


def earlier_meta_path(params: dict, dataset: str) -> Path:
    """The meta.json of an earlier preparation of ``dataset`` that restored records were scored on
    (:func:`data.checks.scored_data`)."""
    return Path(params["results_dir"]) / EARLIER_DATA / f"{dataset}.meta.json"


def reference_path(params: dict, dataset: str, name: str) -> Path:
    """A count-based reference row (``references``: Kneser-Ney), one per dataset: no seeds."""
    return Path(params["results_dir"]) / "references" / dataset / f"{name}.json"


def references_summary_path(params: dict) -> Path:
    return Path(params["results_dir"]) / "references.csv"


def reference_hash_path(params: dict, dataset: str, name: str) -> Path:
    return hashes_dir(params) / dataset / f"{name}.reference"


def data_hash_path(params: dict, dataset: str) -> Path:
    """What fetches and prepares a dataset (its data config)."""
    return hashes_dir(params) / f"{dataset}.data"


def trial_hash_path(params: dict, dataset: str, method: str, trial: int) -> Path:
    return hashes_dir(params) / dataset / method / f"trial{trial}.train"


def statistics_hash_path(params: dict) -> Path:
    """How the summary turns seeds into verdicts (``statistics``)."""
    return hashes_dir(params) / "statistics"


def check_output_folder(folder: Path, label: str) -> None:
    """Refuse, as ``label``, an output folder that is a file, the repository itself or inside one of its committed
    folders (outputs would be written beside, or over, committed files)."""
    from .errors import ConfigError
    from .tracked import repository_of

    where = folder.resolve()
    if where.exists() and not where.is_dir():
        raise ConfigError(f"{label} is a file, not a folder: the steps write their outputs under it; name a folder "
                          f"(it is created when missing)")
    root = repository_of(where)  # this checkout, or another (a second clone, a worktree)
    if root is None:
        return
    other = "" if root == REPOSITORY else f" checkout at {root}"
    if where == root:
        what = f"the repository{other} itself"
    elif where.relative_to(root).parts[0] in committed_folders(root) | {".git"}:
        what = f"inside the repository{other}'s {where.relative_to(root).parts[0]}/"
    else:
        return
    raise ConfigError(f"{label} is {what}, whose files are committed: outputs would be written beside or over them; "
                      f"use {OWN_FOLDERS[0]}/, {OWN_FOLDERS[1]}/, results-NAME/ or a folder outside the repository")


def check_writable(*files: Path) -> None:
    """Each of ``files`` can be written: its folder made (an OSError names it) and writable, itself not a folder
    (checked before a step spends minutes on what it would write)."""
    import os

    from .errors import ConfigError

    for f in files:
        f.parent.mkdir(parents=True, exist_ok=True)
        if f.is_dir() or not os.access(f.parent, os.W_OK):
            raise ConfigError(f"{f}: cannot be written ({'a folder' if f.is_dir() else 'its folder is read-only'}); "
                              f"remove it or set results_dir elsewhere")


def check_outside_repository(params: dict, source: str) -> None:
    """Refuse a data_dir or results_dir that is the repository itself or lies in one of its committed folders
    (code, docs, configs, publications): a step's outputs (summary.csv, report.html, runs/) would be written
    beside, or over, committed files. ``publish`` is the one command that writes into benchmarks/. Nor may the
    two folders nest: a step that replaces its own folder (prepare) would delete the other's files."""
    from .errors import ConfigError

    for key in ("data_dir", "results_dir"):
        check_output_folder(Path(params[key]), f"{source}: key '{key}': {params[key]!r}")
    data, results = Path(params["data_dir"]).resolve(), Path(params["results_dir"]).resolve()
    if data == results or data in results.parents or results in data.parents:
        raise ConfigError(f"{source}: key 'results_dir': {params['results_dir']!r} and data_dir "
                          f"{params['data_dir']!r} lie one inside the other: a step that replaces its own folder "
                          f"(prepare, fetch) would delete the other's files; give them separate folders")
