"""Sampled softmax's three proposals (Jean et al.'s target vocabulary, in-batch negatives, Blanc & Rendle's
quadratic kernel) against brute force written out from their papers' equations."""
import math

import pytest
import torch
from scipy import stats

from pipeline_src.heads import HeadContext, build_head
from pipeline_src.heads.kernel_tree import KernelTree, packed_outer
from pipeline_src.heads.partitions import Plan, partition

V, D = 30, 5
COUNTS = torch.arange(V, 0, -1) ** 2


def make(sampler, **opts):
    torch.manual_seed(0)
    hd = build_head({"type": "sampled-softmax", "sampler": sampler, **opts},
                    HeadContext(vocab_size=V, in_dim=D, unigram_counts=COUNTS)).double()
    with torch.no_grad():
        hd.bias.add_(0.3 * torch.randn(V, dtype=torch.float64))
    return hd


def data(n=12, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, D, generator=g, dtype=torch.float64), torch.randint(0, V, (n,), generator=g)


def score(hd, h, i, w):
    with torch.no_grad():
        return float(h[i] @ hd.weight[w] + hd.bias[w])


# -- Jean et al.'s target vocabulary --------------------------------------------------------------------------

def partitions_by_hand(batches, tau, fill):
    """The paper's walk, in plain Python: accumulate distinct targets batch by batch; a partition ends at the
    batch where their number reaches tau."""
    out, current, first = [], set(), 0
    for k, b in enumerate(batches):
        current |= set(b)
        if len(current) >= tau or k == len(batches) - 1:
            vocab = sorted(current)
            if fill:
                vocab = sorted(current | set([w for w in range(V) if w not in current][: max(0, tau - len(current))]))
            out.append((first, vocab))
            current, first = set(), k + 1
    return out


@pytest.mark.parametrize("fill", [False, True])
def test_partitions_follow_the_papers_rule(fill):
    g = torch.Generator().manual_seed(3)
    batches = [torch.randint(0, V, (2, 3), generator=g) for _ in range(9)]
    got = partition(batches, tau=8, vocab_size=V, fill=fill)
    want = partitions_by_hand([b.flatten().tolist() for b in batches], 8, fill)
    assert [(f, ids.tolist()) for f, ids in got] == want
    assert len(want) > 2  # the stream is cut more than once
    for first, vocab in want:
        assert len(vocab) >= 8 or first == want[-1][0]  # only the stream's end closes a partition short of tau


def test_target_vocabulary_loss_and_gradient_are_the_papers():
    """Jean et al. (2015), eq. 9 with a uniform proposal over V': -s(y) + log sum_{w in V'} exp s(w); its
    gradients -grad s(y) + sum_{w in V'} P(w) grad s(w), written out for h and every row of W."""
    hd = make("target-vocabulary")
    h, t = data()
    h.requires_grad_(True)
    vocab = sorted(set(t.tolist()) | {0, 7, 29})
    loss = hd.target_vocabulary_loss(h, t, torch.tensor(vocab))
    loss.backward()
    n = len(t)
    want, grad_h, grad_w = 0.0, torch.zeros(n, D, dtype=torch.float64), torch.zeros(V, D, dtype=torch.float64)
    for i in range(n):
        s = {w: score(hd, h.detach(), i, w) for w in vocab}
        log_z = math.log(sum(math.exp(x) for x in s.values()))
        want += (log_z - s[int(t[i])]) / n
        for w in vocab:
            p = math.exp(s[w] - log_z) - (w == int(t[i]))
            grad_h[i] += p * hd.weight[w].detach() / n
            grad_w[w] += p * h[i].detach() / n
    assert loss.item() == pytest.approx(want, rel=1e-12)
    assert torch.allclose(h.grad, grad_h, atol=1e-12)
    assert torch.allclose(hd.weight.grad.to_dense(), grad_w, atol=1e-12)
    outside = [w for w in range(V) if w not in vocab]
    assert hd.bias_col.grad.to_dense()[outside].abs().max() == 0  # rows outside V' are untouched


def test_a_target_vocabulary_of_every_word_is_the_full_softmax():
    import torch.nn.functional as F

    hd = make("target-vocabulary", tau=V, fill=True)
    h, t = data()
    vocab = hd.target_vocabulary(t)  # unplanned: the batch's own targets, filled with the most frequent words
    assert vocab.tolist() == list(range(V))
    full = F.cross_entropy(F.linear(h, hd.weight, hd.bias), t)
    assert hd.loss(h, t).item() == pytest.approx(full.item(), rel=1e-12)


def test_a_planned_epoch_trains_each_batch_on_its_partitions_vocabulary():
    hd = make("target-vocabulary", tau=10)
    g = torch.Generator().manual_seed(4)
    batches = [torch.randint(0, V, (3, 2), generator=g) for _ in range(8)]
    parts = partitions_by_hand([b.flatten().tolist() for b in batches], 10, False)
    hd.plan_epoch(batches, start=2)  # resumed at step 2: the plan is the whole epoch's, the cursor at 2
    h = torch.randn(6, D, dtype=torch.float64)
    for k in range(2, 8):
        vocab = [v for first, v in parts if first <= k][-1]
        assert hd.loss(h, batches[k].flatten()).item() == pytest.approx(
            hd.target_vocabulary_loss(h, batches[k].flatten(), torch.tensor(vocab)).item(), rel=1e-12)
    assert hd.target_vocabulary(batches[0].flatten()).tolist() == sorted(set(batches[0].flatten().tolist()))


def test_a_loss_out_of_step_with_its_plan_is_refused():
    plan = Plan.of([torch.tensor([1, 2]), torch.tensor([3, 4])], tau=3, vocab_size=V, fill=False)
    with pytest.raises(RuntimeError, match="out of step at batch 0"):
        plan.take(torch.tensor([3, 4]))


# -- in-batch negatives ----------------------------------------------------------------------------------------

def test_in_batch_loss_is_the_formula():
    """Every position's negatives: the batch's distinct targets but its own; each logit, target included,
    corrected by log(1 - (1 - Q(w))^B), Q the unigram (alpha 1), B the batch's target positions."""
    hd = make("in-batch", alpha=0.5)  # alpha is the unigram proposal's; the batch is drawn from the data's
    h, t = data(n=10)
    q = COUNTS.double() / COUNTS.sum()
    b = len(t)
    corr = {w: math.log(1 - (1 - float(q[w])) ** b) for w in range(V)}
    want = 0.0
    for i in range(b):
        y = int(t[i])
        logits = [score(hd, h, i, y) - corr[y]] + [score(hd, h, i, w) - corr[w] for w in set(t.tolist()) - {y}]
        want += (math.log(sum(math.exp(x) for x in logits)) - logits[0]) / b
    assert hd.loss(h, t).item() == pytest.approx(want, rel=1e-12)


# -- Blanc & Rendle's quadratic kernel -------------------------------------------------------------------------

def test_packed_outer_gives_the_quadratic_form():
    g = torch.Generator().manual_seed(5)
    h, a = torch.randn(3, 6, generator=g, dtype=torch.float64), torch.randn(6, 6, generator=g, dtype=torch.float64)
    c = a @ a.t()
    i, j = torch.triu_indices(6, 6)
    assert torch.allclose(packed_outer(h) @ c[i, j], torch.einsum("nd,de,ne->n", h, c, h), atol=1e-12)


def test_tree_statistics_are_their_words_sums_after_an_update():
    hd = make("quadratic-kernel", bucket_size=4, negatives=3, kernel_bias=False)
    h, t = data()
    for _ in range(2):  # a step moves the embeddings; the next loss rebuilds the tree from them
        hd.loss(h, t).backward()
        with torch.no_grad():
            hd.weight.add_(0.5 * torch.randn(V, D, dtype=torch.float64))
    hd.loss(h, t)
    tree, w = hd.tree, hd.weight.detach()
    i, j = torch.triu_indices(D, D)
    for level, (statistics, count) in enumerate(zip(tree.levels, tree.counts)):
        span = 4 * 2 ** (len(tree.levels) - 1 - level)  # words under one node of this level
        for node in range(statistics.shape[0]):
            rows = w[node * span: (node + 1) * span]
            assert torch.allclose(statistics[node], (rows.t() @ rows)[i, j], atol=1e-10)
            assert count[node] == rows.shape[0]


def test_refresh_every_keeps_the_tree_of_the_weights_it_was_built_from():
    hd = make("quadratic-kernel", bucket_size=4, negatives=3, refresh_every=3, kernel_bias=False)
    h, t = data()
    hd.loss(h, t)
    built = hd.tree.levels[0].clone()
    with torch.no_grad():
        hd.weight.mul_(2.0)
    hd.loss(h, t), hd.loss(h, t)
    assert torch.equal(hd.tree.levels[0], built)  # steps 2 and 3 sample from the snapshot
    hd.loss(h, t)
    assert torch.allclose(hd.tree.levels[0], 4 * built)  # step 4 rebuilt it from W


def test_kernel_draws_follow_q():
    """200,000 draws for two contexts against q(w | h) = (alpha (h.w)^2 + 1) / Z computed densely: a
    chi-square test, and total variation under 0.01."""
    g = torch.Generator().manual_seed(6)
    w = torch.randn(37, 4, generator=g, dtype=torch.float64)  # 37 words: the last bucket is partly padding
    tree = KernelTree(alpha=3.0, bucket_size=4)
    tree.build(w)
    h = torch.randn(2, 4, generator=g, dtype=torch.float64)
    q = tree.probs(h)
    s = h @ w.t()
    assert torch.allclose(q, (3 * s * s + 1) / (3 * s * s + 1).sum(1, keepdim=True), atol=1e-12)
    assert torch.allclose(tree.log_q(h, torch.arange(37).repeat(2, 1)).exp(), q, atol=1e-12)
    draws = tree.sample(h, 100_000, torch.Generator().manual_seed(7))
    for n in range(2):
        freq = torch.bincount(draws[n], minlength=37).double()
        assert stats.chisquare(freq.numpy(), (q[n] * freq.sum()).numpy()).pvalue > 1e-3
        assert 0.5 * (freq / freq.sum() - q[n]).abs().sum() < 0.01


def test_gathered_levels_and_buckets_draw_the_same_q(monkeypatch):
    """The memory-bound path (each draw gathers its node's children and its bucket's words) against q, as the
    dense one is above: 37 words at bucket_size 4 take it only with both thresholds at 0."""
    import pipeline_src.heads.kernel_tree as kt

    monkeypatch.setattr(kt, "DENSE_PER_DRAW", 0)
    monkeypatch.setattr(kt, "DENSE_LEAVES", 0)
    g = torch.Generator().manual_seed(11)
    tree = KernelTree(alpha=2.0, bucket_size=4)
    tree.build(torch.randn(37, 4, generator=g, dtype=torch.float64))
    h = torch.randn(2, 4, generator=g, dtype=torch.float64)
    assert not tree.dense_leaves(50_000)
    draws = tree.sample(h, 50_000, torch.Generator().manual_seed(12))
    q = tree.probs(h)
    for n in range(2):
        freq = torch.bincount(draws[n], minlength=37).double()
        assert stats.chisquare(freq.numpy(), (q[n] * freq.sum()).numpy()).pvalue > 1e-3


@pytest.mark.parametrize("dense", [True, False])
def test_a_draw_s_score_is_read_from_its_bucket_and_is_its_word_s(monkeypatch, dense):
    """``sample(scores=True)``: each draw's h . w comes from the bucket (or dense scores) it was drawn in, so its q
    needs no second gather of the snapshot; it equals the drawn word's own score, and the ids are the same draws."""
    import pipeline_src.heads.kernel_tree as kt

    if not dense:
        monkeypatch.setattr(kt, "DENSE_PER_DRAW", 0)
        monkeypatch.setattr(kt, "DENSE_LEAVES", 0)
    g = torch.Generator().manual_seed(5)
    w = torch.randn(37, 4, generator=g, dtype=torch.float64)
    tree = KernelTree(alpha=2.0, bucket_size=4)
    tree.build(w)
    h = torch.randn(9, 4, generator=g, dtype=torch.float64)
    assert tree.dense_leaves(7) == dense
    ids, s = tree.sample(h, 7, torch.Generator().manual_seed(3), scores=True)
    assert torch.equal(ids, tree.sample(h, 7, torch.Generator().manual_seed(3)))
    torch.testing.assert_close(s, torch.einsum("nd,nkd->nk", h, w[ids]), rtol=0, atol=1e-12)
    torch.testing.assert_close(tree.log_q_of_scores(s, h), tree.log_q(h, ids), rtol=0, atol=1e-12)


def test_the_kernel_proposal_stays_in_fp32_under_bf16_autocast():
    hd = make("quadratic-kernel", bucket_size=4, negatives=3, kernel_bias=False).float()
    h, t = data()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        hd.loss(h.float(), t)
    assert all(level.dtype == torch.float32 for level in hd.tree.levels)
    root = hd.tree.levels[0][0]
    w = hd.weight.detach()
    i, j = torch.triu_indices(D, D)
    assert torch.allclose(root, (w.t() @ w)[i, j], rtol=1e-5)


@pytest.mark.parametrize("kernel_bias", [True, False])
def test_kernel_loss_is_sampled_softmax_with_the_kernels_expected_counts(kernel_bias):
    """Each logit corrected by log(k q(w | h)), q(w | h) = (alpha s^2 + 1) / sum of it over V, s the whole score
    h.w + b (kernel_bias) or h.w: written out from the scores, not from the tree."""
    hd = make("quadratic-kernel", bucket_size=4, negatives=6, kernel_alpha=2.0, kernel_bias=kernel_bias)
    h, t = data()
    torch.manual_seed(8)
    got = hd.loss(h, t).item()
    torch.manual_seed(8)
    ids = hd.tree.sample(hd.kernel_rows(h, torch.ones(len(t), 1, dtype=h.dtype)), 6)  # the same draws
    with torch.no_grad():
        s = h @ hd.weight.t() + (hd.bias if kernel_bias else 0.0)
    m = 2.0 * s * s + 1
    log_q = torch.log(m / m.sum(1, keepdim=True))
    want = 0.0
    for i in range(len(t)):
        y = int(t[i])
        logits = [score(hd, h, i, y) - math.log(6) - float(log_q[i, y])]
        logits += [score(hd, h, i, w) - math.log(6) - float(log_q[i, w]) for w in ids[i].tolist() if w != y]
        want += (math.log(sum(math.exp(x) for x in logits)) - logits[0]) / len(t)
    assert got == pytest.approx(want, rel=1e-10)


def test_only_sampled_softmax_takes_the_new_proposals(default_params):
    import copy

    from pipeline_src import config

    p = copy.deepcopy(default_params)
    p["methods"]["nce"] = {**p["methods"]["nce"], "sampler": "in-batch"}
    with pytest.raises(config.ConfigError, match="methods.nce.sampler"):
        config.validate(p)
    p["methods"]["nce"]["sampler"] = "unigram"
    p["methods"]["sampled-softmax"] = {**p["methods"]["sampled-softmax"], "sampler": "in-batch"}
    config.validate(p)


@pytest.mark.parametrize("v, k", [(37, 3), (5000, 2), (5000, 40), (300, 20)])  # gathered and dense leaves
def test_draw_macs_are_the_products_the_sampler_runs(v, k):
    """The kernel's declared arithmetic against torch's FLOP counter: dense levels, gathered levels, buckets."""
    from torch.utils.flop_counter import FlopCounterMode

    from pipeline_src.heads.kernel_tree import draw_macs

    g = torch.Generator().manual_seed(9)
    tree = KernelTree(alpha=1.0, bucket_size=4)
    tree.build(torch.randn(v, 6, generator=g))
    h = torch.randn(5, 6, generator=g)
    with FlopCounterMode(display=False) as counter:
        tree.sample(h, k, torch.Generator().manual_seed(1))
    assert counter.get_total_flops() == 2 * 5 * draw_macs(v, 6, k, 4)


def test_gradient_bias_shrinks_with_the_sample_and_is_smaller_for_the_kernel():
    """Blanc & Rendle's claim on a peaked model: the kernel proposal's gradient is less biased than the unigram
    one's at the same number of samples, and both biases shrink as the sample grows."""
    from pipeline_src.cost.samplers import gradient_bias

    g = torch.Generator().manual_seed(10)
    v, d, n = 400, 8, 64
    w = torch.randn(v, d, generator=g, dtype=torch.float64)
    h = 1.5 * torch.randn(n, d, generator=g, dtype=torch.float64)
    y = torch.multinomial(torch.softmax(h @ w.t(), 1), 1, generator=g).squeeze(1)  # targets from the model
    counts = (1e6 / torch.arange(1, v + 1)).long()
    df = gradient_bias(h, y, w, torch.zeros(v, dtype=torch.float64), counts,
                       {"unigram": {"sampler": "unigram", "replacement": True},
                        "kernel": {"sampler": "quadratic-kernel", "replacement": True, "bucket_size": 8}},
                       sizes=[2, 32], reps=30)
    bias = {(r.proposal, r.m): r.bias for r in df.itertuples()}
    assert bias["unigram", 32] < bias["unigram", 2] and bias["kernel", 32] < bias["kernel", 2]
    assert bias["kernel", 2] < bias["unigram", 2] and bias["kernel", 32] < bias["unigram", 32] / 2
    assert (df.noise > 0).all() and (df.noise < bias["unigram", 2]).all()  # the Monte Carlo floor is below it


@pytest.mark.parametrize("flags, says", [
    (["--kernel", "softmax"], "bench-samplers --kernel softmax: type softmax, not a sampled softmax with sampler "
                              "quadratic-kernel; the params file's: sampled-softmax-kernel"),
    (["--kernel", "sampled-softmax"], "--kernel sampled-softmax: type sampled-softmax, sampler unigram, not"),
    (["--kernel", "nosuch"], "--kernel nosuch: no method of the params file"),
    (["--model", "m.pt", "--dataset", "ptb", "--unigram", "sampled-softmax-kernel"],
     "--unigram sampled-softmax-kernel: type sampled-softmax, sampler quadratic-kernel, not a sampled softmax with "
     "sampler unigram; the params file's: "),
])
def test_bench_samplers_refuses_a_method_that_is_not_the_proposal_it_times(capsys, flags, says):
    """The third probe's weak case: `bench-samplers --kernel softmax` timed the kernel proposal's defaults and
    labelled them with the softmax's name (a missing method was a KeyError traceback)."""
    from pipeline_src.cli import main

    assert main(["bench-samplers", *flags]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and says in err[0], err
