"""The token axis checked on a device (reporting/device_check.py), run here with the CPU standing in for the GPU on the
tiny language: each method trains for the same seconds with its published run's settings as a one-rung ladder at
the tokens those seconds buy here, and is set beside the ladder's readings, computed by hand."""
import json
import math
import re

import numpy as np
import pandas as pd
import pytest
import torch

from conftest import write_params

from pipeline_src.cli import main
from pipeline_src.config import ConfigError, run_config, validate
from pipeline_src.reporting.device_check import check, check_steps, markdown, published_config

CPU = torch.device("cpu")
RUNGS = [800, 1600, 3200]
SECONDS = 3.0  # each method's time here: at least 10 steps of 80 tokens with room for a loaded machine
PROFILE = {"softmax": 1_500.0, "sampled-softmax": 700.0}  # the profile's tokens/s: 4,500 and 2,100 tokens in SECONDS


def _publication(p, tmp_path, methods):
    """A made-up ladder publication: each method's final run config (a wsd ladder) and its rungs' test nll,
    3.4 - 0.1 k at the k-th rung (seed 1; seed 2 0.02 above)."""
    pub = tmp_path / "pub"
    rows = []
    for m in methods:
        cfg = run_config(p, "tiny", m, 1)
        if m == "sampled-softmax":
            cfg["method"]["negatives"] = 5
        cfg["training"].update(schedule="wsd", ladder=RUNGS, budget_tokens=RUNGS[-1], warmup_tokens=160, epochs=50,
                               keep="last", lr=0.005 if m == "softmax" else 0.01)
        run = pub / "records" / "runs" / "tiny" / m / "seed1"
        run.mkdir(parents=True)
        (run / "train.json").write_text(json.dumps({"config": cfg}))
        for seed, shift in ((1, 0.0), (2, 0.02)):
            rows += [{"dataset": "tiny", "method": m, "seed": seed, "multiple": r / RUNGS[-1], "tokens": r,
                      "valid_ppl": math.exp(3.5), "test_nll": 3.4 - 0.1 * k + shift} for k, r in enumerate(RUNGS)]
    pd.DataFrame(rows).to_csv(pub / "anytime.csv", index=False)
    profile = tmp_path / "cell-bench.csv"
    pd.DataFrame({"dataset": "tiny", "method": methods, "tokens_per_s": [PROFILE[m] for m in methods]}).to_csv(
        profile, index=False)
    return pub, str(profile)


def _ladder_ppl(tokens: float) -> float:
    if not RUNGS[0] <= tokens <= RUNGS[-1]:
        return math.nan
    nll = np.interp(math.log(tokens), np.log(RUNGS), [3.4, 3.3, 3.2])
    return math.exp(nll + 0.01)  # the mean of the two seeds


@pytest.fixture
def fetched(tiny, tmp_path):
    """The tiny language fetched and prepared through the CLI, as a device check finds it: its params."""
    common = ["--config", str(write_params(tiny, tmp_path / "params.yaml")), "--dataset", "tiny"]
    assert main(["fetch", *common]) == 0 and main(["prepare", *common]) == 0
    return validate(tiny)


def test_each_method_trains_the_tokens_its_seconds_buy_here_and_sits_beside_the_ladder(fetched, tmp_path,
                                                                                          monkeypatch):
    from pipeline_src.reporting import device_check
    from pipeline_src.reporting.profiles import measured_options

    p = fetched
    methods = ["softmax", "sampled-softmax"]
    pub, profile = _publication(p, tmp_path, methods)
    ran = {m: measured_options({"methods": {m: published_config(pub, "tiny", m, 1)["method"]}}, m) for m in methods}
    other = {**ran, "sampled-softmax": {**ran["sampled-softmax"], "negatives": ran["sampled-softmax"]["negatives"] + 1}}
    real = device_check.load_profile  # the profile as measured at the softmax's options and one more negative

    def load_profile(name):
        rows, machine = real(name)
        return rows.assign(options=rows.method.map(lambda m: json.dumps(other[m], sort_keys=True))), machine

    monkeypatch.setattr(device_check, "load_profile", load_profile)
    table = check(p, pub, "tiny", methods, seconds=SECONDS, seed=1, profile=profile, out=tmp_path / "out",
                  device=CPU, calibrate_s=1.5).set_index("method")
    for m in methods:
        r = table.loc[m]
        assert r.tokens_here == int(SECONDS * r.tokens_per_s_here) and r.tokens_here >= 10 * 80
        run = tmp_path / "out" / "runs" / m
        rec = json.loads((run / "train.json").read_text())
        assert r.tokens_here <= rec["budget"]["reached"]["tokens"] < r.tokens_here + 80  # to the step that reaches it
        kept = torch.load(run / "model.pt", weights_only=False)["config"]
        assert kept["training"]["ladder"] == [r.tokens_here] and kept["training"]["schedule"] == "wsd"
        assert kept["training"]["lr"] == published_config(pub, "tiny", m, 1)["training"]["lr"]  # its own settings
        assert kept["method"] == published_config(pub, "tiny", m, 1)["method"]
        assert 1.0 < r.test_ppl_here < 31  # a normalised model of a 30-word language (+ <eos>)
        assert r.profile_tokens == pytest.approx(SECONDS * PROFILE[m])  # its seconds x its tokens/s there
        if m == "softmax":  # 4,500 tokens: beyond the ladder's 3,200, never extrapolated
            assert math.isnan(r.ladder_ppl_at_profile_tokens)
        else:  # 2,100 tokens: between the rungs 1,600 and 3,200, linear in log tokens
            assert r.ladder_ppl_at_profile_tokens == pytest.approx(_ladder_ppl(2100.0))
        expected = _ladder_ppl(r.tokens_here)
        assert (math.isnan(expected) and math.isnan(r.ladder_ppl_at_tokens_here)) or \
            r.ladder_ppl_at_tokens_here == pytest.approx(expected)
    assert json.loads((tmp_path / "out" / "device-check.json").read_text())["device"] == "cpu"
    k = ran["sampled-softmax"]["negatives"]
    assert table.loc["softmax"].profile_options_differ == ""
    assert table.loc["sampled-softmax"].profile_options_differ == f"sampled-softmax (negatives {k + 1}, trained at {k})"
    text = markdown(table.reset_index())
    assert "| outside the measured range |" in text and f"| {_ladder_ppl(2100.0):,.1f} |" in text
    assert f"other head options than these runs trained with: sampled-softmax (negatives {k + 1}" in text


def test_a_run_without_a_ladder_is_refused(tiny, tmp_path):
    p = validate(tiny)
    pub, _ = _publication(p, tmp_path, ["softmax"])
    path = pub / "records" / "runs" / "tiny" / "softmax" / "seed1" / "train.json"
    path.write_text(json.dumps({"config": run_config(p, "tiny", "softmax", 1)}))
    with pytest.raises(ConfigError, match="trained no token ladder"):
        published_config(pub, "tiny", "softmax", 1)
    with pytest.raises(ConfigError, match=r"^--methods nce: pub holds no final run of tiny/nce seed 1 \(its runs there: "
                                          r"softmax\)$"):
        published_config(pub, "tiny", "nce", 1)
    with pytest.raises(ConfigError, match=r"^--seed 4: pub holds no final run of tiny/softmax seed 4 \(its seeds: "
                                          r"seed1\)$"):  # the method ran: the seed is what is missing
        published_config(pub, "tiny", "softmax", 4)


def test_the_check_names_a_profile_measured_at_other_head_options_than_its_runs():
    """device-check trains each method with its published run's options; where the profile it reads beside measured
    other ones (the h100 profile's 100 negatives against the picks' 800), the table says so under it."""
    from pipeline_src.reporting.profiles import load_profile, measured_options, options_differ

    rows, _ = load_profile("h100")
    differ = options_differ(rows[rows.dataset == "zipf-10k"],
                            {"nce": measured_options({"methods": {"nce": {"type": "nce", "negatives": 800, "chunk_size": 128}}}, "nce")})
    assert differ == "nce (negatives 100, trained at 800)"
    table = pd.DataFrame([{"method": "nce", "tokens_per_s_here": 1.0, "tokens_here": 1e6, "test_ppl_here": 300.0,
                           "ladder_ppl_at_tokens_here": 301.0, "profile_tokens": 2e6,
                           "ladder_ppl_at_profile_tokens": 290.0, "profile_options_differ": differ}])
    assert markdown(table).endswith("*The profile measured at other head options than these runs trained with: nce "
                                    "(negatives 100, trained at 800); its tokens in T are those options'.*\n")
    assert "other head options" not in markdown(table.assign(profile_options_differ=""))


@pytest.mark.parametrize("args, message", [
    (["--methods", ","], r"device-check --methods ',': name each method once"),
    (["--methods", "softmax,softmax"], r"name each method once"),
    (["--methods", "softmax", "--out", "benchmarks/token-axis"], r"--out 'benchmarks/token-axis' is inside the "
                                                                 r"repository's benchmarks/, whose files are committed"),
    (["--methods", "softmax", "--dataset", "wikitext-2"], r"--dataset wikitext-2: token-axis's ladders hold zipf-10k"),
    (["--methods", "softmax,nosuch"], r"--methods nosuch: token-axis holds no final run of zipf-10k/nosuch seed 1 "
                                      r"\(its runs there: adaptive-softmax, hierarchical-softmax, nce, "),
    (["--methods", "softmax", "--name", "default"], r"--name default: .* is not a token-ladder publication"),
    (["--methods", "softmax", "--name", "nosuch"], r"--name nosuch: no publication .* \(the token-ladder "
                                                   r"publications: token-axis, "),
])
def test_device_check_refuses_bad_input_before_anything_trains(args, message, capsys, tmp_path, monkeypatch):
    """The fifth probe: an empty method list wrote a header-only table (exit 0); --out into a committed publication
    wrote there; an unknown method was found after the others had trained; a dataset the publication lacks was
    told to be fetched. Each is one line now, before any data is read or any step trained."""
    from pipeline_src.io.paths import REPOSITORY

    argv = ["device-check", "--config", "config/token-axis.yaml", "--dataset", "zipf-10k", "--seconds", "5",
            "--out", str(tmp_path / "out"), *args]
    monkeypatch.chdir(REPOSITORY)
    assert main(argv) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(err) == 1 and re.search(message, err[0]), err
    assert not (tmp_path / "out").exists()


def test_device_check_refuses_seconds_that_buy_nothing(capsys):
    for flag in ("--seconds", "--calibrate-seconds"):  # 0 calibration seconds was a ZeroDivisionError traceback
        with pytest.raises(SystemExit):
            main(["device-check", "--config", "config/token-axis.yaml", "--dataset", "zipf-10k", "--methods",
                  "softmax", "--seconds", "5", flag, "0"])
        assert f"argument {flag}: '0' seconds: a duration above 0 is needed" in capsys.readouterr().err


def test_seconds_that_buy_under_ten_steps_are_refused_before_any_rung_trains(fetched, tmp_path):
    """The sixth probe: --seconds 0.001 was refused only after the first method's calibration, and the ones before
    it had trained their rungs. Every method is calibrated first; the refusal names each short method and the
    seconds that would do (10 steps of 64 x 35 tokens at 1,000 tokens/s: 22.4 s), and removes the calibrations."""
    cfg = {"training": {"batch_size": 64, "bptt": 35}}
    (tmp_path / "cal" / "a").mkdir(parents=True)
    with pytest.raises(ConfigError, match=r"^--seconds 1: under 10 training steps here for a \(1,000 tokens/s\): no "
                                          r"cooldown to read; give --seconds 22.4 or more$"):
        check_steps({"a": cfg, "b": cfg}, {"a": 1_000.0, "b": 100_000.0}, 1.0, tmp_path / "cal")
    assert not (tmp_path / "cal").exists()  # its own calibrations gone, and the folder they left empty
    check_steps({"a": cfg}, {"a": 22_400.0}, 1.0, tmp_path / "none")  # exactly 10 steps: enough
    (tmp_path / "cal" / "a").mkdir(parents=True)
    (tmp_path / "cal" / "mine.txt").write_text("a user's file in an --out folder they named")
    with pytest.raises(ConfigError, match=r"give --seconds 3.9 or more$"):  # 3.9 s buy int(22,400.0) tokens here
        check_steps({"a": cfg}, {"a": 22_400 / 3.9}, 1.0, tmp_path / "cal")
    assert int(3.9 * 5743.589743589743) == 22_399  # one float below: 22,400 / it rounds up to 3.9 s all the same,
    with pytest.raises(ConfigError, match=r"give --seconds 4.0 or more$"):  # which would be refused: 4.0 is said
        check_steps({"a": cfg}, {"a": 5743.589743589743}, 1.0, tmp_path / "cal")
    assert (tmp_path / "cal" / "mine.txt").is_file() and not (tmp_path / "cal" / "a").exists()
    with pytest.raises(ConfigError, match=r"calibration of a measured no training tokens/s"):
        check_steps({"a": cfg}, {"a": 0.0}, 1.0, tmp_path / "cal")
    pub, profile = _publication(fetched, tmp_path, ["softmax", "sampled-softmax"])
    with pytest.raises(ConfigError, match=r"under 10 training steps here for softmax \(.* tokens/s\), "
                                          r"sampled-softmax \("):
        check(fetched, pub, "tiny", ["softmax", "sampled-softmax"], seconds=0.001, seed=1, profile=profile,
              out=tmp_path / "out", device=CPU, calibrate_s=0.3)
    assert not (tmp_path / "out" / "runs").exists() and not (tmp_path / "out" / "calibrate").exists()
