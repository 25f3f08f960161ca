"""Nothing lost: no step removes or overwrites anything outside its declared output, and a damaged
artifact is named in one line. Each case here destroyed a user's files or crashed with a traceback before."""
import json
import os
import re
import subprocess
import sys

import pytest
from conftest import ROOT, tiny_params, write_params

from pipeline_src.cli import main
from pipeline_src.io import atomic
from pipeline_src.io.errors import OutputError


def _cli(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def _refused(capsys, *argv) -> str:
    rc, _, err = _cli(capsys, *argv)
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, (rc, err)
    return lines[0]


@pytest.fixture
def proj(default_params, tmp_path):
    p = tiny_params(default_params, tmp_path)
    return p, write_params(p, tmp_path / "params.yaml")


def _keepsake(directory):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "thesis.tex").write_text("three years of work\n")
    return directory / "thesis.tex"


def test_resolve_out_onto_a_directory_is_refused_and_leaves_it_whole(capsys, proj, tmp_path):
    _, cfg = proj
    kept = _keepsake(tmp_path / "mine")
    line = _refused(capsys, "resolve", "--config", str(cfg), "--out", str(tmp_path / "mine"))
    assert "is an existing directory" in line and "refusing" in line
    assert kept.read_text() == "three years of work\n"


def test_resolve_out_dot_is_refused_and_the_working_directory_stays(proj, tmp_path):
    _, cfg = proj
    kept = _keepsake(tmp_path / "work")
    r = subprocess.run([sys.executable, "-m", "pipeline_src", "resolve", "--config", str(cfg), "--out", "."],
                       cwd=tmp_path / "work", capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 2 and "is the working directory" in r.stderr and "Traceback" not in r.stderr
    assert kept.read_text() == "three years of work\n"


def test_resolve_out_onto_its_own_inputs_needs_asking(capsys, proj, tmp_path):
    p, cfg = proj
    child = tmp_path / "small.yaml"
    child.write_text("extends: params.yaml\nseed: 7\n")
    before = cfg.read_text()
    line = _refused(capsys, "resolve", "--config", str(child), "--out", str(cfg))
    assert "a base file of its extends: chain" in line and cfg.read_text() == before
    line = _refused(capsys, "resolve", "--config", str(child), "--out", str(child))
    assert "the params file it reads" in line and "--overwrite-config" in line
    assert child.read_text() == "extends: params.yaml\nseed: 7\n"
    rc, out, _ = _cli(capsys, "resolve", "--config", str(child), "--out", str(child), "--overwrite-config")
    assert rc == 0 and "extends" not in child.read_text().split("\n", 1)[1] and "seed: 7" in child.read_text()


def test_check_config_of_a_params_yaml_that_extends_says_what_dvc_will_meet(capsys, proj, tmp_path):
    """The third probe's weak case: `dvc repro` over a params.yaml with `extends:` stops with DVC's "Could not
    find 'run.datasets'" and no hint; `check-config` (the first thing a user runs) now says so, with the command
    that lays the chain out, and that command makes a file check-config has nothing more to say about."""
    p, cfg = proj
    (tmp_path / "base.yaml").write_text(cfg.read_text())
    (tmp_path / "sub").mkdir()
    params = tmp_path / "sub" / "params.yaml"
    params.write_text("extends: ../base.yaml\nseed: 7\n")
    rc, out, _ = _cli(capsys, "check-config", "--config", str(params))
    note = out.splitlines()[-1]
    assert rc == 0 and note.startswith(f"note: {params} extends ") and "base.yaml;" in note
    assert "Could not find 'run.datasets'" in note
    assert f"`python -m pipeline_src resolve --config {params} --out {params} --overwrite-config`" in note
    assert _cli(capsys, "resolve", "--config", str(params), "--out", str(params), "--overwrite-config")[0] == 0
    rc, out, _ = _cli(capsys, "check-config", "--config", str(params))
    assert rc == 0 and "note:" not in out
    rc, out, _ = _cli(capsys, "check-config", "--config", str(cfg))  # a plain params.yaml: nothing to say
    assert rc == 0 and "note:" not in out


def test_a_file_writer_never_replaces_a_directory(tmp_path):
    kept = _keepsake(tmp_path / "out.json")
    with pytest.raises(OutputError, match="is an existing directory"):
        atomic.write_json(tmp_path / "out.json", {"a": 1})
    assert kept.read_text() == "three years of work\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]  # no temporary left beside it


def test_a_killed_writer_s_temporary_is_removed_by_the_next_writer_and_a_live_one_s_is_kept(tmp_path):
    """A report killed under load (rc 134) left `.report.ipynb.XXXX.tmp.ipynb` beside its output for good. Each
    temporary names its writer's process: the next writer of the same path removes those whose writer is gone,
    never one whose writer still runs, nor another output's."""
    import subprocess
    import sys

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(gone.stdout)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        out = tmp_path / "report.ipynb"
        (tmp_path / f".report.ipynb.{dead}.abc123.tmp.ipynb").write_text("half a notebook")
        (tmp_path / f".report.ipynb.{dead}.dir9.tmp.ipynb").mkdir()  # a directory output's temporary
        (tmp_path / f".report.ipynb.{live.pid}.def456.tmp.ipynb").write_text("being written")
        (tmp_path / f".other.ipynb.{dead}.x.tmp.ipynb").write_text("another output's")
        with atomic.atomic_path(out, suffix=".ipynb") as tmp:
            tmp.write_text("{}")
        assert out.read_text() == "{}"
        left = sorted(p.name for p in tmp_path.iterdir())
        assert left == sorted([f".other.ipynb.{dead}.x.tmp.ipynb", f".report.ipynb.{live.pid}.def456.tmp.ipynb",
                               "report.ipynb"]), left
        # a checkpoint killed mid-save: the run's end removes its temporary with the checkpoints (third probe)
        from pipeline_src.training.checkpoints import remove

        run = tmp_path / "run"
        run.mkdir()
        for name in ("checkpoint.pt", f".checkpoint.pt.{dead}.k9.tmp", f".checkpoint.prev.pt.{dead}.k8.tmp"):
            (run / name).write_text("x")
        remove(run)
        assert list(run.iterdir()) == []
    finally:
        live.kill()
        live.wait()


def test_a_directory_output_replaces_only_an_earlier_copy_of_itself(capsys, proj, tmp_path):
    p, cfg = proj
    kept = _keepsake(tmp_path / "data" / "prepared" / "tiny")
    assert _cli(capsys, "fetch", "--config", str(cfg), "--dataset", "tiny")[0] == 0
    line = _refused(capsys, "prepare", "--config", str(cfg), "--dataset", "tiny")
    assert "did not write (no meta.json in it)" in line and kept.read_text() == "three years of work\n"
    kept.unlink()
    (tmp_path / "data" / "prepared" / "tiny").rmdir()
    assert _cli(capsys, "prepare", "--config", str(cfg), "--dataset", "tiny")[0] == 0  # an empty place: fine
    assert _cli(capsys, "prepare", "--config", str(cfg), "--dataset", "tiny")[0] == 0  # its own earlier copy: fine
    raw = tmp_path / "data" / "raw" / "other"
    raw.parent.mkdir(parents=True, exist_ok=True)
    raw.write_text("a file where a directory goes\n")
    with pytest.raises(OutputError, match="is a file or a link"):
        with atomic.atomic_path(raw, marker="source.json") as tmp:
            tmp.mkdir()
            (tmp / "source.json").write_text("{}")
    assert raw.read_text() == "a file where a directory goes\n"


def test_config_that_is_a_directory_says_reading(capsys, tmp_path):
    line = _refused(capsys, "check-config", "--config", str(tmp_path))
    assert "reading config" in line and "is a directory" in line and "writing" not in line


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "../../etc", "x y", "/tmp/abs"])
def test_publish_takes_a_plain_name_only(name, monkeypatch, proj, tmp_path):
    from pipeline_src.reporting import publish as pub

    monkeypatch.setattr(pub, "BENCHMARKS", tmp_path / "benchmarks")
    with pytest.raises(OutputError, match="give a plain name"):
        pub.publish(proj[0], proj[1], name)
    assert not (tmp_path / "benchmarks").exists()


def _bench_results(p):
    """A bench-only results_dir, the smallest thing publish accepts."""
    from pathlib import Path

    from pipeline_src.io.atomic import write_json

    results = Path(p["results_dir"])
    results.mkdir(parents=True, exist_ok=True)
    (results / "bench.csv").write_text("vocab,method\n50,softmax\n")
    write_json(results / "bench.json", {"bench": p["bench"], "quick": False, "threads": 1})
    return results


def test_publish_replacing_an_earlier_one_says_so_and_removes_only_its_stale_files(monkeypatch, proj, tmp_path):
    from pipeline_src.reporting import publish as pub

    p, cfg = proj
    monkeypatch.setattr(pub, "BENCHMARKS", tmp_path / "benchmarks")
    monkeypatch.setattr(pub, "update_docs", lambda: [])
    monkeypatch.setattr(pub, "_git", lambda *a: "" if a[0] == "status" else "abc")
    said = []
    results = _bench_results(p)
    (results / "matrix.csv").write_text("m\n1\n")
    out = pub.publish(p, cfg, "b", say=said.append)
    assert said == [] and (out / "matrix.csv").exists()
    (out / "NOTES.md").write_text("my notes\n")  # not the publication's: stays
    (results / "matrix.csv").unlink()
    pub.publish(p, cfg, "b", say=said.append)
    assert said == [f"replacing the earlier publication {out}; removed its files this run does not make: matrix.csv"]
    assert not (out / "matrix.csv").exists() and (out / "NOTES.md").read_text() == "my notes\n"
    assert json.loads((out / "provenance.json").read_text())["files"] == ["bench.csv", "bench.json"]


def test_publish_refuses_a_folder_it_did_not_make_and_its_own_input(monkeypatch, proj, tmp_path):
    from pipeline_src.reporting import publish as pub

    p, cfg = proj
    monkeypatch.setattr(pub, "BENCHMARKS", tmp_path / "benchmarks")
    monkeypatch.setattr(pub, "update_docs", lambda: [])
    _bench_results(p)
    kept = _keepsake(tmp_path / "benchmarks" / "mine")
    with pytest.raises(OutputError, match="is not a publication"):
        pub.publish(p, cfg, "mine")
    assert kept.read_text() == "three years of work\n"
    p2 = {**p, "results_dir": str(tmp_path / "benchmarks" / "self")}
    _bench_results(p2)
    with pytest.raises(OutputError, match="the command's input"):
        pub.publish(p2, cfg, "self")


def test_publish_goes_beside_a_stash_and_leaves_it(monkeypatch, proj, tmp_path):
    """A long experiment stashes its records (records/stash.py) to benchmarks/N/records before it has tables: the
    folder holding only records/ is no one else's, so publish writes beside it and leaves it as it is."""
    from pipeline_src.reporting import publish as pub

    p, cfg = proj
    monkeypatch.setattr(pub, "BENCHMARKS", tmp_path / "benchmarks")
    monkeypatch.setattr(pub, "update_docs", lambda: [])
    _bench_results(p)
    stash = tmp_path / "benchmarks" / "sweep" / "records"
    stash.mkdir(parents=True)
    (stash / "records.json").write_text('{"files": {}}\n')
    out = pub.publish(p, cfg, "sweep")
    assert (out / "bench.csv").exists() and (stash / "records.json").read_text() == '{"files": {}}\n'


def test_a_perplexity_from_a_few_test_tokens_is_warned_at_prepare_and_refused_at_publish(capsys, proj, tmp_path,
                                                                                        monkeypatch):
    """The third probe's weak case: a 4-token test split trained, scored and published a perplexity."""
    from pipeline_src.reporting import publish as pub

    monkeypatch.setattr(pub, "BENCHMARKS", tmp_path / "benchmarks")
    p, cfg = proj
    p["datasets"]["tiny"]["corpus"]["test_tokens"] = 40
    p["evaluation"]["batch_size"] = 1
    write_params(p, cfg)
    _one_run(capsys, proj)
    assert _cli(capsys, "summarize", "--config", str(cfg), "--partial")[0] == 0
    line = _refused(capsys, "publish", "--name", "few", "--config", str(cfg))
    assert re.search(r"tiny's test split scored \d\d tokens, fewer than 100: a perplexity from so few is noise", line)
    assert not (tmp_path / "benchmarks" / "few").exists()
    meta = json.loads((tmp_path / "data" / "prepared" / "tiny" / "meta.json").read_text())
    assert any(re.match(r"test: \d\d tokens, of which an evaluation in batches of 1 scores \d\d; a perplexity from "
                        r"fewer than 100 is noise", w) for w in meta["warnings"])


def test_publish_says_when_the_tree_has_uncommitted_changes(monkeypatch, proj, tmp_path):
    from pipeline_src.reporting import publish as pub

    p, cfg = proj
    monkeypatch.setattr(pub, "BENCHMARKS", tmp_path / "benchmarks")
    monkeypatch.setattr(pub, "update_docs", lambda: [])
    monkeypatch.setattr(pub, "_git", lambda *a: " M pipeline_src/training/loop.py" if a[0] == "status" else "abc")
    _bench_results(p)
    said = []
    out = pub.publish(p, cfg, "d", say=said.append)
    assert len(said) == 1 and said[0].startswith("warning: publishing from a tree with uncommitted changes")
    assert "pipeline_src/training/loop.py" in said[0]
    assert json.loads((out / "provenance.json").read_text())["dirty_files"] == ["pipeline_src/training/loop.py"]
    # the third probe: a publish killed half-way, then rerun, listed its own files (the publication's folder, the
    # pages it redraws) as the tree's changes; they are its outputs, not what its tables come from
    monkeypatch.setattr(pub, "BENCHMARKS", ROOT / "benchmarks")
    own = " M benchmarks/d/bench.csv\n M README.md\n M docs/results/what-to-use.md\n M pipeline_src/cli.py"
    monkeypatch.setattr(pub, "_git", lambda *a: own if a[0] == "status" else "abc")
    assert pub._dirty_files(ROOT / "benchmarks" / "d") == ["pipeline_src/cli.py"]
    assert pub._dirty_files(ROOT / "benchmarks" / "e") == ["benchmarks/d/bench.csv", "pipeline_src/cli.py"]


def test_json_written_is_strict_nan_becomes_null_and_infinity_a_string_read_back_as_infinity(tmp_path):
    import math

    import numpy as np

    from pipeline_src.io.artifacts import read_json

    atomic.write_json(tmp_path / "x.json", {"a": math.nan, "b": [math.inf, 1.5], "c": np.float64(-np.inf),
                                            "d": {"e": np.float32(2.0)}, "f": "Infinity-ish"})

    def refuse(token):
        raise AssertionError(f"non-JSON token {token}")

    assert json.loads((tmp_path / "x.json").read_text(), parse_constant=refuse) == \
        {"a": None, "b": ["Infinity", 1.5], "c": "-Infinity", "d": {"e": 2.0}, "f": "Infinity-ish"}
    assert read_json(tmp_path / "x.json") == \
        {"a": None, "b": [math.inf, 1.5], "c": -math.inf, "d": {"e": 2.0}, "f": "Infinity-ish"}


def test_a_bad_file_s_advice_is_to_rebuild_an_output_but_to_restore_a_committed_publication(tmp_path):
    """A pipeline output is made again by its step; a publication's file under benchmarks/ is made by no step of a
    fresh run (deleting it loses it), so its one line says to restore it from git."""
    from pipeline_src.io.artifacts import read_csv, read_json
    from pipeline_src.io.errors import ArtifactError

    for folder, want, not_want in (("results", "delete it and rerun", "git checkout"),
                                   ("benchmarks/default", "git checkout -- ", "delete it")):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "x.json").write_text('{"a": 1')
        (tmp_path / folder / "x.csv").write_text("")
        for read, name in ((read_json, "x.json"), (read_csv, "x.csv")):
            with pytest.raises(ArtifactError) as e:
                read(tmp_path / folder / name)
            assert str(tmp_path / folder / name) in str(e.value) and want in str(e.value)
            assert not_want not in str(e.value) and "\n" not in str(e.value)


def _one_run(capsys, proj):
    """The tiny config's one run trained and evaluated; its params file."""
    _, cfg = proj
    for step in ("fetch", "prepare"):
        assert _cli(capsys, step, "--config", str(cfg), "--dataset", "tiny")[0] == 0
    args = ("--dataset", "tiny", "--method", "softmax", "--seed", "0")
    assert _cli(capsys, "train", "--config", str(cfg), *args)[0] == 0
    assert _cli(capsys, "evaluate", "--config", str(cfg), *args)[0] == 0
    return cfg


def test_stash_under_keep_models_true_says_its_final_runs_restore_only_under_false(capsys, proj, tmp_path,
                                                                                    monkeypatch):
    """The third probe's weak case: a stash under keep_models: true said "commit them" of final-run records that
    `restore` there would not put back (a run without its model.pt is retrained); it now says so."""
    from pipeline_src.reporting import publish as pub

    monkeypatch.setattr(pub, "BENCHMARKS", tmp_path / "benchmarks")
    p, cfg = proj
    cfg = _one_run(capsys, proj)
    rc, out, _ = _cli(capsys, "stash", "--name", "s", "--config", str(cfg))
    assert rc == 0 and out.splitlines()[-1] == (
        f"note: the stash holds 3 final runs' files, which `restore` puts back only under keep_models: false "
        f"(keep_models is true in {cfg}: Snakemake would retrain a run restored without its model.pt)")
    write_params({**p, "keep_models": False}, cfg)
    rc, out, _ = _cli(capsys, "stash", "--name", "t", "--config", str(cfg))  # (s is another config's stash now)
    assert rc == 0 and "note:" not in out and out.startswith("stashed ")


def test_a_partial_summary_is_stale_once_a_run_it_lists_missing_has_finished(capsys, proj, tmp_path):
    """The third probe's weak case: a summary made with --partial kept listing a run as missing after it
    finished, and the report said "Missing: tiny/softmax/seed1" of a run that was there."""
    p, cfg = proj
    p["run"]["seeds"] = [0, 1]
    write_params(p, cfg)
    _one_run(capsys, proj)
    assert _cli(capsys, "summarize", "--config", str(cfg), "--partial")[0] == 0
    assert _cli(capsys, "figures", "--config", str(cfg), "--dataset", "tiny")[0] == 0  # current: seed 1 not run
    args = ("--config", str(cfg), "--dataset", "tiny", "--method", "softmax", "--seed", "1")
    assert _cli(capsys, "train", *args)[0] == 0 and _cli(capsys, "evaluate", *args)[0] == 0
    line = _refused(capsys, "figures", "--config", str(cfg), "--dataset", "tiny")
    assert "lists tiny/softmax/seed1 as missing, but it has finished since" in line
    assert f"`python -m pipeline_src summarize --partial --config {cfg}`" in line
    assert _cli(capsys, "summarize", "--config", str(cfg), "--partial")[0] == 0  # both runs now (no matrix fits here)
    assert _cli(capsys, "figures", "--config", str(cfg), "--dataset", "tiny")[0] == 0


@pytest.mark.parametrize("damage", ["truncate", "key", "empty"])
def test_a_damaged_run_record_is_one_line_naming_the_file(capsys, proj, tmp_path, damage):
    cfg = _one_run(capsys, proj)
    metrics = tmp_path / "results" / "runs" / "tiny" / "softmax" / "seed0" / "metrics.json"
    text = metrics.read_text()
    if damage == "truncate":
        metrics.write_text(text[: len(text) // 2])
        want = "not valid JSON (line"
    elif damage == "key":
        metrics.write_text(json.dumps({k: v for k, v in json.loads(text).items() if k != "config_hash"}))
        want = "key 'config_hash' is missing"
    else:
        metrics.write_text("")
        want = "not valid JSON"
    line = _refused(capsys, "summarize", "--config", str(cfg))
    assert str(metrics) in line and want in line


def test_a_damaged_model_s_hint_names_the_params_file_it_was_trained_from(capsys, proj, tmp_path):
    """The second probe's weak case: the hint after a damaged model.pt left out --config, so following it trained
    params.yaml's run instead of this config's."""
    cfg = _one_run(capsys, proj)
    model = tmp_path / "results" / "runs" / "tiny" / "softmax" / "seed0" / "model.pt"
    model.write_bytes(model.read_bytes()[:100])
    line = _refused(capsys, "evaluate", "--config", str(cfg), "--dataset", "tiny", "--method", "softmax",
                    "--seed", "0")
    assert str(model) in line and f"python -m pipeline_src train --config {cfg} --dataset tiny" in line


def test_a_damaged_table_is_one_line_naming_the_file(capsys, proj, tmp_path):
    cfg = _one_run(capsys, proj)
    assert _cli(capsys, "summarize", "--config", str(cfg), "--partial")[0] == 0  # no matrix fits here
    headline = tmp_path / "results" / "headline.csv"
    headline.write_text("")
    line = _refused(capsys, "figures", "--config", str(cfg), "--dataset", "tiny")
    assert str(headline) in line and "is not the table summarize wrote" in line  # its sha256 is not summary.json's
    info = tmp_path / "results" / "summary.json"
    info.write_text(json.dumps({k: v for k, v in json.loads(info.read_text()).items() if k != "tables"}))
    line = _refused(capsys, "figures", "--config", str(cfg), "--dataset", "tiny")  # a summary from before digests
    assert "summary.csv has no record of the tables summarize wrote" in line and "predates table digests" in line
    info.unlink()  # summary.json removed (a hand-edited verdict would then pass unchecked)
    line = _refused(capsys, "figures", "--config", str(cfg), "--dataset", "tiny")
    assert f"summary.json is missing): rerun `python -m pipeline_src summarize --config {cfg}`" in line


def test_every_command_a_hint_suggests_names_the_params_file(capsys, proj, tmp_path):
    """The third probe's weak cases: hints (summarize, prepare, profile, device-check, a truncated train.npy) said
    `python -m pipeline_src CMD` or `snakemake` without --config, so following them ran params.yaml's config. The
    CLI now names the file in every command its one-line refusal suggests; a report with nothing summarised says
    so instead of a bare FileNotFoundError."""
    from pipeline_src.io.errors import runnable_hints

    cfg = proj[1]
    line = _refused(capsys, "report", "--config", str(cfg))
    assert f"{tmp_path / 'results' / 'summary.csv'} does not exist: nothing is summarised there yet" in line
    assert f"`python -m pipeline_src summarize --config {cfg}`" in line
    assert f"`snakemake --cores all --config params={cfg}`" in line  # the fourth probe: no --cores, no run
    line = _refused(capsys, "figures", "--config", str(cfg), "--dataset", "tiny")  # (fourth probe: a bare Errno 2)
    assert "summary.csv does not exist: nothing is summarised there yet" in line
    said = "rerun `python -m pipeline_src prepare --dataset d` (or `snakemake --cores all`), not `x`"
    assert runnable_hints(said, "my config.yaml") == ("rerun `python -m pipeline_src prepare --dataset d --config "
                                                   "'my config.yaml'` (or `snakemake --cores all --config "
                                                   "params='my config.yaml'`), not `x`")
    assert runnable_hints(said, "params.yaml") == said  # the default needs no naming
    named = "`python -m pipeline_src train --config a.yaml` and `snakemake t --cores 2 --config params=a.yaml`"
    assert runnable_hints(named, "b.yaml") == named  # a hint that names its file and cores keeps them
    assert runnable_hints("rerun `snakemake` (or `snakemake -n` to see)", "params.yaml") == \
        "rerun `snakemake --cores all` (or `snakemake -n` to see)"  # a dry run needs no cores
    other = "`python -m pipeline_src advise --profile h100 --seconds 60 --dataset d`"
    assert runnable_hints(other, "b.yaml", {"advise"}) == other  # a command without --config gets none


def test_a_summarised_record_edited_under_its_own_seal_is_refused(capsys, proj, tmp_path):
    """The fourth probe's weak case: a metrics.json whose nll was edited but whose seal was left as it was passed
    report and publish (summary.json's record of the seal matched the stored seal; the content was not checked)."""
    cfg = _one_run(capsys, proj)
    assert _cli(capsys, "summarize", "--config", str(cfg), "--partial")[0] == 0
    metrics = tmp_path / "results" / "runs" / "tiny" / "softmax" / "seed0" / "metrics.json"
    rec = json.loads(metrics.read_text())
    rec["splits"]["test"]["nll"] -= 1.0
    metrics.write_text(json.dumps(rec))
    line = _refused(capsys, "figures", "--config", str(cfg), "--dataset", "tiny")
    assert f"{metrics} changed after" in line and "summarize" in line


def test_ctrl_c_outside_training_is_one_line(capsys, proj, monkeypatch):
    """The fourth probe's weak case: Ctrl-C during publish or summarize printed a KeyboardInterrupt traceback."""
    import pipeline_src.cli as cli

    def interrupted(params, args):
        raise KeyboardInterrupt

    monkeypatch.setitem(cli.COMMANDS, "summarize", (interrupted, *cli.COMMANDS["summarize"][1:]))
    rc, _, err = _cli(capsys, "summarize", "--config", str(proj[1]))
    assert rc == 130 and err.strip() == ("error: summarize interrupted (Ctrl-C); each of its outputs is written whole "
                                         "or not at all: rerun it to finish")


def test_a_run_made_by_hand_is_not_retrained_for_its_hash_files_first_appearance(capsys, proj, tmp_path):
    """The fourth probe's weak case: a run trained and evaluated through the CLI, then `snakemake`, which wrote the
    run's hash files newer than its model and so planned to train it again. A new hash file whose step's record is
    already there under that very hash is written with the time 0; one made under another config is not."""
    from pipeline_src.config import load
    from pipeline_src.io import paths
    from pipeline_src.records.hashes import record_hashes

    p, cfg = proj
    _one_run(capsys, proj)
    params = load(str(cfg))
    train, evaluate = (paths.run_hash_path(params, "tiny", "softmax", 0, s) for s in ("train", "evaluate"))
    assert not train.exists()
    record_hashes(params)
    assert train.stat().st_mtime == 0 and evaluate.stat().st_mtime == 0
    train.unlink(), evaluate.unlink()
    p["datasets"]["tiny"]["training"]["lr"] = 0.02  # the run on disk is now another config's
    write_params(p, cfg)
    record_hashes(load(str(cfg)))
    assert train.stat().st_mtime > 0 and evaluate.stat().st_mtime > 0
    # a review's weak case: a damaged record (a JSON list, a config that is no mapping) was a traceback here;
    # it is not made already, so its hash file is new and its step remakes it
    train.unlink(), evaluate.unlink()
    run = paths.run_dir(load(str(cfg)), "tiny", "softmax", 0)
    (run / paths.TRAIN_RECORD).write_text("[1, 2]\n")
    (run / paths.METRICS).write_text('{"config": {"training": 5}}\n')
    record_hashes(load(str(cfg)))
    assert train.stat().st_mtime > 0 and evaluate.stat().st_mtime > 0


def test_two_trainers_cannot_write_one_run_and_a_stale_lock_is_taken_over(tmp_path, monkeypatch):
    import socket

    run = tmp_path / "run"
    with atomic.exclusive(run, "train"):
        assert json.loads((run / ".lock").read_text())["pid"] == os.getpid()
        with pytest.raises(OutputError, match=r"is being written by another train \(process \d+"):
            with atomic.exclusive(run, "train"):
                pass
        assert (run / ".lock").exists()  # the refused one did not remove the holder's lock
    assert not (run / ".lock").exists()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    (run / ".lock").write_text(json.dumps({"host": socket.gethostname(), "pid": int(dead)}))
    with atomic.exclusive(run, "train"):  # its process is gone: stale, taken over
        assert json.loads((run / ".lock").read_text())["pid"] == os.getpid()
    # a SLURM job killed outright and requeued on another node finds its own lock: taken over
    (run / ".lock").write_text(json.dumps({"host": "node-17", "pid": 4242, "slurm_job": "991"}))
    monkeypatch.setenv("SLURM_JOB_ID", "991")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    with atomic.exclusive(run, "train"):
        assert json.loads((run / ".lock").read_text())["host"] == socket.gethostname()
    # a review's case: two steps of one allocation (one job, one start) both took the lock; now they exclude
    # each other, on another node or on this one with the holder alive
    for host, pid in (("node-17", 4242), (socket.gethostname(), os.getppid())):
        (run / ".lock").write_text(json.dumps({"host": host, "pid": pid, "slurm_job": "991", "slurm_restart": 1}))
        with pytest.raises(OutputError, match=f"on {host}"):
            with atomic.exclusive(run, "train"):
                pass
    # stale twice in a row (another process took it over in between): refused, not run without the lock
    (run / ".lock").write_text(json.dumps({"host": socket.gethostname(), "pid": int(dead)}))
    real_open = os.open

    def taken(path, *a, **k):
        if str(path).endswith(".lock"):  # each try finds a lock again, each of a process gone by the time it reads
            (run / ".lock").write_text(json.dumps({"host": socket.gethostname(), "pid": int(dead)}))
            raise FileExistsError(path)
        return real_open(path, *a, **k)

    monkeypatch.setattr(atomic.os, "open", taken)
    with pytest.raises(OutputError, match="was taken over as this one started"):
        with atomic.exclusive(run, "train"):
            pass
    monkeypatch.setattr(atomic.os, "open", real_open)
    monkeypatch.setenv("SLURM_RESTART_COUNT", "0")
    # read stale, then taken over by a live process before the removal (a second review): its lock is not removed
    live = {"host": socket.gethostname(), "pid": os.getppid()}
    (run / ".lock").write_text(json.dumps(live))
    reads, real_owner = [], atomic._owner

    def read_before_the_takeover(lock):
        reads.append(lock)
        return {"host": socket.gethostname(), "pid": int(dead)} if len(reads) == 1 else real_owner(lock)

    monkeypatch.setattr(atomic, "_owner", read_before_the_takeover)
    with pytest.raises(OutputError, match=f"process {os.getppid()} on"):
        with atomic.exclusive(run, "train"):
            pass
    assert json.loads((run / ".lock").read_text()) == live and len(list(run.iterdir())) == 1  # nothing set aside
    (run / ".lock").write_text(json.dumps({"host": "node-17", "pid": 4242, "slurm_job": "990"}))
    with pytest.raises(OutputError, match="on node-17"):  # another job's, on another node: refused
        with atomic.exclusive(run, "train"):
            pass


def test_a_folder_where_a_table_should_be_is_named_as_such_not_as_a_write(capsys, proj, tmp_path, monkeypatch):
    """The second probe's weak case: `publish` over a results folder whose summary.csv is a directory said
    "writing" a file it failed to read."""
    import pipeline_src.reporting.publish as pub

    _, cfg = proj
    monkeypatch.setattr(pub, "BENCHMARKS", tmp_path / "benchmarks")  # never the repository's
    (tmp_path / "results" / "summary.csv").mkdir(parents=True)
    line = _refused(capsys, "publish", "--config", str(cfg), "--name", "probe-folder")
    assert "summary.csv" in line and "writing" not in line, line
    assert not (tmp_path / "benchmarks" / "probe-folder").exists()


def test_evaluate_of_a_run_still_being_trained_says_so(tmp_path):
    """The third probe: `evaluate` while `train` held the run's lock said "model.pt is missing: delete it". A run
    whose lock a live process holds, and that has no model yet, is said to be in training; a stale lock is not."""
    import socket

    from pipeline_src.evaluation.run import _refuse_while_training
    from pipeline_src.io.atomic import exclusive

    run = tmp_path / "runs" / "tiny" / "softmax" / "seed1"
    with exclusive(run, "train"):
        with pytest.raises(OutputError, match=r"is being trained now \(process \d+ on .*\): evaluate it when "
                                              r"`python -m pipeline_src train` has finished"):
            _refuse_while_training(run, "python -m pipeline_src train")
    (run / ".lock").write_text(json.dumps({"host": socket.gethostname(), "pid": 2 ** 22 + 12345}))  # no such process
    _refuse_while_training(run, "python -m pipeline_src train")  # stale: the missing model's own message follows
    from pipeline_src.evaluation.run import _model
    from pipeline_src.io.errors import ArtifactError

    with pytest.raises(ArtifactError) as e:  # the fourth probe: "missing: delete it and rerun", of a missing file
        _model(run, "cpu", "python -m pipeline_src train")
    assert str(e.value) == (f"{run / 'model.pt'} is missing: the run has not trained to its end (one that diverged "
                            f"leaves no model; its training log says so); run `python -m pipeline_src train`")


def test_a_publish_interrupted_mid_copy_leaves_the_earlier_table_whole(monkeypatch, proj, tmp_path):
    """A review's weak case: Ctrl-C says every output is written whole or not at all, but publish copied its
    tables straight onto the publication's; a copy cut short left a truncated table there."""
    import shutil
    from pathlib import Path

    from pipeline_src.reporting import publication_files
    from pipeline_src.reporting import publish as pub

    p, cfg = proj
    monkeypatch.setattr(pub, "BENCHMARKS", tmp_path / "benchmarks")
    monkeypatch.setattr(pub, "update_docs", lambda: [])
    results = _bench_results(p)
    out = pub.publish(p, cfg, "sweep")
    first = (out / "bench.csv").read_text()
    (results / "bench.csv").write_text("vocab,method\n" + "50,softmax\n" * 1000)

    def cut_short(src, dst):  # half the file, then Ctrl-C
        Path(dst).write_text(Path(src).read_text()[:100])
        raise KeyboardInterrupt

    monkeypatch.setattr(publication_files.shutil, "copyfile", cut_short)
    with pytest.raises(KeyboardInterrupt):
        pub.publish(p, cfg, "sweep")
    monkeypatch.setattr(publication_files.shutil, "copyfile", shutil.copyfile)
    assert (out / "bench.csv").read_text() == first
    assert not [f for f in out.iterdir() if ".tmp" in f.name]  # no temporary left beside it
