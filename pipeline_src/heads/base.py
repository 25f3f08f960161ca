"""The output-layer contract every method implements.

Modelled on ``torch.nn.AdaptiveLogSoftmaxWithLoss``: a head owns its parameters,
gives its *training* loss (which may be a sampled surrogate), and separately
gives *exact, fully normalised* log-probabilities, which is all evaluation uses.

Shapes: N = number of positions (batch x bptt flattened), d = head input size,
V = vocabulary size.
"""
from __future__ import annotations

import dataclasses
import functools
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch
from torch import Tensor, nn

from .families import FAMILIES
from .kernels import chunked_rows


@dataclass(frozen=True)
class HeadContext:
    """What a head may know about its data and encoder when it is built."""

    vocab_size: int
    in_dim: int
    unigram_counts: Tensor | None = None  # (V,) train counts, frequency-sorted ids
    tied_weight: nn.Parameter | None = None  # (V, d) input embedding to share, if tying


class OutputLayer(nn.Module):
    """Base class of all heads. Subclasses set ``Options`` and implement ``loss`` and ``log_prob``; every
    other hook below has a default, and a head overrides what it has (none is probed for by name)."""

    @dataclass(frozen=True)
    class Options:
        pass

    name: ClassVar[str] = ""  # its config name; these three are set by ``register``
    family: ClassVar[str] = ""  # one of FAMILIES: the reports group, colour and mark heads by it
    train_cost: ClassVar[int] = 2  # training cost per token at a small vocabulary, relative (Snakemake starts
    # the costliest jobs first: it knows no runtimes, and a long run started last leaves a core idle)
    # True for a head whose evaluation gives its score and log Z in one pass (``self_normalisation``): the
    # evaluation then reports how far from normalised its scores are
    self_normalised: ClassVar[bool] = False
    # False for heads trained by a sampled surrogate: their exact distribution is not what they fit,
    # so training calls them diverged only beyond twice the uniform nll (training/guard.py)
    trains_exact_likelihood: ClassVar[bool] = True
    # forward-sized matrix products of one training step: forward + 2 gradient products (+1 where
    # activation checkpointing recomputes the forward, chunked_mean_nll)
    train_passes: ClassVar[int] = 3

    # True for a head whose training loss depends on the order of the epoch's batches (Jean et al.'s target
    # vocabularies): the loop then calls ``plan_epoch`` before each epoch's first step (or its resumed step)
    plans_epochs: bool = False

    def __init__(self, ctx: HeadContext, opts: "OutputLayer.Options"):
        super().__init__()
        self.vocab_size = ctx.vocab_size
        self.in_dim = ctx.in_dim
        self.opts = opts

    def loss(self, hidden: Tensor, target: Tensor) -> Tensor:
        """Training loss, a scalar averaged over positions. hidden (N, d), target (N,)."""
        raise NotImplementedError

    def loss_penalty(self, hidden: Tensor, target: Tensor) -> Tensor | None:
        """For a head that ``trains_exact_likelihood`` with a term beside it (a self-normalisation penalty): that
        term, so that ``loss`` = the mean nll of ``log_prob`` + this (the conformance kit checks it). None: none."""
        return None

    def plan_epoch(self, targets: list[Tensor], start: int) -> None:
        """For a head that ``plans_epochs``: the epoch's training targets, one (T, B) segment per step in the
        order the loop takes them, and the step training starts (or resumes) at."""

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

    def self_normalisation(self, hidden: Tensor, target: Tensor,
                           chunk_size: int | None = None) -> tuple[Tensor, Tensor]:
        """(unnormalised log p of the targets (N,), log Z (N,)), their difference the exact log p: for the heads
        that declare ``self_normalised``."""
        raise NotImplementedError(f"{self.name} does not declare self_normalised")

    def log_mass(self, hidden: Tensor, member: Tensor) -> Tensor:
        """log sum_w p(w | h) member[g, w]: hidden (N, d), member (G, V) non-negative (0/1: row g marks the words of
        group g) -> (N, G). The evaluation's band split asks it (evaluation/scoring.py); a head that can sum its
        distribution without forming the (N, V) log-probabilities overrides it (a linear head: blocked over V)."""
        lp = self.log_prob(hidden)  # (N, V)
        top = lp.amax(dim=1, keepdim=True)  # each row's largest log p: exp(lp - top) <= 1, the largest term 1
        return torch.log((lp - top).exp_() @ member.to(lp.dtype).t()) + top

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


_REGISTRY: dict[str, type[OutputLayer]] = {}


def register(name: str, family: str, train_cost: int = 2):
    """Class decorator: make a head available to configs as ``type: <name>``, in one of ``FAMILIES``."""

    def deco(cls: type[OutputLayer]) -> type[OutputLayer]:
        if name in _REGISTRY:
            raise ValueError(f"output layer {name!r} registered twice")
        if family not in FAMILIES:
            raise ValueError(f"output layer {name!r}: family {family!r} is not one of {list(FAMILIES)}")
        if cls.self_normalised and cls.self_normalisation is OutputLayer.self_normalisation:
            raise ValueError(f"output layer {name!r} declares self_normalised but defines no self_normalisation")
        cls.name, cls.family, cls.train_cost = name, family, train_cost
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


@functools.lru_cache(maxsize=None)
def plugin_class(type_name: str) -> type[OutputLayer]:
    """The head class a plugin type names (heads/plugins.py), checked: a one-line ConfigError for a missing module,
    file or class, one that is no OutputLayer, an Options that is no dataclass and a family not among FAMILIES."""
    from ..io.errors import ConfigError
    from .plugins import find

    cls = find(type_name)
    attr = getattr(cls, "__name__", repr(cls))
    if not (isinstance(cls, type) and issubclass(cls, OutputLayer)):
        raise ConfigError(f"method type {type_name!r}: {attr} is not a subclass of pipeline_src.heads.base."
                          f"OutputLayer (the output-layer contract, docs/methods.md)")
    if not dataclasses.is_dataclass(cls.Options):
        raise ConfigError(f"method type {type_name!r}: {attr}.Options is not a dataclass (its options' schema)")
    if cls.family not in FAMILIES:
        raise ConfigError(f"method type {type_name!r}: {attr}.family is {cls.family!r}; declare one of "
                          f"{list(FAMILIES)}")
    if not cls.name:
        cls.name = type_name
    return cls


def build_head(spec: dict, ctx: HeadContext) -> OutputLayer:
    """Build a head from a validated method spec such as ``{"type": "softmax", "chunk_size": 512}``."""
    spec = dict(spec)
    name = spec.pop("type")
    spec.pop("source_sha256", None)  # a plugin's identity in a canonical config (config/identity.py), no option
    heads = registry()
    if name in heads:
        cls = heads[name]
        return cls(ctx, cls.Options(**spec))
    cls = plugin_class(name)  # a head from outside the repository (heads/plugins.py): its own checks, in one line
    try:
        return cls(ctx, cls.Options(**spec))
    except (ValueError, TypeError) as e:
        from ..io.errors import ConfigError

        raise ConfigError(f"head {name} refused its options {spec}: {type(e).__name__}: {e} (set them in the "
                          f"params file's methods entry of type {name!r})") from None


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


