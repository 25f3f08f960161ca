"""`python -m pipeline_src compare`: a head from outside the repository against the published default run's rows,
end to end in a copy of the repository (docs/your-own-head.md's worked example): the published rows come back from
the records untouched, only the new head's runs are trained, and the card shows its row, verdict, diagnostics and
cost."""
import json
import re
import shutil
import subprocess

import pandas as pd
import pytest
import yaml
from conftest import ROOT, clean_env
from test_pipeline import BIN, _project

from pipeline_src.config import ConfigError

PLUGIN = "tests/data/plugin_head.py:ScaledSoftmax"


@pytest.mark.slow
def test_a_head_from_outside_gets_its_card_against_the_published_default(tmp_path, default_params):
    proj = _project(tmp_path, default_params)  # the workflow's files (compare reads the publication's params)
    for pub in ("default", "default-calibration"):
        shutil.copytree(ROOT / "benchmarks" / pub, proj / "benchmarks" / pub)
    (proj / "tests" / "data").mkdir(parents=True)
    shutil.copy(ROOT / PLUGIN.split(":")[0], proj / PLUGIN.split(":")[0])
    r = subprocess.run([str(BIN / "python"), "-m", "pipeline_src", "compare", "--head", PLUGIN, "--as", "scaled",
                        "--datasets", "zipf-5k", "--cores", "2"], cwd=proj, capture_output=True, text=True,
                       env=clean_env(proj), timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = proj / "results" / "compare" / "scaled"
    head = pd.read_csv(out / "headline.csv")
    published = pd.read_csv(ROOT / "benchmarks" / "default" / "headline.csv").query("dataset == 'zipf-5k'")
    assert set(head.method) == set(published.method) | {"scaled"}
    # the published rows were restored, not retrained: their perplexities are the published ones to the bit
    both = head.merge(published, on=["dataset", "method"], suffixes=("", "_pub"))
    assert len(both) == len(published) and (both.ppl == both.ppl_pub).all()
    trained = {p.parent.name for p in (out / "logs" / "train").glob("*/*/seed*.log")}
    assert trained == {"scaled"}  # only the new head's runs were trained: the published ones were restored
    mine = head[head.method == "scaled"].iloc[0]
    card = (out / "card.html").read_text(encoding="utf-8")
    body = re.sub(r"<(style|script)[^>]*>.*?</\1>", "", card, flags=re.S)
    assert "Traceback" not in body and "<strong>scaled</strong>" in card and f"test perplexity {mine.ppl:.1f}" in card
    assert mine.seeds == 3
    # a head slower than the softmax here gets fewer tokens, and may end above the unigram line: the card says which
    if mine.status == "learned":
        assert mine.verdict in ("better", "worse", "no clear difference") and f"<strong>{mine.verdict}</strong>" in card
        assert re.search(r"\), place \d+ of \d+ methods that learned; ", card)
    else:
        assert mine.status.startswith("did not learn") and "no verdict rests on it" in card
        assert "), no place (it did not learn); " in card and "place no place" not in card
    # its tokens frozen from the softmax's by their speeds timed here, not this machine's clock (issue 80, item 4)
    scaled = json.loads((out / "scaled-tokens.json").read_text())["zipf-5k"]
    frozen = yaml.safe_load((out / "params.yaml").read_text())["datasets"]["zipf-5k"]["training"]
    assert frozen["budget_tokens_by_method"]["scaled"] == scaled["tokens"] == round(
        scaled["reference_tokens"] * scaled["speed_ratio"])
    assert scaled["reference"] == "softmax" and scaled["rounds"] == 5
    assert f"{scaled['tokens']:,} tokens frozen for it" in card and "its own time budget" not in card
    assert "compare: train and evaluate scaled:" in r.stdout  # progress as it goes
    calibration = re.search(r"Calibration of zipf-5k's frozen budgets:.*?</p>", card, re.S).group(0)
    assert "softmax 28,840/s" in calibration and "scaled" not in calibration  # its tokens are not a calibration's
    bench = pd.read_csv(out / "bench.csv")
    assert set(bench.method) == {"softmax", "scaled"}


def test_compare_refuses_an_edited_copy_of_a_publication_before_it_trains(tmp_path, monkeypatch):
    from pipeline_src.records.compare import compare_params
    from pipeline_src.reporting import publish, seals

    copy_ = tmp_path / "benchmarks"
    shutil.copytree(ROOT / "benchmarks" / "default", copy_ / "mine-copy")
    headline = copy_ / "mine-copy" / "headline.csv"
    headline.write_text(headline.read_text().replace("269.2", "169.2", 1) + "\n")
    monkeypatch.setattr(publish, "BENCHMARKS", copy_)
    monkeypatch.setattr(seals, "_CHECKED", set())
    with pytest.raises(Exception, match=r"benchmarks/mine-copy/headline.csv: not the file that was published"):
        compare_params(PLUGIN, {}, "mine-copy", "mine", None)


def test_a_new_head_s_tokens_are_the_reference_s_frozen_tokens_times_its_relative_speed(monkeypatch):
    """``scale_frozen_tokens``: the median over alternating rounds of the reference's ms over the new head's, times
    the reference's frozen tokens, whatever the machine's speed (the rounds below are the same machine at two
    loads: the ratio is what they share); a dataset without frozen tokens is left on its budget."""
    from pipeline_src.cost import cells
    from pipeline_src.records.compare import compare_params, scale_frozen_tokens

    p = compare_params(PLUGIN, {}, "default", "mine", None)
    frozen = p["datasets"]["zipf-5k"]["training"]["budget_tokens_by_method"]["softmax"]
    rounds = {"softmax": [10.0, 20.0, 10.0, 30.0, 12.0], "mine": [20.0, 40.0, 25.0, 60.0, 24.0]}  # ratios .5 .5 .4 .5 .5
    monkeypatch.setattr(cells, "alternating_ms", lambda params, ds, methods, device, r, s: rounds)
    said = []
    got = scale_frozen_tokens(p, "mine", "cpu", said.append)
    assert set(got) == {"zipf-5k"}  # synth has no frozen tokens: its budget stays its own
    assert got["zipf-5k"]["tokens"] == round(frozen * 0.5) and got["zipf-5k"]["speed_ratio"] == 0.5
    assert p["datasets"]["zipf-5k"]["training"]["budget_tokens_by_method"]["mine"] == round(frozen * 0.5)
    assert p["datasets"]["zipf-5k"]["training"]["budget_tokens_by_method"]["softmax"] == frozen
    assert any("0.500x as fast as softmax" in line for line in said)


def test_compare_refuses_a_taken_name_an_unknown_dataset_and_a_head_that_is_not_one():
    from pipeline_src.records.compare import compare_params

    with pytest.raises(ConfigError, match=r"compare --as softmax: already a method of benchmarks/default"):
        compare_params(PLUGIN, {}, "default", "softmax", None)
    with pytest.raises(ConfigError, match=r"compare --datasets ptb: benchmarks/default ran \['synth', 'zipf-5k'\]"):
        compare_params(PLUGIN, {}, "default", "mine", ["ptb"])
    with pytest.raises(ConfigError, match=r"no_such_module"):
        compare_params("no_such_module:Head", {}, "default", "mine", None)
    # the weak cases of the second probe: refused in one line before anything runs, naming what it can compare with
    with pytest.raises(ConfigError, match=r"compare --against nosuch: benchmarks/nosuch is no publication; .*one of "
                                          r"budget-axis, .*default"):
        compare_params(PLUGIN, {}, "nosuch", "mine", None)
    with pytest.raises(ConfigError, match=r"benchmarks/bench-cells is a publication without records"):
        compare_params(PLUGIN, {}, "bench-cells", "mine", None)
    with pytest.raises(Exception, match=r"compare --against '\.\.': give a plain name"):
        compare_params(PLUGIN, {}, "..", "mine", None)
    p = compare_params(PLUGIN, {"init_scale": 2.0}, "default", "mine", ["zipf-5k"])
    assert p["run"]["datasets"] == ["zipf-5k"] and p["run"]["methods"][-1] == "mine"
    assert p["run"]["extra"] == {"datasets": [], "methods": []} and p["keep_models"] is False
    assert p["methods"]["mine"] == {"type": PLUGIN, "init_scale": 2.0} or p["methods"]["mine"]["init_scale"] == 2.0
    assert p["bench"]["methods"] == ["softmax", "mine"] and p["results_dir"] == "results/compare/mine"
