import shlex
import sys
from pathlib import Path

sys.path.insert(0, workflow.basedir)

from pipeline_src.io import paths
from pipeline_src.io.errors import PipelineError
from pipeline_src.config import config_hash, data_config, load, run_datasets, run_pairs, run_seeds, train_config
from pipeline_src.config.runspec import resolve_run
from pipeline_src.config.tuning import rung, trial_count
from pipeline_src.records.hashes import SUMMARY_SENTINEL, dvc_record, record_hashes


# One params file for Snakemake, DVC and the CLI. Choose another with `--config params=FILE`;
# `--configfile` would merge files behind the CLI's back, so it is refused: to lay a few keys over a
# params file, write them in a small file that says `extends: base.yaml` (pipeline_src/config/loading.py).
if set(config) - {"params"}:
    raise WorkflowError(
        "pass the params file as `--config params=FILE` (not --configfile or other --config keys; to override "
        "a few keys, give FILE `extends: base.yaml` and only those keys); "
        f"got config keys {sorted(config)}"
    )
PARAMS_FILE = config.get("params", "params.yaml")
if not isinstance(PARAMS_FILE, str) or not PARAMS_FILE.strip():
    raise WorkflowError("--config params= names no params file: give one (e.g. --config params=params.yaml)")
try:
    P = load(PARAMS_FILE)
    paths.check_outside_repository(P, PARAMS_FILE)
    # Each run's settings as a hash in a small file, rewritten only when it changes: an input of the run's
    # rules, so a run is rebuilt after a settings change even when `dvc repro` or a hand made its files.
    record_hashes(P)
except PipelineError as e:
    raise WorkflowError(str(e)) from None
except OSError as e:  # results_dir a file, read-only, or a full disk: where and why, not a traceback
    raise WorkflowError(f"{PARAMS_FILE}: cannot write the hash files under results_dir {P['results_dir']!r}"
                        f"{f' ({e.filename})' if e.filename else ''}: {e.strerror or e}; choose a writable "
                        f"results_dir") from None

# Under `--sdm conda` each job runs in envs/environment.yaml and `python` is that env's;
# otherwise jobs use the interpreter running Snakemake (the project's venv).
from snakemake.settings.types import DeploymentMethod

_CONDA = DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method
PY = f"{'python' if _CONDA else shlex.quote(sys.executable)} -m pipeline_src"
ENV = "../../envs/environment.yaml"
CLI = f"{PY} {{step}} --config {shlex.quote(PARAMS_FILE)}"  # a path with a space is one word in the shell
DATASETS = run_datasets(P)  # run.datasets, then run.extra.datasets
PAIRS = run_pairs(P)  # every (dataset, method) of both crossings
SEEDS = run_seeds(P)
TUNING = P["tuning"]


wildcard_constraints:
    dataset="[A-Za-z0-9][A-Za-z0-9_.-]*",
    method="[A-Za-z0-9][A-Za-z0-9_.-]*",
    vocab="[0-9]+",
    dim="[0-9]+",
    seed="[0-9]+",
    trial="[0-9]+",
    name="[A-Za-z0-9_-]+",


def cli(step, **args):
    """The shell command of one pipeline step; identical in shape to the DVC stage's `cmd`."""
    return " ".join([CLI.format(step=step)] + [f"--{k} {v}" for k, v in args.items()])


def get_local_corpus(wildcards):
    """A `local` corpus's own files: editing one reruns fetch and everything downstream."""
    corpus = P["datasets"][wildcards.dataset]["corpus"]
    return [corpus[s] for s in ("train", "valid", "test")] if corpus["type"] == "local" else []


def get_raw_dir(wildcards):
    return str(paths.raw_dir(P, wildcards.dataset))


def get_prepared_dir(wildcards):
    return str(paths.prepared_dir(P, wildcards.dataset))


def get_data_hash(wildcards):
    return config_hash(data_config(P, wildcards.dataset))


def get_data_hash_file(wildcards):
    return str(paths.data_hash_path(P, wildcards.dataset))


def get_trial_hash_file(wildcards):
    return str(paths.trial_hash_path(P, wildcards.dataset, wildcards.method, int(wildcards.trial)))


def get_train_hash(wildcards):
    """What trains a final run, from the params file (a tuned run also depends on its selected.json, an input);
    its evaluation settings are not part of it (``config.train_hash``): they re-evaluate, never retrain."""
    return resolve_run(P, wildcards.dataset, wildcards.method, seed=int(wildcards.seed), as_written=True).train_hash


def get_run_hash(wildcards):
    """The params file's settings of a final run, evaluation included."""
    return resolve_run(P, wildcards.dataset, wildcards.method, seed=int(wildcards.seed), as_written=True).hash


def get_train_hash_file(wildcards):
    return str(paths.run_hash_path(P, wildcards.dataset, wildcards.method, int(wildcards.seed), "train"))


def get_evaluate_hash_file(wildcards):
    return str(paths.run_hash_path(P, wildcards.dataset, wildcards.method, int(wildcards.seed), "evaluate"))


def get_train_threads(wildcards):
    """A training or finetuning job gets every core Snakemake has when it is the DAG's only training job
    (one dataset x method x seed, no tuning: a paper config), else one: many one-thread jobs use the cores
    better than fewer wide ones (docs/bench.md times one run on one and two threads)."""
    lone = len(PAIRS) * len(SEEDS) == 1 and not TUNING["enabled"]
    return workflow.cores if lone else 1


def get_gpus(wildcards):
    """The GPUs a job asks a cluster for (the `gpu` resource; a local run counts none): one, unless the params
    file says `device: cpu`."""
    return 0 if P["device"] == "cpu" else 1


def get_train_gpus(wildcards):
    """A training job's GPUs: as get_gpus, and none for a run timed by its CPU clock (`budget_clock: cpu`, which
    refuses CUDA), so the CPU-clock sweeps queue on CPU nodes."""
    return 0 if train_config(P, wildcards.dataset).budget_clock == "cpu" else get_gpus(wildcards)


def _run_size(wildcards):
    """(the run's config as written, its training split's tokens, its vocabulary): what its job's size follows."""
    from pipeline_src.cost.resources import corpus_size

    trial = getattr(wildcards, "trial", None)
    spec = resolve_run(P, wildcards.dataset, wildcards.method, as_written=True,
                       **({"trial": int(trial)} if trial is not None else {"seed": int(wildcards.seed)}))
    return (spec.config, *corpus_size(P, wildcards.dataset))


def get_train_runtime(wildcards, attempt):
    """A training job's time limit in minutes, from its tokens and step (pipeline_src/cost/resources.py); a
    retried job (the SLURM profile's `retries`) asks for `attempt` times as much."""
    from pipeline_src.cost.resources import runtime_minutes

    return runtime_minutes(*_run_size(wildcards), gpu=get_train_gpus(wildcards) > 0) * attempt


def get_mem_mb(wildcards, attempt):
    """A training or evaluation job's memory in MB, from its parameters and logits (cost/resources.py)."""
    from pipeline_src.cost.resources import memory_mb

    cfg, _, vocab = _run_size(wildcards)
    return memory_mb(cfg, vocab) * attempt


def get_evaluate_runtime(wildcards, attempt):
    """An evaluation job's time limit in minutes (cost/resources.py), times `attempt` on a retry."""
    from pipeline_src.cost.resources import evaluation_minutes

    return evaluation_minutes(*_run_size(wildcards), gpu=get_gpus(wildcards) > 0) * attempt


def get_train_priority(wildcards):
    """Longest jobs first: Snakemake knows no runtimes, and a mixture's run started last leaves a core idle
    (each head declares its training cost where it registers: pipeline_src/heads/)."""
    from pipeline_src.heads.options import train_cost

    return train_cost(P["methods"][wildcards.method]["type"])


def get_trial_hash(wildcards):
    return resolve_run(P, wildcards.dataset, wildcards.method, trial=int(wildcards.trial), as_written=True).train_hash


def get_trials(wildcards):
    """Every trial a selection compares (under successive halving, the promoted repeats too)."""
    n = trial_count(P, wildcards.dataset) if TUNING["enabled"] else 0
    return [str(paths.trial_dir(P, wildcards.dataset, wildcards.method, t) / paths.TRAIN_RECORD) for t in range(n)]


def get_promoted_from(wildcards):
    """A promoted trial (successive halving) repeats the best of the rung-0 trials: their records decide which."""
    if not rung(P, wildcards.dataset, int(wildcards.trial)):
        return []
    return [str(paths.trial_dir(P, wildcards.dataset, wildcards.method, t) / paths.TRAIN_RECORD)
            for t in range(TUNING["trials"])]


def get_selected(wildcards):
    """A final run's tuned settings when tuning is on; nothing otherwise."""
    return [str(paths.selected_path(P, wildcards.dataset, wildcards.method))] if TUNING["enabled"] else []


def get_all_selected(wildcards=None):
    if not TUNING["enabled"]:
        return []
    return [str(paths.selected_path(P, d, m)) for d, m in PAIRS]


def model_output(path):
    """A final run's model.pt: kept, or (``keep_models: false``) deleted once evaluated and not rebuilt while
    the run's records are current (``python -m pipeline_src restore`` relies on it)."""
    return path if P["keep_models"] else temp(path)


def get_finetuned(wildcards):
    """A final run's finetuning outputs when training.finetune_epochs is set (evaluation scores that model)."""
    from pipeline_src.config import train_config

    if not train_config(P, wildcards.dataset).finetune_epochs:
        return []
    d = paths.finetune_dir(P, wildcards.dataset, wildcards.method, int(wildcards.seed))
    return [str(d / paths.MODEL), str(d / paths.TRAIN_RECORD)]


def get_all_metrics(wildcards=None):
    return [str(paths.metrics_path(P, d, m, s)) for d, m in PAIRS for s in SEEDS]


def get_all_histories(wildcards=None):
    return [str(paths.run_dir(P, d, m, s) / paths.HISTORY) for d, m in PAIRS for s in SEEDS]


def get_matrix_fits(wildcards=None):
    """The matrix experiment's fits; none where matrix.methods is [] (the experiment is not part of the config)."""
    return [str(paths.matrix_fit_path(P, v, d, s))
            for v in P["matrix"]["vocab_sizes"] for d in P["matrix"]["dims"] for s in SEEDS if P["matrix"]["methods"]]


REFERENCES = list(P.get("references", {}))


def get_all_references(wildcards=None):
    """Every dataset's count-based reference rows (Kneser-Ney): inputs of the summary."""
    return [str(paths.reference_path(P, d, r)) for d in DATASETS for r in REFERENCES]


def get_gpu_cells(wildcards=None):
    """The GPU cell bench the budget axis reads (statistics.gpu_cells), when named: a new bench remakes the summary."""
    return [P["statistics"]["gpu_cells"]] if P["statistics"].get("gpu_cells") else []


def get_reference_hash_file(wildcards):
    return str(paths.reference_hash_path(P, wildcards.dataset, wildcards.name))


def get_figures(wildcards=None):
    return [str(paths.figure_path(P, d, f)) for d in DATASETS for f in paths.FIGURES]


def get_final_outputs():
    return [str(paths.summary_path(P)), str(paths.report_path(P)), str(paths.bench_path(P)), *get_figures()]


RESULTS = P["results_dir"]
HASHES = str(paths.hashes_dir(P))
LOGS = f"{RESULTS}/logs"
# Each folder of a run as a wildcard pattern, made by pipeline_src/io/paths.py (the one place a path is spelled)
RAW = paths.raw_dir(P, "{dataset}")
PREPARED = paths.prepared_dir(P, "{dataset}")
RUN = paths.run_dir(P, "{dataset}", "{method}", "{seed}")
FINETUNE = paths.finetune_dir(P, "{dataset}", "{method}", "{seed}")
TRIAL = paths.trial_dir(P, "{dataset}", "{method}", "{trial}")
TUNING_DIR = paths.tuning_dir(P, "{dataset}", "{method}")
# Every file under results_dir that a rule below reads or writes, from the same place
OUT = {name: str(path) for name, path in {
    "summary": paths.summary_path(P), "summary_json": paths.summary_path(P).with_suffix(".json"),
    "headline_metrics": paths.headline_metrics_path(P), "valid_curves": paths.valid_curves_path(P),
    "history": paths.history_path(P), "anytime": paths.anytime_path(P), "matrix": paths.matrix_summary_path(P),
    "headline": paths.headline_path(P), "contrasts": paths.contrasts_path(P),
    "references": paths.references_summary_path(P), "tuning": paths.tuning_summary_path(P),
    "tuning_curves": paths.tuning_curves_path(P), "bench": paths.bench_path(P),
    "bench_json": paths.bench_path(P).with_suffix(".json"), "report": paths.report_path(P),
    "report_notebook": paths.report_path(P).with_suffix(".ipynb"),
    "reference": paths.reference_path(P, "{dataset}", "{name}"),
    "matrix_fit": paths.matrix_fit_path(P, "{vocab}", "{dim}", "{seed}"),
    **{f"figure_{f}": paths.figure_path(P, "{dataset}", f) for f in paths.FIGURES},
}.items()}
