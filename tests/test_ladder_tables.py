"""A token ladder's tables (reporting/ladder_tables.py): equal data in tokens with the epochs a rung is, equal time
on each hardware profile at the budgets it names, and the interpolation's check, against hand computations on the
made-up ladder of test_profiles.py (nll falling linearly in log tokens)."""
import math

import pandas as pd
import pytest
from test_profiles import RUNGS, _ladder

from pipeline_src.reporting import ladder_tables
from pipeline_src.reporting.budget_axis import point_runs, ranking
from pipeline_src.reporting.advice import what_to_use_by_budget
from pipeline_src.reporting.ladder_tables import (equal_data_markdown, equal_time, equal_time_markdown, time_cell,
                                                  leave_one_out_markdown, seconds_read)

SPEED = {"a": 400.0, "b": 100.0, "softmax": 20.0}


@pytest.fixture
def profile_file(tmp_path, monkeypatch):
    """One profile, a cell-bench.csv of the reader's own, standing in for the committed ones."""
    path = tmp_path / "cell-bench.csv"
    pd.DataFrame({"dataset": "d", "method": list(SPEED), "tokens_per_s": list(SPEED.values())}).to_csv(path,
                                                                                                      index=False)
    monkeypatch.setattr(ladder_tables, "PROFILES", {str(path): None})
    return str(path)


def _params():
    return {"run": {"datasets": ["d"]}, "statistics": {"confidence": 0.95},
            "datasets": {"d": {"training": {"ladder": [int(r) for r in RUNGS]}}}}


def test_the_budgets_read_are_a_minute_and_the_top_rung_for_the_fastest_and_the_slowest():
    got = seconds_read(pd.Series(SPEED), 8e6, 1e6)
    assert [s for s, _ in got] == [60.0, 8e6 / 400, 8e6 / 20]
    # a is 20x the softmax, the ladder 8x: when a reaches 8M the softmax is at 0.4M, below the ladder (WikiText-2
    # on one CPU thread at params.yaml's 100 negatives: NCE 43x the softmax, a 32x ladder); 10x or less, every method
    # inside
    assert got[1][1] == "the top rung for the fastest (a): the slowest (softmax) below the ladder"
    assert "slowest (softmax)" in got[2][1]
    assert seconds_read(pd.Series({"a": 200.0, "softmax": 25.0}), 8e6, 1e6)[1][1].endswith("(a): every method inside")


def test_a_method_capped_below_the_top_reaches_its_own_top_in_the_budgets_read():
    # zipf-100k: the softmax stops at 4M of a 16M ladder (training.ladder_top_by_method), so the seconds its top buys
    # it are its own top over its tokens/s, not the ladder's: 4e6 / 25 = 160,000 s, not 320,000
    speed = pd.Series({"a": 400.0, "b": 100.0, "softmax": 25.0})
    got = seconds_read(speed, 8e6, 1e6, {"softmax": 4e6})
    assert [s for s, _ in got] == [60.0, 8e6 / 400, 4e6 / 25]
    # named for when they reach their tops, not for their tokens/s
    assert got[1][1] == "the first top reached (a): the one of fewest tokens/s (softmax) below the ladder"
    assert got[2][1] == "the last top reached (softmax), its own 4M"
    # a cap that the capped method still reaches after the fastest reaches the top leaves the first budget as it was
    assert seconds_read(speed, 8e6, 1e6, {"softmax": 1.6e6})[1][0] == 8e6 / 400  # 64,000 s against a's 20,000
    capped = seconds_read(pd.Series({"a": 400.0, "softmax": 200.0}), 8e6, 1e6, {"softmax": 2e6})
    assert capped[1] == (2e6 / 200, "the first top reached (softmax), its own 2M: every method inside")
    assert capped[2] == (8e6 / 400, "the last top reached (a)")
    # zipf-100k on the h100 profile: the capped softmax (not the method of most tokens/s) reaches its top first, and
    # the method of fewest tokens/s is then below the ladder
    h100 = seconds_read(pd.Series({"a": 445.0, "softmax": 210.0, "h": 15.0}), 16e6, 0.5e6, {"softmax": 4e6})
    assert h100[1] == (4e6 / 210, "the first top reached (softmax), its own 4M: the one of fewest tokens/s (h) "
                                  "below the ladder")
    # every top reached at once: one budget, not the same seconds twice under two names
    assert seconds_read(pd.Series({"a": 400.0, "softmax": 100.0}), 8e6, 1e6, {"softmax": 2e6}) == [
        (60.0, "a minute"), (2e4, "the first top reached (a): every method inside")]
    assert seconds_read(pd.Series({"a": 400.0, "softmax": 100.0}), 8e6, 1e6, {"softmax": 9e6})[2][1] == (
        "the top rung for the slowest (softmax)")  # a cap at or above the top is no cap


def test_equal_time_reads_each_method_at_its_own_tokens_and_names_those_outside(profile_file):
    anytime, summary = _ladder()
    table = equal_time(anytime, summary, {"d": RUNGS, "e": RUNGS}, 0.95)
    at = table[table.dataset == "d"].set_index("seconds")
    # 20,000 s: a at 8M (5.0 - 3 x 0.3 = 4.1, + 0.02 the seeds' mean), b at 2M (4.8), the softmax at 400k: outside
    r = at.loc[8e6 / 400]
    assert (r.use, r.runner_up, r.outside) == ("a", "b", "softmax")
    assert r.ppl == pytest.approx(math.exp(4.1 + 0.02)) and r.margin_nll == pytest.approx(4.1 - 4.8)
    assert r.tokens_read == "softmax 0.4M; b 2M; a 8M"
    # 400,000 s: the top for the softmax (8M, 5.4); a and b beyond their ladders: one method inside, no runner-up
    r = at.loc[8e6 / 20]
    assert r.use == "softmax" and pd.isna(r.runner_up) and r.outside == "a, b"
    # a dataset the profile has no row for says so, once
    e = table[table.dataset == "e"]
    assert len(e) == 1 and "has no row for e's shapes" in e.when.iloc[0]
    text = equal_time_markdown(table)
    assert "softmax alone inside the measured range (outside it: a, b): no verdict" in text
    assert "no profile row for its shapes" in text


def test_equal_data_is_the_rungs_in_tokens_with_the_epochs_a_rung_repeats(profile_file):
    anytime, summary = _ladder()
    runs = point_runs(anytime, summary)
    advice = what_to_use_by_budget(runs, ranking(runs, "softmax"), None, 0.95)
    out = ladder_tables.ladder_tables(anytime, summary, advice, _params(), {"d": 2_000_000})
    lad = out["ladder-advice.csv"]
    assert list(lad.tokens) == RUNGS and list(lad.epochs) == [0.5, 1.0, 2.0, 4.0]
    # a leads at 1M and 2M, ties b at 4M (4.4: the name breaks the tie), and b, falling faster, leads at 8M (4.0)
    assert list(lad.use) == ["a", "a", "a", "b"]
    text = equal_data_markdown(lad)
    assert text.splitlines()[0] == "| dataset, seeds | 1M tokens | 2M tokens | 4M tokens | 8M tokens |"
    assert "(4.0 epochs)" in text and "(0.5 epochs)" not in text  # only a rung that repeats the split says so
    assert len(out["ladder-loo.csv"]) == 3 * 3 * 2  # two inner rungs per seed
    assert ladder_tables.ladder_tables(anytime, summary, advice, {**_params(), "datasets": {"d": {}}}, {}) == {}


def test_a_method_capped_below_a_rung_is_left_out_of_it_and_named(profile_file):
    """``ladder_top_by_method``: the softmax trained to 2M only; at 4M and 8M the verdict is a's and b's, and the
    grid says the softmax stops at 2M instead of leaving it silently out."""
    anytime, summary = _ladder()
    anytime = anytime[~((anytime.method == "softmax") & (anytime.tokens > 2e6))]
    runs = point_runs(anytime, summary)
    advice = what_to_use_by_budget(runs, ranking(runs, "softmax"), None, 0.95)
    params = _params()
    params["datasets"]["d"]["training"]["ladder_top_by_method"] = {"softmax": 2_000_000}
    out = ladder_tables.ladder_tables(anytime, summary, advice, params, {"d": 2_000_000})
    lad = out["ladder-advice.csv"]
    assert list(lad.methods) == [3, 3, 2, 2] and list(lad.use) == ["a", "a", "a", "b"]
    # the slowest's top is its own: 2M over its 20 tokens/s, not the ladder's 8M
    assert list(out["equal-time.csv"].seconds) == [60.0, 8e6 / 400, 2e6 / 20]
    # the cap set in the top-level training block, as the runs read it (their dataset's block over it), counts too
    params["datasets"]["d"]["training"].pop("ladder_top_by_method")
    params["training"] = {"ladder_top_by_method": {"softmax": 2_000_000}}
    top = ladder_tables.ladder_tables(anytime, summary, advice, params, {"d": 2_000_000})
    assert list(top["ladder-advice.csv"].not_trained) == list(lad.not_trained)
    assert list(top["equal-time.csv"].seconds) == [60.0, 8e6 / 400, 2e6 / 20]
    assert list(lad.not_trained) == ["", "", "softmax stops at 2M", "softmax stops at 2M"]
    cells = equal_data_markdown(lad).splitlines()[2].rstrip(" |").split(" | ")
    assert cells[2].endswith("Holm p 0 vs b") and cells[4].endswith("(4.0 epochs); softmax stops at 2M")


def test_the_interpolation_check_reports_median_worst_and_signed_mean_error():
    loo = pd.DataFrame({"dataset": "d", "method": "a", "seed": [1, 2, 3], "tokens": 2e6,
                        "measured": 4.0, "read": [4.01, 3.97, 4.02], "error": [0.01, -0.03, 0.02]})
    row = leave_one_out_markdown(loo).splitlines()[2]
    assert row == (f"| d | a | 3 | 0.0200 ({math.expm1(0.02):.1%} in ppl) | 0.0300 ({math.expm1(0.03):.1%}) "
                   f"| +0.0000 |")


def test_cosine_runs_are_paired_with_the_ladder_rung_of_their_own_tokens_and_type():
    from pipeline_src.reporting.ladder_tables import against_cosine, against_cosine_markdown

    anytime, _ = _ladder()  # method a's rungs: 5.0, 4.7, 4.4, 4.1 (+ 0.01 x seed)
    # the cosine runs of type a to 2M and 8M (a point kept past a rung by a step still pairs with it)
    anytime.loc[(anytime.method == "a") & (anytime.tokens == 2e6), "tokens"] = 2e6 + 640
    cosine = pd.DataFrame([{"dataset": "d", "method": f"a-cos-{r}", "type": "a", "seed": seed, "split": "test",
                            "nll": nll + 0.01 * seed + extra}
                           for r, nll in (("2m", 4.7), ("8m", 4.1)) for seed, extra in ((1, -0.02), (2, -0.01),
                                                                                       (3, -0.03))])
    t = against_cosine(anytime, cosine, {"a-cos-2m": 2_000_000, "a-cos-8m": 8_000_000})
    assert list(t.tokens) == [2e6, 8e6] and list(t.method) == ["a", "a"] and list(t.seeds) == [3, 3]
    assert t.delta_nll.tolist() == pytest.approx([-0.02, -0.02])  # cosine - ladder, paired over seeds
    assert t.ladder_ppl.iloc[0] == pytest.approx(math.exp(4.7 + 0.02))
    # the t interval of the three differences -0.02, -0.01, -0.03 (sd 0.01): -0.02 +- t(0.975, 2) x 0.01 / sqrt 3
    half = 4.302652729911275 * 0.01 / math.sqrt(3)
    assert t.delta_low.iloc[0] == pytest.approx(-0.02 - half) and t.delta_high.iloc[0] == pytest.approx(-0.02 + half)
    assert "| d, a | 2M | 3 |" in against_cosine_markdown(t)
    # a ladder of another run (the probe published a tiny ladder over token-axis: a KeyError in the docs' block,
    # README rewritten, docs/ not): pairs only within a dataset and over shared seeds, or says none pairs
    other = anytime.assign(dataset="e")
    assert against_cosine(other, cosine, {"a-cos-2m": 2_000_000, "a-cos-8m": 8_000_000}).empty
    assert "No cosine run pairs with this ladder" in against_cosine_markdown(against_cosine(other, cosine, {}))
    two = against_cosine(anytime[anytime.seed != 3], cosine, {"a-cos-2m": 2_000_000, "a-cos-8m": 8_000_000})
    assert list(two.seeds) == [2, 2] and two.delta_nll.iloc[0] == pytest.approx(-0.015)


def test_the_rate_check_sets_the_pick_beside_its_two_neighbouring_rates_at_each_rung_it_trained():
    from pipeline_src.reporting.ladder_tables import rate_check, rate_check_markdown

    anytime, summary = _ladder()  # a, seed 1: valid nll 5.02 at 1M, 4.12 at 8M (test 0.01 below)
    summary = summary.assign(lr=0.01)
    rows = [{"dataset": "d", "method": f"a-{side}-rate", "seed": 1, "multiple": t / 8e6, "tokens": t,
             "valid_ppl": math.exp(v), "test_nll": v - 0.01}
            for side, vals in (("lower", (5.10, 4.00)), ("higher", (4.90, 4.30))) for t, v in zip((1e6, 8e6), vals)]
    rates_summary = pd.DataFrame([{"dataset": "d", "method": f"a-{s}-rate", "seed": 1, "split": "valid",
                                   "lr": lr} for s, lr in (("lower", 0.004), ("higher", 0.03))])
    t = rate_check(anytime, summary, pd.DataFrame(rows), rates_summary)
    assert list(t.tokens) == [1e6, 8e6] and list(t.method) == ["a", "a"]
    assert t.pick_valid_ppl.tolist() == pytest.approx([math.exp(5.02), math.exp(4.12)])
    assert t.lower_test_ppl.tolist() == pytest.approx([math.exp(5.09), math.exp(3.99)])
    assert list(t.best_on_valid) == ["higher", "lower"]  # the best rate moves down the ladder: said, not hidden
    assert (t.lower_lr == 0.004).all() and (t.pick_lr == 0.01).all() and (t.higher_lr == 0.03).all()
    lines = rate_check_markdown(t).splitlines()
    assert lines[2] == (f"| d, a | 1M | {math.exp(5.10):,.1f} (lr 0.004) | {math.exp(5.02):,.1f} (lr 0.01) | "
                        f"**{math.exp(4.90):,.1f} (lr 0.03)** |")

    # a check that ran one side only (zipf-100k's softmax: its higher neighbour) sets a dash on the other
    higher = [r for r in rows if r["method"] == "a-higher-rate"]
    one = rate_check(anytime, summary, pd.DataFrame(higher), rates_summary[rates_summary.method == "a-higher-rate"])
    assert list(one.best_on_valid) == ["higher", "pick"]
    assert rate_check_markdown(one).splitlines()[3] == (f"| d, a | 8M | — | **{math.exp(4.12):,.1f} (lr 0.01)** | "
                                                       f"{math.exp(4.30):,.1f} (lr 0.03) |")
    # and where the pick's rung is missing too, one rate alone is no comparison: no best
    alone = rate_check(anytime[anytime.method != "a"], summary, pd.DataFrame(higher),
                       rates_summary[rates_summary.method == "a-higher-rate"])
    assert alone.best_on_valid.isna().all() and "**" not in rate_check_markdown(alone)


def test_a_rate_sweep_sets_every_rate_tried_side_by_side_at_the_rungs_all_reached():
    """Where the best rate moved (the rate check), a retune's half-steps join the ladder's pick and the check's
    neighbours: one row per (method, rung) that every rate reached, one column per rate, the best in bold; methods
    the retune did not touch stay out."""
    from pipeline_src.reporting.ladder_tables import rate_sweep, rate_sweep_markdown

    def pub(runs):  # runs: {method: (lr, {tokens: valid nll})}, seed 1
        anytime = pd.DataFrame([{"dataset": "d", "method": m, "seed": 1, "multiple": t / 16e6, "tokens": t,
                                 "valid_ppl": math.exp(v), "test_nll": v + 0.01}
                                for m, (_, pts) in runs.items() for t, v in pts.items()])
        summary = pd.DataFrame([{"method": m, "seed": 1, "lr": lr} for m, (lr, _) in runs.items()])
        return anytime, summary

    ladder = pub({"h": (0.019, {5e5: 6.0, 8e6: 5.8, 16e6: 5.7}), "x": (0.01, {5e5: 6.5, 8e6: 6.1, 16e6: 6.0})})
    check = pub({"h-lower-rate": (0.0083, {5e5: 6.1, 8e6: 5.7}), "h-higher-rate": (0.0436, {5e5: 6.05, 8e6: 5.9}),
                 "x-lower-rate": (0.004, {5e5: 6.6, 8e6: 6.2})})
    retune = pub({"h-rate-0.0126": (0.0126, {5e5: 6.02, 8e6: 5.65}), "h-rate-0.0055": (0.0055, {5e5: 6.2, 8e6: 5.75})})
    table = rate_sweep(*ladder, [check, retune])
    assert set(table.method) == {"h"} and sorted(table.tokens.unique()) == [5e5, 8e6]
    assert list(table[table.tokens == 8e6].lr) == [0.0055, 0.0083, 0.0126, 0.019, 0.0436]
    rows = rate_sweep_markdown(table).splitlines()
    assert rows[0] == "| dataset, method | rung | lr 0.0055 | lr 0.0083 | lr 0.0126 | lr 0.019 | lr 0.0436 |"
    assert rows[3] == (f"| d, h | 8M | {math.exp(5.75):,.1f} | {math.exp(5.7):,.1f} | **{math.exp(5.65):,.1f}** | "
                       f"{math.exp(5.8):,.1f} | {math.exp(5.9):,.1f} |")
    assert f"**{math.exp(6.0):,.1f}**" in rows[2]  # at 0.5M the pick is best


def test_several_ladder_publications_share_one_grid_each_row_its_dataset(profile_file, tmp_path, monkeypatch):
    """The README's grids join the token-ladder publications (``ladders:`` / ``equal-times:`` blocks): one row per
    dataset (per profile and dataset at equal time), a partial publication labelled, one not published yet said in
    a line, and tokens/s read from other rows of a profile named under the grid."""
    import json

    from pipeline_src.io import paths
    from pipeline_src.reporting.ladder_grids import equal_times_markdown, ladders_markdown

    anytime, summary = _ladder()
    runs = point_runs(anytime, summary)
    advice = what_to_use_by_budget(runs, ranking(runs, "softmax"), None, 0.95)
    out = ladder_tables.ladder_tables(anytime, summary, advice, _params(), {"d": 2_000_000})
    for name, ds, prov in (("one", "d", {"runs": {}}), ("two", "e", {"runs": {"partial": True, "runs": 8, "of": 9}})):
        pub = tmp_path / "benchmarks" / name
        pub.mkdir(parents=True)
        out["ladder-advice.csv"].assign(dataset=ds).to_csv(pub / "ladder-advice.csv", index=False)
        out["equal-time.csv"].assign(dataset=ds, speed_from="interpolated in log |V| between x's and y's rows"
                                     if ds == "e" else "").to_csv(pub / "equal-time.csv", index=False)
        (pub / paths.PROVENANCE).write_text(json.dumps(prov))
    monkeypatch.setattr(paths, "REPOSITORY", tmp_path)
    grid = ladders_markdown(["one", "two", "three"]).splitlines()
    assert [line.split(" | ")[0] for line in grid[2:4]] == ["| d, 3 seeds", "| e (partial: 8 of 9 runs), 3 seeds"]
    assert grid[2].split(" | ")[1:] == equal_data_markdown(out["ladder-advice.csv"]).splitlines()[2].split(" | ")[1:]
    assert grid[-1] == "*Not published yet: three.*"
    times = equal_times_markdown(["one", "two"]).splitlines()
    assert times[0] == ("| machine (profile) | dataset | a minute | the first top reached | "
                        "the last top reached |")
    row = times[2].split(" | ")
    assert row[:2] == [f"| {profile_file}", "d"] and row[3].startswith("20,000 s (a's top): **a**")
    assert row[4] == "400,000 s (softmax's top): softmax alone inside the measured range (outside it: a, b): no verdict |"
    assert times[-1] == (f"*e on {profile_file}: no row of its own; each method's tokens/s interpolated in log |V| "
                         f"between x's and y's rows.*")


def test_the_ladder_tables_read_a_dataset_the_profile_lacks_from_its_rows_of_the_same_shape(monkeypatch):
    """ladder_tables -> equal_time -> advise with the dataset's resolved shape: a profile that measured only
    other sizes at d's shapes reads d between them and says so; one method it lacks is named in the cell."""
    from pipeline_src.reporting.profiles import cell_shape

    anytime, summary = _ladder()  # d: |V| 1000
    params = {**_params(), "model": {"emb_dim": 8, "hidden_dim": 8, "layers": 1, "dropout": 0.0, "tie_weights": False},
              "training": {
        "epochs": 1, "batch_size": 4, "bptt": 5, "optimizer": "adam", "lr": 0.01, "clip": 1.0, "lr_decay": 2,
        "eval_batch_size": 4}}
    shape = cell_shape(params, "d")
    sized = pd.DataFrame([{"dataset": ds, "method": m, "tokens_per_s": s * k, "vocab": v, "shape": shape}
                          for ds, v, k in (("p", 100.0, 10.0), ("q", 10_000.0, 0.1))
                          for m, s in SPEED.items() if m != "b"])
    monkeypatch.setattr(ladder_tables, "PROFILES", {"mine": None})
    monkeypatch.setattr(ladder_tables, "load_profile", lambda name: (sized, "a machine"))
    runs = point_runs(anytime, summary)
    advice = what_to_use_by_budget(runs, ranking(runs, "softmax"), None, 0.95)
    eq = ladder_tables.ladder_tables(anytime, summary, advice, params, {"d": 2_000_000})["equal-time.csv"]
    assert shape is not None and eq.speed_from.str.startswith("interpolated in log |V| between p's and q's rows").all()
    r = eq[eq.when.str.startswith("the top rung for the fastest")].iloc[0]  # halfway in log |V|: SPEED itself
    assert r.seconds == pytest.approx(8e6 / 400)  # a, the fastest, at 400 tokens/s
    assert r.tokens_read == "softmax 0.4M; a 8M" and r.no_speed == "b"
    assert time_cell(r).endswith("; no tokens/s on the profile: b")
    assert "no row of its own" in equal_time_markdown(eq)


def test_the_joined_grids_refuse_a_publication_that_is_no_ladder_and_the_speed_check_checks_its_profiles(
        monkeypatch):
    from pipeline_src.io.errors import ConfigError
    from pipeline_src.reporting import seals
    from pipeline_src.reporting.ladder_grids import ladders_markdown
    from pipeline_src.reporting.tables import render_table

    with pytest.raises(ConfigError, match="benchmarks/default is published but is no token-ladder publication"):
        ladders_markdown(["token-axis", "default"])
    checked = []
    monkeypatch.setattr(seals, "check_publication", lambda folder: checked.append(folder.name))
    render_table("speed-loo:cpu-thread,h100")
    assert checked[:2] == ["bench-cells-ladder", "bench-cells-gpu"]  # an edited profile is refused, as every table's
    assert set(checked) == {"bench-cells-ladder", "bench-cells-gpu"}  # source, before any is read (then as read)


def test_the_equal_time_rows_and_grid_name_the_options_a_profile_measured_at_other_than_the_picks(profile_file,
                                                                                                    monkeypatch):
    from pipeline_src.reporting import profiles

    anytime, summary = _ladder()
    rows = pd.DataFrame({"dataset": "d", "method": list(SPEED), "tokens_per_s": list(SPEED.values()),
                         "options": ['{"negatives": 100}', "{}", "{}"]})
    monkeypatch.setattr(ladder_tables, "load_profile", lambda name: (rows, "a machine"))
    picks = {("d", "a"): {"negatives": 800}, ("d", "b"): {}, ("e", "a"): {"negatives": 100}}
    eq = equal_time(anytime, summary, {"d": RUNGS}, 0.95, None, picks)
    assert set(eq.options_differ) == {"a (negatives 100, trained at 800)"}
    assert (f"*{profile_file}, d: tokens/s measured at other head options than the ladder trained with, so "
            f"those methods' tokens at equal time are those options': a (negatives 100, trained at 800).*"
            ) in equal_time_markdown(eq)
    assert profiles.options_differ(rows, {"a": {"negatives": 100}}) == ""


def test_the_notes_under_a_grid_name_the_profile_and_dataset_pairs_they_hold_for():
    from pipeline_src.reporting.ladder_tables import speed_notes

    note = "a (negatives 100, trained at 800)"
    table = pd.DataFrame({"profile": ["cpu", "cpu", "gpu"], "dataset": ["d", "e", "d"], "options_differ": note,
                          "speed_from": [math.nan, math.nan, math.nan]})
    assert speed_notes(table) == (f"\n*cpu at d and e; gpu at d: tokens/s measured at other head options than the "
                                  f"ladder trained with, so those methods' tokens at equal time are those "
                                  f"options': {note}.*\n")
    both = pd.DataFrame({"profile": ["cpu", "gpu"], "dataset": "d", "options_differ": note, "speed_from": "x"})
    assert speed_notes(both).startswith("\n*d on cpu and gpu: no row of its own; each method's tokens/s x.* "
                                        "*cpu and gpu, d: tokens/s measured")
    assert speed_notes(both.assign(options_differ=math.nan, speed_from=math.nan)) == ""
    apart = pd.DataFrame({"profile": ["cpu", "gpu"], "dataset": ["d", "e"], "options_differ": "", "speed_from": "x"})
    assert speed_notes(apart) == "\n*cpu at d; gpu at e: no row of its own; each method's tokens/s x.*\n"
    three = pd.DataFrame({"profile": "gpu", "dataset": ["d", "e", "f"], "options_differ": note, "speed_from": ""})
    assert speed_notes(three).startswith("\n*gpu, d, e and f: tokens/s measured")  # a list, not "d and e and f"


def test_an_equal_time_cell_tells_none_inside_from_none_learned_inside():
    # zipf-100k at the softmax's own top (4,425 s on one CPU thread): the softmax alone is inside and did not learn;
    # that is not "no method inside"
    row = dict(use=math.nan, runner_up=math.nan, margin_low=math.nan, no_speed="", outside="a, b")
    assert time_cell(pd.Series({**row, "methods": 1})) == "none learned (1 tried); outside the measured range: a, b"
    assert time_cell(pd.Series({**row, "methods": math.nan})) == "no method inside the measured range"
    assert time_cell(pd.Series({**row, "methods": 2, "outside": ""})) == "none learned (2 tried)"
    assert time_cell(pd.Series({**row, "methods": math.nan, "outside": ""})) == "no method inside the measured range"


def test_a_grid_row_of_one_seed_says_seed():
    advice = pd.DataFrame({"dataset": "d", "tokens": [1e6], "epochs": [math.nan], "use": "a", "runner_up": "b",
                           "margin_low": math.nan, "pairs": [1.0], "not_trained": ""})
    assert equal_data_markdown(advice).splitlines()[2].startswith("| d, 1 seed |")


def test_an_equal_time_cell_tells_alone_inside_from_the_only_one_inside_that_learned():
    # zipf-100k at a minute on one CPU thread: four methods inside, hierarchical softmax the only one that learned
    row = dict(use="h", runner_up=math.nan, margin_low=math.nan, no_speed="", outside="a, s")
    assert time_cell(pd.Series({**row, "methods": 4})) == ("**h** (the only one that learned); outside the measured "
                                                           "range: a, s")
    assert time_cell(pd.Series({**row, "methods": 1})) == ("h alone inside the measured range (outside it: a, s): "
                                                           "no verdict")
