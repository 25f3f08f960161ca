"""Execute the report notebook with papermill and render it to HTML. The notebook reads only results."""
from __future__ import annotations

from pathlib import Path

from ..io import paths
from ..io.atomic import atomic_path
from ..io.paths import REPOSITORY

NOTEBOOK = REPOSITORY / "workflow" / "notebooks" / "report.ipynb"


def render(params: dict, params_file: Path, notebook: Path = NOTEBOOK) -> Path:
    from .summary_checks import check_bench, check_summary_current

    check_summary_current(params)  # the notebook reads the tables as they are: refuse them when stale
    check_bench(params, str(params_file))
    card = first_screen(params, str(params_file), None)
    return _execute(params, {**_parameters(params), "first_screen": card, "params_file": str(params_file)},
                    paths.report_path(params), notebook,
                    title=f"{Path(params_file).stem}: {question(params_file)}")


def render_publication(name: str, out_dir: Path, notebook: Path = NOTEBOOK) -> Path:
    """A publication's report from its committed tables alone (``benchmarks/NAME``): no data, no records, no
    training. Its tables are checked against the digests its summary.json lists (an edited table is refused), the
    statistics are those it was published (or restated) with, and the page goes to ``out_dir/NAME.html``."""
    from ..io.artifacts import read_json
    from ..io.digests import check_file
    from ..io.errors import ConfigError
    from .publish import check_name
    from .seals import check_publication

    pub = check_name(name, "report")
    if not (pub / paths.PROVENANCE).is_file():
        have = sorted(p.parent.name for p in pub.parent.glob(f"*/{paths.PROVENANCE}") if (p.parent / "summary.csv").is_file())
        what = (f"{pub} holds stashed records only, not yet published (`python -m pipeline_src publish --name "
                f"{name}` once its runs are done)" if (pub / "records").is_dir() else f"no publication {pub}")
        raise ConfigError(f"report --name {name}: {what}; the ones with a report: {', '.join(have)}")
    if not (pub / "summary.csv").is_file():
        raise ConfigError(f"{pub} holds no summary.csv (a bench or references alone): no report to render")
    check_publication(pub)  # every file as published, committed ones as git holds them
    for advice in budget_extensions(name):
        check_publication(advice.parent)
    params = read_json(pub / paths.PROVENANCE, "params")["params"]
    info = read_json(pub / "summary.json") if (pub / "summary.json").is_file() else {}
    for table, digest in (info.get("tables") or {}).items():
        if (pub / table).is_file():
            check_file(pub / table, digest, pub / "summary.json", f"`python -m pipeline_src publish --name {name}`")
    _check_verdicts(pub, params, name)
    at = {**params, "results_dir": str(pub)}  # every table path of the publication, as results_dir would hold it
    prov = read_json(pub / paths.PROVENANCE)
    parameters = {**_parameters(at), "axes_csvs": [str(p) for p in budget_extensions(name)],
                  "first_screen": first_screen(params, prov.get("params_file"), prov, name),
                  "params_file": prov.get("params_file") or "params.yaml"}
    return _execute(params, parameters, Path(out_dir) / f"{name}.html", notebook,
                    title=f"{name}: {question(prov.get('params_file'))}")


def question(params_file: str | None) -> str:
    """What a run asks, from its params file's first comment line (``# The budget as an axis at 100k words
    (...): ...`` -> ``The budget as an axis at 100k words``), else a plain description."""
    try:
        first = (REPOSITORY / params_file).read_text(encoding="utf-8").splitlines()[0] if params_file else ""
    except (OSError, UnicodeDecodeError, IndexError):
        first = ""
    if not first.startswith("#"):
        return "output layers compared by exact perplexity"
    text = first.lstrip("# ").split(" (")[0].split(":")[0].strip()
    return text[:90] or "output layers compared by exact perplexity"


def first_screen(params: dict, params_file: str | None, prov: dict | None, name: str | None = None) -> str:
    """The report's first screen in Markdown: which publication (or run) this is, the data, the model, the budget
    and the machine, then a marker the table of contents replaces (``_with_contents``)."""
    from ..config import config_hash
    from ..config.runs import dataset_section, run_datasets, run_seeds

    lines = [f"**{name or 'This run'}**: {question(params_file)} (`{params_file or 'params.yaml'}`)", ""]
    rows = []
    for ds in run_datasets(params):
        d = params["datasets"][ds]
        corpus, model = d.get("corpus", {}), dataset_section(params, ds, "model")
        tr = dataset_section(params, ds, "training")
        vocab = corpus.get("vocab_size") or corpus.get("name") or corpus.get("type", "?")
        budget = (f"ladder {', '.join(f'{r / 1e6:g}M' for r in sorted(tr['ladder']))} tokens" if tr.get("ladder")
                  else f"{tr['budget_seconds']:g} s of training a run" if tr.get("budget_seconds")
                  else f"{tr['budget_tokens']:,} tokens" if tr.get("budget_tokens") else f"{tr.get('epochs')} epochs")
        rows.append(f"| {ds} | {vocab if isinstance(vocab, str) else f'{vocab:,} words + `<eos>`'} | "
                    f"{model.get('encoder', 'lstm')}, width {model.get('hidden_dim', '?')}, "
                    f"{_count(model.get('layers'), 'layer')} | {budget} |")
    lines += ["| dataset | data | model (encoder, width, layers) | budget |", "|---|---|---|---|", *rows, ""]
    tops = _top_rungs(params)
    if tops:  # a token ladder: the headline and contrasts score each run's last rung, the ladder section every one
        lines += [f"Under the token ladder, the tables and verdicts before the ladder section score each run's **top "
                  f"rung** ({'; '.join(tops)}); the ladder section reads every rung.", ""]
    machine = (prov or {}).get("cpu_model") or "this machine"
    when = f", published {prov['published'][:10]} at `{str(prov.get('commit'))[:12]}`" if prov and prov.get("published") else ""
    if prov and prov.get("trained_at_commit"):  # a rerun trained in a worktree pinned at another commit
        when += f" (trained at `{prov['trained_at_commit'][:12]}`)"
    lines += [f"Seeds {', '.join(map(str, run_seeds(params)))}; trained on {machine}{when}; params hash "
              f"`{config_hash(params)}` (each run's own in summary.csv's `config_hash`). Bold and *separated* "
              f"mean one thing everywhere: a Holm-adjusted p below {1 - params['statistics']['confidence']:.2g} "
              f"(docs/statistics.md, glossary).", "", "CONTENTS_HERE"]
    return "\n".join(lines)


def _top_rungs(params: dict) -> list[str]:
    """Per ladder dataset, its top rung in tokens, and any method's lower top of its own
    (``training.ladder_top_by_method``)."""
    from ..config.runs import dataset_section, run_datasets
    from .ladder_tables import capped_below

    out = []
    for ds in run_datasets(params):
        tr = dataset_section(params, ds, "training")
        if not tr.get("ladder"):
            continue
        top = max(int(r) for r in tr["ladder"])
        own = [f"{m} {t / 1e6:g}M" for m, t in sorted(capped_below(params, ds, top).items())]
        out.append(f"{ds}: {top / 1e6:g}M tokens" + (f", {', '.join(own)} (its own top)" if own else ""))
    return out


def _count(n, noun: str) -> str:
    """``1 layer``, ``2 layers``; ``? layers`` where the params leave it unsaid."""
    return f"{n} {noun}" if n == 1 else f"{'?' if n is None else n} {noun}s"


def _with_contents(body: str) -> str:
    """The rendered page with a table of contents (its h2 sections, in order) where the first screen's marker is."""
    import html
    import re

    heads = re.findall(r'<h2 id="([^"]+)"[^>]*>(.*?)(?:<a class="anchor-link".*?)?</h2>', body, re.S)
    items = "".join(f'<li><a href="#{i}">{html.escape(html.unescape(re.sub("<[^>]+>", "", t).strip()))}</a></li>'
                    for i, t in heads)  # the heading's text as shown (its entities decoded once, escaped once)
    return body.replace("<p>CONTENTS_HERE</p>", f"<nav><strong>Contents</strong><ol>{items}</ol></nav>", 1)


def budget_extensions(name: str) -> list[Path]:
    """The ``budget-advice.csv`` of each publication whose long runs carry publication ``name``'s picks to
    larger budgets (one of its datasets' ``training.budget_calibration`` is ``benchmarks/NAME``), in name order:
    what the report of ``name`` shows over (|V|, budget)."""
    from ..io.artifacts import read_json
    from . import publish

    found = []
    for advice in sorted(publish.BENCHMARKS.glob("*/budget-advice.csv")):
        params = read_json(advice.with_name(paths.PROVENANCE), "params")["params"]
        sources = {(spec.get("training") or {}).get("budget_calibration")
                   for spec in (params.get("datasets") or {}).values()}
        if f"benchmarks/{name}" in sources:
            found.append(advice)
    return found


def _check_verdicts(pub: Path, params: dict, name: str) -> None:
    """The headline and contrasts must be what the publication's own per-run rows give under its statistics (a
    publication from before table digests is checked this way too): an edited verdict is refused."""
    import io

    import pandas as pd

    from ..config import validate
    from ..io.artifacts import read_csv
    from ..io.errors import StaleError
    from .summarize import verdict_tables

    head, con = verdict_tables(read_csv(pub / "summary.csv", "dataset", "method", "seed", "split", "nll"),
                               validate(dict(params), str(pub / paths.PROVENANCE)))
    for file, frame in (("headline.csv", head), ("contrasts.csv", con)):
        if not (pub / file).is_file():
            continue
        want = pd.read_csv(io.StringIO(frame.to_csv(index=False)))
        try:
            pd.testing.assert_frame_equal(pd.read_csv(pub / file), want, check_exact=False, rtol=1e-9)
        except AssertionError:
            raise StaleError(f"{pub / file} is not what {pub / 'summary.csv'}'s runs give under its statistics "
                             f"(edited, or made by other code): `python -m pipeline_src restate --name {name} "
                             f"--as-published`") from None


def _parameters(params: dict) -> dict:
    return {
        "summary_csv": str(paths.summary_path(params).resolve()),
        "history_csv": str(paths.history_path(params).resolve()),
        "anytime_csv": str(paths.anytime_path(params).resolve()),
        "bench_csv": str(paths.bench_path(params).resolve()),
        "matrix_csv": str(paths.matrix_summary_path(params).resolve()),
        "headline_csv": str(paths.headline_path(params).resolve()),
        "contrasts_csv": str(paths.contrasts_path(params).resolve()),
        "references_csv": str(paths.references_summary_path(params).resolve()),
        "tuning_csv": str(paths.tuning_summary_path(params).resolve()),
        "tuning_curves_csv": str(paths.tuning_curves_path(params).resolve()),
        "summary_json": str(paths.summary_path(params).with_suffix(".json").resolve()),
        "axis_dir": str(Path(params["results_dir"]).resolve()),
        "confidence": params["statistics"]["confidence"],
        "interval": params["statistics"]["interval"],
        "sweeps": sweeps(params),
        "axes_csvs": [],  # a publication's: its budget-axis extensions (render_publication)
    }


SIZE_KEYS = ("vocab_size", "train_tokens", "valid_tokens", "test_tokens")  # what a sweep over |V| may vary


def sweeps(params: dict) -> list[list[str]]:
    """The run's datasets grouped by language: the same corpus and tokenizer but for the keys a sweep over
    vocabulary sizes varies (``SIZE_KEYS``). A group of two or more is a sweep, read across its sizes; the
    default run's synthetic language and its Zipfian one are two languages, not a sweep."""
    import json

    from ..config import run_datasets

    groups: dict[str, list[str]] = {}
    for name in run_datasets(params):
        spec = params["datasets"][name]
        corpus = {k: v for k, v in spec["corpus"].items() if k not in SIZE_KEYS}
        key = json.dumps([corpus, spec.get("tokenizer")], sort_keys=True, default=str)
        groups.setdefault(key, []).append(name)
    return [g for g in groups.values() if len(g) > 1]


HEADING = "# LM output layers: the report"  # the report notebook's first line, replaced by the page's own title


def _execute(params: dict, parameters: dict, html_path: Path, notebook: Path, title: str = "LM output layers") -> Path:
    import nbformat
    import papermill
    from nbconvert import HTMLExporter

    html_path.parent.mkdir(parents=True, exist_ok=True)
    nb_path = html_path.with_suffix(".ipynb")
    with atomic_path(nb_path, suffix=".ipynb") as tmp:
        papermill.execute_notebook(str(notebook), str(tmp), parameters=parameters, progress_bar=False,
                                   kernel_name="python3", cwd=str(html_path.parent.resolve()),
                                   extra_arguments=["--IPKernelApp.log_level=ERROR"])  # not its TCP warning
    exporter = HTMLExporter(exclude_input=True, exclude_input_prompt=True, exclude_output_prompt=True)
    node = nbformat.read(nb_path, as_version=4)
    first = node.cells[0] if node.cells else None
    if first is not None and first.cell_type == "markdown" and first.source.startswith(HEADING):
        first.source = f"# {title}\n\n*{HEADING[2:]}*" + first.source[len(HEADING):]  # the page names itself
    # a code cell that showed nothing (a section this publication has no data for) is left out: its empty box
    # drew a blank gap, eight of them in a row in a single-dataset report
    node.cells = [c for c in node.cells if c.cell_type != "code" or c.get("outputs")]
    body, _ = exporter.from_notebook_node(node, resources={"metadata": {"name": title}})
    body = _with_contents(body)
    with atomic_path(html_path, suffix=".html") as tmp:
        tmp.write_text(body, encoding="utf-8")
    return html_path
