"""Theory checks of the sampled objectives on a small known joint distribution p(c, w).

With enough dimensions (d >= V) the scores s(c, w) are unconstrained, so the optimum of each
*expected* objective (exact expectations over data and noise, no sampling noise) is known:
- NEG with Q = p(w): s = PMI(c, w) - log k, hence NEGLM's exp(s) Q(w) renormalised = p(w | c);
- NCE with log Z = 0: s = log p(w | c), i.e. the unnormalised scores self-normalise.
And sampled softmax's gradient approaches the full softmax gradient as the number of samples grows.
"""
import math

import torch
import torch.nn.functional as F

from pipeline_src.heads import HeadContext, build_head

C, V, K = 4, 6, 3


def joint() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    p = torch.rand(C, V, generator=g, dtype=torch.float64) ** 2 + 0.02
    return p / p.sum()


def fit_expected(head, ctx, loss_fn, steps=3000, lr=0.05):
    opt = torch.optim.Adam([ctx, *head.parameters()], lr=lr)
    for _ in range(steps):
        loss = loss_fn(head.scores(ctx))  # (C, V) scores of every word
        opt.zero_grad()
        loss.backward()
        opt.step()
    return head.scores(ctx).detach()


def _head(kind, counts, **opts):
    torch.manual_seed(0)
    return build_head({"type": kind, "negatives": K, "sampler": "unigram", "alpha": 1.0, **opts},
                      HeadContext(vocab_size=V, in_dim=V + 2, unigram_counts=counts)).double()


def test_neg_optimum_is_pmi_minus_log_k_and_neglm_recovers_p_w_given_c():
    p = joint()
    pc, pw = p.sum(1, keepdim=True), p.sum(0, keepdim=True)
    counts = (pw[0] * 1e6).round().long()  # Q = unigram = p(w) up to rounding
    head = _head("neglm", counts)
    q = head.log_q.exp()[None, :]
    ctx = torch.nn.Parameter(torch.randn(C, V + 2, dtype=torch.float64) * 0.1)

    def expected_neg(s):
        return -(p * F.logsigmoid(s)).sum() - K * (pc * q * F.logsigmoid(-s)).sum()

    s = fit_expected(head, ctx, expected_neg)
    pmi = torch.log(p / (pc * pw))
    assert torch.allclose(s, pmi - math.log(K), atol=2e-3)
    with torch.no_grad():
        assert torch.allclose(head.log_prob(ctx).exp(), p / pc, atol=1e-3)  # NEGLM recovers p(w | c)
        neg_test = torch.softmax(head.scores(ctx), 1)  # NEG's own test distribution does not
        assert (neg_test - p / pc).abs().max() > 0.05


def test_nce_scores_self_normalise():
    p = joint()
    pc = p.sum(1, keepdim=True)
    counts = torch.full((V,), 1000)  # uniform noise
    head = _head("nce", counts, log_z=0.0)
    log_kq = math.log(K) + head.log_q[None, :]
    ctx = torch.nn.Parameter(torch.randn(C, V + 2, dtype=torch.float64) * 0.1)

    def expected_nce(s):
        x = s - log_kq
        return -(p * F.logsigmoid(x)).sum() - K * (pc * head.log_q.exp()[None, :] * F.logsigmoid(-x)).sum()

    s = fit_expected(head, ctx, expected_nce)
    assert torch.allclose(s, torch.log(p / pc), atol=5e-3)  # unnormalised scores = log p(w | c)
    assert torch.allclose(torch.logsumexp(s, 1), torch.zeros(C, dtype=s.dtype), atol=5e-3)  # log Z ~ 0


def test_sampled_softmax_gradient_approaches_the_full_gradient():
    torch.manual_seed(0)
    v, d, n = 50, 8, 16
    counts = torch.arange(v, 0, -1) ** 2
    errors = []
    for k in (5, 50, 1000):
        head = build_head({"type": "sampled-softmax", "negatives": k, "sampler": "unigram", "alpha": 1.0,
                           "replacement": True}, HeadContext(vocab_size=v, in_dim=d, unigram_counts=counts)).double()
        g = torch.Generator().manual_seed(1)
        h = torch.randn(n, d, generator=g, dtype=torch.float64)
        t = torch.randint(0, v, (n,), generator=g)
        full = torch.autograd.grad(F.cross_entropy(F.linear(h, head.weight, head.bias), t), head.weight)[0]
        est = torch.zeros_like(full)
        draws = 200
        for r in range(draws):
            neg = head.sampler.sample(n, torch.Generator().manual_seed(100 + r))
            est += torch.autograd.grad(head.loss_given(h, t, neg), head.weight)[0] / draws
        errors.append(((est - full).norm() / full.norm()).item())
    assert errors[0] > errors[1] > errors[2] and errors[2] < errors[0] / 4, errors  # consistent as k grows
