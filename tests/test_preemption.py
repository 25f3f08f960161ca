"""Preemption: a training job killed mid-epoch resumes from its checkpoint and ends bitwise identical.

Real processes and real signals: the CLI as SLURM runs it (SIGTERM on preemption / time limit, SIGKILL
when a node dies), and Snakemake interrupted while its training job runs.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import tiny_params, write_params
from test_pipeline import BIN, _project, _sh

ENV = {"PATH": f"{BIN}:/usr/bin:/bin", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "OMP_WAIT_POLICY": "PASSIVE"}


def _params(default_params: dict, tmp_path: Path) -> dict:
    p = tiny_params(default_params, tmp_path)
    tiny = p["datasets"]["tiny"]
    tiny["corpus"]["train_tokens"] = 24000  # 300 steps per epoch (a checkpoint every 10): the kill lands mid-epoch
    tiny["training"].update(epochs=2, checkpoint_every_steps=10)
    return p


def _cli(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "pipeline_src", *args], cwd=cwd, capture_output=True, text=True,
                       env=ENV)
    if check:
        assert r.returncode == 0, f"{args} failed:\n{r.stderr[-3000:]}"
    return r


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 60) -> None:
    t0 = time.monotonic()
    while not path.exists():
        assert proc.poll() is None, f"process ended (rc {proc.returncode}) before {path} appeared"
        assert time.monotonic() - t0 < timeout, f"{path} did not appear within {timeout}s"
        time.sleep(0.01)


def _weights(run: Path) -> dict:
    return torch.load(run / "model.pt", weights_only=False)["model"]


def _assert_same_run(a: Path, b: Path) -> None:
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    ma, mb = (json.loads((r / "metrics.json").read_text()) for r in (a, b))
    for split in ("valid", "test"):
        assert ma["splits"][split]["nll"] == mb["splits"][split]["nll"]


RUN = ["--dataset", "tiny", "--method", "softmax", "--seed", "0", "--threads", "1"]


@pytest.fixture(scope="module")
def reference(default_params, tmp_path_factory):
    """The run uninterrupted, made once for both signals: its directory, data and params file."""
    base = tmp_path_factory.mktemp("preemption")
    cfg = write_params(_params(default_params, base), base / "params.yaml")
    for step in ("fetch", "prepare"):
        _cli(step, "--config", str(cfg), "--dataset", "tiny", cwd=base)
    _cli("train", "--config", str(cfg), *RUN, cwd=base)
    _cli("evaluate", "--config", str(cfg), *RUN, cwd=base)
    runs = base / "results" / "runs" / "tiny"
    (runs / "softmax" / "seed0").rename(runs / "reference")
    return base


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_cli_training_killed_mid_epoch_resumes_to_the_same_result(reference, tmp_path, sig):
    base = tmp_path / "proj"  # the reference's data and params; its own results
    shutil.copytree(reference, base, ignore=shutil.ignore_patterns("results"))
    cfg = base / "params.yaml"
    cfg.write_text(cfg.read_text().replace(str(reference), str(base)))
    run_args = ["--config", str(cfg), *RUN]
    runs = base / "results" / "runs" / "tiny"

    proc = subprocess.Popen([sys.executable, "-m", "pipeline_src", "train", *run_args], cwd=base, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ckpt = runs / "softmax" / "seed0" / "checkpoint.pt"
    _wait_for(ckpt, proc)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == (128 + sig if sig == signal.SIGTERM else -sig), err[-2000:]
    state = torch.load(ckpt, weights_only=False)["state"]
    assert state["epoch"] == 0 and 0 < state["step_in_epoch"] < 300  # really mid-epoch
    if sig == signal.SIGTERM:
        assert f"stopped by signal {int(sig)} at epoch 1, step {state['step_in_epoch']}" in err
    assert not (runs / "softmax" / "seed0" / "model.pt").exists()
    assert not (runs / "softmax" / "seed0" / "train.json").exists()

    r = _cli("train", *run_args, cwd=base)
    assert f"resumed from {ckpt}: epoch 1, step {state['step_in_epoch']}" in r.stderr
    _cli("evaluate", *run_args, cwd=base)
    assert not ckpt.exists()
    _assert_same_run(reference / "results" / "runs" / "tiny" / "reference", runs / "softmax" / "seed0")


@pytest.mark.slow
def test_snakemake_interrupted_keeps_the_checkpoint_and_resumes(default_params, tmp_path):
    p = _params(default_params, tmp_path)
    p["datasets"]["tiny"]["training"]["epochs"] = 3  # 1,500 steps: the kill lands at the first checkpoint
    p["run"] = {"datasets": ["tiny"], "methods": ["softmax"], "seeds": [0]}
    proj = _project(tmp_path, p)
    run = proj / "results" / "runs" / "tiny" / "softmax" / "seed0"
    target = "results/runs/tiny/softmax/seed0/metrics.json"
    smk = [str(BIN / "snakemake"), "--cores", "1", target]

    proc = subprocess.Popen(smk, cwd=proj, env={**ENV, "HOME": str(proj)}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    _wait_for(run / "checkpoint.pt", proc, timeout=120)
    os.killpg(proc.pid, signal.SIGTERM)  # as SLURM does to every process of a job it preempts or times out
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0, out[-2000:]
    assert "stopped by signal 15" in (proj / "results" / "logs" / "train" / "tiny" / "softmax" / "seed0.log").read_text()
    assert (run / "checkpoint.pt").exists(), "Snakemake deleted the checkpoint of the interrupted job"
    assert not (run / "model.pt").exists()
    step = torch.load(run / "checkpoint.pt", weights_only=False)["state"]["step_in_epoch"]
    assert step > 0

    _sh(smk, proj)  # rerun-incomplete (profiles/default) reruns the job, which resumes
    log = (proj / "results" / "logs" / "train" / "tiny" / "softmax" / "seed0.log").read_text()
    assert "resumed from" in log
    assert not (run / "checkpoint.pt").exists()

    # the same run without interruption, through the CLI with the same thread count
    ref_args = ["--config", "params.yaml", "--dataset", "tiny", "--method", "softmax", "--seed", "0", "--threads", "1"]
    os.rename(run, run.with_name("interrupted"))
    _cli("train", *ref_args, cwd=proj)
    _cli("evaluate", *ref_args, cwd=proj)
    _assert_same_run(run, run.with_name("interrupted"))
