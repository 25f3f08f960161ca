"""Write envs/environment.yaml (for `snakemake --sdm conda`) from envs/requirements.lock.

The conda environment is Python 3.11 + pip installing exactly the lock's pins, so the two can
never disagree (tests/test_envs.py checks it). Run after changing the lock: `make lock`.
"""
from pathlib import Path

here = Path(__file__).parent
pins = [ln.strip() for ln in (here / "requirements.lock").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")]
lines = ["# Generated from envs/requirements.lock by envs/make_conda_env.py; do not edit by hand.",
         "name: lmbench", "channels:", "  - conda-forge", "dependencies:", "  - python=3.11", "  - pip",
         "  - pip:"] + [f"      - {p}" for p in pins]
(here / "environment.yaml").write_text("\n".join(lines) + "\n")
