"""MoS, MoC, Sigsoftmax, MoSS, PLIF, monotonic MLP against direct implementations of the papers' formulas."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pipeline_src.data.linalg import numerical_rank
from pipeline_src.heads import HeadContext, build_head

V, D, N = 13, 5, 9


def head(kind, tied=None, **opts):
    torch.manual_seed(0)
    return build_head({"type": kind, **opts}, HeadContext(vocab_size=V, in_dim=D, tied_weight=tied)).double()


def data(n=N, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, D, generator=g, dtype=torch.float64), torch.randint(0, V, (n,), generator=g)


def mixture_reference(hd, g, sig=False, contexts=False):
    """Probabilities by the papers' formulas, one component at a time, no log-space tricks."""
    pi = torch.softmax(g @ hd.prior.weight.T, dim=1)  # (n, K)
    hk = torch.tanh(g @ hd.latent.weight.T + hd.latent.bias).view(len(g), -1, D)  # (n, K, d)
    if contexts:  # MoC: mix contexts, then one softmax
        return torch.softmax((pi[:, :, None] * hk).sum(1) @ hd.weight.T + hd.bias, dim=1)
    p = torch.zeros(len(g), V, dtype=g.dtype)
    for k in range(pi.shape[1]):
        z = hk[:, k] @ hd.weight.T + hd.bias
        q = torch.exp(z) * torch.sigmoid(z) if sig else torch.exp(z)
        p += pi[:, k:k + 1] * q / q.sum(1, keepdim=True)
    return p


def plif_reference(hd, z):
    """np.interp on the knots, with linear extrapolation by the edge slopes."""
    slopes = F.softplus(hd.fn_slope_params).detach().numpy()
    T, M = hd.opts.limit, hd.opts.knots
    knots = np.linspace(-T, T, M + 1)
    values = np.concatenate([[-T], -T + (2 * T / M) * np.cumsum(slopes)])
    x = z.detach().numpy()
    y = np.interp(x, knots, values)
    y = np.where(x < -T, values[0] + slopes[0] * (x + T), y)
    y = np.where(x > T, values[-1] + slopes[-1] * (x - T), y)
    return torch.from_numpy(y)


REFERENCES = {
    "mos": lambda hd, g: mixture_reference(hd, g),
    "moss": lambda hd, g: mixture_reference(hd, g, sig=True),
    "moc": lambda hd, g: mixture_reference(hd, g, contexts=True),
    "sigsoftmax": lambda hd, g: (lambda z: torch.exp(z) * torch.sigmoid(z) / (torch.exp(z) * torch.sigmoid(z)).sum(1, keepdim=True))(g @ hd.weight.T + hd.bias),
    "plif": lambda hd, g: torch.softmax(plif_reference(hd, g @ hd.weight.T + hd.bias), 1),
    "monotonic-mlp": lambda hd, g: torch.softmax(
        (lambda z: F.softplus(hd.fn_linear) * z + (torch.tanh(z[..., None] * F.softplus(hd.fn_in) + hd.fn_offset)
                                                   * F.softplus(hd.fn_out)).sum(-1))(g @ hd.weight.T + hd.bias), 1),
    "wide-softmax": lambda hd, g: torch.softmax(torch.tanh(g @ hd.widen.weight.T + hd.widen.bias) @ hd.weight.T
                                                + hd.bias, 1),
}
OPTS = {"mos": {"components": 3, "chunk_size": 4}, "moss": {"components": 3, "chunk_size": 4},
        "moc": {"components": 3, "chunk_size": 4}, "sigsoftmax": {"chunk_size": 4},
        "plif": {"knots": 8, "limit": 2.0, "init_noise": 0.5, "chunk_size": 4},
        "monotonic-mlp": {"hidden": 3, "limit": 2.0, "chunk_size": 4}, "wide-softmax": {"width": 7, "chunk_size": 4}}


def _perturb(hd):
    with torch.no_grad():  # move every parameter off its (often symmetric) initial value
        for p in hd.parameters():
            p.add_(0.3 * torch.randn_like(p))


@pytest.mark.parametrize("kind", sorted(REFERENCES))
def test_head_matches_the_paper_formula_and_normalises(kind):
    hd = head(kind, **OPTS[kind])
    _perturb(hd)
    hd.eval()
    g, t = data()
    g = g * 3  # logits beyond the PLIF grid too
    lp = hd.log_prob(g)
    assert lp.shape == (N, V)
    assert torch.allclose(torch.logsumexp(lp, 1), torch.zeros(N, dtype=lp.dtype), atol=1e-10)
    assert torch.allclose(lp.exp(), REFERENCES[kind](hd, g), atol=1e-10)
    tlp = hd.target_log_prob(g, t)
    assert torch.allclose(tlp, lp.gather(1, t[:, None]).squeeze(1), atol=1e-10)
    assert torch.allclose(hd.loss(g, t), -tlp.mean(), atol=1e-10)


@pytest.mark.parametrize("kind", sorted(REFERENCES))
def test_head_gradcheck(kind):
    hd = head(kind, **OPTS[kind])
    _perturb(hd)
    hd.eval()
    g, t = data(n=5)
    g.requires_grad_()
    params = [p for p in hd.parameters()]
    names = [n for n, _ in hd.named_parameters()]

    def fn(g, *ps):
        with torch.nn.utils.stateless._reparametrize_module(hd, dict(zip(names, ps))):
            return hd.loss(g, t)

    assert torch.autograd.gradcheck(fn, (g, *[p.detach().clone().requires_grad_() for p in params]))


@pytest.mark.parametrize("kind", ["moss", "sigsoftmax"])
@pytest.mark.parametrize("shift", [0.0, -100.0])  # every logit below -30: the log-sigmoid form runs instead
def test_sigsoftmax_components_are_exact_on_both_paths(kind, shift):
    """The fused sigsoftmax block takes softmax(z + log sigmoid z) as exp(z - m) sigmoid(z) / S; where
    sigmoid(max z) could underflow it falls back to the log-sigmoid form. Both equal the log-space formula,
    loss and gradients."""
    from pipeline_src.heads.kernels import sig_logits

    hd = head(kind, **OPTS[kind])
    _perturb(hd)
    with torch.no_grad():
        hd.bias.add_(shift)
    hd.eval()
    g, t = data(n=7)
    g = (3 * g).requires_grad_()
    if kind == "sigsoftmax":
        ref = F.log_softmax(sig_logits(g @ hd.weight.T + hd.bias), 1).gather(1, t[:, None]).squeeze(1)
    else:
        ref = hd.log_prob(g).gather(1, t[:, None]).squeeze(1)  # log-space, dense
    logits = (hd.mixture(g)[1] if kind == "moss" else g) @ hd.weight.T + hd.bias  # (n, [K,] V)
    assert (shift == 0) == bool((logits.amax(-1) > -30).all())  # which path runs
    assert torch.allclose(hd.target_log_prob(g, t), ref, atol=1e-10)
    loss = hd.loss(g, t)
    assert torch.allclose(loss, -ref.mean(), atol=1e-10)
    got = torch.autograd.grad(loss, [g, *hd.parameters()])
    want = torch.autograd.grad(-ref.mean(), [g, *hd.parameters()], allow_unused=True)
    for a, b in zip(got, want):
        assert torch.allclose(a, torch.zeros_like(a) if b is None else b, atol=1e-10)


@pytest.mark.parametrize("kind", ["mos", "moss", "plif", "sigsoftmax", "monotonic-mlp"])
def test_chunked_loss_equals_unchunked_with_gradients(kind):
    a = head(kind, **dict(OPTS[kind], chunk_size=2))
    b = head(kind, **dict(OPTS[kind], chunk_size=1000))
    b.load_state_dict(a.state_dict())
    g, t = data(n=11)
    ga, gb = g.clone().requires_grad_(), g.clone().requires_grad_()
    la, lb = a.loss(ga, t), b.loss(gb, t)
    la.backward()
    lb.backward()
    assert abs(la.item() - lb.item()) < 1e-12
    assert torch.allclose(ga.grad, gb.grad, atol=1e-12)
    for (n, pa), pb in zip(a.named_parameters(), b.parameters()):
        assert torch.allclose(pa.grad, pb.grad, atol=1e-12), n


def test_chunk_recomputation_reuses_the_dropout_masks():
    """chunked_mean_nll recomputes each chunk in backward; with dropout it must see the forward's masks."""
    from pipeline_src.heads.kernels import chunked_mean_nll

    w = torch.randn(V, D, dtype=torch.float64, requires_grad=True)

    def target_lp(h, t):
        lp = F.log_softmax(F.dropout(h, 0.5, training=True) @ w.T, 1)
        return lp.gather(1, t[:, None]).squeeze(1)

    g, t = data(n=6)
    torch.manual_seed(5)
    la = chunked_mean_nll(target_lp, g, t, 2)  # checkpointed chunks
    (ga,) = torch.autograd.grad(la, w)
    torch.manual_seed(5)
    lb = -torch.cat([target_lp(g[s:s + 2], t[s:s + 2]) for s in range(0, 6, 2)]).mean()  # plain autograd
    (gb,) = torch.autograd.grad(lb, w)
    assert la.item() == pytest.approx(lb.item(), abs=1e-12)
    assert torch.allclose(ga, gb, atol=1e-12)


def test_mos_with_one_component_is_a_softmax_over_its_context():
    hd = head("mos", components=1)
    _perturb(hd)
    g, _ = data()
    _, h = hd.mixture(g)
    assert torch.allclose(hd.log_prob(g), F.log_softmax(h[:, 0] @ hd.weight.T + hd.bias, 1), atol=1e-12)


def test_plif_is_strictly_increasing_and_the_identity_at_init():
    hd = head("plif", knots=50, limit=3.0)
    z = torch.linspace(-6, 6, 2001, dtype=torch.float64)
    assert torch.allclose(hd.f(z), z, atol=1e-5)  # no init noise: the identity (float32 init), also outside
    noisy = head("plif", knots=50, limit=3.0, init_noise=0.3)
    fz = noisy.f(z)
    assert (fz[1:] > fz[:-1]).all()
    assert not torch.allclose(fz, z, atol=1e-3)


def test_monotonic_mlp_is_increasing_and_near_identity_at_init():
    hd = head("monotonic-mlp", hidden=8, limit=5.0)
    z = torch.linspace(-10, 10, 1001, dtype=torch.float64)
    fz = hd.f(z)
    assert (fz[1:] > fz[:-1]).all() and (fz - z).abs().max() < 0.03


def test_tied_mixture_shares_the_embedding():
    emb = torch.nn.Embedding(V, D).double()
    hd = head("mos", tied=emb.weight, components=2)
    assert hd.weight is emb.weight


@pytest.mark.parametrize("kind", ["mos", "moc"])
def test_tied_mixture_with_a_narrower_embedding_matches_the_formula(kind):
    """AWD-LSTM-MoS: the last layer (d = 5 here, 620 there) is wider than the tied embedding (e = 3, 280):
    the latent maps d -> K x e and each component is a softmax over e-dimensional contexts."""
    torch.manual_seed(0)
    emb = torch.nn.Embedding(V, 3).double()
    hd = build_head({"type": kind, "components": 2}, HeadContext(vocab_size=V, in_dim=D, tied_weight=emb.weight))
    hd = hd.double().eval()
    assert hd.weight is emb.weight and hd.latent.weight.shape == (2 * 3, D)
    g, t = data()
    pi = torch.softmax(g @ hd.prior.weight.T, dim=1)  # (n, K)
    hk = torch.tanh(g @ hd.latent.weight.T + hd.latent.bias).view(len(g), 2, 3)  # (n, K, e)
    if kind == "mos":
        want = (pi[:, :, None] * torch.softmax(hk @ emb.weight.T + hd.bias, dim=-1)).sum(1)
    else:
        want = torch.softmax((pi[:, :, None] * hk).sum(1) @ emb.weight.T + hd.bias, dim=1)
        assert hd.rank_dim == 3
    torch.testing.assert_close(hd.log_prob(g).exp(), want)
    torch.testing.assert_close(hd.loss(g, t), -want[torch.arange(len(t)), t].log().mean())
    assert hd.flops_per_token(train=False) == 2.0 * (D * 2 + 2 * D * 3 + (1 if kind == "moc" else 2) * 3 * V)


def test_rank_of_log_probs_softmax_moc_bounded_mos_not():
    """The bottleneck: over many contexts, softmax and MoC log-prob matrices have rank <= d + 1."""
    v, d, n = 60, 4, 200
    g = torch.randn(n, d, dtype=torch.float64)
    ranks = {}
    for kind in ("softmax", "moc", "mos", "sigsoftmax", "plif"):
        torch.manual_seed(0)
        opts = {"components": 5} if kind in ("moc", "mos") else ({"init_noise": 1.0, "knots": 20, "limit": 1.0} if kind == "plif" else {})
        hd = build_head({"type": kind, **opts}, HeadContext(vocab_size=v, in_dim=d)).double().eval()
        with torch.no_grad():
            hd.weight.mul_(10)  # logits spread over the PLIF grid
            ranks[kind] = numerical_rank(hd.log_prob(g).numpy())[0]
    assert ranks["softmax"] <= d + 1 and ranks["moc"] <= d + 1
    assert ranks["mos"] > 3 * (d + 1) and ranks["sigsoftmax"] > d + 1 and ranks["plif"] > d + 1


def test_param_groups_give_plif_its_own_learning_rate():
    from pipeline_src.config import ModelConfig, TrainConfig
    from pipeline_src.training.model import LanguageModel
    from pipeline_src.training.optim import build_optimizer

    m = LanguageModel(V, ModelConfig(8, 8, 1, 0.0, True), {"type": "plif", "knots": 10, "lr_scale": 0.1})
    tc = TrainConfig(epochs=1, batch_size=2, bptt=3, optimizer="sgd", lr=2.0, clip=None, lr_decay=2, eval_batch_size=1)
    opt = build_optimizer(m, tc)
    assert [g["lr"] for g in opt.param_groups] == [2.0, pytest.approx(0.2)]
    assert opt.param_groups[1]["params"] == [m.head.fn_slope_params]
    assert sum(len(g["params"]) for g in opt.param_groups) == len(list(m.parameters()))
    assert math.isclose(sum(p.numel() for g in opt.param_groups for p in g["params"]), m.num_params())


def test_plif_fused_loss_is_exact_in_float64_with_knots_not_representable():
    """Knot positions idx * delta - limit must be formed in z's dtype: int64 x float gives float32."""
    hd = head("plif", knots=7, limit=2.3, init_noise=0.5, chunk_size=4)  # delta = 4.6 / 7, not a binary fraction
    _perturb(hd)
    hd.eval()
    g, t = data()
    assert abs(hd.loss(g, t).item() + hd.target_log_prob(g, t).mean().item()) < 1e-12


@pytest.mark.parametrize("kind", ["plif", "monotonic-mlp"])
def test_a_learnt_f_of_a_billion_keeps_its_log_probabilities_in_float32(kind):
    """The third probe's PLIF with lr_scale 1e9 learnt slopes of ~4e8: f(z) ~ 8e9, where float32's spacing is
    1024, and z_t - logsumexp(z) lost the whole log-probability: train loss 0.0000 and a test perplexity of 1.00,
    below the synthetic truth's 3.05. The loss and the evaluation subtract the row's max first; both must equal
    log_softmax in float64 of the same float32 f values (here a 13-word near-tie: about log 13 nats)."""
    torch.manual_seed(0)
    hd = build_head({"type": kind, "chunk_size": 4, **({"knots": 8, "limit": 2.0} if kind == "plif" else
                                                        {"hidden": 3, "limit": 2.0})},
                    HeadContext(vocab_size=V, in_dim=D))
    with torch.no_grad():
        if kind == "plif":
            hd.fn_slope_params.fill_(4e8)  # softplus(4e8) = 4e8: f(z) = -2 + 0.5 * 4e8 * (knot + offset)
        else:
            hd.fn_linear.fill_(4e8)  # f(z) ~ 4e8 z: the logits spread by 4e8 per unit
        hd.weight.mul_(1e-9)  # z within 1e-9 of the bias: f nearly tied across words, as in the probe
        hd.bias.fill_(1.3)
    g, t = data()
    g = g.float()
    with torch.no_grad():
        y = hd.f(F.linear(g, hd.weight, hd.bias)).double()  # the float32 f values, exactly
        want = torch.log_softmax(y, 1)[torch.arange(N), t]
        assert want.mean().item() < -1.0  # the near-tie: no word is certain
        got = hd.target_log_prob(g, t).double()
    assert torch.allclose(got, want, atol=1e-4), (got, want)
    assert abs(hd.loss(g, t).item() + want.mean().item()) < 1e-4
