"""The topic language (pipeline_src/data/topics.py): its emissions normalised per class and topic, its three exact
lines (the truth with the topic's posterior, the memoryless topic-marginal trigram, the topic-known line) against a
brute-force walk of the documents, its sampler against its own definition, and the pipeline reading it as it reads
the Zipfian language (the prepared stream token for token, truth.json's lines, evaluation's gap to the truth)."""
import json
import math

import numpy as np
import pytest

from pipeline_src.data.topics import DEFAULTS, TopicLanguage, log_lines

SMALL = {**DEFAULTS, "vocab_size": 12, "classes": 4, "class_concentration": 0.5, "mean_sentence_length": 4,
         "topics": 3, "topic_boost": 5.0, "doc_sentences": 3}


def emission(lang: TopicLanguage, w: int, z: int) -> float:
    """E_z[w | c(w)] from its definition: E[w | c] (1 + (lambda - 1) [home(w) = z]), normalised over the class."""
    b = lang.base
    c = b.word_class[w]
    members = np.flatnonzero(b.word_class == c)
    weight = lambda v: math.exp(b.log_emit[v]) * (lang.boost if lang.home[v] == z else 1.0)  # noqa: E731
    return weight(w) / sum(weight(v) for v in members) if w != 0 else 1.0


def test_each_topic_s_emissions_are_a_distribution_over_each_class():
    lang = TopicLanguage(SMALL, np.random.default_rng(0))
    b = lang.base
    for c in range(1, b.c):
        for z in range(lang.k):
            assert sum(emission(lang, w, z) for w in np.flatnonzero(b.word_class == c)) == pytest.approx(1, abs=1e-12)
    stream = np.array([3, 5, 0, 7, 0], dtype=np.int64)
    ell = lang.word_log_probs(stream)  # against the definition, token by token
    for t, w in enumerate(stream):
        for z in range(lang.k):
            cls = b.word_class[stream]
            a = 0 if t < 2 or cls[t - 1] == 0 else cls[t - 2]
            prev = 0 if t < 1 else cls[t - 1]
            want = b.log_t[a * b.c + prev, cls[t]] + math.log(emission(lang, w, z))
            assert ell[t, z] == pytest.approx(want, abs=1e-12)


def test_the_three_lines_are_a_brute_force_walk_of_the_documents():
    lang = TopicLanguage(SMALL, np.random.default_rng(0))
    stream, topics = lang.sample(400, np.random.default_rng(1))
    got = log_lines(lang, stream, topics)
    b = lang.base
    like = np.ones(lang.k)  # p(the document so far | z)
    doc, a, prev, after_eos = 0, 0, 0, False
    for t, w in enumerate(stream):
        if after_eos and w == 0:  # the boundary: the document ends; a new one starts from the prior
            for name in got:
                assert got[name][t] == pytest.approx(math.log(lang.p_end), abs=1e-12)
            like, doc, a, prev, after_eos = np.ones(lang.k), doc + 1, 0, 0, False
            continue
        first_of_doc = like.sum() == lang.k and (t == 0 or stream[t - 1] == 0 and (t < 2 or stream[t - 2] == 0))
        cont = 0.0 if (not after_eos or first_of_doc) else math.log(1 - lang.p_end)  # no boundary came instead
        cls = b.word_class[w]
        p = np.array([math.exp(b.log_t[a * b.c + prev, cls]) * emission(lang, w, z) for z in range(lang.k)])
        assert got["truth"][t] == pytest.approx(cont + math.log((like * p).sum() / like.sum()), abs=1e-9)
        assert got["memoryless"][t] == pytest.approx(cont + math.log(p.mean()), abs=1e-9)
        assert got["topic_known"][t] == pytest.approx(cont + math.log(p[topics[doc]]), abs=1e-9)
        like = like * p
        a, prev = (0, 0) if w == 0 else (prev, cls)
        after_eos = w == 0
    assert doc == topics.size  # every document ends with its boundary


def test_the_truth_s_band_masses_are_its_next_token_distribution_summed_over_each_band():
    """topics.band_log_mass against brute force: at each position, every symbol that could come next put in its
    place (the truth of the stream cut there), their probabilities summed over each band; they sum to 1, and the
    band of the token that came has the mass band_log_mass gives, boundaries and documents' first words included."""
    from pipeline_src.data.topics import band_log_mass

    lang = TopicLanguage(SMALL, np.random.default_rng(0))
    stream, _ = lang.sample(200, np.random.default_rng(1))
    word_band = np.random.default_rng(2).integers(0, 3, lang.base.v)
    got = band_log_mass(lang, stream, word_band, 3)
    kinds = set()
    for t in range(min(stream.size, 160)):
        doc_first = t == 0 or (stream[t - 1] == 0 and t >= 2 and stream[t - 2] == 0)  # after a boundary
        probs = np.zeros(lang.base.v)
        for w in range(0 if not doc_first else 1, lang.base.v):  # a document cannot start with <eos>
            cut = np.concatenate([stream[:t], [w]])
            probs[w] = math.exp(log_lines(lang, cut)["truth"][t])
        assert probs.sum() == pytest.approx(1.0, abs=1e-9), t
        band = word_band[stream[t]]
        assert math.exp(got[t]) == pytest.approx(probs[word_band == band].sum(), rel=1e-9, abs=1e-12), t
        kinds.add("boundary" if t and stream[t] == 0 and stream[t - 1] == 0 else "first of its document" if doc_first
                  else "first of a sentence" if t and stream[t - 1] == 0 else "inside a sentence")
    assert kinds == {"boundary", "first of its document", "first of a sentence", "inside a sentence"}


def test_the_sampler_draws_what_the_definition_says():
    lang = TopicLanguage(SMALL, np.random.default_rng(0))
    stream, topics = lang.sample(300_000, np.random.default_rng(2))
    boundary = np.zeros(stream.size, dtype=bool)
    boundary[1:] = (stream[1:] == 0) & (stream[:-1] == 0)
    doc = np.cumsum(boundary) - boundary  # each token's document (a boundary closes its own)
    sentences_per_doc = ((stream == 0) & ~boundary).sum() / topics.size
    assert sentences_per_doc == pytest.approx(SMALL["doc_sentences"], rel=0.05)
    assert np.bincount(topics, minlength=lang.k).min() > 0.8 * topics.size / lang.k
    z = topics[doc]
    words = (stream != 0)
    b = lang.base
    for c in range(1, b.c):
        for k in range(lang.k):
            sel = words & (b.word_class[stream] == c) & (z == k)
            freq = np.bincount(stream[sel], minlength=b.v) / sel.sum()
            for w in np.flatnonzero(b.word_class == c):
                assert abs(freq[w] - emission(lang, w, k)) < 4 * math.sqrt(0.25 / sel.sum()) + 1e-3, (c, k, w)


def test_a_topic_dataset_runs_through_fetch_prepare_train_evaluate_with_its_lines(tmp_path, default_params):
    from conftest import generated_dataset

    from pipeline_src.cli import main

    common, raw, prep = generated_dataset(default_params, tmp_path, "topics", "zipfian-topics")
    truth = json.loads((raw / "truth.json").read_text())
    assert truth["test_nll"] < truth["test_memoryless_nll"] and truth["topic_value_nats"] > 0.2
    assert truth["test_topic_known_nll"] <= truth["test_nll"] + 0.02  # the posterior is nearly the topic
    vocab = (prep / "vocab.txt").read_text().split("\n")[:-1]
    test_ids = np.load(prep / "test.npy")
    lines = (raw / "test.txt").read_text().split("\n")[:-1]
    assert [vocab[i] for i in test_ids] == [w for line in lines for w in line.split() + ["<eos>"]]
    assert "" in lines  # the documents' boundaries: empty lines
    assert np.load(raw / "truth-test.npy").shape == test_ids.shape
    assert -np.load(raw / "memoryless-test.npy").mean() == pytest.approx(truth["test_memoryless_nll"])
    run = [*common, "--method", "softmax", "--seed", "0"]
    assert main(["train", *run]) == 0 and main(["evaluate", *run]) == 0
    m = json.loads((tmp_path / "results/runs/topics/softmax/seed0/metrics.json").read_text())["splits"]["test"]
    assert m["true_nll"] == pytest.approx(truth["test_nll"], rel=0.02) and m["gap_nll"] > 0
    # the memoryless line over the same scored positions (a batch's tail is not scored): beside the truth's
    assert m["memoryless_nll"] == pytest.approx(truth["test_memoryless_nll"], rel=0.02)
    assert m["memoryless_nll"] - m["true_nll"] == pytest.approx(truth["memory_value_nats"], abs=0.02)
    assert m["memory_gap_nll"] == pytest.approx(m["nll"] - m["memoryless_nll"], abs=1e-12)
    # the truth's band split: its band masses, so each band's gap divides into allocation and within-band parts
    assert m["band_alloc_gap"] == pytest.approx(m["band_alloc_nll"] - m["true_band_alloc_nll"])
    assert 0 < m["true_band_alloc_nll"] <= m["true_nll"] + 1e-9  # a band holds at least the word's mass
    assert m["bands"] and all(b["tokens"] == 0 or b["alloc_gap"] + b["within_gap"] == pytest.approx(b["gap_nll"], abs=1e-9)
                              for b in m["bands"].values())
