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

    def memoryless_at(self, ids: np.ndarray, positions: np.ndarray, split: str) -> None:
        """No memoryless line: a dense synthetic language has no topic to average out (None)."""
        return None

    def band_log_mass_at(self, ids: np.ndarray, positions: np.ndarray, split: str, band_of_id: np.ndarray,
                         bands: int) -> np.ndarray:
        """(n,) log q*(band of the target | context) of the tokens at ``positions``: the true mass on the band's
        words (a symbol's band is its model id's; one without an id, the last band)."""
        from .synthetic import stream_contexts

        m = self.log_prob.shape[1]
        sym_band = np.full(m, bands - 1)
        mapped = self.to_sym >= 0
        sym_band[self.to_sym[mapped]] = band_of_id[mapped]
        mass = np.stack([np.logaddexp.reduce(self.log_prob[:, sym_band == b], axis=1) if (sym_band == b).any()
                         else np.full(self.log_prob.shape[0], -np.inf) for b in range(bands)], axis=1)
        ctx = stream_contexts(self.order, m, self.to_sym[ids.astype(np.int64)])[positions]
        return mass[ctx, band_of_id[ids[positions].astype(np.int64)]]


class TokenTruth:
    """A corpus that stores the true log p of every token of its valid and test splits (the Zipfian language:
    no dense table at a million words), aligned with the prepared stream token for token."""

    def __init__(self, raw: Path, prepared: Path | None = None):
        self.raw, self.prepared = raw, prepared

    def log_probs_at(self, ids: np.ndarray, positions: np.ndarray, split: str) -> np.ndarray:
        path = self.raw / f"truth-{split}.npy"
        lp = np.load(path)
        if lp.shape[0] != len(ids):
            raise ValueError(f"{path}: {lp.shape[0]} tokens, but the prepared {split} split has {len(ids)}: "
                             f"rerun fetch and prepare")
        return lp[positions]

    def memoryless_at(self, ids: np.ndarray, positions: np.ndarray, split: str) -> np.ndarray | None:
        """The memoryless line's log p of the tokens at ``positions`` (the topic language: the best any model
        without memory beyond the sentence can do), or None for a language without one."""
        path = self.raw / f"memoryless-{split}.npy"
        if not path.exists():
            return None
        lp = np.load(path)
        if lp.shape[0] != len(ids):
            raise ValueError(f"{path}: {lp.shape[0]} tokens, but the prepared {split} split has {len(ids)}: "
                             f"rerun fetch and prepare")
        return lp[positions]

    def band_log_mass_at(self, ids: np.ndarray, positions: np.ndarray, split: str, band_of_id: np.ndarray,
                         bands: int) -> np.ndarray | None:
        """(n,) log q*(band of the target | context) of the tokens at ``positions``, from the language's tables
        (``truth.npz``): the class language's per class context (:func:`zipfian.band_log_mass`), the topic
        language's by the forward recursion over its topics (:func:`topics.band_log_mass`)."""
        from .prepare import load_vocab
        from .zipfian import band_log_mass, class_contexts

        z = np.load(self.raw / paths.TRUTH)
        sym_index = {str(s): i for i, s in enumerate(z["symbols"])}
        to_sym = np.array([sym_index.get(t, -1) for t in load_vocab(self.prepared)])  # <unk>: no word (-1)
        mapped = to_sym >= 0
        word_band = np.full(len(z["symbols"]), bands - 1)
        word_band[to_sym[mapped]] = band_of_id[mapped]
        if "home" in z.files:  # the topic language: the posterior over topics inside the band masses
            from ..io.artifacts import read_json
            from .topics import band_log_mass as topic_band_log_mass
            from .topics import from_tables

            lang = from_tables(z, read_json(self.raw / paths.TRUTH_SUMMARY, "doc_sentences")["doc_sentences"])
            return topic_band_log_mass(lang, to_sym[ids.astype(np.int64)], word_band, bands)[positions]
        table = band_log_mass(z["log_t"], z["word_class"], z["log_emit"], word_band, bands)  # (C*C, bands)
        cls = z["word_class"][to_sym[ids.astype(np.int64)]]
        ctx = class_contexts(cls, z["log_t"].shape[1])[positions]
        return table[ctx, band_of_id[ids[positions].astype(np.int64)]]


def load_truth(raw: Path, prepared: Path):
    """The corpus's exact truth, or None (a corpus without one)."""
    if (raw / "truth-test.npy").exists():
        return TokenTruth(raw, prepared)
    if (raw / paths.TRUTH).exists():
        return SyntheticTruth(raw, prepared)
    return None
