"""Hierarchical, differentiated and self-normalised softmax (Chen, Grangier & Auli 2016's other strategies)
against direct float64 implementations of their formulas, on several shapes: exact log-probabilities that sum
to one, the training loss, and gradients by finite differences."""
import math
from unittest.mock import patch

import pytest
import torch
import torch.nn.functional as F

from pipeline_src.heads import HeadContext, build_head
from pipeline_src.heads.hierarchical import frequency_classes
from pipeline_src.heads.kernels import EVAL_COLS, linear_score_and_log_z
from pipeline_src.io.errors import ConfigError

SHAPES = [(37, 5, 9), (200, 8, 33), (1000, 6, 17)]  # (V, d, N)


def _ctx(v, d, zipf=True):
    counts = (1000.0 / torch.arange(1, v + 1)).floor() if zipf else torch.full((v,), 5.0)  # frequency-sorted
    return HeadContext(vocab_size=v, in_dim=d, unigram_counts=counts)


def _data(v, d, n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g, dtype=torch.float64), torch.randint(0, v, (n,), generator=g)


def _hsm_reference(head, h):
    """p(w | h) = softmax(h Wc^T + bc)[c(w)] * softmax over w's class of (h W^T + b), word by word."""
    v = head.vocab_size
    class_p = torch.softmax(h @ head.class_weight.T + head.class_bias, dim=1)
    out = torch.empty(h.shape[0], v, dtype=torch.float64)
    for w in range(v):
        c = int(head.word_class[w])
        members = [u for u in range(v) if int(head.word_class[u]) == c]
        logits = h @ head.weight[members].T + head.bias[members]
        out[:, w] = class_p[:, c] * torch.softmax(logits, dim=1)[:, members.index(w)]
    return out.log()


@pytest.mark.parametrize("v,d,n", SHAPES[:2])
@pytest.mark.parametrize("clustering", ["mass", "count"])
def test_hierarchical_softmax_equals_its_two_level_formula(v, d, n, clustering):
    torch.manual_seed(v)
    head = build_head({"type": "hierarchical-softmax", "clustering": clustering}, _ctx(v, d)).double()
    with torch.no_grad():
        head.class_bias.normal_()
        head.bias.normal_()
    h, t = _data(v, d, n)
    want = _hsm_reference(head, h)
    got = head.log_prob(h)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-10)
    assert torch.allclose(torch.logsumexp(got, 1), torch.zeros(n, dtype=torch.float64), atol=1e-12)
    torch.testing.assert_close(head.target_log_prob(h, t, chunk_size=4), want.gather(1, t[:, None]).squeeze(1),
                               rtol=0, atol=1e-10)
    torch.testing.assert_close(head.loss(h, t), -want.gather(1, t[:, None]).mean(), rtol=0, atol=1e-10)


def test_hierarchical_softmax_gradients_by_finite_differences_and_sparse_equals_dense():
    torch.manual_seed(0)
    head = build_head({"type": "hierarchical-softmax", "classes": 4, "sparse": False}, _ctx(23, 3)).double()
    h, t = _data(23, 3, 7)
    h.requires_grad_(True)
    params = [head.class_weight, head.class_bias, head.weight, head.bias_col]
    assert torch.autograd.gradcheck(lambda x, *p: head.loss(x, t), (h, *params))
    sparse = build_head({"type": "hierarchical-softmax", "classes": 4}, _ctx(23, 3)).double()
    sparse.load_state_dict(head.state_dict())
    assert [p is q for p, q in zip(sparse.sparse_params(), [sparse.weight, sparse.bias_col])] == [True, True]
    head.loss(h, t).backward()
    sparse.loss(h.detach(), t).backward()
    assert sparse.weight.grad.is_sparse and head.sparse_params() == []
    touched = torch.unique(sparse.weight.grad.coalesce().indices()[0])
    assert set(touched.tolist()) == {u for u in range(23) if int(sparse.word_class[u]) in set(sparse.word_class[t].tolist())}
    torch.testing.assert_close(sparse.weight.grad.to_dense(), head.weight.grad, rtol=0, atol=1e-14)
    torch.testing.assert_close(sparse.bias_col.grad.to_dense(), head.bias_col.grad, rtol=0, atol=1e-14)


def test_frequency_classes_bin_the_train_mass_and_are_saved_with_the_run():
    v = 1000
    counts = (1e6 / torch.arange(1, v + 1)).floor()  # Zipf: the first word alone outweighs 1/C
    bounds = frequency_classes(counts, v, 32, "mass")
    assert bounds[0] == 0 and bounds[-1] == v and (torch.diff(bounds) > 0).all()
    mass = torch.stack([counts[s:e].sum() for s, e in zip(bounds[:-1], bounds[1:])]) / counts.sum()
    sizes = torch.diff(bounds)
    last_word = counts[bounds[1:] - 1] / counts.sum()
    assert (mass - last_word < 1 / 32).all()  # a class passes 1/C of the mass by its last word at most ...
    before = (counts.cumsum(0) - counts) / counts.sum()
    bins = (before * 32).floor()
    starts = bounds[1:-1]
    assert (bins[starts] > bins[starts - 1]).all()  # ... and a new class starts where the mass crosses a k/C
    assert int((torch.diff(bins) > 0).sum()) == len(starts)  # at every such crossing
    assert len(bounds) - 1 < 32 and sizes[0] == 1 and sizes[-1] > sizes[0]  # empty classes dropped; rare words share
    assert torch.equal(frequency_classes(counts, v, 32, "count"), torch.linspace(0, v, 33).round().long())
    head = build_head({"type": "hierarchical-softmax"}, _ctx(v, 4))
    assert head.n_classes <= round(math.sqrt(v)) and {"bounds", "word_class"} <= set(head.state_dict())
    with pytest.raises(ConfigError, match="needs the train counts"):
        build_head({"type": "hierarchical-softmax"}, HeadContext(vocab_size=10, in_dim=2))


@pytest.mark.parametrize("v,d,n", SHAPES)
def test_differentiated_softmax_is_one_softmax_over_band_logits_from_context_slices(v, d, n):
    torch.manual_seed(d)
    head = build_head({"type": "differentiated-softmax"}, _ctx(v, d)).double()
    with torch.no_grad():
        head.bias.normal_()
    h, t = _data(v, d, n)
    edges, slices = head.edges, head.slices
    assert slices[-1] == d and slices[1] == max(1, d // 2) and edges == [0, v // 20, v // 4, v]
    big = torch.zeros(v, d, dtype=torch.float64)  # the block-diagonal output matrix, written out
    for (s, e), (a, b), w in zip(zip(edges, edges[1:]), zip(slices, slices[1:]), head.weights):
        big[s:e, a:b] = w
    want = torch.log_softmax(h @ big.T + head.bias, dim=1)
    torch.testing.assert_close(head.log_prob(h), want, rtol=0, atol=1e-12)
    torch.testing.assert_close(head.loss(h, t), F.cross_entropy(h @ big.T + head.bias, t), rtol=0, atol=1e-12)
    for cols in (EVAL_COLS, 7):  # exact evaluation, blocked over each band's words: one block, then many
        with patch.object(linear_score_and_log_z, "__defaults__", (cols,)):
            torch.testing.assert_close(head.target_log_prob(h, t, chunk_size=4), want.gather(1, t[:, None]).squeeze(1),
                                       rtol=0, atol=1e-12)
    assert head.forward_macs(exact=True) == sum((e - s) * (b - a) for s, e, a, b in
                                                zip(edges, edges[1:], slices, slices[1:]))


def test_differentiated_softmax_gradients_and_bad_widths():
    torch.manual_seed(1)
    head = build_head({"type": "differentiated-softmax", "cutoffs": [3, 9], "widths": [3, 2, 1],
                       "chunk_size": 4}, _ctx(20, 6)).double()
    h, t = _data(20, 6, 9)
    h.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x, *p: head.loss(x, t), (h, *head.parameters()))
    with pytest.raises(ConfigError, match="summing to the head input d = 6"):
        build_head({"type": "differentiated-softmax", "cutoffs": [3, 9], "widths": [3, 2, 2]}, _ctx(20, 6))


@pytest.mark.parametrize("v,d,n", SHAPES)
def test_self_normalised_devlin_is_cross_entropy_plus_alpha_log_z_squared(v, d, n):
    torch.manual_seed(n)
    head = build_head({"type": "self-normalised-softmax", "alpha": 0.3, "chunk_size": 5}, _ctx(v, d)).double()
    h, t = _data(v, d, n)
    logits = h @ head.weight.T + head.bias
    log_z = torch.logsumexp(logits, 1)
    want = (log_z - logits.gather(1, t[:, None]).squeeze(1) + 0.3 * log_z ** 2).mean()
    torch.testing.assert_close(head.loss(h, t), want, rtol=0, atol=1e-12)
    score, lz = head.self_normalisation(h, t)
    torch.testing.assert_close(score - lz, torch.log_softmax(logits, 1).gather(1, t[:, None]).squeeze(1),
                               rtol=0, atol=1e-12)
    torch.testing.assert_close(lz, log_z, rtol=0, atol=1e-12)


@pytest.mark.parametrize("v,d,n", SHAPES)
def test_self_normalised_infrequent_penalises_a_gamma_share_of_rows_rescaled(v, d, n):
    torch.manual_seed(n)
    head = build_head({"type": "self-normalised-softmax", "variant": "infrequent", "alpha": 0.5, "gamma": 0.25},
                      _ctx(v, d)).double()
    h, t = _data(v, d, n)
    torch.manual_seed(7)
    got = head.loss(h, t)
    torch.manual_seed(7)  # the same draw of rows
    rows = torch.randperm(n)[:max(1, round(0.25 * n))]
    logits = h @ head.weight.T + head.bias
    log_z = torch.logsumexp(logits[rows], 1)
    want = (-logits.gather(1, t[:, None]).sum() + 0.5 / 0.25 * (log_z ** 2).sum()) / n
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    assert not head.trains_exact_likelihood


def test_self_normalised_gradients_by_finite_differences():
    for variant in ("devlin", "infrequent"):
        torch.manual_seed(2)
        head = build_head({"type": "self-normalised-softmax", "variant": variant, "gamma": 0.5, "chunk_size": 3},
                          _ctx(15, 4)).double()
        h, t = _data(15, 4, 8)
        h.requires_grad_(True)

        def f(x, *p):
            torch.manual_seed(3)  # every evaluation draws the same rows
            return head.loss(x, t)

        assert torch.autograd.gradcheck(f, (h, *head.parameters())), variant


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-6), (torch.float64, 1e-12)])
def test_self_normalised_infrequent_s_fused_loss_equals_its_autograd_path(dtype, tol):
    """The fused objective (one (V, d) gradient, the targets' scores by index_add) against the same objective through
    autograd on the same draw of rows: loss and every gradient, with repeated targets and chunks of 4 of 15 rows."""
    head = build_head({"type": "self-normalised-softmax", "variant": "infrequent", "alpha": 1.0, "gamma": 0.3,
                       "chunk_size": 4}, _ctx(50, 6)).to(dtype)
    h, t = _data(50, 6, 50)
    h = h.to(dtype).requires_grad_()
    t[:10] = 3
    params = [h, *head.parameters()]
    out = []
    for fn in (head.loss, head._infrequent_autograd):
        torch.manual_seed(1)
        loss = fn(h, t)
        out.append((loss, torch.autograd.grad(loss, params)))
    (ours, g_ours), (ref, g_ref) = out
    assert ours.item() == pytest.approx(ref.item(), rel=tol, abs=tol)
    for a, b in zip(g_ours, g_ref):
        assert (a - b).abs().max().item() <= tol * max(1.0, b.abs().max().item())


def _within_loop(head, h, t):
    """The within-class term written out class by class (the form the head had before its size bins): for each
    class present, log_softmax over its words' logits, read at the target."""
    cls = head.word_class[t]
    out = torch.empty(len(t), dtype=h.dtype)
    for c in torch.unique(cls).tolist():
        rows = torch.nonzero(cls == c).squeeze(1)
        s, e = int(head.bounds[c]), int(head.bounds[c + 1])
        lp = F.log_softmax(h[rows] @ head.weight[s:e].t() + head.bias[s:e], dim=1)
        out[rows] = lp.gather(1, (t[rows] - s)[:, None]).squeeze(1)
    return out


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 1e-6)])
@pytest.mark.parametrize("sparse", [True, False])
def test_the_size_binned_within_class_term_equals_the_class_by_class_formula(dtype, tol, sparse):
    """Issue 79: the within-class softmaxes as one batched product per size bin, not a loop over classes; the
    values and the gradients of hidden, weight and bias equal the class-by-class formula (autograd through it)."""
    torch.manual_seed(0)
    head = build_head({"type": "hierarchical-softmax", "classes": 40, "sparse": sparse}, _ctx(3000, 6)).to(dtype)
    with torch.no_grad():
        head.bias.normal_()
    assert len(torch.unique(head.bins)) >= 4  # mass binning: classes of very different sizes, several bins
    h, t = _data(3000, 6, 300)
    h = h.to(dtype)
    t[:40] = torch.arange(40) * 70 + 3  # a few targets in rare classes too
    h1, h2 = h.clone().requires_grad_(), h.clone().requires_grad_()
    got = head._within(h1, t)
    (got * torch.linspace(0.5, 1.5, len(t), dtype=dtype)).sum().backward()
    gw = head.weight.grad.to_dense() if head.weight.grad.is_sparse else head.weight.grad
    gb = head.bias_col.grad.to_dense() if head.bias_col.grad.is_sparse else head.bias_col.grad
    if sparse:
        ids = head.weight.grad._indices()[0]  # the present classes' rows, each once, in id order
        assert bool((ids[1:] > ids[:-1]).all()) and len(ids) < 3000
    head.zero_grad(set_to_none=True)
    want = _within_loop(head, h2, t)
    (want * torch.linspace(0.5, 1.5, len(t), dtype=dtype)).sum().backward()
    for a, b in ((got, want), (h1.grad, h2.grad), (gw, head.weight.grad), (gb, head.bias_col.grad)):
        torch.testing.assert_close(a, b.to_dense() if b.is_sparse else b, rtol=0, atol=tol)


def _blocks_built(head, target):
    """The padded blocks the fused step runs for a batch (a size bin, split by target counts where it pays)."""
    from pipeline_src.heads.hierarchical import _bin_blocks

    return len(_bin_blocks(head.word_class[target], head.bounds, head.bins)[0])


@pytest.mark.parametrize("v", [10000, 100000])
def test_hierarchical_softmax_s_launches_do_not_grow_with_the_classes_present(v):
    """Issue 79: the ATen operators of a training step's head (forward and backward, torch.profiler's top-level
    calls) do not grow with the number of classes the targets touch (the loop it replaced issued about ten per class
    present); they grow at most with its bins (a class size bin and a bin of its number of targets: at most
    (log2 V + 1)(log2 N + 1)), and stay within 3x the softmax's at the sweep's shapes (2,240 rows, chunks of 128)."""
    from pipeline_src.cost.opcount import op_count

    torch.manual_seed(0)
    head = build_head({"type": "hierarchical-softmax", "chunk_size": 128}, _ctx(v, 16))
    softmax = build_head({"type": "softmax", "chunk_size": 128}, _ctx(v, 16))
    h, classes, bins = torch.randn(2240, 16), head.word_class, head.bins
    one_class = torch.nonzero(classes == 5).squeeze(1)
    few = one_class[torch.randint(0, len(one_class), (2240,))]
    same_bin = torch.unique(classes[bins[classes] == bins[5]])[:16]  # 16 classes of one size bin ...
    assert len(same_bin) == 16
    first = head.bounds[same_bin]
    many = first.repeat_interleave(140)[torch.randperm(2240)]  # ... 140 targets each: one block, as one class is
    assert _blocks_built(head, few) == _blocks_built(head, many) == 1
    n_few = op_count(head, h, few)
    assert op_count(head, h, many) == n_few  # sixteen classes cost what one costs
    spread = torch.randint(0, v, (2240,))  # every size bin the targets reach, classes of many target counts
    n_blocks = _blocks_built(head, spread)
    assert n_blocks == len(torch.unique(bins[classes[spread]]))  # uniform targets: one block per size bin, no split
    assert n_blocks <= (math.log2(v) + 1) * (math.log2(2240) + 1)
    n_spread = op_count(head, h, spread)
    assert n_spread - n_few <= 60 * (n_blocks - 1)  # a bounded cost per block
    assert max(n_few, n_spread) <= 3 * op_count(softmax, h, spread)


@pytest.mark.parametrize("clustering", ["mass", "count"])
def test_hierarchical_softmax_s_padding_at_most_quadruples_a_step_on_zipfian_targets(clustering):
    """The fused step pads each block to its largest class and its busiest class; blocks by size, split by number
    of targets where that pays (``_block_keys``), keep that within 2x either way. By size alone, ``clustering:
    count`` at 100k words (316 classes of one size) padded every class to the most frequent one's targets: 123x
    the products these targets need (docs/bench.md)."""
    from pipeline_src.heads.hierarchical import _bin_blocks

    v, n = 100_000, 2240
    counts = (1e8 / torch.arange(1, v + 1)).floor()
    head = build_head({"type": "hierarchical-softmax", "clustering": clustering}, HeadContext(v, 4, counts))
    target = torch.multinomial(counts / counts.sum(), n, replacement=True, generator=torch.Generator().manual_seed(0))
    blocks, touched = _bin_blocks(head.word_class[target], head.bounds, head.bins)
    padded = sum(b.rows.numel() * b.ids.shape[1] for b in blocks)
    needed = int(torch.diff(head.bounds)[head.word_class[target]].sum())  # each target's own class, no padding
    assert needed <= padded <= 4 * needed
    placed = torch.cat([b.rows[b.ok] for b in blocks])
    assert torch.equal(placed.sort().values, torch.arange(n))  # every target in one block, once


@pytest.mark.parametrize("cutoffs, head_bias, only_shortlist", [([20, 60], True, False), ([10, 30, 90], False, False),
                                                                ([20, 60], True, True)])
@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-6), (torch.float64, 1e-12)])
def test_adaptive_softmax_s_own_tails_equal_torch_s_module(cutoffs, head_bias, only_shortlist, dtype, tol, monkeypatch):
    """The fused tails (head and each tail through the chunked linear cross-entropy) against
    ``torch.nn.AdaptiveLogSoftmaxWithLoss`` on the same parameters: the loss and every gradient, with blocks smaller
    than a tail's rows (160 elements: 2 to 16 rows), three clusters, no head bias, and a batch that reaches no tail."""
    from pipeline_src.heads import adaptive

    monkeypatch.setattr(adaptive, "TRAIN_BLOCK_ELEMENTS", 160)
    head = build_head({"type": "adaptive-softmax", "cutoffs": cutoffs, "div_value": 2.0, "head_bias": head_bias},
                      HeadContext(vocab_size=100, in_dim=8)).to(dtype)
    h, t = _data(100, 8, 60)
    h = h.to(dtype).requires_grad_()
    if only_shortlist:
        t = t % cutoffs[0]
    params = [h, *head.parameters()]
    ours, theirs = head.loss(h, t), head.module_loss(h, t)
    assert ours.item() == pytest.approx(theirs.item(), rel=tol, abs=tol)
    grads = [torch.autograd.grad(loss, params, allow_unused=True) for loss in (ours, theirs)]
    for p, a, b in zip(params, *grads):  # a tail no row reaches: no gradient from either
        a, b = (torch.zeros_like(p) if g is None else g for g in (a, b))
        assert (a - b).abs().max().item() <= tol * max(1.0, b.abs().max().item())


def test_adaptive_softmax_s_own_tails_gradients_by_finite_differences():
    head = build_head({"type": "adaptive-softmax", "cutoffs": [5, 15], "div_value": 2.0},
                      HeadContext(vocab_size=30, in_dim=4)).double()
    h, t = _data(30, 4, 12, seed=3)
    assert t.ge(5).any() and t.ge(15).any()  # both tails reached
    # finite differences in h (the parameters' gradients are held to the module's above)
    assert torch.autograd.gradcheck(lambda x: head.loss(x, t), (h.requires_grad_(),), eps=1e-6, atol=1e-8)
