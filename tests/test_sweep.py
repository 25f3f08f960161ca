"""Reading a sweep over vocabulary sizes (pipeline_src/reporting/sweep.py) on a constructed headline whose answers are
known by hand: the winner per size and whether it is clear, the size from which each method beats the
softmax for good, and the gap to the truth per band."""
import math

import pandas as pd
import pytest

from pipeline_src.reporting.sweep import by_size, crossovers, winners

# (dataset, |V|, method, ppl, [low, high], verdict against softmax)
ROWS = [
    ("z10k", 10_000, "softmax", 200.0, (190.0, 210.0), "reference"),
    ("z10k", 10_000, "nce", 230.0, (220.0, 240.0), "worse"),
    ("z10k", 10_000, "hs", 205.0, (195.0, 215.0), "better"),
    ("z100k", 100_000, "softmax", 900.0, (850.0, 950.0), "reference"),
    ("z100k", 100_000, "nce", 500.0, (480.0, 520.0), "better"),
    ("z100k", 100_000, "hs", 520.0, (500.0, 540.0), "worse"),
    ("z1m", 1_000_000, "softmax", 3000.0, (2500.0, 3500.0), "reference"),
    ("z1m", 1_000_000, "nce", 1400.0, (1300.0, 1500.0), "better"),
    ("z1m", 1_000_000, "hs", 1000.0, (950.0, 1050.0), "better"),
]


def _tables():
    head = pd.DataFrame([{"dataset": d, "method": m, "ppl": p, "ppl_low": lo, "ppl_high": hi, "verdict": v,
                          "delta_nll": math.log(p / dict(((r[0], r[2]), r[3]) for r in ROWS)[(d, "softmax")]),
                          "delta_low": None, "delta_high": None, "tokens_reached": 1000}
                         for d, _, m, p, (lo, hi), v in ROWS])
    runs = []
    for d, vocab, m, *_ in ROWS:
        for seed, rare in ((1, 2.0), (2, 4.0)):  # the band gaps differ by seed: the table holds their mean
            for split in ("valid", "test"):
                runs.append({"dataset": d, "vocab": vocab, "method": m, "seed": seed, "split": split,
                             "frequent_gap_nll": 0.1, "middle_gap_nll": 0.5,
                             "rare_gap_nll": rare if split == "test" else 99.0})
    return head, pd.DataFrame(runs)


def test_winner_per_size_and_whether_its_interval_clears_the_runner_up():
    table = by_size(*_tables())
    won = winners(table).set_index("vocab")
    assert won.winner.to_dict() == {10_000: "softmax", 100_000: "nce", 1_000_000: "hs"}
    assert won.runner_up.to_dict() == {10_000: "hs", 100_000: "hs", 1_000_000: "nce"}
    # 10k: softmax [190, 210] overlaps hs [195, 215]; 100k: nce's 520 touches hs's 500 from above; 1M: 1050 < 1300
    assert won.clear.to_dict() == {10_000: False, 100_000: False, 1_000_000: True}


def test_a_crossover_is_the_smallest_size_from_which_a_method_stays_better():
    cross = crossovers(by_size(*_tables()), "softmax").set_index("method")
    assert cross.loc["nce", "from_vocab"] == 100_000  # worse at 10k, better at 100k and 1M
    assert cross.loc["hs", "from_vocab"] == 1_000_000  # better at 10k, worse at 100k: only 1M counts
    assert cross.loc["hs", "better"] == [10_000, 1_000_000] and cross.loc["hs", "worse"] == [100_000]
    head, runs = _tables()
    head.loc[(head.method == "nce") & (head.dataset == "z1m"), "verdict"] = "no clear difference"
    cross = crossovers(by_size(head, runs), "softmax").set_index("method")
    assert math.isnan(cross.loc["nce", "from_vocab"])  # better at 100k only: not for good


def test_a_size_the_reference_did_not_run_at_is_no_size_of_a_crossover():
    head, runs = _tables()  # 1M without the softmax: its verdicts are against a stand-in, so no verdict here
    keep = ~((head.dataset == "z1m") & (head.method == "softmax"))
    head = head[keep].assign(verdict_reference=head.dataset.map({"z1m": "hs"}).fillna("softmax"))
    runs = runs[~((runs.dataset == "z1m") & (runs.method == "softmax"))]
    cross = crossovers(by_size(head, runs), "softmax").set_index("method")
    assert cross.loc["nce", "from_vocab"] == 100_000  # better from 100k, at every larger size the softmax ran at
    assert math.isnan(cross.loc["hs", "from_vocab"])  # worse at 100k, its last size with the softmax
    assert cross.loc["nce", "no verdict"] == [1_000_000]  # still listed at 1M, as no verdict


def test_rank_at_size_and_the_test_split_s_band_gaps_averaged_over_seeds():
    table = by_size(*_tables())
    at_1m = table[table.vocab == 1_000_000].set_index("method")
    assert at_1m.rank_at_size.to_dict() == {"hs": 1, "nce": 2, "softmax": 3}
    assert (table.rare_gap_nll == 3.0).all() and (table.frequent_gap_nll == 0.1).all()
    assert list(table.vocab) == sorted(table.vocab)


def test_a_method_run_at_one_size_has_no_crossover():
    head, runs = _tables()
    head = pd.concat([head, head[head.method == "nce"].assign(method="mos").iloc[:1]], ignore_index=True)
    runs = pd.concat([runs, runs[(runs.method == "nce") & (runs.dataset == "z10k")].assign(method="mos")])
    cross = crossovers(by_size(head, runs), "softmax")
    assert sorted(cross.method) == ["hs", "nce"]


def test_the_published_reading_of_a_sweep_states_each_size_s_ranking_bands_winner_and_crossovers():
    from pipeline_src.reporting.tables import sweep_markdown

    head, runs = _tables()
    head["reference"] = "softmax"
    runs = runs.assign(tokens=100, frequent_tokens=40, middle_tokens=35, rare_tokens=25)
    md = sweep_markdown(runs, head)
    assert "**|V| = 1,000,000** (z1m)\n| rank | method | test ppl [95% CI] | verdict vs softmax | tokens in budget | " \
           "gap: frequent (40% of tokens) | gap: middle (35% of tokens) | gap: rare (25% of tokens) |" in md
    assert "| 1 | hs | 1000.0 [950.0, 1050.0] | better | 0.00M | 0.100 | 0.500 | 3.000 |" in md
    assert "- |V| = 1,000,000: **hs** (1000.0), runner-up nce (1400.0); its interval clear of the runner-up's." in md
    assert "- |V| = 10,000: **softmax** (200.0), runner-up hs (205.0); intervals overlapping the runner-up's." in md
    assert "- nce: better from |V| = 100,000 on (better at 100,000, 1,000,000; no clear difference at none; " \
           "worse at 10,000)." in md
    assert md.index("|V| = 10,000**") < md.index("|V| = 100,000**") < md.index("|V| = 1,000,000**")
    one = sweep_markdown(runs[runs.dataset == "z100k"], head[head.dataset == "z100k"])  # one size: no crossovers
    assert "Against softmax across sizes" not in one and "- |V| = 100,000: **nce** (500.0)" in one


def test_a_crossover_needs_a_better_verdict_at_every_larger_size_of_the_sweep():
    """Not run at 1M (a partial sweep) or run there without a verdict (one seed) is not 'better for good'."""
    head, runs = _tables()
    gone = head[~((head.method == "nce") & (head.dataset == "z1m"))]
    cross = crossovers(by_size(gone, runs), "softmax").set_index("method")
    assert math.isnan(cross.loc["nce", "from_vocab"]) and cross.loc["nce", "not run"] == [1_000_000]
    one = head.copy()
    one.loc[(one.method == "nce") & (one.dataset == "z1m"), "verdict"] = "one seed: no verdict"
    cross = crossovers(by_size(one, runs), "softmax").set_index("method")
    assert math.isnan(cross.loc["nce", "from_vocab"]) and cross.loc["nce", "no verdict"] == [1_000_000]
    assert cross.loc["nce", "better"] == [100_000]


def test_the_reading_of_partial_and_one_seed_sweeps_says_what_it_lacks():
    from pipeline_src.reporting.tables import sweep_markdown

    head, runs = _tables()
    head["reference"] = "softmax"
    runs = runs.assign(tokens=100, frequent_tokens=40, middle_tokens=35, rare_tokens=25)
    alone = head[(head.dataset != "z10k") | (head.method == "softmax")]  # one method at 10k
    md = sweep_markdown(runs, alone)
    assert "- |V| = 10,000: **softmax** (200.0), the only method run at this size." in md
    seedless = head.assign(ppl_low=float("nan"), ppl_high=float("nan"))  # one seed: no intervals
    seedless.loc[seedless.method != "softmax", "verdict"] = "one seed: no verdict"
    md = sweep_markdown(runs, seedless)
    assert "test ppl [one seed: no CI]" in md and "one seed: no intervals to compare" in md
    assert "- nce: no verdict at any size (better at none; no clear difference at none; worse at none; no verdict " \
           "at 10,000, 100,000, 1,000,000)." in md  # not "never better": nothing was tested
    flip = head.copy()  # better at 10k and 100k, then no clear difference: not better for good
    flip.loc[flip.method == "hs", "verdict"] = ["better", "better", "no clear difference"]
    assert "- hs: not better for good (better at 10,000, 100,000; no clear difference at 1,000,000; worse at " \
           "none)." in sweep_markdown(runs, flip)
    tied = head.copy()
    tied.loc[(tied.dataset == "z10k") & (tied.method == "hs"), "ppl"] = 200.0
    assert "- |V| = 10,000: **hs** (200.0), runner-up softmax (200.0); the same perplexity as the runner-up." \
        in sweep_markdown(runs, tied)
    kn = pd.DataFrame([{"dataset": "z1m", "method": "kn", "order": 3, "split": "test", "ppl": 900.0,
                        "vocab": 1_000_000}])
    assert "its interval clear of the runner-up's; count-based kn-3: 900.0." in sweep_markdown(runs, head, kn)


def test_a_sweep_reads_one_dataset_per_size_and_ranks_a_missing_perplexity_last():
    import pytest

    from pipeline_src.io.errors import ConfigError
    from pipeline_src.reporting.sweep import is_sweep

    head, runs = _tables()
    assert is_sweep(runs)
    same = runs.assign(vocab=runs.vocab.where(runs.dataset != "z10k", 100_000))
    assert not is_sweep(same)
    with pytest.raises(ConfigError, match="datasets z100k, z10k share |V| = 100,000"):
        by_size(head, same)
    head.loc[(head.dataset == "z1m") & (head.method == "hs"), "ppl"] = float("nan")
    at_1m = by_size(head, runs).query("vocab == 1_000_000").set_index("method")
    assert at_1m.rank_at_size.to_dict() == {"nce": 1, "softmax": 2, "hs": 3}


def test_a_diverged_method_neither_wins_nor_comes_second_and_a_missing_verdict_reads_as_a_dash():
    from pipeline_src.reporting.tables import sweep_markdown

    head, runs = _tables()
    head["reference"] = "softmax"
    runs = runs.assign(tokens=100, frequent_tokens=40, middle_tokens=35, rare_tokens=25)
    gone = head[~((head.dataset == "z1m") & (head.method == "hs"))].copy()  # nce would be runner-up at 1M ...
    gone.loc[(gone.dataset == "z1m") & (gone.method == "nce"), ["ppl", "ppl_low", "ppl_high"]] = float("nan")
    md = sweep_markdown(runs, gone)  # ... but every nce run diverged there: softmax is alone with a perplexity
    assert "- |V| = 1,000,000: **softmax** (3000.0), the only method run at this size." in md
    assert "| 2 | nce | — | better |" in md
    every = head.copy()
    every.loc[every.dataset == "z1m", ["ppl", "ppl_low", "ppl_high"]] = float("nan")
    assert "- |V| = 1,000,000: no method has a test perplexity at this size (every run diverged)." \
        in sweep_markdown(runs, every)
    blank = head.copy()
    blank.loc[(blank.dataset == "z1m") & (blank.method != "softmax"), "verdict"] = float("nan")
    md = sweep_markdown(runs, blank)
    assert "| 1 | hs | 1000.0 [950.0, 1050.0] | — |" in md
    assert "- hs: not better for good (better at 10,000; no clear difference at none; worse at 100,000; no verdict " \
           "at 1,000,000)." in md


def test_two_pairs_of_datasets_sharing_a_size_are_named_pair_by_pair():
    import pytest

    from pipeline_src.io.errors import ConfigError
    from pipeline_src.reporting.sweep import sizes

    runs = _tables()[1]
    runs.loc[runs.dataset == "z10k", "vocab"] = 100_000
    runs = pd.concat([runs, runs[runs.dataset == "z1m"].assign(dataset="z1mb")])
    with pytest.raises(ConfigError, match=r"datasets z100k, z10k share \|V\| = 100,000; z1m, z1mb share "
                                          r"\|V\| = 1,000,000: a sweep"):
        sizes(runs)


def test_real_text_without_a_truth_is_read_by_each_band_s_perplexity_over_seeds():
    """WikiText-2 has no truth: its table shows each band's test perplexity, exp of the mean nll over seeds."""
    from pipeline_src.reporting.tables import sweep_markdown

    head, runs = _tables()
    head["reference"] = "softmax"
    wt2 = runs[runs.dataset == "z10k"].assign(tokens=100, frequent_tokens=40, middle_tokens=35, rare_tokens=25,
                                               frequent_gap_nll=float("nan"), middle_gap_nll=float("nan"),
                                               rare_gap_nll=float("nan"), middle_ppl=50.0, rare_ppl=float("nan"))
    wt2["frequent_ppl"] = [10.0, 10.0, 40.0, 40.0] * 3  # seeds 1 and 2 (valid, test each): exp(mean log) = 20
    md = sweep_markdown(wt2, head[head.dataset == "z10k"])
    assert "| tokens in budget | ppl: frequent (40% of tokens) | ppl: middle (35% of tokens) | " \
           "ppl: rare (25% of tokens) |" in md and "gap:" not in md
    assert "| 1 | softmax | 200.0 [190.0, 210.0] | reference | 0.00M | 20.0 | 50.0 | — |" in md
    table = by_size(head[head.dataset == "z10k"], wt2)
    assert table.frequent_ppl.round(9).tolist() == [20.0] * 3  # not the mean of ppl (25.0)


def test_a_method_that_did_not_learn_neither_wins_ranks_nor_crosses_over():
    """The old reading named hs the winner at 1M; one of its seeds ended above its unigram line, so now it has no
    verdict, no rank, and nce wins there; nce's crossover holds (its verdicts stay against softmax)."""
    head, runs = _tables()
    head["status"], head["verdict_reference"] = "learned", "softmax"
    at = (head.dataset == "z1m") & (head.method == "hs")
    head.loc[at, ["status", "verdict"]] = "did not learn, 1 of 2 seeds"
    table = by_size(head, runs)
    assert winners(table).set_index("vocab").winner.to_dict() == {10_000: "softmax", 100_000: "nce", 1_000_000: "nce"}
    at_1m = table[table.vocab == 1_000_000].set_index("method")
    assert at_1m.rank_at_size.isna().to_dict() == {"nce": False, "softmax": False, "hs": True}
    assert at_1m.rank_at_size.dropna().to_dict() == {"nce": 1, "softmax": 2}
    cross = crossovers(table, "softmax").set_index("method")
    assert math.isnan(cross.loc["hs", "from_vocab"]) and cross.loc["nce", "from_vocab"] == 100_000
    # where the reference did not learn, verdicts against its stand-in are no crossover evidence
    head.loc[head.dataset == "z100k", "verdict_reference"] = "hs"
    cross = crossovers(by_size(head, runs), "softmax").set_index("method")
    assert cross.loc["nce", "from_vocab"] == 1_000_000 and cross.loc["nce", "no verdict"] == [100_000]


def test_the_equal_data_table_reads_the_points_at_epochs_over_the_seeds_that_reached_them():
    from pipeline_src.reporting.sweep import equal_tokens

    rows = [{"dataset": "d", "method": m, "seed": s, "point": None, "fraction": None, "epochs": e,
             "tokens": 1000 * e, "valid_nll": nll + 0.1 * s} for m, e, s, nll in
            [("a", 0.5, 1, 5.0), ("a", 0.5, 2, 5.0), ("a", 1, 1, 4.0), ("b", 0.5, 1, 6.0), ("b", 0.5, 2, 6.0)]]
    rows.append({"dataset": "d", "method": "a", "seed": 1, "point": 1, "fraction": 1.0, "epochs": None,
                 "tokens": 3000, "valid_nll": 3.0})  # an anytime point by time: not in this table
    t = equal_tokens(pd.DataFrame(rows)).set_index(["method", "epochs"])
    assert t.loc[("a", 0.5), "valid_ppl"] == pytest.approx(math.exp(5.15)) and t.loc[("a", 0.5), "seeds"] == 2
    assert t.loc[("a", 1.0), "seeds"] == 1 and ("b", 1.0) not in t.index  # b's budget ended before one epoch
    assert list(equal_tokens(pd.DataFrame(rows).drop(columns="epochs")).columns)[:3] == ["dataset", "method", "epochs"]
    from pipeline_src.reporting.sweep import equal_tokens_table
    from pipeline_src.reporting.tables import equal_tokens_markdown

    wide = equal_tokens_table(pd.DataFrame(rows)).set_index("method")
    assert list(wide.columns) == ["dataset", "after 0.5 epochs", "after 1 epochs"]
    assert wide.loc["a", "after 0.5 epochs"] == f"{math.exp(5.15):.1f}"  # both seeds: no count
    assert wide.loc["a", "after 1 epochs"] == f"{math.exp(4.1):.1f} (1 of 2 seeds)" and pd.isna(wide.loc["b", "after 1 epochs"])
    md = equal_tokens_markdown(pd.DataFrame(rows))
    assert md.startswith("**d** (validation perplexity") and f"| b | {math.exp(6.15):.1f} |" in md
    assert "No validation at equal data" in equal_tokens_markdown(pd.DataFrame(rows).drop(columns="epochs"))


def test_a_size_where_no_method_learned_says_so_not_that_every_run_diverged():
    from pipeline_src.reporting.sweep import winner_lines

    head, runs = _tables()
    head["status"], head["verdict_reference"] = "learned", "softmax"
    head.loc[head.dataset == "z1m", "status"] = "did not learn, 1 of 2 seeds"
    lines = winner_lines(by_size(head, runs))
    assert lines[-1] == ("- |V| = 1,000,000: no method learned at this size (every one has a seed at or above its "
                         "unigram line): no winner.")
