"""Artifacts through a DVC remote: `dvc push` after a run, `dvc pull` in another clone restores
everything, and only the always-run fetch stages rerun (finding the raw data current). The round trip runs
inside tests/test_pipeline.py's end-to-end test, on the results its `dvc repro` made."""
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
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


def test_a_fresh_clone_s_dvc_metrics_and_plots_read_the_committed_default_publication(tmp_path):
    """Before any run, `dvc metrics show` prints the committed default publication's test perplexities (dvc.yaml's
    top-level metrics, files no stage writes), a row a dataset and method, and `dvc plots show` draws its curves;
    the stages' own results/ folder is the only one it cannot load yet (issue 80, item 5)."""
    import json

    clone = tmp_path / "clone"
    _sh(["git", "clone", "-q", str(ROOT), str(clone)], tmp_path)
    shown = json.loads(_sh([str(BIN / "dvc"), "metrics", "show", "--json"], clone).stdout)[""]["data"]
    head = pd.read_csv(clone / "benchmarks" / "default" / "headline.csv")
    rows = {tuple(f.removesuffix(".json").split("/")[-2:]): v["data"] for f, v in shown.items()
            if f.startswith("benchmarks/default/headline-metrics/")}
    assert {k: v["test_ppl"] for k, v in rows.items()} == \
        {(r.dataset, r.method): round(float(r.ppl), 4) for r in head.itertuples()}
    assert all(set(v) == {"test_ppl", "ppl_low", "ppl_high", "seeds"} for v in rows.values())  # a narrow row each
    assert set(shown) - {f"benchmarks/default/headline-metrics/{d}/{m}.json" for d, m in rows} == {"results/headline-metrics"}
    assert "error" in shown["results/headline-metrics"]  # not run yet: the only one it cannot load
    table = _sh([str(BIN / "dvc"), "metrics", "show"], clone).stdout.splitlines()
    # a header, results/ not run yet ("-"), then a row a dataset and method: narrow enough to read
    assert len(table) == 2 + len(rows) and max(map(len, table)) < 120
    _sh([str(BIN / "dvc"), "plots", "show"], clone)
    assert "benchmarks/default/valid-curves.csv" in (clone / "dvc_plots" / "index.html").read_text()


def test_dvc_shows_one_compact_metrics_file_and_curves_grouped_by_method():
    """`dvc metrics show` reads the headline's test perplexities alone (not 44 files of 186 columns), `dvc plots
    show` one file of mean curves drawn by method (its template is committed) and the figures as images."""
    import json

    import yaml

    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    declared = {name: [next(iter(m)) if isinstance(m, dict) else m for m in st.get("metrics", [])]
                for name, st in stages.items() if "metrics" in st or (isinstance(st.get("do"), dict) and "metrics" in st["do"])}
    assert declared == {"summarize": ["${results_dir}/headline-metrics"]}
    plots = {name: st.get("plots") or (st.get("do") or {}).get("plots") for name, st in stages.items()}
    assert {n for n, p in plots.items() if p} == {"summarize", "figures", "figures_extra"}
    curve = plots["summarize"][0]["${results_dir}/valid-curves.csv"]
    assert curve["template"] == "by_method" and (curve["x"], curve["y"]) == ("epoch", "valid_ppl")
    template = json.loads((ROOT / ".dvc" / "plots" / "by_method.json").read_text())
    assert template["spec"]["encoding"]["color"]["field"] == "method" and template["facet"]["field"] == "dataset"
    assert all(p.endswith(".svg") for p in plots["figures"])
    # and what summarize wrote for the published default run: one number per dataset and method
    head = pd.read_csv(ROOT / "benchmarks" / "default" / "headline.csv")
    from pipeline_src.reporting.summarize import _write_dvc_views

    hist = pd.read_csv(ROOT / "benchmarks" / "default" / "history.csv")
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        _write_dvc_views({"results_dir": tmp}, head, hist)
        files = sorted((Path(tmp) / "headline-metrics").rglob("*.json"))
        metrics = {(f.parent.name, f.stem): json.loads(f.read_text()) for f in files}
        curves = pd.read_csv(Path(tmp) / "valid-curves.csv")
        (Path(tmp) / "headline-metrics" / "synth" / "gone.json").write_text("{}")  # a method no longer run
        _write_dvc_views({"results_dir": tmp}, head, hist)
        assert not (Path(tmp) / "headline-metrics" / "synth" / "gone.json").exists()  # leaves no row behind
    from pipeline_src.io.errors import OutputError

    with pytest.raises(OutputError, match="would delete .*committed files"):  # never a publication's own folder
        _write_dvc_views({"results_dir": str(ROOT / "benchmarks" / "default")}, head, hist)
    assert (ROOT / "benchmarks" / "default" / "headline-metrics" / "synth" / "mos.json").is_file()
    assert set(metrics) == {(r.dataset, r.method) for r in head.itertuples()}
    mos = metrics["synth", "mos"]
    row = head[(head.dataset == "synth") & (head.method == "mos")].iloc[0]
    assert mos == {"test_ppl": round(float(row.ppl), 4), "ppl_low": round(float(row.ppl_low), 4),
                   "ppl_high": round(float(row.ppl_high), 4), "seeds": int(row.seeds)}
    one = hist[(hist.dataset == "synth") & (hist.method == "mos") & (hist.epoch == 3)]
    got = curves[(curves.dataset == "synth") & (curves.method == "mos") & (curves.epoch == 3)].valid_ppl.iloc[0]
    assert got == pytest.approx(float(np.exp(one.valid_nll.mean())))
