"""Execute the report notebook with papermill and render it to HTML. The notebook reads only results."""
from __future__ import annotations

from pathlib import Path

from ..io import paths
from ..io.atomic import atomic_path
from ..io.paths import REPOSITORY

NOTEBOOK = REPOSITORY / "workflow" / "notebooks" / "report.ipynb"


def render(params: dict, params_file: Path, notebook: Path = NOTEBOOK) -> Path:
    import nbformat
    import papermill
    from nbconvert import HTMLExporter

    from .summarize import check_bench, check_summary_current

    check_summary_current(params)  # the notebook reads the tables as they are: refuse them when stale
    check_bench(params, str(params_file))
    html_path = paths.report_path(params)
    nb_path = html_path.with_suffix(".ipynb")
    parameters = {
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
        "confidence": params["statistics"]["confidence"],
        "interval": params["statistics"]["interval"],
    }
    with atomic_path(nb_path, suffix=".ipynb") as tmp:
        papermill.execute_notebook(str(notebook), str(tmp), parameters=parameters, progress_bar=False,
                                   kernel_name="python3", cwd=str(html_path.parent.resolve()))
    exporter = HTMLExporter(exclude_input=True, exclude_input_prompt=True, exclude_output_prompt=True)
    body, _ = exporter.from_notebook_node(nbformat.read(nb_path, as_version=4))
    with atomic_path(html_path, suffix=".html") as tmp:
        tmp.write_text(body, encoding="utf-8")
    return html_path
