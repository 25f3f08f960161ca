import copy
import os
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent


def pytest_configure(config):
    """Under pytest-xdist, each worker's torch and BLAS take their share of the cores: two workers of two threads
    each on two cores spin against each other (OpenMP's and OpenBLAS's busy waits) and ran tiny trainings 25x
    slower."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        import torch
        from threadpoolctl import threadpool_limits

        share = max(1, (os.cpu_count() or 1) // workers)
        torch.set_num_threads(share)
        threadpool_limits(limits=share, user_api="blas")


def pytest_collection_modifyitems(config, items):
    """The end-to-end tests (marked slow, a minute each) first, the rest after them in their order: under
    pytest-xdist's worksteal the short tests then fill the workers' gaps, instead of one worker running the
    long ones alone at the end."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def clean_env(home: Path, **extra: str) -> dict:
    """The environment of a pipeline the tests start (Snakemake, DVC, the CLI): the venv first on PATH, its
    own HOME, no DVC analytics (DVC starts a process for it after each command), and OpenMP threads that sleep
    when idle. With its default busy wait, a two-thread job beside another xdist worker's spins against it: the
    paper-config runs took 228 s instead of 145 s."""
    return {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(home), "OMP_WAIT_POLICY": "PASSIVE",
            "DVC_NO_ANALYTICS": "1", **extra}


@pytest.fixture(autouse=True)
def _torch_threads_restored():
    """A step that sets torch's and BLAS's thread counts (`--threads`, the step bench) sets them for the whole
    process: put them back, so a test's numbers do not depend on which tests ran before it in the same worker."""
    import torch
    from threadpoolctl import threadpool_info, threadpool_limits

    n = torch.get_num_threads()
    blas = max((p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"), default=None)
    yield
    torch.set_num_threads(n)
    if blas is not None:
        threadpool_limits(limits=blas, user_api="blas")


@pytest.fixture(scope="session")
def mirror() -> Path:
    """The offline corpus mirror: $LMBENCH_MIRROR, else ../shared/corpora beside the checkout."""
    path = Path(os.environ.get("LMBENCH_MIRROR") or ROOT.parent / "shared" / "corpora")
    if not (path / "ptb" / "ptb.train.txt").exists():
        if os.environ.get("CI"):
            pytest.fail(f"corpus mirror not found at {path} (CI must have ../shared/corpora)")
        pytest.skip(f"corpus mirror not found at {path}")
    return path


@pytest.fixture(scope="session")
def default_params() -> dict:
    return yaml.safe_load((ROOT / "params.yaml").read_text())


def tiny_params(base: dict, tmp_path: Path) -> dict:
    """The default config shrunk to seconds: a 30-word synthetic language, a 16-unit LSTM."""
    p = copy.deepcopy(base)
    p["data_dir"] = str(tmp_path / "data")
    p["results_dir"] = str(tmp_path / "results")
    p["run"] = {"datasets": ["tiny"], "methods": ["softmax"], "seeds": [0], "extra": {"datasets": [], "methods": []}}
    p["datasets"] = {"tiny": {
        "corpus": {"type": "synthetic", "vocab_size": 30, "order": 2, "dirichlet_beta": 0.5, "support": 5,
                   "smoothing": 0.01, "train_tokens": 6000, "valid_tokens": 1000, "test_tokens": 1000},
        "tokenizer": {"type": "word"},
        "model": {"emb_dim": 16, "hidden_dim": 16, "layers": 1, "dropout": 0.1, "tie_weights": True},
        "training": {"epochs": 3, "batch_size": 8, "bptt": 10, "optimizer": "adam", "lr": 0.01, "clip": 1.0,
                     "lr_decay": 2, "eval_batch_size": 4},
    }}
    p["evaluation"] = {"batch_size": 4, "rank_contexts": 100}
    p["bench"] = {"methods": ["softmax"], "vocab_sizes": [50], "tokens": 16, "dim": 8, "repeats": 1, "warmup": 0}
    p["matrix"] = {"methods": ["softmax", "mos"], "contexts": 20, "vocab_sizes": [30], "dims": [2, 4],
                   "dirichlet_beta": 0.1, "steps": 20, "lr": 0.05}
    return p


@pytest.fixture
def tiny(default_params, tmp_path) -> dict:
    return tiny_params(default_params, tmp_path)


@pytest.fixture
def tiny_data(tiny):
    """The tiny config validated, its language generated and prepared: (params, raw dir, prepared dir)."""
    from pipeline_src.config import data_config, validate
    from pipeline_src.data.prepare import prepare
    from pipeline_src.data.synthetic import generate
    from pipeline_src.io import paths

    p = validate(tiny)
    raw, prep = paths.raw_dir(p, "tiny"), paths.prepared_dir(p, "tiny")
    generate(p["datasets"]["tiny"]["corpus"], raw, p["seed"])
    prepare(raw, prep, data_config(p, "tiny"))
    return p, raw, prep


def write_params(params: dict, path: Path) -> Path:
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path


def generated_dataset(default_params: dict, tmp_path: Path, name: str, corpus_type: str) -> tuple[list[str], Path, Path]:
    """A tiny params file with one generated language of ``corpus_type`` (2,000 words, 16 classes, 20,000 train
    tokens) as dataset ``name``, fetched and prepared through the CLI: (the common CLI arguments, raw, prepared)."""
    from pipeline_src.cli import main

    p = tiny_params(default_params, tmp_path)
    p["datasets"][name] = {"corpus": {"type": corpus_type, "vocab_size": 2000, "classes": 16, "train_tokens": 20000,
                                      "valid_tokens": 3000, "test_tokens": 3000},
                           "tokenizer": {"type": "word"}, "training": {"epochs": 1}}
    p["run"] = {"datasets": [name], "methods": ["softmax"], "seeds": [0]}
    common = ["--config", str(write_params(p, tmp_path / "params.yaml")), "--dataset", name]
    assert main(["fetch", *common]) == 0 and main(["prepare", *common]) == 0
    return common, tmp_path / "data" / "raw" / name, tmp_path / "data" / "prepared" / name
