"""The conformance kit: what every output layer is held to, for a built-in head or one from outside.

``python -m pipeline_src check-head TYPE [--option key=value ...]`` builds the head on small random shapes (V = 200
words with Zipf counts, d = 16, 16 rows) in float64 and checks, one line per property:

- **normalised**: every row of ``log_prob`` sums to one (logsumexp 0);
- **target log-probabilities**: ``target_log_prob`` is ``log_prob`` at the targets, and chunked (3 rows) equals
  unchunked;
- **group masses**: ``log_mass`` is the log of ``log_prob``'s probabilities summed with each group's weights (random
  subsets that overlap and leave words out, one word alone, weights in [0, 1));
- **exact loss**: where the head declares ``trains_exact_likelihood``, its training loss is the mean negative
  log-likelihood of ``log_prob`` plus the term it declares beside it (``loss_penalty``: a self-normalisation
  penalty); a sampled surrogate is declared, not compared;
- **input gradient**: the training loss's gradient with respect to the hidden states against finite differences
  (``torch.autograd.gradcheck``; a sampled head's draws fixed by reseeding before each evaluation);
- **parameter gradients**: for every parameter, the directional derivative along a random direction against a
  central difference: a sparse gradient (``sparse_params``) densified must equal what the loss does;
- **determinism**: two builds under one seed give the same parameters and the same loss, bit for bit;
- **FLOPs**: the declared ``flops_per_token(train=False)`` against ``torch.utils.flop_counter`` over one exact
  forward (matrix products only, as declared); a head whose products the counter cannot see fails here;
- **bf16 autocast**: under ``torch.autocast`` in bfloat16 the loss is finite, its backward runs, and ``log_prob``
  is normalised to 2e-2.

It exits non-zero when a property fails. ``tests/test_plugins.py`` runs it over every registered head.
"""
from __future__ import annotations

import math
import os
import traceback
from dataclasses import dataclass
from typing import Callable

import torch

V, D, N = 200, 16, 16


@dataclass
class Outcome:
    prop: str
    ok: bool | None  # None: declared not to apply
    detail: str

    def line(self) -> str:
        word = "PASS" if self.ok else "n/a " if self.ok is None else "FAIL"
        return f"{word} {self.prop}: {self.detail}"


def _build(spec: dict, seed: int):
    from .base import HeadContext, build_head

    torch.manual_seed(seed)
    counts = (1e5 / torch.arange(1, V + 1, dtype=torch.float64)).long()
    return build_head(dict(spec), HeadContext(vocab_size=V, in_dim=D, unigram_counts=counts)).double()


def check(spec: dict, seed: int = 0) -> list[Outcome]:
    """Every property for the head ``spec`` builds (``{"type": ..., options}``)."""
    try:
        head = _build(spec, seed)
    except Exception as e:
        return [Outcome("builds", False, f"at V = {V}, d = {D}: {type(e).__name__}: {e}")]
    g = torch.Generator().manual_seed(seed + 1)
    h = torch.randn(N, D, generator=g, dtype=torch.float64)
    target = torch.randint(0, V, (N,), generator=g)
    checks: list[tuple[str, Callable[[], Outcome]]] = [
        ("normalised", lambda: _normalised(head, h)), ("target log-probabilities", lambda: _targets(head, h, target)),
        ("group masses", lambda: _group_masses(head, h)), ("exact loss", lambda: _exact_loss(head, h, target)),
        ("input gradient", lambda: _input_gradient(head, h, target)),
        ("parameter gradients", lambda: _parameter_gradients(head, h, target)),
        ("determinism", lambda: _determinism(spec, seed, h, target)), ("FLOPs", lambda: _flops(head, h)),
        ("bf16 autocast", lambda: _bf16(spec, seed, h, target))]
    out = []
    for name, c in checks:
        try:
            out.append(c())
        except Exception as e:  # a head that raises fails that property, with what it raised
            first = str(e).splitlines()[0] if str(e) else ""
            where = next((f.name for f in reversed(traceback.extract_tb(e.__traceback__))  # the head's own frame,
                          if f"{os.sep}torch{os.sep}" not in f.filename and f.filename != __file__), None)  # not torch's
            out.append(Outcome(name, False, f"raised {type(e).__name__}" + (f" in {where}()" if where else "")
                               + (f": {first}" if first else "")))
    return out


def _seeded_loss(head, h, target, seed: int = 7):
    torch.manual_seed(seed)  # a sampled head draws the same negatives at every evaluation
    return head.loss(h, target)


def _normalised(head, h) -> Outcome:
    with torch.no_grad():
        lp = head.log_prob(h)
    want = (h.shape[0], head.vocab_size)
    if tuple(lp.shape) != want:  # a row over fewer words can sum to one too
        return Outcome("normalised", False, f"log_prob gives shape {tuple(lp.shape)}, not (N, V) = {want}")
    err = lp.logsumexp(dim=1).abs().max().item()
    return Outcome("normalised", err < 1e-8, f"max |logsumexp of a row| = {err:.2e} (limit 1e-8)")


def _targets(head, h, target) -> Outcome:
    with torch.no_grad():
        full = head.log_prob(h).gather(1, target[:, None]).squeeze(1)
        err = max((head.target_log_prob(h, target, chunk_size=c) - full).abs().max().item() for c in (3, 1024))
    return Outcome("target log-probabilities", err < 1e-10, f"max |chunked or unchunked - log_prob| = {err:.2e}")


def _group_masses(head, h) -> Outcome:
    g = torch.Generator().manual_seed(3)
    member = (torch.rand(4, V, generator=g, dtype=torch.float64) < 0.5).double()  # random subsets: they overlap
    member[1], member[3] = 0, torch.rand(V, generator=g, dtype=torch.float64)  # one word alone; weights in [0, 1)
    member[1, V // 2] = 1
    with torch.no_grad():
        lp = head.log_prob(h)
        want = torch.logsumexp(lp[:, None, :] + torch.log(member)[None], dim=2)  # (N, 4); log 0 = -inf: no weight
        got = head.log_mass(h, member)
    if tuple(got.shape) != tuple(want.shape):
        return Outcome("group masses", False, f"log_mass gives shape {tuple(got.shape)}, not (N, G) = "
                                              f"{tuple(want.shape)}")
    err = (got - want).abs().max().item()
    return Outcome("group masses", err < 1e-10, f"max |log_mass - log of p summed with each group's weights| = "
                                                f"{err:.2e} (limit 1e-10; overlapping groups, one word, weights)")


def _exact_loss(head, h, target) -> Outcome:
    if not head.trains_exact_likelihood:
        return Outcome("exact loss", None, "declared not to train the exact likelihood (trains_exact_likelihood = "
                                           "False: a sampled or unnormalised surrogate): not compared")
    with torch.no_grad():
        penalty = head.loss_penalty(h, target)
        nll = -head.log_prob(h).gather(1, target[:, None]).mean().item()
        err = abs(_seeded_loss(head, h, target).item() - nll - (0.0 if penalty is None else penalty.item()))
    what = "mean nll of log_prob" + ("" if penalty is None else " - its declared penalty (loss_penalty)")
    return Outcome("exact loss", err < 1e-8, f"|loss - {what}| = {err:.2e} (limit 1e-8)")


def _input_gradient(head, h, target) -> Outcome:
    x = h.clone().requires_grad_()
    ok = torch.autograd.gradcheck(lambda y: _seeded_loss(head, y, target), (x,), eps=1e-6, atol=1e-5, rtol=1e-4,
                                  raise_exception=False)
    # by how much: the autograd gradient along a random direction against a central difference of the loss
    grad, = torch.autograd.grad(_seeded_loss(head, x, target), x)
    v = torch.randn(h.shape, generator=torch.Generator().manual_seed(5), dtype=h.dtype)
    with torch.no_grad():
        numeric = (_seeded_loss(head, h + 1e-6 * v, target) - _seeded_loss(head, h - 1e-6 * v, target)) / 2e-6
    analytic = float((grad * v).sum())
    rel = abs(analytic - float(numeric)) / max(abs(float(numeric)), 1e-12)
    return Outcome("input gradient", bool(ok), f"gradcheck of the loss with respect to the hidden states (eps 1e-6, "
                                               f"atol 1e-5); along a random direction {analytic:.6g} against a "
                                               f"central difference {float(numeric):.6g} (relative error {rel:.1e})")


def _parameter_gradients(head, h, target) -> Outcome:
    head.zero_grad(set_to_none=True)
    _seeded_loss(head, h, target).backward()
    sparse = {id(p) for p in head.sparse_params()}
    worst, where = 0.0, "no parameter"
    g = torch.Generator().manual_seed(3)
    for name, p in head.named_parameters():
        if p.grad is None:
            continue
        grad = p.grad.to_dense() if p.grad.is_sparse else p.grad
        u = torch.randn(p.shape, generator=g, dtype=p.dtype)
        eps = 1e-6
        with torch.no_grad():
            p.add_(u, alpha=eps)
            up = _seeded_loss(head, h, target).item()
            p.add_(u, alpha=-2 * eps)
            down = _seeded_loss(head, h, target).item()
            p.add_(u, alpha=eps)
        fd, an = (up - down) / (2 * eps), float((grad * u).sum())
        err = abs(fd - an) / (1e-3 + max(abs(fd), abs(an)))  # relative, or absolute below 1e-3
        err = math.inf if math.isnan(err) else err  # a loss or gradient that is not a number: the worst there is
        if err > worst:
            worst, where = err, f"{name}{' (sparse)' if id(p) in sparse else ''}"
    head.zero_grad(set_to_none=True)
    return Outcome("parameter gradients", worst < 1e-4,
                   f"worst relative error of a directional derivative {worst:.1e} at {where} (limit 1e-4; "
                   f"{len(sparse)} sparse)")


def _determinism(spec, seed, h, target) -> Outcome:
    a, b = _build(spec, seed), _build(spec, seed)
    same = all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    la, lb = _seeded_loss(a, h, target).item(), _seeded_loss(b, h, target).item()
    return Outcome("determinism", same and la == lb, f"parameters {'equal' if same else 'differ'}, losses "
                                                     f"{la!r} and {lb!r}")


def _flops(head, h) -> Outcome:
    from torch.utils.flop_counter import FlopCounterMode

    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        head.log_prob(h)
    counted, declared = counter.get_total_flops(), head.flops_per_token(train=False) * N
    err = abs(counted - declared) / max(counted, 1)
    return Outcome("FLOPs", err < 0.01 and counted > 0, f"declared {declared:,.0f} for {N} rows of an exact "
                                                         f"forward, counted {counted:,} (limit 1%)")


def _bf16(spec, seed, h, target) -> Outcome:
    head = _build(spec, seed).float()
    x = h.float().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = _seeded_loss(head, x, target)
        lp = head.log_prob(x.detach())
    loss.float().backward()
    err = lp.float().logsumexp(dim=1).abs().max().item()
    ok = math.isfinite(loss.item()) and x.grad is not None and bool(torch.isfinite(x.grad).all()) and err < 2e-2
    return Outcome("bf16 autocast", ok, f"loss {loss.item():.4f}, finite gradient: "
                                        f"{x.grad is not None and bool(torch.isfinite(x.grad).all())}, "
                                        f"max |logsumexp| {err:.1e} (limit 2e-2)")
