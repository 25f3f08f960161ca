"""Numbers that stay true: every result table in the README and docs is generated from a committed
result file, and the default run's file still matches what the current code produces."""
import copy
import json

import pandas as pd
import pytest
from conftest import ROOT, write_params
from machine_tolerance import SAME_MACHINE_NATS, Machine, check_rerun, published_on, this_machine, tolerance

from pipeline_src.cli import main
from pipeline_src.config import load, run_pairs, validate
from pipeline_src.io.digests import sha256_of
from pipeline_src.reporting.publish import BLOCK, doc_files, render_table, stale_tables

DEFAULT = ROOT / "benchmarks" / "default"


def test_readme_and_docs_tables_match_their_files():
    blocks = [m.group("path") for d in doc_files() for m in BLOCK.finditer(d.read_text(encoding="utf-8"))]
    assert "benchmarks/default/headline.csv" in blocks  # the README's headline is one of them
    assert stale_tables() == []


def test_a_hand_edited_number_is_caught(tmp_path):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    m = next(BLOCK.finditer(readme))
    body = m.group("body")
    assert body == render_table(m.group("path"))
    i = m.start("body") + next(i for i, ch in enumerate(body) if ch.isdigit())
    edited = tmp_path / "README.md"
    edited.write_text(readme[:i] + str((int(readme[i]) + 1) % 10) + readme[i + 1:], encoding="utf-8")
    assert stale_tables([ROOT / "README.md"]) == []
    assert stale_tables([edited]) == [f"README.md: the table from {m.group('path')}"]


def test_published_default_run_names_its_commit_and_this_config():
    prov = json.loads((DEFAULT / "provenance.json").read_text())
    assert len(prov["commit"]) == 40 and prov["dirty_files"] == []  # made by a committed tree
    # params.yaml has not changed since: otherwise the published numbers describe another benchmark
    # (the published params pass through validate again: a default added later fills the same key in both)
    assert validate(copy.deepcopy(prov["params"])) == load(ROOT / "params.yaml"), \
        "params.yaml changed: rerun and publish the default run"
    summary = pd.read_csv(DEFAULT / "summary.csv")
    assert set(summary.seed) == set(prov["seeds"])
    assert set(zip(summary.dataset, summary.method)) == set(run_pairs(validate(copy.deepcopy(prov["params"]))))


@pytest.mark.parametrize("dataset, method", [("synth", "softmax"), ("synth", "plif"), ("zipf-5k", "nce")])
def test_default_run_file_matches_what_the_code_produces_now(tmp_path, dataset, method):
    """Retrain one run of the published default benchmark (seed 1, one thread, as the pipeline does) and
    compare its test perplexity with the committed file: a code change that moves the numbers fails here
    until the default run is rerun and republished. The large-vocabulary half's run trains its frozen tokens,
    so it reproduces like the synth half's (a time budget would not: other machines buy other tokens)."""
    prov = json.loads((DEFAULT / "provenance.json").read_text())
    p = copy.deepcopy(prov["params"])
    p.update(data_dir=str(tmp_path / "data"), results_dir=str(tmp_path / "results"))
    p["run"]["seeds"] = [1]
    cfg = write_params(p, tmp_path / "params.yaml")
    common = ["--config", str(cfg), "--dataset", dataset]
    for step in ("fetch", "prepare"):
        assert main([step, *common]) == 0
    run = [*common, "--method", method, "--seed", "1", "--threads", "1"]
    assert main(["train", *run]) == 0 and main(["evaluate", *run]) == 0
    got = json.loads((tmp_path / "results/runs" / dataset / method / "seed1/metrics.json").read_text())
    want = pd.read_csv(DEFAULT / "summary.csv").query(
        "dataset == @dataset and method == @method and seed == 1 and split == 'test'").iloc[0]
    assert got["config_hash"] == want.config_hash
    check_rerun(method, got["splits"]["test"]["nll"], float(want.nll), published_on(want), this_machine(), dataset)


PUBLISHED_ON = Machine("AMD EPYC", "2.13.0+cpu")


def test_a_rerun_on_another_machine_is_held_to_the_measured_spread_and_on_the_same_one_to_its_bits():
    """Another machine's results fed in: PLIF's seed 1 on an Intel Xeon gave test ppl 93.60563 against the first
    publication's 93.57626 (an AVX-512 AMD EPYC; 3.1e-4 nats; its largest spread over three seeds was 7.1e-4), and
    94.1202 with AVX2 kernels forced there (5.8e-3 nats): what the default run made again on an AVX2-only EPYC
    gave, now the publication."""
    import math

    pub = math.log(93.57626)  # the first publication's: the measurements below are against it
    now = float(pd.read_csv(DEFAULT / "summary.csv").query("method == 'plif' and seed == 1 and split == 'test'").nll.iloc[0])
    assert math.exp(now) == pytest.approx(94.1202, abs=1e-4)  # the real AVX2 machine, as the forced kernels said
    xeon = Machine("Intel Xeon", "2.13.0+cpu")
    for got in (math.log(93.60563), pub + 7.1e-4, pub - 7.1e-4, math.log(94.1202)):
        check_rerun("plif", got, pub, PUBLISHED_ON, xeon)  # passes: within the measured cross-machine spread
    with pytest.raises(AssertionError, match="same CPU model and torch as the publication"):
        check_rerun("plif", math.log(93.60563), pub, PUBLISHED_ON, PUBLISHED_ON)  # here it would be a code change
    with pytest.raises(AssertionError, match="another machine .*plif's largest measured cross-machine spread"):
        check_rerun("plif", pub + 0.02, pub, PUBLISHED_ON, xeon)  # 2% of perplexity is not a CPU's last bits
    softmax, _ = tolerance("softmax", PUBLISHED_ON, xeon, "synth")
    plif, _ = tolerance("plif", PUBLISHED_ON, xeon, "synth")
    assert softmax == SAME_MACHINE_NATS < plif == pytest.approx(2 * 5.8e-3)  # per method: PLIF needs its own
    # and per dataset: zipf-5k's softmax, 6 s of frozen tokens of a sampled language, moved 3.3e-4 across the EPYCs
    assert tolerance("softmax", PUBLISHED_ON, xeon, "zipf-5k")[0] == pytest.approx(2 * 3.29e-4)
    nce, _ = tolerance("nce", PUBLISHED_ON, xeon)
    assert nce == pytest.approx(2 * 1.68e-2)  # a sampled loss over many steps moves further than an exact head
    worst = tolerance("neglm-b-neg-start", PUBLISHED_ON, xeon)[0]
    assert worst == pytest.approx(2 * 6.75e-2)  # one seed of NEGLM-B, AVX-512 against AVX2: the largest measured
    assert tolerance("a-head-never-measured", PUBLISHED_ON, xeon)[0] == worst  # the largest of any method
    assert tolerance("plif", PUBLISHED_ON, Machine("AMD EPYC", "2.11.0"), "synth")[0] == plif  # versions count
    assert tolerance("softmax", PUBLISHED_ON, PUBLISHED_ON)[0] == SAME_MACHINE_NATS
    assert "another machine" in tolerance("softmax", PUBLISHED_ON, Machine("AMD EPYC", "2.11.0"), "synth")[1]
    # the same model string with other kernels (an AVX2-only EPYC) is another machine where both are recorded
    assert Machine("AMD EPYC", "2.13.0+cpu", "AVX512").same_as(PUBLISHED_ON)  # the first publication did not record it
    avx2 = Machine("AMD EPYC", "2.13.0+cpu", "AVX2")
    assert not avx2.same_as(Machine("AMD EPYC", "2.13.0+cpu", "AVX512"))
    check_rerun("plif", pub + 5.8e-3, pub, Machine("AMD EPYC", "2.13.0+cpu", "AVX512"), avx2)


def test_a_bench_alone_is_published_with_its_command_and_refused_when_its_config_changed(tmp_path, monkeypatch,
                                                                                       default_params):
    import pipeline_src.reporting.publish as pub
    from pipeline_src.config import ConfigError, validate
    from pipeline_src.cost.bench import run_bench
    from pipeline_src.reporting import bench_tables as tables

    p = validate(copy.deepcopy(default_params))
    p["results_dir"] = str(tmp_path / "results")
    p["bench"].update(methods=["softmax", "neglm"], vocab_sizes=[50], tokens=16, dim=8, repeats=1)
    run_bench(p, __import__("torch").device("cpu"))
    monkeypatch.setattr(pub, "BENCHMARKS", tmp_path / "benchmarks")
    monkeypatch.setattr(pub, "update_docs", lambda: [])
    with pytest.raises(ConfigError, match="--trained-at 0123abc: not a commit of this repository"):
        pub.publish(p, tmp_path / "bench.yaml", "bench-x", trained_at="0123abc")
    out = pub.publish(p, tmp_path / "bench.yaml", "bench-x", trained_at="HEAD")
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["files"] == ["bench.csv", "bench.json"] and prov["command"].startswith("python -m pipeline_src bench")
    assert prov["trained_at_commit"] == pub._git("rev-parse", "HEAD") and len(prov["trained_at_commit"]) == 40
    table = tables.bench_markdown(pd.read_csv(out / "bench.csv"))
    rows = table.split("\n\n")[0].splitlines()[2:]  # the heads' table (the library peer's follows)
    assert [r.split(" | ")[1] for r in rows] == ["softmax", "neglm"] and rows[0].startswith("| 50 |")
    p["bench"]["tokens"] = 32  # the bench file no longer describes this config
    with pytest.raises(ConfigError, match="another bench config"):
        pub.publish(p, tmp_path / "bench.yaml", "bench-x")


def test_every_page_the_readme_and_docs_link_exists():
    """The README is a front door: each relative link in it and in docs/ points at a file or folder that
    exists (an anchor-only or web link is not checked)."""
    import re

    missing = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
            path = target.split("#", 1)[0]
            if not path or re.match(r"^[a-z]+:", path):
                continue
            if not (page.parent / path).exists():
                missing.append(f"{page.relative_to(ROOT)} -> {target}")
    assert missing == []
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 80  # a front door, not a manual


PUBLISHED_VERDICTS = sorted(p.parent.name for p in (ROOT / "benchmarks").glob("*/headline.csv"))


@pytest.mark.parametrize("name", PUBLISHED_VERDICTS)
def test_published_verdicts_are_what_the_statistics_give_their_runs_now(name, monkeypatch):
    """Every published headline and contrasts table (and the budget axis's, where long runs kept points) equals
    what the current statistics compute from the publication's own per-run rows under its recorded params: a
    change to the intervals or the verdicts fails here until `python -m pipeline_src restate` has regenerated
    them."""
    from pipeline_src.reporting.axis_tables import axis_tables
    from pipeline_src.reporting.summarize import verdict_tables

    monkeypatch.chdir(ROOT)  # a params file's paths (statistics.gpu_cells) are the repository's
    out = ROOT / "benchmarks" / name
    prov = json.loads((out / "provenance.json").read_text())
    params = validate(copy.deepcopy(prov["params"]))
    summary = pd.read_csv(out / "summary.csv")
    head, con = verdict_tables(summary, params)
    tables = [("headline.csv", head), ("contrasts.csv", con)]
    if (out / "budget-ranking.csv").is_file():
        refs = pd.read_csv(out / "references.csv") if (out / "references.csv").stat().st_size > 1 else None
        tables += list(axis_tables(pd.read_csv(out / "anytime.csv"), summary, refs, params).items())
    gpu = json.loads((out / "summary.json").read_text()).get("gpu_cells") if (out / "summary.json").is_file() else None
    if gpu:  # the GPU bench its axis tables read is the one committed now (else: restate it)
        assert sha256_of(ROOT / gpu["path"]) == gpu["sha256"], f"{name}: {gpu['path']} changed since it was read"
    for file, frame in tables:
        got = pd.read_csv(out / file)
        want = pd.read_csv(__import__("io").StringIO(frame.to_csv(index=False)))  # as written: same dtypes
        # a fitted curve's parameters are ill-conditioned where its exponent is small: a floor and a scale that trade
        # off along a ridge. Measured (2026-12-04): a 1e-12 relative change of zipf-10k's mean nlls moves sampled
        # softmax's fitted floor by 1.5e-4 nats (6.5e-5 of it), tight optimizer tolerances or not, and machines
        # differ by that much (1.5e-5 on an EPYC of 2026-12-04); so the fits and the crossings extrapolated from
        # them compare at 1e-4, what no change of the fit's form or of its points stays within
        rtol = 1e-4 if file in ("budget-fits.csv", "crossovers.csv") else 1e-9
        pd.testing.assert_frame_equal(got, want, check_exact=False, rtol=rtol, obj=f"{name}/{file}")


def test_restate_refuses_params_that_changed_beyond_statistics(tmp_path, monkeypatch, capsys):
    import shutil

    import pipeline_src.reporting.publish as pub
    from pipeline_src.config import ConfigError

    monkeypatch.setattr(pub, "BENCHMARKS", tmp_path)
    monkeypatch.setattr(pub, "update_docs", lambda: [])
    shutil.copytree(DEFAULT, tmp_path / "default")
    p = load(ROOT / "params.yaml")
    p["statistics"]["interval"] = "bootstrap"  # statistics may change: the runs stay what they were
    assert pub.restate(p, ROOT / "params.yaml", "default", say=lambda s: None)  # it wrote
    prov = json.loads((tmp_path / "default" / "provenance.json").read_text())
    assert prov["restated"]["statistics"]["interval"] == "bootstrap" and prov["params"] == p
    old = pd.read_csv(DEFAULT / "headline.csv").set_index("method")
    new = pd.read_csv(tmp_path / "default" / "headline.csv").set_index("method")
    assert (new.nll == old.nll).all() and (new.nll_high - new.nll_low < old.nll_high - old.nll_low).all()
    said, before = [], (tmp_path / "default" / "provenance.json").read_bytes()
    assert not pub.restate(p, ROOT / "params.yaml", "default", say=said.append)  # again: every table as it is
    assert (tmp_path / "default" / "provenance.json").read_bytes() == before  # not rewritten (the fifth probe)
    assert said == ["default: nothing to restate: under these statistics and profiles every table comes out as it "
                    "is (nothing written)"]
    from pipeline_src.cli import main

    capsys.readouterr()
    assert main(["restate", "--name", "nosuch-publication"]) == 2  # no provenance to compare: its own line, not the
    assert "is not a publication (no provenance.json): nothing to restate" in capsys.readouterr().err  # system's
    # the sixth probe: --as-published beside a --config read (and, broken, failed on) a file it then ignored
    assert main(["restate", "--name", "default", "--as-published", "--config", "config/smoke.yaml"]) == 2
    assert capsys.readouterr().err == ("error: restate --as-published restates under the params benchmarks/default was "
                                       "published with, so --config config/smoke.yaml would be ignored: give one of "
                                       "them\n")
    assert main(["restate", "--name", "default", "--as-published"]) == 0  # (a TypeError before: no --config given)
    assert "default: nothing to restate" in capsys.readouterr().out
    p["training"]["lr"] = 0.5  # a run setting: restating would mislabel the runs
    with pytest.raises(ConfigError, match="at key 'training.lr': restate changes statistics only"):
        pub.restate(p, ROOT / "params.yaml", "default", say=lambda s: None)
    # the fourth probe: another params file (restate without --config reads params.yaml) is most likely the wrong
    # --config, not an edit: the line names the file the publication was made from
    smoke = ROOT / "config" / "smoke.yaml"
    with pytest.raises(ConfigError, match=r"it was published from params.yaml: pass `--config params.yaml`, or "
                                          r"`--as-published`"):
        pub.restate(load(smoke), smoke, "default", say=lambda s: None)


def test_restate_recomputes_the_budget_axis_under_the_new_statistics(tmp_path, monkeypatch):
    """A publication whose runs kept budget points: restate at another confidence rewrites its budget-axis
    tables too (narrower intervals at 90% than at 95%), not only the headline."""
    import math
    import shutil

    import pipeline_src.reporting.publish as pub
    from pipeline_src.reporting.seals import seal_provenance

    monkeypatch.setattr(pub, "BENCHMARKS", tmp_path)
    monkeypatch.setattr(pub, "update_docs", lambda: [])
    shutil.copytree(DEFAULT, tmp_path / "default", ignore=shutil.ignore_patterns("records"))
    s = pd.read_csv(DEFAULT / "summary.csv").query("split == 'test' and dataset == 'zipf-5k'")
    rows = [{"dataset": "zipf-5k", "method": r.method, "seed": r.seed, "tokens": int(1e5 * m), "multiple": m,
             "valid_ppl": math.exp(r.nll - 0.1 * math.log(m)), "test_nll": r.nll - 0.1 * math.log(m) + 0.02 * r.seed}
            for r in s.itertuples() if r.method in ("softmax", "nce") for m in (0.25, 1, 3, 10)]
    points = pd.concat([pd.read_csv(DEFAULT / "anytime.csv"), pd.DataFrame(rows)], ignore_index=True)
    points.to_csv(tmp_path / "default" / "anytime.csv", index=False)
    prov = json.loads((tmp_path / "default" / "provenance.json").read_text())  # as a publication with them records it
    prov["runs"]["tables"]["anytime.csv"] = sha256_of(tmp_path / "default" / "anytime.csv")
    prov["files"].append("anytime.csv") if "anytime.csv" not in prov["files"] else None
    (tmp_path / "default" / "provenance.json").write_text(json.dumps(seal_provenance(prov, tmp_path / "default")))
    p = load(ROOT / "params.yaml")
    widths = {}
    for level in (0.95, 0.9):
        p["statistics"]["confidence"] = level
        pub.restate(p, ROOT / "params.yaml", "default", say=lambda s: None)
        r = pd.read_csv(tmp_path / "default" / "budget-ranking.csv").query("method == 'nce'")
        widths[level] = (r.nll_high - r.nll_low).to_numpy()
    assert (widths[0.9] < widths[0.95]).all()


def test_restate_reads_a_ladder_s_equal_time_on_the_profiles_as_they_are_now(tmp_path, monkeypatch):
    """A token-ladder publication restated after a profile was measured again: its equal-time grid reads each
    method's tokens from the profile now (here every method twice as fast on the CPU: a minute buys what two did),
    and its equal-data grid keeps the epochs each rung is."""
    import shutil

    import pipeline_src.reporting.ladder_tables as lt
    import pipeline_src.reporting.profiles as profiles
    import pipeline_src.reporting.publish as pub

    monkeypatch.setattr(pub, "BENCHMARKS", tmp_path)
    monkeypatch.setattr(pub, "update_docs", lambda: [])
    shutil.copytree(ROOT / "benchmarks" / "token-axis", tmp_path / "token-axis", ignore=shutil.ignore_patterns("records"))
    from pipeline_src.reporting.seals import seal_provenance

    cpu = pd.read_csv(ROOT / "benchmarks" / "bench-cells-ladder" / "cell-bench.csv")
    faster = tmp_path / "fast" / "cell-bench.csv"
    shutil.copytree(ROOT / "benchmarks" / "bench-cells-ladder", faster.parent)  # a profile published again
    cpu.assign(tokens_per_s=2 * cpu.tokens_per_s).to_csv(faster, index=False)
    prov = json.loads((faster.parent / "provenance.json").read_text())
    (faster.parent / "provenance.json").write_text(json.dumps(seal_provenance(prov, faster.parent)))
    for module in (lt, profiles):  # the name ladder_tables iterates, the folder load_profile reads
        monkeypatch.setattr(module, "PROFILES", {"cpu-thread": str(faster.parent)})
    before = pd.read_csv(tmp_path / "token-axis" / "equal-time.csv").query("profile == 'cpu-thread'")
    pub.restate(load(ROOT / "config" / "token-axis.yaml"), ROOT / "config" / "token-axis.yaml", "token-axis",
                say=lambda s: None)
    after = pd.read_csv(tmp_path / "token-axis" / "equal-time.csv")
    assert set(after.profile) == {"cpu-thread"} and len(after) == 3
    minute = after[after.seconds == 60.0].iloc[0].tokens_read
    speed = cpu[cpu.dataset == "zipf-10k"].set_index("method").tokens_per_s
    assert f"nce {2 * 60 * speed['nce'] / 1e6:.3g}M" in minute  # twice the tokens a minute bought on the profile
    assert list(after.seconds) == pytest.approx([60.0, *(before.seconds.iloc[1:] / 2)], rel=1e-9)
    lad = pd.read_csv(tmp_path / "token-axis" / "ladder-advice.csv")
    assert lad.epochs.to_numpy() == pytest.approx(lad.tokens.to_numpy() / 17_000_001, rel=1e-3)


def test_the_first_screen_names_the_commit_that_trained_a_pinned_rerun(default_params):
    """A rerun trained in a worktree pinned at one commit and published at another names both (publish
    --trained-at): the token axis trained at 4364da1."""
    from pipeline_src.config import validate
    from pipeline_src.reporting.report import first_screen

    prov = json.loads((ROOT / "benchmarks" / "token-axis" / "provenance.json").read_text())
    text = first_screen(validate(copy.deepcopy(prov["params"])), "config/token-axis.yaml", prov, "token-axis")
    assert f"(trained at `{prov['trained_at_commit'][:12]}`)" in text and prov["trained_at_commit"].startswith("4364da1")
    assert "| zipf-10k | 10,000 words + `<eos>` | lstm, width 64, 1 layer | ladder 0.5M, 1M, 2M, 4M, 8M, 16M tokens |" in text
    # the third probe: nothing said the card's verdicts were the top rung's
    assert "the tables and verdicts before the ladder section score each run's **top rung** (zipf-10k: 16M tokens)" in text
    from pipeline_src.config import load

    capped = load(str(ROOT / "config" / "token-axis-100k.yaml"))  # the softmax's own lower top is named
    assert "(zipf-100k: 16M tokens, softmax 4M (its own top))" in first_screen(capped, "config/token-axis-100k.yaml", None)
    assert "top rung" not in first_screen(default_params, "params.yaml", None)


def test_the_first_screen_carries_the_hash_of_the_params_that_made_the_page(default_params):
    """Two publications of different configs say so on their first screens: each page names the hash of the params
    its tables were made with (validated params hash the same as published ones)."""
    from pipeline_src.config import config_hash, validate
    from pipeline_src.reporting.report import first_screen

    seen = set()
    for name, params_file in (("token-axis", "config/token-axis.yaml"), ("default", "params.yaml")):
        prov = json.loads((ROOT / "benchmarks" / name / "provenance.json").read_text())
        text = first_screen(prov["params"], params_file, prov, name)
        digest = config_hash(prov["params"])
        assert f"params hash `{digest}`" in text and digest == config_hash(validate(copy.deepcopy(prov["params"])))
        seen.add(digest)
    assert len(seen) == 2
