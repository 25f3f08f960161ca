"""Artifacts through a DVC remote: `dvc push` after a run, `dvc pull` in another clone restores
everything, and only the always-run fetch stages rerun (finding the raw data current)."""
import shutil
import subprocess

import pandas as pd
import pytest

from conftest import ROOT, tiny_params
from test_pipeline import BIN, _project, _sh, assert_only_fetch_reruns

DVC = str(BIN / "dvc")


def _git(*args: str, cwd) -> None:
    _sh(["git", "-c", "user.name=test", "-c", "user.email=test@localhost", *args], cwd)


def test_the_committed_default_remote_lies_beside_the_checkout():
    r = subprocess.run([DVC, "remote", "list"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    name, url = r.stdout.split()[:2]
    assert name == "storage" and "(default)" in r.stdout
    assert url == str(ROOT.parent / "lmbench-dvc-storage")


@pytest.mark.slow
def test_push_then_pull_in_another_clone_restores_everything(tmp_path, default_params):
    p = tiny_params(default_params, tmp_path)
    p["matrix"]["dims"] = [2]
    proj = _project(tmp_path, p)
    shutil.copytree(ROOT / ".dvc", proj / ".dvc", ignore=shutil.ignore_patterns("tmp", "cache", "config.local"))
    shutil.copy(ROOT / ".gitignore", proj / ".gitignore")
    remote = tmp_path / "remote"
    _git("init", "-q", cwd=proj)
    # each machine points the project's default remote `storage` somewhere (git-ignored config.local)
    _sh([DVC, "remote", "modify", "--local", "storage", "url", str(remote)], proj)
    _sh([DVC, "repro"], proj)
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
