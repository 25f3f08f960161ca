import math

import pytest
import torch
import torch.nn.functional as F

from pipeline_src.config import validate
from pipeline_src.heads import HeadContext, build_head, options_schema, registry
from pipeline_src.heads.kernels import linear_cross_entropy


def _data(n=37, d=6, v=23, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(n, d, generator=g, dtype=dtype, requires_grad=True)
    w = torch.randn(v, d, generator=g, dtype=dtype, requires_grad=True)
    b = torch.randn(v, generator=g, dtype=dtype, requires_grad=True)
    t = torch.randint(0, v, (n,), generator=g)
    return h, w, b, t


@pytest.mark.parametrize("chunk", [1, 5, 16, 37, 1000])
def test_chunked_cross_entropy_matches_torch(chunk):
    h, w, b, t = _data()
    ours = linear_cross_entropy(h, w, b, t, chunk)
    ref = F.cross_entropy(F.linear(h, w, b), t)
    assert abs(ours.item() - ref.item()) < 1e-5
    g_ours = torch.autograd.grad(2.5 * ours, (h, w, b))  # a non-unit upstream gradient
    g_ref = torch.autograd.grad(2.5 * ref, (h, w, b))
    for a, r in zip(g_ours, g_ref):
        assert torch.allclose(a, r, atol=1e-5, rtol=1e-5)


def test_chunked_cross_entropy_gradcheck():
    h, w, b, t = _data(n=7, d=3, v=5, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda h, w, b: linear_cross_entropy(h, w, b, t, 3), (h, w, b))


def test_chunked_cross_entropy_is_stable_for_huge_logits():
    h, w, b, t = _data()
    big = linear_cross_entropy(h * 1e3, w, b, t, 8)
    ref = F.cross_entropy(F.linear(h * 1e3, w, b), t)
    assert torch.isfinite(big) and abs(big.item() - ref.item()) / ref.item() < 1e-5


def test_chunked_cross_entropy_is_exact_where_the_target_probability_underflows():
    # a target 300 nats below the best word: exp underflows float32, so -log p[t] would be inf; the loss
    # comes from the row's max and its largest probability instead, exact
    h, w, b, t = _data(n=4, v=50)
    with torch.no_grad():
        b.zero_()
        b[t[0]] = -300.0
    ours = linear_cross_entropy(h, w, b, t, 2)
    ref = F.cross_entropy(F.linear(h.double(), w.double(), b.double()), t)
    assert abs(ours.item() - ref.item()) < 1e-5 * ref.item() and ours.item() > 70


@pytest.mark.parametrize("v", [7, 10_000])  # the short-row and the vectorised long-row kernels
def test_in_place_softmax_writes_the_softmax_into_its_input(v):
    from pipeline_src.heads.kernels import softmax_

    x = torch.randn(9, v, generator=torch.Generator().manual_seed(0)) * 5
    ref = F.softmax(x, dim=1)
    out = softmax_(x)
    assert out.data_ptr() == x.data_ptr() and torch.equal(out, ref)


def test_no_gradients_are_computed_without_grad():
    h, w, b, t = _data()
    with torch.no_grad():
        loss = linear_cross_entropy(h, w, b, t, 4)
    assert not loss.requires_grad


def _head(v=23, d=6, tied=None, **opts):
    return build_head({"type": "softmax", **opts}, HeadContext(vocab_size=v, in_dim=d, tied_weight=tied))


def test_softmax_head_log_probs_normalise_and_agree():
    head = _head(chunk_size=4)
    h, _, _, t = _data()
    lp = head.log_prob(h)
    assert lp.shape == (37, 23)
    assert torch.allclose(torch.logsumexp(lp, 1), torch.zeros(37), atol=1e-5)
    tlp = head.target_log_prob(h, t)
    assert torch.allclose(tlp, lp.gather(1, t[:, None]).squeeze(1), atol=1e-6)
    assert torch.allclose(head.loss(h, t), -tlp.mean(), atol=1e-6)


def test_softmax_head_ties_to_the_embedding():
    emb = torch.nn.Embedding(23, 6)
    head = _head(tied=emb.weight)
    assert head.weight is emb.weight
    h, _, _, t = _data()
    head.loss(h, t).backward()
    assert emb.weight.grad is not None and emb.weight.grad.abs().sum() > 0


def test_options_schema_is_generated_from_the_dataclass():
    s = options_schema(registry()["softmax"])
    assert s["properties"]["chunk_size"] == {"type": "integer", "minimum": 1, "default": 1024,
                                             "description": "rows of the logit matrix alive at once"}
    assert s["additionalProperties"] is False and s["required"] == []


def test_every_registered_head_builds_from_a_validated_config(default_params):
    for name, cls in registry().items():
        spec = {"type": name}
        if "negatives" in options_schema(cls)["properties"]:
            spec["negatives"] = 5  # fewer than the 11 words below
        p = dict(default_params, methods={name: spec}, statistics={"reference": name})
        p["run"] = {"datasets": ["synth"], "methods": [name]}
        p["bench"] = dict(p["bench"], methods=[name])
        p["matrix"] = dict(p["matrix"], methods=[name])
        validate(p)
        head = build_head(p["methods"][name], HeadContext(vocab_size=11, in_dim=4,
                                                          unigram_counts=torch.arange(11, 0, -1)))
        h, t = torch.randn(5, 4), torch.randint(0, 11, (5,))
        assert torch.allclose(torch.logsumexp(head.log_prob(h), 1), torch.zeros(5), atol=1e-5)
        loss = head.loss(h, t)
        assert loss.shape == () and torch.isfinite(loss)


def check_bf16_training_step(name: str, device: torch.device) -> None:
    """precision: bf16 on ``device`` — the loss and its gradients stay close to float32's (fused losses
    run in fp32), the head's parameters stay float32. Shared with tests/test_cuda.py."""
    spec = {"type": name}
    if "negatives" in options_schema(registry()[name])["properties"]:
        spec["negatives"] = 20
    head = build_head(spec, HeadContext(vocab_size=300, in_dim=16, unigram_counts=torch.arange(300, 0, -1)))
    head, enc = head.to(device), torch.nn.Linear(16, 16).to(device)
    g = torch.Generator().manual_seed(0)
    x, t = torch.randn(64, 16, generator=g).to(device), torch.randint(0, 300, (64,), generator=g).to(device)
    results = []
    for bf16 in (False, True):
        torch.manual_seed(1)  # the same negatives for the sampled heads
        head.zero_grad()
        enc.zero_grad()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = head.loss(enc(x), t)
        loss.float().backward()
        grads = torch.cat([p.grad.to_dense().flatten() for p in [*enc.parameters(), *head.parameters()]
                           if p.grad is not None])
        results.append((loss.detach().float(), grads))
    (l32, g32), (l16, g16) = results
    assert torch.isfinite(l16) and abs(l16 - l32) <= 0.01 * abs(l32)
    assert torch.isfinite(g16).all() and (g16 - g32).norm() <= 0.05 * g32.norm()
    assert all(p.dtype == torch.float32 for p in head.parameters())


@pytest.mark.parametrize("name", sorted(registry()))
def test_every_head_trains_under_bf16_autocast(name):
    check_bf16_training_step(name, torch.device("cpu"))


@pytest.mark.parametrize("v,cols", [(23, 4096), (23, 5), (1000, 96)])
def test_blocked_evaluation_equals_log_softmax_whatever_the_blocks(v, cols):
    """Exact evaluation over column blocks with a running logsumexp (heads/base.py) gives log softmax's values,
    targets in every block, and its gradient when one is asked for."""
    from pipeline_src.heads.kernels import linear_score_and_log_z

    h, w, b, _ = _data(n=40, d=6, v=v, dtype=torch.float64)
    t = torch.arange(40) * (v // 40)  # a target in every block
    score, log_z = linear_score_and_log_z(h, w, b, t, cols)
    ref = F.log_softmax(F.linear(h, w, b), dim=1)
    assert torch.allclose(score - log_z, ref.gather(1, t[:, None]).squeeze(1), atol=1e-12, rtol=0)
    assert torch.allclose(log_z, torch.logsumexp(F.linear(h, w, b), 1), atol=1e-12, rtol=0)
    got = torch.autograd.grad((score - log_z).sum(), (h, w, b))
    want = torch.autograd.grad(ref.gather(1, t[:, None]).sum(), (h, w, b))
    assert all(torch.allclose(a, r, atol=1e-12) for a, r in zip(got, want))
    with torch.no_grad():  # the in-place path
        s2, z2 = linear_score_and_log_z(h, w, b, t, cols)
    assert torch.allclose(s2 - z2, score - log_z, atol=1e-12)


@pytest.mark.parametrize("v,cols", [(23, 4096), (23, 5), (1000, 96)])
@pytest.mark.parametrize("far", [200.0, -1000.0])
def test_blocked_group_masses_equal_log_softmax_summed_per_group_whatever_the_blocks(v, cols, far):
    """The band split's masses, summed block by block with a running max (kernels.linear_log_mass), are the
    brute-force log of p summed with each group's weights: groups that overlap, leave words out, weigh words by
    0.5, hold one word or none (log 0); words of probability 0 (a bias of -inf, as NEGLM's log Q(w) = -inf gives)
    filling the first block; and logits far from the rest (one word at +200 dominating every row, or every possible
    word at -1000, where a running max that forgot the -inf block would overflow its rescaling)."""
    from pipeline_src.heads.kernels import linear_log_mass

    h, w, b, _ = _data(n=40, d=6, v=v, dtype=torch.float64)
    b = b.detach().clone()
    b[: min(cols, v - 1)] = -math.inf  # the first block holds no possible word (all of it where it is the last)
    if far > 0:
        b[-1] = far
    else:
        b[min(cols, v - 1):] += far
    member = torch.zeros(6, v, dtype=torch.float64)
    member[0, ::2] = 1  # the even words
    member[1, 1::2] = 1  # the odd words: with the first, a partition
    member[2, v // 2:] = 1  # the upper half: overlaps both, leaves words out
    member[3] = 0.5  # every word at half weight: log 1/2
    member[4, -1] = 1  # one word; group 5 is empty
    got = linear_log_mass(h, w, b, member, cols)
    lp = F.log_softmax(F.linear(h, w, b), dim=1)
    want = torch.logsumexp(lp[:, None, :] + torch.log(member)[None], dim=2)  # (N, G), log 0 = -inf for no weight
    assert torch.equal(got[:, 5], torch.full((40,), -math.inf, dtype=torch.float64))
    finite = want.isfinite()
    assert torch.equal(got.isfinite(), finite)
    assert torch.allclose(got[finite], want[finite], atol=1e-12, rtol=1e-12)
    assert torch.allclose(got[:, 3], torch.full((40,), math.log(0.5), dtype=torch.float64), atol=1e-12)
    with torch.no_grad():  # the in-place path
        assert torch.allclose(linear_log_mass(h, w, b, member, cols)[finite], want[finite], atol=1e-12, rtol=1e-12)


def test_a_head_declares_its_family_and_its_hooks_or_is_refused():
    """A head is one file: its registration says its family (the reports group and colour by it) and a hook it
    claims must exist; an unknown family or a claimed hook it does not define is refused at registration,
    before it reaches the registry."""
    from pipeline_src.heads.base import OutputLayer, register, registry
    from pipeline_src.heads.families import FAMILIES

    class Orphan(OutputLayer):
        pass

    with pytest.raises(ValueError, match="family 'novel heads' is not one of"):
        register("orphan-head", family="novel heads")(Orphan)

    class Claims(OutputLayer):
        self_normalised = True

    with pytest.raises(ValueError, match="declares self_normalised but defines no self_normalisation"):
        register("claims-head", family="mixtures")(Claims)
    assert "orphan-head" not in registry() and "claims-head" not in registry()
    assert {cls.family for cls in registry().values()} <= set(FAMILIES)
