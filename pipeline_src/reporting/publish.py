"""Published results: the files behind every number in the README and docs, committed with their provenance.

``python -m pipeline_src publish --name NAME`` copies a finished run's result tables from ``results_dir``
into ``benchmarks/NAME/`` (a folder of its own: ``results/`` belongs to DVC and Snakemake) with
``provenance.json``: the git commit and whether the tree was clean, the params file and its full
content, the config hash of every run, the machine. It refuses results that another config made.
Then it rewrites every result table in the README and ``docs/`` that names one of these files:

    <!-- results-table: benchmarks/default/headline.csv -->
    ...generated markdown...
    <!-- end results-table -->

``tests/test_published.py`` fails when such a table no longer matches its file, and when the default
run's file no longer matches what the current code produces.
"""
from __future__ import annotations

import re
import subprocess
from datetime import datetime, timezone
from pathlib import Path

from ..config import first_difference, run_seeds
from ..io import paths
from ..io.artifacts import read_csv, read_json
from ..io.atomic import write_json, write_text
from ..io.errors import ConfigError, OutputError
from ..io.paths import REPOSITORY
from ..io.tracked import allow_tracked
from .publication_files import check_scored_tokens, copy_tables, stale_views, what_to_publish
from .seals import check_publication, seal_provenance
from .tables import render_table

BENCHMARKS = REPOSITORY / "benchmarks"
BLOCK = re.compile(r"(<!-- results-table: (?P<path>\S+?) -->\n)(?P<body>.*?)(<!-- end results-table -->)", re.S)


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=REPOSITORY, capture_output=True, text=True,
                              check=True).stdout.rstrip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def _dirty_files(own: Path | None = None) -> list[str]:
    """Tracked files with uncommitted changes (what provenance.json records beside the commit), leaving out what
    publishing writes itself: ``own`` (the publication's folder) and the pages whose blocks it redraws (the README,
    docs/), which a killed earlier publish of the same name left modified and which the tables do not come from."""
    files = [line[3:] for line in _git("status", "--porcelain", "--untracked-files=no").splitlines()]
    if own is None:
        return files
    outputs = {p.relative_to(REPOSITORY).as_posix() for p in doc_files()}
    mine = f"{own.resolve().relative_to(REPOSITORY).as_posix()}/" if own.resolve().is_relative_to(REPOSITORY) else None
    return [f for f in files if f not in outputs and not (mine and f.startswith(mine))]


NAME = re.compile(r"[A-Za-z0-9._-]+")


IDENTITY_EXCLUDES = ("results_dir", "data_dir")  # where a config's files live, not what it makes


def config_difference(recorded: dict | None, params: dict) -> str | None:
    """The first key at which the config a publication or stash recorded (validated again under today's schema,
    so keys added since take their defaults) differs from ``params``, leaving out where files live; None when
    they are the same config. A record without its params (older stashes) differs at '(params not recorded)'."""
    import copy

    from ..config import validate

    if not isinstance(recorded, dict):
        return "(params not recorded)"
    try:
        recorded = validate(copy.deepcopy(recorded), "the recorded params")
    except ConfigError:
        return "(the recorded params no longer validate)"
    params = validate(copy.deepcopy(params), "the params")  # (a caller's may not have its defaults filled in)
    drop = lambda p: {k: v for k, v in p.items() if k not in IDENTITY_EXCLUDES}  # noqa: E731
    return first_difference(drop(recorded), drop(params))


def check_stash(out: Path, params: dict, params_file: str, replace: bool) -> None:
    """Refuse stashing into a publication or a stash of another config (by content, whatever the params file is
    called) unless ``replace``: its records sit under that benchmark's name."""
    for record in (out / "records" / paths.RECORDS_MANIFEST, out / paths.PROVENANCE):
        if record.is_file():
            got = read_json(record)
            recorded = got.get("params")
            if recorded is None and record.name == paths.RECORDS_MANIFEST and (out / paths.PROVENANCE).is_file():
                recorded = read_json(out / paths.PROVENANCE).get("params")  # a stash from before params were kept
            key = config_difference(recorded, params)
            if key is not None and not replace:
                raise OutputError(f"{out} holds the records or publication of {got.get('params_file')}, whose config "
                                  f"differs from {params_file}'s at key '{key}': add --replace to stash there anyway, "
                                  f"or choose another --name")
            return


def check_name(name: str, command: str = "publish", option: str = "--name") -> Path:
    """``benchmarks/NAME`` for a plain name (letters, digits, ``-``, ``_``, ``.``; not ``.`` or ``..``); ``option``
    is the command's own word for it in the refusal."""
    if not NAME.fullmatch(name) or name in (".", ".."):
        raise OutputError(f"{command} {option} {name!r}: give a plain name (letters, digits, '-', '_', '.'; no '/', "
                          f"not empty, not '.' or '..'); it becomes benchmarks/NAME")
    return BENCHMARKS / name


def publish(params: dict, params_file: Path, name: str, wall_time_s: float | None = None,
            say=print, replace: bool = False, trained_at: str | None = None) -> Path:
    """Copy ``results_dir``'s tables to ``benchmarks/NAME``; ``say`` reports a replaced publication (and the
    earlier files it removes) and a tree with uncommitted changes. A publication made from another params file
    is replaced only with ``replace`` (its tables sit under prose written for that benchmark). ``trained_at``:
    the commit whose code trained the runs when it is not this one (a rerun in a worktree pinned at a commit,
    summarised and published here), recorded beside ``commit``."""
    from .summary_checks import check_bench, check_summary_current

    out = check_name(name)
    results = Path(params["results_dir"])
    kind, summary, command = what_to_publish(params, params_file, results)  # stale results are said first
    _check_target(out, results, name, params, params_file, replace)
    runs = sorted((results / "runs").glob("*/*/seed*/metrics.json"))
    if kind == "refs" and runs:  # the count-based rows while a sweep runs (topics-kn): no seed, no run is claimed
        say(f"note: {results} holds {len(runs)} run record(s) but no summary.csv: publishing its references alone "
            f"(run `summarize` to publish the runs)")
    if kind == "runs":  # every run from this params file (and, when tuned, its selection)
        check_summary_current(params, summary)
        check_scored_tokens(summary, paths.summary_path(params))
    if kind not in ("step", "cells"):
        check_bench(params, str(params_file))  # a bench.csv is copied whenever there is one
    dirty = _dirty_files(out)  # before this publication's own files change under benchmarks/
    trained_at = _commit(trained_at) if trained_at else None
    check_doc_sources(out)
    with allow_tracked(out, *doc_files()):
        return _write_publication(params, params_file, name, out, results, kind, summary, command, dirty,
                                  wall_time_s, say, trained_at)


def _commit(ref: str) -> str:
    """``ref`` as the full hash of a commit of this repository (a clear error when it names none)."""
    full = _git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if not full:
        raise ConfigError(f"--trained-at {ref}: not a commit of this repository")
    return full


def _write_publication(params, params_file, name, out, results, kind, summary, command, dirty, wall_time_s,
                       say, trained_at: str | None = None) -> Path:
    from ..io.runtime import cpu_model  # (imports torch)

    copied = copy_tables(params, results, out, kind, say)
    if dirty:
        say(f"warning: publishing from a tree with uncommitted changes ({len(dirty)} files: "
            f"{', '.join(dirty[:5])}{' ...' if len(dirty) > 5 else ''}); provenance.json records the commit "
            f"and these files, but the numbers may not come from that commit's code")
    info = paths.summary_path(params).with_suffix(".json")
    machine = _measured_on(params, kind) or cpu_model()
    write_json(out / paths.PROVENANCE, seal_provenance({
        "name": name, "commit": _git("rev-parse", "HEAD"), "dirty_files": dirty,
        **({"trained_at_commit": trained_at} if trained_at else {}),
        "params_file": str(params_file), "params": params, "published": datetime.now(timezone.utc).isoformat(
            timespec="seconds"), "files": copied, "seeds": [] if kind == "refs" else run_seeds(params),
        "cpu_model": machine,
        "run_config_hashes": sorted(summary.config_hash.unique().tolist()),
        "command": command, "wall_time_s": wall_time_s,
        "runs": read_json(info) if kind == "runs" and info.exists() else None}, out))
    update_docs()
    return out


def _measured_on(params: dict, kind: str) -> str | None:
    """A timing table's machine as its own json records it (a bench run elsewhere, e.g. on a GPU machine, and
    published here): device, CPU model and torch; None for runs, whose machine is this one's."""
    table = {"bench": paths.bench_path, "step": paths.step_bench_path, "cells": paths.cell_bench_path}.get(kind)
    if table is None:
        return None
    meta = read_json(table(params).with_suffix(".json"))
    if not str(meta.get("device", "cpu")).startswith("cuda"):
        return None
    return f"{meta.get('gpu') or 'CUDA'} ({meta.get('cpu_model', '?')} host; torch {meta.get('torch', '?')})"


def _check_target(out: Path, results: Path, name: str, params: dict, params_file: Path, replace: bool) -> None:
    """Refuse a publication folder that holds the results it reads, is a file, or is the publication of another
    config (by content, whatever the params file is called; without ``replace``)."""
    if out.resolve() == results.resolve() or out.resolve() in results.resolve().parents:
        raise OutputError(f"publish --name {name}: {out} holds results_dir {results} (the command's input); "
                          f"publish to another name")
    if out.exists() and not out.is_dir():
        raise OutputError(f"{out} is a file: refusing to replace it with a publication")
    if (out / paths.PROVENANCE).is_file() and not replace:
        prov = read_json(out / paths.PROVENANCE)
        key = config_difference(prov.get("params"), params)
        if key is not None:
            raise OutputError(f"{out} was published from {prov.get('params_file')} whose config differs from "
                              f"{params_file}'s at key '{key}': its tables sit under that benchmark's prose in the "
                              f"README and docs; add --replace to publish over it, or choose another --name")


def restatable(name: str) -> Path:
    """The provenance.json of the publication ``name``, which restate reads; one line where there is none."""
    prov = check_name(name, "restate") / paths.PROVENANCE
    if not prov.is_file():
        raise ConfigError(f"{prov.parent} is not a publication (no provenance.json): nothing to restate")
    return prov


def restate(params: dict, params_file: Path, name: str, say=print) -> bool:
    """Recompute a publication's verdicts (headline.csv, contrasts.csv, and the budget axis's tables where its
    runs kept budget points) from its committed per-run rows (summary.csv, anytime.csv) under ``params``'
    ``statistics``, and regenerate the docs' tables: no run is retrained,
    so ``params`` may differ from the published params in ``statistics`` alone. provenance.json then holds
    ``params`` and, under ``restated``, the commit and statistics that recomputed the tables. Returns whether it
    wrote: a restate under which every table comes out as it is writes nothing."""
    import copy

    from ..config import validate
    from .published_rows import check_digest, read_published
    from .summarize import verdict_tables

    prov_path = restatable(name)
    out = prov_path.parent
    check_publication(out)  # as published (and as committed)
    prov = read_json(prov_path, "params", "files")
    if "summary.csv" not in prov["files"]:
        raise ConfigError(f"{out} has no summary.csv (a bench or step-bench publication): no verdicts to restate")
    published = validate(copy.deepcopy(prov["params"]), str(prov_path))
    key = first_difference({k: v for k, v in published.items() if k != "statistics"},
                            {k: v for k, v in params.items() if k != "statistics"})
    if key is not None:
        made = prov.get("params_file")
        other = made and Path(made).resolve() != Path(params_file).resolve()  # likely the wrong --config, not an edit
        fix = (f"it was published from {made}: pass `--config {made}`, or `--as-published` to restate it under the "
               f"statistics it was published with" if other else
               "restate changes statistics only; rerun the pipeline and publish instead")
        raise ConfigError(f"{params_file} differs from the params {out} was published with at key '{key}': {fix}")
    summary = read_published(out, "summary.csv", "nll")  # as published: a row edited since is refused
    head, con = verdict_tables(summary, params)
    tables = {"headline.csv": head, "contrasts.csv": con}
    if "anytime.csv" in prov["files"] and (out / "anytime.csv").stat().st_size > 1:  # long runs' budget points: the budget axis's verdicts follow the statistics
        from .axis_tables import axis_tables

        refs = out / "references.csv"
        for table in ("anytime.csv", "references.csv"):  # what the axis's verdicts read, as published
            check_digest(out, table)
        tables.update(axis_tables(read_csv(out / "anytime.csv"), summary,
                                  read_csv(refs) if refs.is_file() and refs.stat().st_size > 1 else None, params))
        tables.update(_restated_ladder_tables(out, prov, summary, tables.get("budget-advice.csv"), params))
    tables.update(_dvc_views(out, head))
    if _unchanged(out, prov, params, tables):
        say(f"{out.name}: nothing to restate: under these statistics and profiles every table comes out as it is "
            f"(nothing written)")
        return False
    dirty = _dirty_files(out)  # before this writes anything: the tree the restated tables came from
    check_doc_sources(out)
    with allow_tracked(out, *doc_files()):
        _write_restated(params, params_file, out, prov, prov_path, tables, dirty, say)
    return True


def _unchanged(out: Path, prov: dict, params: dict, tables: dict) -> bool:
    """Whether restating would write what ``out`` holds already: the same params, no table dropped, every table's
    text as it is, and the same GPU-cells record (a restate that changes nothing writes nothing)."""
    from .summarize import gpu_cells_record

    info = read_json(out / "summary.json") if (out / "summary.json").is_file() else {}
    if params != prov["params"] or stale_views(prov["files"], tables) or \
            info.get("gpu_cells", gpu_cells_record(params)) != gpu_cells_record(params):
        return False
    return all((out / f).is_file() and (out / f).read_text(encoding="utf-8") ==
               (t if isinstance(t, str) else t.to_csv(index=False)) for f, t in tables.items())


def _dvc_views(out: Path, head) -> dict:
    """The publication's DVC views (``summarize.dvc_views``) from its headline and history, so that `dvc metrics
    show` and `dvc plots show` read a committed publication on a fresh clone (dvc.yaml's top-level entries)."""
    import json

    from .summarize import dvc_views

    if not (out / "history.csv").is_file():
        return {}
    metrics, curves = dvc_views(head, read_csv(out / "history.csv"))
    return {**{f: json.dumps(m, indent=2, sort_keys=True) + "\n" for f, m in metrics.items()}, "valid-curves.csv": curves}


def _restated_ladder_tables(out: Path, prov: dict, summary, budget_advice, params: dict) -> dict:
    """A token-ladder publication's tables under the current statistics and hardware profiles (equal time reads
    each method's tokens/s from ``profiles.PROFILES``, re-measured since): the epochs a rung is come from its
    published ``ladder-advice.csv`` (the training split's tokens are the preparation's, absent from a clone)."""
    from .ladder_tables import NAMES, ladder_tables
    from .published_rows import check_digest

    if "ladder-advice.csv" not in prov["files"]:
        return {}
    check_digest(out, "ladder-advice.csv")
    old = read_csv(out / "ladder-advice.csv").dropna(subset=["epochs"])
    split = {d: int(round(float((g.tokens / g.epochs).median()))) for d, g in old.groupby("dataset")}
    tuning = None
    if "tuning.csv" in prov["files"]:
        check_digest(out, "tuning.csv")
        tuning = read_csv(out / "tuning.csv")
    made = ladder_tables(read_csv(out / "anytime.csv"), summary, budget_advice, params, split, tuning)
    return {name: made[name] for name in NAMES if name in made}


def _write_restated(params, params_file, out, prov, prov_path, tables, dirty, say) -> None:
    from .summarize import gpu_cells_record

    dropped = stale_views(prov["files"], tables)
    for f in dropped:  # a folder of tables remade whole (a method gone), or a table no longer made: not left behind
        (out / f).unlink(missing_ok=True)
    prov["files"] = [f for f in prov["files"] if f not in dropped]
    for file, frame in tables.items():
        write_text(out / file, frame if isinstance(frame, str) else frame.to_csv(index=False))
    if (out / "summary.json").is_file():  # the publication's summary record says what its tables now are
        from ..io.digests import sha256_of

        info = read_json(out / "summary.json")
        info["statistics"] = params["statistics"]
        info["gpu_cells"] = gpu_cells_record(params)  # a GPU bench that changed: the axis's GPU tables now read it
        if "tables" in info:
            info["tables"] = {f: d for f, d in info["tables"].items() if f not in dropped}
            info["tables"].update({f: sha256_of(out / f) for f in tables})
        write_json(out / "summary.json", info)
    if dirty:
        say(f"warning: restating from a tree with uncommitted changes ({', '.join(dirty[:5])})")
    prov.update(params=params, files=prov["files"] + [f for f in tables if f not in prov["files"]])
    if isinstance(prov.get("runs"), dict) and "tables" in prov["runs"]:  # the digests of what it now holds
        from ..io.digests import sha256_of

        prov["runs"]["tables"] = {f: d for f, d in prov["runs"]["tables"].items() if f not in dropped}
        prov["runs"]["tables"].update({f: sha256_of(out / f) for f in tables})
    prov["restated"] = {"commit": _git("rev-parse", "HEAD"), "dirty_files": dirty, "params_file": str(params_file),
                        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "tables": list(tables),
                        "statistics": params["statistics"]}
    write_json(prov_path, seal_provenance(prov, out))
    update_docs()


def doc_files() -> list[Path]:
    return [REPOSITORY / "README.md", *sorted((REPOSITORY / "docs").rglob("*.md"))]  # docs/results/: a page a question


def stale_tables(docs: list[Path] | None = None) -> list[str]:
    """Every results-table block of ``docs`` (default: the README and docs/) whose text differs from what
    its file gives now."""
    bad = []
    for doc in doc_files() if docs is None else docs:
        for m in BLOCK.finditer(doc.read_text(encoding="utf-8")):
            if m.group("body") != render_table(m.group("path")):
                bad.append(f"{doc.name}: the table from {m.group('path')}")
    return bad


def check_doc_sources(skip: Path) -> None:
    """Before a publication is written: every other publication the README and docs blocks read is as published
    (``seals.check_publication``), so that regenerating them cannot fail halfway, the new files written and the
    docs not."""
    names = set()
    for doc in doc_files():
        for m in BLOCK.finditer(doc.read_text(encoding="utf-8")):
            path = m.group("path").removeprefix("memory:")
            names |= set(path.split(":", 1)[1].split(",")) if ":" in path else {Path(path).parent.name}
    for name in sorted(names):
        pub = BENCHMARKS / name
        if pub.resolve() != skip.resolve() and (pub / paths.PROVENANCE).is_file():
            check_publication(pub)


def update_docs() -> list[Path]:
    """Rebuild every generated block of the README and docs/ from the publications: every page is rendered before
    any is written, so a table that cannot be drawn leaves all of them as they were (not the README new and docs/
    old)."""
    pages = {}
    for doc in doc_files():
        text = doc.read_text(encoding="utf-8")
        new = BLOCK.sub(lambda m: m.group(1) + render_table(m.group("path")) + m.group(4), text)
        if new != text:
            pages[doc] = new
    for doc, new in pages.items():
        write_text(doc, new)
    return list(pages)
