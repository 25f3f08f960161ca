"""The output-layer contract every method implements.

Modelled on ``torch.nn.AdaptiveLogSoftmaxWithLoss``: a head owns its parameters,
gives its *training* loss (which may be a sampled surrogate), and separately
gives *exact, fully normalised* log-probabilities, which is all evaluation uses.

Shapes: N = number of positions (batch x bptt flattened), d = head input size,
V = vocabulary size.
"""
from __future__ import annotations

import math

import dataclasses
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint


@dataclass(frozen=True)
class HeadContext:
    """What a head may know about its data and encoder when it is built."""

    vocab_size: int
    in_dim: int
    unigram_counts: Tensor | None = None  # (V,) train counts, frequency-sorted ids
    tied_weight: nn.Parameter | None = None  # (V, d) input embedding to share, if tying


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
    return sum(v.nbytes for m in module.modules() for v in vars(m).values() if isinstance(v, Scratch))


class OutputLayer(nn.Module):
    """Base class of all heads. Subclasses set ``Options`` and implement the two methods."""

    @dataclass(frozen=True)
    class Options:
        pass

    name: ClassVar[str] = ""
    # False for heads trained by a sampled surrogate: their exact distribution is not what they fit,
    # so training calls them diverged only beyond twice the uniform nll (train.py)
    trains_exact_likelihood: ClassVar[bool] = True
    # forward-sized matrix products of one training step: forward + 2 gradient products (+1 where
    # activation checkpointing recomputes the forward, chunked_mean_nll)
    train_passes: ClassVar[int] = 3

    def __init__(self, ctx: HeadContext, opts: "OutputLayer.Options"):
        super().__init__()
        self.vocab_size = ctx.vocab_size
        self.in_dim = ctx.in_dim
        self.opts = opts

    def loss(self, hidden: Tensor, target: Tensor) -> Tensor:
        """Training loss, a scalar averaged over positions. hidden (N, d), target (N,)."""
        raise NotImplementedError

    def log_prob(self, hidden: Tensor) -> Tensor:
        """Exact normalised log p(. | h): hidden (N, d) -> (N, V), each row logsumexp = 0."""
        raise NotImplementedError

    def forward_macs(self, exact: bool) -> float:
        """Multiply-adds of the head's matrix products for one token in one forward pass:
        ``exact`` = every word's log p (evaluation), else the training forward (sampled heads:
        the target and the negatives only)."""
        raise NotImplementedError

    def flops_per_token(self, train: bool) -> float:
        """Analytic floating-point operations per token of the head's matrix products (2 per
        multiply-add; elementwise passes such as exp, tanh or f excluded). ``train``: forward and
        backward of the training loss (each product's two gradient products: 3x the forward);
        otherwise one exact evaluation forward. Checked against ``torch.utils.flop_counter``."""
        return 2.0 * (self.train_passes * self.forward_macs(exact=False) if train else self.forward_macs(exact=True))

    @property
    def rank_dim(self) -> int:
        """d of the softmax rank bound d + 2 when the head is a softmax over a d-dimensional
        context (the input size, or the width of a widened context)."""
        return self.in_dim

    def sparse_params(self) -> list[nn.Parameter]:
        """Parameters whose gradients are sparse (rows gathered by index); they get a sparse optimizer."""
        return []

    def param_groups(self) -> list[tuple[list[nn.Parameter], float]]:
        """Parameters that want their own learning rate, as (params, multiplier of the base lr)."""
        return []

    # why the argmax of this head's distribution is not the argmax of affine logits (pipeline_src/evaluation/argmax.py)
    affine_why: ClassVar[str] = "its log-probabilities are not an increasing function of affine logits"

    def affine_logits(self) -> tuple[Tensor, Tensor, int] | None:
        """(W (R, e), b (R,), words) when the argmax of this head's test distribution is the argmax of
        ``W c + b`` over its first ``words`` rows for one e-dimensional context c it computes from h (the
        rest of the rows compete but are not words); None when it is not (``affine_why`` says why)."""
        return None

    def target_log_prob(self, hidden: Tensor, target: Tensor, chunk_size: int = 1024) -> Tensor:
        """Exact log p(target | h), (N,). Chunked over rows so memory stays O(chunk x V)."""
        return chunked_rows(lambda h, t: self.log_prob(h).gather(1, t[:, None]).squeeze(1), hidden, target,
                            chunk_size)


def output_embedding(ctx: HeadContext, init_range: float) -> tuple[nn.Parameter, nn.Parameter]:
    """The (V, d) output word embedding (the input embedding when tied) and a (V,) bias."""
    if ctx.tied_weight is not None:
        weight = ctx.tied_weight
    else:
        weight = nn.Parameter(torch.empty(ctx.vocab_size, ctx.in_dim).uniform_(-init_range, init_range))
    return weight, nn.Parameter(torch.zeros(ctx.vocab_size))


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


_REGISTRY: dict[str, type[OutputLayer]] = {}


def register(name: str):
    """Class decorator: make a head available to configs as ``type: <name>``."""

    def deco(cls: type[OutputLayer]) -> type[OutputLayer]:
        if name in _REGISTRY:
            raise ValueError(f"output layer {name!r} registered twice")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return deco


def _discover() -> None:
    """Import every module of this folder once: each head registers itself (a head is one file)."""
    import importlib
    import pkgutil

    package = __name__.rpartition(".")[0]
    for m in pkgutil.iter_modules([str(Path(__file__).parent)]):
        importlib.import_module(f"{package}.{m.name}")


def registry() -> dict[str, type[OutputLayer]]:
    """Every head, by its config name."""
    _discover()
    return dict(_REGISTRY)


def build_head(spec: dict, ctx: HeadContext) -> OutputLayer:
    """Build a head from a validated method spec such as ``{"type": "softmax", "chunk_size": 512}``."""
    spec = dict(spec)
    cls = registry()[spec.pop("type")]
    return cls(ctx, cls.Options(**spec))


def options_schema(cls: type[OutputLayer]) -> dict:
    """JSON schema of a head's options, generated from its ``Options`` dataclass.

    Field metadata may carry ``minimum``, ``exclusiveMinimum``, ``maximum``, ``enum`` and
    ``description``; these are copied into the schema.
    """
    props: dict = {"type": True}
    py2json = {int: "integer", float: "number", bool: "boolean", str: "string"}
    hints = typing.get_type_hints(cls.Options)
    for f in dataclasses.fields(cls.Options):
        t = hints[f.name]
        args = getattr(t, "__args__", None)
        if getattr(t, "__origin__", None) is tuple:  # tuple[int, ...] -> an array of integers
            prop = {"type": "array", "items": {"type": py2json[args[0]]}, **f.metadata}
            if f.default is not dataclasses.MISSING:
                prop["default"] = list(f.default)
            props[f.name] = prop
            continue
        types = [py2json[a] for a in (args or (t,)) if a in py2json]
        if float in (args or (t,)) and "integer" not in types:
            types.append("integer")  # YAML writes 1.0 as 1
        if args and type(None) in args:
            types.append("null")
        prop = {"type": types if len(types) > 1 else types[0]}
        prop.update({k: v for k, v in f.metadata.items()})
        if f.default is not dataclasses.MISSING:
            prop["default"] = f.default
        props[f.name] = prop
    required = [f.name for f in dataclasses.fields(cls.Options)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    return {"additionalProperties": False, "properties": props, "required": required}


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
