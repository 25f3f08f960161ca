"""The report as a reader sees it: executed on a run with three seeds and with one, without error
outputs, rendered in headless Chromium at 1280 px (every figure loaded, nothing wider than the page, the
headline table with one row per method), and Snakemake's own report carrying the results."""
import json
import math
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT, clean_env, tiny_params, write_params
from filelock import FileLock

BIN = Path(sys.executable).parent
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

CHECK = """<script>
window.addEventListener('load', () => {
  const imgs = [...document.images];
  const width = document.documentElement.clientWidth;
  const wide = [...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > width + 1)
      .map(e => e.tagName + '.' + e.className).slice(0, 5);
  const tables = [...document.querySelectorAll('table.results-table')];
  const out = {images: imgs.length, broken: imgs.filter(i => !(i.complete && i.naturalWidth > 0)).length,
               width: width, scroll_width: document.documentElement.scrollWidth, wide: wide,
               errors: document.querySelectorAll('.output_error, [data-mime-type="application/vnd.jupyter.stderr"]').length,
               traceback: document.body.innerText.includes('Traceback'),
               headline_rows: tables.length ? tables[0].tBodies[0].rows.length : 0};
  const pre = document.createElement('pre'); pre.id = 'browser-check'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def browser_check(html: Path, tmp_path: Path) -> dict:
    """Open a copy of the page in headless Chromium at 1280 px and read what a script measured there."""
    page = tmp_path / "page.html"
    page.write_text(html.read_text(encoding="utf-8").replace("</body>", CHECK + "</body>"), encoding="utf-8")
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,4000", "--virtual-time-budget=5000",
           "--dump-dom", page.as_uri()]
    dom = subprocess.run(cmd, capture_output=True, text=True, timeout=120).stdout
    m = re.search(r'<pre id="browser-check">(.*?)</pre>', dom, re.S)
    assert m, f"the check script did not run in Chromium:\n{dom[-2000:]}"
    return json.loads(m.group(1).replace("&quot;", '"'))


def _sh(cmd, cwd):
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True,
                       env=clean_env(cwd))
    assert r.returncode == 0, f"{' '.join(map(str, cmd))}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


@pytest.fixture(scope="session")
def reports(default_params, tmp_path_factory, worker_id):
    """A tiny run with three seeds, its report, then the report of the same runs with one seed: made once for
    the whole session, by whichever pytest-xdist worker asks first (the others wait on a lock, then read it)."""
    root = tmp_path_factory.getbasetemp()
    root = root.parent if worker_id != "master" else root  # the workers' shared folder under xdist
    tmp = root / "reports"
    with FileLock(str(root / "reports.lock")):
        if not (tmp / "done").exists():
            shutil.rmtree(tmp, ignore_errors=True)  # what a failed attempt left
            tmp.mkdir()
            _make_reports(default_params, tmp)
            (tmp / "done").touch()
    return {"three": tmp / "three.html", "one": tmp / "one.html", "snakemake": tmp / "snakemake-report.zip",
            "project": tmp / "proj", "stderr": tmp / "report.stderr"}


def _make_reports(default_params: dict, tmp: Path) -> None:
    from test_pipeline import _project

    p = tiny_params(default_params, tmp)
    p["methods"]["mos"] = {"type": "mos", "components": 2}
    p["methods"]["nce"] = {"type": "nce", "negatives": 5}
    p["run"] = {"datasets": ["tiny"], "methods": ["softmax", "mos", "nce"], "seeds": [0, 1, 2]}
    p["statistics"] = {**p.get("statistics", {}), "contrasts": [["mos", "nce"]]}
    p["matrix"]["dims"] = [2]  # one width: the section's code is the same at any count (a process a fit)
    proj = _project(tmp, p)
    _sh([str(BIN / "snakemake"), "--cores", "2"], proj)
    _sh([str(BIN / "snakemake"), "--cores", "1", "--report", str(tmp / "snakemake-report.zip")], proj)
    three = proj / "results" / "report.html"
    shutil.copy(three, tmp / "three.html")
    p1 = dict(p, data_dir="data", results_dir="results", run={**p["run"], "seeds": [0]})
    write_params(p1, proj / "params.yaml")
    _sh([str(BIN / "python"), "-m", "pipeline_src", "summarize"], proj)
    r = _sh([str(BIN / "python"), "-m", "pipeline_src", "report"], proj)
    (tmp / "report.stderr").write_text(r.stderr)
    shutil.copy(three, tmp / "one.html")


@pytest.mark.slow
def test_snakemake_report_carries_the_results_with_captions(reports):
    """`snakemake --report` holds the papermill page, the tables, the headline figures per dataset and
    every run's history and metrics, under the categories a reader looks for."""
    with zipfile.ZipFile(reports["snakemake"]) as z:
        names = [Path(n).name for n in z.namelist() if "/data/raw/" in n]
        page = z.read(f"{reports['snakemake'].stem}/report.html").decode("utf-8")  # the zip's top folder is its stem
    for f in ("report.html", "headline.csv", "contrasts.csv", "summary.csv", "bench.csv", "forest.svg", "pareto.svg", "curves.svg"):
        assert names.count(f) == 1, (f, sorted(names))
    assert names.count("history.csv") == names.count("metrics.json") == 3 * 3  # methods x seeds
    for text in ("Results tables", "Speed and memory", "headline figures", "forest plot of Δ nll",
                 "each method against its own control",
                 "Forest plot: mean paired difference", "benchmark report (papermill)"):
        assert text in page or json.dumps(text)[1:-1] in page, text


@pytest.mark.slow
@pytest.mark.parametrize("seeds", ["three", "one"])
def test_report_runs_without_errors_and_states_the_headline(reports, seeds):
    html = reports[seeds].read_text(encoding="utf-8")
    body = re.sub(r"<(style|script)[^>]*>.*?</\1>", "", html, flags=re.S)  # nbconvert's CSS names error classes
    assert html.count("<nav><strong>Contents</strong>") == 1  # a table of contents (read past it below)
    body = re.sub(r"<nav>.*?</nav>", "", body, flags=re.S)
    assert "Traceback" not in body and 'data-mime-type="application/vnd.jupyter.stderr"' not in body
    assert "jp-mod-noOutputs" not in body  # a cell that showed nothing leaves no blank box on the page
    assert "Headline" in html and "Lowest mean test perplexity" in html and "data:image/png;base64" in html
    # the declared contrast (mos against nce) has its own table, paired over the seeds both have
    controls = body[body.index("Controls: each method against its own control"):body.index("Differences against the reference")]
    assert "<td>mos</td>" in controls and "<td>nce</td>" in controls
    if seeds == "one":
        assert "without encryption" not in reports["stderr"].read_text()  # the kernel's own log stays quiet
        assert "One run seed per method: no intervals and no verdicts" in html
        assert "one seed: no verdict" in controls
    else:
        assert "3 run seeds per method" in html and "Student-t intervals over seeds" in html
        assert "standard errors each side" in html  # with 3 seeds the note says how wide t is, and why
        assert re.search(r"<td>[+-]?\d\.\d{3} \[[+-]?\d\.\d{3}, [+-]?\d\.\d{3}\]</td>", controls)  # Δ nll with its interval
        # the self-normalisation table's nce ppl is the headline's (exp of the mean nll), not a mean of ppl
        headline = re.search(r"<td>nce</td>\s*<td>(\d+\.\d\d) \[", body).group(1)
        selfnorm = body[body.index("Self-normalisation (sampling"):]
        assert re.search(r"<td>nce</td>\s*<td>(\d+\.\d\d)</td>", selfnorm).group(1) == headline
        # each band's loss over seeds is the mean of the three runs' metrics (a gap to the truth where there is one)
        runs = reports["project"] / "results" / "runs" / "tiny" / "nce"
        band = [json.loads((runs / f"seed{s}" / "metrics.json").read_text())["splits"]["test"]["bands"]["middle"]
                for s in (0, 1, 2)]
        key = "gap_nll" if band[0].get("gap_nll") is not None else "nll"  # the nll itself on text without a truth
        gap = sum(b[key] for b in band) / 3
        bands = body[body.index("Where each method loses: frequency bands"):]
        row = re.search(r"<td>nce</td>((?:\s*<td>[^<]*</td>)+)", bands).group(1)
        assert f"<td>{gap:.3f}</td>" in row, (gap, row)


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None and not os.environ.get("CI"), reason="Debian's chromium is not installed")
@pytest.mark.parametrize("seeds", ["three", "one"])
def test_report_in_a_real_browser_at_1280_px(reports, seeds, tmp_path):
    assert CHROMIUM, "CI installs Debian's chromium for this test"
    got = browser_check(reports[seeds], tmp_path)
    assert got["images"] >= 6 and got["broken"] == 0, got
    assert got["scroll_width"] <= got["width"] and got["wide"] == [], got  # nothing runs off the right edge
    assert got["errors"] == 0 and not got["traceback"], got
    assert got["headline_rows"] == 3 + 1, got  # one row per method, and the Kneser-Ney reference's


@pytest.mark.skipif(CHROMIUM is None and not os.environ.get("CI"), reason="Debian's chromium is not installed")
def test_browser_check_catches_an_overflowing_page_and_a_missing_figure(tmp_path):
    assert CHROMIUM
    bad = tmp_path / "bad.html"
    bad.write_text('<html><body><table class="results-table"><tbody><tr><td>x</td></tr></tbody></table>'
                   '<div style="width:3000px">wide</div><img src="missing.png"></body></html>')
    got = browser_check(bad, tmp_path)
    assert got["scroll_width"] > got["width"] and got["wide"] and got["broken"] == 1


def _broken_notebook(tmp_path: Path, code: str) -> Path:
    from pipeline_src.reporting.report import NOTEBOOK

    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    nb["cells"].append({"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
                        "source": code, "id": "deliberately-broken"})
    path = tmp_path / "broken.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    return path


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None and not os.environ.get("CI"), reason="Debian's chromium is not installed")
def test_a_deliberately_broken_notebook_fails_the_checks(reports, tmp_path):
    """The real notebook plus one bad cell: a table running off the page and a figure that does not load
    are caught in the browser; a cell that raises leaves no report.html behind at all."""
    from pipeline_src.config import load
    from pipeline_src.reporting.report import render

    assert CHROMIUM
    shutil.copytree(reports["project"] / "results", tmp_path / "results")
    params = dict(load(str(reports["project"] / "params.yaml")), results_dir=str(tmp_path / "results"))
    (tmp_path / "results" / "report.html").unlink()
    wide = _broken_notebook(tmp_path, 'display(HTML(\'<div style="width:3000px">wide table</div>'
                                      '<img src="figures/missing.png">\'))')
    got = browser_check(render(params, Path("params.yaml"), wide), tmp_path)
    # the notebook's output areas scroll sideways, so the page keeps its width, but the element is wider
    assert any(w.startswith("DIV") for w in got["wide"]) and got["broken"] == 1, got

    (tmp_path / "results" / "report.html").unlink()
    failing = _broken_notebook(tmp_path, 'raise ValueError("deliberately broken")')
    with pytest.raises(Exception, match="deliberately broken"):
        render(params, Path("params.yaml"), failing)
    assert not (tmp_path / "results" / "report.html").exists()


def test_a_publication_s_report_renders_from_its_committed_tables_alone(tmp_path, monkeypatch):
    """`report --name NAME`: no data, no records, no training; the publication's own statistics; an edited table
    refused by the digest its summary.json holds."""
    import pipeline_src.reporting.publish as pub
    from pipeline_src.io.errors import ArtifactError
    from pipeline_src.reporting.report import render_publication

    root = Path(__file__).resolve().parents[1]
    shutil.copytree(root / "benchmarks" / "large-vocab", tmp_path / "benchmarks" / "large-vocab",
                    ignore=shutil.ignore_patterns("records"))
    monkeypatch.setattr(pub, "BENCHMARKS", tmp_path / "benchmarks")
    html = render_publication("large-vocab", tmp_path / "reports").read_text(encoding="utf-8")
    body = re.sub(r"<nav>.*?</nav>", "", re.sub(r"<(style|script)[^>]*>.*?</\1>", "", html, flags=re.S), flags=re.S)
    assert "Traceback" not in body and "Partial results: this summary holds 72 of 81 runs" in html
    # a page that says what it is: its title and first screen name the publication, its question, data, model and
    # budget, and a table of contents lists its sections
    assert "<title>large-vocab: The large-vocabulary sweep</title>" in html
    assert re.search(r"<h1[^>]*>large-vocab: The large-vocabulary sweep", html)  # the heading too, not a generic one
    assert "<strong>large-vocab</strong>: The large-vocabulary sweep" in html and "<td>lstm, width 64, 1 layer</td>" in html
    assert "180 s of training a run" in html and '<nav><strong>Contents</strong><ol><li><a href="#What-to-use">' in html
    assert "<td>100,000 words + <code>&lt;eos&gt;</code></td>" in html  # beside the tables' "(100,001)"
    # the card first, then the notice and the count of datasets and methods, then the contents
    order = [html.index(t) for t in ("<strong>large-vocab</strong>: The large", "Partial results: this summary",
                                     "3 datasets, 9 methods.", "<nav><strong>Contents</strong>")]
    assert order == sorted(order), order
    assert "No method learned here" in html  # 1M words: every method has a seed above its unigram line
    assert "softmax did not learn, so the verdicts are against <strong>sampled-softmax</strong>" in html  # 100k
    shutil.copytree(root / "benchmarks" / "large-vocab-rerun", tmp_path / "benchmarks" / "large-vocab-rerun",
                    ignore=shutil.ignore_patterns("records"))  # the rerun: at 1M the softmax is not run at all
    rerun = render_publication("large-vocab-rerun", tmp_path / "reports").read_text(encoding="utf-8")
    assert "softmax did not learn, so the verdicts are against <strong>hierarchical-softmax</strong>" in rerun  # 100k
    assert "softmax is not run at this size, so the verdicts are against <strong>sampled-softmax-in-batch" in rerun
    assert "As the budget grows" not in rerun and "As the budget grows" not in html  # no long runs beside them
    for axis in ("budget-axis", "budget-axis-100k"):  # the long runs that carry the rerun's picks to 10x
        shutil.copytree(root / "benchmarks" / axis, tmp_path / "benchmarks" / axis,
                        ignore=shutil.ignore_patterns("records"))
    rerun = render_publication("large-vocab-rerun", tmp_path / "reports").read_text(encoding="utf-8")
    start = rerun.index("As the budget grows")
    grown = rerun[start:rerun.index("Headline", start)]
    assert "<code>budget-axis</code>, <code>budget-axis-100k</code>" in grown and "<th>10x</th>" in grown
    assert "zipf-10k (10,001), 3 seeds" in grown and "zipf-100k (100,001), 2 seeds" in grown
    assert "<strong>sampled-softmax</strong> (the only one that learned)" in grown  # 100k at 10x
    # the glance above and this grid read different runs (3 seeds; 2 at 100k): the page says so (issue 80 item 1)
    assert "These are other runs than the table above, with their own seeds" in grown
    assert "Equal budgets: quality against training time, and across vocabulary sizes" in rerun  # a sweep: both
    assert "As the budget grows" not in render_publication("large-vocab", tmp_path / "reports").read_text("utf-8")
    head = tmp_path / "benchmarks" / "large-vocab" / "headline.csv"
    head.write_text(head.read_text().replace("worse", "better"))
    with pytest.raises(ArtifactError, match="headline.csv: not the file that was published"):  # its seal first
        render_publication("large-vocab", tmp_path / "reports")


def test_the_report_reads_long_runs_budget_points_as_an_axis(tmp_path):
    """anytime.csv rows with ``multiple`` set (training.budget_points): the report's budget-axis section draws
    them, ranks the methods at each budget (a stand-in reference named where the reference did not learn), and
    states the measured crossovers apart from the fits' extrapolated ones. The published default run's tables,
    with budget points made up for four of its zipf-5k methods."""
    import numpy as np
    import pandas as pd

    from pipeline_src.io.artifacts import read_json
    from pipeline_src.reporting.axis_tables import axis_tables
    from pipeline_src.reporting.report import _execute, _parameters

    root = Path(__file__).resolve().parents[1]
    pub = tmp_path / "default"
    shutil.copytree(root / "benchmarks" / "default", pub, ignore=shutil.ignore_patterns("records"))
    s = pd.read_csv(pub / "summary.csv").query("split == 'test' and dataset == 'zipf-5k'")
    slope = {"softmax": 0.5, "nce": 0.15, "hierarchical-softmax": 0.25}
    rows = [{"dataset": "zipf-5k", "method": r.method, "seed": r.seed, "tokens": int(1e5 * m), "steps": 1,
             "train_seconds": 6 * m, "valid_nll": r.nll - slope[r.method] * math.log(m), "multiple": m,
             "valid_ppl": math.exp(r.nll - slope[r.method] * math.log(m)),
             "test_nll": r.nll - slope[r.method] * math.log(m) + 0.01 * r.seed, "validation_s": 0.1}
            for r in s.itertuples() if r.method in slope for m in (0.25, 0.5, 1, 2, 3, 5, 10)]
    points = pd.concat([pd.read_csv(pub / "anytime.csv"), pd.DataFrame(rows)], ignore_index=True)
    points = points.assign(test_ppl=np.exp(points.test_nll))
    points.to_csv(pub / "anytime.csv", index=False)
    params = read_json(pub / "provenance.json", "params")["params"]
    cells = tmp_path / "cell-bench.csv"  # a GPU cell bench: 10 s, 5 s and 10 s a multiple there
    pd.DataFrame({"dataset": "zipf-5k", "method": list(slope), "tokens_per_s": [1e4, 2e4, 1e4]}).to_csv(cells, index=False)
    params["statistics"]["gpu_cells"] = str(cells)
    summary = pd.read_csv(pub / "summary.csv")
    for name, frame in axis_tables(points, summary, pd.read_csv(pub / "references.csv"), params).items():
        frame.to_csv(pub / name, index=False)  # as summarize writes them
    html = _execute(params, _parameters({**params, "results_dir": str(pub)}), tmp_path / "r.html",
                    root / "workflow" / "notebooks" / "report.ipynb").read_text(encoding="utf-8")
    body = re.sub(r"<nav>.*?</nav>", "", re.sub(r"<(style|script)[^>]*>.*?</\1>", "", html, flags=re.S), flags=re.S)
    assert "Traceback" not in body and "The budget as an axis" in body
    axis = body[body.index("The budget as an axis"):]
    assert "data:image/png;base64" in axis and "<td>0.25x</td>" in axis and "<td>10x</td>" in axis
    assert "stand-in reference" in axis  # softmax sits above its unigram line at 0.25x: no verdict against it there
    assert "Crossovers (measured" in axis and "softmax overtakes nce at" in axis
    assert "What to use at each budget, zipf-5k" in axis and re.search(r"zipf-5k \([0-9,]+\) at 10x", axis)
    assert "(extrapolated)" in axis or "an extrapolation" in axis
    assert "zipf-5k on one GPU" in axis and "zipf-5k at equal seconds on that GPU" in axis
    assert "<td>2.5 s</td>" in axis and "<td>50 s</td>" in axis  # the window: softmax's 0.25x to NCE's 10x


def test_every_benchmarks_folder_renders_or_says_why_not_in_one_line(capsys):
    """`report --name` of each folder under benchmarks/ without a summary (a bench, references alone, records
    stashed but not yet published) and of no folder at all: one line naming why, and the publications that have
    a report. (The folders with a summary render: the tests above and the CI's report run.)"""
    from pipeline_src.cli import main
    from pipeline_src.reporting.publish import BENCHMARKS

    names = sorted(d.name for d in BENCHMARKS.iterdir() if d.is_dir() and not (d / "summary.csv").is_file())
    assert "bench-cells" in names and "kn-reference" in names
    reasons = {}
    for name in [*names, "nope"]:
        assert main(["report", "--name", name]) == 2
        err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert len(err) == 1 and err[0].startswith("error: ") and "Traceback" not in err[0], (name, err)
        reasons[name] = err[0]
    for name, line in reasons.items():
        if (BENCHMARKS / name / "provenance.json").is_file():
            assert "holds no summary.csv (a bench or references alone)" in line, line
        elif (BENCHMARKS / name / "records").is_dir():
            assert "holds stashed records only, not yet published" in line and "the ones with a report: " in line
        else:
            assert f"no publication {BENCHMARKS / name}" in line and "default, " in line, line


def test_the_contents_list_a_heading_s_text_as_shown():
    """A heading's "&" (Grivas, Bogoychev & Lopez) showed as "&amp;" in the contents: escaped once, not twice."""
    from pipeline_src.reporting.report import _with_contents

    body = ('<p>CONTENTS_HERE</p><h2 id="Which-words">Which words can win (Grivas, Bogoychev &amp; Lopez 2022)'
            '<a class="anchor-link" href="#Which-words">¶</a></h2>')
    page = _with_contents(body)
    assert '<li><a href="#Which-words">Which words can win (Grivas, Bogoychev &amp; Lopez 2022)</a></li>' in page


def test_a_ladder_publication_with_an_empty_table_renders(tmp_path):
    """token-axis-rates (one seed a rate, no inner rung to leave out: ladder-loo.csv is empty) failed in the
    notebook with pandas' EmptyDataError; its page now says the interpolation is not checked there."""
    from pipeline_src.reporting.report import render_publication

    assert (ROOT / "benchmarks" / "token-axis-rates" / "ladder-loo.csv").stat().st_size <= 1
    html = render_publication("token-axis-rates", tmp_path).read_text(encoding="utf-8")
    body = re.sub(r"<(style|script)[^>]*>.*?</\1>", "", html, flags=re.S)
    assert "Traceback" not in body and "EmptyDataError" not in body
    assert "is not checked here: no ladder of this run has an inner rung" in html
    assert "profile --config config/token-axis-rates.yaml" in html  # its own params file, not another ladder's
