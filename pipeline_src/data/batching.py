"""Batchified token streams and truncated-BPTT segments, as in the Zaremba / PyTorch word LM setups."""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from ..io.errors import ConfigError


def batchify(ids: np.ndarray, batch_size: int, device: torch.device | str = "cpu") -> Tensor:
    """Cut a stream into ``batch_size`` contiguous columns: (L, B), remainder dropped."""
    length = len(ids) // batch_size
    if length < 2:
        raise ConfigError(f"a split of {len(ids)} tokens is too short for batch size {batch_size} "
                          "(keys 'training.batch_size', 'training.eval_batch_size', 'evaluation.batch_size')")
    data = torch.from_numpy(ids[: length * batch_size].astype(np.int64))
    return data.view(batch_size, length).t().contiguous().to(device)


def segments(data: Tensor, bptt: int, start: int = 0):
    """Yield (index, inputs (T, B), targets (T, B)) for consecutive segments of at most ``bptt`` steps."""
    for k, i in enumerate(range(0, data.shape[0] - 1, bptt)):
        if k < start:
            continue
        t = min(bptt, data.shape[0] - 1 - i)
        yield k, data[i:i + t], data[i + 1:i + 1 + t]


def num_segments(data: Tensor, bptt: int) -> int:
    return (data.shape[0] - 1 + bptt - 1) // bptt


def variable_lengths(n_rows: int, bptt: int, seed: int, epoch: int, max_len: int | None = None) -> list[int]:
    """AWD-LSTM's variable-length BPTT (Merity et al. 2018) for one epoch over ``n_rows`` rows: each
    segment's base length is ``bptt`` with probability 0.95, else bptt / 2; its length is
    max(5, int(N(base, 5))), at most ``max_len`` when set (Yang et al.'s MoS code: bptt + max_seq_len_delta),
    cut at the end of the data. Drawn from a generator seeded by (seed, epoch),
    so a resumed run cuts the epoch exactly as before (step k is the k-th length)."""
    rng = np.random.default_rng([seed, epoch])
    out, i = [], 0
    while i < n_rows - 1:
        base = bptt if rng.random() < 0.95 else bptt / 2
        t = max(5, int(rng.normal(base, 5)))
        t = min(t, max_len or t, n_rows - 1 - i)
        out.append(t)
        i += t
    return out


def variable_segments(data: Tensor, lengths: list[int], start: int = 0):
    """Yield (index, inputs (T_k, B), targets (T_k, B)) for consecutive segments of the given lengths."""
    i = 0
    for k, t in enumerate(lengths):
        if k >= start:
            yield k, data[i:i + t], data[i + 1:i + 1 + t]
        i += t


def scored_positions(n_tokens: int, batch_size: int) -> np.ndarray:
    """Stream indices of the tokens an evaluation with ``batchify(., batch_size)`` scores, in (T, B) order."""
    length = n_tokens // batch_size
    grid = np.arange(batch_size)[None, :] * length + np.arange(length)[:, None]  # (L, B)
    return grid[1:]
