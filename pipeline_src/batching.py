"""Batchified token streams and truncated-BPTT segments, as in the Zaremba / PyTorch word LM setups."""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from .config import ConfigError


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


def scored_positions(n_tokens: int, batch_size: int) -> np.ndarray:
    """Stream indices of the tokens an evaluation with ``batchify(., batch_size)`` scores, in (T, B) order."""
    length = n_tokens // batch_size
    grid = np.arange(batch_size)[None, :] * length + np.arange(length)[:, None]  # (L, B)
    return grid[1:]
