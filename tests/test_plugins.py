"""Your own output layer without editing the repository (pipeline_src/heads/plugins.py), and the conformance kit
every head is held to (pipeline_src/heads/conformance.py, `check-head`): every registered head passes it, a broken
one fails it by name, a plugin is validated, hashed by its source, trained and evaluated like a built-in head."""
import copy
import re

import pytest
from conftest import write_params

from pipeline_src.cli import main
from pipeline_src.config import ConfigError, canonical, run_config, run_hash, validate
from pipeline_src.heads import registry
from pipeline_src.heads.conformance import check
from pipeline_src.io import paths

PLUGIN = "tests/data/plugin_head.py:ScaledSoftmax"


@pytest.mark.parametrize("name", sorted(registry()))
def test_every_registered_head_passes_the_conformance_kit(name):
    failed = [r.line() for r in check({"type": name}) if r.ok is False]
    assert failed == []


BROKEN = '''
import time
from dataclasses import dataclass
import torch
import torch.nn.functional as F
from torch import nn
from pipeline_src.heads.base import OutputLayer


class _Linear(OutputLayer):
    """What the broken heads share: a linear map to the vocabulary's logits."""
    family = "softmax and its controls"

    @dataclass(frozen=True)
    class Options:
        pass

    def __init__(self, ctx, opts):
        super().__init__(ctx, opts)
        self.proj = nn.Linear(ctx.in_dim, ctx.vocab_size)

    def _logits(self, hidden):
        return self.proj(hidden)

    def loss(self, hidden, target):
        return F.cross_entropy(self._logits(hidden), target)

    def log_prob(self, hidden):
        return F.log_softmax(self._logits(hidden), dim=-1)

    def forward_macs(self, exact):
        return self.in_dim * self.vocab_size


class Unnormalised(_Linear):
    def log_prob(self, hidden):
        return F.log_softmax(self.proj(hidden), dim=-1) + 0.1  # forgot something

    def forward_macs(self, exact):
        return 2 * self.in_dim * self.vocab_size  # counted twice


class _Halved(torch.autograd.Function):
    """The identity forward, half the gradient backward: a hand-written backward gone wrong."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return 0.5 * g


class WrongGradient(_Linear):
    def _logits(self, hidden):
        return self.proj(_Halved.apply(hidden))


class Nondeterministic(_Linear):
    """Its initial bias comes from the clock, not from the seed."""

    def __init__(self, ctx, opts):
        super().__init__(ctx, opts)
        with torch.no_grad():
            self.proj.bias += (time.perf_counter_ns() % 997) * 1e-6


class ThreeWords(_Linear):
    """log_prob over 3 words whatever V is: each row still sums to one."""

    def log_prob(self, hidden):
        return F.log_softmax(self.proj(hidden)[:, :3], dim=-1)


class NotANumber(_Linear):
    def loss(self, hidden, target):
        return F.cross_entropy(self._logits(hidden), target) * float("nan")


class Unfinished(_Linear):
    def log_prob(self, hidden):
        return super(_Linear, self).log_prob(hidden)  # OutputLayer's: NotImplementedError


class NotAHead:
    pass
'''


def test_a_broken_head_fails_the_kit_by_name_and_exits_non_zero(tmp_path, monkeypatch, capsys):
    (tmp_path / "mine.py").write_text(BROKEN)
    monkeypatch.chdir(tmp_path)
    write_params({"extends": str(paths.REPOSITORY / "params.yaml")}, tmp_path / "params.yaml")
    with pytest.raises(SystemExit) as e:
        main(["check-head", "mine.py:Unnormalised"])
    out = capsys.readouterr().out
    assert e.value.code == 1
    assert "FAIL normalised" in out and "FAIL exact loss" in out and "FAIL FLOPs" in out
    assert "PASS determinism" in out and "failed: normalised, exact loss, FLOPs" in out.splitlines()[-1]
    for head, fails in (("WrongGradient", "input gradient"), ("Nondeterministic", "determinism")):
        with pytest.raises(SystemExit) as e:
            main(["check-head", f"mine.py:{head}"])
        out = capsys.readouterr().out
        assert e.value.code == 1 and out.splitlines()[-1].endswith(f"failed: {fails}"), out
        if head == "WrongGradient":  # and by how much: half the gradient is a relative error of 0.5
            assert re.search(r"FAIL input gradient: .*\(relative error 5\.0e-01\)", out), out
    # the probe: a (N, 3) log_prob passed 'normalised', a NaN loss passed 'parameter gradients' (NaN exceeds no
    # limit), and a method left unimplemented failed without saying which method
    for head, says in (("ThreeWords", r"FAIL normalised: log_prob gives shape \(16, 3\), not \(N, V\) = \(16, 200\)"),
                       ("NotANumber", r"FAIL parameter gradients: worst relative error of a directional derivative inf"),
                       ("Unfinished", r"FAIL normalised: raised NotImplementedError in log_prob\(\)")):
        with pytest.raises(SystemExit) as e:
            main(["check-head", f"mine.py:{head}"])
        out = capsys.readouterr().out
        assert e.value.code == 1 and re.search(says, out), out
    for bad, says in (("mine.py:NotAHead", "NotAHead is not a subclass of pipeline_src.heads.base.OutputLayer"),
                      ("nowhere.py:X", "no file nowhere.py"), ("mine.py:Missing", "mine.py has no 'Missing'"),
                      ("no_such_pkg.heads:X", "no module 'no_such_pkg'")):
        assert main(["check-head", bad]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and says in err and "Traceback" not in err, err
    # the third probe: an option given twice silently kept the last
    assert main(["check-head", "softmax", "--option", "chunk_size=1", "--option", "chunk_size=2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "chunk_size is already set (chunk_size=1); give each option once" in err, err
    # and a plugin whose constructor refuses its options gave a ValueError traceback at train
    (tmp_path / "picky.py").write_text(BROKEN.replace("class Options:\n        pass", "class Options:\n        k: int = 1")
                                       + "\n\nclass Picky(_Linear):\n    def __init__(self, ctx, opts):\n"
                                       "        if opts.k > 2:\n            raise ValueError(f'k={opts.k}: at most 2')\n"
                                       "        super().__init__(ctx, opts)\n")
    from pipeline_src.heads.base import HeadContext, build_head

    with pytest.raises(ConfigError, match=r"^head picky.py:Picky refused its options \{'k': 5\}: ValueError: k=5: at "
                                          r"most 2 \(set them in the params file's methods entry"):
        build_head({"type": "picky.py:Picky", "k": 5}, HeadContext(vocab_size=10, in_dim=3))
    assert build_head({"type": "picky.py:Picky", "k": 2}, HeadContext(vocab_size=10, in_dim=3)).opts.k == 2


def test_a_plugin_is_validated_hashed_by_its_source_and_trained_like_a_built_in_head(tiny, tmp_path, monkeypatch):
    monkeypatch.chdir(paths.REPOSITORY)  # where Snakemake, DVC and SLURM run the steps
    p = copy.deepcopy(tiny)
    p["methods"]["mine"] = {"type": PLUGIN, "init_scale": 2.0}
    p["run"]["methods"] = ["mine"]
    bad = copy.deepcopy(p)
    bad["methods"]["mine"]["init_scale"] = 0
    with pytest.raises(ConfigError, match=r"key 'methods.mine.init_scale': 0 is less than or equal to the minimum"):
        validate(bad)
    v = validate(p)
    method = canonical(run_config(v, "tiny", "mine"))["method"]
    assert method["init_scale"] == 2.0 and len(method["source_sha256"]) == 16
    assert "source_sha256" not in canonical(run_config(v, "tiny", "softmax"))["method"]  # built-in hashes as before
    cfg = write_params(p, tmp_path / "params.yaml")
    common = ["--config", str(cfg), "--dataset", "tiny"]
    assert main(["fetch", *common]) == 0 and main(["prepare", *common]) == 0
    run = [*common, "--method", "mine", "--seed", "0"]
    assert main(["train", *run]) == 0 and main(["evaluate", *run]) == 0
    metrics = __import__("json").loads(paths.metrics_path(v, "tiny", "mine", 0).read_text())
    assert metrics["splits"]["test"]["nll"] > 0 and metrics["config_hash"] == run_hash(run_config(v, "tiny", "mine"))


def test_editing_a_plugin_s_source_changes_its_runs_identity(tiny, tmp_path, monkeypatch):
    from pipeline_src.heads import plugins

    src = (paths.REPOSITORY / "tests/data/plugin_head.py").read_text()
    (tmp_path / "head_a.py").write_text(src)
    (tmp_path / "head_b.py").write_text(src + "\n# an edit\n")
    monkeypatch.chdir(tmp_path)
    p = copy.deepcopy(tiny)
    hashes = []
    for f in ("head_a.py", "head_b.py"):
        p["methods"]["mine"] = {"type": f"{f}:ScaledSoftmax"}
        hashes.append(canonical(run_config(validate(copy.deepcopy(p)), "tiny", "mine"))["method"]["source_sha256"])
    assert hashes[0] != hashes[1]
    # an installed package's entry point names the same class
    monkeypatch.setattr(plugins, "entry_points", lambda: {"scaled-softmax": "head_a.py:ScaledSoftmax"})
    p["methods"]["mine"] = {"type": "scaled-softmax"}
    assert canonical(run_config(validate(copy.deepcopy(p)), "tiny", "mine"))["method"]["source_sha256"] == hashes[0]


def test_an_options_field_the_schema_cannot_express_is_one_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "listy.py").write_text(BROKEN.replace("        pass\n", "        sizes: list = None\n", 1))
    monkeypatch.chdir(tmp_path)
    write_params({"extends": str(paths.REPOSITORY / "params.yaml")}, tmp_path / "params.yaml")
    assert main(["check-head", "listy.py:Unnormalised"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Options has a field the options schema cannot express" in err, err
