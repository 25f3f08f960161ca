"""The sampled family's settings (issue 30): a logit offset for the heads without a bias, Q floored where a
word has no training count, adaptive softmax's narrowest tail, and the guard that flags a collapsed run."""
import math

import numpy as np
import pytest
import torch

from pipeline_src.heads import HeadContext, build_head
from pipeline_src.heads.adaptive import tail_div_value
from pipeline_src.sampling import Negatives, unigram_probs
from test_sampled_heads import COUNTS, D, K, N, V, data, logsig, make, s_of


@pytest.mark.parametrize("kind", ["neg", "neglm"])
@pytest.mark.parametrize("offset", ["log_k", 1.5])
def test_the_logit_offset_is_subtracted_from_every_training_logit(kind, offset):
    hd = make(kind, sampler="unigram", alpha=1.0, logit_offset=offset)
    c = math.log(K) if offset == "log_k" else offset
    h, t = data()
    ids = torch.tensor([1, 2, 3, 3, 0])
    neg = Negatives(ids, K * unigram_probs(COUNTS, 1.0)[ids], K)
    total = sum(-logsig(s_of(hd, h, i, t[i]) - c) - sum(logsig(-(s_of(hd, h, i, w) - c)) for w in ids.tolist())
                for i in range(N))
    assert hd.loss_given(h, t, neg).item() == pytest.approx(total / N, abs=1e-10)
    plain = make(kind, sampler="unigram", alpha=1.0)  # the same weights (same seed), no offset
    assert hd.loss_given(h, t, neg).item() != pytest.approx(plain.loss_given(h, t, neg).item(), abs=1e-3)
    # a constant: the normalised test distribution is the same, the unnormalised log Z moves by -c
    assert torch.allclose(hd.log_prob(h), plain.log_prob(h), atol=1e-10)
    score, log_z = hd.self_normalisation(h, t)
    score0, log_z0 = plain.self_normalisation(h, t)
    assert torch.allclose(log_z, log_z0 - c, atol=1e-10) and torch.allclose(score, score0 - c, atol=1e-10)


def test_a_logit_offset_is_refused_where_a_head_has_a_bias_or_spelled_wrong():
    from pipeline_src.config import ConfigError, validate
    from conftest import ROOT
    import copy, yaml

    base = yaml.safe_load((ROOT / "params.yaml").read_text())
    for method, why in (({"type": "nce", "logit_offset": 1.0}, "logit_offset"),
                        ({"type": "neg", "logit_offset": "log-k"}, "log-k")):
        p = copy.deepcopy(base)
        p["methods"]["nce" if method["type"] == "nce" else "neg"] = method
        with pytest.raises(ConfigError, match=why):
            validate(p)


@pytest.mark.parametrize("kind", ["neglm", "neglm-b"])
def test_a_word_the_noise_never_draws_keeps_a_probability_at_test_time(kind):
    """Q = count^alpha is 0 for a word with no training count: as published such a word gets probability 0;
    with smooth_q the test-time factor floors Q at its smallest non-zero value (the rarest drawn word), so
    every word scores finite and the distribution sums to one."""
    counts = COUNTS.clone()
    counts[[5, 11]] = 0
    ctx = HeadContext(vocab_size=V, in_dim=D, unigram_counts=counts)
    torch.manual_seed(0)
    published = build_head({"type": kind, "negatives": K}, ctx).double()
    torch.manual_seed(0)
    hd = build_head({"type": kind, "negatives": K, "smooth_q": True}, ctx).double()
    h, t = data()
    assert torch.isneginf(published.log_prob(h)[:, [5, 11]]).all()
    t = torch.tensor([5, 11, 0, 1, 2, 3])
    lp = hd.log_prob(h)
    assert torch.isfinite(lp).all() and torch.allclose(lp.exp().sum(1), torch.ones(N, dtype=lp.dtype), atol=1e-12)
    q = unigram_probs(counts, 0.75)
    floor = q[q > 0].min()
    with torch.no_grad():
        s = h @ hd.weight.t() + (hd.bias if hd.bias is not None else 0)
    un = s.exp() * torch.where(q > 0, q, floor)  # brute force: Melamud's exp(s) Q(w) with Q floored
    assert torch.allclose(lp.exp(), un / un.sum(1, keepdim=True), atol=1e-10)
    assert torch.allclose(hd.target_log_prob(h, t, chunk_size=4), lp.gather(1, t[:, None]).squeeze(1), atol=1e-10)


@pytest.mark.parametrize("d, clusters, div, least, widths", [
    (16, 2, 4.0, 1, [4, 1]),      # as published: the last tail is one dimension wide
    (16, 2, 4.0, 8, [11, 8]),     # div lowered to sqrt(2)
    (16, 2, 4.0, 16, [16, 16]),   # div 1: every tail as wide as the head
    (512, 2, 4.0, 8, [128, 32]),  # Grave et al.'s width: div 4 is kept
])
def test_adaptive_softmax_keeps_its_tails_at_least_min_tail_dim_wide(d, clusters, div, least, widths):
    got = tail_div_value(d, clusters, div, least)
    assert [int(d // got ** (i + 1)) for i in range(clusters)] == widths
    hd = build_head({"type": "adaptive-softmax", "cutoffs": [25, 125], "min_tail_dim": least},
                    HeadContext(vocab_size=500, in_dim=d))
    assert [tail[0].out_features for tail in hd.asm.tail] == widths
    with pytest.raises(ValueError, match="min_tail_dim.*wider than"):
        build_head({"type": "adaptive-softmax", "min_tail_dim": d + 1}, HeadContext(vocab_size=500, in_dim=d))


def test_the_collapse_line_is_the_add_one_unigram_model_on_the_same_tokens():
    from pipeline_src.prepare import unigram_nll
    from pipeline_src.training.guard import collapse

    counts = np.array([5, 3, 0, 2])
    ids = np.array([[0, 1], [2, 3]])
    p = (counts + 1) / (counts.sum() + 4)
    want = -np.mean(np.log(p[[0, 1, 2, 3]]))
    assert unigram_nll(counts, ids) == pytest.approx(want, abs=1e-12)
    assert collapse(want - 0.01, want) is None and collapse(float("nan"), want) is None
    flag = collapse(want + 0.2, want)
    assert flag["valid_ppl"] == pytest.approx(math.exp(want + 0.2)) and "collapsed" in flag["message"]


def test_the_report_flags_collapsed_runs_and_words_a_head_cannot_score():
    import pandas as pd
    from pipeline_src.findings import collapse_findings, zero_probability_findings

    rows = [{"dataset": "synth", "method": m, "seed": s, "split": sp, "collapsed": c, "zero_prob_words": z}
            for m, c, z in (("neg", True, 0), ("nce", False, 0), ("neglm", False, 1))
            for s in (1, 2, 3) for sp in ("valid", "test")]
    summary = pd.DataFrame(rows)
    summary.loc[(summary.method == "neg") & (summary.seed == 3), "collapsed"] = False
    assert collapse_findings(summary) == [
        "**neg** on synth: 2 of 3 runs collapsed (validation after the first epoch no better than the unigram "
        "model's); read its row as a failure to train, not as the method's quality."]
    assert zero_probability_findings(summary) == [
        "**neglm** on synth gives 1 words probability 0 (no training count, so Q(w) = 0): it cannot score a "
        "text that contains them (`smooth_q: true` floors Q)."]
    old = summary.drop(columns=["collapsed", "zero_prob_words"])  # a summary written before the columns
    assert collapse_findings(old) == [] and zero_probability_findings(old) == []
