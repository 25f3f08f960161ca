"""Equal time for any machine: a hardware profile read against a token ladder.

A token-ladder publication (``training.schedule: wsd``; ``training/ladder.py``) measures what does not depend on
the machine: each seed's validation and test nll at every rung of the same ladder of token budgets. A **profile**
is what does: each method's measured training tokens/s at the cell's shapes on one kind of machine, a
``cell-bench.csv`` (``python -m pipeline_src bench-cells``):

- ``cpu-thread``: one CPU thread (``benchmarks/bench-cells-ladder``: the ladders' methods at their picks, the machine
  and kernels its json names);
- ``h100``: one GPU (``benchmarks/bench-cells-gpu``; at these shapes a GPU step is mostly a fixed cost);
- the reader's own: ``python -m pipeline_src profile --config FILE`` writes one for this machine.

Equal time T on a profile gives each method T x its tokens/s; each seed's nll there is read from its ladder by
linear interpolation in log tokens between the two measured rungs around it (never beyond the ladder: "outside
the measured range"), and the verdict is formed from those per-seed readings exactly as from measured ones
(``advice.what_to_use``: chosen on validation, Holm-adjusted). Every reading is marked as read from the ladder.
:func:`leave_one_out` checks the interpolation: each inner rung read from its neighbours against its measurement.

A dataset the profile did not measure (WikiText-2 in the ``h100`` one) is read from the profile's datasets of the
same model and batch shapes (:func:`speeds`): each method's tokens/s linear in log |V| of log tokens/s between the
two measured vocabulary sizes around the dataset's, or at the nearest one outside them, and every grid says which
rows it read; :func:`speed_leave_one_out` checks that reading on the profile's own inner vocabulary sizes.
"""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from ..io.artifacts import read_csv, read_json
from ..io.errors import ConfigError
from ..io.paths import REPOSITORY

PROFILES = {"cpu-thread": "benchmarks/bench-cells-ladder", "h100": "benchmarks/bench-cells-gpu"}
GPU_NAMES = {"h100": "NVIDIA H100 80GB HBM3"}  # the bench's json names no GPU; docs/bench.md records the one lent


def load_profile(name: str) -> tuple[pd.DataFrame, str]:
    """A profile's (dataset, method, tokens_per_s) rows and the machine it names: a name of ``PROFILES``, or a
    cell-bench.csv (or the folder holding it) that ``profile`` wrote. A published one (a provenance.json beside it:
    the committed profiles, by name or by path) must be as published (``seals.check_publication``). Where the params
    it was measured under are known (its provenance), each row also carries its dataset's ``vocab`` and ``shape``
    (``cell_shape``)."""
    if not name.strip():
        raise ConfigError(f"--profile is empty: name one of {sorted(PROFILES)}, or the cell-bench.csv that `python -m "
                          f"pipeline_src profile` wrote")
    path = REPOSITORY / PROFILES[name] / "cell-bench.csv" if name in PROFILES else Path(name)
    if name not in PROFILES and path.is_dir() and (path / "cell-bench.csv").is_file():
        path = path / "cell-bench.csv"  # the folder `profile` wrote into
    if not path.is_file():
        if path.is_dir():
            raise ConfigError(f"--profile {name}: a folder holding no cell-bench.csv (name the file that `python -m "
                              f"pipeline_src profile` wrote, or one of {sorted(PROFILES)})")
        raise ConfigError(f"--profile {name}: no such profile (one of {sorted(PROFILES)}, or the cell-bench.csv "
                          f"that `python -m pipeline_src profile` wrote)")
    published = (path.parent / "provenance.json").is_file()
    if published:  # an edited table is refused, as every committed table a reading rests on
        from .seals import check_publication

        check_publication(path.parent)
    key = {(REPOSITORY / v).resolve(): k for k, v in PROFILES.items()}.get(path.parent.resolve(), name)
    fix = ("--profile takes a profile's cell-bench.csv (one of the committed profiles', or the one `python -m "
           "pipeline_src profile` writes: run it again)")  # (a committed one, edited, is refused by its seal above)
    rows = read_csv(path, "dataset", "method", "tokens_per_s", advice=fix)
    if rows.empty:
        raise ConfigError(f"{path}: a header and no data rows (no method's tokens/s); {fix}")
    rows = _checked_rows(rows, path)
    meta, prov = (read_json(p, advice=fix, mapping=True) if p.is_file() else {}  # machine record, provenance
                  for p in (path.with_suffix(".json"), path.parent / "provenance.json"))
    commit = prov.get("commit", "?")[:7] if prov else None
    machine = (f"{meta.get('gpu') or GPU_NAMES.get(key) or meta.get('device', 'cpu')}, {meta.get('cpu_model', '?')} "
               f"host, {meta.get('threads', '?')} threads, torch {meta.get('torch', '?')}"
               + (f", measured at commit {commit}" if commit else ""))
    measured_vocab = rows["vocab"] if "vocab" in rows else pd.Series(math.nan, index=rows.index)
    rows = rows[["dataset", "method", "tokens_per_s"]].copy()
    params = prov.get("params") or {}
    datasets = params.get("datasets") or {}
    rows["vocab"] = [float(((datasets.get(d) or {}).get("corpus") or {}).get("vocab_size") or v)  # a corpus's own
                     for d, v in zip(rows.dataset, measured_vocab)]  # |V|: the bench's (written since bench-cells-ladder)
    rows["shape"] = [cell_shape(params, d) for d in rows.dataset]
    rows["options"] = [json.dumps(measured_options(params, m), sort_keys=True) if params else None
                       for m in rows.method]
    return rows, machine


def _checked_rows(rows: pd.DataFrame, path: Path) -> pd.DataFrame:
    """A profile's rows, each a finite tokens/s above 0 (and |V|, where given), one row a (dataset, method); else
    one line naming the data row (a 0, a NaN or a duplicate would change a verdict without a word)."""
    speed = pd.to_numeric(rows.tokens_per_s, errors="coerce")
    vocab = pd.to_numeric(rows["vocab"], errors="coerce") if "vocab" in rows else None
    checks = [*((rows[c].astype(str) != rows[c].astype(str).str.strip(), c, "has spaces around it (a name is read as "
                "written)") for c in ("dataset", "method")),
              (~(np.isfinite(speed) & (speed > 0)), "tokens_per_s", "is not a finite number above 0"),
              (rows.duplicated(["dataset", "method"]), None, "a second row for it: one measured speed a dataset and "
                                                             "method")]
    if vocab is not None:  # blank where the bench did not know it (the committed profiles predate the column)
        checks.append((rows["vocab"].notna() & ~(np.isfinite(vocab) & (vocab > 0)), "vocab",
                       "is not a vocabulary size"))
    for flags, column, what in checks:
        if flags.any():
            i = int(np.flatnonzero(flags.to_numpy())[0])
            r = rows.iloc[i]
            said = what if column is None else \
                f"its {column} {'blank or NaN' if pd.isna(r[column]) else repr(str(r[column]))} {what}"
            raise ConfigError(f"{path}, data row {i + 1} ({r.dataset}/{r.method}): {said}")
    rows = rows.assign(tokens_per_s=speed)
    return rows if vocab is None else rows.assign(vocab=vocab)


def measured_options(params: dict, method: str) -> dict:
    """A method's head options as a profile measured them: the params' settings over the head's defaults."""
    from ..heads.options import option_defaults

    spec = (params.get("methods") or {}).get(method) or {}
    try:
        defaults = option_defaults(spec.get("type", method))
    except Exception:  # a type this version does not know: its written settings only
        defaults = {}
    return {**defaults, **{k: v for k, v in spec.items() if k != "type"}}


def picked_options(tuning: pd.DataFrame | None) -> dict[tuple[str, str], dict]:
    """The options each (dataset, method) of a ladder trained with, as its tuning picked them (``tuning.csv``'s
    selected rows, their ``opt_*`` columns); empty without tuning."""
    if tuning is None or tuning.empty or "selected" not in tuning:
        return {}
    out = {}
    for r in tuning[tuning.selected.astype(str) == "True"].to_dict("records"):
        out[(r["dataset"], r["method"])] = {k[4:]: _option(v) for k, v in r.items()
                                            if k.startswith("opt_") and not _missing(v)}
    return out


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _option(v):
    """A tuning option as the head takes it: 800, not 800.0; a list (cutoffs), also where tuning.csv holds it as
    its text."""
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str) and v[:1] == "[":
        try:
            return json.loads(v)
        except ValueError:
            return v
    return v


def ladder_runs(summary: pd.DataFrame, dataset: str | None = None) -> list[tuple[str, str]]:
    """The (dataset, method) pairs a ladder publication's ``summary`` holds (of ``dataset`` alone, where given)."""
    runs = summary if dataset is None else summary[summary.dataset == dataset]
    return list(runs[["dataset", "method"]].drop_duplicates().itertuples(index=False, name=None))


def trained_options(params: dict, tuning: pd.DataFrame | None, pairs) -> dict[tuple[str, str], dict]:
    """The head options each (dataset, method) of ``pairs`` (a ladder's runs) trained with, whole: the params'
    settings over the head's defaults (``measured_options``), the tuning's pick over those (``picked_options``). A
    ladder trained from frozen settings, without tuning, has its params' alone."""
    picks = picked_options(tuning)
    return {(ds, m): {**measured_options(params, m), **picks.get((ds, m), {})} for ds, m in pairs}


def options_differ(profile: pd.DataFrame, picks: dict[str, dict]) -> str:
    """Where the profile measured a method at other head options than the ladder trained it with (``picks``:
    method -> the options it trained with, ``trained_options``'s or a tuning's picks alone): "nce (negatives
    100, trained at 800); ...", or ""."""
    out = []
    if "options" not in profile:
        return ""
    measured = profile.dropna(subset=["options"]).groupby("method").options.first()
    for m, pick in sorted(picks.items()):
        if m not in measured.index:
            continue
        have = json.loads(measured[m])
        diff = [f"{k} {_opt(have.get(k), v)}, trained at {_opt(v, have.get(k))}" for k, v in sorted(pick.items())
                if not _same_option(have.get(k), v)]
        if diff:
            out.append(f"{m} ({'; '.join(diff)})")
    return "; ".join(out)


def _same_option(a, b) -> bool:
    if _missing(a) and _missing(b):  # NaN is no value, on both sides
        return True
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(float(a), float(b), rel_tol=1e-9)
    return a == b


def _opt(v, other=None) -> str:
    """An option's value for people: 3 significant digits, more where the other value reads the same at 3."""
    if not isinstance(v, float):
        return str(v)
    short = f"{v:.3g}"
    return f"{v:.9g}" if isinstance(other, (int, float)) and f"{float(other):.3g}" == short else short


def cell_shape(params: dict, dataset: str) -> str | None:
    """What a training step's cost depends on besides |V| and the head, as one comparable string: the dataset's
    model (encoder, widths, layers, dropout, tying) and its batch, BPTT, optimizer and precision, each as the run
    resolves it (the file's top-level sections under the dataset's own keys). None where ``params`` cannot say."""
    from ..config.runs import model_config, train_config

    try:
        model, training = model_config(params, dataset), train_config(params, dataset)
    except (KeyError, TypeError):  # a dataset the params lack, or settings of another version
        return None
    return json.dumps({"model": dataclasses.asdict(model), "batch_size": training.batch_size, "bptt": training.bptt,
                       "optimizer": training.optimizer, "precision": training.precision}, sort_keys=True)


SAME_SIZE = 1e-3  # vocabulary sizes within 0.1% are one size (a corpus's vocab_size, and the model's |V| with <eos>)


def speeds(profile: pd.DataFrame, dataset: str, vocab: float | None = None,
           shape: str | None = None) -> tuple[pd.Series, str]:
    """Each method's tokens/s on ``profile`` for ``dataset`` (a Series by method) and where it came from: the
    dataset's own rows ("" ), or, where the profile did not measure it but measured datasets of the same ``shape``
    (``cell_shape``) at known |V|: at one of the same size, else each method read linearly in log |V| of log
    tokens/s between the two measured vocabulary sizes around ``vocab`` (a method only where both measured it), or
    at the nearest size outside them, never extrapolated; with a line naming the rows read. Empty where neither."""
    own = profile[profile.dataset == dataset]
    if not own.empty:
        return own.set_index("method").tokens_per_s.astype(float), ""
    if vocab is None or not vocab > 0 or shape is None or "shape" not in profile:
        return pd.Series(dtype=float), ""
    same = profile[(profile["shape"] == shape) & profile.vocab.notna()]
    sizes = same.groupby("dataset").vocab.first().sort_values(kind="stable")  # a tie: the first by name
    if sizes.empty:
        return pd.Series(dtype=float), ""
    rows = {d: same[same.dataset == d].set_index("method").tokens_per_s.astype(float) for d in sizes.index}
    level = sizes[(sizes / vocab - 1).abs() <= SAME_SIZE]
    below, above = sizes[sizes < vocab], sizes[sizes > vocab]
    if len(level) or not (len(below) and len(above)):
        d = level.index[0] if len(level) else below.index[-1] if len(below) else above.index[0]
        why = "the same size" if len(level) else "the nearest measured"
        return rows[d], f"read at {d}'s rows (|V| {sizes[d]:,.0f}, {why}; the same model and batch)"
    lo, hi = below.index[-1], above.index[0]
    x = (math.log(vocab) - math.log(sizes[lo])) / (math.log(sizes[hi]) - math.log(sizes[lo]))
    read = pd.Series({m: math.exp((1 - x) * math.log(rows[lo][m]) + x * math.log(rows[hi][m]))
                      for m in rows[lo].index if m in rows[hi].index}, dtype=float)
    return read, (f"interpolated in log |V| between {lo}'s and {hi}'s rows (|V| {sizes[lo]:,.0f} and "
                  f"{sizes[hi]:,.0f}; the same model and batch)")


def speed_leave_one_out(profile: pd.DataFrame) -> pd.DataFrame:
    """The |V| reading checked on the profile itself: each dataset whose size lies strictly between two other sizes
    measured at its shape, read from them (itself left out), against its measured tokens/s, per method."""
    rows = []
    known = profile[profile.vocab.notna() & profile["shape"].notna()] if "shape" in profile else profile.iloc[:0]
    for shape, g in known.groupby("shape"):
        sizes = g.groupby("dataset").vocab.first()
        for d, v in sizes.items():
            others = sizes.drop(d)
            if (others < v * (1 - SAME_SIZE)).any() and (others > v * (1 + SAME_SIZE)).any() and \
                    not ((others / v - 1).abs() <= SAME_SIZE).any():
                read, source = speeds(g[g.dataset != d], d, float(v), shape)
                measured = g[g.dataset == d].set_index("method").tokens_per_s.astype(float)
                for m in read.index.intersection(measured.index):
                    rows.append({"dataset": d, "vocab": v, "method": m, "measured": measured[m],
                                 "read": read[m], "ratio": read[m] / measured[m], "read_from": source})
    return pd.DataFrame(rows, columns=["dataset", "vocab", "method", "measured", "read", "ratio", "read_from"])


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
                     "outside": not (t[0] <= at <= t[-1]), "lowest": t[0], "highest": t[-1],
                     "read_from": "ladder (log-token interpolation)"})
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
           confidence: float = 0.95, shape: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """What to use on ``dataset`` for ``seconds`` of training on ``profile``'s machine: the advice row (as
    ``advice.what_to_use`` gives it, from the ladder's readings) and the per-method readings behind it, whose
    ``speed_from`` says where the tokens/s came from (``speeds``; ``shape``: the dataset's ``cell_shape``, its |V|
    is the summary's) and whose ``no_speed`` marks a ladder method the profile has no tokens/s for (not read)."""
    from .advice import what_to_use
    from .budget_axis import point_runs, ranking

    if not (anytime.dataset == dataset).any():  # first: a dataset no ladder holds is no fault of the profile's
        raise ConfigError(f"--dataset {dataset}: the ladder publication has no rungs of it, only of "
                          f"{', '.join(sorted(anytime.dataset.unique()))} (without --name, advise finds the "
                          f"publication whose ladder holds the dataset)")
    vocab = summary[summary.dataset == dataset].vocab.dropna() if "vocab" in summary else pd.Series(dtype=float)
    speed, source = speeds(profile, dataset, float(vocab.iloc[0]) if len(vocab) else None, shape)
    if speed.empty:
        raise ConfigError(f"the profile has no row for {dataset}'s shapes: measure them (`python -m pipeline_src "
                          f"profile`) or read a dataset it has ({sorted(profile.dataset.unique())})")
    points = ladder_points(anytime[anytime.dataset == dataset])
    methods = [m for m in points.method.unique() if m in speed.index]
    if not methods:
        raise ConfigError(f"the profile has tokens/s for none of the ladder's methods at {dataset} (it has "
                          f"{sorted(speed.index)}; the ladder {sorted(points.method.unique())})")
    unmeasured = [m for m in points.method.unique() if m not in speed.index]  # named beside the verdict, not read
    read = readings(points, {m: seconds * float(speed[m]) for m in methods}).assign(no_speed=False)
    if unmeasured:
        read = pd.concat([read, pd.DataFrame({"dataset": dataset, "method": unmeasured, "outside": False,
                                              "no_speed": True})], ignore_index=True)
    read = read.assign(speed_from=source)
    inside = read[~read.outside & ~read.no_speed & read.test_nll.notna()]
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
    ref = table.reference.iloc[0] if len(table) else None
    if isinstance(ref, str) and ref not in set(inside.method):  # it ran, but is not read at these seconds: why
        r = read[read.method == ref]
        table["reference_status"] = ("not in this ladder" if r.empty else "no tokens/s on this profile"
                                     if r.no_speed.any() else outside_range(r))
    return table, read


def outside_range(r: pd.DataFrame) -> str:
    """Where one method's readings outside its ladder lie (its ``readings`` rows, every seed's): below the lowest
    rung any seed measured, or beyond the highest."""
    tokens, lowest, highest = float(r.tokens.iloc[0]), float(r.lowest.min()), float(r.highest.max())
    if tokens < lowest:
        return f"outside the measured range: {_count(tokens)} tokens, below its lowest rung, {lowest:,.0f}"
    return f"outside the measured range: {_count(tokens)} tokens, beyond its top rung, {highest:,.0f}"


def _count(x: float) -> str:
    """A token count as people read it: digits grouped, or three significant digits past a quadrillion (a --seconds
    of 1e300 printed 300 digits)."""
    return f"{x:,.0f}" if x < 1e15 else f"{x:.3g}"
