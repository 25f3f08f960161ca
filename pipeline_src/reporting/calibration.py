"""Where a dataset's frozen token budgets came from (``training.budget_calibration``): the calibration the report
states, read from the calibration's publication (``freeze-budgets`` made the budgets from it)."""
from __future__ import annotations

from ..io import paths
from ..io.artifacts import read_json
from ..io.errors import ConfigError
from .machine import budget_machine


def calibrations(params: dict) -> dict:
    """Per dataset with frozen budgets and a ``budget_calibration``: the calibration the report states (its
    publication, machine, date, commit, seconds and each method's tokens/s = frozen tokens / seconds)."""
    from ..config import run_datasets, train_config

    out = {}
    for ds in run_datasets(params):
        tc = train_config(params, ds)
        if not (tc.budget_calibration and tc.budget_tokens_by_method):
            continue
        name = tc.budget_calibration.split("/", 1)[1]
        prov_path = paths.REPOSITORY / "benchmarks" / name / paths.PROVENANCE
        if not prov_path.is_file():
            raise ConfigError(f"training.budget_calibration of dataset {ds}: {tc.budget_calibration} has no "
                              f"{paths.PROVENANCE}: publish the calibration run first")
        prov = read_json(prov_path, "commit", "cpu_model", "published")
        seconds = train_config(prov["params"], ds).budget_seconds if ds in prov["params"]["datasets"] else None
        machine = budget_machine(prov_path.parent, ds, prov["cpu_model"])
        out[ds] = {"publication": tc.budget_calibration, "machine": machine, "published": prov["published"],
                   "commit": prov["commit"], "seconds": seconds,
                   "tokens": dict(tc.budget_tokens_by_method),
                   "tokens_per_s": {m: t / seconds for m, t in tc.budget_tokens_by_method.items()} if seconds else None}
    return out
