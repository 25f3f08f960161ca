"""No wrong number reaches a table: non-finite values refused in what a user writes, infinity carried as a
value through every record and table, every artifact checked against the step that wrote it, nothing
overwritten that a command did not make, a partial summary said as such. Each case here let a wrong,
stale or mislabelled number through before, or lost a user's files."""
import copy
import json
import math
from pathlib import Path

import pandas as pd
import pytest
from conftest import tiny_params, write_params

from pipeline_src.cli import main
from pipeline_src.io import paths


def _refused(capsys, *argv) -> str:
    rc = main(list(argv))
    _, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, (rc, err)
    return lines[0]


def _run(cfg, p, *steps):
    """fetch, prepare, train and evaluate every run of ``p`` through the CLI."""
    for ds in p["run"]["datasets"]:
        for step in ("fetch", "prepare"):
            assert main([step, "--config", str(cfg), "--dataset", ds]) == 0
        for name in p.get("references") or {}:
            assert main(["reference", "--config", str(cfg), "--dataset", ds, "--name", name]) == 0
        for m in p["run"]["methods"]:
            for s in p["run"]["seeds"]:
                run = ["--config", str(cfg), "--dataset", ds, "--method", m, "--seed", str(s), "--threads", "1"]
                assert main(["train", *run]) == 0 and main(["evaluate", *run]) == 0
    for v in p["matrix"]["vocab_sizes"]:
        for d in p["matrix"]["dims"]:
            for s in p["run"]["seeds"]:
                assert main(["matrix", "--config", str(cfg), "--vocab", str(v), "--dim", str(d), "--seed", str(s)]) == 0


def _local_corpus(tmp_path, seed=0):
    """Train and valid text over 30 words; the test text also holds a word the training text never has."""
    import random

    rng = random.Random(seed)
    words = [f"w{i}" for i in range(30)]
    text = {split: "\n".join(" ".join(rng.choices(words, k=12)) for _ in range(n)) + "\n"
            for split, n in (("train", 400), ("valid", 40), ("test", 40))}
    text["test"] += "w1 w2 never-seen-in-train w3\n"
    for split, t in text.items():
        (tmp_path / f"{split}.txt").write_text(t)
    return {"type": "local", **{split: str(tmp_path / f"{split}.txt") for split in text}}


@pytest.fixture
def unseen(default_params, tmp_path):
    """NEGLM without smooth_q (Q(w) = 0 for a word with no training count) beside the softmax, two seeds,
    trained on a text whose test split holds a word the training split never has."""
    p = tiny_params(default_params, tmp_path)
    p["datasets"]["tiny"]["corpus"] = _local_corpus(tmp_path)
    p["datasets"]["tiny"]["training"]["epochs"] = 1
    p["methods"]["neglm"] = {"type": "neglm", "negatives": 10}
    p["run"].update(methods=["softmax", "neglm"], seeds=[1, 2])
    p["evaluation"]["rank_contexts"] = 0
    cfg = write_params(p, tmp_path / "params.yaml")
    _run(cfg, p)
    return p, cfg


# 1. Non-finite numbers refused ---------------------------------------------------------------------------------

@pytest.mark.parametrize("key, value", [("statistics.confidence", ".nan"), ("training.lr", ".inf"),
                                        ("training.dropout", "-.inf"), ("datasets.tiny.training.budget_seconds", ".nan"),
                                        ("matrix.lr", ".nan")])
def test_a_non_finite_number_in_a_params_file_is_refused_naming_file_and_key(default_params, tmp_path, capsys,
                                                                             key, value):
    p = tiny_params(default_params, tmp_path)
    write_params(p, tmp_path / "base.yaml")
    *parents, leaf = key.split(".")
    text = "extends: base.yaml\n" + "".join(f"{'  ' * i}{k}:\n" for i, k in enumerate(parents)) + \
        f"{'  ' * len(parents)}{leaf}: {value}\n"
    (tmp_path / "child.yaml").write_text(text)
    line = _refused(capsys, "check-config", "--config", str(tmp_path / "child.yaml"))
    assert line.startswith(f"error: {tmp_path / 'child.yaml'}: key '{key}': ") and "is not a finite number" in line


@pytest.mark.parametrize("argv, says", [
    (["train", "--dataset", "tiny", "--method", "softmax", "--seed", "0", "--threads", "0"], "--threads: 0 is not a positive integer"),
    (["matrix", "--vocab", "-3", "--dim", "2", "--seed", "0"], "--vocab: -3 is not a positive integer"),
    (["evaluate", "--dataset", "tiny", "--method", "softmax", "--seed", "0", "--threads", "100000"],
     "--threads: 100000 threads: at most 1024"),  # torch segfaulted (rc 139)
    (["evaluate", "--dataset", "tiny", "--method", "softmax", "--seed", "0", "--threads", "99999999999999999999"],
     "--threads: 99999999999999999999 threads: at most 1024"),  # an overflow traceback
    (["publish", "--name", "x", "--wall-time-s", "nan"], "--wall-time-s: 'nan' is not a finite number"),
    (["train", "--dataset", "tiny", "--method", "softmax", "--seed", "1.5"], "--seed: '1.5' is not an integer")])
def test_cli_numbers_are_checked_as_config_values_are(argv, says, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and says in err and "Traceback" not in err


def test_evaluate_a_seed_outside_the_run_seeds_is_refused(default_params, tmp_path, capsys):
    p = tiny_params(default_params, tmp_path)
    cfg = write_params(p, tmp_path / "params.yaml")
    line = _refused(capsys, "evaluate", "--config", str(cfg), "--dataset", "tiny", "--method", "softmax", "--seed", "7")
    assert "--seed 7 is not one of run.seeds [0]" in line


def test_a_matrix_fit_outside_the_params_file_is_refused(default_params, tmp_path, capsys):
    """The third probe: `matrix --vocab 99999999999` ran out of memory with a hint naming the config keys, and a
    --dim or --seed the params file does not hold made a fit no summary reads."""
    p = tiny_params(default_params, tmp_path)
    cfg = write_params(p, tmp_path / "params.yaml")
    m = p["matrix"]
    v, d = m["vocab_sizes"][0], m["dims"][0]
    for argv, says in ((["--vocab", "99999999999", "--dim", str(d), "--seed", "0"],
                        f"--vocab 99999999999 is not one of matrix.vocab_sizes {m['vocab_sizes']}"),
                       (["--vocab", str(v), "--dim", "977", "--seed", "0"], "--dim 977 is not one of matrix.dims"),
                       (["--vocab", str(v), "--dim", str(d), "--seed", "9"], "--seed 9 is not one of run.seeds [0]")):
        line = _refused(capsys, "matrix", "--config", str(cfg), *argv)
        assert says in line and "add it there first" in line, line


# 2. Infinity is a value -------------------------------------------------------------------------------------

def test_an_infinite_test_nll_is_written_read_and_judged_as_infinite(unseen, capsys):
    p, cfg = unseen
    text = paths.metrics_path(p, "tiny", "neglm", 1).read_text()
    rec = json.loads(text)  # strict JSON: no bare Infinity token
    assert rec["splits"]["test"]["nll"] == "Infinity" and rec["splits"]["test"]["zero_prob_tokens"] > 0
    assert main(["summarize", "--config", str(cfg)]) == 0
    s = pd.read_csv(paths.summary_path(p)).query("method == 'neglm' and split == 'test'")
    assert (s.nll == math.inf).all() and (s.ppl == math.inf).all() and (s.zero_prob_tokens > 0).all()
    head = pd.read_csv(paths.headline_path(p)).set_index("method")
    # its validation perplexity is infinite too, so above its unigram line: no verdict rests on it (stats.py; an
    # infinite difference of a method that learned is judged outright: tests/test_stats.py)
    assert head.loc["neglm", "verdict"] == "did not learn, 2 of 2 seeds" and head.loc["neglm", "ppl"] == math.inf
    from pipeline_src.reporting.tables import headline_markdown

    table = headline_markdown(pd.read_csv(paths.headline_path(p)))
    row = next(line for line in table.splitlines() if line.startswith("| neglm "))
    zero = int(s.zero_prob_tokens.sum())
    assert f"| ∞ ({zero} test tokens scored probability 0 over 2 seeds) | — | did not learn, 2 of 2 seeds |" in row, row


# 4 and 7. Nothing overwritten that the command did not make ------------------------------------------------

def _kept_runs(default_params, tmp_path, epochs: int, results: str = "results"):
    """One final run (tiny, softmax, seed 1) under keep_models: false, trained for ``epochs``; its params."""
    p = tiny_params(default_params, tmp_path)
    p["keep_models"], p["results_dir"] = False, str(tmp_path / results)
    p["run"]["seeds"] = [1]
    p["datasets"]["tiny"]["training"]["epochs"] = epochs
    cfg = write_params(p, tmp_path / f"params-{epochs}-{results}.yaml")
    _run(cfg, p)
    return p, cfg


def test_stash_with_nothing_to_stash_leaves_committed_records_alone(default_params, tmp_path, capsys):
    from pipeline_src.config import validate
    from pipeline_src.records.stash import MANIFEST, stash

    p, cfg = _kept_runs(default_params, tmp_path, epochs=1)
    out = tmp_path / "benchmarks" / "x"
    n = stash(validate(copy.deepcopy(p)), str(cfg), out)[0]
    assert n == 4  # the run's train.json, history.csv, metrics.json and the Kneser-Ney reference
    before = {f.relative_to(out): f.read_bytes() for f in out.rglob("*") if f.is_file()}
    empty = validate({**copy.deepcopy(p), "results_dir": str(tmp_path / "fresh-clone-results")})
    assert stash(empty, str(cfg), out)[:2] == (0, 4)  # nothing stashed, the committed 4 kept
    assert {f.relative_to(out): f.read_bytes() for f in out.rglob("*") if f.is_file()} == before
    assert json.loads((out / "records" / MANIFEST).read_text())["files"]


def test_restore_leaves_other_runs_of_the_same_names_whole(default_params, tmp_path):
    from pipeline_src.config import validate
    from pipeline_src.records.stash import restore, stash

    p1, cfg1 = _kept_runs(default_params, tmp_path, epochs=1, results="stashed-from")
    out = tmp_path / "benchmarks" / "x"
    stash(validate(copy.deepcopy(p1)), str(cfg1), out)
    p3, _ = _kept_runs(default_params, tmp_path, epochs=3, results="mine")  # the user's own 3-epoch run
    run = paths.run_dir(p3, "tiny", "softmax", 1)
    mine = {f.name: f.read_bytes() for f in run.iterdir() if f.is_file()}
    n, skipped = restore(validate({**copy.deepcopy(p1), "results_dir": p3["results_dir"]}), out, say=lambda s: None)
    assert n == 0 and any("holds a record with other content" in s and "runs/tiny/softmax/seed1" in s for s in skipped)
    assert {f.name: f.read_bytes() for f in run.iterdir() if f.is_file()} == mine  # not one file replaced


# 6. All-or-nothing summaries; 3. tables checked against what summarize wrote ---------------------------------

def test_a_refused_summarize_writes_nothing_and_an_edited_table_is_refused(unseen, capsys):
    p, cfg = unseen
    assert main(["summarize", "--config", str(cfg)]) == 0
    capsys.readouterr()
    results = paths.summary_path(p).parent
    before = {f.name: f.read_bytes() for f in results.iterdir() if f.is_file()}
    p2 = copy.deepcopy(p)
    p2["references"]["kn"]["orders"] = [3]  # the Kneser-Ney record on disk was made under orders [2]
    cfg2 = write_params(p2, cfg.with_name("other.yaml"))
    assert "references/tiny/kn.json was made under another config" in _refused(capsys, "summarize", "--config", str(cfg2))
    assert {f.name: f.read_bytes() for f in results.iterdir() if f.is_file()} == before  # not one table rewritten
    head = paths.headline_path(p)
    text = head.read_text()
    assert "did not learn" in text
    head.write_text(text.replace("did not learn", "better"))  # a hand edit of a verdict
    line = _refused(capsys, "figures", "--config", str(cfg), "--dataset", "tiny")
    assert "headline.csv is not the table summarize wrote" in line


# 8. Partial is said -----------------------------------------------------------------------------------------

def test_a_partial_summary_is_said_with_its_missing_runs_and_seeds_are_counted_per_method():
    from pipeline_src.reporting.findings import partial_notice, seeds_line

    rows = [{"dataset": "zipf-1m", "method": m, "seed": s, "split": "test"} for m, seeds in
            (("softmax", (1, 2, 3)), ("nce", (1, 2)), ("hs", (1, 2, 3))) for s in seeds]
    summary = pd.DataFrame(rows)
    assert seeds_line(summary) == ("Run seeds per method differ: 3 for zipf-1m/softmax, zipf-1m/hs; 2 for zipf-1m/nce "
                                   "(of seeds [1, 2, 3])")
    assert seeds_line(summary[summary.method != "nce"]) == "3 run seeds per method ([1, 2, 3])"
    info = {"partial": True, "runs": 8, "of": 9, "missing": ["zipf-1m/nce/seed3"]}
    assert partial_notice(info) == ("**Partial results: this summary holds 8 of 9 runs.** Missing (not finished, or "
                                    "diverged): zipf-1m/nce/seed3. Every table and verdict below is over the runs "
                                    "that finished.")
    assert partial_notice({**info, "partial": False}) is None and partial_notice(None) is None


# 3 and 5. Every record checked against what made it -------------------------------------------------------

def test_a_hand_edited_metrics_file_is_refused_and_so_are_history_and_matrix_fits_made_otherwise(unseen, capsys):
    p, cfg = unseen
    assert main(["summarize", "--config", str(cfg)]) == 0
    metrics = paths.metrics_path(p, "tiny", "softmax", 1)
    text = metrics.read_text()
    rec = json.loads(text)
    nll = rec["splits"]["test"]["nll"]
    metrics.write_text(text.replace(json.dumps(nll), json.dumps(round(nll - 0.4, 6))))  # a better number by hand
    line = _refused(capsys, "summarize", "--config", str(cfg))
    assert str(metrics) in line and "content_sha256 differs" in line
    metrics.write_text(text)
    hist = paths.run_dir(p, "tiny", "softmax", 1) / "history.csv"
    hist.write_text(hist.read_text() + hist.read_text().splitlines()[-1] + "\n")
    assert "history.csv is not the file" in _refused(capsys, "summarize", "--config", str(cfg))
    hist.write_text(hist.read_text().rsplit("\n", 2)[0] + "\n")
    assert main(["summarize", "--config", str(cfg)]) == 0
    p2 = copy.deepcopy(p)
    p2["matrix"]["steps"] = 21  # the fits on disk were made with 20 steps
    cfg2 = write_params(p2, cfg.with_name("matrix.yaml"))
    line = _refused(capsys, "summarize", "--config", str(cfg2))
    assert "was made under other matrix settings (key 'matrix.steps' differs)" in line


def test_report_and_publish_refuse_a_bench_made_under_other_settings(default_params, tmp_path, capsys):
    import torch

    from pipeline_src.config import validate
    from pipeline_src.cost.bench import run_bench
    from pipeline_src.io.digests import DigestError
    from pipeline_src.io.errors import StaleError
    from pipeline_src.reporting.summary_checks import check_bench

    p = validate(tiny_params(default_params, tmp_path))
    run_bench(p, torch.device("cpu"))
    check_bench(p)  # as made
    other = copy.deepcopy(p)
    other["bench"]["vocab_sizes"] = [60]
    with pytest.raises(StaleError, match="made under other bench settings \\(key 'bench.vocab_sizes' differs\\)"):
        check_bench(other)
    bench = paths.bench_path(p)
    bench.write_text(bench.read_text().replace("softmax", "softmax ", 1))
    with pytest.raises(DigestError, match="bench.csv is not the file .*bench.json was made with"):
        check_bench(p)


def test_committed_records_without_digests_get_them_on_restore_and_a_second_restore_keeps_them(default_params,
                                                                                             tmp_path):
    from pipeline_src.config import validate
    from pipeline_src.io.digests import SEAL, sealed, sha256_of
    from pipeline_src.records.stash import MANIFEST, restore, stash

    p, cfg = _kept_runs(default_params, tmp_path, epochs=1, results="stashed-from")
    out = tmp_path / "benchmarks" / "x"
    stash(validate(copy.deepcopy(p)), str(cfg), out)
    manifest_path = out / "records" / MANIFEST
    manifest = json.loads(manifest_path.read_text())
    for rel in manifest["files"]:  # as a stash committed before digests holds them
        f = out / "records" / rel
        if f.suffix == ".json" and SEAL in (rec := json.loads(f.read_text())):
            f.write_text(json.dumps({k: v for k, v in rec.items() if k not in (SEAL, "history_sha256")}, indent=2))
            manifest["files"][rel] = sha256_of(f)
    manifest_path.write_text(json.dumps(manifest))
    fresh = validate({**copy.deepcopy(p), "results_dir": str(tmp_path / "clone-results")})
    n, skipped = restore(fresh, out, say=lambda s: None)
    assert n == 4 and skipped == []
    metrics = json.loads(paths.metrics_path(fresh, "tiny", "softmax", 1).read_text())
    assert sealed(metrics) and metrics["history_sha256"]
    assert restore(fresh, out, say=lambda s: None) == (0, [])  # already there: nothing rewritten, no clash


# 7. The weak cases ------------------------------------------------------------------------------------------

def test_params_files_say_what_they_mean(default_params, tmp_path, capsys):
    """A non-UTF-8 params file is one line naming the file and line; `references: {}` in a child means none;
    a synthetic support above the vocabulary is refused, not clipped."""
    from pipeline_src.config import load

    base = write_params(tiny_params(default_params, tmp_path), tmp_path / "base.yaml")
    latin1 = tmp_path / "latin1.yaml"
    latin1.write_bytes(b"extends: base.yaml\n# caf\xe9\n")
    line = _refused(capsys, "check-config", "--config", str(latin1))
    assert line == f"error: {latin1}: not UTF-8 text (byte 0xe9 at line 2); save it as UTF-8"
    none = tmp_path / "none.yaml"
    none.write_text("extends: base.yaml\nreferences: {}\n")
    assert load(base)["references"] and load(none)["references"] == {}
    big = tmp_path / "big.yaml"
    big.write_text("extends: base.yaml\ndatasets:\n  tiny:\n    corpus: {support: 31}\n")
    line = _refused(capsys, "check-config", "--config", str(big))
    assert "key 'datasets.tiny.corpus.support': 31 is more than vocab_size 30" in line


def test_a_refused_checkpoint_is_named_as_the_file_it_is(tiny_data, tmp_path):
    import torch

    from pipeline_src.config import run_config
    from pipeline_src.io.errors import ResumeError
    from pipeline_src.training import checkpoints
    from pipeline_src.training.loop import train

    p, _, prep = tiny_data
    cfg = run_config(p, "tiny", "softmax")
    other = copy.deepcopy(cfg)
    other["training"]["lr"] = cfg["training"]["lr"] * 2
    out = tmp_path / "run"
    out.mkdir()
    torch.save({"config": other, "config_hash": "elsewhere"}, out / checkpoints.PREVIOUS)  # the only generation
    with pytest.raises(ResumeError, match=r"checkpoint\.prev\.pt was written by a different config.*delete it to "
                                          r"start this run afresh: `rm \S+checkpoint\.prev\.pt`$"):
        train(cfg, prep, out, torch.device("cpu"))
    # both generations and a fork (the third probe: the hint named one at a time, each rerun refused the next)
    torch.save({"config": other, "config_hash": "elsewhere"}, out / checkpoints.CHECKPOINT)
    torch.save({"config": other, "config_hash": "elsewhere"}, out / paths.FORK)
    with pytest.raises(ResumeError) as e:
        train(cfg, prep, out, torch.device("cpu"))
    names = [out / checkpoints.CHECKPOINT, out / checkpoints.PREVIOUS, out / paths.FORK]
    assert str(e.value).endswith(f"delete the run checkpoints to start this run afresh: `rm {' '.join(map(str, names))}`")
    for n in names:
        n.unlink()
    assert train(cfg, prep, out, torch.device("cpu"))["status"] == "ok"  # following the hint trains afresh


def test_a_full_disk_is_one_line_and_leaves_no_lock_that_refuses_the_rerun(tmp_path, monkeypatch):
    """Seen on a 200 kB tmpfs: the lock's own write failed and left an empty .lock that refused every later run
    ("being written by another train (process ?)"); torch.save's short write was a RuntimeError traceback."""
    import errno

    import torch

    from pipeline_src.io import atomic
    from pipeline_src.training import checkpoints

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    run = tmp_path / "run"
    monkeypatch.setattr(atomic.json, "dump", full)
    with pytest.raises(OSError):
        with atomic.exclusive(run, "train"):
            pass
    assert not (run / ".lock").exists()
    monkeypatch.undo()
    with atomic.exclusive(run, "train"):  # the rerun is not refused
        pass

    def short_write(obj, f):
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 38272 vs 38192")

    monkeypatch.setattr(torch, "save", short_write)
    with pytest.raises(OSError, match="torch.save failed") as e:
        checkpoints.save(run / "checkpoint.pt", {})
    assert e.value.filename == str(run / "checkpoint.pt") and not any(run.iterdir())  # nothing half-written


def test_snakemake_with_a_results_dir_that_is_a_file_is_one_line(default_params, tmp_path):
    import subprocess

    from conftest import clean_env
    from test_pipeline import BIN, _project

    proj = _project(tmp_path, tiny_params(default_params, tmp_path))
    (tmp_path / "a-file").write_text("not a folder\n")
    write_params({"extends": "params.yaml", "results_dir": str(tmp_path / "a-file")}, proj / "file.yaml")
    r = subprocess.run([str(BIN / "snakemake"), "-n", "--cores", "1", "--config", "params=file.yaml"], cwd=proj,
                       capture_output=True, text=True, env=clean_env(proj))
    assert r.returncode != 0 and "NotADirectoryError" not in r.stderr + r.stdout
    assert f"key 'results_dir': '{tmp_path / 'a-file'}' is a file, not a folder" in r.stderr + r.stdout


def test_no_step_writes_into_the_repository_s_committed_folders(capsys, tmp_path):
    from conftest import ROOT

    for where, what in ((ROOT / "benchmarks" / "default", "inside the repository's benchmarks/"),
                        (ROOT, "the repository itself"), (ROOT / "docs", "inside the repository's docs/")):
        cfg = write_params({"extends": str(ROOT / "params.yaml"), "results_dir": str(where)}, tmp_path / "p.yaml")
        line = _refused(capsys, "summarize", "--config", str(cfg))
        assert f"key 'results_dir': '{where}' is {what}, whose files are committed" in line
    cfg = write_params({"extends": str(ROOT / "params.yaml"), "results_dir": str(ROOT / "results-x")}, tmp_path / "p.yaml")
    assert main(["check-config", "--config", str(cfg)]) == 0  # an ignored results-NAME/ folder is the pipeline's


def test_a_summary_whose_run_records_are_gone_or_changed_is_refused(unseen, capsys):
    """A deleted run folder gave Snakemake 'Nothing to be done' while the summary kept the run: the tables read
    from it now check that every run they summarise is still there, as it was."""
    import shutil

    p, cfg = unseen
    assert main(["summarize", "--config", str(cfg)]) == 0
    run = paths.run_dir(p, "tiny", "neglm", 2)
    kept = run.parent / "kept"
    shutil.move(run, kept)
    line = _refused(capsys, "figures", "--config", str(cfg), "--dataset", "tiny")
    assert f"summarises {run / 'metrics.json'}, which is gone" in line
    shutil.move(kept, run)
    assert main(["figures", "--config", str(cfg), "--dataset", "tiny"]) == 0


def test_a_hand_edited_or_borrowed_train_json_is_refused_by_evaluate_and_select(unseen, default_params, tmp_path,
                                                                              capsys):
    """The probe: tokens/s set to 1.2e8 in a run's train.json, or another run's train.json copied in, reached
    summary.csv through evaluate; a trial's best_valid_nll set to 0.5 made select pick it."""
    import shutil

    p, cfg = unseen
    run = ["--config", str(cfg), "--dataset", "tiny", "--method", "softmax", "--seed", "1"]
    record = paths.run_dir(p, "tiny", "softmax", 1) / "train.json"
    text = record.read_text()
    record.write_text(text.replace('"tokens_per_s_train": ', '"tokens_per_s_train": 1', 1))
    assert "content_sha256 differs" in _refused(capsys, "evaluate", *run)
    shutil.copy(paths.run_dir(p, "tiny", "neglm", 1) / "train.json", record)
    assert "is not the record of the model beside it" in _refused(capsys, "evaluate", *run)
    record.write_text(text)
    assert main(["evaluate", *run]) == 0

    t = tiny_params(default_params, tmp_path / "tuned")
    t["tuning"] = {"enabled": True, "trials": 2, "seed": 0, "epochs": 1, "lr": {"adam": [0.003, 0.03]}}
    tcfg = write_params(t, tmp_path / "tuned.yaml")
    for step in ("fetch", "prepare"):
        assert main([step, "--config", str(tcfg), "--dataset", "tiny"]) == 0
    for trial in (0, 1):
        assert main(["train", "--config", str(tcfg), "--dataset", "tiny", "--method", "softmax", "--trial",
                     str(trial)]) == 0
    trial0 = paths.trial_dir(t, "tiny", "softmax", 0) / "train.json"
    rec = json.loads(trial0.read_text())
    trial0.write_text(json.dumps({**rec, "best_valid_nll": 0.5}))  # a better trial by hand
    line = _refused(capsys, "select", "--config", str(tcfg), "--dataset", "tiny", "--method", "softmax")
    assert str(trial0) in line and "content_sha256 differs" in line


def test_an_edited_prepared_split_or_raw_copy_is_refused(default_params, tmp_path, capsys):
    """The probe: train.npy cut to a tenth trained without a word; test.npy shuffled in place gave another test
    nll; an edited raw copy of a local corpus was prepared from silently."""
    import numpy as np

    p = tiny_params(default_params, tmp_path)
    p["datasets"]["tiny"]["corpus"] = _local_corpus(tmp_path)
    p["datasets"]["tiny"]["training"]["epochs"] = 1  # the text is random: more epochs only overfit it
    cfg = write_params(p, tmp_path / "params.yaml")
    for step in ("fetch", "prepare"):
        assert main([step, "--config", str(cfg), "--dataset", "tiny"]) == 0
    run = ["--config", str(cfg), "--dataset", "tiny", "--method", "softmax", "--seed", "0"]
    prepared = paths.prepared_dir(p, "tiny")
    train = np.load(prepared / "train.npy")
    np.save(prepared / "train.npy", train[: len(train) // 10])
    line = _refused(capsys, "train", *run)
    assert "train.npy is not the file" in line and "meta.json was made with" in line
    np.save(prepared / "train.npy", train)
    assert main(["train", *run]) == 0
    test = np.load(prepared / "test.npy")
    np.save(prepared / "test.npy", np.random.default_rng(0).permutation(test))
    assert "test.npy is not the file" in _refused(capsys, "evaluate", *run)
    copy_ = paths.raw_dir(p, "tiny") / "valid.txt"
    copy_.write_text(copy_.read_text() + "w1 w2\n")
    line = _refused(capsys, "prepare", "--config", str(cfg), "--dataset", "tiny")
    assert "valid.txt is not the copy fetch made" in line


def test_a_summary_of_another_run_set_is_refused(unseen, capsys):
    """The probe: publish under a config with a third seed, or without one of the methods, shipped the summary
    of the runs that were there as the config's (runs 4 of 4, seeds [0, 1, 2])."""
    p, cfg = unseen
    assert main(["summarize", "--config", str(cfg)]) == 0
    more = write_params({**copy.deepcopy(p), "run": {**p["run"], "seeds": [1, 2, 3]}}, cfg.with_name("more.yaml"))
    line = _refused(capsys, "figures", "--config", str(more), "--dataset", "tiny")
    assert "lacks 2 run(s) this config makes (tiny/neglm/seed3 first) and does not list them as missing" in line
    fewer = write_params({**copy.deepcopy(p), "run": {**p["run"], "methods": ["softmax"]}}, cfg.with_name("few.yaml"))
    line = _refused(capsys, "figures", "--config", str(fewer), "--dataset", "tiny")
    assert "holds 2 run(s) this config does not make (tiny/neglm/seed1 first)" in line


def test_resolve_replaces_only_a_params_file(default_params, tmp_path, capsys):
    """The probe: `resolve --out` wrote YAML over a corpus file, a model and README.md."""
    cfg = write_params(tiny_params(default_params, tmp_path), tmp_path / "params.yaml")
    for name, content in (("train.txt", b"the cat sat\n"), ("model.pt", b"PK\x03\x04\x00\xff"), ("README.md",
                          b"# A title\n\nSome prose: with a colon.\n")):
        (tmp_path / name).write_bytes(content)
        line = _refused(capsys, "resolve", "--config", str(cfg), "--out", str(tmp_path / name))
        assert "exists and is not a params file" in line and (tmp_path / name).read_bytes() == content
    (tmp_path / "for-dvc.yaml").write_text("seed: 1\n")  # a params file: what resolve is for
    assert main(["resolve", "--config", str(cfg), "--out", str(tmp_path / "for-dvc.yaml")]) == 0


def test_snakemake_quotes_a_params_path_with_a_space(default_params, tmp_path):
    """The probe: `--config params="w/with space/sp.yaml"` made every job's command two words: the job failed and
    argparse's usage went into a stray file named `w/with`."""
    import subprocess

    from conftest import clean_env
    from test_pipeline import BIN, _project

    proj = _project(tmp_path, tiny_params(default_params, tmp_path))
    (proj / "with space").mkdir()
    write_params({"extends": "../params.yaml", "results_dir": "results space"}, proj / "with space" / "sp.yaml")
    r = subprocess.run([str(BIN / "snakemake"), "-n", "--printshellcmds", "--cores", "1", "--config",
                        "params=with space/sp.yaml"], cwd=proj, capture_output=True, text=True, env=clean_env(proj))
    assert r.returncode == 0, r.stderr
    cmds = [line for line in r.stdout.splitlines() if " -m pipeline_src " in line]
    assert cmds and all("--config 'with space/sp.yaml'" in c for c in cmds)
    assert all("> 'results space/logs/" in c for c in cmds if "> " in c)


@pytest.mark.parametrize("text, says", [
    ("seed: 1.0", "key 'seed': 1.0 is not an integer; write it as 1"),
    ("datasets: {tiny: {training: {epochs: 2.0}}}", "key 'datasets.tiny.training.epochs': 2.0 is not an integer"),
    ("run: {seeds: [18446744073709551616]}", "18446744073709551616 is greater than the maximum of 4294967295"),
    ("results_dir: '~/lmres'", "key 'results_dir': '~/lmres' does not match"),
    ("results_dir: ''", "key 'results_dir': '' "),
    # the third probe: a rate written 1e-3 is a string to YAML 1.1, and the schema said only "not of type 'number'"
    ("training: {lr: 1e-3}", "key 'training.lr': '1e-3' is a string to YAML (1.1 reads an exponent as a number only "
                             "with a dot and a sign: 1.0e-3, 1.0e+9); write 1.0e-03"),
    ("bench: {vocab_sizes: [1000, 1000]}", "key 'bench.vocab_sizes': [1000, 1000] has non-unique elements"),
    # the fourth probe: a head option's type is a list, and the hint was missing there
    ("methods: {plif: {type: plif, lr_scale: 1e9}}", "key 'methods.plif.lr_scale': '1e9' is a string to YAML (1.1 "
                                                     "reads an exponent as a number only with a dot and a sign: "
                                                     "1.0e-3, 1.0e+9); write 1.0e+09"),
])
def test_values_the_schema_let_through_and_that_failed_later_are_refused(default_params, tmp_path, capsys, text, says):
    """The probe: a seed of 1.0 and 2.0 epochs passed the schema and failed deep inside (tracebacks); a seed of
    2**64 failed in numpy; results_dir '' wrote into the working directory and '~/x' made a folder named '~'."""
    write_params(tiny_params(default_params, tmp_path), tmp_path / "base.yaml")
    (tmp_path / "child.yaml").write_text(f"extends: base.yaml\n{text}\n")
    rc = main(["check-config", "--config", str(tmp_path / "child.yaml")])
    err = capsys.readouterr().err
    assert rc == 2 and says in err and "Traceback" not in err, err


def test_out_of_memory_is_one_line_and_other_runtime_errors_are_not_hidden(monkeypatch, capsys):
    """The probe: a 1e8-wide model gave the CPU allocator's RuntimeError traceback."""
    import pipeline_src.cli as cli

    def oom(params, args):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: "
                           "you tried to allocate 160000000000000000 bytes.")

    monkeypatch.setitem(cli.COMMANDS, "check-config", (oom, "", ()))
    line = _refused(capsys, "check-config")
    assert line.startswith("error: check-config: out of memory ([enforce fail") and "reduce model.emb_dim" in line

    def bug(params, args):
        raise RuntimeError("shape mismatch")

    monkeypatch.setitem(cli.COMMANDS, "check-config", (bug, "", ()))
    with pytest.raises(RuntimeError, match="shape mismatch"):  # a bug stays a traceback, not a tidy line
        main(["check-config"])


def test_a_local_corpus_with_a_device_a_shared_split_a_bom_or_nul_bytes(default_params, tmp_path, capsys):
    """The probe: /dev/null was 'does not exist'; one file for all three splits was scored on its training text;
    a byte-order mark became a word; NUL bytes became <unk> silently."""
    p = tiny_params(default_params, tmp_path)
    corpus = _local_corpus(tmp_path)
    cases = [({"valid": "/dev/null"}, "corpus.valid: /dev/null is not a regular file"),
             ({"test": corpus["train"]}, "corpus.test: the same text as corpus.train")]
    for change, says in cases:
        p["datasets"]["tiny"]["corpus"] = {**corpus, **change}
        cfg = write_params(p, tmp_path / "params.yaml")
        assert says in _refused(capsys, "fetch", "--config", str(cfg), "--dataset", "tiny")
    valid = tmp_path / "valid.txt"
    valid.write_bytes(b"\xef\xbb\xbf" + valid.read_bytes())
    p["datasets"]["tiny"]["corpus"] = corpus
    cfg = write_params(p, tmp_path / "params.yaml")
    for step in ("fetch", "prepare"):
        assert main([step, "--config", str(cfg), "--dataset", "tiny"]) == 0
    meta = json.loads((paths.prepared_dir(p, "tiny") / "meta.json").read_text())
    assert meta["splits"]["valid"]["tokens"] == 40 * 13  # 40 lines of 12 words and <eos>: no BOM word
    valid.write_bytes(valid.read_bytes().replace(b" w1 ", b" \x00\x00 ", 1))
    assert "valid.txt: line 3 holds a NUL byte" in _refused(capsys, "fetch", "--config", str(cfg), "--dataset", "tiny")


def test_restate_keeps_the_publication_s_summary_record_true(tmp_path, monkeypatch):
    """The probe: after restate the publication's summary.json still gave the old confidence, and its digest of
    headline.csv no longer matched."""
    import shutil

    from conftest import ROOT

    import pipeline_src.reporting.publish as pub
    from pipeline_src.config import load
    from pipeline_src.io.digests import sha256_of

    monkeypatch.setattr(pub, "BENCHMARKS", tmp_path)
    monkeypatch.setattr(pub, "update_docs", lambda: [])
    shutil.copytree(ROOT / "benchmarks" / "default", tmp_path / "default")
    info = json.loads((tmp_path / "default" / "summary.json").read_text())
    info["tables"] = {"headline.csv": "0" * 64}  # as a summary with digests records them
    (tmp_path / "default" / "summary.json").write_text(json.dumps(info))
    from pipeline_src.reporting.seals import seal_provenance

    prov = json.loads((tmp_path / "default" / "provenance.json").read_text())  # a publication sealed with it
    (tmp_path / "default" / "provenance.json").write_text(json.dumps(seal_provenance(prov, tmp_path / "default")))
    p = load(ROOT / "params.yaml")
    p["statistics"]["confidence"] = 0.9
    pub.restate(p, ROOT / "params.yaml", "default", say=lambda s: None)
    info = json.loads((tmp_path / "default" / "summary.json").read_text())
    assert info["statistics"]["confidence"] == 0.9
    assert info["tables"]["headline.csv"] == sha256_of(tmp_path / "default" / "headline.csv")


def test_nested_data_and_results_folders_and_a_stash_into_another_benchmark_are_refused(default_params, tmp_path,
                                                                                      capsys):
    """The probe: results_dir inside data_dir/prepared/<ds> lost every run when prepare replaced its folder;
    `stash --name default` from a toy config wrote into the default publication's folder."""
    p = tiny_params(default_params, tmp_path)
    p["results_dir"] = str(tmp_path / "data" / "prepared" / "tiny")
    cfg = write_params(p, tmp_path / "nested.yaml")
    assert "lie one inside the other" in _refused(capsys, "check-config", "--config", str(cfg))
    from pipeline_src.io.errors import OutputError
    from pipeline_src.reporting.publish import check_stash

    from pipeline_src.config import validate

    (tmp_path / "pub").mkdir()  # a publication of the default params; the toy config differs by content
    (tmp_path / "pub" / "provenance.json").write_text(json.dumps({"params_file": "params.yaml",
                                                                  "params": default_params}))
    with pytest.raises(OutputError, match="holds the records or publication of params.yaml, whose config differs"):
        check_stash(tmp_path / "pub", validate(p), "toy.yaml", replace=False)
    check_stash(tmp_path / "pub", validate(p), "toy.yaml", replace=True)
    check_stash(tmp_path / "pub", validate(dict(default_params)), "other-name.yaml", replace=False)  # same content


def _test_split_cut_and_prepared_again(tmp_path, cfg, capsys) -> str:
    """The local corpus's test file cut to 20 lines, fetched and prepared again; summarize's refusal."""
    test = tmp_path / "test.txt"
    test.write_text("".join(test.read_text().splitlines(keepends=True)[:20]))
    for step in ("fetch", "prepare"):
        assert main([step, "--config", str(cfg), "--dataset", "tiny"]) == 0
    capsys.readouterr()
    return _refused(capsys, "summarize", "--config", str(cfg))


def test_a_run_scored_on_data_prepared_again_since_is_refused(unseen, tmp_path, capsys):
    """The probe: a local corpus's test file cut after evaluation, fetched and prepared again; summarize and
    publish kept the old test nll over 516 tokens while the prepared test split had 260."""
    p, cfg = unseen
    line = _test_split_cut_and_prepared_again(tmp_path, cfg, capsys)
    assert "was scored on other data than" in line and "rerun `python -m pipeline_src evaluate" in line


def test_a_run_scored_on_an_earlier_preparation_with_the_same_tokens_is_kept_and_said(unseen, tmp_path, capsys):
    """The 10k rerun's records were scored on data whose noise probabilities NumPy's SVML kernels (AVX-512) had
    made; prepared again through the C library the tokens are the same and noise.npz differs in the last bit. With
    the earlier meta.json beside the records (earlier-data/), summarize keeps the runs and says so in
    summary.json; a test split changed since is refused even so."""
    import numpy as np

    from pipeline_src.io.atomic import write_json
    from pipeline_src.io.digests import sha256_of

    p, cfg = unseen
    prepared = paths.prepared_dir(p, "tiny")
    earlier = paths.earlier_meta_path(p, "tiny")
    earlier.parent.mkdir(parents=True)
    original = (prepared / "meta.json").read_bytes()
    earlier.write_bytes(original)
    with np.load(prepared / "noise.npz") as z:  # prepared again on other float kernels: one ulp apart
        arrays = {k: z[k] for k in z.files}
    np.savez(prepared / "noise.npz", **{**arrays, "probs": np.nextafter(arrays["probs"], 1.0)})
    meta = json.loads((prepared / "meta.json").read_text())
    files = {**meta["files"], "noise.npz": sha256_of(prepared / "noise.npz")}
    write_json(prepared / "meta.json", {**meta, "files": files})
    capsys.readouterr()
    assert main(["summarize", "--config", str(cfg)]) == 0, capsys.readouterr().err
    info = json.loads(paths.summary_path(p).with_suffix(".json").read_text())
    assert info["earlier_data"] == {"tiny": {"scored_on": sha256_of(earlier), "differs": "noise.npz",
                                             "prepared_now": sha256_of(prepared / "meta.json")}}
    earlier.write_text(earlier.read_text().replace('"test.npy": "', '"test.npy": "0', 1))  # not what they scored on
    line = _refused(capsys, "summarize", "--config", str(cfg))
    assert "was scored on other data than" in line
    earlier.write_bytes(original)  # the earlier data again, but a token changed since
    line = _test_split_cut_and_prepared_again(tmp_path, cfg, capsys)
    assert "was scored on other data than" in line and f"({earlier}) differs in test.npy" in line


def test_restore_puts_back_the_earlier_preparation_its_records_were_scored_on(default_params, tmp_path):
    """earlier-data/<dataset>.meta.json beside a stash's records is restored with them when its data config is
    the params file's now; one made under another is left out and said."""
    from pipeline_src.config import validate
    from pipeline_src.records.stash import restore, stash

    p, cfg = _kept_runs(default_params, tmp_path, epochs=1, results="stashed-from")
    out = tmp_path / "b" / "x"
    stash(validate(copy.deepcopy(p)), str(cfg), out)
    meta = paths.prepared_dir(p, "tiny") / "meta.json"
    (out / paths.EARLIER_DATA).mkdir()
    (out / paths.EARLIER_DATA / "tiny.meta.json").write_bytes(meta.read_bytes())
    fresh = validate({**copy.deepcopy(p), "results_dir": str(tmp_path / "clone")})
    n, stale = restore(fresh, out, say=lambda s: None)
    assert n == 5 and not stale  # the run's three files, the reference and the earlier meta.json
    assert paths.earlier_meta_path(fresh, "tiny").read_bytes() == meta.read_bytes()
    other = json.loads(meta.read_text())
    (out / paths.EARLIER_DATA / "tiny.meta.json").write_text(json.dumps({**other, "config_hash": "0" * 16}))
    again = validate({**copy.deepcopy(p), "results_dir": str(tmp_path / "clone2")})
    n, stale = restore(again, out, say=lambda s: None)
    assert n == 4 and stale == [f"{out / paths.EARLIER_DATA / 'tiny.meta.json'}: made under another data config"]
    assert not paths.earlier_meta_path(again, "tiny").exists()


def test_stash_and_restore_leave_out_an_edited_record(default_params, tmp_path):
    """The second probe: stash copied a metrics.json whose seal was broken and counted it current; a stash whose
    manifest was updated after an edit restored it."""
    from pipeline_src.config import validate
    from pipeline_src.io.digests import sha256_of
    from pipeline_src.records.stash import MANIFEST, restore, stash

    p, cfg = _kept_runs(default_params, tmp_path, epochs=1, results="stashed-from")
    metrics = paths.metrics_path(p, "tiny", "softmax", 1)
    text = metrics.read_text()
    metrics.write_text(text.replace('"nll": ', '"nll": 1', 1))
    n, _, stale = stash(validate(copy.deepcopy(p)), str(cfg), tmp_path / "b" / "x")
    assert n == 1 and any("metrics.json: its content is not what the step that wrote it recorded" in s for s in stale)
    metrics.write_text(text)
    out = tmp_path / "b" / "y"
    stash(validate(copy.deepcopy(p)), str(cfg), out)
    stashed = out / "records" / metrics.relative_to(p["results_dir"])
    stashed.write_text(stashed.read_text().replace('"nll": ', '"nll": 1', 1))
    manifest = json.loads((out / "records" / MANIFEST).read_text())
    manifest["files"][stashed.relative_to(out / "records").as_posix()] = sha256_of(stashed)
    (out / "records" / MANIFEST).write_text(json.dumps(manifest))
    fresh = validate({**copy.deepcopy(p), "results_dir": str(tmp_path / "clone")})
    n, skipped = restore(fresh, out, say=lambda s: None)
    assert n == 1 and any("its content is not what the step" in s for s in skipped)  # the reference alone
    assert not paths.metrics_path(fresh, "tiny", "softmax", 1).exists()


def _edited(tmp_path, monkeypatch, name: str, file: str, edit, digest: bool) -> None:
    """Publication ``name`` copied under tmp_path (as benchmarks/), ``edit`` applied to the rows of ``file``
    (a list of lists, the header first); without ``digest`` its provenance keeps no table digests (a
    publication from before them), so only the row checks stand between the edit and a verdict."""
    import csv
    import shutil

    from conftest import ROOT

    import pipeline_src.reporting.publish as pub

    monkeypatch.setattr(pub, "BENCHMARKS", tmp_path)
    monkeypatch.setattr(pub, "update_docs", lambda: [])
    shutil.copytree(ROOT / "benchmarks" / name, tmp_path / name, ignore=shutil.ignore_patterns("records"))
    path = tmp_path / name / file
    rows = list(csv.reader(path.open(newline="")))
    edit(rows)
    with path.open("w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows(rows)
    if not digest:  # (sealed anew, as whoever edits a file can do: the row checks are what is left to see it)
        from pipeline_src.reporting.seals import seal_provenance

        prov = json.loads((tmp_path / name / "provenance.json").read_text())
        prov["runs"].pop("tables", None)
        (tmp_path / name / "provenance.json").write_text(json.dumps(seal_provenance(prov, tmp_path / name)))


def _cell(rows, line: int, column: str, value: str):
    rows[line - 1][rows[0].index(column)] = value


@pytest.mark.parametrize("edit, message", [
    (lambda r: _cell(r, 2, "nll", ""), r"summary.csv, line 2: nll is blank"),
    (lambda r: _cell(r, 2, "nll", "abc"), r"line 2: nll 'abc' is not a number"),
    (lambda r: _cell(r, 2, "nll", "inf"), r"line 2: nll 'inf' in a run that learned and gave no test word "
                                          r"probability 0"),
    (lambda r: _cell(r, 3, "seed", "x"), r"line 3: seed 'x' is not a whole number"),
    (lambda r: _cell(r, 3, "seed", "inf"), r"line 3: seed 'inf' is not a whole number"),
    (lambda r: _cell(r, 3, "seed", "9"), r"line 3: seed 9 is not one of the published run seeds \[1, 2, 3\]"),
    (lambda r: _cell(r, 3, "split", "Test"), r"line 3: split 'Test' is neither valid nor test"),
    (lambda r: r.append(list(r[1])), r"line \d+: a second row for dataset synth, method \S+, seed 1, split \w+"),
    (lambda r: r.__setitem__(4, r[4][:10]), r"line 5: 10 cells where the header has \d+"),
    (lambda r: _cell(r, 2, "method", "nosuch"), r"line 2: method 'nosuch' is not defined in the params it was"),
    (lambda r: _cell(r, 2, "dataset", "ptb2"), r"line 2: dataset 'ptb2' is not defined in the params it was"),
])
def test_restate_refuses_a_summary_row_that_cannot_be_a_run(tmp_path, monkeypatch, edit, message):
    """The probe: a blank, textual or infinite nll, a seed 'x', a duplicated or cut row, an unknown method went
    through restate with exit 0 and moved verdicts (a blank reference nll: every verdict 'no clear difference';
    a duplicate: 4 seeds); 'abc' gave a 27-line traceback. Refused with the file and line, nothing written."""
    from conftest import ROOT

    import pipeline_src.reporting.publish as pub
    from pipeline_src.config import load
    from pipeline_src.io.errors import ArtifactError

    _edited(tmp_path, monkeypatch, "default", "summary.csv", edit, digest=False)
    before = (tmp_path / "default" / "headline.csv").read_bytes()
    with pytest.raises(ArtifactError, match=message + r".*restore it \(`git checkout"):
        pub.restate(load(ROOT / "params.yaml"), ROOT / "params.yaml", "default", say=lambda s: None)
    assert (tmp_path / "default" / "headline.csv").read_bytes() == before


def test_a_learned_run_with_a_zero_probability_test_word_keeps_its_infinite_nll(tmp_path, monkeypatch):
    """An infinite test nll is a result, not damage, where the run gave a test word probability 0 (NEGLM's unseen
    words): the rows-only check reads it (the reviewer's case; stats.py calls such a method worse)."""
    from pipeline_src.reporting.published_rows import read_published

    def infinite(rows):
        _cell(rows, 2, "nll", "inf")
        _cell(rows, 2, "zero_prob_tokens", "3")

    _edited(tmp_path, monkeypatch, "default", "summary.csv", infinite, digest=False)
    assert read_published(tmp_path / "default", "summary.csv", "nll").nll.iloc[0] == math.inf


def test_a_published_table_edited_since_is_refused_by_its_digest(tmp_path, monkeypatch):
    """A change no row check sees (one test nll moved by 0.1, a config hash) is caught by the sha256 the
    publication recorded; restate then also records the digests of the tables it rewrote."""
    from conftest import ROOT

    import pipeline_src.reporting.publish as pub
    from pipeline_src.config import load
    from pipeline_src.io.digests import sha256_of
    from pipeline_src.io.errors import ArtifactError

    _edited(tmp_path, monkeypatch, "default", "summary.csv", lambda r: _cell(r, 2, "nll", str(float(
        r[1][r[0].index("nll")]) + 0.1)), digest=True)
    p = load(ROOT / "params.yaml")
    with pytest.raises(ArtifactError, match=r"summary.csv: not the file that was published .*edited since"):
        pub.restate(p, ROOT / "params.yaml", "default", say=lambda s: None)
    _edited(tmp_path / "clean", monkeypatch, "default", "summary.csv", lambda r: None, digest=True)
    p["statistics"]["confidence"] = 0.9
    pub.restate(p, ROOT / "params.yaml", "default", say=lambda s: None)
    prov = json.loads((tmp_path / "clean" / "default" / "provenance.json").read_text())
    assert prov["runs"]["tables"]["headline.csv"] == sha256_of(tmp_path / "clean" / "default" / "headline.csv")


@pytest.mark.parametrize("edit, message", [
    (lambda r: _cell(r, 2, "selected", "yes"), r"tuning.csv, line 2: selected 'yes' is neither True nor False"),
    (lambda r: [_cell(r, i, "selected", "True") for i in (2, 3)], r"a second selected trial for softmax at"),
    (lambda r: _cell(r, 2, "lr", "-1"), r"line 2: lr '-1(.0)?' is not a finite positive number"),
])
def test_freeze_settings_refuses_picks_it_cannot_read(tmp_path, monkeypatch, edit, message):
    """The probe: 'yes' (or '0') in selected made all 36 trials picks, every method got trial 0's rate; two
    picks took the last one silently; an lr of -1 was printed as a setting to run."""
    from pipeline_src.io.errors import ArtifactError
    from pipeline_src.records.budgets import frozen_settings

    _edited(tmp_path, monkeypatch, "wt2-budget", "tuning.csv", edit, digest=False)
    with pytest.raises(ArtifactError, match=message):
        frozen_settings("wt2-budget", "wikitext-2")


def test_restate_refuses_an_edited_anytime_table(tmp_path, monkeypatch):
    """The review: anytime.csv feeds the restated budget-axis verdicts and was read unchecked."""
    from conftest import ROOT

    import pipeline_src.reporting.publish as pub
    from pipeline_src.config import validate
    from pipeline_src.io.errors import ArtifactError

    _edited(tmp_path, monkeypatch, "budget-axis", "anytime.csv", lambda r: _cell(r, 2, "valid_nll", "1.0"),
            digest=True)
    published = validate(json.loads((tmp_path / "budget-axis" / "provenance.json").read_text())["params"])
    with pytest.raises(ArtifactError, match=r"anytime.csv: not the file that was published"):
        pub.restate(published, ROOT / "config" / "budget-axis.yaml", "budget-axis", say=lambda s: None)


def test_freeze_budgets_refuses_a_budgeted_seed_without_its_tokens(tmp_path, monkeypatch):
    """The probe: a blank tokens_reached dropped that seed from its method's mean (softmax 602,560 -> 609,280)."""
    from pipeline_src.io.errors import ConfigError
    from pipeline_src.records.budgets import frozen_budgets, frozen_settings

    def blank_first_test_row(rows):
        line = next(i for i, r in enumerate(rows[1:], start=2) if r[rows[0].index("split")] == "test")
        _cell(rows, line, "tokens_reached", "")

    _edited(tmp_path, monkeypatch, "wt2-budget", "summary.csv", blank_first_test_row, digest=False)
    says = r"summary.csv: softmax seed \d at wikitext-2 ran under a time budget but has no tokens_reached"
    with pytest.raises(ConfigError, match=says):
        frozen_budgets("wt2-budget")
    with pytest.raises(ConfigError, match=says):  # not a settings block without its budgets (the review's case)
        frozen_settings("wt2-budget", "wikitext-2")


def test_references_published_beside_unsummarised_runs_claim_no_seeds(default_params, tmp_path, monkeypatch):
    """The probe: a results_dir with 99 restored run records and a references folder but no summary.csv was
    published as a references-only publication whose provenance claimed the seeds [1, 2, 3]. The references may be
    published while a sweep runs (topics-kn): they are, saying so, and claim no seed."""
    import pipeline_src.reporting.publish as pub
    from pipeline_src.config import validate

    monkeypatch.setattr(pub, "BENCHMARKS", tmp_path / "benchmarks")
    monkeypatch.setattr(pub, "update_docs", lambda: [])
    p = validate(dict(tiny_params(default_params, tmp_path), references={}))  # no reference to fit here
    (Path(p["results_dir"]) / "references" / "tiny").mkdir(parents=True)
    run = paths.metrics_path(p, "tiny", "softmax", 1)
    run.parent.mkdir(parents=True)
    run.write_text("{}")
    said = []
    out = pub.publish(p, tmp_path / "mine.yaml", "refs", say=said.append)
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["seeds"] == [] and prov["runs"] is None and prov["files"] == ["references.csv"]
    assert said[0] == (f"note: {p['results_dir']} holds 1 run record(s) but no summary.csv: publishing its references "
                       f"alone (run `summarize` to publish the runs)")


def test_a_publication_whose_params_are_not_a_mapping_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    """The probe: `params: "x"` in provenance.json gave an AttributeError (restate) or a ValueError (the freezes)
    from deep inside."""
    _edited(tmp_path, monkeypatch, "wt2-budget", "summary.csv", lambda r: None, digest=True)
    from pipeline_src.reporting.seals import seal_provenance

    prov_path = tmp_path / "wt2-budget" / "provenance.json"
    prov_path.write_text(json.dumps(seal_provenance(dict(json.loads(prov_path.read_text()), params="x"),
                                                    tmp_path / "wt2-budget")))
    for argv in (["freeze-budgets", "--name", "wt2-budget"],
                 ["freeze-settings", "--name", "wt2-budget", "--dataset", "wikitext-2"]):
        assert "provenance.json: expected a mapping of params, found str" in _refused(capsys, *argv)
    from conftest import ROOT

    import pipeline_src.reporting.publish as pub
    from pipeline_src.config import load
    from pipeline_src.io.errors import ConfigError

    with pytest.raises(ConfigError, match=r"provenance.json: expected a mapping of params, found str$"):
        pub.restate(load(ROOT / "config" / "wt2-budget.yaml"), ROOT / "params.yaml", "wt2-budget", say=print)


def test_restore_says_why_it_restored_nothing(default_params, tmp_path, capsys):
    """The probe: `restore` printed 'restored 0 records' (a stash of datasets the params file does not run) or
    'restored 1 records' (99 final-run files skipped under keep_models: true) and nothing else."""
    import shutil

    from conftest import ROOT

    from pipeline_src.records.stash import not_asked_for

    p = tiny_params(default_params, tmp_path)
    cfg = write_params(p, tmp_path / "p.yaml")
    assert main(["restore", "--name", "default", "--config", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("restored 0 records") and out.splitlines()[1] == (
        "  not restored: the stash's records of synth, zipf-5k: this params file runs no such dataset (run.datasets, "
        "run.extra.datasets); restore with the params file that made the stash")
    stash = tmp_path / "stash" / "records"
    stash.mkdir(parents=True)
    shutil.copy(ROOT / "benchmarks" / "default" / "records" / "records.json", stash / "records.json")
    manifest = json.loads((stash / "records.json").read_text())
    manifest["files"] = {"runs/tiny/softmax/seed1/metrics.json": "0", "references/tiny/kn.json": "0"}
    (stash / "records.json").write_text(json.dumps(manifest))
    assert not_asked_for(dict(p, keep_models=True), stash.parent) == [
        "1 final-run files: keep_models is true here, and a run restored without its model would be retrained "
        "(restore under keep_models: false)"]
    assert not_asked_for(dict(p, keep_models=False), stash.parent) == []
