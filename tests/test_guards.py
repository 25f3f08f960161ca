"""Guards that hold by content, not by name (issue 77's bad cases): no step writes or deletes a committed file
in any checkout, a publication is replaced only by the same config, every published number is read through its
seal (and, committed, as git holds it), a record without a seal is refused, a head that fails the conformance kit
is never compared, a plugin is identified by its package's source, and a failed final write loses no training.
Each test failed on the code before."""
import copy
import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT, tiny_params, write_params

from pipeline_src.cli import main
from pipeline_src.io import atomic
from pipeline_src.io.errors import ArtifactError, ConfigError, OutputError


def _git_repo(where, files: dict) -> None:
    """A checkout at ``where`` with ``files`` (path -> text) committed."""
    where.mkdir(parents=True, exist_ok=True)
    for rel, text in files.items():
        (where / rel).parent.mkdir(parents=True, exist_ok=True)
        (where / rel).write_text(text)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "x"]):
        subprocess.run(["git", *cmd], cwd=where, check=True, env=env, capture_output=True)


def _refused(capsys, *argv) -> str:
    rc = main(list(argv))
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, (rc, err)
    return lines[0]


@pytest.fixture
def proj(default_params, tmp_path):
    p = tiny_params(default_params, tmp_path / "work")
    (tmp_path / "work").mkdir(exist_ok=True)
    return p, write_params(p, tmp_path / "work" / "params.yaml")


def test_resolve_never_overwrites_a_committed_file_whatever_it_is_called(capsys, proj, tmp_path):
    """Bad case 1: `resolve --out config/paper/_awd-lstm.yaml` overwrote a committed base config (it is a params
    file, so the name check let it through). The checkout's params.yaml (the DVC step) stays writable."""
    _, cfg = proj
    other = tmp_path / "clone"
    base = "extends: null\nseed: 3\n"
    _git_repo(other, {"config/paper/_base.yaml": base, "params.yaml": "seed: 1\n"})
    line = _refused(capsys, "resolve", "--config", str(cfg), "--out", str(other / "config/paper/_base.yaml"))
    assert "which git tracks in" in line and "_base.yaml" in line
    assert (other / "config/paper/_base.yaml").read_text() == base
    # the fourth probe's bad case: an uncommitted edit of params.yaml was overwritten without a word
    (other / "params.yaml").write_text("seed: 1\n# my precious uncommitted note\n")
    line = _refused(capsys, "resolve", "--config", str(cfg), "--out", str(other / "params.yaml"))
    assert "holds uncommitted changes" in line and "git checkout HEAD -- " in line
    assert "precious" in (other / "params.yaml").read_text()
    subprocess.run(["git", "add", "params.yaml"], cwd=other, check=True)  # staged: `checkout --` would keep it
    subprocess.run(["git", "checkout", "HEAD", "--", "params.yaml"], cwd=other, check=True)  # as the hint says
    assert main(["resolve", "--config", str(cfg), "--out", str(other / "params.yaml")]) == 0
    assert "resolve" in (other / "params.yaml").read_text()
    # a review's bad cases: its own earlier output is no edit to keep (the same command twice), and
    # --overwrite-config lays out the uncommitted edit it reads (what check-config's note suggests)
    assert main(["resolve", "--config", str(cfg), "--out", str(other / "params.yaml")]) == 0
    (other / "base.yaml").write_text((other / "params.yaml").read_text())
    (other / "params.yaml").write_text("extends: base.yaml\nseed: 7\n")
    assert main(["resolve", "--config", str(other / "params.yaml"), "--out", str(other / "params.yaml"),
                 "--overwrite-config"]) == 0
    text = (other / "params.yaml").read_text()
    assert "extends" not in text.split("\n", 1)[1] and "seed: 7" in text
    # but a resolved params.yaml, committed and then edited by hand, is an edit like any other (a second review)
    subprocess.run(["git", "add", "params.yaml"], cwd=other, check=True)
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "resolved"], cwd=other,
                   check=True)
    (other / "params.yaml").write_text(text.replace("seed: 7", "seed: 12345"))
    line = _refused(capsys, "resolve", "--config", str(cfg), "--out", str(other / "params.yaml"))
    assert "holds uncommitted changes" in line and "seed: 12345" in (other / "params.yaml").read_text()
    # any writer: a file git tracks in any checkout is not an output
    with pytest.raises(OutputError, match="which git tracks"):
        atomic.write_json(other / "config/paper/_base.yaml", {"a": 1})
    assert (other / "config/paper/_base.yaml").read_text() == base


def test_a_results_dir_in_another_checkout_s_committed_folder_is_refused(capsys, proj, tmp_path):
    """Bad case 12: results_dir set to another checkout's benchmarks/default; `bench --quick` overwrote its
    committed bench.csv. Now check-config refuses it, and the writer refuses the file if it were reached."""
    p, _ = proj
    other = tmp_path / "clone"
    _git_repo(other, {"benchmarks/default/bench.csv": "vocab\n50\n", "results/README.md": "x\n"})
    bad = write_params({**p, "results_dir": str(other / "benchmarks" / "default")}, tmp_path / "bad.yaml")
    line = _refused(capsys, "check-config", "--config", str(bad))
    assert f"checkout at {other}" in line and "benchmarks/" in line and "results_dir" in line
    dotgit = write_params({**p, "results_dir": str(ROOT / ".git")}, tmp_path / "git.yaml")
    assert "inside the repository's .git/" in _refused(capsys, "check-config", "--config", str(dotgit))
    ok = write_params({**p, "results_dir": str(other / "results")}, tmp_path / "ok.yaml")
    assert main(["check-config", "--config", str(ok)]) == 0
    (tmp_path / "a-file").write_text("x\n")  # a weak case of the second probe: a file passed check-config
    as_file = write_params({**p, "results_dir": str(tmp_path / "a-file")}, tmp_path / "file.yaml")
    assert "is a file, not a folder" in _refused(capsys, "check-config", "--config", str(as_file))


def test_a_link_into_a_committed_folder_is_not_written_through(tmp_path):
    """A weak case of the second probe: a report's output folder linked into docs/ wrote a new page there (no
    tracked file was touched, so the name check let it through). A link that leads into a committed folder is
    refused in one line; a file written there by name, or through a link to a folder outside, is not."""
    other = tmp_path / "clone"
    _git_repo(other, {"docs/index.md": "x\n", "results/README.md": "r\n", "config/base.yaml": "seed: 1\n"})
    (other / "results" / "reports").symlink_to(other / "docs", target_is_directory=True)
    with pytest.raises(OutputError, match=r"symbolic link leads into .*'s docs/, whose files git tracks"):
        atomic.write_text(other / "results" / "reports" / "new.html", "<p>page</p>")
    assert sorted(p.name for p in (other / "docs").iterdir()) == ["index.md"]  # nothing written, no temporary left
    (other / "results" / "link-up").symlink_to(other, target_is_directory=True)  # a link to the checkout's root
    with pytest.raises(OutputError, match="symbolic link leads into"):
        atomic.write_text(other / "results" / "link-up" / "config" / "mine.yaml", "seed: 2\n")
    atomic.write_text(other / "config" / "mine.yaml", "seed: 2\n")  # by name, as `resolve --out` writes
    (tmp_path / "scratch").mkdir()
    (other / "results" / "scratch").symlink_to(tmp_path / "scratch", target_is_directory=True)
    atomic.write_text(other / "results" / "scratch" / "page.html", "<p>page</p>")  # a link out of the checkout
    assert (tmp_path / "scratch" / "page.html").read_text() == "<p>page</p>"


def _bench_results(p):
    import torch

    from pipeline_src.config import validate
    from pipeline_src.cost.bench import run_bench

    p = validate(copy.deepcopy(p))
    run_bench(p, torch.device("cpu"))
    return p


def test_a_publication_is_replaced_only_by_the_same_config_whatever_the_file_is_called(default_params, tmp_path,
                                                                                   monkeypatch):
    """Bad case 2: `resolve --config config/smoke.yaml --out params.yaml`, then `publish --name default`, replaced the
    default publication (it was made from 'params.yaml' too). Now the config's content decides."""
    import pipeline_src.reporting.publish as pub

    monkeypatch.setattr(pub, "BENCHMARKS", tmp_path / "benchmarks")
    monkeypatch.setattr(pub, "update_docs", lambda: [])
    p = _bench_results(tiny_params(default_params, tmp_path))
    pub.publish(p, tmp_path / "params.yaml", "default", say=lambda s: None)
    pub.publish(p, tmp_path / "copy-of-it.yaml", "default", say=lambda s: None)  # same content, other name: fine
    other = copy.deepcopy(p)
    other["seed"] = p["seed"] + 1
    with pytest.raises(OutputError, match=r"differs from .*params.yaml's at key 'seed'.*add --replace"):
        pub.publish(other, tmp_path / "params.yaml", "default", say=lambda s: None)
    pub.publish(other, tmp_path / "params.yaml", "default", say=lambda s: None, replace=True)
    assert json.loads((tmp_path / "benchmarks/default/provenance.json").read_text())["params"]["seed"] == p["seed"] + 1


def test_stash_into_a_publication_of_another_config_is_refused_and_its_records_stay(default_params, tmp_path,
                                                                                    monkeypatch, capsys):
    """Bad case 3: the same step, then `stash --name default`, deleted the 173 committed files of
    benchmarks/default/records (its params file was called params.yaml too). A stash from before params were kept in
    its manifest is judged by its publication's params."""
    import pipeline_src.reporting.publish as pub

    monkeypatch.setattr(pub, "BENCHMARKS", tmp_path / "benchmarks")
    shutil.copytree(ROOT / "benchmarks" / "default", tmp_path / "benchmarks" / "default")
    records = sorted(p for p in (tmp_path / "benchmarks/default/records").rglob("*") if p.is_file())
    assert len(records) > 100
    p = tiny_params(default_params, tmp_path)
    cfg = write_params(p, tmp_path / "params.yaml")
    line = _refused(capsys, "stash", "--config", str(cfg), "--name", "default")
    assert "whose config differs from" in line and "--replace" in line
    assert sorted(p for p in (tmp_path / "benchmarks/default/records").rglob("*") if p.is_file()) == records


def _sealed_publication(where, name="pub"):
    from pipeline_src.io.atomic import write_json
    from pipeline_src.reporting.seals import seal_provenance

    pub = where / "benchmarks" / name
    pub.mkdir(parents=True)
    (pub / "bench.csv").write_text("vocab,method,train_ms\n50,softmax,35.33\n")
    write_json(pub / "provenance.json", seal_provenance({"name": name, "files": ["bench.csv"], "params": {}}, pub))
    return pub


def test_every_published_file_is_read_through_its_seal(tmp_path):
    """Bad cases 5-7: one digit edited in a publication's bench.csv (35.33 -> 95.33) or headline.csv was shown by
    `report --name` and reached the README and docs through `publish` of any other name."""
    from pipeline_src.reporting.seals import check_publication

    pub = _sealed_publication(tmp_path)
    check_publication(pub)
    (pub / "bench.csv").write_text("vocab,method,train_ms\n50,softmax,95.33\n")
    with pytest.raises(ArtifactError, match=r"bench.csv: not the file that was published .*edited since"):
        check_publication(pub)
    # a publication from before seals: held to the legacy list, by its name; under another name it has no seal
    shutil.copytree(ROOT / "benchmarks" / "samplers-first-look", tmp_path / "samplers-first-look")
    check_publication(tmp_path / "samplers-first-look")
    bench = tmp_path / "samplers-first-look" / "bench.csv"
    bench.write_text(bench.read_text().replace("1", "2", 1))
    with pytest.raises(ArtifactError, match=r"bench.csv: not the file that was published .*legacy-digests.json"):
        check_publication(tmp_path / "samplers-first-look")
    shutil.copytree(ROOT / "benchmarks" / "samplers-first-look", tmp_path / "my-copy")
    with pytest.raises(ArtifactError, match=r"carries no seal"):
        check_publication(tmp_path / "my-copy")
    (pub / "bench.csv").unlink()  # the probe: a deleted table was not seen (the report crashed in its notebook)
    with pytest.raises(ArtifactError, match=r"bench.csv: listed by .*provenance.json but missing"):
        check_publication(pub)


def test_a_committed_publication_edited_with_its_seal_is_refused_unless_the_reader_says_so(tmp_path, monkeypatch):
    """A seal is the file's own digest: whoever edits the file can rewrite it. A committed publication is also held
    to git's HEAD (with an explicit override)."""
    from pipeline_src.io.atomic import write_json
    from pipeline_src.io.tracked import allow_tracked
    from pipeline_src.reporting.seals import check_publication, seal_provenance

    pub = _sealed_publication(tmp_path)
    _git_repo(tmp_path, {})
    (pub / "bench.csv").write_text("vocab,method,train_ms\n50,softmax,95.33\n")
    with allow_tracked(pub):  # the editor rewrites the seal too
        prov = json.loads((pub / "provenance.json").read_text())
        write_json(pub / "provenance.json", seal_provenance(prov, pub))
    with pytest.raises(ArtifactError, match=r"bench.csv: differs from what git holds at HEAD.*LMBENCH_ACCEPT_UNCOMMITTED"):
        check_publication(pub)
    monkeypatch.setenv("LMBENCH_ACCEPT_UNCOMMITTED", "1")
    check_publication(pub)


def test_the_readme_blocks_are_drawn_only_from_sealed_publications(tmp_path, monkeypatch):
    """Bad case 7 through the renderer: a block naming a publication whose file was edited is refused."""
    from pipeline_src.reporting import seals, tables

    shutil.copytree(ROOT / "benchmarks" / "default", tmp_path / "benchmarks" / "default",
                    ignore=shutil.ignore_patterns("records"))
    monkeypatch.setattr(tables, "REPOSITORY", tmp_path)
    assert "plif" in tables.render_table("benchmarks/default/headline.csv")
    head = tmp_path / "benchmarks/default/headline.csv"
    head.write_text(head.read_text().replace("plif,", "plif,", 1).replace("4.5", "4.4", 1))
    seals._CHECKED.clear()
    with pytest.raises(ArtifactError, match="headline.csv: not the file that was published"):
        tables.render_table("benchmarks/default/headline.csv")
    with pytest.raises(ArtifactError, match="headline.csv: not the file that was published"):
        tables.render_table("glance:default")


def test_a_record_without_its_seal_is_refused(tmp_path):
    """Bad case 8: a trial's train.json with its content_sha256 line deleted and its valid nll set to 1.0 was
    picked by `select` and published as valid ppl 2.72. Committed records from before seals are sealed by
    `restore` once they match their stash's manifest; one without a seal here was written by hand."""
    from pipeline_src.evaluation.run import train_record
    from pipeline_src.io.digests import DigestError, seal

    path = tmp_path / "train.json"
    record = {"config_hash": "x", "config": {"seed": 1}, "best_valid_nll": 1.0}
    path.write_text(json.dumps(record))
    with pytest.raises(DigestError, match="carries no content digest"):
        train_record(path, {"seed": 1}, "python -m pipeline_src train ...")
    path.write_text(json.dumps(seal(record)))
    with pytest.raises(ConfigError):  # sealed, it is read (and then held to its model's config)
        train_record(path, {"seed": 2, "other": 1}, "python -m pipeline_src train ...")


def test_tuning_refuses_a_trial_without_its_seal():
    import inspect

    from pipeline_src.config import tuning

    src = inspect.getsource(tuning)
    assert "required=False" not in src  # both readers (the trials, the selection) require the seal


def test_compare_admits_only_a_head_that_passes_the_conformance_kit(tmp_path, monkeypatch):
    """Bad case 9: `compare` crowned an unnormalised head (test ppl 0.0, place 1, 'better') that check-head fails."""
    from test_plugins import BROKEN

    from pipeline_src.tools import _admit

    (tmp_path / "mine.py").write_text(BROKEN)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"compare --head mine.py:Unnormalised: fails check-head's property "
                                          r"'normalised'.*and \d more.*check-head mine.py"):
        _admit({"type": "mine.py:Unnormalised"}, "mine.py:Unnormalised")
    _admit({"type": "softmax"}, "softmax")


def test_a_plugin_is_identified_by_its_package_s_source(tmp_path, monkeypatch):
    """Bad case 11: a plugin whose class imports a value from a sibling module: editing that module reran
    nothing (only the class's own file was hashed)."""
    from pipeline_src.heads.base import plugin_class
    from pipeline_src.heads.plugins import source_sha256

    src = (ROOT / "tests/data/plugin_head.py").read_text()
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "consts.py").write_text("SCALE = 1.0\n")
    (pkg / "heads.py").write_text("from .consts import SCALE\n" + src)
    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / "consts.py").write_text("SCALE = 1.0\n")
    (flat / "head.py").write_text("from consts import SCALE\n" + src)
    (flat / "unrelated.py").write_text("x = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(flat))
    for type_, sibling in (("mypkg.heads:ScaledSoftmax", pkg / "consts.py"),
                           (f"{flat / 'head.py'}:ScaledSoftmax", flat / "consts.py")):
        cls = plugin_class(type_)
        before = source_sha256(cls)
        (flat / "unrelated.py").write_text("x = 2\n")  # not imported: not the head's code
        assert source_sha256(cls) == before
        sibling.write_text("SCALE = 2.0\n")
        assert source_sha256(cls) != before, type_
    sys.modules.pop("mypkg", None)


def test_a_failed_final_write_loses_no_training(tiny_data, monkeypatch):
    """Bad case 10: a full disk while writing model.pt; Snakemake then deleted the failed job's history.csv, the
    rerun resumed from the final checkpoint without rewriting it, Snakemake deleted the new model.pt and
    train.json as a job missing an output, and the checkpoints were gone."""
    import errno

    import torch

    from pipeline_src.config import run_config
    from pipeline_src.io import paths
    from pipeline_src.training import checkpoints
    from pipeline_src.training.loop import train

    p, _, prepared = tiny_data
    cfg = run_config(p, "tiny", "softmax", seed=0)
    out = paths.run_dir(p, "tiny", "softmax", 0)
    real = checkpoints.save

    def full_disk(path, obj):
        if path.name == paths.MODEL:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, obj)

    monkeypatch.setattr(checkpoints, "save", full_disk)
    with pytest.raises(OSError, match="No space left"):
        train(cfg, prepared, out, torch.device("cpu"))
    assert (out / paths.CHECKPOINT).is_file()
    (out / paths.HISTORY).unlink()  # Snakemake removes a failed job's outputs
    monkeypatch.setattr(checkpoints, "save", real)
    summary = train(cfg, prepared, out, torch.device("cpu"))
    for f in (paths.HISTORY, paths.MODEL, paths.TRAIN_RECORD):
        assert (out / f).is_file(), f
    assert len((out / paths.HISTORY).read_text().splitlines()) == 1 + cfg["training"]["epochs"]
    assert summary["status"] == "ok" and not (out / paths.CHECKPOINT).exists()


def test_a_block_that_cannot_be_drawn_leaves_the_readme_and_every_doc_as_they_were(tmp_path, monkeypatch):
    """Bad case of the third probe: `publish --replace` over token-axis rewrote README.md, then failed drawing a
    block of docs/ (README and docs disagreed). Every page is rendered before any is written."""
    import pipeline_src.reporting.publish as pub

    readme, doc = tmp_path / "README.md", tmp_path / "page.md"
    readme.write_text("<!-- results-table: good -->\nold\n<!-- end results-table -->\n")
    doc.write_text("<!-- results-table: broken -->\nold\n<!-- end results-table -->\n")

    def render(path):
        if path == "broken":
            raise KeyError("a block that cannot be drawn")
        return "new\n"

    monkeypatch.setattr(pub, "doc_files", lambda: [readme, doc])
    monkeypatch.setattr(pub, "render_table", render)
    with pytest.raises(KeyError):
        pub.update_docs()
    assert "old" in readme.read_text() and "old" in doc.read_text()
    doc.write_text("<!-- results-table: good -->\nold\n<!-- end results-table -->\n")
    assert pub.update_docs() == [readme, doc] and readme.read_text().count("new") == doc.read_text().count("new") == 1


def test_the_glance_reads_every_publication_at_one_level_whatever_its_own(tmp_path, monkeypatch):
    """Bad case of the third probe: `restate --name default` at statistics.confidence 0.5 relabelled the whole glance
    (other publications' 95% rows) "50% CI" and bolded plif at Holm p 0.26. The glance recomputes each row at 95%."""
    import pipeline_src.reporting.tables as tables

    before = tables.glance_markdown(["default"])
    shutil.copytree(ROOT / "benchmarks" / "default", tmp_path / "benchmarks" / "default",
                    ignore=shutil.ignore_patterns("records"))
    prov = tmp_path / "benchmarks" / "default" / "provenance.json"
    data = json.loads(prov.read_text())
    data["params"]["statistics"]["confidence"] = 0.5
    prov.write_text(json.dumps(data))
    monkeypatch.setattr(tables, "REPOSITORY", tmp_path)
    after = tables.glance_markdown(["default"])
    assert after == before and "95% CI" in after and "**plif**" not in after
