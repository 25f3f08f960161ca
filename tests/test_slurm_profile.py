"""The `slurm` profile as Snakemake resolves it (`snakemake -n --profile slurm` from the repo root):
which rules ask for a GPU, memory and time, where site settings come from, and how bad ones fail.
The real submission through sbatch is exercised by .ci/slurm-run on a single-node SLURM."""
import re
import subprocess

import pytest
from conftest import ROOT, clean_env
from test_pipeline import BIN


def _dry_run(tmp_path, settings: str | None, params: str | None = None,
             profile: str = "slurm") -> subprocess.CompletedProcess:
    env = clean_env(tmp_path)
    if settings is not None:
        (tmp_path / "site.yaml").write_text(settings)
        env["LMBENCH_SLURM_SETTINGS"] = str(tmp_path / "site.yaml")
    else:
        (tmp_path / "none.yaml").write_text("")  # no site settings, and never the developer's profiles/slurm/local.yaml
        env["LMBENCH_SLURM_SETTINGS"] = str(tmp_path / "none.yaml")
    extra = ["--config", f"params={params}"] if params else []
    return subprocess.run([str(BIN / "snakemake"), "-n", "--forceall", "--profile", profile, *extra], cwd=ROOT,
                          capture_output=True, text=True, env=env, timeout=300)


def _resources(stdout: str) -> dict[str, list[dict]]:
    """rule name -> the resources of each of its jobs, from the dry run's job listing."""
    out: dict[str, list[dict]] = {}
    for rule, body in re.findall(r"^(?:local)?rule (\w+):\n(.*?)(?:\n\n|\Z)", stdout, flags=re.M | re.S):
        m = re.search(r"^\s+resources: (.*)$", body, flags=re.M)
        w = re.search(r"^\s+wildcards: (.*)$", body, flags=re.M)
        job = dict(kv.split("=", 1) for kv in m.group(1).split(", ")) if m else {}
        job["wildcards"] = dict(kv.split("=", 1) for kv in w.group(1).split(", ")) if w else {}
        out.setdefault(rule, []).append(job)
    return out


@pytest.mark.parametrize("profile", ["slurm", "profiles/slurm"])
def test_gpu_rules_memory_and_time(tmp_path, profile):
    """A GPU for every job that can use one; none for a run timed by its CPU clock (it refuses CUDA)."""
    from pipeline_src.config import load, train_config

    r = _dry_run(tmp_path, None, profile=profile)
    assert r.returncode == 0, r.stderr[-3000:]
    res = _resources(r.stdout)
    for rule in ("evaluate", "bench"):
        assert res[rule] and all(j["gpu"] == "1" for j in res[rule]), rule
    params = load(str(ROOT / "params.yaml"))
    cpu_clocked = {d for d in params["datasets"] if train_config(params, d).budget_clock == "cpu"}
    assert cpu_clocked and cpu_clocked != {j["wildcards"]["dataset"] for j in res["train"]}  # both kinds of run
    for j in res["train"]:
        assert j["gpu"] == ("0" if j["wildcards"]["dataset"] in cpu_clocked else "1"), j
    # sized from the run (cost/resources.py): the default run's seconds-long trainings ask for the floor's 10
    # minutes and about 3 GB, not 48 h and 32 GB
    assert all(j["runtime"] == "10" and 2000 <= int(j["mem_mb"]) < 4000 for j in res["train"] + res["evaluate"])
    for rule in ("prepare", "matrix_fit", "summarize", "report"):
        assert res[rule] and all("gpu" not in j for j in res[rule]), rule
    # (that `fetch` runs on the submitting host is checked by .ci/slurm-run: sacct must not show it;
    # a dry run labels every job `rule`)
    assert not any("slurm_account" in j for jobs in res.values() for j in jobs)  # nothing site-specific by default


def test_tuning_trials_ask_for_a_gpu_like_training(tmp_path):
    r = _dry_run(tmp_path, None, "config/tuned-synth.yaml")  # tuning.enabled: a trial job per point
    assert r.returncode == 0, r.stderr[-3000:]
    res = _resources(r.stdout)
    assert res["trial"] and all(j["gpu"] == "1" and int(j["mem_mb"]) < 4000 and j["runtime"] == "10"
                                for j in res["trial"])
    assert res["select"] and all("gpu" not in j for j in res["select"])


def test_a_paper_config_s_training_asks_for_hours(tmp_path):
    """AWD-LSTM on PTB (750 epochs of a 3-layer 1150-unit LSTM on one GPU) against the default run's minutes."""
    r = _dry_run(tmp_path, None, "config/paper/awd-lstm-ptb.yaml")
    assert r.returncode == 0, r.stderr[-3000:]
    job = _resources(r.stdout)["train"][0]
    assert 12 * 60 <= int(job["runtime"]) <= 3 * 24 * 60 and job["gpu"] == "1"


def test_site_settings_file_sets_account_partition_and_overrides(tmp_path):
    r = _dry_run(tmp_path, "account: acct1\npartition: part1\nresources:\n  train: {gpu: 2, mem_mb: 1234}\n")
    assert r.returncode == 0, r.stderr[-3000:]
    res = _resources(r.stdout)
    jobs = [j for rule, js in res.items() if rule != "all" for j in js]
    assert jobs and all(j["slurm_account"] == "acct1" and j["slurm_partition"] == "part1" for j in jobs)
    assert all(j["gpu"] == "2" and j["mem_mb"] == "1234" for j in res["train"])
    assert all(j["gpu"] == "1" for j in res["evaluate"])


@pytest.mark.parametrize("settings, message", [
    ("acount: x\n", "unknown keys ['acount']; allowed: account, partition, qos, resources, jobs"),
    ("resources:\n  trian: {gpu: 0}\n", "resources.trian: no such rule"),
    # the third probe: a YAML error was about "<unicode string>", a list gave a traceback
    ("account: [x\n", "site.yaml:2:1: not valid YAML (expected ',' or ']', but got '<stream end>')"),
    ("- account\n", "site.yaml: holds a list, not the mapping of account, partition, qos, resources, jobs"),
    ("resources: [train]\n", "site.yaml: resources: a mapping of rule -> its resources is expected"),
])
def test_bad_site_settings_name_the_file_and_the_key(tmp_path, settings, message):
    r = _dry_run(tmp_path, settings)
    assert r.returncode != 0
    assert str(tmp_path / "site.yaml") in r.stderr and message in r.stderr


def test_a_settings_path_that_names_no_file_is_refused_not_ignored(tmp_path):
    """The fourth probe's weak case: a mistyped $LMBENCH_SLURM_SETTINGS planned jobs with no account or partition."""
    env = clean_env(tmp_path)
    env["LMBENCH_SLURM_SETTINGS"] = str(tmp_path / "typo.yaml")
    r = subprocess.run([str(BIN / "snakemake"), "-n", "--forceall", "--profile", "slurm"], cwd=ROOT,
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode != 0 and f"LMBENCH_SLURM_SETTINGS={tmp_path / 'typo.yaml'}: no such file" in r.stderr
