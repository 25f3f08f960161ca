"""The comparison card (``compare``): one page for a new head against a publication's rows, from the tables of
``results/compare/<as>`` (``workflow/notebooks/card.ipynb``, executed like the report: it reads only tables)."""
from __future__ import annotations

from pathlib import Path

from ..io import paths
from .report import _execute, _parameters

NOTEBOOK = paths.REPOSITORY / "workflow" / "notebooks" / "card.ipynb"


def render_card(params: dict, params_file: Path, against: str, head: str, scaled: dict | None = None,
                notebook: Path = NOTEBOOK) -> Path:
    """results_dir/card.html: the head's rows in each dataset's headline beside the published ones, its verdicts,
    rank and argmax diagnostics, its cost against the floor and its own, and what was the same as the published
    runs and what was not (``scaled``: by dataset, how its frozen tokens were set, ``compare.scale_frozen_tokens``)."""
    out = Path(params["results_dir"]) / "card.html"
    tables = _parameters(params)
    read = ("summary_csv", "headline_csv", "references_csv", "bench_csv", "summary_json", "confidence")
    frozen = {d: sorted((params["datasets"][d].get("training") or {}).get("budget_tokens_by_method") or {})
              for d in params["datasets"]}  # the datasets whose methods train frozen tokens, and which
    parameters = {**{k: tables[k] for k in read}, "head": head, "head_type": params["methods"][head]["type"],
                  "against": against, "params_file": str(params_file), "frozen": frozen, "scaled": scaled or {}}
    return _execute(params, parameters, out, notebook)
