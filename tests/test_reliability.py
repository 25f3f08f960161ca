"""Nothing stale, nothing silent: each case a user hit, re-run, gives one clear line (or a correct
rebuild) and leaves nothing behind that a rerun would trust."""
import copy
import json

import pytest
import torch
from conftest import tiny_params, write_params

from pipeline_src.cli import main


def _cli(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def _one_line_error(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def proj(default_params, tmp_path):
    p = tiny_params(default_params, tmp_path)
    return p, write_params(p, tmp_path / "params.yaml")


def _prepared(capsys, cfg):
    for step in ("fetch", "prepare"):
        assert _cli(capsys, step, "--config", str(cfg), "--dataset", "tiny")[0] == 0


def test_local_corpus_edited_after_fetch_is_refused_until_refetched(capsys, default_params, tmp_path):
    p = tiny_params(default_params, tmp_path)
    files = {}
    for split, n in (("train", 400), ("valid", 60), ("test", 60)):
        f = tmp_path / f"my.{split}.txt"
        f.write_text("\n".join("a b c d e f g" for _ in range(n)) + "\n")
        files[split] = str(f)
    p["datasets"]["tiny"]["corpus"] = {"type": "local", **files}
    cfg = write_params(p, tmp_path / "params.yaml")
    _prepared(capsys, cfg)
    with open(files["train"], "a") as f:
        f.write("a new line\n")
    rc, _, err = _cli(capsys, "prepare", "--config", str(cfg), "--dataset", "tiny")
    assert rc == 2 and "my.train.txt changed since it was fetched" in _one_line_error(err) and "fetch" in err
    rc, _, err = _cli(capsys, "train", "--config", str(cfg), "--dataset", "tiny", "--method", "softmax", "--seed", "0")
    assert rc == 2 and "changed since it was fetched" in err
    _prepared(capsys, cfg)  # refetching makes it current again
    raw = tmp_path / "data" / "raw" / "tiny"
    stamp = (raw / "train.txt").stat().st_mtime_ns
    rc, out, _ = _cli(capsys, "fetch", "--config", str(cfg), "--dataset", "tiny")
    assert rc == 0 and "is current" in out and (raw / "train.txt").stat().st_mtime_ns == stamp  # left alone
    with open(files["valid"], "a") as f:
        f.write("g f e\n")
    rc, out, _ = _cli(capsys, "fetch", "--config", str(cfg), "--dataset", "tiny")
    assert rc == 0 and "refetching" in out and "my.valid.txt changed" in out
    assert (raw / "valid.txt").read_text().endswith("g f e\n")


def test_dvc_reruns_downstream_stages_only_when_a_local_corpus_changed():
    """DVC cannot list a local corpus's files as deps (their paths are params), so its fetch stage
    always runs, keeps its output (persist) and rewrites it only when the bytes changed."""
    import yaml
    from conftest import ROOT

    fetch = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["fetch"]["do"]
    assert fetch["always_changed"] is True
    assert fetch["outs"] == [{"${data_dir}/raw/${item}": {"persist": True}}]


def test_disk_full_is_one_line_and_leaves_no_partial_output(capsys, proj, monkeypatch):
    import errno
    import os

    import numpy

    p, cfg = proj
    assert _cli(capsys, "fetch", "--config", str(cfg), "--dataset", "tiny")[0] == 0
    real_save = numpy.save

    def full(file, *args, **kwargs):  # the device fills up while the encoded splits are written
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(file))

    monkeypatch.setattr(numpy, "save", full)
    rc, _, err = _cli(capsys, "prepare", "--config", str(cfg), "--dataset", "tiny")
    line = _one_line_error(err)
    assert rc == 2 and "No space left on device" in line and "free some space" in line and ".npy" in line
    monkeypatch.setattr(numpy, "save", real_save)
    data = cfg.parent / "data" / "prepared"
    assert not (data / "tiny").exists() and not any(data.glob(".tiny*"))  # no half-written or hidden temporary


def test_data_prepared_under_another_tokenizer_config_is_refused(capsys, proj):
    p, cfg = proj
    _prepared(capsys, cfg)
    p["datasets"]["tiny"]["tokenizer"] = {"type": "word", "max_vocab": 10}
    write_params(p, cfg)
    rc, _, err = _cli(capsys, "train", "--config", str(cfg), "--dataset", "tiny", "--method", "softmax", "--seed", "0")
    line = _one_line_error(err)
    assert rc == 2 and "prepared under another config" in line and "prepare --dataset tiny" in line


def test_model_from_another_config_or_corpus_is_refused_at_evaluate(capsys, proj):
    p, cfg = proj
    _prepared(capsys, cfg)
    run = ["--config", str(cfg), "--dataset", "tiny", "--method", "softmax", "--seed", "0"]
    assert _cli(capsys, "train", *run)[0] == 0
    p["methods"]["softmax"]["chunk_size"] = 7  # another run config
    write_params(p, cfg)
    rc, _, err = _cli(capsys, "evaluate", *run)
    assert rc == 2 and "trained under another config" in _one_line_error(err)
    # another synthetic corpus (vocabulary size changes too): refused before any state dict is loaded
    p["methods"]["softmax"]["chunk_size"] = 1024
    p["datasets"]["tiny"]["corpus"].update(vocab_size=40, seed=9)
    write_params(p, cfg)
    rc, _, err = _cli(capsys, "evaluate", *run)
    assert rc == 2 and "fetched under another config" in _one_line_error(err) and "size mismatch" not in err


def test_train_before_prepare_says_what_to_run(capsys, proj):
    _, cfg = proj
    assert _cli(capsys, "fetch", "--config", str(cfg), "--dataset", "tiny")[0] == 0
    rc, _, err = _cli(capsys, "train", "--config", str(cfg), "--dataset", "tiny", "--method", "softmax", "--seed", "0")
    assert rc == 2 and (f"meta.json is missing: run `python -m pipeline_src prepare --dataset tiny --config {cfg}`"
                        in _one_line_error(err))  # the hint names the params file (third probe)


@pytest.mark.parametrize("case", ["sgd-nan", "adam-worse-than-uniform"])
def test_a_diverged_final_run_is_a_clear_error_and_leaves_no_checkpoint(capsys, proj, tmp_path, case):
    p, cfg = proj
    tr = p["datasets"]["tiny"]["training"]
    if case == "sgd-nan":
        tr.update(optimizer="sgd", lr=1e30, clip=None)
    else:
        tr.update(optimizer="adam", lr=20.0, clip=None)
    write_params(p, cfg)
    _prepared(capsys, cfg)
    run = ["train", "--config", str(cfg), "--dataset", "tiny", "--method", "softmax", "--seed", "0"]
    for _ in range(2):  # a rerun fails the same clear way: nothing left behind resumes into the blow-up
        rc, _, err = _cli(capsys, *run)
        line = _one_line_error(err)
        assert rc == 3 and "diverged at epoch 1" in line and "lr" in line
        out = tmp_path / "results/runs/tiny/softmax/seed0"
        assert not any(out.glob("checkpoint*")) and not (out / "model.pt").exists() and not (out / "train.json").exists()
    if case == "sgd-nan":  # the loss turns non-finite, or the weights blow up so far that exp(nll) overflows
        assert "non-finite training loss" in line or "validation perplexity inf" in line
    else:
        assert "worse than uniform" in line and "|V| = 31" in line


def test_a_divergence_names_the_method_s_own_rate_option(capsys, proj, tmp_path):
    """The third probe's weak case: PLIF with lr_scale 1e9 diverged with "lower training.lr or set
    training.clip" alone, although the rate that blew up was lr_scale x lr."""
    p, cfg = proj
    p["methods"]["plif"] = {**p["methods"]["plif"], "lr_scale": 3}
    p["run"]["methods"] = ["plif"]
    p["datasets"]["tiny"]["training"].update(optimizer="sgd", lr=1e30, clip=None)  # a sure blow-up
    write_params(p, cfg)
    _prepared(capsys, cfg)
    rc, _, err = _cli(capsys, "train", "--config", str(cfg), "--dataset", "tiny", "--method", "plif", "--seed", "0")
    line = _one_line_error(err)
    assert rc == 3 and "diverged at epoch" in line, err
    assert line.endswith("lower training.lr or set training.clip, or lower methods.plif.lr_scale (3 now)"), line


def test_truncated_checkpoint_is_set_aside_and_training_resumes_from_the_previous_one(capsys, proj, tmp_path):
    from pipeline_src.config import validate
    from pipeline_src.config.runspec import final_config
    from pipeline_src.io import paths
    from pipeline_src.training.loop import train

    p, cfg = proj
    _prepared(capsys, cfg)
    p = validate(copy.deepcopy(p))
    rc = final_config(p, "tiny", "softmax", 0)
    rc["training"]["checkpoint_every_steps"] = 3
    out = tmp_path / "cut"
    prep = paths.prepared_dir(p, "tiny")
    train(rc, prep, out, torch.device("cpu"), stop_after_steps=7)
    ck = out / "checkpoint.pt"
    assert (out / "checkpoint.prev.pt").exists()  # one previous generation kept
    ck.write_bytes(ck.read_bytes()[:1000])  # a node died mid-copy
    summary = train(rc, prep, out, torch.device("cpu"))
    err = capsys.readouterr().err
    assert f"cannot read {ck}" in err and "set aside as" in err and "resumed from" in err and "checkpoint.prev.pt" in err
    assert summary["status"] == "ok" and (out / "checkpoint.pt.corrupt").exists() and not ck.exists()


def test_truncated_model_at_evaluate_is_one_line_naming_the_file(capsys, proj, tmp_path):
    _, cfg = proj
    _prepared(capsys, cfg)
    run = ["--config", str(cfg), "--dataset", "tiny", "--method", "softmax", "--seed", "0"]
    assert _cli(capsys, "train", *run)[0] == 0
    model = tmp_path / "results/runs/tiny/softmax/seed0/model.pt"
    model.write_bytes(model.read_bytes()[:500])
    rc, _, err = _cli(capsys, "evaluate", *run)
    line = _one_line_error(err)
    assert rc == 2 and f"cannot read {model}" in line and "rerun `python -m pipeline_src train" in line


def _local(p, tmp_path, texts):
    files = {}
    for split, text in texts.items():
        f = tmp_path / f"{split}.txt"
        f.write_bytes(text) if isinstance(text, bytes) else f.write_text(text)
        files[split] = str(f)
    p["datasets"]["tiny"]["corpus"] = {"type": "local", **files}


def test_corpus_content_errors_name_file_line_and_byte(capsys, default_params, tmp_path):
    p = tiny_params(default_params, tmp_path)
    good = "the cat sat on the mat\n" * 50
    _local(p, tmp_path, {"train": good.encode() + b"caf\xe9 au lait\n", "valid": good, "test": good})
    cfg = write_params(p, tmp_path / "params.yaml")
    rc, _, err = _cli(capsys, "fetch", "--config", str(cfg), "--dataset", "tiny")
    line = _one_line_error(err)  # the user's own file, not the copy fetch would have made of it
    assert rc == 2 and f"{tmp_path / 'train.txt'}: line 51, byte 4" in line and "0xe9" in line and "not UTF-8" in line
    assert not (tmp_path / "data").exists()  # nothing copied, nothing half-written


def test_empty_split_is_an_error_and_a_high_oov_rate_a_warning(capsys, default_params, tmp_path):
    p = tiny_params(default_params, tmp_path)
    _local(p, tmp_path, {"train": "  \n\n", "valid": "a b\n", "test": "a b\n"})
    cfg = write_params(p, tmp_path / "params.yaml")
    assert _cli(capsys, "fetch", "--config", str(cfg), "--dataset", "tiny")[0] == 0
    rc, _, err = _cli(capsys, "prepare", "--config", str(cfg), "--dataset", "tiny")
    assert rc == 2 and "the train split has no tokens" in _one_line_error(err)
    _local(p, tmp_path, {"train": "a b c\n" * 30, "valid": "a b x y z\n" * 20, "test": "a b c\n" * 27})
    cfg = write_params(p, tmp_path / "params.yaml")
    assert _cli(capsys, "fetch", "--config", str(cfg), "--dataset", "tiny")[0] == 0
    rc, _, err = _cli(capsys, "prepare", "--config", str(cfg), "--dataset", "tiny")
    meta = json.loads((tmp_path / "data/prepared/tiny/meta.json").read_text())
    assert rc == 0 and "warning: valid: 60.0% of its tokens are out of the vocabulary" in err
    assert meta["splits"]["valid"]["oov_rate"] == pytest.approx(0.6) and len(meta["warnings"]) == 1


def test_sentencepiece_vocab_size_too_large_names_the_key(capsys, default_params, tmp_path):
    p = tiny_params(default_params, tmp_path)
    _local(p, tmp_path, {s: f"ab ba {s}\n" * 20 for s in ("train", "valid", "test")})  # splits of their own text
    p["datasets"]["tiny"]["tokenizer"] = {"type": "sentencepiece", "vocab_size": 5000}
    cfg = write_params(p, tmp_path / "params.yaml")
    assert _cli(capsys, "fetch", "--config", str(cfg), "--dataset", "tiny")[0] == 0
    rc, _, err = _cli(capsys, "prepare", "--config", str(cfg), "--dataset", "tiny")
    assert rc == 2 and "key 'tokenizer.vocab_size': 5000" in _one_line_error(err)


def test_local_path_that_is_a_directory_and_duplicate_yaml_keys(capsys, default_params, tmp_path):
    p = tiny_params(default_params, tmp_path)
    p["datasets"]["tiny"]["corpus"] = {"type": "local", "train": str(tmp_path), "valid": "v", "test": "t"}
    cfg = write_params(p, tmp_path / "params.yaml")
    rc, _, err = _cli(capsys, "fetch", "--config", str(cfg), "--dataset", "tiny")
    assert rc == 2 and f"corpus.train: {tmp_path} is a directory" in _one_line_error(err)
    cfg.write_text(cfg.read_text() + "seed: 5\n")
    rc, _, err = _cli(capsys, "check-config", "--config", str(cfg))
    assert rc == 2 and "key 'seed' appears twice" in err


def test_mirror_missing_one_split_names_it(capsys, default_params, tmp_path):
    from pipeline_src.data.corpora import CorpusError, fetch

    mirror = tmp_path / "mirror" / "ptb"
    mirror.mkdir(parents=True)
    for name in ("ptb.train.txt", "ptb.valid.txt"):
        (mirror / name).write_text("x\n")
    with pytest.raises(CorpusError, match=r"has ptb.train.txt, ptb.valid.txt but is missing ptb.test.txt"):
        fetch("ptb", tmp_path / "out", tmp_path / "mirror")


def test_a_partial_summary_lists_the_missing_runs_and_a_full_one_refuses(capsys, default_params, tmp_path):
    p = tiny_params(default_params, tmp_path)
    p["run"]["methods"] = ["softmax", "moc"]
    p["methods"]["moc"] = {"type": "moc", "components": 2}
    cfg = write_params(p, tmp_path / "params.yaml")
    _prepared(capsys, cfg)
    for step in ("train", "evaluate"):
        assert _cli(capsys, step, "--config", str(cfg), "--dataset", "tiny", "--method", "softmax", "--seed", "0")[0] == 0
    rc, _, err = _cli(capsys, "summarize", "--config", str(cfg))
    assert rc == 2 and "moc/seed0/metrics.json is missing" in _one_line_error(err) and "--partial" in err
    rc, out, _ = _cli(capsys, "summarize", "--config", str(cfg), "--partial")
    info = json.loads((tmp_path / "results" / "summary.json").read_text())
    assert rc == 0 and info["partial"] and info["runs"] == 1 and info["of"] == 2
    assert info["missing"][0] == "tiny/moc/seed0" and "summarised 1 of 2 runs" in out
    assert info["time_budget_machine"] is None  # epochs, no time budget: no machine decided what a run bought
    import pandas as pd

    assert list(pd.read_csv(tmp_path / "results" / "headline.csv").method) == ["softmax"]
    import pipeline_src.reporting.publish as pub
    from pipeline_src.config import load
    from pipeline_src.reporting import tables

    pub_dir = tmp_path / "benchmarks"
    monkey = pytest.MonkeyPatch()
    monkey.setattr(pub, "BENCHMARKS", pub_dir)
    monkey.setattr(pub, "update_docs", lambda: [])
    try:
        out = pub.publish(load(cfg), cfg, "partial")
    finally:
        monkey.undo()
    table = tables.provenance_markdown(json.loads((out / "provenance.json").read_text()))
    assert "| runs | 1 of 2; not yet run: tiny/moc/seed0, matrix/" in table and "summarize --partial" in table
    many = [f"{ds}/m{i}/seed1" for ds in ("z1m", "z10k") for i in range(5)] + ["tuning/z1m/nce", "tuning/z1m/hs"]
    assert tables._missing(many) == "z1m (5), z10k (5), tuning/z1m (2); 12 in all"  # many: counted per group
