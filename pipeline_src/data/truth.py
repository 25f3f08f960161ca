"""A corpus's exact truth (the synthetic languages'), and per-band scores against it: what evaluation and the
count-based references share, without torch."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..io import paths
from ..io.artifacts import read_json


class SyntheticTruth:
    """A synthetic corpus's exact conditionals, mapped to the model's ids; loaded once per evaluation."""

    def __init__(self, raw: Path, prepared: Path):
        from .prepare import load_vocab

        truth = np.load(raw / paths.TRUTH)
        self.log_prob = truth["log_prob"].astype(np.float64)
        sym_index = {s: i for i, s in enumerate(truth["symbols"])}
        # model id -> generator symbol; <unk> (never produced by the generator) maps nowhere
        self.to_sym = np.array([sym_index.get(t, -1) for t in load_vocab(prepared)])
        self.order = read_json(raw / paths.TRUTH_SUMMARY, "order")["order"]

    def log_probs_at(self, ids: np.ndarray, positions: np.ndarray, split: str) -> np.ndarray:
        """The true log p of the tokens at ``positions`` of the encoded stream ``ids``."""
        from .synthetic import stream_log_probs as true_stream

        return true_stream(self.log_prob, self.order, self.to_sym[ids.astype(np.int64)])[positions]


class TokenTruth:
    """A corpus that stores the true log p of every token of its valid and test splits (the Zipfian language:
    no dense table at a million words), aligned with the prepared stream token for token."""

    def __init__(self, raw: Path):
        self.raw = raw

    def log_probs_at(self, ids: np.ndarray, positions: np.ndarray, split: str) -> np.ndarray:
        path = self.raw / f"truth-{split}.npy"
        lp = np.load(path)
        if lp.shape[0] != len(ids):
            raise ValueError(f"{path}: {lp.shape[0]} tokens, but the prepared {split} split has {len(ids)}: "
                             f"rerun fetch and prepare")
        return lp[positions]


def load_truth(raw: Path, prepared: Path):
    """The corpus's exact truth, or None (a corpus without one)."""
    if (raw / "truth-test.npy").exists():
        return TokenTruth(raw)
    if (raw / paths.TRUTH).exists():
        return SyntheticTruth(raw, prepared)
    return None
