import subprocess
import sys

import pytest
from conftest import ROOT, write_params


def run(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "pipeline_src", *args], cwd=cwd, capture_output=True, text=True)


def test_bad_config_fails_cleanly_naming_the_key(tmp_path, tiny):
    tiny["training"]["optimizer"] = "rmsprop"
    cfg = write_params(tiny, tmp_path / "p.yaml")
    r = run("fetch", "--config", str(cfg), "--dataset", "tiny")
    assert r.returncode == 2
    assert "key 'training.optimizer'" in r.stderr and "['sgd', 'adam']" in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "data").exists()


def test_an_empty_config_is_refused_not_read_as_the_default(capsys):
    """An unset variable (`--config "$CFG"`) must not run under params.yaml without a word (restate's --config
    default is None, to tell it from one given beside --as-published; every other command's is params.yaml)."""
    from pipeline_src.cli import main

    for command in (["check-config"], ["restate", "--name", "default"]):
        assert main([*command, "--config", ""]) == 2
        assert "error: " in capsys.readouterr().err


def test_unknown_dataset_and_missing_inputs_are_clear(tmp_path, tiny):
    cfg = write_params(tiny, tmp_path / "p.yaml")
    r = run("prepare", "--config", str(cfg), "--dataset", "ptbx")
    assert r.returncode == 2 and "unknown dataset 'ptbx'" in r.stderr and "Traceback" not in r.stderr
    r = run("summarize", "--config", str(cfg))
    assert r.returncode == 2 and "metrics.json is missing" in r.stderr and "Traceback" not in r.stderr


def test_offline_fetch_without_mirror_is_one_clear_error(tmp_path, tiny):
    tiny["datasets"]["ptb"] = {"corpus": {"type": "ptb"}, "tokenizer": {"type": "word"}}
    cfg = write_params(tiny, tmp_path / "p.yaml")
    # an unroutable proxy makes every download fail fast, as on an air-gapped machine
    env = {"PATH": "/usr/bin:/bin", "http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9"}
    r = subprocess.run([sys.executable, "-m", "pipeline_src", "fetch", "--config", str(cfg), "--dataset", "ptb"],
                       cwd=ROOT, capture_output=True, text=True, env=env)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "could not obtain corpus 'ptb'" in r.stderr and "LMBENCH_MIRROR" in r.stderr
    assert not (tmp_path / "data" / "raw" / "ptb").exists()


def test_mirror_from_the_environment(tmp_path, tiny, mirror):
    tiny["datasets"]["ptb"] = {"corpus": {"type": "ptb"}, "tokenizer": {"type": "word"}}
    cfg = write_params(tiny, tmp_path / "p.yaml")
    env = {"PATH": "/usr/bin:/bin", "LMBENCH_MIRROR": str(mirror), "http_proxy": "http://127.0.0.1:9"}
    r = subprocess.run([sys.executable, "-m", "pipeline_src", "fetch", "--config", str(cfg), "--dataset", "ptb"],
                       cwd=ROOT, capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "data" / "raw" / "ptb" / "train.txt").stat().st_size == 5_101_618


def test_cuda_without_a_gpu_is_a_clear_error(tmp_path, tiny):
    import torch

    if torch.cuda.is_available():
        pytest.skip("the error path only exists on CPU-only machines")
    tiny["device"] = "cuda"
    cfg = write_params(tiny, tmp_path / "p.yaml")
    r = run("bench", "--config", str(cfg))
    assert r.returncode == 2 and "no CUDA device is available" in r.stderr and "Traceback" not in r.stderr


def test_every_subcommand_and_option_says_what_it_is_for():
    """`python -m pipeline_src STEP --help` describes the step and every option (issue: the tools' conventions)."""
    import argparse

    from pipeline_src.cli import COMMANDS, parser

    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == set(COMMANDS)
    for name, sp in sub.choices.items():
        assert sp.description and sp.description.rstrip(".") in (COMMANDS[name][1][0].upper() + COMMANDS[name][1][1:]), name
        undocumented = [a.option_strings or [a.dest] for a in sp._actions if not a.help]
        assert not undocumented, (name, undocumented)


@pytest.mark.parametrize("threads", [1, 2])
def test_threads_hold_numpy_s_blas_to_the_job_s_threads_as_torch_s(threads):
    """`--threads 1` set torch's threads alone: OpenBLAS under NumPy kept one thread per core, and beside another
    job on two cores the rank diagnostic's SVD spun 50x slower. Both pools now take the job's count."""
    import numpy as np
    import torch
    from threadpoolctl import threadpool_info, threadpool_limits

    from pipeline_src.io.runtime import set_threads

    np.linalg.svd(np.eye(3))  # NumPy's BLAS loaded
    threadpool_limits(limits=3 - threads, user_api="blas")  # another count first, whatever the machine's
    set_threads(threads)
    blas = [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]
    assert blas and set(blas) == {threads} and torch.get_num_threads() == threads


def test_help_lists_every_command_once_in_its_group(capsys):
    """Issue 80: 29 subcommands in one list; now grouped (pipeline steps, publications, tools), each exactly once,
    and reference --name says it names a reference, not a publication's folder."""
    import pytest

    from pipeline_src.cli import COMMANDS, GROUPS, main

    listed = [c for names in GROUPS.values() for c in names]
    assert sorted(listed) == sorted(COMMANDS) and len(listed) == len(set(listed))
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert all(f"{title}:" in out for title in GROUPS) and out.index("publish ") > out.index("publications (")
    with pytest.raises(SystemExit):
        main(["reference", "--help"])
    assert "a count-based reference" in capsys.readouterr().out


PROBE = """import os, sys
sys.argv = ["pipeline_src", "--help"]
try:
    import pipeline_src.__main__
except SystemExit:
    pass
import torch
from pipeline_src.io.runtime import huge_pages
blocks = [torch.empty(2 ** 20) for _ in range(8)]  # 4 MB each: above the allocator's 2 MB threshold
print(huge_pages(), sum(b.data_ptr() % 4096 == 0 for b in blocks))
"""


@pytest.mark.parametrize("env,expect", [({}, "True 8"), ({"THP_MEM_ALLOC_ENABLE": "0"}, "False ")])
def test_the_cli_advises_large_blocks_to_huge_pages_before_torch_allocates(env, expect):
    """The allocator reads THP_MEM_ALLOC_ENABLE once, at torch's first allocation: the CLI's entry sets it first
    (its blocks then start on page boundaries, where they start on 64-byte ones otherwise), and keeps a user's 0."""
    r = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin", **env})
    assert r.returncode == 0, r.stderr[-2000:]
    last = r.stdout.splitlines()[-1]  # after the --help text
    assert last.startswith(expect)
    if env.get("THP_MEM_ALLOC_ENABLE", "1") != "1":
        assert int(last.split()[1]) < 8  # 64-byte aligned: eight on page boundaries by chance is 64^-8


def test_the_system_s_missing_file_names_the_step_and_the_file_and_a_step_s_own_message_stands(capsys, monkeypatch):
    """The fifth probe: `profile` with results_dir under /proc printed a bare "[Errno 2] No such file or directory:
    '/proc/x'"; a missing file the system reports is now said as other OS errors are, with the step's name."""
    import errno

    from pipeline_src.cli import COMMANDS, main

    def system(params, args):
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", "/proc/p5res")

    def own(params, args):
        raise FileNotFoundError("results/summary.csv is missing: run `python -m pipeline_src summarize` first")

    for fn, line in ((system, "error: summarize: /proc/p5res: No such file or directory"),
                     (own, "error: results/summary.csv is missing: run `python -m pipeline_src summarize` first")):
        monkeypatch.setitem(COMMANDS, "summarize", (fn, *COMMANDS["summarize"][1:]))
        assert main(["summarize", "--config", str(ROOT / "params.yaml")]) == 2
        assert capsys.readouterr().err.strip() == line
