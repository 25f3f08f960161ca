"""An equal tuning budget per method: quasi-random trials drawn up front, the best by validation nll.

Every method gets ``tuning.trials`` trials of ``tuning.epochs`` epochs at run seed ``tuning.seed``.
A trial's point has one dimension all methods share, the learning rate (log-uniform over
``tuning.lr[<optimizer>]``, or the method's own widened range ``tuning.lr_ranges.<method>.<dataset>``), and at most
a few of the method's own options (``tuning.space.<method>``). Two designs (``tuning.design``):

- ``sobol`` (the default, what the publications before the sound-verdicts rerun used): scrambled Sobol points
  (``scipy.stats.qmc.Sobol``); the learning rates come from one 1-d sequence seeded by ``tuning.seed``, a method's
  own dimensions from a second sequence seeded by (``tuning.seed``, the method's name);
- ``latin-hypercube``: one learning rate in each of the n equal strata of its log range, the same for every
  method, and the method's first list of choices crossed with the rate (each value at low and high rates), its
  ranges a Latin hypercube of their own (:func:`_latin_values`). A stratum's point is drawn within it, so the
  rates tried need not reach the range's ends (the first large-vocabulary round's highest was 0.0485 of a range to
  0.1);
- ``latin-grid``: the same, with the learning rates at the n points spaced evenly over the log range, both ends
  included: the design covers the whole range it claims from its first trials.

Either way every method sees the same learning rates in the same order, and adding a method or a dimension never
moves another method's points.

**Successive halving** (``tuning.halving``, for the datasets it lists: an expensive size). The ``tuning.trials``
trials (rung 0) train at ``fraction`` of the run budget (``training.budget_seconds`` or the frozen token budget);
the ``promote`` best of them by validation nll train again from scratch at the full budget as trials
``trials`` .. ``trials + promote - 1`` (rung 1, each recording the rung-0 trial it repeats), and the selection
picks among rung 1 only. Every method still gets the same budget: ``trials x fraction + promote`` full runs.
Restarting rather than resuming the rung-0 run keeps every trial a whole run of its own (the schedule never reads
the budget, so the rung-0 run is the start of its rung-1 repeat up to the kernels' timing); it costs
``promote x fraction`` runs more. A selection at the lowest or highest rate tried is flagged (``lr_edge``): the range
may not hold the optimum. The DAG is static: trial i of every method is its own job, and a trial that diverges is
a result (``status: diverged``), skipped by the selection. The selected settings then run over every seed in
``run.seeds``.
"""
from __future__ import annotations

import math
import warnings
import zlib

import numpy as np

from ..io import paths
from ..io.artifacts import read_json
from ..io.atomic import write_json
from ..io.digests import check_seal, seal
from ..io.errors import ConfigError
from .identity import train_hash
from .runs import train_config


def settings(params: dict) -> dict:
    t = params.get("tuning") or {}
    if not t.get("enabled"):
        raise ConfigError("tuning.enabled is false in this params file: there are no trials to run or select")
    return t


def space(params: dict, dataset: str, method: str) -> list[dict]:
    """The method's search space: ``[{section, key, low, high, log, integer} | {section, key, choices}]``,
    the shared learning rate first."""
    t = settings(params)
    opt = train_config(params, dataset).optimizer
    if opt not in t["lr"]:
        raise ConfigError(f"key 'tuning.lr.{opt}': no learning-rate range for the optimizer {opt!r} of dataset "
                          f"{dataset!r}; given for: {sorted(t['lr'])}")
    lo, hi = t["lr"][opt]
    key = f"tuning.lr.{opt}"
    widened = ((t.get("lr_ranges") or {}).get(method) or {}).get(dataset)
    if widened is not None:  # a range widened after a pick at its edge (recorded in the params file)
        (lo, hi), key = widened, f"tuning.lr_ranges.{method}.{dataset}"
    if not lo < hi:
        raise ConfigError(f"key '{key}': low {lo} must be below high {hi}")
    dims = [{"section": "training", "key": "lr", "low": lo, "high": hi, "log": True, "integer": False}]
    for key, d in ((t.get("space") or {}).get(method) or {}).items():
        dim = {"section": "method", "key": key, **d}
        if "choices" not in d:
            dim.setdefault("log", False)
            dim.setdefault("integer", False)
            if not d["low"] < d["high"] or (dim["log"] and d["low"] <= 0):
                raise ConfigError(f"key 'tuning.space.{method}.{key}': need low < high (and low > 0 when log)")
        dims.append(dim)
    return dims


def _sobol(dim: int, n: int, seed) -> np.ndarray:
    from scipy.stats import qmc

    with warnings.catch_warnings():  # a non-power-of-2 n loses Sobol's balance properties, not its validity
        warnings.filterwarnings("ignore", message=".*balance properties.*")
        return qmc.Sobol(d=dim, scramble=True, seed=np.random.default_rng(seed)).random(n)


def _value(dim: dict, u: float):
    if "choices" in dim:
        c = dim["choices"]
        return c[min(int(u * len(c)), len(c) - 1)]
    lo, hi = dim["low"], dim["high"]
    x = math.exp(math.log(lo) + u * (math.log(hi) - math.log(lo))) if dim["log"] else lo + u * (hi - lo)
    if dim["integer"]:
        return int(min(max(round(x), math.ceil(lo)), math.floor(hi)))
    return float(x)


def points(params: dict, dataset: str, method: str) -> list[dict]:
    """The ``tuning.trials`` points of a method, each ``{"training": {"lr": ...}, "method": {...}}``."""
    t = settings(params)
    dims = space(params, dataset, method)
    n = t["trials"]
    if t.get("design", "sobol") in ("latin-hypercube", "latin-grid"):
        values = _latin_values(dims, n, t["seed"], method, ends=t["design"] == "latin-grid")
    else:
        unit = [_sobol(1, n, [t["seed"], 0])]  # the shared learning-rate column: the same for every method
        if len(dims) > 1:
            unit.append(_sobol(len(dims) - 1, n, [t["seed"], 1, zlib.crc32(method.encode())]))
        values = [[_value(dim, float(x)) for dim, x in zip(dims, row)] for row in np.concatenate(unit, axis=1)]
    out = []
    for row in values:
        pt: dict = {"training": {}, "method": {}}
        for dim, x in zip(dims, row):
            pt[dim["section"]][dim["key"]] = x
        out.append(pt)
    return out


def _strata(n: int, rng: np.random.Generator) -> np.ndarray:
    """(n,) a Latin hypercube column: one point in each of n equal strata of [0, 1), in random order."""
    return (rng.permutation(n) + rng.random(n)) / n


def _grid(n: int, rng: np.random.Generator) -> np.ndarray:
    """(n,) the n points i / (n - 1) of [0, 1], both ends included, in random order (``design: latin-grid``)."""
    return rng.permutation(n) / max(n - 1, 1)


def _latin_values(dims: list[dict], n: int, seed: int, method: str, ends: bool = False) -> list[list]:
    """Each trial's values under ``design: latin-hypercube``. The learning rate: one point in each of the n
    equal strata of its log range, from a stream seeded by ``seed`` alone (every method sees the same rates in
    the same order). A method's own dimensions, from a stream seeded by (seed, its name): a range gets a Latin
    hypercube column of its own; the first list of choices is crossed with the rate, its values assigned in turn
    along the trials sorted by rate (from a random start), so every value is tried at rates of both halves of
    the range whenever n is at least twice the number of choices; a further list of choices, a random balanced
    assignment."""
    lr = (_grid if ends else _strata)(n, np.random.default_rng([seed, 0]))  # latin-grid: the range's ends tried
    rng = np.random.default_rng([seed, 1, zlib.crc32(method.encode())])
    rank = np.argsort(np.argsort(lr))  # each trial's place in the order of rates
    columns, crossed = [lr], False
    for dim in dims[1:]:
        if "choices" in dim:
            k = len(dim["choices"])
            if not crossed:
                idx, crossed = (rank + rng.integers(k)) % k, True
            else:
                idx = rng.permutation(np.arange(n) % k)
            columns.append([dim["choices"][i] for i in idx])
        else:
            columns.append([_value(dim, float(u)) for u in _strata(n, rng)])
    columns[0] = [_value(dims[0], float(u)) for u in lr]
    return [list(row) for row in zip(*columns)]


def edge_of(lr: float, tried: list[float]) -> str | None:
    """``"lowest"`` or ``"highest"`` when a pick's learning rate is the lowest or highest tried (the range may
    not hold the optimum: widen it for that method and size), else None."""
    if len(tried) < 3:
        return None
    return "lowest" if lr <= min(tried) else "highest" if lr >= max(tried) else None


def halving(params: dict, dataset: str) -> dict | None:
    """``tuning.halving`` (``{fraction, promote}``) where it lists ``dataset``, else None."""
    h = (params.get("tuning") or {}).get("halving")
    return h if h and dataset in h["datasets"] else None


def trial_count(params: dict, dataset: str) -> int:
    """Every trial of a method at ``dataset``: ``tuning.trials``, and the promoted repeats under halving."""
    h = halving(params, dataset)
    return settings(params)["trials"] + (h["promote"] if h else 0)


def rung(params: dict, dataset: str, trial: int) -> int:
    """0 for a trial of the design; 1 for a promoted repeat at the full budget (successive halving)."""
    return int(halving(params, dataset) is not None and trial >= settings(params)["trials"])


def ranking(rows: list[dict]) -> list[int]:
    """Rung-0 trials (``trial_rows``) from the best validation nll down, the diverged left out (ties: lower trial)."""
    ok = [r for r in rows if r["status"] == "ok" and math.isfinite(r["valid_nll"])]
    return [r["trial"] for r in sorted(ok, key=lambda r: (r["valid_nll"], r["trial"]))]


def tuning_rung(params: dict, dataset: str, method: str) -> int:
    """The rung a ladder dataset's trials train (``tuning.rung_tokens``); a method capped below the ladder's top
    (``training.ladder_top_by_method``) is tuned at the largest rung within an eighth of its own top, so that its
    trials cost what the others' do relative to their finals."""
    tc = train_config(params, dataset)
    rung = int(settings(params)["rung_tokens"])
    top = tc.ladder_top_by_method.get(method)
    if top is None or int(top) >= max(tc.ladder):
        return rung
    within = [int(r) for r in tc.ladder if r <= int(top) / 8]
    if not within:
        raise ConfigError(f"key 'training.ladder_top_by_method.{method}' (dataset {dataset}): its top {top} leaves no "
                          f"rung within an eighth of it to tune at (training.ladder: {sorted(tc.ladder)}); raise "
                          f"the top or add a lower rung")
    return min(rung, max(within))


def trial_point(params: dict, dataset: str, method: str, trial: int,
                ranked: list[int] | None = None) -> tuple[int, dict]:
    """A trial's run seed and what it sets over the params file: its point and the trial budget (epochs; under
    halving, rung 0's share of the run budget), recorded under ``tuning`` (:func:`runspec.resolve_run` makes the
    config). A promoted repeat (rung 1) takes the point of the rung-0 trial ranked ``trial - tuning.trials`` in
    ``ranked`` (:func:`ranking`); without ``ranked`` its point is not known yet and only its place is recorded
    (what its hash file keys it by, as a final run's keys its params-file settings)."""
    t = settings(params)
    n, h = t["trials"], halving(params, dataset)
    if not 0 <= trial < trial_count(params, dataset):
        extra = f" + tuning.halving.promote = {h['promote']}" if h else ""
        raise ConfigError(f"trial {trial} is out of range: tuning.trials = {n}{extra} "
                          f"(0 .. {trial_count(params, dataset) - 1})")
    budget = {"training": {"epochs": t["epochs"]}}
    if t.get("rung_tokens") and train_config(params, dataset).ladder:  # a ladder: the trials train its tuning rung
        budget["training"]["ladder"] = [tuning_rung(params, dataset, method)]
    if t.get("anytime_points") is not None:  # unset: the training's (so a trial's hash moves only where it is set)
        budget["training"]["anytime_points"] = int(t["anytime_points"])
    if trial < n:
        pt = points(params, dataset, method)[trial]
        tune = {"trial": trial, "point": pt, **({"rung": 0, "budget_fraction": h["fraction"]} if h else {})}
        return t["seed"], {"training": {**pt["training"], **budget["training"]}, "method": pt["method"], "tuning": tune}
    place = trial - n
    if ranked is None:
        return t["seed"], {**budget, "tuning": {"trial": trial, "rung": 1, "promoted_rank": place}}
    if place >= len(ranked):
        raise ConfigError(f"{dataset}/{method} trial {trial}: promotes the rung-0 trial ranked {place + 1}, but only "
                          f"{len(ranked)} of {n} rung-0 trials did not diverge; widen or lower the tuning.lr ranges")
    src = ranked[place]
    pt = points(params, dataset, method)[src]
    return t["seed"], {"training": {**pt["training"], **budget["training"]}, "method": pt["method"],
                       "tuning": {"trial": trial, "point": pt, "rung": 1, "promoted_rank": place,
                                  "promoted_from": src}}


def replays_tokens(params: dict, dataset: str) -> bool:
    """Whether ``dataset``'s final runs replay their selected trial's tokens (``tuning.replay_tokens``)."""
    r = (params.get("tuning") or {}).get("replay_tokens")
    return bool(r) and dataset in r["datasets"]


def trial_tokens(params: dict, dataset: str, method: str, trial: int) -> int:
    """The training tokens a trial reached under its time budget (its record's ``budget.reached.tokens``): the
    token budget its method's final runs replay under ``tuning.replay_tokens``."""
    path = paths.trial_dir(params, dataset, method, trial) / paths.TRAIN_RECORD
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: tuning.replay_tokens gives the final runs of {dataset}/{method} "
                                f"the tokens of their selected trial {trial}; run or restore that trial first")
    s = read_json(path, "config", "status")
    reached = ((s.get("budget") or {}).get("reached") or {}).get("tokens")
    if s["config"]["training"].get("budget_seconds") is None or not reached:
        raise ConfigError(f"{path}: trial {trial} ran without a time budget, so it has no tokens to replay; "
                          f"tuning.replay_tokens is for datasets tuned under training.budget_seconds")
    return int(reached)


def selected_settings(params: dict, dataset: str, method: str, key: str) -> dict:
    """What the selection chose for a final run (its trial's point), refused when the trials it chose among
    were another config's (``key``: :func:`runspec.selection_key`). Under ``tuning.replay_tokens`` the final
    runs also take the tokens the selected trial reached in its time budget, as a token budget: the same steps
    on any machine, and the budget the selection judged the trial at."""
    path = paths.selected_path(params, dataset, method)
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run the trials and `python -m pipeline_src select "
                                f"--dataset {dataset} --method {method}` first (or `snakemake`)")
    sel = read_json(path, "settings", "trial", "valid_nll")
    if sel.get("selection_key") != key:
        raise ConfigError(f"{path} was selected under another tuning setup (key {sel.get('selection_key')}, now "
                          f"{key}); rerun `python -m pipeline_src select --dataset {dataset} --method {method}`")
    # an edited selection is named here, where the final runs' settings come from; one without a seal is refused
    # (a committed one from before digests is sealed when `restore` matched it to its stash's manifest)
    check_seal(path, sel, f"`python -m pipeline_src select --dataset {dataset} --method {method}`")
    chosen = {**sel["settings"], "tuning": {"selected_trial": sel["trial"], "valid_nll": sel["valid_nll"]}}
    if replays_tokens(params, dataset):
        tokens = trial_tokens(params, dataset, method, sel["trial"])
        chosen["training"] = {**chosen["training"], "budget_tokens": tokens, "budget_seconds": None}
        chosen["tuning"]["replays_trial_tokens"] = tokens
    return chosen


def trial_rows(trials: list) -> list[dict]:
    """One row per trial (``trials``: the method's resolved trial specs): its point, status, validation nll
    and cost; a trial another config made is an error."""
    rows = []
    for spec in trials:
        path = spec.out_dir / paths.TRAIN_RECORD
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing: run `python -m pipeline_src train --dataset {spec.dataset} "
                                    f"--method {spec.method} --trial {spec.trial}` first")
        s = read_json(path, "config", "config_hash", "status", "best_valid_nll")
        check_seal(path, s, f"trial {spec.trial} (`python -m pipeline_src train --dataset {spec.dataset} --method "
                            f"{spec.method} --trial {spec.trial}`)")
        if train_hash(s["config"]) != spec.train_hash:  # evaluation settings do not make a trial
            raise ConfigError(f"{path} was made by another config (hash {s['config_hash']}, now "
                              f"{spec.hash}); rerun trial {spec.trial}")
        pt = spec.config["tuning"]["point"]
        nll = math.inf if s["best_valid_nll"] is None else s["best_valid_nll"]  # null: diverged (JSON has no inf)
        rows.append({"dataset": spec.dataset, "method": spec.method, "trial": spec.trial,
                     **({"rung": spec.config["tuning"]["rung"]} if "rung" in spec.config["tuning"] else {}),
                     "status": s["status"],
                     "valid_nll": nll, "valid_ppl": math.exp(nll) if math.isfinite(nll) else math.inf,
                     "lr": pt["training"]["lr"], **{f"opt_{k}": v for k, v in pt["method"].items()},
                     "train_time_s": s.get("train_time_s"), "wall_time_s": s.get("wall_time_s"),
                     "tokens_per_s_train": s.get("tokens_per_s_train"),
                     "diverged_reason": (s.get("diverged") or {}).get("reason")})
    return rows


def select(params: dict, dataset: str, method: str, trials: list, key: str) -> dict:
    """Pick the trial with the lowest validation nll among those that did not diverge; write selected.json
    (``trials``: the resolved trial specs; ``key``: their selection key, :func:`runspec.selection_key`)."""
    rows = trial_rows(trials)
    top = max(r.get("rung", 0) for r in rows)  # under halving the pick is among the full-budget repeats only
    ok = [r for r in rows if r["status"] == "ok" and math.isfinite(r["valid_nll"]) and r.get("rung", 0) == top]
    if not ok:
        raise ConfigError(f"{dataset}/{method}: all {len(rows)} tuning trials diverged; widen or lower "
                          f"tuning.lr ranges")
    best = min(ok, key=lambda r: (r["valid_nll"], r["trial"]))
    pt = trials[best["trial"]].config["tuning"]["point"]
    edge = edge_of(best["lr"], [r["lr"] for r in rows if r.get("rung", 0) == 0])
    sel = {"dataset": dataset, "method": method, "trial": best["trial"], "valid_nll": best["valid_nll"],
           "settings": pt, "space": space(params, dataset, method), "trials": rows, "selection_key": key,
           "lr_edge": edge,
           "summary": (f"trial {best['trial']} of {len(rows)} ({sum(r['status'] != 'ok' for r in rows)} diverged"
                       + (f"; the best of the {sum(r.get('rung', 0) == top for r in rows)} promoted to the full "
                          f"budget" if top else "") + "): "
                       f"valid ppl {best['valid_ppl']:.2f} at {pt}"
                       + (f"; the {edge} learning rate tried: widen tuning.lr_ranges for it" if edge else ""))}
    if edge:
        print(f"{dataset}/{method}: the pick is the {edge} learning rate tried ({best['lr']:.3g}); the range may "
              f"not hold the optimum: widen it under tuning.lr_ranges.{method}.{dataset} and rerun its trials")
    write_json(paths.selected_path(params, dataset, method), seal(sel))
    return sel
