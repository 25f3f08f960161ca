"""The two front ends of the pipeline: Snakemake's DAG and DVC's stages, on one small config."""
import csv
import io
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT, clean_env, tiny_params, write_params

BIN = Path(sys.executable).parent


def push_then_pull_in_another_clone(proj: Path, tmp_path: Path) -> None:
    from test_dvc_remote import push_then_pull

    push_then_pull(proj, tmp_path)


def _project(tmp_path: Path, params: dict) -> Path:
    """A copy of the workflow files with ``params`` as params.yaml (relative data/results dirs)."""
    proj = tmp_path / "proj"
    proj.mkdir()
    for name in ("Snakefile", "dvc.yaml", ".dvcignore"):
        shutil.copy(ROOT / name, proj / name)
    for name in ("workflow", "profiles", "envs", "pipeline_src"):
        shutil.copytree(ROOT / name, proj / name, ignore=shutil.ignore_patterns("__pycache__"))
    params = dict(params, data_dir="data", results_dir="results")
    write_params(params, proj / "params.yaml")
    return proj


def _sh(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=clean_env(cwd))
    assert r.returncode == 0, f"{' '.join(cmd)} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


def _normalise(cmd: str) -> str:
    cmd = re.sub(r"\s*>\s*\S+\s+2>&1\s*$", "", cmd)  # Snakemake's log redirection
    return re.sub(r"^\S*python3?\s", "python ", cmd.strip())


def snakemake_jobs(proj: Path) -> tuple[set[str], set[str]]:
    """Every output file of the DAG (detailed summary) and every job's shell command (dry run)."""
    r = _sh([str(BIN / "snakemake"), "--forceall", "--detailed-summary", "--cores", "1"], proj)
    rows = list(csv.DictReader(io.StringIO(r.stdout[r.stdout.index("output_file"):]), delimiter="\t"))
    outs = {row["output_file"] for row in rows}
    dry = _sh([str(BIN / "snakemake"), "--forceall", "--dry-run", "--printshellcmds", "--cores", "1"], proj).stdout
    cmds = {_normalise(c) for c in re.findall(r"^Shell command: (.+)$", dry, flags=re.M) if c != "None"}
    return outs, cmds


def dvc_stages(proj: Path) -> tuple[set[str], set[str]]:
    _sh([str(BIN / "dvc"), "init", "--no-scm", "-q"], proj)
    from dvc.repo import Repo

    with Repo(str(proj)) as repo:
        stages = list(repo.index.stages)
        outs = {o.def_path for s in stages for o in s.outs}
        cmds = {_normalise(s.cmd) for s in stages}
    return outs, cmds


def test_snakemake_dag_and_dvc_stages_do_not_drift(tmp_path, default_params):
    p = tiny_params(default_params, tmp_path)
    p["datasets"]["ptb"] = default_params["datasets"]["ptb"]
    p["methods"]["softmax-small-chunks"] = {"type": "softmax", "chunk_size": 64}
    p["datasets"]["big"] = p["datasets"]["tiny"]  # the second crossing: its own dataset, fewer methods
    p["run"] = {"datasets": ["tiny", "ptb"], "methods": ["softmax", "softmax-small-chunks"], "seeds": [3, 7],
                "extra": {"datasets": ["big"], "methods": ["softmax"]}}
    proj = _project(tmp_path, p)
    smk_outs, smk_cmds = snakemake_jobs(proj)
    dvc_outs, dvc_cmds = dvc_stages(proj)
    # DVC writes the hash files in a stage of its own; Snakemake when it reads the DAG
    assert "python -m pipeline_src hashes --config params.yaml" in dvc_cmds
    assert smk_cmds == dvc_cmds - {"python -m pipeline_src hashes --config params.yaml"}
    assert smk_outs == dvc_outs - {"results/hashes"}
    # fetch, prepare (3 datasets), train, evaluate (2 datasets x 2 methods x 2 seeds, then 1 x 1 x 2 of the
    # second crossing), matrix fits (2 dims x 2 seeds); figures and the Kneser-Ney reference (per dataset);
    # summarize, bench, report; hashes
    assert len(dvc_cmds) == 3 + 3 + 10 + 10 + 4 + 3 + 3 + 3 + 1
    assert "results/figures/ptb/forest.svg" in smk_outs and "results/figures/big/forest.svg" in smk_outs
    # seeds fan out into run directories that name them, shared data: seed k of two methods is a pair
    assert "results/runs/tiny/softmax-small-chunks/seed7/metrics.json" in smk_outs
    # every output is a path pipeline_src/io/paths.py makes: a run's files, the tables, the hash files aside
    from pipeline_src.io import paths
    where = dict(p, results_dir="results", data_dir="data")
    made = {str(paths.run_dir(where, d, m, s) / f) for d in ("tiny", "ptb") for m in p["run"]["methods"]
            for s in (3, 7) for f in (paths.MODEL, paths.HISTORY, paths.TRAIN_RECORD, paths.METRICS)}
    made |= {str(paths.run_dir(where, "big", "softmax", s) / f) for s in (3, 7)
             for f in (paths.MODEL, paths.HISTORY, paths.TRAIN_RECORD, paths.METRICS)}
    made |= {str(f(where)) for f in (paths.summary_path, paths.headline_path, paths.contrasts_path,
                                      paths.references_summary_path, paths.matrix_summary_path, paths.bench_path,
                                      paths.report_path)}
    assert made <= smk_outs and made <= dvc_outs
    assert {o for o in smk_outs if o.startswith("results/runs/")} == {o for o in made if o.startswith("results/runs/")}
    # the second crossing runs its own methods only
    assert "results/runs/big/softmax/seed7/metrics.json" in smk_outs
    assert not any(o.startswith("results/runs/big/softmax-small-chunks") for o in smk_outs | dvc_outs)
    assert {o for o in smk_outs if o.startswith("data/")} == {"data/raw/tiny", "data/prepared/tiny",
                                                            "data/raw/ptb", "data/prepared/ptb",
                                                            "data/raw/big", "data/prepared/big"}


def _planned(proj: Path, *args: str) -> set[str]:
    dry = _sh([str(BIN / "snakemake"), "-n", "--cores", "1", *args], proj).stdout
    return set(re.findall(r"^rule (\w+):", dry, flags=re.M)) if "Nothing to be done" not in dry else set()


def _dvc_changed(proj: Path) -> set[str]:
    """The stages `dvc status` lists, less the always-run fetch stages (cheap, and they leave their outputs
    alone when nothing changed)."""
    status = _sh([str(BIN / "dvc"), "status"], proj).stdout
    return {s for s in re.findall(r"^(\S+):", status, flags=re.M) if not s.startswith("fetch@")}


@pytest.mark.slow
def test_end_to_end_snakemake_then_dvc(tmp_path, default_params):
    """Either engine's results are current for the other: after `snakemake`, `dvc status` lists nothing
    (Snakemake records its outputs with `dvc commit`); after `dvc repro`, `snakemake -n` plans nothing;
    and after an edit each plans exactly what the edit changed, whichever engine made the files. What DVC
    made goes through a remote to another clone (one pipeline run serves both tests)."""
    p = tiny_params(default_params, tmp_path)
    proj = _project(tmp_path, p)
    _sh(["git", "init", "-q"], proj)
    _sh([str(BIN / "dvc"), "init", "-q"], proj)
    shutil.copy(ROOT / ".gitignore", proj / ".gitignore")
    made = _sh([str(BIN / "snakemake"), "--cores", "2"], proj)
    assert "recorded Snakemake's outputs in dvc.lock" in made.stdout + made.stderr
    summary = pd.read_csv(proj / "results" / "summary.csv")
    assert {"dataset", "method", "split", "nll", "ppl", "tokens_per_s_train", "peak_mem_mb", "params",
            "seed"} <= set(summary.columns)
    assert sorted(summary.split) == ["test", "valid"] and (summary.gap_nll > 0).all()
    html = (proj / "results" / "report.html").read_text()
    assert "Gap to the truth" in html and "data:image/png;base64" in html and "Traceback" not in html
    # nothing left to do for either engine
    assert _planned(proj) == set() and _dvc_changed(proj) == set()
    # another params file that differs only in its statistics: new verdicts, no run retrained
    (proj / "stats.yaml").write_text("extends: params.yaml\nstatistics: {confidence: 0.9}\n")
    assert _planned(proj, "--config", "params=stats.yaml") == {"summarize", "figures", "report", "all"}
    # a changed method option reruns exactly that method's jobs downstream, in both engines
    p["methods"]["softmax"]["chunk_size"] = 7
    write_params(dict(p, data_dir="data", results_dir="results"), proj / "params.yaml")
    assert _planned(proj) == {"train", "evaluate", "summarize", "figures", "report", "bench", "matrix_fit", "all"}
    assert _dvc_changed(proj) == {"hashes", "train@tiny-softmax-0", "evaluate@tiny-softmax-0", "matrix_fit@30-2-0",
                                  "matrix_fit@30-4-0", "bench"}
    # DVC remakes what the edit changed, after Snakemake made the rest: Snakemake then plans nothing (its `params`
    # trigger retrained those runs again, comparing them with its own record of the jobs before the edit)
    _sh([str(BIN / "dvc"), "repro"], proj)
    assert _planned(proj) == set()

    # the original config through DVC: the same outputs, the same numbers (the same threads as Snakemake)
    p["methods"]["softmax"]["chunk_size"] = 1024
    write_params(dict(p, data_dir="data", results_dir="results"), proj / "params.yaml")
    shutil.rmtree(proj / "data")
    shutil.rmtree(proj / "results")
    _sh([str(BIN / "dvc"), "repro"], proj)
    again = pd.read_csv(proj / "results" / "summary.csv")
    assert list(again.split) == list(summary.split)
    assert again.nll.tolist() == summary.nll.tolist() and again.true_nll.tolist() == summary.true_nll.tolist()
    assert_only_fetch_reruns(proj)
    # DVC made every file: Snakemake finds nothing to do, and an evaluation setting re-evaluates, never retrains
    assert _planned(proj) == set()
    push_then_pull_in_another_clone(proj, tmp_path)  # tests/test_dvc_remote.py
    p["evaluation"]["rank_contexts"] = 50
    write_params(dict(p, data_dir="data", results_dir="results"), proj / "params.yaml")
    assert _planned(proj) == {"evaluate", "summarize", "figures", "report", "all"}


def assert_only_fetch_reruns(proj: Path) -> None:
    """After a full `dvc repro`, DVC's status lists only the always-run fetch stages, and repro runs them
    alone: they find the raw data current and leave it, so nothing downstream reruns."""
    dvc = str(BIN / "dvc")
    status = _sh([dvc, "status"], proj).stdout
    assert set(re.findall(r"^(\S+):", status, flags=re.M)) == {"fetch@tiny"} and "always changed" in status, status
    rerun = _sh([dvc, "repro"], proj).stdout
    assert re.findall(r"Running stage '([^']+)'", rerun) == ["fetch@tiny"] and "is current" in rerun, rerun


def test_snakemake_refuses_a_bad_config_before_any_job(tmp_path, default_params):
    p = tiny_params(default_params, tmp_path)
    p["model"]["layers"] = 0
    proj = _project(tmp_path, p)
    r = subprocess.run([str(BIN / "snakemake"), "-n", "--cores", "1"], cwd=proj, capture_output=True, text=True,
                       env=clean_env(proj))
    assert r.returncode != 0
    assert "key 'model.layers'" in r.stderr + r.stdout and "minimum of 1" in r.stderr + r.stdout
    assert not (proj / "data").exists() and not (proj / "results").exists()
    r = subprocess.run([str(BIN / "snakemake"), "-n", "--cores", "1", "--configfile", "params.yaml"], cwd=proj,
                       capture_output=True, text=True, env=clean_env(proj))
    assert r.returncode != 0 and "--config params=FILE" in r.stderr + r.stdout
    r = subprocess.run([str(BIN / "snakemake"), "-n", "--cores", "1", "--config", "params="], cwd=proj,
                       capture_output=True, text=True, env=clean_env(proj))
    assert r.returncode != 0 and "--config params= names no params file" in r.stderr + r.stdout


@pytest.mark.slow
def test_a_deleted_run_folder_is_remade_not_kept_in_the_summary(tmp_path, default_params):
    """A run folder deleted after the pipeline finished: Snakemake said "Nothing to be done" and the summary kept
    the run. Now the summary sentinel is rewritten, so Snakemake remakes that run and resummarises."""
    p = tiny_params(default_params, tmp_path)
    p["datasets"]["tiny"]["training"]["epochs"] = 1
    proj = _project(tmp_path, p)
    _sh([str(BIN / "snakemake"), "--cores", "2"], proj)
    assert _planned(proj) == set()
    shutil.rmtree(proj / "results" / "runs" / "tiny" / "softmax" / "seed0")
    assert {"train", "evaluate", "summarize"} <= _planned(proj)


@pytest.mark.slow
def test_snakemake_remakes_what_dvc_made_under_another_config(tmp_path, default_params):
    """Bad case 4 of the guards issue: `snakemake --config params=mix.yaml`, then the same params with another epoch
    count in params.yaml and `dvc repro`, then `snakemake --config params=mix.yaml` said "Nothing to be done" and
    left the other config's headline in place: the rewritten hash file had the checksum Snakemake recorded for
    the first run. Each rewrite now carries its own stamp, so Snakemake retrains and resummarises."""
    p = tiny_params(default_params, tmp_path)
    proj = _project(tmp_path, p)
    _sh(["git", "init", "-q"], proj)
    _sh([str(BIN / "dvc"), "init", "-q"], proj)
    shutil.copy(proj / "params.yaml", proj / "mix.yaml")
    _sh([str(BIN / "snakemake"), "--cores", "2", "--config", "params=mix.yaml"], proj)
    first = pd.read_csv(proj / "results" / "headline.csv").nll.tolist()
    other = dict(p, data_dir="data", results_dir="results")
    other["datasets"]["tiny"]["training"]["epochs"] = p["datasets"]["tiny"]["training"].get("epochs", 3) + 2
    write_params(other, proj / "params.yaml")
    _sh([str(BIN / "dvc"), "repro"], proj)
    assert pd.read_csv(proj / "results" / "headline.csv").nll.tolist() != first  # the other config's numbers
    assert {"train", "evaluate", "summarize"} <= _planned(proj, "--config", "params=mix.yaml")
    _sh([str(BIN / "snakemake"), "--cores", "2", "--config", "params=mix.yaml"], proj)
    assert pd.read_csv(proj / "results" / "headline.csv").nll.tolist() == first  # the same runs, bit for bit
