"""Sampling-based objectives against brute-force loops over rows and negatives, with given negatives."""
import math

import pytest
import torch

from pipeline_src.heads import HeadContext, build_head
from pipeline_src.heads.sampling import Negatives, log_uniform_probs, unigram_probs

V, D, N, K = 12, 4, 6, 5
COUNTS = torch.tensor([40, 30, 20, 10, 9, 8, 7, 6, 5, 4, 2, 1])


def make(kind, **opts):
    torch.manual_seed(0)
    hd = build_head({"type": kind, "negatives": K, **opts},
                    HeadContext(vocab_size=V, in_dim=D, unigram_counts=COUNTS)).double()
    with torch.no_grad():
        if getattr(hd, "bias", None) is not None:
            hd.bias.add_(0.3 * torch.randn(V, dtype=torch.float64))
    return hd


def data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(N, D, generator=g, dtype=torch.float64), torch.randint(0, V, (N,), generator=g)


def s_of(hd, h, i, w):
    with torch.no_grad():
        return float(h[i] @ hd.weight[w] + (hd.bias[w] if getattr(hd, "bias", None) is not None else 0.0))


def logsig(x):
    return -math.log1p(math.exp(-x)) if x > 0 else x - math.log1p(math.exp(x))


def test_sampled_softmax_matches_brute_force_with_hits_removed():
    hd = make("sampled-softmax", sampler="log-uniform", replacement=False)
    h, t = data()
    ids = torch.tensor([t[0].item(), 3, 7, 1, 10])  # the first negative is an accidental hit for row 0
    q = log_uniform_probs(V)
    draws = 9
    expc = 1 - (1 - q) ** draws
    neg = Negatives(ids, expc[ids], draws)
    got = hd.loss_given(h, t, neg).item()
    total = 0.0
    for i in range(N):
        true = s_of(hd, h, i, t[i]) - math.log(expc[t[i]])
        logits = [true] + [s_of(hd, h, i, w) - math.log(expc[w]) for w in ids.tolist() if w != t[i]]
        total += math.log(sum(math.exp(x) for x in logits)) - true
    assert got == pytest.approx(total / N, abs=1e-10)


def test_sampled_softmax_all_hits_leave_only_the_target():
    hd = make("sampled-softmax", sampler="uniform", replacement=True)
    h, _ = data()
    t = torch.full((N,), 2)
    ids = torch.full((K,), 2)
    neg = Negatives(ids, torch.full((K,), K / V, dtype=torch.float64), K)
    assert hd.loss_given(h, t, neg).item() == pytest.approx(0.0, abs=1e-12)
    no_removal = make("sampled-softmax", sampler="uniform", replacement=True, remove_accidental_hits=False)
    assert no_removal.loss_given(h, t, neg).item() == pytest.approx(math.log(1 + K), abs=1e-10)


def test_per_example_negatives():
    hd = make("sampled-softmax", sampler="uniform", replacement=False, shared=False)
    h, t = data()
    neg = hd.sampler.sample(N, torch.Generator().manual_seed(0))
    assert neg.ids.shape == (N, K)
    got = hd.loss_given(h, t, neg).item()
    total = 0.0
    for i in range(N):
        e = neg.expected_count[i]
        et = 1 - (1 - 1 / V) ** float(neg.draws[i, 0])
        true = s_of(hd, h, i, t[i]) - math.log(et)
        logits = [true] + [s_of(hd, h, i, w) - math.log(e[j]) for j, w in enumerate(neg.ids[i].tolist()) if w != t[i]]
        total += math.log(sum(math.exp(x) for x in logits)) - true
    assert got == pytest.approx(total / N, abs=1e-10)


@pytest.mark.parametrize("learn", [False, True])
def test_nce_matches_brute_force(learn):
    hd = make("nce", sampler="unigram", alpha=0.75, log_z=1.5, learn_log_z=learn)
    h, t = data()
    ids = torch.tensor([0, 4, 4, 9, 11])
    neg = Negatives(ids, K * unigram_probs(COUNTS, 0.75)[ids], K)
    q = unigram_probs(COUNTS, 0.75)
    shift = lambda w: 1.5 + math.log(K * q[w])  # noqa: E731
    total = 0.0
    for i in range(N):
        total += -logsig(s_of(hd, h, i, t[i]) - shift(t[i]))
        total += -sum(logsig(-(s_of(hd, h, i, w) - shift(w))) for w in ids.tolist())
    loss = hd.loss_given(h, t, neg)
    assert loss.item() == pytest.approx(total / N, abs=1e-6)  # log Q was rounded to float32 once
    if learn:
        loss.backward()
        assert hd.log_z.grad is not None and hd.log_z.grad.abs() > 0


def test_nce_initial_bias_and_test_distribution():
    torch.manual_seed(0)
    hd = build_head({"type": "nce", "negatives": 3}, HeadContext(vocab_size=V, in_dim=D, unigram_counts=COUNTS))
    assert torch.allclose(hd.bias, torch.full((V,), -math.log(V)))
    h, _ = data()
    h = h.float()
    assert torch.allclose(hd.log_prob(h), torch.log_softmax(h @ hd.weight.T + hd.bias, 1), atol=1e-6)


@pytest.mark.parametrize("kind", ["neg", "neglm", "neglm-b"])
def test_negative_sampling_losses_match_brute_force(kind):
    hd = make(kind, sampler="unigram", alpha=1.0)
    assert (getattr(hd, "bias", None) is not None) == (kind == "neglm-b")
    h, t = data()
    ids = torch.tensor([1, 2, 3, 3, 0])
    neg = Negatives(ids, K * unigram_probs(COUNTS, 1.0)[ids], K)
    total = 0.0
    for i in range(N):
        total += -logsig(s_of(hd, h, i, t[i])) - sum(logsig(-s_of(hd, h, i, w)) for w in ids.tolist())
    assert hd.loss_given(h, t, neg).item() == pytest.approx(total / N, abs=1e-10)


@pytest.mark.parametrize("kind", ["neg", "neglm", "neglm-b"])
def test_test_time_distributions(kind):
    hd = make(kind, sampler="unigram", alpha=0.75)
    h, t = data()
    q = unigram_probs(COUNTS, 0.75)
    lp = hd.log_prob(h)
    for i in range(N):
        s = torch.tensor([s_of(hd, h, i, w) for w in range(V)], dtype=torch.float64)
        un = torch.exp(s) * (q if kind != "neg" else 1.0)  # Melamud et al.: exp(w . c) p^alpha(w), renormalised
        assert torch.allclose(lp[i].exp(), un / un.sum(), atol=1e-6)
    assert torch.allclose(hd.target_log_prob(h, t, chunk_size=4), lp.gather(1, t[:, None]).squeeze(1), atol=1e-6)


def test_neg_and_neglm_train_identically_and_differ_only_at_test_time():
    """NEGLM is NEG's training with another test rule (Melamud et al. 2017): from one seed the two heads
    start equal, draw the same negatives and get the same loss and gradients; at test time NEGLM's
    log-probabilities are NEG's plus log Q(w), renormalised per context."""
    neg, neglm = make("neg", sampler="unigram", alpha=1.0), make("neglm", sampler="unigram", alpha=1.0)
    assert torch.equal(neg.weight, neglm.weight)
    h, t = data()
    grads = []
    for hd in (neg, neglm):
        torch.manual_seed(5)
        loss = hd.loss(h, t)
        loss.backward()
        grads.append((loss.item(), hd.weight.grad.to_dense()))
    assert grads[0][0] == grads[1][0] and torch.equal(grads[0][1], grads[1][1])
    shift = neglm.log_prob(h) - neg.log_prob(h) - unigram_probs(COUNTS, 1.0).log()  # (N, V): constant per row
    assert torch.allclose(shift, shift[:, :1].expand_as(shift), atol=1e-10)
    assert not torch.allclose(neglm.log_prob(h), neg.log_prob(h), atol=1e-3)


def test_training_draws_from_the_sampler_and_is_seeded():
    hd = make("sampled-softmax", sampler="log-uniform")
    h, t = data()
    torch.manual_seed(3)
    a = hd.loss(h, t)
    torch.manual_seed(3)
    b = hd.loss(h, t)
    assert a.item() == b.item()
    a.backward()
    assert hd.weight.grad.is_sparse and hd.bias_col.grad.is_sparse  # sparse: the step never touches all of V
    touched = hd.weight.grad.coalesce().indices().unique().numel()
    assert touched <= K + N  # only target and negative rows get gradient
    dense = make("sampled-softmax", sampler="log-uniform", sparse=False)
    torch.manual_seed(3)
    dense.loss(h, t).backward()
    assert not dense.weight.grad.is_sparse
    assert torch.allclose(hd.weight.grad.to_dense(), dense.weight.grad, atol=1e-12)
    assert hd.sparse_params() == [hd.weight, hd.bias_col] and dense.sparse_params() == []


def test_adaptive_softmax_is_normalised_and_consistent():
    torch.manual_seed(0)
    hd = build_head({"type": "adaptive-softmax", "cutoffs": [3, 8], "div_value": 2.0},
                    HeadContext(vocab_size=V, in_dim=D)).double()
    h, t = data()
    lp = hd.log_prob(h)
    assert torch.allclose(torch.logsumexp(lp, 1), torch.zeros(N, dtype=lp.dtype), atol=1e-10)
    tlp = hd.target_log_prob(h, t, chunk_size=4)
    assert torch.allclose(tlp, lp.gather(1, t[:, None]).squeeze(1), atol=1e-10)
    assert hd.loss(h, t).item() == pytest.approx(-tlp.mean().item(), abs=1e-10)
    auto = build_head({"type": "adaptive-softmax"}, HeadContext(vocab_size=1000, in_dim=64))
    assert auto.asm.cutoffs == [50, 250, 1000]
    with pytest.raises(ValueError, match="projection .* is empty"):
        build_head({"type": "adaptive-softmax"}, HeadContext(vocab_size=1000, in_dim=8))
    with pytest.raises(ValueError, match="must be increasing integers"):
        build_head({"type": "adaptive-softmax", "cutoffs": [8, 3]}, HeadContext(vocab_size=V, in_dim=D))


def test_more_distinct_negatives_than_words_is_a_config_error():
    from pipeline_src.config import ConfigError

    with pytest.raises(ConfigError, match="sampled-softmax option 'negatives': cannot draw 12 distinct"):
        build_head({"type": "sampled-softmax", "negatives": 12, "sampler": "uniform"},
                   HeadContext(vocab_size=11, in_dim=4))


def test_nce_without_replacement_uses_the_expected_counts_of_the_draw():
    """TensorFlow's nce_loss and sampled_softmax_loss subtract log E[count] of the same draw: so do we."""
    hd = make("nce", sampler="unigram", alpha=0.75, replacement=False, log_z=0.5)
    h, t = data()
    neg = hd.sampler.sample(1, torch.Generator().manual_seed(3))
    q = unigram_probs(COUNTS, 0.75)
    expected = lambda w: 1 - (1 - float(q[w])) ** neg.draws  # noqa: E731
    assert neg.draws > K  # distinct negatives took more raw draws than k
    total = 0.0
    for i in range(N):
        total += -logsig(s_of(hd, h, i, t[i]) - 0.5 - math.log(expected(t[i])))
        total += -sum(logsig(-(s_of(hd, h, i, w) - 0.5 - math.log(expected(w)))) for w in neg.ids.tolist())
    assert hd.loss_given(h, t, neg).item() == pytest.approx(total / N, abs=1e-6)


def test_initial_bias_options_against_their_formulas():
    q = unigram_probs(COUNTS, 0.75)
    for kind, default in (("nce", -math.log(V)), ("neglm-b", 0.0), ("sampled-softmax", 0.0)):
        torch.manual_seed(0)
        hd = build_head({"type": kind, "negatives": K}, HeadContext(vocab_size=V, in_dim=D, unigram_counts=COUNTS))
        assert torch.allclose(hd.bias, torch.full((V,), default))  # each head's default is what it was
    torch.manual_seed(0)
    hd = build_head({"type": "neglm-b", "negatives": K, "bias_init": "nce"},
                    HeadContext(vocab_size=V, in_dim=D, unigram_counts=COUNTS))
    want = -math.log(V) - torch.log(K * q)  # NCE's initial logit -log|V| - log(k Q(w)), by hand
    assert torch.allclose(hd.bias.double(), want, atol=1e-6)
    unseen = COUNTS.clone()
    unseen[-1] = 0  # a word Q never draws starts like the rarest one it does: finite
    hd = build_head({"type": "neglm-b", "negatives": K, "bias_init": "nce"},
                    HeadContext(vocab_size=V, in_dim=D, unigram_counts=unseen))
    assert torch.isfinite(hd.bias).all() and hd.bias[-1] == hd.bias[-2]


def test_neglm_b_with_nces_initial_logit_is_nce_in_another_parametrisation():
    """NCE's training logit is h.w + b - log(k Q(w)); NEGLM-B's is h.w + b'. Started at b' = b - log(k Q(w))
    from one seed, the two draw the same negatives, take the same losses and the same steps (to float
    rounding), and end with the same test distribution: NEGLM-B's exp(h.w + b') Q(w) is NCE's exp(h.w + b)
    times the constant 1/k."""
    heads = []
    for kind, init in (("nce", "neg-log-v"), ("neglm-b", "nce")):
        torch.manual_seed(0)
        heads.append(build_head({"type": kind, "negatives": K, "bias_init": init, "sparse": False},
                                HeadContext(vocab_size=V, in_dim=D, unigram_counts=COUNTS)).double())
    nce, neglm_b = heads
    shift = math.log(K) + unigram_probs(COUNTS, 0.75).log()  # log(k Q(w))
    assert torch.allclose(neglm_b.bias, nce.bias - shift, atol=1e-6)  # the option, built in float32
    with torch.no_grad():  # the same start to the last bit of float64, to follow the steps exactly
        neglm_b.bias.copy_(nce.bias - shift)
    opts = [torch.optim.SGD(hd.parameters(), lr=0.5) for hd in heads]
    g = torch.Generator().manual_seed(7)
    for step in range(30):
        h, t = torch.randn(N, D, generator=g, dtype=torch.float64), torch.randint(0, V, (N,), generator=g)
        losses = []
        for hd, opt in zip(heads, opts):
            torch.manual_seed(100 + step)  # the same draw of negatives for both
            opt.zero_grad()
            loss = hd.loss(h, t)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[0] == pytest.approx(losses[1], rel=1e-12, abs=1e-12)
    assert torch.allclose(nce.weight, neglm_b.weight, atol=1e-12)
    assert torch.allclose(neglm_b.bias, nce.bias - shift, atol=1e-12)
    h, _ = data()
    assert torch.allclose(nce.log_prob(h), neglm_b.log_prob(h), atol=1e-10)  # the same test distribution
    torch.manual_seed(0)  # and from today's zero start, NEGLM-B is another model
    zero = build_head({"type": "neglm-b", "negatives": K}, HeadContext(vocab_size=V, in_dim=D, unigram_counts=COUNTS))
    assert not torch.allclose(zero.double().log_prob(h), nce.log_prob(h), atol=1e-2)
