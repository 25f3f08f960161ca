"""One time-budgeted experiment, one kind of machine.

Under a time budget (``training.budget_seconds``) a run's tokens are what its machine bought in that time. Records
made on machines of different speed (a sweep carried across sessions lands on whatever machine each session gets)
are then not one experiment: a tuning trial on a fast machine beats one on a slow machine by its tokens, and a
method's finals on a slow machine are read at another budget than its pick. Verdicts compare methods within a
dataset, so the unit is a dataset: ``summarize`` refuses a dataset whose time-budgeted records ran on machines of
different speed (``check_one_machine``). Two datasets may each have their own machine (a sweep carried across
sessions: one size on one machine, the next on another); summary.json names each dataset's, and a reading across
datasets then compares budgets that bought different compute. Frozen token budgets (``freeze-budgets``) make the
machine matter for wall time only.

Three readings, each of records that carry it:
- what a step ran on: the GPU's name for a CUDA run, else the CPU kernels torch chose (``environment.gpu``,
  ``environment.cpu_capability``: AVX512 against AVX2 is another machine);
- the speed probe at each run's start (``environment.gemm_gflops``, ``runtime.gemm_gflops``), compared among
  records of one probe (``environment.gemm_probe``). Records of the first probe (a 0.3 s mean on the wall clock)
  name none and are not compared: on one machine it read 12.5 to 81.5 GFLOP/s while other work ran;
- a tuned method's final runs against its picked trial, which share every setting: each final's tokens/s must
  agree with the trial's.
A dataset's spread of speed (never other kernels) may be accepted in the params file with a reason
(``statistics.speed_spread_accepted``); summary.json then carries the reason and the readings beside the machines.
A run is refused when it would resume on other kernels (``training.budget.same_machine``); every call's probe is
in its record (``environment.calls``) and read here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from ..io.artifacts import read_json
from ..io.errors import ConfigError

RATIO = 1.3  # the most two records of one timed experiment may differ in speed (seen on one loaded machine: 1.19)


@dataclass(frozen=True)
class Timed:
    """One time-budgeted record: a final run or a tuning trial."""
    label: str  # e.g. zipf-10k/nce/seed1 or zipf-10k/nce/trial3
    dataset: str
    method: str
    tokens_per_s: float | None
    capability: str | None
    picked: bool = False  # the trial its method's finals were run with
    final: bool = False
    cpu_model: str | None = None
    probe: str | None = None  # how probes were measured (environment.gemm_probe; None: the first probe, not compared)
    probes: tuple = ()  # the speed probe (GFLOP/s) of each call (environment.calls), else of its one call


def timed_record(label: str, record: dict, picked: bool = False, final: bool = False) -> Timed | None:
    """A record of train.json / metrics.json as :class:`Timed`, or None when it ran without a time budget."""
    training = (record.get("config") or {}).get("training") or {}
    if training.get("budget_seconds") is None:
        return None
    env = record.get("environment") or {}
    on_gpu = str(env.get("device") or record.get("device") or "").startswith("cuda")
    return Timed(label, record.get("dataset") or label.split("/")[0], record.get("method") or label.split("/")[1],
                 record.get("tokens_per_s_train"), env.get("gpu") if on_gpu else env.get("cpu_capability"),
                 picked, final, env.get("cpu_model"), env.get("gemm_probe"),
                 tuple(c["gemm_gflops"] for c in env.get("calls") or () if c.get("gemm_gflops"))
                 or ((env["gemm_gflops"],) if env.get("gemm_gflops") else ()))


def machine_problems(records: list[Timed], ratio: float = RATIO) -> list[str]:
    """What says the time-budgeted records of one dataset ran on machines of different speed (empty: nothing
    does), one line each, "dataset: what"; records of several datasets are judged dataset by dataset."""
    return [f"{dataset}: {text}" for dataset, _, text in _problems(records, ratio)]


def _problems(records: list[Timed], ratio: float) -> list[tuple[str, str, str]]:
    """``machine_problems`` as (dataset, kind, text), kind one of "kernels", "probe", "final"."""
    return [(dataset, kind, text) for dataset in sorted({r.dataset for r in records})
            for kind, text in _dataset_problems([r for r in records if r.dataset == dataset], ratio)]


def _dataset_problems(records: list[Timed], ratio: float) -> list[tuple[str, str]]:
    problems = []
    kernels: dict[str, list[str]] = {}
    for r in records:
        if r.capability:
            kernels.setdefault(r.capability, []).append(r.label)
    if len(kernels) > 1:
        problems.append(("kernels", "their kernels differ (" + "; ".join(
            f"{k}: {len(v)} record{'s' * (len(v) > 1)}, e.g. {v[0]}" for k, v in sorted(kernels.items())) + ")"))
    for probe in sorted({r.probe for r in records if r.probes and r.probe}):  # the first probe's: not compared
        probed = sorted((g, r.label) for r in records if r.probe == probe for g in r.probes)
        if len(probed) > 1 and probed[-1][0] > ratio * probed[0][0]:
            problems.append(("probe", f"the speed probe ranges from {probed[0][0]:.1f} GFLOP/s ({probed[0][1]}) to "
                                      f"{probed[-1][0]:.1f} ({probed[-1][1]}), more than {ratio:g}x"))
    for pick in (r for r in records if r.picked and r.tokens_per_s):
        finals = [r for r in records if r.final and r.tokens_per_s and r.method == pick.method]
        if finals:
            odd = max(finals, key=lambda r: abs(math.log(r.tokens_per_s / pick.tokens_per_s)))
            if not 1 / ratio <= odd.tokens_per_s / pick.tokens_per_s <= ratio:
                problems.append(("final", f"{odd.label} trained {odd.tokens_per_s:,.0f} tokens/s, its picked trial "
                                          f"{pick.label} {pick.tokens_per_s:,.0f} with the same settings"))
    return problems


def machine_record(records: list[Timed]) -> dict | None:
    """What summary.json says of the machines a time-budgeted experiment ran on (None: no time budget): how many
    records, their CPU models and kernels, and the range of their speed probes (GFLOP/s), over all its records and
    per dataset (``by_dataset``; ``same_kernels``: whether every dataset's records name the same kernels, which
    says nothing of two machines of one kind at different speeds: compare ``gemm_gflops``)."""
    if not records:
        return None
    by = {d: _machine([r for r in records if r.dataset == d]) for d in sorted({r.dataset for r in records})}
    same = len({tuple(m["kernels"]) for m in by.values() if m["kernels"]}) <= 1
    return {**_machine(records), "same_kernels": same, "by_dataset": by}


def _machine(records: list[Timed]) -> dict:
    probes = sorted(g for r in records for g in r.probes)
    return {"records": len(records), "cpu_models": sorted({r.cpu_model for r in records if r.cpu_model}),
            "kernels": sorted({r.capability for r in records if r.capability}),
            "gemm_gflops": [probes[0], probes[-1]] if probes else None}


def check_one_machine(records: list[Timed], where: str, accepted: dict | None = None) -> dict:
    """Refuse (one line) a dataset whose time-budgeted records ran on machines of different speed, unless the
    params file accepts its spread with a reason (``statistics.speed_spread_accepted``: never other kernels);
    returns what was accepted, ``{dataset: {"reason", "problems"}}``, for summary.json."""
    accepted = accepted or {}
    problems, taken = [], {}
    for dataset, kind, text in _problems(records, RATIO):
        line = f"{dataset}: {text}"
        if dataset in accepted and kind != "kernels":
            taken.setdefault(dataset, {"reason": accepted[dataset], "problems": []})["problems"].append(line)
        else:
            problems.append(line)
    if problems:
        raise ConfigError(f"{where}: these time-budgeted runs of one dataset are not one experiment, their machines "
                          f"differ in speed: "
                          f"{'; '.join(problems[:3])}{' ...' if len(problems) > 3 else ''}. Rerun the odd ones on "
                          f"the machine of the rest (remove their records), or freeze the budgets into tokens "
                          f"(`freeze-budgets`: a new config, so every run of it again), or accept the spread with "
                          f"a reason under statistics.speed_spread_accepted")
    return taken


def budget_machine(publication: Path, dataset: str, published_on: str) -> str:
    """The machine a publication's time budget at ``dataset`` was measured on, for people: its timed records' CPU
    models and kernels (summary.json's ``time_budget_machine``: under ``tuning.replay_tokens``, the trials'
    machine, not the one that ran the finals or published), else ``published_on`` (an older publication's
    provenance names only the machine it was published from)."""
    info = publication / "summary.json"
    record = (read_json(info).get("time_budget_machine") or {}) if info.is_file() else {}
    m = (record.get("by_dataset") or {}).get(dataset) or {}
    if not m.get("cpu_models"):
        return published_on
    return ", ".join(m["cpu_models"]) + (f" ({', '.join(m['kernels'])} kernels)" if m.get("kernels") else "")
