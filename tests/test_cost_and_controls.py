"""Analytic head FLOPs against torch's own FLOP counter, and the width-matched control's size."""
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode, register_flop_formula

from pipeline_src.data.linalg import numerical_rank
from pipeline_src.heads import HeadContext, build_head
from pipeline_src.heads.kernels import matched_width, mos_forward_macs

V, D, N = 300, 12, 64

# the fused losses accumulate weight gradients with the in-place addmm_, which torch's counter does not
# know by default; it is the same product as addmm
def _addmm_flops(self_shape, a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
    return 2 * a_shape[0] * a_shape[1] * b_shape[1]


try:
    register_flop_formula(torch.ops.aten.addmm_)(_addmm_flops)
except RuntimeError:  # already registered (the module imported twice)
    pass
SPECS = {
    "softmax": {"type": "softmax"},
    "mos": {"type": "mos", "components": 4},
    "moss": {"type": "moss", "components": 4},
    "moc": {"type": "moc", "components": 4},
    "mixtape": {"type": "mixtape", "components": 4, "frequent_share": 0.2},
    "sigsoftmax": {"type": "sigsoftmax"},
    "plif": {"type": "plif", "knots": 50},
    "monotonic-mlp": {"type": "monotonic-mlp", "hidden": 3},
    "wide-softmax": {"type": "wide-softmax", "match_components": 4},
    "sampled-softmax": {"type": "sampled-softmax", "negatives": 20, "sampler": "uniform", "sparse": False},
    "nce": {"type": "nce", "negatives": 20, "sampler": "uniform", "sparse": False},
    "neglm": {"type": "neglm", "negatives": 20, "sampler": "uniform", "sparse": False},
    "adaptive-softmax": {"type": "adaptive-softmax", "cutoffs": [30, 120], "div_value": 2.0},
    "hierarchical-softmax": {"type": "hierarchical-softmax"},
    "differentiated-softmax": {"type": "differentiated-softmax"},
    "self-normalised-softmax": {"type": "self-normalised-softmax"},
    "self-normalised-infrequent": {"type": "self-normalised-softmax", "variant": "infrequent", "gamma": 0.25},
}


def _head(spec):
    torch.manual_seed(0)
    counts = torch.arange(V, 0, -1, dtype=torch.float64)  # frequency-sorted ids
    return build_head(spec, HeadContext(vocab_size=V, in_dim=D, unigram_counts=counts))


@pytest.mark.parametrize("name", sorted(SPECS))
def test_analytic_flops_match_torch_flop_counter(name):
    """Exact evaluation: one forward of log p over every word; training: the loss forward + backward.
    The counter sees every matrix product (mm, addmm, bmm, ...), the analytic count only those with
    weights, so the two agree when a head has no other products."""
    hd = _head(SPECS[name])
    h = torch.randn(N, D, requires_grad=True)
    t = torch.randint(0, V, (N,))
    with torch.no_grad(), FlopCounterMode(display=False) as fc:
        hd.log_prob(h)
    assert fc.get_total_flops() / N == pytest.approx(hd.flops_per_token(train=False), rel=0.02)
    if name == "adaptive-softmax":
        # training touches each token's own tail only: the counter sees the draw of targets, the
        # analytic count its expectation under the train frequencies; check with all targets in the head
        t = torch.randint(0, 30, (N,))
        with FlopCounterMode(display=False) as fc:
            hd.loss(h, t).backward()
        head_only = 2 * 3 * D * hd.asm.head_size
        assert fc.get_total_flops() / N == pytest.approx(head_only, rel=0.02)
        return
    if name == "hierarchical-softmax":
        # training computes the class softmax and each token's own class: the counter sees this draw of
        # targets, the analytic count their expectation under the train frequencies; both from the same rule
        from pipeline_src.heads.hierarchical import _bin_blocks

        sizes = (hd.bounds[1:] - hd.bounds[:-1])[hd.word_class[t]].double().mean()
        # the within-class products run on size bins padded to their largest class and busiest class (issue 79:
        # no loop over classes): the counter sees the padded blocks, P x R x K a bin
        blocks, _ = _bin_blocks(hd.word_class[t], hd.bounds, hd.bins)
        padded = sum(b.rows.shape[0] * b.rows.shape[1] * b.ids.shape[1] for b in blocks)
        with FlopCounterMode(display=False) as fc:
            hd.loss(h, t).backward()
        assert fc.get_total_flops() / N == pytest.approx(2 * 3 * D * (hd.n_classes + padded / N), rel=0.02)
        assert padded / N >= float(sizes)  # never less than the method's own work (the analytic count's)
        return
    with FlopCounterMode(display=False) as fc:
        hd.loss(h, t).backward()
    assert fc.get_total_flops() / N == pytest.approx(hd.flops_per_token(train=True), rel=0.02)


def test_width_matched_control_costs_what_mos_costs_and_has_its_own_rank_bound():
    d, v, k = 16, 500, 8
    width = matched_width(d, v, k)
    assert width == 128  # (16*8 + 8*16^2 + 8*16*500) / (16 + 500) = 128.2: d' ~ K d
    wide = build_head({"type": "wide-softmax", "match_components": k}, HeadContext(vocab_size=v, in_dim=d))
    mos = build_head({"type": "mos", "components": k}, HeadContext(vocab_size=v, in_dim=d))
    assert wide.width == width and wide.rank_dim == width and mos.rank_dim == d
    assert wide.forward_macs(exact=True) == d * width + width * v
    assert mos.forward_macs(exact=True) == mos_forward_macs(d, v, k)
    assert wide.flops_per_token(train=True) == pytest.approx(mos.flops_per_token(train=True), rel=0.01)
    # the tanh lifts the rank bound from d + 2 to d' + 2: its log-prob matrix over 400 contexts goes past d + 2
    g = torch.randn(400, d, dtype=torch.float64) * 2
    with torch.no_grad():
        lp = wide.double().log_prob(g).numpy()
    rank, _ = numerical_rank(lp)
    assert d + 2 < rank <= width + 2


def test_explicit_width_wins_over_matching():
    hd = build_head({"type": "wide-softmax", "width": 40}, HeadContext(vocab_size=100, in_dim=8))
    assert hd.width == 40 and hd.weight.shape == (100, 40)


def test_automatic_chunks_fit_the_cache_at_small_v_and_keep_enough_rows_at_large_v():
    from pipeline_src.heads import HeadContext, build_head
    from pipeline_src.heads.kernels import auto_chunk

    assert auto_chunk(None, 500) == 262 and auto_chunk(None, 33_278) == 128 and auto_chunk(7, 33_278) == 7
    mos = lambda v: build_head({"type": "mos", "components": 15}, HeadContext(vocab_size=v, in_dim=8))  # noqa: E731
    assert mos(100).chunk_rows() == (1 << 19) // 1500 and mos(33_278).chunk_rows() == 64
