"""Optimizers and gradient clipping that keep a sampled head's step independent of |V|.

A head that trains through a few gathered rows (the sampling-based objectives) lists the parameters
whose gradients are sparse (``OutputLayer.sparse_params``); the input embedding then looks up
sparsely too. Those parameters get an optimizer that only touches the rows present in the gradient
(``SGD`` handles sparse gradients; ``RowSparseAdam`` is SparseAdam, Adam's lazy sparse variant, done a block
of rows at a time); all others get the
configured dense optimizer. Clipping computes one global norm over dense and sparse gradients.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

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
        opts.append(torch.optim.SGD(groups, lr=tc.lr) if tc.optimizer == "sgd" else RowSparseAdam(groups, lr=tc.lr))
    return MultiOptimizer(opts)


# Rows updated together: their temporaries (a few MB) stay in cache and are reused, where whole-gradient
# temporaries (128 MB at 500,000 rows of 64) cost more in fresh pages than in arithmetic
ROW_BLOCK = 8192
MIN_RUN = 256  # a run of at least this many consecutive rows is updated through views, not gathered


class RowSparseAdam(torch.optim.SparseAdam):
    """``torch.optim.SparseAdam`` (Adam's lazy variant) with the same arithmetic in the same order, on the rows
    of the coalesced gradient, a block of rows at a time: a long run of consecutive rows (a hierarchical softmax's
    classes) in place through views; scattered rows (a sampled head's) by ``index_select`` of the block's
    moments, dense (rows, d) arithmetic, and ``index_add_`` of the changes (what adding a coalesced sparse
    tensor does). SparseAdam builds a sparse tensor for each of its three updates and masks the moments by the
    gradient's indices twice; with many rows (a hierarchical softmax touches every word of every class a batch
    holds) that bookkeeping, not the arithmetic, was its step. Same state and checkpoints as SparseAdam, and bitwise the same weights
    (``tests/test_optim.py``).

    Lazy: a row's moments decay and its weights move only in a step whose gradient holds it; the bias
    correction uses the parameter's step count (every step), not the row's, exactly as SparseAdam. Where every
    row is in every gradient this is dense Adam up to rounding and where eps sits (SparseAdam adds it to sqrt(v)
    before the bias correction scales the step, Adam after; with eps ~ 0 they agree)."""

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is not None:
                    self._update(p, group["lr"], beta1, beta2, group["eps"], group.get("maximize", False))
        return loss

    def _update(self, p: nn.Parameter, lr: float, beta1: float, beta2: float, eps: float, maximize: bool) -> None:
        grad = p.grad
        if not grad.is_sparse:
            raise RuntimeError("RowSparseAdam does not support dense gradients, please consider Adam instead")
        state = self.state[p]
        if not state:
            state["step"] = 0
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        state["step"] += 1
        grad = coalesced(-grad if maximize else grad)
        if grad.sparse_dim() != 1:
            raise NotImplementedError("RowSparseAdam updates the rows of a row-sparse gradient (an embedding's); "
                                      f"this one is sparse in {grad.sparse_dim()} dimensions")
        rows, g = grad._indices()[0], grad._values()  # (R,), (R, d): each row once
        if g.numel() == 0:
            return
        step_size = lr * math.sqrt(1 - beta2 ** state["step"]) / (1 - beta1 ** state["step"])
        starts, ends = runs(rows)
        scattered = torch.ones(rows.numel(), dtype=torch.bool, device=rows.device)
        for a, b in zip(starts, ends):  # long runs of consecutive rows (a hierarchical softmax's classes): views
            if b - a >= MIN_RUN:
                scattered[a:b] = False
                for lo in range(a, b, ROW_BLOCK):
                    hi = min(lo + ROW_BLOCK, b)
                    self._range(p, state, int(rows[lo]), g[lo:hi], step_size, beta1, beta2, eps)
        rest = torch.nonzero(scattered).squeeze(1)
        for lo in range(0, rest.numel(), ROW_BLOCK):  # the others: gathered, updated, added back
            at = rest[lo:lo + ROW_BLOCK]
            self._rows(p, state, rows[at], g[at], step_size, beta1, beta2, eps)

    @staticmethod
    def _range(p: nn.Parameter, state: dict, first: int, g: Tensor, step_size: float, beta1: float, beta2: float,
               eps: float) -> None:
        """SparseAdam's update of the rows first .. first + len(g) - 1, in place through views."""
        n = g.shape[0]
        m, v = state["exp_avg"][first:first + n], state["exp_avg_sq"][first:first + n]
        m.add_(g.sub(m).mul_(1 - beta1))  # old + (1 - beta1)(g - old), as SparseAdam adds its update
        v.add_(g.pow(2).sub_(v).mul_(1 - beta2))
        p.data[first:first + n].add_(-step_size * m.div(v.sqrt().add_(eps)))  # update + old = old + update

    @staticmethod
    def _rows(p: nn.Parameter, state: dict, rows: Tensor, g: Tensor, step_size: float, beta1: float, beta2: float,
              eps: float) -> None:
        """SparseAdam's update of one block of scattered rows, operation for operation."""
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        old_m = exp_avg.index_select(0, rows)
        m_update = g.sub(old_m).mul_(1 - beta1)
        exp_avg.index_add_(0, rows, m_update)
        old_v = exp_avg_sq.index_select(0, rows)
        v_update = g.pow(2).sub_(old_v).mul_(1 - beta2)
        exp_avg_sq.index_add_(0, rows, v_update)
        numer = m_update.add_(old_m)
        denom = v_update.add_(old_v).sqrt_().add_(eps)
        p.index_add_(0, rows, -step_size * numer.div_(denom))


def runs(rows: Tensor) -> tuple[list[int], list[int]]:
    """Where the sorted, unique ``rows`` break into runs of consecutive ids: (starts, ends) as positions."""
    breaks = (torch.nonzero(torch.diff(rows) != 1).squeeze(1) + 1).tolist()
    return [0, *breaks], [*breaks, rows.numel()]


def fused_if_cuda(params: list[nn.Parameter]) -> dict:
    """The fused (one kernel for all parameters) update on a GPU. On the CPU the default for-loop update
    stays: it is what the published CPU runs used (fused SGD gives the same weights there, fused Adam
    differs in the last bits)."""
    return {"fused": True} if params and params[0].is_cuda else {}


def coalesced(grad: Tensor) -> Tensor:
    """``grad.coalesce()``, without its sort and copy where the row indices are already strictly increasing (a
    hierarchical softmax's gradient is written coalesced, but autograd's accumulation drops the flag: at 1M
    words coalescing its 970,000 rows again cost 200 ms a step). Checked, not assumed: one pass over the indices."""
    if grad.is_coalesced():
        return grad
    idx = grad._indices()
    if idx.shape[0] == 1 and bool((idx[0, 1:] > idx[0, :-1]).all()):
        return torch.sparse_coo_tensor(idx, grad._values(), grad.shape, is_coalesced=True)
    return grad.coalesce()


def clip_grad_norm(params, max_norm: float) -> None:
    """Scale all gradients so their global L2 norm is at most ``max_norm`` (sparse ones included)."""
    params = [p for p in params if p.grad is not None]
    if not any(p.grad.is_sparse for p in params):
        torch.nn.utils.clip_grad_norm_(params, max_norm)
        return
    grads = []
    for p in params:
        if p.grad.is_sparse:
            p.grad = coalesced(p.grad)
            grads.append(p.grad._values())
        else:
            grads.append(p.grad)
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    coef = (max_norm / (total + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(coef)
