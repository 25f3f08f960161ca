"""Artifacts through a DVC remote: `dvc push` after a run, `dvc pull` in another clone restores
everything, and only the always-run fetch stages rerun (finding the raw data current). The round trip runs
inside tests/test_pipeline.py's end-to-end test, on the results its `dvc repro` made."""
import shutil
import subprocess
from pathlib import Path

import pandas as pd
from conftest import ROOT
from test_pipeline import BIN, _sh, assert_only_fetch_reruns

DVC = str(BIN / "dvc")


def _git(*args: str, cwd) -> None:
    _sh(["git", "-c", "user.name=test", "-c", "user.email=test@localhost", *args], cwd)


def test_the_committed_default_remote_lies_beside_the_checkout():
    r = subprocess.run([DVC, "remote", "list"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    name, url = r.stdout.split()[:2]
    assert name == "storage" and "(default)" in r.stdout
    assert url == str(ROOT.parent / "lmbench-dvc-storage")


def push_then_pull(proj: Path, tmp_path: Path) -> None:
    """After a full `dvc repro` in the git repository ``proj`` (called from
    tests/test_pipeline.py::test_end_to_end_snakemake_then_dvc, so the pipeline runs once for both): `dvc push`
    to the project's default remote `storage`, pointed somewhere by each machine (git-ignored config.local);
    `dvc pull` in another clone restores every output, and only the always-run fetch stages rerun."""
    for f in (proj / ".dvc").glob("config*"):
        f.unlink()
    shutil.copy(ROOT / ".dvc" / "config", proj / ".dvc" / "config")
    remote = tmp_path / "remote"
    _sh([DVC, "remote", "modify", "--local", "storage", "url", str(remote)], proj)
    _git("add", "-A", cwd=proj)
    _git("commit", "-qm", "run", cwd=proj)
    pushed = _sh([DVC, "push"], proj).stdout
    assert "pushed" in pushed and any(remote.rglob("*")), pushed

    clone = tmp_path / "clone"
    _sh(["git", "clone", "-q", str(proj), str(clone)], tmp_path)
    assert not (clone / "results").exists() or not any((clone / "results").rglob("*.csv"))
    _sh([DVC, "remote", "modify", "--local", "storage", "url", str(remote)], clone)
    _sh([DVC, "pull"], clone)
    assert_only_fetch_reruns(clone)
    for name in ("summary.csv", "matrix.csv"):
        assert pd.read_csv(clone / "results" / name).equals(pd.read_csv(proj / "results" / name))
    assert (clone / "results" / "runs" / "tiny" / "softmax" / "seed0" / "model.pt").read_bytes() == \
        (proj / "results" / "runs" / "tiny" / "softmax" / "seed0" / "model.pt").read_bytes()
    assert (clone / "data" / "prepared" / "tiny" / "meta.json").exists()
