"""The unargmaxable-word diagnostic (pipeline_src/evaluation/argmax.py): the exact LP against convex-hull vertices
(Qhull) and a constructed layer, the cheap check never wrong, every affine head's (W, b) the one its
distribution ranks words by, and the empirical check never reaching an unargmaxable word."""
import numpy as np
import pytest
import torch

from pipeline_src.evaluation.argmax import (
    argmax_diagnostic,
    cheap_argmaxable,
    diagnose,
    lp_margin,
    perceptron_argmaxable,
)
from pipeline_src.heads import HeadContext, build_head, registry


def test_a_word_inside_the_hull_of_others_with_equal_bias_is_unargmaxable():
    w = np.array([[1.0, 1], [1, -1], [-1, 1], [-1, -1], [0, 0], [0.3, -0.2]])
    counts = np.array([100, 50, 40, 30, 20, 1])
    out = diagnose(w, np.zeros(6), counts)
    assert out["unargmaxable_ids"] == [4, 5] and out["unargmaxable_share"] == pytest.approx(2 / 6)
    assert out["by_band"] == {"frequent": 0, "middle": 1, "rare": 1}  # counts 20 and 1
    # a large enough bias lifts the centre word out: it wins near c = 0
    b = np.zeros(6)
    b[4] = 0.5
    assert lp_margin(w, b, 4) == pytest.approx(0.5) and diagnose(w, b, counts)["unargmaxable_ids"] == [5]
    # a word whose bias is -inf (NEGLM's log Q of a word unseen in train) is never predicted, and never competes:
    # with the corner (1, 1) gone, (0.3, -0.2) becomes a vertex, and the centre lies on an edge: never strictly first
    b = np.zeros(6)
    b[0] = -np.inf
    out = diagnose(w, b, counts)
    assert out["unargmaxable_ids"] == [0, 4] and out["never_predicted"] == 1


@pytest.mark.parametrize("d,seed", [(2, 0), (3, 1), (4, 2)])
def test_without_bias_the_argmaxable_words_are_the_convex_hull_s_vertices(d, seed):
    from scipy.spatial import ConvexHull

    w = np.random.default_rng(seed).normal(size=(60, d))
    vertices = set(ConvexHull(w).vertices.tolist())
    out = diagnose(w, np.zeros(60), np.ones(60))
    assert set(range(60)) - set(out["unargmaxable_ids"]) == vertices
    assert out["lp_solved"] > 0  # the interior words needed the LP
    # the cheap checks are sufficient only: whatever they accept is a vertex
    assert set(np.flatnonzero(cheap_argmaxable(w, np.zeros(60))).tolist()) <= vertices
    walked = perceptron_argmaxable(w, np.zeros(60), np.arange(60))
    assert set(np.flatnonzero(walked).tolist()) <= vertices and walked.sum() >= len(vertices) // 2


def _affine_heads():
    return sorted(n for n, c in registry().items()
                  if c.affine_logits is not registry()["hierarchical-softmax"].affine_logits)


@pytest.mark.parametrize("name", _affine_heads())
def test_an_affine_head_ranks_its_words_by_its_w_and_b(name):
    """argmax log p(. | h) = argmax (W c + b) over the words, c the head's own context of h."""
    torch.manual_seed(0)
    spec = {"type": name, **({"negatives": 5} if "negatives" in registry()[name].Options.__dataclass_fields__ else {})}
    if name == "adaptive-softmax":
        spec["cutoffs"] = [8]
    head = build_head(spec, HeadContext(vocab_size=30, in_dim=6, unigram_counts=torch.arange(30, 0, -1).double()))
    with torch.no_grad():
        for p in head.parameters():
            p.normal_()
        h = torch.randn(200, 6) * 3
        w, b, words = head.affine_logits()
        c = head.context(h) if hasattr(head, "context") else h
        z = c @ w.T + b
        top = head.log_prob(h).argmax(1)
    if name == "adaptive-softmax":  # a word that wins the head cluster wins overall
        wins = z.argmax(1) < words
        assert wins.any() and torch.equal(top[wins], z.argmax(1)[wins])
    else:
        assert words == 30 and torch.equal(top, z.argmax(1))


def test_the_empirical_check_never_reaches_a_word_the_lp_calls_unargmaxable():
    torch.manual_seed(0)
    head = build_head({"type": "softmax"}, HeadContext(vocab_size=40, in_dim=2))
    with torch.no_grad():  # a word at the centre of a ring: unargmaxable
        angles = torch.linspace(0, 2 * np.pi, 40)
        head.weight.copy_(torch.stack([angles.cos(), angles.sin()], 1))
        head.weight[7] = 0.0
        head.bias.zero_()

    class Encoder(torch.nn.Module):
        def forward(self, x, hidden):
            return torch.stack([torch.sin(x * 1.3), torch.cos(x * 0.7)], -1) * 5, hidden

    model = torch.nn.Module()
    model.encoder, model.head = Encoder(), head
    model.init_state = lambda bs, dev: None
    data = torch.randint(0, 40, (300, 4))
    out = argmax_diagnostic(model, data, 10, np.arange(40, 0, -1))
    assert out["exact"]["unargmaxable_ids"] == [7]
    assert 1 <= out["reached"] <= 39 and set(out["reached_by_band"]) == {"frequent", "middle", "rare"}
    from pipeline_src.evaluation.argmax import reached
    assert not reached(model, data, 10, 40)[7]


def test_a_mixture_says_why_the_exact_test_is_not_defined():
    head = build_head({"type": "mos", "components": 2}, HeadContext(vocab_size=10, in_dim=3))
    assert head.affine_logits() is None and "mixture" in head.affine_why
