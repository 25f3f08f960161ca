"""The numerical kernels the heads share, so no head imports a sibling: row chunking and scratch buffers,
exact linear evaluation (score and log Z, blocked over words), the fused chunked
linear cross-entropy (the softmax floor: three products per chunk, no (N x V) logits), the mixture and
sigsoftmax blocks, fp32 islands under autocast, and the cost formulas two heads are sized by.
"""
from __future__ import annotations

import math
from dataclasses import field

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable
from torch.utils.checkpoint import checkpoint


class Scratch:
    """A block of memory a head reuses for its (chunk x V) logits from one step to the next.

    On the CPU a fresh block of that size (28 MB at V = 10k) is handed back to the OS when freed, so each
    step pays its page faults again (measured: ~10 ms per step of the PTB baseline's ~150). A caching
    allocator (CUDA) would not, and reusing does no harm there. Not a buffer: never saved. The bench adds
    its bytes to a head's peak memory (``scratch_bytes``)."""

    def __init__(self) -> None:
        self.block: Tensor | None = None

    def get(self, rows: int, cols: int, like: Tensor) -> Tensor:
        n, b = rows * cols, self.block
        if b is None or b.numel() < n or b.dtype != like.dtype or b.device != like.device:
            b = self.block = torch.empty(n, dtype=like.dtype, device=like.device)
        return b[:n].view(rows, cols)

    @property
    def nbytes(self) -> int:
        return 0 if self.block is None else self.block.numel() * self.block.element_size()


def scratch_bytes(module: nn.Module) -> int:
    """Bytes held by the ``Scratch`` blocks of a module and its children."""
    held = (x for m in module.modules() for v in vars(m).values() for x in (v if isinstance(v, (list, tuple)) else [v]))
    return sum(x.nbytes for x in held if isinstance(x, Scratch))


CHUNK_ELEMENTS = 1 << 17  # elements of a chunk's largest temporary when a head sizes its chunks itself
MIN_CHUNK_ROWS = 128  # fewer rows starve the chunk's matrix products (see auto_chunk)


def auto_chunk(chunk_size: int | None, row_elements: int, budget: int = CHUNK_ELEMENTS,
               min_rows: int = MIN_CHUNK_ROWS) -> int:
    """``chunk_size``, or (None) as many rows as keep a (rows x row_elements) temporary within
    ``budget`` elements (2^17 = 512 KiB in float32, about a core's L2 cache: the elementwise passes over
    a chunk then stay in cache; at V = 500 this measured faster than both smaller and whole-batch
    chunks), but never fewer than ``min_rows``: at V = 10k and 33k the cache rule gives 13 and 3 rows,
    whose (rows x d) x (d x V) products ran sigsoftmax at 4.4x and 24x the GEMM floor instead of 2.0x
    and 2.2x with 128 rows (one thread, N = 700, d = 200; docs/bench.md)."""
    return chunk_size or max(min_rows, budget // max(1, row_elements))


def chunked_rows(fn, hidden: Tensor, target: Tensor, chunk_size: int) -> Tensor:
    """``fn(h (c, d), t (c,)) -> (c,)`` applied ``chunk_size`` rows at a time and concatenated: (N,)."""
    if hidden.shape[0] == 0:
        return hidden.new_zeros(0)
    return torch.cat([fn(hidden[s:s + chunk_size], target[s:s + chunk_size])
                      for s in range(0, hidden.shape[0], chunk_size)])


EVAL_COLS = 4096  # words per block in blocked exact evaluation (at 1M words: 0.65x the plain product's time,
# which writes the whole (N, V) output; 8192 columns 0.74x, 65,536 1.06x; one thread, N = 256, d = 128)


def linear_score_and_log_z(h: Tensor, weight: Tensor, bias: Tensor | None, target: Tensor,
                           cols: int = EVAL_COLS) -> tuple[Tensor, Tensor]:
    """(the target's logit (c,), logsumexp over V (c,)) of ``h W^T + b`` for h (c, d), weight (V, d), without
    forming the (c, V) logits: column blocks of ``cols`` words, a running max and a rescaled running sum.
    Each block is made, reduced and dropped while it is in cache, so exact evaluation at |V| = 1M reads no
    (c x V) tensor from memory (the unblocked logsumexp read it twice)."""
    c = h.shape[0]
    score = torch.empty(c, dtype=h.dtype, device=h.device)
    top = torch.full((c,), -math.inf, dtype=h.dtype, device=h.device)
    total = torch.zeros(c, dtype=h.dtype, device=h.device)
    for lo in range(0, weight.shape[0], cols):
        hi = min(lo + cols, weight.shape[0])
        z = torch.mm(h, weight[lo:hi].t()) if bias is None else torch.addmm(bias[lo:hi], h, weight[lo:hi].t())
        here = (target >= lo) & (target < hi)
        if here.any():
            rows = here.nonzero().squeeze(1)
            score[rows] = z[rows, target[rows] - lo]
        new = torch.maximum(top, z.amax(dim=1))
        e = (z - new[:, None]).exp() if z.requires_grad else z.sub_(new[:, None]).exp_()  # in place without autograd
        total = total * torch.exp(top - new) + e.sum(dim=1)
        top = new
    return score, top + torch.log(total)


def linear_log_mass(h: Tensor, weight: Tensor, bias: Tensor | None, member: Tensor,
                    cols: int = EVAL_COLS) -> Tensor:
    """log sum_w softmax(h W^T + b)_w member[g, w], (c, G), for h (c, d), weight (V, d) and a (G, V) matrix of
    non-negative weights (0/1: row g marks the words of group g; groups may overlap or leave words out), blocked
    over the vocabulary like :func:`linear_score_and_log_z`: each block's exp(z - running max) summed into the
    groups (a matrix-vector product a group, over its contiguous row) and into the normaliser, both rescaled when
    the max grows. One pass that reads no (c x V) tensor from memory (the default ``OutputLayer.log_mass`` forms
    ``log_prob`` and reads it three times more)."""
    c = h.shape[0]
    top = torch.full((c,), -math.inf, dtype=h.dtype, device=h.device)  # the running max; -inf: no word possible yet
    sums = torch.zeros(c, member.shape[0], dtype=h.dtype, device=h.device)
    total = torch.zeros(c, dtype=h.dtype, device=h.device)
    member = member.to(h.dtype).contiguous()
    for lo in range(0, weight.shape[0], cols):
        hi = min(lo + cols, weight.shape[0])
        z = torch.mm(h, weight[lo:hi].t()) if bias is None else torch.addmm(bias[lo:hi], h, weight[lo:hi].t())
        new = torch.maximum(top, z.amax(dim=1))
        shift = torch.where(new == -math.inf, 0.0, new)  # so a row with no word possible yet gets exp(-inf) = 0
        e = (z - shift[:, None]).exp() if z.requires_grad else z.sub_(shift[:, None]).exp_()  # in place: no autograd
        scale = torch.exp(top - shift)[:, None]  # 0 while top is -inf (the sums are 0), else <= 1
        sums = sums * scale + torch.stack([e @ row[lo:hi] for row in member], dim=1)  # (c, G)
        total = total * scale[:, 0] + e.sum(dim=1)
        top = new
    return torch.log(sums) - torch.log(total)[:, None]  # the shift cancels: log Z = shift + log total


def linear_target_log_prob(h: Tensor, weight: Tensor, bias: Tensor | None, target: Tensor) -> Tensor:
    """log softmax(h W^T + b)[target], (c,), blocked over the vocabulary (:func:`linear_score_and_log_z`)."""
    score, log_z = linear_score_and_log_z(h, weight, bias, target)
    return score - log_z


def target_log_softmax(logits: Tensor, target: Tensor) -> Tensor:
    """log softmax(logits)[target] for (c, V) logits and (c,) targets, without forming log_softmax."""
    return logits.gather(1, target[:, None]).squeeze(1) - torch.logsumexp(logits, dim=1)


def chunked_mean_nll(target_log_prob, hidden: Tensor, target: Tensor, chunk_size: int) -> Tensor:
    """-mean log p(target | h) computed ``chunk_size`` rows at a time.

    With gradients on, every chunk runs under activation checkpointing: its (rows x K x V)
    intermediates are freed after the forward and recomputed in backward (with the same dropout
    masks), so only one chunk's are ever alive. ``target_log_prob(h (c, d), t (c,)) -> (c,)``.
    """
    total = hidden.new_zeros(())
    grad = torch.is_grad_enabled()
    for s in range(0, hidden.shape[0], chunk_size):
        h, t = hidden[s:s + chunk_size], target[s:s + chunk_size]
        lp = checkpoint(target_log_prob, h, t, use_reentrant=False) if grad else target_log_prob(h, t)
        total = total + lp.sum()
    return -total / hidden.shape[0]


def apply_in_fp32(fn: type[torch.autograd.Function], *args):
    """``fn.apply(*args)`` with autocast off and bf16 / fp16 tensors cast to float32.

    The fused losses form their gradients by hand inside ``forward``; under bf16 autocast their
    products would come out in mixed dtypes. They run in float32 (mixed-precision training keeps
    the encoder and the heads' small projections in bf16); gradients flow back to the bf16 inputs.
    float32 and float64 inputs pass through unchanged.
    """
    device = next(a.device for a in args if isinstance(a, Tensor))
    low = (torch.bfloat16, torch.float16)
    args = tuple(a.float() if isinstance(a, Tensor) and a.dtype in low else a for a in args)
    with torch.autocast(device_type=device.type, enabled=False):
        return fn.apply(*args)


def softmax_(logits: Tensor) -> Tensor:
    """Row softmax of a (c, V) block, in place on the CPU: its kernel takes each row's max, exp and sum
    while the row is in cache, one pass over memory where amax, sub, exp, sum and a division were five.
    (Writing into its own input is safe there: each element is read before it is written. Elsewhere a
    new tensor, which a caching allocator makes cheap.)"""
    if logits.device.type == "cpu":
        return torch.ops.aten._softmax.out(logits, 1, False, out=logits)
    return torch.softmax(logits, dim=1)


class GradsInForward(torch.autograd.Function):
    """A fused loss that forms the gradients of its first three inputs (h, weight, bias) in ``forward``, for a unit
    upstream gradient, and saves them; ``ctx.other_inputs``: how many inputs follow them (no gradient)."""

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor):
        # Scale out of place: the saved tensors must survive a second backward (retain_graph, gradcheck).
        grads = [None if g is None else g * grad_out for g in ctx.saved_tensors]
        return (*grads, *[None] * ctx.other_inputs)


class ChunkedLinearCrossEntropy(GradsInForward):
    """mean_i [ log Z_i - (h_i W^T + b)[t_i] + alpha (log Z_i)^2 ], log Z_i = logsumexp(h_i W^T + b): the
    cross-entropy (alpha = 0), or Devlin et al.'s self-normalised objective; exact, O(chunk x V) memory."""

    @staticmethod
    def forward(ctx, h: Tensor, weight: Tensor, bias: Tensor | None, target: Tensor, chunk_size: int,
                scratch: Scratch | None, alpha: float = 0.0):
        n = h.shape[0]  # h (N, d), weight (V, d), bias (V,), target (N,)
        want_h, want_w, want_b = ctx.needs_input_grad[:3]
        grad_h = torch.empty_like(h) if want_h else None
        grad_w = torch.empty_like(weight) if want_w else None  # the first chunk's product overwrites it
        grad_b = torch.zeros_like(bias) if (want_b and bias is not None) else None
        total = torch.zeros((), dtype=torch.float64, device=h.device)
        for s in range(0, n, chunk_size):
            hc, tc = h[s:s + chunk_size], target[s:s + chunk_size]  # (c, d), (c,)
            rows = torch.arange(hc.shape[0], device=h.device)
            block = scratch.get(hc.shape[0], weight.shape[0], h) if scratch is not None else None
            logits = (torch.mm(hc, weight.t(), out=block) if bias is None  # (c, V)
                      else torch.addmm(bias, hc, weight.t(), out=block))
            picked = logits[rows, tc]  # (c,) target logits
            top = logits.amax(dim=1)  # (c,)
            p = softmax_(logits)  # (c, V)
            # logsumexp = top + log z, and the row's largest probability is exp(0) / z
            log_z = top - p.amax(dim=1).log()  # (c,)
            total += (log_z - picked).sum(dtype=torch.float64)
            if alpha:  # d(alpha log^2 Z)/d logits = 2 alpha log Z softmax
                total += alpha * (log_z.double() ** 2).sum()
                p.mul_((1.0 + 2.0 * alpha * log_z)[:, None])
            if want_h or want_w or want_b:
                p[rows, tc] -= 1.0  # N x d(mean loss)/d logits = softmax - one-hot; the 1/N goes into the products
                if grad_h is not None:
                    grad_h[s:s + chunk_size].addmm_(p, weight, beta=0.0, alpha=1.0 / n)
                if grad_w is not None:
                    grad_w.addmm_(p.t(), hc, beta=float(s > 0), alpha=1.0 / n)
                if grad_b is not None:
                    grad_b.add_(p.sum(0), alpha=1.0 / n)
        ctx.other_inputs = 4  # target, chunk_size, scratch, alpha
        ctx.save_for_backward(grad_h, grad_w, grad_b)
        return (total / n).to(h.dtype)



def linear_cross_entropy(h: Tensor, weight: Tensor, bias: Tensor | None, target: Tensor,
                         chunk_size: int = 1024, scratch: Scratch | None = None, alpha: float = 0.0) -> Tensor:
    """Mean cross-entropy of ``F.linear(h, weight, bias)`` against ``target``, chunked (plus alpha log^2 Z per
    row: the self-normalised objective); the logits of each chunk are written into ``scratch`` when given
    (a head's block, reused every step)."""
    return apply_in_fp32(ChunkedLinearCrossEntropy, h, weight, bias, target, chunk_size, scratch, alpha)




class ScoreAndSampledLogZ(GradsInForward):
    """(1/N) [ -sum_i s_{t_i} + coef sum_{i in S} (log Z_i)^2 ], s = h W^T + b, log Z_i = logsumexp(s_i): the
    infrequent self-normalised objective (``heads/selfnorm.py``), fused. The targets' scores touch N rows of W
    (their gradient an ``index_add_``); the penalty's rows S (distinct) are chunked like the cross-entropy: logits
    once into ``scratch``, softmax in place, and the two products that form the gradients, the row weights
    2 coef log Z_i / N folded into the (c, d) sides instead of a pass over (c, V). One (V, d) gradient, written by
    the first chunk's product; autograd's path formed one for the scores (scatter into zeros), one per chunk for
    the penalty, and their sums."""

    @staticmethod
    def forward(ctx, h: Tensor, weight: Tensor, bias: Tensor, target: Tensor, rows: Tensor, coef: float,
                chunk_size: int, scratch: Scratch | None):
        n = h.shape[0]  # h (N, d), weight (V, d), bias (V,), target (N,), rows (S,) distinct row ids
        want_h, want_w, want_b = ctx.needs_input_grad[:3]
        score = (h * weight.index_select(0, target)).sum(1) + bias.index_select(0, target)  # (N,)
        total = -score.sum(dtype=torch.float64)
        grad_h = torch.zeros_like(h) if want_h else None
        grad_w = torch.zeros_like(weight) if want_w else None
        grad_b = torch.zeros_like(bias) if want_b else None
        for s in range(0, rows.shape[0], chunk_size):
            r = rows[s:s + chunk_size]
            hc = h.index_select(0, r)  # (c, d)
            block = scratch.get(hc.shape[0], weight.shape[0], h) if scratch is not None else None
            logits = torch.addmm(bias, hc, weight.t(), out=block)  # (c, V)
            top = logits.amax(dim=1)
            p = softmax_(logits)  # (c, V)
            log_z = top - p.amax(dim=1).log()  # (c,)
            total += coef * (log_z.double() ** 2).sum()
            g = (2.0 * coef / n) * log_z  # (c,) d(loss)/d log Z_i; d log Z_i / d s_i = p_i
            if grad_h is not None:
                grad_h.index_add_(0, r, torch.mm(p, weight) * g[:, None])
            if grad_w is not None:
                grad_w.addmm_(p.t(), hc * g[:, None])
            if grad_b is not None:
                grad_b.addmv_(p.t(), g)
        if grad_h is not None:
            grad_h.sub_(weight.index_select(0, target), alpha=1.0 / n)
        if grad_w is not None:
            grad_w.index_add_(0, target, h, alpha=-1.0 / n)
        if grad_b is not None:
            grad_b.index_add_(0, target, torch.full_like(score, -1.0 / n))
        ctx.other_inputs = 5  # target, rows, coef, chunk_size, scratch
        ctx.save_for_backward(grad_h, grad_w, grad_b)
        return (total / n).to(h.dtype)



def score_and_sampled_log_z(h: Tensor, weight: Tensor, bias: Tensor, target: Tensor, rows: Tensor, coef: float,
                            chunk_size: int = 1024, scratch: Scratch | None = None) -> Tensor:
    """``ScoreAndSampledLogZ`` in float32 under autocast (``apply_in_fp32``)."""
    return apply_in_fp32(ScoreAndSampledLogZ, h, weight, bias, target, rows, coef, chunk_size, scratch)


def mos_forward_macs(d: int, v: int, k: int) -> int:
    """Multiply-adds per token of MoS with K components: prior d K, latent projections K d^2, K logit rows d V."""
    return d * k + k * d * d + k * d * v


def matched_width(d: int, v: int, k: int) -> int:
    """The d' whose widened softmax, d d' + d' V multiply-adds per token, costs what MoS with K components does."""
    return max(1, round(mos_forward_macs(d, v, k) / (d + v)))




MIXTURE_CHUNK_ELEMENTS = 1 << 19
MIXTURE_MIN_ROWS = 64  # K = 15, V = 10k / 33k: 64 rows 10.7x / 16.9x the softmax floor, 3 / 1 rows 15.1x / 39.8x


def sig_logits(z: Tensor) -> Tensor:
    """z + log sigmoid(z): log_softmax of it is log sigsoftmax(z), exactly and stably."""
    return z + F.logsigmoid(z)


def init_range_field():
    return field(default=0.1, metadata={"exclusiveMinimum": 0, "description": "untied weights ~ U(-r, r)"})


SIG_FAST_ABOVE = -30.0  # the sigsoftmax block skips log-sigmoid when every row's largest logit is above this


def mixture_chunk(log_prior: Tensor, h: Tensor, weight: Tensor, bias: Tensor, t: Tensor, sig: bool,
                   grad_scale: float | None):
    """log p(t) of a mixture for one chunk of rows, and optionally its gradients, in one pass.

    log_prior (c, K), h (c, K, d), weight (V, d), bias (V,), t (c,). Only one (c, K, V) block is
    alive (two for sigsoftmax components). With ``grad_scale`` s, also returns the gradients of
    -s * sum(log p(t)) w.r.t. log_prior, h, weight and bias:
      r = responsibilities softmax_k(log pi_k + log p_k(t)),
      d/dz_kv = s r_k (softmax(f(z_k))_v - [v = t]) f'(z_kv), f(z) = z (softmax) or z + log sigmoid(z)
      (sigsoftmax; f' = 2 - sigmoid(z)).
    Sigsoftmax components without a log-sigmoid pass over the block (on the CPU the slowest pass by far,
    ~7x an exp): f is increasing, so the row's largest f is at its largest logit m, and
    softmax(f(z))_v = exp(z_v - m) sigmoid(z_v) / S with S = sum_v exp(z_v - m) sigmoid(z_v) >= sigmoid(m).
    log S is exact unless sigmoid(m) itself underflows: below m = SIG_FAST_ABOVE the log-sigmoid form runs.
    That check reads a flag back from the device, free on the CPU; elsewhere (CUDA, where the log-sigmoid
    pass is one more memory-bound pass like the others) the log-sigmoid form runs, with no host read.
    """
    c, k = log_prior.shape
    z = F.linear(h, weight, bias)  # (c, K, V)
    idx = t[:, None, None].expand(c, k, 1)
    picked = z.gather(2, idx).squeeze(2)  # (c, K) target logits
    top = z.amax(dim=2)  # (c, K)
    sig_z = None
    if sig and (z.device.type != "cpu" or bool((top < SIG_FAST_ABOVE).any())):  # the latter practically never
        if grad_scale is not None:
            sig_z = torch.sigmoid(z)
        z = z.add_(F.logsigmoid(z))
        picked, top = z.gather(2, idx).squeeze(2), z.amax(dim=2)
        e = z.sub_(top[:, :, None]).exp_()  # (c, K, V)
    elif sig:
        sig_z = torch.sigmoid(z)  # (c, K, V)
        e = z.sub_(top[:, :, None]).exp_().mul_(sig_z)  # exp(z - m) sigmoid(z) = exp(f(z) - m); logsumexp f = m + log S
        picked = picked + F.logsigmoid(picked)  # f(z_t), on (c, K) only
    else:
        e = z.sub_(top[:, :, None]).exp_()  # (c, K, V), one exp pass
    total = e.sum(dim=2)  # (c, K)
    joint = log_prior + picked - top - total.log()  # log pi_k + log p_k(t)
    lp = torch.logsumexp(joint, dim=1)  # (c,)
    if grad_scale is None:
        return lp, None
    r = (joint - lp[:, None]).exp()  # (c, K)
    g = e.mul_((grad_scale * r / total)[:, :, None])  # s r_k softmax_k
    g.scatter_add_(2, idx, (-grad_scale * r)[:, :, None])
    if sig_z is not None:
        g.mul_(sig_z.neg_().add_(2.0))  # d(z + logsigmoid z)/dz = 2 - sigmoid(z)
    d_prior = -grad_scale * r
    d_h = torch.matmul(g, weight)  # (c, K, d)
    d_w = g.reshape(c * k, -1).t() @ h.reshape(c * k, -1)  # (V, d)
    d_b = g.sum(dim=(0, 1))
    return lp, (d_prior, d_h, d_w, d_b)


class MixtureCrossEntropy(torch.autograd.Function):
    """-mean log sum_k pi_k p_k(t), chunked; gradients formed in the forward pass (the loss ends the graph)."""

    @staticmethod
    def forward(ctx, log_prior, h, weight, bias, target, sig: bool, chunk_size: int):
        n = h.shape[0]
        grads = [torch.zeros_like(x) for x in (log_prior, h, weight, bias)]
        total = torch.zeros((), dtype=torch.float64, device=h.device)
        for s in range(0, n, chunk_size):
            sl = slice(s, s + chunk_size)
            lp, g = mixture_chunk(log_prior[sl], h[sl], weight, bias, target[sl], sig, 1.0 / n)
            total -= lp.sum(dtype=torch.float64)
            grads[0][sl], grads[1][sl] = g[0], g[1]
            grads[2] += g[2]
            grads[3] += g[3]
        ctx.save_for_backward(*grads)
        return (total / n).to(h.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        return (*(g * grad_out for g in ctx.saved_tensors), None, None, None)


def default_cutoffs(v: int) -> list[int]:
    """Clusters at 5% and 25% of the vocabulary (frequency-sorted ids), dropping degenerate ones."""
    return sorted({c for c in (v // 20, v // 4) if 0 < c < v})
