"""The token axis checked on a real device: a few methods trained for the same seconds here, set beside what a
hardware profile reads from the published ladders for those seconds (``python -m pipeline_src device-check``).

For each method, one seed, with the settings of its published final run (``records/runs/.../train.json``'s
config: the tuned rate and option):

1. **calibrate**: a short run (``calibrate_s`` seconds of training steps, a constant rate) measures this device's
   training tokens/s at those settings, every method's before any trains on (seconds that buy a method under
   ``MIN_STEPS`` steps are refused here, not after the others' runs);
2. **train**: a one-rung ladder to T x those tokens/s under the publication's own schedule (warmup-stable-decay:
   the rung's model is annealed at exactly those tokens), scored on test;
3. **read**: the publication's ladders for the same method at the tokens trained here, and at T x the profile's
   tokens/s (``profiles.readings``: log-token interpolation between rungs, never beyond them).

What it shows: whether the model trained here at T seconds scores what the ladder says it should at its tokens
(the ladder holds on another machine: tokens do not depend on it), and whether the profile's tokens/s are this
device's (its reading at T against the one at the tokens reached here).
"""
from __future__ import annotations

import copy
import math
from pathlib import Path

import pandas as pd
import torch

from ..io import paths
from ..io.artifacts import read_csv, read_json
from ..io.atomic import atomic_path, write_json
from ..io.errors import ConfigError
from .profiles import ladder_points, load_profile, measured_options, options_differ, readings

COLUMNS = ["dataset", "method", "seed", "seconds", "tokens_per_s_here", "tokens_here", "test_ppl_here",
           "ladder_ppl_at_tokens_here", "profile_tokens", "ladder_ppl_at_profile_tokens", "ladder_seeds",
           "profile_options_differ"]


def published_config(pub: Path, dataset: str, method: str, seed: int) -> dict:
    """The final run's config as the publication recorded it (its train.json in ``records/``)."""
    path = pub / "records" / "runs" / dataset / method / f"seed{seed}" / paths.TRAIN_RECORD
    if not path.is_file():
        runs = pub / "records" / "runs" / dataset
        if (runs / method).is_dir():  # the method ran, not this seed
            seeds = sorted(p.name for p in (runs / method).glob("seed*"))
            raise ConfigError(f"--seed {seed}: {pub.name} holds no final run of {dataset}/{method} seed {seed} (its "
                              f"seeds: {', '.join(seeds) or 'none'})")
        held = sorted(p.name for p in runs.glob("*") if (p / f"seed{seed}").is_dir())
        raise ConfigError(f"--methods {method}: {pub.name} holds no final run of {dataset}/{method} seed {seed} (its "
                          f"runs there: {', '.join(held) or 'none'})")
    cfg = read_json(path, "config")["config"]
    if not (cfg.get("training") or {}).get("ladder"):
        raise ConfigError(f"{path}: its run trained no token ladder (training.ladder): nothing to read it against")
    return cfg


MIN_STEPS = 10  # a rung of fewer steps has no cooldown worth the name (its fifth is under two steps)
CALIBRATION_POINTS = 5  # the calibration's rate is read between its first and last point: the first steps' start-up
# cost (a GPU's kernel selection and allocator, a CPU's first touches) left out, as a profile's warmed-up bench does


def calibration_config(cfg: dict, seconds: float) -> dict:
    """``cfg`` trained for ``seconds`` of training steps at its rate, no schedule and no ladder: its tokens/s."""
    c = copy.deepcopy(cfg)
    c["training"].update(schedule="plateau", ladder=[], budget_tokens=None, budget_seconds=seconds,
                         warmup_tokens=0, keep="last", anytime_points=CALIBRATION_POINTS)
    return c


def rung_config(cfg: dict, tokens: int) -> dict:
    """``cfg`` as a one-rung ladder at ``tokens``: the schedule the publication trained under, annealed there."""
    c = copy.deepcopy(cfg)
    c["training"].update(ladder=[int(tokens)], budget_tokens=int(tokens), budget_seconds=None)
    return c


def check(params: dict, pub: Path, dataset: str, methods: list[str], seconds: float, seed: int, profile: str,
          out: Path, device: torch.device, calibrate_s: float = 10.0) -> pd.DataFrame:
    """The table above, one row per method, written to ``out``/device-check.csv with a json naming the device."""
    from ..data.checks import check_prepared
    from ..evaluation.evaluate import evaluate
    from ..training.loop import train
    from ..training.step import build_model

    points = ladder_points(read_csv(pub / "anytime.csv"))
    if dataset not in set(points.dataset):
        raise ConfigError(f"--dataset {dataset}: {pub.name}'s ladders hold {', '.join(sorted(set(points.dataset)))}, "
                          f"not {dataset}")
    points = points[points.dataset == dataset]
    configs = {m: published_config(pub, dataset, m, seed) for m in methods}  # every method's, before any trains
    measured, machine = load_profile(profile)
    speed = measured[measured.dataset == dataset].set_index("method").tokens_per_s.astype(float)
    prepared = check_prepared(params, dataset)
    rates = {m: steady_rate(train(calibration_config(cfg, calibrate_s), prepared, out / "calibrate" / m, device))
             for m, cfg in configs.items()}  # every method calibrated before any trains its rung
    check_steps(configs, rates, seconds, out / "calibrate")
    rows = []
    for m, cfg in configs.items():
        rate = rates[m]
        tokens = int(seconds * rate)
        train(rung_config(cfg, tokens), prepared, out / "runs" / m, device)
        ckpt = torch.load(out / "runs" / m / paths.MODEL, map_location=device, weights_only=False)
        model = build_model(ckpt["config"], prepared).to(device)
        model.load_state_dict(ckpt["model"])
        ev = {**params["evaluation"], "rank_contexts": 0}
        test = evaluate(model, {**ckpt["config"], "evaluation": ev}, prepared, paths.raw_dir(params, dataset),
                        device, argmax=False)["test"]
        own = points[points.method == m]
        at_profile = seconds * float(speed[m]) if m in speed.index else math.nan
        ran = {m: measured_options({"methods": {m: cfg["method"]}}, m)}  # this run's options (its pick's), whole
        rows.append({"dataset": dataset, "method": m, "seed": seed, "seconds": seconds,
                     "tokens_per_s_here": rate, "tokens_here": tokens,
                     "test_ppl_here": math.exp(test["nll"]),
                     "ladder_ppl_at_tokens_here": _mean_ppl(own, tokens),
                     "profile_tokens": at_profile, "ladder_ppl_at_profile_tokens": _mean_ppl(own, at_profile),
                     "ladder_seeds": own.seed.nunique(),
                     "profile_options_differ": options_differ(measured[measured.dataset == dataset], ran)})
    table = pd.DataFrame(rows, columns=COLUMNS)
    with atomic_path(out / "device-check.csv") as tmp:
        table.to_csv(tmp, index=False)
    write_json(out / "device-check.json", {"device": str(device), "device_name": _device_name(device),
                                           "torch": torch.__version__, "publication": pub.name,
                                           "profile": profile, "profile_machine": machine, "seconds": seconds,
                                           "calibrate_s": calibrate_s, "seed": seed})
    return table


def check_steps(configs: dict[str, dict], rates: dict[str, float], seconds: float, calibrations: Path) -> None:
    """Refuse ``seconds`` that buy some method fewer than MIN_STEPS training steps at its calibrated tokens/s (no
    cooldown to read), naming each such method and the seconds that would do; the calibrations' runs, the only
    thing written so far, are removed with the refusal."""
    floor = {m: MIN_STEPS * cfg["training"]["batch_size"] * cfg["training"]["bptt"] for m, cfg in configs.items()}
    short = [m for m in configs if int(seconds * rates[m]) < floor[m]]
    if not short:
        return
    import shutil

    for m in configs:  # this check's own calibrations only (the folder may be a user's --out)
        shutil.rmtree(calibrations / m, ignore_errors=True)
    if calibrations.is_dir() and not any(calibrations.iterdir()):
        calibrations.rmdir()
    if any(rates[m] <= 0 for m in short):
        raise ConfigError(f"device-check: the calibration of {', '.join(m for m in short if rates[m] <= 0)} "
                          f"measured no training tokens/s: raise --calibrate-seconds")
    need = max(math.ceil(floor[m] / rates[m] * 10) / 10 for m in short)
    while any(int(need * rates[m]) < floor[m] for m in short):  # a suggestion that buys the steps it promises
        need += 0.1
    raise ConfigError(f"--seconds {seconds:g}: under {MIN_STEPS} training steps here for "
                      + ", ".join(f"{m} ({rates[m]:,.0f} tokens/s)" for m in short)
                      + f": no cooldown to read; give --seconds {need:.1f} or more")


def steady_rate(summary: dict) -> float:
    """Training tokens/s between the calibration's first and last anytime point (its start-up left out)."""
    pts = (summary.get("budget") or {}).get("anytime") or []
    if len(pts) < 2 or pts[-1]["train_seconds"] <= pts[0]["train_seconds"]:
        return float(summary["tokens_per_s_train"])  # too short to leave the start out: the whole run's rate
    return (pts[-1]["tokens"] - pts[0]["tokens"]) / (pts[-1]["train_seconds"] - pts[0]["train_seconds"])


def _mean_ppl(points: pd.DataFrame, tokens: float) -> float:
    """exp of the mean over the ladder's seeds of each one's test nll read at ``tokens`` (NaN outside)."""
    if math.isnan(tokens) or points.empty:
        return math.nan
    read = readings(points, {points.method.iloc[0]: tokens})
    return math.nan if read.outside.any() else math.exp(read.test_nll.mean())


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    from ..io.runtime import cpu_model
    return cpu_model()


def markdown(table: pd.DataFrame) -> str:
    """The check for people: per method, what it trained here and scored, beside the ladder's two readings."""
    from .markdown import frame_markdown

    def ppl(x: float) -> str:
        return "outside the measured range" if pd.isna(x) else f"{x:,.1f}"

    t = pd.DataFrame({
        "method": table.method,
        "tokens/s here": table.tokens_per_s_here.map(lambda x: f"{x:,.0f}"),
        "tokens in T here": table.tokens_here.map(lambda x: f"{x / 1e6:.2f}M"),
        "test ppl here": table.test_ppl_here.map(ppl),
        "ladder at those tokens": table.ladder_ppl_at_tokens_here.map(ppl),
        "profile's tokens in T": table.profile_tokens.map(lambda x: "no row" if pd.isna(x) else f"{x / 1e6:.2f}M"),
        "ladder at the profile's tokens": table.ladder_ppl_at_profile_tokens.map(ppl)})
    differ = "; ".join(x for x in table.get("profile_options_differ", pd.Series(dtype=object)).dropna() if x)
    return frame_markdown(t) + (f"\n*The profile measured at other head options than these runs trained with: "
                                f"{differ}; its tokens in T are those options'.*\n" if differ else "")
