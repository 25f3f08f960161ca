"""Optimizers and gradient clipping that keep a sampled head's step independent of |V|.

A head that trains through a few gathered rows (the sampling-based objectives) lists the parameters
whose gradients are sparse (``OutputLayer.sparse_params``); the input embedding then looks up
sparsely too. Those parameters get an optimizer that only touches the rows present in the gradient
(``SGD`` handles sparse gradients; ``SparseAdam`` is Adam's lazy sparse variant); all others get the
configured dense optimizer. Clipping computes one global norm over dense and sparse gradients.
"""
from __future__ import annotations

import torch
from torch import nn

from ..config import ConfigError, TrainConfig


class MultiOptimizer:
    """Optimizers stepped together; ``param_groups`` spans them all (the trainer sets lr there)."""

    def __init__(self, optimizers: list[torch.optim.Optimizer]):
        self.optimizers = optimizers

    @property
    def param_groups(self) -> list[dict]:
        return [g for o in self.optimizers for g in o.param_groups]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for o in self.optimizers:
            o.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        for o in self.optimizers:
            o.step()

    def state_dict(self) -> list[dict]:
        return [o.state_dict() for o in self.optimizers]

    def load_state_dict(self, state: list[dict]) -> None:
        for o, s in zip(self.optimizers, state):
            o.load_state_dict(s)


def _groups(params: list[nn.Parameter], special: list[tuple[list[nn.Parameter], float]], lr: float) -> list[dict]:
    """One group at the base lr, then one per head-requested lr multiplier (``lr_mult``)."""
    mine = {id(p) for p in params}
    groups, taken = [], set()
    for ps, mult in special:
        sel = [p for p in ps if id(p) in mine]
        taken |= {id(p) for p in sel}
        if sel:
            groups.append({"params": sel, "lr_mult": mult})
    rest = [p for p in params if id(p) not in taken]
    if rest:
        groups.insert(0, {"params": rest, "lr_mult": 1.0})
    for g in groups:
        g["lr"] = lr * g["lr_mult"]
    return groups


def build_optimizer(model, tc: TrainConfig) -> MultiOptimizer:
    special = model.head.param_groups()
    sparse_ids = {id(p) for p in model.sparse_params()}
    params = list(model.parameters())
    dense = [p for p in params if id(p) not in sparse_ids]
    sparse = [p for p in params if id(p) in sparse_ids]
    opts: list[torch.optim.Optimizer] = []
    if dense:
        groups = _groups(dense, special, tc.lr)
        cls = torch.optim.SGD if tc.optimizer == "sgd" else torch.optim.Adam
        opts.append(cls(groups, lr=tc.lr, weight_decay=tc.weight_decay, **fused_if_cuda(dense)))
    if sparse:
        if tc.weight_decay:
            raise ConfigError("key 'training.weight_decay': must be 0 with a sampled head's sparse gradients "
                              "(or set `sparse: false` on the method)")
        groups = _groups(sparse, special, tc.lr)
        opts.append(torch.optim.SGD(groups, lr=tc.lr) if tc.optimizer == "sgd" else torch.optim.SparseAdam(groups, lr=tc.lr))
    return MultiOptimizer(opts)


def fused_if_cuda(params: list[nn.Parameter]) -> dict:
    """The fused (one kernel for all parameters) update on a GPU. On the CPU the default for-loop update
    stays: it is what the published CPU runs used (fused SGD gives the same weights there, fused Adam
    differs in the last bits)."""
    return {"fused": True} if params and params[0].is_cuda else {}


def clip_grad_norm(params, max_norm: float) -> None:
    """Scale all gradients so their global L2 norm is at most ``max_norm`` (sparse ones included)."""
    params = [p for p in params if p.grad is not None]
    if not any(p.grad.is_sparse for p in params):
        torch.nn.utils.clip_grad_norm_(params, max_norm)
        return
    grads = []
    for p in params:
        if p.grad.is_sparse:
            p.grad = p.grad.coalesce()
            grads.append(p.grad._values())
        else:
            grads.append(p.grad)
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    coef = (max_norm / (total + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(coef)
