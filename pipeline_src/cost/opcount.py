"""Launch cost measured on any machine: how many ATen operators a head's training step calls.

On a GPU a step of small blocks costs its kernel launches, not its FLOPs; the number of operators is what
decides it and can be counted on a CPU: ``torch.profiler`` lists every ATen call of the head's forward and
backward (the encoder and the optimizer left out), and the **top-level** ones (an ``aten::`` event whose nearest
enclosing event is not itself an ``aten::`` call) are the operators the step issues. A head whose count grows
with the classes, bands or rows present launches per class on a GPU; a count that grows with log V (the size
bins of hierarchical softmax, a tree's depth) is bounded and named.
"""
from __future__ import annotations

import torch


def _top_level(events) -> int:
    n = 0
    for e in events:
        if not e.name.startswith("aten::"):
            continue
        parent = e.cpu_parent
        if parent is None or not parent.name.startswith("aten::"):
            n += 1
    return n


def op_count(head, hidden: torch.Tensor, target: torch.Tensor) -> int:
    """Top-level ATen operators of one ``loss`` forward and backward of ``head`` on (hidden, target)."""
    from torch.profiler import ProfilerActivity, profile

    h = hidden.detach().clone().requires_grad_()
    head.zero_grad(set_to_none=True)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        head.loss(h, target).backward()
    return _top_level(prof.events())
