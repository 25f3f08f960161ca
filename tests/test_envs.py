import re

import yaml
from conftest import ROOT


def _lock():
    lines = (ROOT / "envs" / "requirements.lock").read_text().splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]


def test_lock_pins_every_package_exactly():
    pins = _lock()
    assert all(re.fullmatch(r"[A-Za-z0-9_.\-\[\]]+==[^\s=]+", p) for p in pins), pins
    names = {p.split("==")[0].lower() for p in pins}
    for needed in ("snakemake", "dvc", "torch", "pandas", "sentencepiece", "papermill", "nbconvert", "pytest"):
        assert needed in names
    assert "torch==2.13.0" in pins  # exactly this pin: newer or bare torch pulls multi-GB CUDA wheels


def test_conda_environment_matches_the_lock():
    env = yaml.safe_load((ROOT / "envs" / "environment.yaml").read_text())
    deps = env["dependencies"]
    assert "python=3.11" in deps
    pip = next(d["pip"] for d in deps if isinstance(d, dict))
    assert pip == _lock()


def test_pyproject_requirements_are_satisfied_by_the_lock():
    import tomllib

    from packaging.requirements import Requirement

    pins = {p.split("==")[0].lower().replace("_", "-"): p.split("==")[1] for p in _lock()}
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for d in deps:
        r = Requirement(d)
        assert r.specifier.contains(pins[r.name.lower().replace("_", "-")]), d
