"""Mixtape (pipeline_src/heads/mixtape.py) against a direct, unfused float64 implementation of the paper's
formulas (word by word, the sigmoid tree walked by the bits of the leaf's index), its gradients by finite
differences, and gate sharing's cost."""
import math

import pytest
import torch

from pipeline_src.heads import HeadContext, build_head
from pipeline_src.heads.mixtape import tree_mix


def _leaf_prob(l, k, leaves):
    """pi_k from node gates l (K-1,), walking root -> leaf by the bits of k (0 = left = sigmoid(l))."""
    p, node = 1.0, 0
    for bit in format(k, f"0{int(math.log2(leaves))}b"):
        g = torch.sigmoid(l[node])
        p, node = (p * g, 2 * node + 1) if bit == "0" else (p * (1 - g), 2 * node + 2)
    return p


def _reference_log_prob(head, g):
    """log p(. | g) for each row of g, one word at a time, from the paper's formulas."""
    k, v = head.opts.components, head.vocab_size
    freq = {int(x): i for i, x in enumerate(head.frequent_ids)}
    out = torch.empty(g.shape[0], v, dtype=torch.float64)
    for n in range(g.shape[0]):
        h = [torch.tanh(head.latent.weight[j * head.comp_dim:(j + 1) * head.comp_dim] @ g[n]
                        + head.latent.bias[j * head.comp_dim:(j + 1) * head.comp_dim]) for j in range(k)]
        z = torch.empty(v, dtype=torch.float64)
        for x in range(v):
            l = torch.stack([head.gate_ctx.weight[j] @ g[n] for j in range(k - 1)])  # shared: u_j . g
            if x in freq:
                f, d2 = freq[x], head.gate_dim
                for j in range(k - 1):
                    t = torch.tanh(head.gate_proj.weight[j * d2:(j + 1) * d2] @ g[n] + head.gate_proj.bias[j * d2:(j + 1) * d2])
                    l = l.clone()
                    l[j] = l[j] + head.gate_vec[f] @ t + head.gate_bias[f, j]
            z[x] = sum(_leaf_prob(l, c, k) * (h[c] @ head.weight[x]) for c in range(k)) + head.bias[x]
        out[n] = z - torch.logsumexp(z, 0)
    return out


def _head(k=4, share=0.3, v=13, d=5, counts=None, seed=0, **opts):
    torch.manual_seed(seed)
    counts = torch.arange(v, 0, -1, dtype=torch.float64) if counts is None else counts
    head = build_head({"type": "mixtape", "components": k, "frequent_share": share, "init_range": 0.5, **opts},
                      HeadContext(vocab_size=v, in_dim=d, unigram_counts=counts)).double()
    with torch.no_grad():  # the biases start at zero: give them values so the test sees them
        for p in (head.bias, head.gate_bias):
            p.normal_()
    return head


@pytest.mark.parametrize("k,share,gate_dim", [(2, 0.3, None), (4, 0.3, 2), (8, 0.5, 3), (4, 0.0, None), (4, 1.0, 1)])
def test_log_probs_equal_the_paper_s_formulas_word_by_word(k, share, gate_dim):
    head = _head(k, share, gate_dim=gate_dim)
    g = torch.randn(4, 5, dtype=torch.float64)
    with torch.no_grad():
        ours, ref = head.log_prob(g), _reference_log_prob(head, g)
    assert torch.allclose(ours, ref, atol=1e-12, rtol=0)
    t = torch.randint(0, 13, (4,))
    assert torch.allclose(head.target_log_prob(g, t, chunk_size=3), ref.gather(1, t[:, None]).squeeze(1), atol=1e-12)
    with torch.no_grad():
        assert head.loss(g, t).item() == pytest.approx(-ref.gather(1, t[:, None]).mean().item(), abs=1e-12)


def test_the_sigmoid_tree_mixes_as_the_paper_s_products_for_four_components():
    l = torch.randn(6, 3, 5, dtype=torch.float64)  # (n, K-1, words)
    c = torch.randn(6, 4, 5, dtype=torch.float64)  # (n, K, words)
    g = torch.sigmoid(l)
    paper = torch.stack([g[:, 0] * g[:, 1], g[:, 0] * (1 - g[:, 1]),
                         (1 - g[:, 0]) * g[:, 2], (1 - g[:, 0]) * (1 - g[:, 2])], dim=1)  # pi (n, K, words)
    assert torch.allclose(tree_mix(c, l), (paper * c).sum(1), atol=1e-14)
    for k in (2, 8, 16):  # the leaf weights are a distribution: mixing ones gives one
        assert torch.allclose(tree_mix(torch.ones(5, k, 3), torch.randn(5, k - 1, 3)), torch.ones(5, 3), atol=1e-6)


def test_gradients_match_finite_differences():
    head = _head(k=4, share=0.4, v=7, d=3)
    g = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    t = torch.randint(0, 7, (5,))
    params = [g, *head.parameters()]

    def loss(*ps):
        with torch.nn.utils.stateless._reparametrize_module(head, dict(zip([n for n, _ in head.named_parameters()], ps[1:]))):
            return head.loss(ps[0], t)

    assert torch.autograd.gradcheck(loss, tuple(params), eps=1e-6, atol=1e-7)


def test_the_frequent_words_are_the_most_frequent_by_train_count_whatever_their_ids():
    counts = torch.tensor([1.0, 50, 3, 90, 7, 2, 60, 4, 5, 6])
    head = _head(v=10, share=0.3, counts=counts)
    assert sorted(head.frequent_ids.tolist()) == [1, 3, 6]
    g = torch.randn(3, 5, dtype=torch.float64)
    with torch.no_grad():
        assert torch.allclose(head.log_prob(g), _reference_log_prob(head, g), atol=1e-12)


def test_gate_sharing_costs_one_softmax_plus_k_products_for_the_frequent_words():
    """Exact-evaluation MACs per token: projections + e V + Vf K e + Vf (K-1) d2; with no frequent words a
    Mixtape costs one softmax (plus its projections), and MoS's K softmaxes are the ceiling."""
    v, d, k = 10_000, 64, 4
    counts = torch.arange(v, 0, -1, dtype=torch.float64)
    ctx = HeadContext(vocab_size=v, in_dim=d, unigram_counts=counts)
    shared = build_head({"type": "mixtape", "components": k, "frequent_share": 0.0}, ctx)
    tenth = build_head({"type": "mixtape", "components": k, "frequent_share": 0.1}, ctx)
    mos = build_head({"type": "mos", "components": k}, ctx)
    proj = d * k * d + d * (k - 1) * 16 + d * (k - 1)
    assert shared.forward_macs(True) == proj + d * v
    assert tenth.forward_macs(True) == proj + d * v + 1000 * k * d + 1000 * (k - 1) * 16
    assert mos.forward_macs(True) / tenth.forward_macs(True) == pytest.approx(2.67, abs=0.01)  # (K V e) / (V e + 0.1 V K e + ...)
