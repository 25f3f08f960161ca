"""One run's record (metrics.json) read into the rows of the result tables: every column of ``summary.csv`` and
how a record gives it (the one place a column is named), the anytime curve's rows (``anytime.csv``), and the
flat columns of the argmax diagnostic and the frequency bands. ``summarize`` collects them over runs."""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable

import pandas as pd

from ..config import run_hash
from ..data.bands import BANDS

# per band: perplexity, gap to the truth and tokens given the target's band (not a proper score: scoring.py), then
# the band split of its nll, the band's part (alloc) and the within-band part, and their gaps to the truth's split
BAND_PARTS = ("ppl", "gap_nll", "tokens", "alloc_nll", "within_nll", "alloc_gap", "within_gap")


@dataclass(frozen=True)
class _Split:
    """What one row of summary.csv is read from: a run's record (metrics.json), one split's scores, the
    dataset's vocabulary size."""
    metrics: dict
    split: str
    scores: dict
    vocab: int | None

    def part(self, key: str) -> dict:
        return self.metrics.get(key) or {}

    @cached_property
    def argmax(self) -> dict:
        return argmax_columns(self.metrics)

    @cached_property
    def bands(self) -> dict:
        return band_columns(self.scores)


# Every column of summary.csv in order, with how a run's record gives it: the one place a column is named.
COLUMNS: list[tuple[str, Callable[[_Split], Any]]] = [
    ("dataset", lambda r: r.metrics["dataset"]),
    ("vocab", lambda r: r.vocab),
    ("method", lambda r: r.metrics["method"]),
    ("type", lambda r: r.metrics["config"]["method"]["type"]),
    ("seed", lambda r: r.metrics["seed"]),
    ("split", lambda r: r.split),
    ("nll", lambda r: r.scores["nll"]),
    ("ppl", lambda r: r.scores["ppl"]),
    *[(k, lambda r, k=k: r.scores.get(k)) for k in ("true_nll", "gap_nll", "log_z_mean", "log_z_std",
                                                     "unnormalised_ppl")],
    ("tokens", lambda r: r.scores["tokens"]),
    ("tokens_per_s_train", lambda r: r.metrics["tokens_per_s_train"]),
    ("tokens_per_s_eval", lambda r: r.scores["tokens_per_s_eval"]),
    ("train_time_s", lambda r: r.metrics.get("train_time_s")),
    *[(k, lambda r, k=k: r.metrics[k]) for k in ("wall_time_s", "peak_mem_mb", "params")],
    *[(k, lambda r, k=k: r.metrics.get(k)) for k in ("head_flops_per_token_train", "head_flops_per_token_eval")],
    *[(k, lambda r, k=k: r.metrics[k]) for k in ("epochs", "best_epoch")],
    ("lr", lambda r: r.metrics["config"]["training"]["lr"]),
    ("logprob_rank", lambda r: r.part("rank").get("rank")),
    ("rank_contexts", lambda r: r.part("rank").get("contexts")),
    ("head_dim", lambda r: r.part("rank").get("head_dim")),
    ("device", lambda r: r.metrics["device"]),
    ("threads", lambda r: r.part("environment").get("threads", r.metrics.get("threads"))),
    ("cpu_model", lambda r: r.part("environment").get("cpu_model")),
    ("load_avg", lambda r: r.part("environment").get("load_avg_start")),
    ("torch", lambda r: r.part("environment").get("torch", r.metrics.get("torch"))),
    ("cpu_capability", lambda r: r.part("environment").get("cpu_capability")),
    ("kept_epoch", lambda r: r.metrics.get("kept_epoch")),
    # keep: last: the best-validation epoch's scores too
    ("best_model_nll", lambda r: (r.part("best_valid_model").get(r.split) or {}).get("nll")),
    ("collapsed", lambda r: bool(r.metrics.get("collapsed"))),
    ("collapse_budget_ended", lambda r: r.part("collapsed").get("budget_ended")),
    ("unigram_valid_ppl", lambda r: r.metrics.get("unigram_valid_ppl")),
    ("kept_valid_ppl", lambda r: _kept_valid_ppl(r.metrics)),
    ("status", lambda r: _status(r.metrics)),  # learned: below its unigram line on valid (stats.learned_runs)
    ("zero_prob_words", lambda r: r.part("rank").get("zero_probability_words")),
    ("zero_prob_tokens", lambda r: r.scores.get("zero_prob_tokens")),
    *[(k, lambda r, k=k: r.argmax[k]) for k in ("unargmaxable", "argmax_words",
                                                                  "argmax_lp_s_per_word", "argmax_reached_share")],
    ("budget_seconds", lambda r: r.part("budget").get("seconds")),
    ("tokens_reached", lambda r: (r.part("budget").get("reached") or {}).get("tokens")),
    *[(k, lambda r, k=k: r.bands[k]) for k in (f"{band}_{what}" for band in BANDS for what in BAND_PARTS)],
    # the log-loss of predicting the target's band (a proper score), and its gap to the truth's
    *[(k, lambda r, k=k: r.scores.get(k)) for k in ("band_alloc_nll", "band_alloc_gap")],
    # the topic language: the memoryless line (the topic averaged out) and the row's gap to it
    *[(k, lambda r, k=k: r.scores.get(k)) for k in ("memoryless_nll", "memory_gap_nll")],
    ("config_hash", lambda r: run_hash(r.metrics["config"])),
]
SUMMARY_COLUMNS = [name for name, _ in COLUMNS]


def _status(metrics: dict) -> str:
    """``learned`` when the kept weights' validation perplexity is below the run's unigram line, else ``did not
    learn`` (a diverged run too; no verdict rests on it: stats.learn_status). A record without the line: learned."""
    kept, line = _kept_valid_ppl(metrics), metrics.get("unigram_valid_ppl")
    return "did not learn" if line is not None and (kept is None or kept >= line) else "learned"


def summary_rows(metrics: dict, vocab: int | None = None) -> list[dict]:
    """One row per split of a run's record, every column of :data:`COLUMNS`."""
    return [{name: get(_Split(metrics, split, scores, vocab)) for name, get in COLUMNS}
            for split, scores in metrics["splits"].items()]


def _kept_valid_ppl(metrics: dict) -> float | None:
    """The evaluated model's validation perplexity as training measured it: on the validation tokens the
    unigram line was measured on (``training.valid_tokens``; ``ppl`` on the valid split is on all of them)."""
    nll = metrics.get("best_valid_nll" if metrics.get("kept") == "best" else "last_valid_nll")
    return None if nll is None or not math.isfinite(nll) else math.exp(nll)


ANYTIME_COLUMNS = ["dataset", "method", "seed", "point", "fraction", "train_seconds", "tokens", "steps", "valid_nll",
                   "valid_ppl", "validation_s", "epochs"]
POINT_COLUMNS = ["multiple", "test_nll", "test_ppl"]  # only where a run has budget points (no old table changes)


def anytime_rows(metrics: dict) -> list[dict]:
    """A budgeted run's anytime curve (training/budget.py), one row per point, then its points at equal data
    (``training.anytime_epochs``: ``epochs`` set, ``point`` and ``fraction`` empty), then its budget points
    (``training.budget_points``: ``multiple`` set, scored on test too); none without a budget."""
    budget = metrics.get("budget") or {}
    key = {"dataset": metrics["dataset"], "method": metrics["method"], "seed": metrics["seed"]}
    rows = [{**key, **{k: p.get(k) for k in ANYTIME_COLUMNS[3:]}}
            for p in (budget.get("anytime") or []) + (budget.get("token_points") or [])]
    return rows + [{**key, **{k: p.get(k) for k in ANYTIME_COLUMNS[3:] + POINT_COLUMNS}}
                   for p in budget.get("snapshots") or []]


def anytime_table(rows: list[dict]) -> pd.DataFrame:
    """anytime.csv: the budget points' columns only when some run has them."""
    points = any(r.get("multiple") is not None for r in rows)
    return pd.DataFrame(rows, columns=ANYTIME_COLUMNS + (POINT_COLUMNS if points else []))


def argmax_columns(metrics: dict) -> dict:
    """The unargmaxable-word diagnostic (argmax.py) as flat columns: NaN where the run has none, the exact
    ones NaN where the test is not defined for the head."""
    a = metrics.get("argmax") or {}
    e = a.get("exact") or {}
    return {"unargmaxable": e.get("unargmaxable"), "argmax_words": e.get("words"),
            "argmax_lp_s_per_word": e.get("lp_s_per_word") if e.get("lp_solved") else None,
            "argmax_reached_share": a.get("reached_share")}


def band_columns(split_metrics: dict) -> dict:
    """A split's per-band perplexity, gap to the truth and token count as flat columns (NaN before bands)."""
    bands = split_metrics.get("bands") or {}
    return {f"{band}_{what}": (bands.get(band) or {}).get(what) for band in BANDS for what in BAND_PARTS}
