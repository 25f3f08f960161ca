"""The band split of a token's loss (pipeline_src/evaluation/scoring.py): −log q(w|c) = −log q(b(w)|c) −
log q(w | b(w), c). The model's band masses against brute force over its full distribution, for a head whose
distribution is not a plain softmax too; the truth's band masses (the Zipfian language's class tables, the
synthetic language's dense table) against brute force over every context; the identity that the two parts add up
to each band's nll, and that the truth's within-band part is a conditional (never negative)."""
import numpy as np
import pytest
import torch

from pipeline_src.config import ModelConfig
from pipeline_src.data.bands import BANDS, frequency_bands
from pipeline_src.data.batching import batchify
from pipeline_src.data.zipfian import DEFAULTS, ZipfLanguage, band_log_mass, class_contexts
from pipeline_src.evaluation.scoring import band_log_mass as model_band_log_mass
from pipeline_src.evaluation.scoring import per_band
from pipeline_src.training.model import LanguageModel

CFG = ModelConfig(emb_dim=6, hidden_dim=5, layers=1, dropout=0.0, tie_weights=False)


SPECS = [{"type": "softmax"}, {"type": "hierarchical-softmax"}, {"type": "mos", "components": 2},
         {"type": "sampled-softmax", "negatives": 5}, {"type": "adaptive-softmax", "cutoffs": [5, 20], "div_value": 2},
         {"type": "mixtape"}]  # each head's own log_mass (blocked over words, class by class, cluster by cluster)
# and the default (from log_prob: MoS, Mixtape)


@pytest.mark.parametrize("spec", SPECS)
def test_the_model_s_band_mass_is_its_distribution_summed_over_the_band(spec):
    torch.manual_seed(0)
    v = 40
    counts = np.array([1000, 500] + [30] * 18 + [2] * 20)  # a frequent, a middle and a rare band
    model = LanguageModel(v, CFG, spec, torch.from_numpy(counts)).eval()
    ids = torch.randint(v, (61,))
    data = batchify(ids.numpy(), 3, torch.device("cpu"))  # (20, 3)
    band = frequency_bands(counts)
    got = model_band_log_mass(model, data, 4, band.astype(np.int64))  # (19, 3)
    # brute force: the whole stream's hidden states at once, every word's log p in float64, summed per band
    with torch.no_grad():
        h, _ = model.encoder(data[:-1], model.init_state(3))
        lp = model.head.log_prob(h.reshape(-1, h.shape[-1])).double()  # (19 * 3, V)
    mass = torch.stack([lp[:, torch.from_numpy(band == b)].logsumexp(1) for b in range(len(BANDS))], 1)
    want = mass.gather(1, torch.from_numpy(band)[data[1:].reshape(-1)][:, None]).squeeze(1).view(19, 3)
    assert torch.allclose(got.double(), want, atol=1e-5)
    assert (got <= 1e-6).all()  # a mass is a probability


def test_the_zipfian_truth_s_band_mass_is_brute_force_over_every_class_context():
    zl = ZipfLanguage({**DEFAULTS, "vocab_size": 30, "classes": 5, "class_concentration": 0.5,
                       "mean_sentence_length": 4}, np.random.default_rng(0))
    word_band = np.random.default_rng(1).integers(0, 3, zl.v)
    table = band_log_mass(zl.log_t, zl.word_class, zl.log_emit, word_band, 3)  # (C*C, 3)
    dense = zl.dense_log_probs()  # (C*C, V) log p(w | context), brute force
    with np.errstate(divide="ignore"):
        want = np.stack([np.logaddexp.reduce(np.where(word_band == b, dense, -np.inf), axis=1) for b in range(3)], 1)
    reachable = np.isfinite(dense).any(axis=1)
    assert np.allclose(table[reachable], want[reachable], atol=1e-12)
    assert np.allclose(np.logaddexp.reduce(table[reachable], axis=1), 0.0, atol=1e-12)  # the bands' masses sum to 1
    stream = zl.sample(500, np.random.default_rng(2))
    ctx = class_contexts(zl.word_class[stream], zl.c)
    within = zl.token_log_probs(stream) - table[ctx, word_band[stream]]  # log q*(w | band, c) <= 0
    assert (within <= 1e-12).all()


def test_the_two_parts_add_up_to_each_band_s_nll_and_the_truth_s_gaps_split_too():
    rng = np.random.default_rng(0)
    counts = np.array([1000, 500] + [30] * 18 + [2] * 20)
    targets = rng.integers(0, 40, 300)
    nll, true_lp = rng.uniform(1, 6, 300), -rng.uniform(1, 4, 300)
    alloc, true_alloc = rng.uniform(0, 1, 300), rng.uniform(0, 1, 300)
    out = per_band(nll, targets, counts, true_lp, alloc, true_alloc)
    for row in out.values():
        assert row["alloc_nll"] + row["within_nll"] == pytest.approx(row["nll"], abs=1e-12)
        assert row["true_alloc_nll"] + row["true_within_nll"] == pytest.approx(row["true_nll"], abs=1e-12)
        assert row["alloc_gap"] + row["within_gap"] == pytest.approx(row["gap_nll"], abs=1e-12)


def test_the_synthetic_truth_s_band_mass_is_brute_force_over_its_table(tiny_data):
    from pipeline_src.data.prepare import load_split
    from pipeline_src.data.truth import SyntheticTruth, load_truth
    from pipeline_src.io import paths

    _, raw, prep = tiny_data
    truth = load_truth(raw, prep)
    assert isinstance(truth, SyntheticTruth) and truth.order == 2  # a bigram: the context is the previous symbol
    ids = load_split(prep, "test")
    band = frequency_bands(np.load(prep / paths.NOISE)["counts"]).astype(np.int64)
    pos = np.arange(len(ids))
    got = truth.band_log_mass_at(ids, pos, "test", band, 3)
    sym = truth.to_sym[ids]
    sym_band = np.full(truth.log_prob.shape[1], 2)
    sym_band[truth.to_sym[truth.to_sym >= 0]] = band[truth.to_sym >= 0]
    prev = 0  # the all-<eos> context before the start
    for t in range(len(ids)):
        row = truth.log_prob[prev]
        want = np.logaddexp.reduce(row[sym_band == band[ids[t]]])
        assert got[t] == pytest.approx(want, abs=1e-12)
        prev = sym[t]
    true_lp = truth.log_probs_at(ids, pos, "test")
    assert (true_lp - got <= 1e-12).all()  # log q*(w | band, c) <= 0
