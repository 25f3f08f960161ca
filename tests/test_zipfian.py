"""The Zipfian language (pipeline_src/data/zipfian.py): its truth against brute force and against its own samples,
its Zipf law fitted back, determinism, the rank of its log-probability matrix, and the prepared data aligned
with the per-token truth; the frequency bands (pipeline_src/data/bands.py)."""
import json

import numpy as np
import pytest

from pipeline_src.data.bands import band_nll, frequency_bands
from pipeline_src.data.linalg import numerical_rank
from pipeline_src.data.zipfian import DEFAULTS, ZipfLanguage, fit_zipf_exponent, generate

SMALL = {**DEFAULTS, "vocab_size": 12, "classes": 4, "class_concentration": 0.5, "mean_sentence_length": 4}


def lang(spec=SMALL, seed=0):
    rng = np.random.default_rng(seed)
    return ZipfLanguage(spec, rng), rng


def test_every_context_is_a_distribution_and_the_token_truth_is_its_entry():
    zl, rng = lang()
    dense = zl.dense_log_probs()  # (C*C, V)
    reachable = [a * zl.c + b for a in range(zl.c) for b in range(1, zl.c)] + [0]
    assert np.allclose(np.exp(dense[reachable]).sum(1), 1.0, atol=1e-12)
    assert np.exp(dense[0, 0]) == 0.0  # no empty sentence
    stream = zl.sample(2000, rng)
    lp = zl.token_log_probs(stream)
    # brute force: walk the stream keeping the two previous words' classes, reset after each <eos>
    a = b = 0
    for t, w in enumerate(stream):
        assert lp[t] == pytest.approx(dense[a * zl.c + b, w], abs=1e-12)
        cw = zl.word_class[w]
        a, b = (0, 0) if w == 0 else (b, cw)


def test_the_sampler_draws_what_the_truth_says():
    """Empirical next-word frequencies per context against exp(truth): an independent check of the sampler
    (classes by inverse CDF over chains, words by a search over class keys) and of the formula."""
    zl, rng = lang()
    stream = zl.sample(400_000, rng)
    assert stream[-1] == 0 and stream.size >= 400_000
    cls = zl.word_class[stream]
    prev1 = np.concatenate([[0], cls[:-1]])
    prev2 = np.where(prev1 == 0, 0, np.concatenate([[0, 0], cls[:-2]]))
    ctx = prev2 * zl.c + prev1
    dense = np.exp(zl.dense_log_probs())
    checked = 0
    for c in np.unique(ctx):
        sel = ctx == c
        if sel.sum() < 20_000:
            continue
        emp = np.bincount(stream[sel], minlength=zl.v) / sel.sum()
        assert 0.5 * np.abs(emp - dense[c]).sum() < 0.02, c  # total variation
        checked += 1
    assert checked >= 3


def test_the_zipf_exponent_is_fitted_back_and_most_types_are_rare():
    spec = {**DEFAULTS, "vocab_size": 50_000, "classes": 32, "zipf_exponent": 1.05}
    zl, rng = lang(spec)
    stream = zl.sample(2_000_000, rng)
    counts = np.bincount(stream, minlength=zl.v)
    assert abs(fit_zipf_exponent(counts[1:]) - 1.05) < 0.07
    seen = counts[1:][counts[1:] > 0]
    assert np.log10(seen.max() / seen.min()) > 4.5  # frequency bands span five orders of magnitude
    assert (counts[1:] < 10).mean() > 0.5  # most word types are rare


def test_the_rank_is_that_of_the_brute_force_matrix_and_above_a_small_head():
    spec = {**SMALL, "vocab_size": 200, "classes": 24}
    zl, _ = lang(spec)
    dense = zl.dense_log_probs()
    inside = [a * zl.c + b for a in range(zl.c) for b in range(1, zl.c)]  # finite rows
    assert zl.rank()[0] == numerical_rank(dense[inside])[0] == zl.c + 1 > 16


def test_the_same_seed_makes_the_same_language(tmp_path):
    spec = {**SMALL, "vocab_size": 300, "classes": 8, "train_tokens": 5000, "valid_tokens": 800, "test_tokens": 800}
    a, b, c = (generate(spec, tmp_path / name, seed) for name, seed in (("a", 3), ("b", 3), ("c", 4)))
    for split in ("train", "valid", "test"):
        assert (tmp_path / "a" / f"{split}.txt").read_bytes() == (tmp_path / "b" / f"{split}.txt").read_bytes()
    assert np.array_equal(np.load(tmp_path / "a/truth-test.npy"), np.load(tmp_path / "b/truth-test.npy"))
    assert (tmp_path / "a/test.txt").read_bytes() != (tmp_path / "c/test.txt").read_bytes()
    assert {k: v for k, v in a.items() if not k.endswith("_s")} == {k: v for k, v in b.items() if not k.endswith("_s")}
    lines = (tmp_path / "a/test.txt").read_text().split("\n")
    assert lines[-1] == "" and all(line and line == line.strip() for line in lines[:-1])  # whole, non-empty sentences
    assert a["test_tokens"] == sum(len(line.split()) + 1 for line in lines[:-1]) >= 800


def test_a_zipfian_dataset_runs_through_fetch_prepare_train_evaluate_with_its_truth_and_bands(tmp_path, default_params):
    from conftest import generated_dataset

    from pipeline_src.cli import main

    common, raw, prep = generated_dataset(default_params, tmp_path, "zipf", "zipfian")
    truth = json.loads((raw / "truth.json").read_text())
    meta = json.loads((prep / "meta.json").read_text())
    assert meta["vocab_size"] == 2000 + 1  # every word (closed vocabulary) and <unk>
    vocab = (prep / "vocab.txt").read_text().split("\n")[:-1]
    test_ids = np.load(prep / "test.npy")
    words = (raw / "test.txt").read_text().replace("\n", " <eos> ").split()
    assert [vocab[i] for i in test_ids] == words  # the prepared stream is the generated one, token for token
    assert np.load(raw / "truth-test.npy").shape == test_ids.shape
    run = [*common, "--method", "softmax", "--seed", "0"]
    assert main(["train", *run]) == 0 and main(["evaluate", *run]) == 0
    m = json.loads((tmp_path / "results/runs/zipf/softmax/seed0/metrics.json").read_text())["splits"]["test"]
    assert m["true_nll"] == pytest.approx(truth["test_nll"], rel=0.02)  # the scored positions: all but one per row
    bands = m["bands"]
    assert sum(b["tokens"] for b in bands.values()) == m["tokens"]
    mean = sum(b["nll"] * b["tokens"] for b in bands.values() if b["tokens"]) / m["tokens"]
    assert mean == pytest.approx(m["nll"], rel=1e-9)  # the bands partition the scored tokens
    assert all(b["gap_nll"] == pytest.approx(b["nll"] - b["true_nll"]) for b in bands.values() if b["tokens"])
    # the band split (scoring.py): each band's two parts add up to its nll, the truth's too, and each gap splits
    for b in (b for b in bands.values() if b["tokens"]):
        assert b["alloc_nll"] + b["within_nll"] == pytest.approx(b["nll"], abs=1e-9)
        assert b["true_alloc_nll"] + b["true_within_nll"] == pytest.approx(b["true_nll"], abs=1e-9)
        assert b["true_within_nll"] >= 0 and b["true_alloc_nll"] >= 0  # conditionals of the truth
    share = {k: b["tokens"] / m["tokens"] for k, b in bands.items()}
    assert m["band_alloc_nll"] == pytest.approx(sum(share[k] * b["alloc_nll"] for k, b in bands.items()
                                                    if b["tokens"]), rel=1e-9)
    assert m["true_band_alloc_nll"] <= m["band_alloc_nll"] + 0.05  # the truth predicts the band about as well or better


def test_frequency_bands_and_per_band_nll():
    counts = np.array([500, 300, 9, 0, 40, 10] + [20] * 94)  # 100 types: the top 1% is one type
    band = frequency_bands(counts)
    assert band[0] == 0 and band[1] == 1 and band[2] == 2 and band[3] == 2 and band[5] == 1 and (band == 0).sum() == 1
    nll = np.array([1.0, 2.0, 3.0, 5.0])
    got = band_nll(nll, np.array([0, 1, 3, 2]), counts)
    assert got["frequent"]["nll"] == 1.0 and got["middle"]["nll"] == 2.0 and got["rare"]["nll"] == 4.0
    assert got["rare"]["tokens"] == 2 and got["rare"]["ppl"] == pytest.approx(np.exp(4.0))


def test_a_small_split_is_drawn_like_a_large_one_no_sentence_cut_for_its_length():
    """Every sentence is drawn whole: a split of a few thousand tokens has the sentence lengths of a large
    sample (an earlier draw that dropped each chain's unfinished sentence made test splits' sentences 30% short)."""
    spec = {**DEFAULTS, "vocab_size": 2000, "classes": 16, "mean_sentence_length": 25}
    zl, rng = lang(spec)
    big = zl.sample(1_000_000, rng)
    small = np.concatenate([zl.sample(3000, rng) for _ in range(40)])
    mean = lambda s: s.size / (s == 0).sum()
    assert mean(small) == pytest.approx(mean(big), rel=0.08)


def test_a_language_of_a_few_words_is_refused_or_made_never_a_traceback(tmp_path):
    """The third probe: a Zipfian language of 50 words (128 classes by default) or of 100 topic words crashed in
    `fetch` (a traceback in fit_zipf_exponent); the schema allows 3 words. More classes than words is refused at
    check-config; a language too small for a Zipf slope records none (NaN) instead of failing."""
    import copy
    import math

    from conftest import ROOT
    from pipeline_src.config import ConfigError, validate
    import yaml

    from pipeline_src.config.dataset_rules import ZIPF_CLASSES

    assert ZIPF_CLASSES == DEFAULTS["classes"]  # the check's default is the language's (and the schema's)
    assert math.isnan(fit_zipf_exponent(np.arange(100, 0, -1)))  # ranks 10..10: no slope to fit
    assert fit_zipf_exponent(np.arange(1000, 0, -1).astype(float) ** 0) == pytest.approx(0.0, abs=1e-9)
    p = yaml.safe_load((ROOT / "params.yaml").read_text())
    p["datasets"]["zipf-5k"]["corpus"].update(vocab_size=50)
    p["datasets"]["zipf-5k"]["corpus"].pop("classes")
    with pytest.raises(ConfigError, match=r"'datasets.zipf-5k.corpus.classes': 128 classes \(the default\) for 50 "
                                          r"words"):
        validate(copy.deepcopy(p))
    meta = generate({"vocab_size": 3, "classes": 2, "train_tokens": 2000, "valid_tokens": 200, "test_tokens": 200},
                    tmp_path / "three", 1)
    assert math.isnan(meta["zipf_exponent_fitted"])
