"""Equal time for any machine: a hardware profile read against a token ladder.

A token-ladder publication (``training.schedule: wsd``; ``training/ladder.py``) measures what does not depend on
the machine: each seed's validation and test nll at every rung of the same ladder of token budgets. A **profile**
is what does: each method's measured training tokens/s at the cell's shapes on one kind of machine, a
``cell-bench.csv`` (``python -m pipeline_src bench-cells``):

- ``cpu-thread``: one CPU thread (``benchmarks/bench-cells``, the machine and kernels its json names);
- ``h100``: one GPU (``benchmarks/bench-cells-gpu``; at these shapes a GPU step is mostly a fixed cost);
- the reader's own: ``python -m pipeline_src profile --config FILE`` writes one for this machine.

Equal time T on a profile gives each method T x its tokens/s; each seed's nll there is read from its ladder by
linear interpolation in log tokens between the two measured rungs around it (never beyond the ladder: "outside
the measured range"), and the verdict is formed from those per-seed readings exactly as from measured ones
(``advice.what_to_use``: chosen on validation, Holm-adjusted). Every reading is marked as read from the ladder.
:func:`leave_one_out` checks the interpolation: each inner rung read from its neighbours against its measurement.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from ..io.artifacts import read_csv, read_json
from ..io.errors import ConfigError
from ..io.paths import REPOSITORY

PROFILES = {"cpu-thread": "benchmarks/bench-cells", "h100": "benchmarks/bench-cells-gpu"}
GPU_NAMES = {"h100": "NVIDIA H100 80GB HBM3"}  # the bench's json names no GPU; docs/bench.md records the one lent


def load_profile(name: str) -> tuple[pd.DataFrame, str]:
    """A profile's (dataset, method, tokens_per_s) rows and the machine it names: a name of ``PROFILES`` or a
    path to a cell-bench.csv (the reader's own ``profile``)."""
    path = REPOSITORY / PROFILES[name] / "cell-bench.csv" if name in PROFILES else Path(name)
    if not path.is_file():
        raise ConfigError(f"--profile {name}: no such profile (one of {sorted(PROFILES)}, or the cell-bench.csv "
                          f"that `python -m pipeline_src profile` wrote)")
    rows = read_csv(path, "dataset", "method", "tokens_per_s")
    meta_path = path.with_suffix(".json")
    meta = read_json(meta_path) if meta_path.is_file() else {}
    prov = path.parent / "provenance.json"
    commit = read_json(prov).get("commit", "?")[:7] if prov.is_file() else None
    machine = (f"{meta.get('gpu') or GPU_NAMES.get(name) or meta.get('device', 'cpu')}, {meta.get('cpu_model', '?')} "
               f"host, {meta.get('threads', '?')} threads, torch {meta.get('torch', '?')}"
               + (f", measured at commit {commit}" if commit else ""))
    return rows[["dataset", "method", "tokens_per_s"]], machine


def ladder_points(anytime: pd.DataFrame) -> pd.DataFrame:
    """A ladder publication's rungs, per seed: (dataset, method, seed, tokens, valid_nll, test_nll)."""
    need = {"multiple", "tokens", "valid_ppl", "test_nll"}
    if not need <= set(anytime.columns):
        raise ConfigError(f"anytime.csv has no ladder rungs (columns {sorted(need - set(anytime.columns))} missing)")
    pts = anytime.dropna(subset=["multiple", "test_nll"])
    return pd.DataFrame({"dataset": pts.dataset, "method": pts.method, "seed": pts.seed,
                         "tokens": pts.tokens.astype(float), "valid_nll": np.log(pts.valid_ppl.astype(float)),
                         "test_nll": pts.test_nll.astype(float)}).sort_values(["dataset", "method", "seed", "tokens"])


def read_at(tokens: np.ndarray, nll: np.ndarray, at: float) -> float:
    """The nll at ``at`` tokens, linear in log tokens between the measured rungs around it (``tokens`` increasing);
    NaN outside [first rung, last rung]."""
    if not len(tokens) or at < tokens[0] or at > tokens[-1]:
        return math.nan
    return float(np.interp(math.log(at), np.log(tokens), nll))


def readings(points: pd.DataFrame, tokens_by_method: dict[str, float]) -> pd.DataFrame:
    """Each seed's valid and test nll read from its ladder at its method's tokens (``tokens_by_method``), with
    ``outside`` where the tokens lie beyond the measured rungs."""
    rows = []
    for (ds, m, seed), g in points.groupby(["dataset", "method", "seed"]):
        at = tokens_by_method.get(m)
        if at is None:
            continue
        t = g.tokens.to_numpy()
        rows.append({"dataset": ds, "method": m, "seed": seed, "tokens": at,
                     "valid_nll": read_at(t, g.valid_nll.to_numpy(), at),
                     "test_nll": read_at(t, g.test_nll.to_numpy(), at),
                     "outside": not (t[0] <= at <= t[-1]), "read_from": "ladder (log-token interpolation)"})
    return pd.DataFrame(rows)


def leave_one_out(points: pd.DataFrame) -> pd.DataFrame:
    """Each inner rung of each seed's ladder read from its two neighbours, against what was measured there: the
    interpolation's error in test nll (nats)."""
    rows = []
    for (ds, m, seed), g in points.groupby(["dataset", "method", "seed"]):
        t, y = g.tokens.to_numpy(), g.test_nll.to_numpy()
        for i in range(1, len(t) - 1):
            guess = read_at(np.delete(t, i), np.delete(y, i), t[i])
            rows.append({"dataset": ds, "method": m, "seed": seed, "tokens": t[i], "measured": y[i],
                         "read": guess, "error": guess - y[i]})
    return pd.DataFrame(rows)


def advise(anytime: pd.DataFrame, summary: pd.DataFrame, profile: pd.DataFrame, seconds: float, dataset: str,
           confidence: float = 0.95) -> tuple[pd.DataFrame, pd.DataFrame]:
    """What to use on ``dataset`` for ``seconds`` of training on ``profile``'s machine: the advice row (as
    ``advice.what_to_use`` gives it, from the ladder's readings) and the per-method readings behind it."""
    from .advice import what_to_use
    from .budget_axis import point_runs, ranking

    speed = profile[profile.dataset == dataset].set_index("method").tokens_per_s
    if speed.empty:
        raise ConfigError(f"the profile has no row for {dataset}'s shapes: measure them (`python -m pipeline_src "
                          f"profile`) or read a dataset it has ({sorted(profile.dataset.unique())})")
    if not (anytime.dataset == dataset).any():
        raise ConfigError(f"the ladder publication has no rungs of {dataset}: read one it has "
                          f"({sorted(anytime.dataset.unique())})")
    points = ladder_points(anytime[anytime.dataset == dataset])
    methods = [m for m in points.method.unique() if m in speed.index]
    read = readings(points, {m: seconds * float(speed[m]) for m in methods})
    inside = read[~read.outside & read.test_nll.notna()]
    if inside.empty:
        return pd.DataFrame(), read
    pts = pd.DataFrame({"dataset": inside.dataset, "method": inside.method, "seed": inside.seed,
                        "multiple": 1.0, "tokens": inside.tokens, "test_nll": inside.test_nll,
                        "valid_ppl": np.exp(inside.valid_nll)})
    runs = point_runs(pts, summary)
    reference = summary.reference.dropna().iloc[0] if "reference" in summary and summary.reference.notna().any() \
        else "softmax"
    head = ranking(runs, reference, confidence)
    table = what_to_use(runs.drop(columns=["multiple", "tokens"]), head.drop(columns=["multiple"]), None, confidence)
    return table, read
