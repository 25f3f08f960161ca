"""A long run carried across sessions (pipeline_src/records/stash.py): its stashed records, restored in a fresh clone,
leave Snakemake only what is missing; a damaged stash or a changed config restores nothing it should not."""
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import clean_env, tiny_params, write_params
from test_pipeline import BIN, _planned, _project, _sh

PY = [str(BIN / "python"), "-m", "pipeline_src"]


def _refused(cmd: list[str], cwd: Path) -> str:
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=clean_env(cwd))
    assert r.returncode == 2, r.stdout + r.stderr
    return r.stderr


def _tuned(default_params: dict, tmp_path: Path) -> dict:
    p = tiny_params(default_params, tmp_path)
    p["run"]["methods"] = ["softmax", "nce"]
    p["methods"]["nce"] = {"type": "nce", "negatives": 5}
    p["keep_models"] = False
    p["references"] = {"kn": {"orders": [2]}}
    p["tuning"] = {"enabled": True, "trials": 1, "seed": 0, "epochs": 1, "lr": {"adam": [0.003, 0.03]}}
    return p


def _fresh(src: Path, dest: Path) -> Path:
    """Another clone: the workflow, params and the committed stash; no data, results or Snakemake metadata."""
    dest.mkdir()
    for name in ("Snakefile", "dvc.yaml", ".dvcignore", "params.yaml"):
        shutil.copy(src / name, dest / name)
    for name in ("workflow", "profiles", "envs", "pipeline_src", "benchmarks"):
        shutil.copytree(src / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


@pytest.mark.slow
def test_restored_records_leave_snakemake_only_what_is_missing_and_nothing_stale_or_damaged(tmp_path, default_params):
    p = _tuned(default_params, tmp_path)
    proj = _project(tmp_path, p)
    # what the records are: the runs and the references (the summary would add matrix fits, not records)
    summary = [f"results/runs/tiny/{m}/seed0/metrics.json" for m in p["run"]["methods"]] + \
        ["results/references/tiny/kn.json"]
    _sh([str(BIN / "snakemake"), "--cores", "2", *summary], proj)
    run = proj / "results" / "runs" / "tiny" / "nce" / "seed0"
    assert (run / "metrics.json").exists() and not (run / "model.pt").exists()  # keep_models: false
    assert _planned(proj, *summary) == set()  # a missing temporary model is not a reason to retrain
    out = _sh(PY + ["stash", "--name", "sweep"], proj).stdout
    assert "stashed 11 current records" in out  # 2 methods x (a trial, a selection, 3 files of a run), a reference
    manifest = json.loads((proj / "benchmarks" / "sweep" / "records" / "records.json").read_text())
    assert "runs/tiny/nce/seed0/metrics.json" in manifest["files"]

    fresh = _fresh(proj, tmp_path / "fresh")
    assert "restore needs data/prepared/tiny current first" in _refused(PY + ["restore", "--name", "sweep"], fresh)
    _sh([str(BIN / "snakemake"), "--cores", "1", "data/prepared/tiny"], fresh)
    damaged = fresh / "benchmarks" / "sweep" / "records" / "runs" / "tiny" / "softmax" / "seed0" / "history.csv"
    good = damaged.read_bytes()
    damaged.write_bytes(good + b"\n")
    err = _refused(PY + ["restore", "--name", "sweep"], fresh)
    assert f"{damaged.relative_to(fresh)}: missing or not the file the manifest" in err and len(err.splitlines()) == 1
    assert not (fresh / "results" / "runs").exists() and not (fresh / "results" / "tuning").exists()
    damaged.write_bytes(good)
    extra = damaged.with_name("extra.csv")  # a file the manifest never listed: restored, a later stash sealed it
    extra.write_text("epoch\n1\n")
    err = _refused(PY + ["restore", "--name", "sweep"], fresh)
    assert f"{extra.relative_to(fresh)}: not in the manifest" in err and len(err.splitlines()) == 1
    assert not (fresh / "results" / "runs").exists()
    extra.unlink()
    assert "restored 11 records" in _sh(PY + ["restore", "--name", "sweep"], fresh).stdout
    assert json.loads((fresh / "results/runs/tiny/nce/seed0/metrics.json").read_text()) == \
        json.loads((run / "metrics.json").read_text())
    assert _planned(fresh, *summary) == set()  # nothing trained, selected or fitted again
    assert _planned(fresh, "results/summary.csv") == {"summarize", "matrix_fit"}

    # another clone whose nce differs: nce's trial, selection and run are another config's, softmax's are not
    other = _fresh(proj, tmp_path / "other")
    p["methods"]["nce"]["negatives"] = 6
    write_params(dict(p, data_dir="data", results_dir="results"), other / "params.yaml")
    shutil.copytree(fresh / "data", other / "data")  # the same data (a method's options are not the data's)
    out = _sh(PY + ["restore", "--name", "sweep"], other).stdout
    assert "restored 6 records" in out  # softmax's trial, selection and run; the reference
    assert "records/tuning/tiny/nce/trial0/train.json: made under another config" in out
    dry = _sh([str(BIN / "snakemake"), "-n", "--cores", "1", *summary], other).stdout
    planned = " ".join(re.findall(r"^\s+output: (.+)$", dry, flags=re.M))  # what the planned jobs make
    assert "tuning/tiny/nce/trial0" in planned and "runs/tiny/nce/seed0/train.json" in planned
    assert "tuning/tiny/softmax" not in planned and "runs/tiny/softmax/seed0/train.json" not in planned
