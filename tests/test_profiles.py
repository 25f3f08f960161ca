"""Equal time for any machine (reporting/profiles.py): each seed read from its token ladder at a profile's tokens,
by linear interpolation in log tokens between measured rungs and never beyond them, and the verdict formed from
those readings as from measured ones; checked against hand computations."""
import math
import re

import numpy as np
import pandas as pd
import pytest

from pipeline_src.io.errors import ConfigError
from pipeline_src.reporting.profiles import advise, ladder_points, leave_one_out, load_profile, read_at, readings

RUNGS = [1e6, 2e6, 4e6, 8e6]


def _ladder():
    """Two methods on one dataset, 3 seeds, nll falling 0.3 nats per doubling (a: from 5.0, b: from 5.2, and b
    falls faster: 0.4), validation 0.01 above test; the softmax is the reference."""
    rows, summary = [], []
    for m, start, slope in (("a", 5.0, 0.3), ("b", 5.2, 0.4), ("softmax", 6.0, 0.2)):
        for seed in (1, 2, 3):
            for k, t in enumerate(RUNGS):
                nll = start - slope * k + 0.01 * seed
                rows.append({"dataset": "d", "method": m, "seed": seed, "multiple": t / RUNGS[-1], "tokens": t,
                             "valid_ppl": math.exp(nll + 0.01), "test_nll": nll})
            summary.append({"dataset": "d", "vocab": 1000, "method": m, "seed": seed, "split": "valid",
                            "nll": 4.0, "unigram_valid_ppl": 1e9, "type": m, "reference": "softmax"})
    return pd.DataFrame(rows), pd.DataFrame(summary)


def test_a_reading_is_linear_in_log_tokens_between_rungs_and_never_beyond_them():
    t, y = np.array(RUNGS), np.array([5.0, 4.7, 4.4, 4.1])
    assert read_at(t, y, 2e6) == pytest.approx(4.7)  # a measured rung reads as measured
    assert read_at(t, y, 3e6) == pytest.approx(4.7 - 0.3 * math.log(1.5) / math.log(2))
    assert math.isnan(read_at(t, y, 0.5e6)) and math.isnan(read_at(t, y, 9e6))  # outside the measured range
    anytime, _ = _ladder()
    loo = leave_one_out(ladder_points(anytime))
    assert len(loo) == 3 * 3 * 2 and loo.error.abs().max() < 1e-12  # a straight line in log tokens: no error


def test_equal_time_gives_each_method_its_own_tokens_and_the_verdict_of_those_readings():
    anytime, summary = _ladder()
    profile = pd.DataFrame({"dataset": "d", "method": ["a", "b", "softmax"], "tokens_per_s": [400.0, 100.0, 20.0]})
    # 10,000 s: a reads 4M tokens (4.4), b 1M (5.2), the softmax 200k (outside its ladder)
    table, read = advise(anytime, summary, profile, 10_000, "d")
    by = read.groupby("method").agg(tokens=("tokens", "first"), nll=("test_nll", "mean"), outside=("outside", "any"))
    assert by.loc["a"].tokens == 4e6 and by.loc["a"].nll == pytest.approx(4.4 + 0.02)
    assert by.loc["b"].tokens == 1e6 and by.loc["b"].nll == pytest.approx(5.2 + 0.02)
    assert bool(by.loc["softmax"].outside) and math.isnan(by.loc["softmax"].nll)
    row = table.iloc[0]
    assert row.use == "a" and row.runner_up == "b" and row.margin_nll == pytest.approx(4.4 - 5.2)
    # at 80,000 s b reads 8M (4.0), the softmax 1.6M, and a is beyond its ladder (32M): never extrapolated
    table, read = advise(anytime, summary, profile, 80_000, "d")
    assert table.iloc[0].use == "b" and table.iloc[0].runner_up == "softmax"
    assert set(read[read.outside].method) == {"a"}
    with pytest.raises(ConfigError, match="the profile has no row for d's shapes"):
        advise(anytime, summary, profile.assign(dataset="x"), 100, "d")
    with pytest.raises(ConfigError, match=r"--dataset other: the ladder publication has no rungs of it"):  # not the
        advise(anytime, summary, profile, 100, "other")  # profile's fault (the fifth probe)
    # the third probe: a dataset the profile measures but the ladder publication lacks gave a traceback
    wider = pd.concat([profile, profile.assign(dataset="e")])
    with pytest.raises(ConfigError, match=r"--dataset e: the ladder publication has no rungs of it, only of d \("):
        advise(anytime, summary, wider, 100, "e")


def test_advise_names_a_publication_that_is_no_ladder(capsys):
    """`advise --name default` (a time-budget publication) read a ladder it does not have: said in one line,
    naming the ladder publications."""
    from pipeline_src.cli import main

    assert main(["advise", "--profile", "cpu-thread", "--seconds", "60", "--dataset", "zipf-10k", "--name",
                 "default"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "is not a token-ladder publication" in err[0] and "token-axis" in err[0], err
    assert main(["advise", "--profile", "cpu-thread", "--seconds", "60", "--dataset", "zipf-10k", "--name",
                 "nosuch"]) == 2  # the fifth probe: a typo was told to train config/token-axis.yaml
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "no publication" in err[0] and "publications: token-axis, " in err[0] \
        and "token-axis-rates" in err[0], err


def test_the_committed_profiles_name_their_machine():
    rows, machine = load_profile("h100")
    assert {"zipf-10k", "zipf-100k", "zipf-1m"} <= set(rows.dataset)
    assert machine.startswith("NVIDIA H100") and "measured at commit 55b94b1" in machine
    rows, machine = load_profile("cpu-thread")
    import json

    from pipeline_src.io.paths import REPOSITORY

    made = json.loads((REPOSITORY / "benchmarks" / "bench-cells-ladder" / "provenance.json").read_text())["commit"][:7]
    assert (rows.tokens_per_s > 0).all() and "1 threads" in machine and f"measured at commit {made}" in machine
    with pytest.raises(ConfigError, match="--profile nope: no such profile"):
        load_profile("nope")
    assert readings(ladder_points(_ladder()[0]), {}).empty


def test_the_advise_line_profile_prints_names_a_ladder_that_holds_the_dataset_or_says_none_does():
    """`profile` ends with the `advise` command that reads what it wrote: with the publication whose ladder holds the
    config's dataset (token-axis holds zipf-10k), and for a config whose datasets no ladder holds (the smoke
    language), a line that says so and names what the ladders hold, not a command that would fail."""
    from pathlib import Path

    from pipeline_src.tools import _advise_line

    line = _advise_line(Path("p.csv"), ["nosuch-language", "zipf-10k"])
    assert line.startswith("`python -m pipeline_src advise --profile p.csv --seconds 60 --dataset zipf-10k "
                           "--name token-axis`"), line
    line = _advise_line(Path("p.csv"), ["synth-small"])
    assert "no published token ladder holds synth-small" in line and "zipf-10k (token-axis)" in line, line
    assert "advise --profile" not in line


def _sized(rows: dict, shape: str = "S") -> pd.DataFrame:
    """A profile whose datasets carry |V| and a shape: ``rows`` maps dataset -> (|V|, {method: tokens/s})."""
    return pd.DataFrame([{"dataset": d, "method": m, "tokens_per_s": s, "vocab": v, "shape": shape}
                         for d, (v, speed) in rows.items() for m, s in speed.items()])


def test_a_dataset_the_profile_did_not_measure_is_read_between_the_vocabulary_sizes_around_it():
    """WikiText-2 is in no committed profile: its tokens/s are read from the datasets of the same shapes, log
    tokens/s linear in log |V| (hand computations), at the nearest size outside them, never across shapes."""
    from pipeline_src.reporting.profiles import speeds

    profile = _sized({"p": (1_000, {"a": 100.0, "b": 50.0}), "q": (100_000, {"a": 1.0, "b": 50.0})})
    read, source = speeds(profile, "d", 10_000, "S")  # halfway in log |V|: sqrt(100 x 1) = 10; b flat at 50
    assert read.to_dict() == pytest.approx({"a": 10.0, "b": 50.0})
    assert source.startswith("interpolated in log |V| between p's and q's rows (|V| 1,000 and 100,000")
    read, _ = speeds(profile, "d", 1_000 * 100 ** 0.25, "S")  # a quarter of the way: 100^(3/4)
    assert read["a"] == pytest.approx(100 ** 0.75)
    read, source = speeds(profile, "d", 1e6, "S")  # beyond the sizes measured: the nearest, not extrapolated
    assert read.to_dict() == {"a": 1.0, "b": 50.0} and source.startswith("read at q's rows (|V| 100,000, the nearest")
    assert speeds(profile, "d", 10_000, "T")[0].empty  # no dataset of its shapes measured
    own, source = speeds(profile, "p", 10_000, "S")  # a dataset measured: its own rows, whatever its |V|
    assert own.to_dict() == {"a": 100.0, "b": 50.0} and source == ""
    assert speeds(profile.drop(columns=["vocab", "shape"]), "d", 10_000, "S")[0].empty  # a reader's own profile


def test_the_vocabulary_reading_is_checked_on_the_profiles_inner_sizes():
    from pipeline_src.reporting.profiles import speed_leave_one_out

    power = _sized({"p": (1e3, {"a": 1e4}), "q": (1e4, {"a": 1e3}), "r": (1e5, {"a": 1e2})})  # tokens/s ~ 1/|V|
    loo = speed_leave_one_out(power)
    assert list(loo.dataset) == ["q"] and loo.ratio.iloc[0] == pytest.approx(1.0)  # a power law reads exactly
    bent = _sized({"p": (1e3, {"a": 1e4}), "q": (1e4, {"a": 2e3}), "r": (1e5, {"a": 1e2})})
    assert speed_leave_one_out(bent).ratio.iloc[0] == pytest.approx(0.5)  # read 1,000 where 2,000 was measured
    assert speed_leave_one_out(bent.assign(shape=["S", "T", "S"])).empty  # q of other shapes: nothing inside


def test_advise_reads_an_unmeasured_dataset_from_the_profiles_sizes_and_says_so():
    anytime, summary = _ladder()  # dataset d, |V| 1000 in its summary
    profile = _sized({"p": (100, {"a": 4000.0, "b": 1000.0, "softmax": 200.0}),
                      "q": (10_000, {"a": 40.0, "b": 10.0, "softmax": 2.0})})
    table, read = advise(anytime, summary, profile, 10_000, "d", shape="S")  # halfway: 400, 100, 20 tokens/s
    by = read.groupby("method").tokens.first()
    assert by.to_dict() == pytest.approx({"a": 4e6, "b": 1e6, "softmax": 2e5})
    assert table.iloc[0].use == "a" and read.speed_from.str.startswith("interpolated in log |V| between p's").all()
    with pytest.raises(ConfigError, match="the profile has no row for d's shapes"):
        advise(anytime, summary, profile, 10_000, "d", shape="T")


def test_advise_finds_the_ladder_that_holds_the_dataset_or_names_those_there_are(capsys):
    """Without --name, `advise` reads the published token ladder that holds --dataset (WikiText-2's is not
    token-axis), and a dataset no ladder holds is one line naming the datasets the ladders hold."""
    from pipeline_src.cli import main

    assert main(["advise", "--profile", "h100", "--seconds", "60", "--dataset", "zipf-10k"]) == 0
    out = capsys.readouterr().out
    assert "its ladder in benchmarks/token-axis (" in out
    assert "other head options than the ladder trained with: " in out and "nce (negatives 100, trained at 800)" in out
    assert main(["advise", "--profile", "cpu-thread", "--seconds", "60", "--dataset", "zipf-10k"]) == 0
    assert "other head options" not in capsys.readouterr().out  # measured at the picks (bench-cells-ladder)
    assert main(["advise", "--profile", "cpu-thread", "--seconds", "60", "--dataset", "nosuch-language"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "no published token ladder holds it" in err[0] and "zipf-10k (token-axis)" in err[0]


def test_sizes_that_are_one_size_read_there_and_a_method_measured_on_one_side_only_is_not_invented():
    """The review's cases: two measured datasets of the target's |V| (a ZeroDivisionError), |V| counted with and
    without <eos> (10,000 against 10,001), and a method only one of the two bracketing datasets measured."""
    from pipeline_src.reporting.profiles import speed_leave_one_out, speeds

    profile = _sized({"p": (1_000, {"a": 100.0, "b": 50.0}), "p2": (1_000, {"a": 90.0, "b": 40.0}),
                      "q": (100_000, {"a": 1.0})})
    read, source = speeds(profile, "d", 1_000, "S")
    assert read.to_dict() == {"a": 100.0, "b": 50.0} and "(|V| 1,000, the same size" in source
    assert speeds(profile, "d", 1_001, "S")[0].to_dict() == {"a": 100.0, "b": 50.0}  # <eos> counted: one size
    read, _ = speeds(profile[profile.dataset != "p2"], "d", 10_000, "S")
    assert read.to_dict() == pytest.approx({"a": 10.0})  # b: measured below only, so not read (not extrapolated)
    assert speed_leave_one_out(profile).empty  # p and p2 share a size: neither lies between two others
    assert speed_leave_one_out(_sized({"p": (1e3, {"a": 1.0}), "p2": (1e3, {"a": 1.0}), "p3": (1e3, {"a": 1.0})})).empty


def test_a_ladder_method_without_tokens_s_is_named_beside_the_verdict_and_none_at_all_is_one_line():
    anytime, summary = _ladder()
    profile = pd.DataFrame({"dataset": "d", "method": ["a", "softmax"], "tokens_per_s": [400.0, 20.0]})
    table, read = advise(anytime, summary, profile, 10_000, "d")
    assert read[read.no_speed].method.tolist() == ["b"] and read[read.no_speed].tokens.isna().all()
    assert table.iloc[0].use == "a" and table.iloc[0].methods == 1  # b not read; the softmax below its ladder
    with pytest.raises(ConfigError, match=r"tokens/s for none of the ladder's methods at d \(it has \['x', 'y'\]"):
        advise(anytime, summary, profile.assign(method=["x", "y"]), 10_000, "d")


def test_a_cell_shape_is_the_resolved_model_and_batch_of_the_run():
    """The dataset's keys over the file's: bptt 35 inherited and written out are one shape; another optimizer or
    BPTT is another; a dataset the params lack has none."""
    import copy

    from pipeline_src.config import load
    from pipeline_src.reporting.profiles import cell_shape

    params = load("config/token-axis.yaml")
    written = copy.deepcopy(params)
    written["datasets"]["zipf-10k"]["training"]["bptt"] = params["datasets"]["zipf-10k"]["training"].get(
        "bptt", params["training"]["bptt"])
    assert cell_shape(params, "zipf-10k") == cell_shape(written, "zipf-10k")
    for key, value in (("optimizer", "sgd"), ("bptt", 70)):
        other = copy.deepcopy(params)
        other["datasets"]["zipf-10k"]["training"][key] = value
        assert cell_shape(other, "zipf-10k") != cell_shape(params, "zipf-10k")
    assert cell_shape(params, "nosuch") is None


def test_a_profile_without_wikitext_2_reads_it_between_its_zipf_rows_and_one_with_it_reads_its_own(capsys):
    """The wiring end to end: the committed profiles carry |V| and the resolved shapes of their cells, WikiText-2's
    ladder has the same shapes, and `advise --dataset wikitext-2` on h100 (which did not measure it) reads it between
    zipf-10k's and zipf-100k's rows, while cpu-thread (bench-cells-ladder measured it) reads its own row."""
    import json

    from pipeline_src.cli import main
    from pipeline_src.io.paths import REPOSITORY
    from pipeline_src.reporting.profiles import cell_shape

    rows, _ = load_profile("cpu-thread")
    cells = rows.groupby("dataset").agg(vocab=("vocab", "first"), shape=("shape", "first"))
    assert cells.loc["zipf-10k"].vocab == 10_000 and cells.loc["zipf-100k"].vocab == 100_000
    published = json.loads((REPOSITORY / "benchmarks/token-axis-wt2/provenance.json").read_text())["params"]
    assert cells.loc["zipf-10k", "shape"] == cells.loc["zipf-100k", "shape"] == cell_shape(published, "wikitext-2")
    assert main(["advise", "--profile", "h100", "--seconds", "60", "--dataset", "wikitext-2"]) == 0
    assert "interpolated in log |V| between zipf-10k's and zipf-100k's rows" in capsys.readouterr().out
    assert "wikitext-2" in set(rows.dataset)  # the cpu-thread profile measured it: its own rows, nothing read
    assert main(["advise", "--profile", "cpu-thread", "--seconds", "60", "--dataset", "wikitext-2"]) == 0
    assert "interpolated" not in capsys.readouterr().out


def test_a_profile_measured_at_other_head_options_than_the_picks_is_named():
    """The committed h100 profile measured NCE and sampled softmax at 100 negatives (params.yaml's), while the
    ladders' tuning picked 800: their tokens at equal time are the 100 negatives' and the grids must say so; the
    cpu-thread profile (benchmarks/bench-cells-ladder) was measured at the picks, and nothing is named."""
    from pipeline_src.reporting.profiles import options_differ, picked_options

    tuning = pd.DataFrame([
        {"dataset": "d", "method": "nce", "selected": True, "opt_negatives": 800.0, "opt_div_value": math.nan},
        {"dataset": "d", "method": "nce", "selected": False, "opt_negatives": 50.0, "opt_div_value": math.nan},
        {"dataset": "d", "method": "adaptive-softmax", "selected": True, "opt_negatives": math.nan,
         "opt_div_value": 3.2632872550738194},
        {"dataset": "d", "method": "softmax", "selected": True, "opt_negatives": math.nan, "opt_div_value": math.nan}])
    picks = {m: o for (d, m), o in picked_options(tuning).items()}
    assert picks == {"nce": {"negatives": 800}, "adaptive-softmax": {"div_value": 3.2632872550738194}, "softmax": {}}
    rows, _ = load_profile("h100")  # params.yaml's settings over each head's defaults
    assert options_differ(rows, picks) == ("adaptive-softmax (div_value 4, trained at 3.26); "
                                           "nce (negatives 100, trained at 800)")
    assert options_differ(load_profile("cpu-thread")[0], picks) == ""
    assert options_differ(rows, {"nce": {"negatives": 100}, "softmax": {}}) == ""
    assert options_differ(rows.drop(columns=["options"]), picks) == ""  # a reader's own profile: unknown
    near = pd.DataFrame({"method": ["adaptive-softmax"], "options": ['{"div_value": 3.26}']})
    assert options_differ(near, picks) == "adaptive-softmax (div_value 3.26, trained at 3.26328726)"  # not "3.26, 3.26"
    assert picked_options(None) == {} and picked_options(tuning.drop(columns=["selected"])) == {}


def test_profile_measures_at_the_head_options_the_published_ladder_picked(tmp_path, monkeypatch):
    """`profile` benches each method at the options the ladder holding the dataset trained with (NCE and sampled
    softmax at 800 negatives on both published ladders), and refuses in one line where two ladders disagree."""
    import shutil

    from pipeline_src.io import paths
    from pipeline_src.tools import ladder_picks

    picks = ladder_picks(["wikitext-2", "zipf-10k"], ["nce", "sampled-softmax", "adaptive-softmax", "softmax"])
    assert picks["nce"] == {"negatives": 800} and picks["sampled-softmax"] == {"negatives": 800}
    assert picks["adaptive-softmax"] == {"div_value": pytest.approx(3.2632872550738194)} and picks["softmax"] == {}
    assert ladder_picks(["nosuch-language"], ["nce"]) == {}
    for name in ("one", "two"):
        shutil.copytree(paths.REPOSITORY / "benchmarks" / "token-axis", tmp_path / "benchmarks" / name)
    tuning = pd.read_csv(tmp_path / "benchmarks" / "two" / "tuning.csv")
    tuning.loc[tuning.method == "nce", "opt_negatives"] = 50.0
    tuning.assign(dataset="other").to_csv(tmp_path / "benchmarks" / "two" / "tuning.csv", index=False)
    advice = pd.read_csv(tmp_path / "benchmarks" / "two" / "ladder-advice.csv")
    advice.assign(dataset="other").to_csv(tmp_path / "benchmarks" / "two" / "ladder-advice.csv", index=False)
    monkeypatch.setattr(paths, "REPOSITORY", tmp_path)
    from pipeline_src.io.errors import ArtifactError

    with pytest.raises(ArtifactError, match="two/tuning.csv: not the file that was published"):
        ladder_picks(["zipf-10k", "other"], ["nce"])  # an edited table is refused
    import json

    prov = json.loads((tmp_path / "benchmarks" / "two" / "provenance.json").read_text())
    del prov["runs"]["tables"]["tuning.csv"]  # as a publication of other picks would record them: no stale digest
    (tmp_path / "benchmarks" / "two" / "provenance.json").write_text(json.dumps(prov))
    with pytest.raises(ConfigError, match=r"profile: the ladders picked nce with .* \(other, benchmarks/two\)"):
        ladder_picks(["zipf-10k", "other"], ["nce"])


def test_the_profile_command_benches_at_the_picks_only_where_a_ladder_holds_every_dataset(monkeypatch, capsys):
    """`profile --config config/token-axis-wt2.yaml` benches NCE at WikiText-2's pick (800 negatives); a config
    with a dataset no ladder holds is benched at the params' options, and says why."""
    import copy
    import types

    from pipeline_src.config import load
    from pipeline_src.cost import cells
    from pipeline_src.tools import _profile

    seen = []

    def bench(p, device):
        seen.append(copy.deepcopy(p))
        return pd.DataFrame({"dataset": ["x"], "method": ["nce"], "tokens_per_s": [1.0]})

    monkeypatch.setattr(cells, "run_cell_bench", bench)
    params = load("config/token-axis-wt2.yaml")
    _profile(params, types.SimpleNamespace(threads=1))
    assert seen[-1]["methods"]["nce"]["negatives"] == 800 and seen[-1]["methods"]["adaptive-softmax"]["div_value"] \
        == pytest.approx(3.2632872550738194)
    assert "at the picks of token-axis-wt2: " in capsys.readouterr().out
    assert seen[-1]["bench"]["cells"]["threads"] == 1  # as a training job runs
    _profile(params, types.SimpleNamespace(threads=None))
    assert seen[-1]["bench"]["cells"]["threads"] == 1
    _profile(params, types.SimpleNamespace(threads=3))  # the fifth probe: --threads was ignored
    assert seen[-1]["bench"]["cells"]["threads"] == 3
    mixed = copy.deepcopy(params)
    mixed["run"]["datasets"] = ["wikitext-2", "zipf-unheld"]  # a dataset no publication holds, whatever is published
    mixed["datasets"]["zipf-unheld"] = load("config/token-axis-100k.yaml")["datasets"]["zipf-100k"]
    _profile(mixed, types.SimpleNamespace(threads=1))
    assert seen[-1]["methods"]["nce"]["negatives"] == params["methods"]["nce"]["negatives"] == 100
    assert "no published ladder holds zipf-unheld, so the picks of the ladders holding wikitext-2 are not applied" \
        in capsys.readouterr().out


def test_a_rate_check_holds_no_picks_and_stands_behind_the_ladder_it_checks(monkeypatch, tmp_path):
    """A rate check or retune is a ladder publication without a tuning.csv: its dataset's picks are the tuned
    ladder's, and where only such a check holds a dataset (zipf-100k on 2026-12-04, before its ladder was
    published) no picks are applied for it."""
    from pipeline_src import tools

    def pub(name, tuned):
        (tmp_path / name).mkdir()
        (tmp_path / name / "ladder-advice.csv").write_text("dataset\nzipf-100k\n")
        if tuned:
            (tmp_path / name / "tuning.csv").write_text("x\n")
        return tmp_path / name / "ladder-advice.csv"

    files = [pub("token-axis-100k-rates", False)]
    monkeypatch.setattr(tools, "_ladder_advice_files", lambda: sorted(files))
    assert tools._ladders_held() == {"zipf-100k": "token-axis-100k-rates"}
    assert tools._ladders_held(tuned=True) == {}
    files.append(pub("token-axis-100k-zz", True))  # a tuned ladder after it by name still comes first
    assert tools._ladders_held() == tools._ladders_held(tuned=True) == {"zipf-100k": "token-axis-100k-zz"}


def test_the_options_a_ladder_trained_with_are_its_params_under_its_picks_and_a_frozen_ladder_is_compared_too():
    """The options flag compares what the runs trained with, whole (the params' settings over the head's defaults,
    the tuning's pick over those), so a ladder trained from frozen settings, with no tuning.csv to read, is compared
    on its params: token-axis's params without its picks are params.yaml's 100 negatives, which the cpu-thread
    profile (measured at the picks, 800) names; with its picks nothing differs."""
    import json

    from pipeline_src.io.paths import REPOSITORY
    from pipeline_src.reporting.profiles import ladder_runs, options_differ, trained_options

    pub = REPOSITORY / "benchmarks" / "token-axis"
    params = json.loads((pub / "provenance.json").read_text())["params"]
    tuning = pd.read_csv(pub / "tuning.csv")
    rows, _ = load_profile("cpu-thread")
    pairs = ladder_runs(pd.read_csv(pub / "summary.csv"), "zipf-10k")
    picked = trained_options(params, tuning, pairs)
    assert picked[("zipf-10k", "nce")]["negatives"] == 800 and picked[("zipf-10k", "nce")]["sampler"] == "unigram"
    assert options_differ(rows, {m: o for (d, m), o in picked.items()}) == ""
    frozen = {m: o for (d, m), o in trained_options(params, None, pairs).items()}
    assert frozen["nce"]["negatives"] == 100
    assert options_differ(rows, frozen) == ("adaptive-softmax (div_value 3.26, trained at 4); nce (negatives 800, "
                                            "trained at 100); sampled-softmax (negatives 800, trained at 100)")


def test_a_list_valued_pick_is_a_list_in_memory_and_read_back_from_tuning_csv(tmp_path):
    """Adaptive softmax's cutoffs are a list: the in-memory tuning frame holds it as one (pd.isna on it raised), the
    committed tuning.csv as its text; both are the list the run trained with, and a profile measured at the same list
    is not named. NaN on both sides is no difference."""
    from pipeline_src.reporting.profiles import options_differ, picked_options

    tuning = pd.DataFrame({"dataset": ["d", "d"], "method": ["adaptive-softmax", "nce"], "selected": [True, True],
                           "opt_cutoffs": [[2000, 5000], math.nan], "opt_negatives": [math.nan, 800.0]})
    tuning.to_csv(tmp_path / "tuning.csv", index=False)
    for frame in (tuning, pd.read_csv(tmp_path / "tuning.csv")):
        picks = {m: o for (d, m), o in picked_options(frame).items()}
        assert picks == {"adaptive-softmax": {"cutoffs": [2000, 5000]}, "nce": {"negatives": 800}}
    rows = pd.DataFrame({"method": ["adaptive-softmax", "nce"],
                         "options": ['{"cutoffs": [2000, 5000], "x": NaN}', '{"negatives": 800}']})
    assert options_differ(rows, {**picks, "adaptive-softmax": {"cutoffs": [2000, 5000], "x": math.nan}}) == ""
    assert options_differ(rows, {"adaptive-softmax": {"cutoffs": [2000, 6000]}}) == \
        "adaptive-softmax (cutoffs [2000, 5000], trained at [2000, 6000])"


def test_a_profile_reads_a_real_corpus_size_from_the_bench_s_own_vocab_column(tmp_path):
    """A real corpus's params give no vocab_size, so a bench written since bench-cells-ladder records each dataset's
    model |V| beside its rows, and the |V| reading can use it (the committed profiles predate the column: NaN)."""
    path = tmp_path / "cell-bench.csv"
    pd.DataFrame({"dataset": ["wikitext-2", "zipf-10k"], "method": "nce", "tokens_per_s": [1.0, 2.0],
                  "vocab": [33279, 10001]}).to_csv(path, index=False)
    rows, _ = load_profile(str(path))
    assert list(rows.vocab) == [33279.0, 10001.0]
    assert load_profile("cpu-thread")[0].query("dataset == 'wikitext-2'").vocab.isna().all()


def test_a_profile_speed_that_is_no_measurement_or_measured_twice_is_refused_at_its_line(tmp_path):
    """The fifth probe: a tokens/s of 0, -100, inf, NaN or blank made a method 'outside the measured range' and
    changed the bold verdict with exit 0; a text value, a duplicated row or a JSON list beside the table were
    tracebacks; a user's own table was told to rerun snakemake."""
    from pipeline_src.io.errors import ArtifactError

    path = tmp_path / "cell-bench.csv"
    for bad in ("0", "-100", "inf", "nan", "", "fast"):
        path.write_text(f"dataset,method,tokens_per_s\nd,a,400\nd,b,{bad}\n")
        shown = "blank or NaN" if bad in ("", "nan") else f"'{bad}'"  # (the sixth probe: a blank was shown as 'nan')
        with pytest.raises(ConfigError, match=rf"cell-bench.csv, data row 2 \(d/b\): its tokens_per_s {shown} is "
                                              r"not a finite number above 0"):
            load_profile(str(path))
    # the sixth probe: 'softmax ' was read as a method of its own, so the softmax had no tokens/s without a word;
    # a header alone read as a profile with no row for the dataset's shapes; an empty --profile as the current folder
    path.write_text("dataset,method,tokens_per_s\nd,a,400\nd,softmax ,100\n")
    with pytest.raises(ConfigError, match=r"data row 2 \(d/softmax \): its method 'softmax ' has spaces around it"):
        load_profile(str(path))
    path.write_text("dataset,method,tokens_per_s\n")
    with pytest.raises(ConfigError, match=r"cell-bench.csv: a header and no data rows"):
        load_profile(str(path))
    with pytest.raises(ConfigError, match=r"^--profile is empty: name one of \["):
        load_profile(" ")
    path.write_text("dataset,method,tokens_per_s\nd,a,400\nd,b,100\nd,a,300\n")
    with pytest.raises(ConfigError, match=r"data row 3 \(d/a\): a second row for it"):
        load_profile(str(path))
    path.write_text("dataset,method,tokens_per_s,vocab\nd,a,400,1001\ne,a,300,\nf,a,200,many\n")
    with pytest.raises(ConfigError, match=r"data row 3 \(f/a\): its vocab 'many' is not a vocabulary size"):
        load_profile(str(path))  # (a blank |V| is the bench's not knowing it: e's row is read)
    path.write_text("dataset,method,tokens_per_s\nd,a,400\n")
    (tmp_path / "cell-bench.json").write_text("[1, 2]")
    with pytest.raises(ArtifactError, match=r"cell-bench.json: expected a JSON object, found list; --profile takes "
                                          r"a profile's cell-bench.csv .* `python -m pipeline_src profile` writes"):
        load_profile(str(path))
    (tmp_path / "cell-bench.json").write_text('{"device": "cpu", "threads": 2}')
    rows, machine = load_profile(str(tmp_path))  # the folder `profile` wrote into reads its table
    assert rows.tokens_per_s.tolist() == [400.0] and "2 threads" in machine
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="a folder holding no cell-bench.csv"):
        load_profile(str(tmp_path / "empty"))
    path.write_text("")
    with pytest.raises(ArtifactError, match=r"empty file, no header; --profile takes a profile's cell-bench.csv"):
        load_profile(str(path))
    # the sixth probe: a Latin-1 byte was located at pandas' byte position in its chunk, not at a line
    path.write_bytes(b"dataset,method,tokens_per_s\nd,a,400\nd,s\xe9mpled,100\n")
    with pytest.raises(ArtifactError, match=r"cell-bench.csv: not UTF-8 text \(byte 0xe9 at line 3\); --profile"):
        load_profile(str(path))
    path.write_text("dataset,method,tokens_per_s\nd,a,400\n")
    (tmp_path / "cell-bench.json").write_bytes(b'{"device":\n "cpu\xff"}')
    with pytest.raises(ArtifactError, match=r"cell-bench.json: not UTF-8 text \(byte 0xff at line 2\)"):
        load_profile(str(path))


def test_an_edited_committed_profile_is_refused_as_an_edited_ladder_is(tmp_path, monkeypatch):
    """The fifth probe: a number changed in the committed cpu-thread table was read, and labelled with the commit
    that measured it."""
    import shutil

    from pipeline_src.io.errors import ArtifactError
    from pipeline_src.io.paths import REPOSITORY
    from pipeline_src.reporting import profiles

    copy, committed = tmp_path / "bench-cells-ladder", REPOSITORY / profiles.PROFILES["cpu-thread"]
    shutil.copytree(committed, copy)
    monkeypatch.setattr(profiles, "PROFILES", {**profiles.PROFILES, "cpu-thread": str(copy)})
    assert load_profile("cpu-thread")[0].tokens_per_s.gt(0).all()  # as published: read
    table = pd.read_csv(copy / "cell-bench.csv")
    table.loc[0, "tokens_per_s"] *= 2
    table.to_csv(copy / "cell-bench.csv", index=False)
    with pytest.raises(ArtifactError, match=r"cell-bench.csv: not the file that was published"):
        load_profile("cpu-thread")
    for by_path in (copy / "cell-bench.csv", copy):  # named by its path, not its name: refused alike
        with pytest.raises(ArtifactError, match=r"cell-bench.csv: not the file that was published"):
            load_profile(str(by_path))
    # the sixth probe: a copy outside any checkout was told to `git checkout` it, and a broken provenance.json to be
    # deleted and made again by a step (which would drop its seal)
    with pytest.raises(ArtifactError, match=r"restore it from the publication it was copied from \(git does not "
                                            r"track this copy\), or make it again$"):
        load_profile(str(copy))
    (copy / "provenance.json").write_text("[1")
    with pytest.raises(ArtifactError, match=r"provenance.json: not valid JSON .*; restore it from the publication it "
                                            r"was copied from"):
        load_profile(str(copy))
    # (the review of those mends) inside a checkout that does not track it git cannot restore it either; once git
    # tracks it, the line names it as that checkout knows it
    import subprocess

    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    shutil.copytree(committed, repo / "prof")
    table.to_csv(repo / "prof" / "cell-bench.csv", index=False)  # the doubled speed again
    with pytest.raises(ArtifactError, match=r"not the file that was published .*git does not track this copy"):
        load_profile(str(repo / "prof"))
    subprocess.run(["git", "add", "prof"], cwd=repo, check=True)
    with pytest.raises(ArtifactError, match=rf"restore it \(`git -C {re.escape(str(repo.resolve()))} checkout -- prof`\)"):
        load_profile(str(repo / "prof"))


def test_a_reference_that_ran_but_is_not_read_at_these_seconds_says_why_not_not_run():
    """The fifth probe: the softmax, below its lowest rung at 30 s, was shown as 'softmax — (not run)'."""
    anytime, summary = _ladder()
    profile = pd.DataFrame({"dataset": "d", "method": ["a", "b", "softmax"], "tokens_per_s": [400.0, 100.0, 20.0]})
    table, _ = advise(anytime, summary, profile, 10_000, "d")  # the softmax reads 200k tokens: below 1M
    assert table.iloc[0].reference_status == ("outside the measured range: 200,000 tokens, below its lowest rung, "
                                              "1,000,000")
    table, _ = advise(anytime, summary, profile.assign(tokens_per_s=[400.0, 100.0, 2000.0]), 10_000, "d")
    assert table.iloc[0].reference_status == ("outside the measured range: 20,000,000 tokens, beyond its top rung, "
                                              "8,000,000")
    table, _ = advise(anytime, summary, profile.assign(tokens_per_s=[400.0, 100.0, 2e299]), 10_000, "d")
    assert table.iloc[0].reference_status == ("outside the measured range: 2e+303 tokens, beyond its top rung, "
                                              "8,000,000")  # the sixth probe: 304 digits before
    table, _ = advise(anytime, summary, profile.iloc[:2], 10_000, "d")
    assert table.iloc[0].reference_status == "no tokens/s on this profile"
    table, _ = advise(anytime, summary, profile.assign(tokens_per_s=[400.0, 100.0, 400.0]), 10_000, "d")
    assert table.iloc[0].reference_status == "learned"  # read inside its ladder (4M)


def test_advise_says_below_or_beyond_which_rung_and_what_its_verdict_left_out(capsys):
    from pipeline_src.cli import main

    assert main(["advise", "--profile", "cpu-thread", "--seconds", "30", "--dataset", "zipf-10k"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"softmax: outside the measured range: [\d,]+ tokens, below its lowest rung, 501,760", out)
    assert re.search(r"\(chosen among the 5 of 6 methods read inside their ladders; not read at 30 s: softmax\)", out)
    for seconds, said in (("0", "a duration above 0 is needed"), ("-0", "a duration above 0 is needed"),
                          ("nan", "is not a finite number of seconds")):
        with pytest.raises(SystemExit):
            main(["advise", "--profile", "cpu-thread", "--seconds", seconds, "--dataset", "zipf-10k"])
        assert f"argument --seconds: '{seconds}'" in (err := capsys.readouterr().err) and said in err


def test_the_profile_s_outputs_are_checked_before_anything_is_measured(tmp_path, monkeypatch):
    """The fifth probe: a folder where cell-bench.json goes was found after minutes of measuring, with the new table
    already beside the old machine record."""
    import torch

    from pipeline_src.config import load
    from pipeline_src.cost import cells

    p = load("config/token-axis.yaml")
    p["results_dir"] = str(tmp_path / "r")
    p["bench"]["cells"] = {"datasets": ["zipf-10k"], "methods": ["nce"]}
    (tmp_path / "r" / "cell-bench.json").mkdir(parents=True)
    monkeypatch.setattr(cells, "memory_bandwidth", lambda *a: pytest.fail("measured before its outputs were checked"))
    with pytest.raises(ConfigError, match=r"cell-bench.json: cannot be written \(a folder\)"):
        cells.run_cell_bench(p, torch.device("cpu"))
    assert not (tmp_path / "r" / "cell-bench.csv").exists()
