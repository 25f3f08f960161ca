import json

import numpy as np

from pipeline_src.data.linalg import numerical_rank
from pipeline_src.data.synthetic import generate, sample_stream, stream_log_probs, symbols, true_log_probs

SPEC = {"vocab_size": 40, "order": 2, "dirichlet_beta": 0.3, "support": 6, "smoothing": 0.01,
        "train_tokens": 3000, "valid_tokens": 500, "test_tokens": 800}


def test_rows_are_normalised_sparse_distributions():
    logp = true_log_probs(40, 2, 0.3, 6, 0.0, np.random.default_rng(0))
    p = np.exp(logp)
    assert np.allclose(p.sum(1), 1.0)
    assert ((p > 0).sum(1) <= 6).all()
    smoothed = true_log_probs(40, 2, 0.3, 6, 0.01, np.random.default_rng(0))
    assert np.isfinite(smoothed).all() and np.allclose(np.exp(smoothed).sum(1), 1.0)
    assert np.exp(smoothed).min() >= 0.01 / 40 * (1 - 1e-9)


def test_tiny_beta_does_not_underflow():
    logp = true_log_probs(50, 2, 1e-3, None, 0.0, np.random.default_rng(1))
    assert np.allclose(np.logaddexp.reduce(logp, axis=1), 0.0)


def test_order3_contexts_index_the_two_previous_symbols():
    rng = np.random.default_rng(0)
    logp = true_log_probs(5, 3, 0.5, None, 0.01, rng)
    assert logp.shape == (25, 5)
    stream = sample_stream(logp, 3, 300, rng)
    lp = stream_log_probs(logp, 3, stream)
    # brute force: context of position t is (stream[t-2], stream[t-1]) with <eos>=0 padding
    padded = [0, 0] + list(stream)
    brute = [logp[padded[t] * 5 + padded[t + 1], padded[t + 2]] for t in range(len(stream))]
    assert np.allclose(lp, brute)


def test_generate_writes_text_and_truth_consistently(tmp_path):
    truth = generate(SPEC, tmp_path / "out", seed=3)
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == [
        "closed_vocab.txt", "source.json", "test.txt", "train.txt", "truth.json", "truth.npz", "valid.txt"]
    data = np.load(out / "truth.npz")
    logp, names = data["log_prob"].astype(np.float64), list(data["symbols"])
    assert names == symbols(40) and names[0] == "<eos>"
    # Re-read the test text: each line's words then <eos>; the true nll recomputed by brute force.
    index = {s: i for i, s in enumerate(names)}
    toks = [index[w] for line in (out / "test.txt").read_text().splitlines() for w in line.split() + ["<eos>"]]
    prev, nll = 0, []
    for t in toks:
        nll.append(-logp[prev, t])
        prev = t
    assert len(toks) == truth["test_tokens"] >= SPEC["test_tokens"]
    assert abs(np.mean(nll) - truth["test_nll"]) < 1e-5
    assert json.loads((out / "truth.json").read_text())["log_prob_rank"] == numerical_rank(logp)[0] == 40


def test_generation_is_seeded(tmp_path):
    a = generate(SPEC, tmp_path / "a", seed=5)
    b = generate(SPEC, tmp_path / "b", seed=5)
    c = generate(SPEC, tmp_path / "c", seed=6)
    assert (tmp_path / "a" / "train.txt").read_bytes() == (tmp_path / "b" / "train.txt").read_bytes()
    assert a["test_nll"] == b["test_nll"] != c["test_nll"]


def test_numerical_rank_of_known_matrices():
    rng = np.random.default_rng(0)
    low = rng.standard_normal((60, 5)) @ rng.standard_normal((5, 40))
    assert numerical_rank(low)[0] == 5
    assert numerical_rank(rng.standard_normal((30, 40)))[0] == 30
    # a softmax layer's log-prob matrix has rank <= d + 1
    h, w = rng.standard_normal((80, 4)), rng.standard_normal((50, 4))
    logits = h @ w.T
    logp = logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)
    assert numerical_rank(logp)[0] <= 5
