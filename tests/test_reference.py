"""The Kneser-Ney reference step (pipeline_src/evaluation/reference.py): the row it writes, its place in the summary and
the headline tables, and a stale row refused."""
import json

import numpy as np
import pandas as pd
import pytest
from conftest import write_params

from pipeline_src.cli import main


@pytest.fixture
def kn_run(tiny, tmp_path):
    tiny["datasets"]["tiny"]["corpus"].update(order=3, train_tokens=20000)  # a trigram language: KN's home
    tiny["references"] = {"kn": {"orders": [1, 2, 3]}}
    cfg = write_params(tiny, tmp_path / "params.yaml")
    args = ["--config", str(cfg), "--dataset", "tiny"]
    assert main(["fetch", *args]) == 0 and main(["prepare", *args]) == 0
    assert main(["reference", *args, "--name", "kn"]) == 0
    out = tmp_path / "results" / "references" / "tiny" / "kn.json"
    return tiny, cfg, json.loads(out.read_text())


def test_the_row_keeps_the_order_best_on_valid_and_scores_against_the_truth(kn_run):
    params, _, rec = kn_run
    valid = {int(k): v["valid_nll"] for k, v in rec["orders"].items()}
    assert rec["order"] == min(valid, key=valid.get) and set(valid) == {1, 2, 3}
    assert valid[1] > valid[2]  # context helps on a trigram language: the unigram level is worst
    from pipeline_src.data.prepare import load_split
    from pipeline_src.io import paths

    test = rec["splits"]["test"]
    assert test["tokens"] == len(load_split(paths.prepared_dir(params, "tiny"), "test"))  # every token scored
    assert test["gap_nll"] == pytest.approx(test["nll"] - test["true_nll"]) and test["gap_nll"] > 0
    assert rec["sentences"] is False  # the sparse n-gram language's truth crosses line ends
    bands = test["bands"]
    n = sum(b["tokens"] for b in bands.values())
    assert n == test["tokens"]  # every scored token is in exactly one band
    mean = sum(b["tokens"] * b["nll"] for b in bands.values() if b["nll"] is not None) / n
    assert mean == pytest.approx(test["nll"], rel=1e-9)
    # the band split of Kneser-Ney's loss and of the truth's: each band's parts add up, and so do the gaps
    for b in (b for b in bands.values() if b["tokens"]):
        assert b["alloc_nll"] + b["within_nll"] == pytest.approx(b["nll"], abs=1e-9)
        assert b["alloc_gap"] + b["within_gap"] == pytest.approx(b["gap_nll"], abs=1e-9)
    assert test["band_alloc_gap"] == pytest.approx(test["band_alloc_nll"] - test["true_band_alloc_nll"])


def test_a_row_made_under_other_orders_is_refused_naming_the_key(kn_run, tmp_path):
    from pipeline_src.io.errors import StaleError
    from pipeline_src.reporting.summarize import reference_rows

    params, cfg, _ = kn_run
    rows = reference_rows(params, False, [])
    assert sorted(rows.split) == ["test", "valid"] and rows.method.unique().tolist() == ["kn"]
    params["references"]["kn"]["orders"] = [2, 3, 4]
    with pytest.raises(StaleError, match=r"kn.json was made under another config \(key 'options.orders' differs"):
        reference_rows(params, False, [])
    missing = []
    params["run"]["datasets"] = ["tiny"]
    params["results_dir"] = str(tmp_path / "elsewhere")
    assert reference_rows(params, True, missing).empty and missing == ["references/tiny/kn"]


def test_the_headline_table_places_the_reference_by_perplexity_without_seeds_or_verdict():
    from pipeline_src.reporting.tables import headline_markdown

    head = pd.DataFrame({"dataset": ["d", "d"], "method": ["softmax", "mos"], "seeds": [3, 3],
                         "nll": [np.log(120.0), np.log(100.0)], "ppl": [120.0, 100.0], "ppl_low": [118, 97],
                         "ppl_high": [122, 103], "reference": ["softmax"] * 2, "delta_nll": [np.nan, -0.18],
                         "delta_low": [np.nan, -0.2], "delta_high": [np.nan, -0.16], "verdict": ["reference", "better"],
                         "gap_nll": [np.nan, np.nan], "logprob_rank": [18, 60], "head_dim": [16, 16],
                         "train_time_s": [3.0, 9.0], "head_flops_per_token_train": [48e3, 400e3]})
    refs = pd.DataFrame({"dataset": ["d", "d"], "method": ["kn", "kn"], "order": [5, 5], "split": ["valid", "test"],
                         "nll": [np.log(115.0), np.log(110.0)], "ppl": [115.0, 110.0], "gap_nll": [np.nan] * 2,
                         "fit_seconds": [0.5, 0.5]})
    lines = [line for line in headline_markdown(head, refs).splitlines() if line.startswith("| ")][1:]
    assert [line.split(" | ")[0][2:] for line in lines] == ["mos", "kn-5 (count-based)", "softmax"]
    assert "| 110.0 | — | reference (no seeds) |" in lines[1] and "| 0.5 (fit) |" in lines[1]
    assert headline_markdown(head).count("count-based") == 0


def test_the_report_sentence_names_who_beats_the_reference_and_by_how_much():
    from pipeline_src.reporting.findings import reference_findings

    head = pd.DataFrame({"dataset": ["d"] * 3, "method": ["mos", "softmax", "nce"], "ppl": [100.0, 120.0, 150.0],
                         "nll": np.log([100.0, 120.0, 150.0]), "nll_high": np.log([104.0, 125.0, 160.0])})
    refs = pd.DataFrame({"dataset": ["d"], "method": ["kn"], "order": [4], "split": ["test"], "ppl": [122.0],
                         "nll": [np.log(122.0)], "fit_seconds": [1.234]})
    (line,) = reference_findings(head, refs, "d")
    assert "order 4 chosen on valid" in line and "fitted in 1.2 s" in line and "test ppl **122.00**" in line
    assert "below it: mos 100.00 (-18.0%), softmax 120.00 (-1.6%, its interval reaches it); 1 at or above it, " \
           "the closest nce (+23.0%)." in line
    assert reference_findings(head, refs, "other") == [] and reference_findings(head, None, "d") == []
    refs["ppl"], refs["nll"] = 90.0, np.log(90.0)
    (line,) = reference_findings(head, refs, "d")
    assert "below it: none of the 3 neural rows; the closest is mos at 100.00 (+11.1%)" in line
