"""Running a model over a split segment by segment: the one pass that evaluation, the argmax diagnostic and
training's validation all make (below each of them, so none imports another)."""
from __future__ import annotations

import time

import torch
from torch import Tensor

from .batching import segments


@torch.no_grad()
def stream(model, data: Tensor, bptt: int, fn) -> tuple[list[Tensor], float]:
    """Run the encoder over ``data`` (L, B) segment by segment, carrying the LSTM state, and apply
    ``fn(h (T*B, d), y (T*B,)) -> tuple of (T*B,) tensors`` to each segment. Returns each output
    as (L-1, B) on the CPU, and the seconds spent.

    Outputs are written into tensors allocated once: keeping one small tensor per segment alive
    between the (T*B x V) temporaries fragmented the heap (PTB: peak RSS 2.1 GB instead of 0.4 GB)."""
    was_training = model.training
    model.eval()
    hidden = model.init_state(data.shape[1], data.device)
    outs: list[Tensor] = []
    t0 = time.perf_counter()
    for k, x, y in segments(data, bptt):
        h, hidden = model.encoder(x, hidden)
        res = fn(h.reshape(-1, h.shape[-1]), y.reshape(-1))
        if not outs:
            outs = [torch.empty((data.shape[0] - 1, data.shape[1]), dtype=r.dtype) for r in res]
        for out, r in zip(outs, res):
            out[k * bptt:k * bptt + y.shape[0]] = r.view_as(y)  # rows of segment k
    elapsed = time.perf_counter() - t0
    model.train(was_training)
    return outs, elapsed


def stream_log_probs(model, data: Tensor, bptt: int) -> tuple[Tensor, float]:
    """Exact log p(target | context) for every scored position of ``data`` (L, B): ((L-1, B), seconds)."""
    (lp,), seconds = stream(model, data, bptt, lambda h, y: (model.head.target_log_prob(h, y),))
    return lp.float(), seconds
