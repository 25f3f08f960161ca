"""Count-based reference rows: interpolated Kneser-Ney (:mod:`kneser_ney`) fitted on a dataset's train split,
its order chosen on the valid split, scored exactly on valid and test, per band and against the truth where
the corpus has one. No seeds (it is deterministic), no head FLOPs, not in the verdicts: a line to beat."""
from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

from ..config import config_hash
from ..io import paths
from ..io.artifacts import read_json
from ..io.atomic import write_json
from ..io.digests import seal

REFERENCES = ("kn",)


def reference_config(params: dict, dataset: str, name: str) -> dict:
    """What makes a reference row: its options and the data it reads (the data config's hash)."""
    from ..config import data_config

    return {"reference": name, "dataset": dataset, "options": params["references"][name],
            "data_hash": config_hash(data_config(params, dataset))}


def keeps_sentences(option, corpus_type: str) -> bool:
    """``sentences: auto``: n-grams stop at <eos> (SRILM's one sentence at a time) unless the corpus is the
    sparse n-gram synthetic language, whose truth conditions across line ends."""
    return corpus_type != "synthetic" if option == "auto" else bool(option)


def _split_row(lp: np.ndarray, ids: np.ndarray, counts: np.ndarray, truth, split: str,
               band_mass: np.ndarray | None = None) -> dict:
    """A split's scores; with ``band_mass`` (the model's log mass on each target's band) the band split too, and
    the truth's where the corpus gives it (evaluation/scoring.py)."""
    from ..data.bands import BANDS
    from .scoring import band_of_ids, per_band

    nll = float(-lp.mean())
    if not np.isfinite(nll):  # every Kneser-Ney probability is positive by construction: a bug, never a row
        raise ValueError(f"Kneser-Ney gave a {split} token probability 0: nll {nll}")
    row = {"nll": nll, "ppl": math.exp(nll), "tokens": int(lp.size)}
    true_lp = None
    if truth is not None:
        true_lp = truth.log_probs_at(ids, np.arange(len(ids)), split)
        row.update(true_nll=float(-true_lp.mean()), gap_nll=nll - float(-true_lp.mean()))
    alloc = true_alloc = None
    if band_mass is not None:
        alloc = -band_mass
        row["band_alloc_nll"] = float(alloc.mean())
        mass = None if truth is None else truth.band_log_mass_at(ids, np.arange(len(ids)), split, band_of_ids(counts),
                                                                 len(BANDS))  # (once per split: the test's only)
        if mass is not None:
            true_alloc = -mass
            row.update(true_band_alloc_nll=float(true_alloc.mean()),
                       band_alloc_gap=float(alloc.mean() - true_alloc.mean()))
    row["bands"] = per_band(-lp, ids, counts, true_lp, alloc, true_alloc)
    return row


def kn_reference(params: dict, dataset: str) -> dict:
    """Fit every order of ``references.kn.orders``, keep the one with the lowest valid nll, score it."""
    from ..data.prepare import EOS, load_split, load_vocab
    from ..data.truth import load_truth
    from .kneser_ney import KneserNey

    opts = params["references"]["kn"]
    prepared, raw = paths.prepared_dir(params, dataset), paths.raw_dir(params, dataset)
    vocab = load_vocab(prepared)
    corpus_type = read_json(prepared / paths.META, "config")["config"]["corpus"]["type"]
    sentences = keeps_sentences(opts.get("sentences", "auto"), corpus_type)
    eos = vocab.index(EOS) if EOS in vocab else 0
    split = {s: load_split(prepared, s).astype(np.int64) for s in ("train", "valid", "test")}
    orders, best = {}, None
    for order in opts["orders"]:
        t0 = time.perf_counter()
        model = KneserNey(order, len(vocab), opts.get("discount", "modified"), sentences, eos).fit(split["train"])
        fit_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        valid_lp = model.log_prob(split["valid"])
        score_s = time.perf_counter() - t0
        nll = float(-valid_lp.mean())
        orders[str(order)] = {"valid_nll": nll, "valid_ppl": math.exp(nll), "fit_seconds": fit_s,
                              "score_seconds": score_s, "discounts": [list(lv.discounts) for lv in model.levels]}
        if best is None or nll < best[0]:
            best = (nll, order, model, valid_lp)
    _, order, model, valid_lp = best
    counts = np.load(prepared / paths.NOISE)["counts"]
    truth = load_truth(raw, prepared)
    from ..data.bands import BANDS
    from .scoring import band_of_ids

    test_mass = model.band_log_mass(split["test"], band_of_ids(counts), len(BANDS))  # the band split, on test
    splits = {"valid": _split_row(valid_lp, split["valid"], counts, truth, "valid"),
              "test": _split_row(model.log_prob(split["test"]), split["test"], counts, truth, "test", test_mass)}
    cfg = reference_config(params, dataset, "kn")
    return {"dataset": dataset, "method": "kn", "kind": "count-based reference", "order": order,
            "sentences": sentences, "orders": orders, "splits": splits,
            "fit_seconds": orders[str(order)]["fit_seconds"],
            "fit_seconds_all_orders": sum(o["fit_seconds"] for o in orders.values()),
            "train_tokens": int(split["train"].size), "vocab": len(vocab),
            "config": cfg, "config_hash": config_hash(cfg)}


def write_reference(params: dict, dataset: str, name: str) -> Path:
    if name not in REFERENCES:
        raise ValueError(f"unknown reference {name!r}; known: {', '.join(REFERENCES)}")
    out = paths.reference_path(params, dataset, name)
    metrics = kn_reference(params, dataset)
    write_json(out, seal(metrics))
    return out
