"""What to use (reporting/advice.py): the best method that learned, its paired margin over the runner-up, and the
README's glance table, checked against hand computations."""
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from pipeline_src.reporting.advice import what_to_use
from pipeline_src.reporting.tables import advice_markdown, glance_markdown


def _tables():
    nll = {"softmax": [5.0, 5.1, 5.2], "a": [4.0, 4.2, 4.1], "b": [4.3, 4.25, 4.4], "collapsed": [3.0, 3.1, 3.2]}
    summary = pd.DataFrame([{"dataset": "d", "vocab": 1000, "method": m, "seed": s, "split": "test", "nll": x}
                            for m, xs in nll.items() for s, x in zip((1, 2, 3), xs)])
    head = pd.DataFrame({"dataset": "d", "method": list(nll), "reference": "softmax",
                         "status": ["learned", "learned", "learned", "did not learn, 1 of 3 seeds"],
                         "nll": [np.mean(v) for v in nll.values()],
                         "ppl": [math.exp(np.mean(v)) for v in nll.values()],
                         "ppl_low": 0.0, "ppl_high": 0.0})
    refs = pd.DataFrame({"dataset": ["d", "d"], "split": ["valid", "test"], "ppl": [70.0, 80.0]})
    return summary, head, refs


def test_the_answer_skips_a_method_that_did_not_learn_and_pairs_the_margin_over_seeds():
    summary, head, refs = _tables()
    row = what_to_use(summary, head, refs).iloc[0]
    assert row.use == "a" and row.runner_up == "b"  # "collapsed" has the lowest nll but did not learn
    diff = np.array([4.0, 4.2, 4.1]) - np.array([4.3, 4.25, 4.4])
    half = stats.t.ppf(0.975, 2) * diff.std(ddof=1) / math.sqrt(3)
    assert row.margin_nll == pytest.approx(diff.mean()) and row.pairs == 3
    assert row.margin_low == pytest.approx(diff.mean() - half) and row.margin_high == pytest.approx(diff.mean() + half)
    assert row.clear == (diff.mean() + half < 0) and row.kn_ppl == 80.0 and row.reference_ppl == head.ppl[0]
    text = advice_markdown(what_to_use(summary, head, refs))
    assert "**a**" in text and ("not separated" in text) != bool(row.clear)
    alone = what_to_use(summary[summary.method != "softmax"], head[head.method != "softmax"], refs)
    assert alone.use[0] == "a" and alone.reference_status[0] == "not run"  # a size the reference cannot reach
    assert "| softmax — (not run) |" in advice_markdown(alone)
    nobody = head.assign(status="did not learn, 3 of 3 seeds")
    assert "no method learned (4 tried)" in advice_markdown(what_to_use(summary, nobody, refs))


def test_the_readme_glance_reads_each_publication_in_order_of_vocabulary():
    text = glance_markdown(["default", "large-vocab"])
    lines = [ln for ln in text.splitlines() if ln.startswith("| large-vocab")]
    assert [ln.split("|")[2].strip().split(" ")[0] for ln in lines] == ["zipf-10k", "zipf-100k", "zipf-1m"]
    assert "no method learned" in lines[-1] and text.count("| default |") == 2
