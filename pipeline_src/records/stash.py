"""A long experiment across sessions: commit its finished records, put them back in a fresh clone.

``results_dir`` is not committed (DVC and Snakemake own it), so a sweep that takes more than one session would
start over in each. ``python -m pipeline_src stash --name NAME`` copies every finished, current record of the
params file (tuning trials, selections, final runs' train.json / history.csv / metrics.json, count-based
references) to ``benchmarks/NAME/records/`` with a manifest of their sha256 sums; commit it.
``python -m pipeline_src restore --name NAME`` puts them back, each checked twice: its bytes against the
manifest, and its config against the one the params file gives it now (a record another config made stays out
and is listed). Snakemake then plans only what is missing. Restored files are written after the prepared data and
the hash files, so their times are newer than their inputs; models are not records (a 1M-word model is 0.5 GB),
so final runs are restored only under ``keep_models: false``, where Snakemake deletes a model once evaluated and
does not rebuild it while the run's records are current.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from ..config import config_hash, run_hash, run_pairs, run_seeds, train_config, train_hash, tuning
from ..io import paths
from ..io.artifacts import read_json
from ..io.atomic import write_json
from ..io.digests import sha256_of
from ..io.errors import ConfigError, PipelineError

MANIFEST = paths.RECORDS_MANIFEST
RUN_FILES = (paths.TRAIN_RECORD, paths.HISTORY, paths.METRICS)


def _trial_specs(params: dict, dataset: str, method: str) -> list:
    """The method's tuning trials resolved as the params file gives them now, in order, up to the first that cannot
    be: a promoted trial's config needs its rung-0 trials' records, so without them it cannot be current."""
    from ..config.runspec import resolve_run
    from ..config.tuning import trial_count

    if not (params.get("tuning") or {}).get("enabled"):
        return []
    out = []
    for t in range(trial_count(params, dataset)):
        try:
            out.append(resolve_run(params, dataset, method, trial=t))
        except (FileNotFoundError, PipelineError):  # missing, made by another config, edited or unreadable
            break
    return out


def _current(path: Path, want: str, hash_of) -> bool:
    return path.is_file() and hash_of(read_json(path, "config")) == want


def _intact(path: Path) -> bool:
    """A JSON record whose seal holds (or that has none: one from before digests); any other file."""
    from ..io.digests import SEAL, sealed

    if path.suffix != ".json" or not path.is_file():
        return True
    rec = read_json(path)
    return not isinstance(rec, dict) or SEAL not in rec or sealed(rec)


def current_records(params: dict, finals: bool | None = None) -> tuple[list[Path], list[str]]:
    """Every finished record under ``results_dir`` that the params file would make now, in the order a pipeline
    makes them, and a line for each one present but made by another config (left out). ``finals``: whether final
    runs' records count; default only under ``keep_models: false`` (what ``restore`` can put back without
    Snakemake retraining for the missing model), ``stash`` takes them always (``compare`` restores them under
    ``keep_models: false``)."""
    from ..config.runspec import resolve_run
    from ..evaluation.reference import reference_config

    keep, stale = [], []

    def take(path: Path, ok: bool) -> bool:
        if ok and not _intact(path):
            stale.append(f"{path}: its content is not what the step that wrote it recorded (edited)")
            return False
        if ok:
            keep.append(path)
        elif path.exists():
            stale.append(f"{path}: made under another config")
        return ok

    for ds, method in run_pairs(params):
        specs = _trial_specs(params, ds, method)  # resolved once: the records, then the selection's key
        for spec in specs:
            path = spec.out_dir / paths.TRAIN_RECORD
            take(path, _current(path, spec.train_hash, lambda r: train_hash(r["config"])))
        if params["tuning"]["enabled"]:
            from ..config.runspec import selection_key
            from ..config.tuning import trial_count

            count = trial_count(params, ds)
            for t in range(len(specs), count):  # promoted trials whose rung 0 is not all current: point unknown
                if (path := paths.trial_dir(params, ds, method, t) / paths.TRAIN_RECORD).exists():
                    stale.append(f"{path}: a promoted trial whose rung-0 trials are not all current here")
            key = selection_key(params, ds, method, specs) if len(specs) == count else None
            sel = paths.selected_path(params, ds, method)
            if not take(sel, sel.is_file() and read_json(sel).get("selection_key") == key):
                continue  # the final runs' settings come from the selection
        if not (finals if finals is not None else not params.get("keep_models", True)):
            continue
        for seed in run_seeds(params):
            spec = resolve_run(params, ds, method, seed=seed)
            files = [spec.out_dir / f for f in RUN_FILES]
            if train_config(params, ds).finetune_epochs:
                files[2:2] = [spec.out_dir / "finetune" / f for f in RUN_FILES[:2]]
            metrics = files[-1]
            if all(f.is_file() for f in files) and run_hash(read_json(metrics, "config")["config"]) == spec.hash:
                edited = [f for f in files if not _intact(f)]
                if edited:
                    stale.append(f"{edited[0]}: its content is not what the step that wrote it recorded (edited)")
                    continue
                keep += files
            elif metrics.exists():
                stale.append(f"{metrics}: made under another config")
    for ds in sorted({d for d, _ in run_pairs(params)}):
        for name in params.get("references", {}):
            path = paths.reference_path(params, ds, name)
            want = config_hash(reference_config(params, ds, name))
            take(path, path.is_file() and read_json(path, "config_hash")["config_hash"] == want)
    return keep, stale


def stash(params: dict, params_file: str, out: Path) -> tuple[int, int, list[str]]:
    """Copy the current records to ``out/records`` with their manifest, keeping the earlier stash's records that
    are still current under ``params`` and that this stash does not replace (a clone that restored part of a
    sweep, or none of it, never deletes committed records); returns how many were stashed from ``results_dir``,
    how many earlier ones were kept, and a line for each record left out (stale here, or stale in the stash).
    With nothing to stash, ``out/records`` is left exactly as it is."""
    import tempfile

    from ..io.atomic import atomic_path
    from ..io.tracked import allow_tracked
    from ..reporting.publish import _git

    files, stale = current_records(params, finals=True)
    root = Path(params["results_dir"])
    dest = out / "records"
    new = {f.relative_to(root).as_posix(): f for f in files}
    if not new:
        return 0, len(read_json(dest / MANIFEST, "files")["files"]) if (dest / MANIFEST).is_file() else 0, stale
    with tempfile.TemporaryDirectory() as tmp:
        kept = {}
        if (dest / MANIFEST).is_file():  # the earlier stash judged by the same rule, as a results_dir of its own
            earlier = Path(tmp) / "earlier"
            shutil.copytree(dest, earlier, ignore=shutil.ignore_patterns(MANIFEST))
            still, old_stale = current_records({**params, "results_dir": str(earlier)}, finals=True)
            kept = {rel: f for f in still if (rel := f.relative_to(earlier).as_posix()) not in new}
            stale += [f"{s.replace(str(earlier), str(dest))} (dropped from the stash)" for s in old_stale]
        manifest = {}
        with allow_tracked(dest), atomic_path(dest, marker=MANIFEST) as staged:
            for rel, f in [*new.items(), *kept.items()]:
                (staged / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(f, staged / rel)
                manifest[rel] = sha256_of(f)
            write_json(staged / MANIFEST, {"params_file": params_file, "params": params,
                                           "commit": _git("rev-parse", "HEAD"),
                                           "results_dir": params["results_dir"],
                                           "files": dict(sorted(manifest.items()))})
    return len(new), len(kept), stale


def restore(params: dict, src: Path, say=print) -> tuple[int, list[str]]:
    """Put the stashed records of ``src/records`` back under ``results_dir``: each whose bytes match the
    manifest and whose config is the params file's now, and the meta.json of an earlier preparation of a dataset
    that they were scored on (``src/earlier-data``). Needs the datasets it holds records of prepared (current)
    first."""
    from ..data.checks import check_prepared
    from .hashes import record_hashes

    rec = src / "records"
    manifest = read_json(rec / MANIFEST, "files")["files"]
    if not isinstance(manifest, dict):
        raise ConfigError(f"{rec / MANIFEST}: 'files' is not a mapping of paths to sha256; restore nothing from a "
                          f"damaged stash")
    unlisted = sorted(f.relative_to(rec).as_posix() for f in rec.rglob("*") if f.is_file() and f.name != MANIFEST
                      and f.relative_to(rec).as_posix() not in manifest)
    if unlisted:  # copied in untested, a later stash would seal it with a digest of its own
        raise ConfigError(f"{rec / unlisted[0]}: not in the manifest {rec / MANIFEST} ({len(unlisted)} such file(s)); "
                          f"restore nothing from a stash holding files it never listed")
    for rel, digest in manifest.items():
        if not (rec / rel).is_file() or sha256_of(rec / rel) != digest:
            raise ConfigError(f"{rec / rel}: missing or not the file the manifest {rec / MANIFEST} lists "
                              f"(sha256 differs); restore nothing from a damaged stash")
    stashed = {rel.split("/")[1] for rel in manifest}  # tuning/<dataset>/..., runs/<dataset>/..., references/<dataset>/...
    for ds in sorted(stashed & {d for d, _ in run_pairs(params)}):
        try:
            check_prepared(params, ds)
        except (PipelineError, FileNotFoundError) as e:
            target = paths.prepared_dir(params, ds)
            raise ConfigError(f"restore needs {target} current first ({e}); make it with `snakemake --cores all "
                              f"{target} --config params=FILE` (the target before --config, which takes every word "
                              f"after it as a config entry)") from None
    record_hashes(params)  # the hash files first: the records must be newer than these inputs of their rules
    root = Path(params["results_dir"])
    earlier, stale_data = _restore_earlier_data(params, src)
    staged = root / ".restore"  # inside results_dir: restore writes nowhere else
    if staged.exists():
        shutil.rmtree(staged)
    # judge the stash by the same rule that stashed it, laid out as a results_dir of its own
    shutil.copytree(rec, staged, ignore=shutil.ignore_patterns(MANIFEST))
    try:
        keep, stale = current_records({**params, "results_dir": str(staged)})
        clash = _clashes(keep, staged, root)
        held = _made_from(clash, {_record_dir(f, staged) for f in keep}, _rung0_count(params))
        written = 0
        for f in keep:  # in pipeline order, so each file is newer than the ones it was made from
            target = root / f.relative_to(staged)
            if _record_dir(f, staged) in clash | held:
                continue  # another run's files stay whole, and so do the stash's records made from its own
            if target.is_file() and _same(target, f):  # no copy, but its time in pipeline order all the same: a
                os.utime(target)  # promoted trial or a selection kept older than a rung 0 written now is rerun
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, target)
            _seal_restored(target)
            written += 1
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    stale = [s.replace(str(staged), str(rec)) for s in stale] + stale_data
    stale += [f"{root / d}: holds a record with other content than the stash's (another run of the same name): left "
              f"as it is; delete that folder to restore the stash's" for d in sorted(clash)]
    stale += [f"{root / d}: not restored, the stash's was made from a record that another run holds here (above)"
              for d in sorted(held)]
    return written + earlier, stale


def not_asked_for(params: dict, src: Path) -> list[str]:
    """Why some of the stash ``src/records`` was not even judged by :func:`restore` (which it checked first):
    datasets the params file does not run, and final runs' records under ``keep_models: true`` (Snakemake would
    retrain for the missing model anyway)."""
    manifest = read_json(src / "records" / MANIFEST, "files")["files"]
    stashed = {rel.split("/")[1] for rel in manifest}
    out = []
    other = sorted(stashed - {d for d, _ in run_pairs(params)})
    if other:
        out.append(f"the stash's records of {', '.join(other)}: this params file runs no such dataset (run.datasets, "
                   f"run.extra.datasets); restore with the params file that made the stash")
    finals = [rel for rel in manifest if rel.startswith("runs/") and rel.split("/")[1] not in other]
    if finals and params.get("keep_models", True):
        out.append(f"{len(finals)} final-run files: keep_models is true here, and a run restored without its model "
                   f"would be retrained (restore under keep_models: false)")
    return out


def _restore_earlier_data(params: dict, src: Path) -> tuple[int, list[str]]:
    """Put back each ``src/earlier-data/<dataset>.meta.json`` made under the params file's data config now: the
    meta.json of an earlier preparation of a dataset that the stash's records were scored on, which summarize
    accepts while it holds the same tokens as the data prepared now (``data.checks.scored_data``)."""
    from ..config import data_config

    n, stale = 0, []
    for ds in sorted({d for d, _ in run_pairs(params)}):
        meta = src / paths.EARLIER_DATA / f"{ds}.meta.json"
        if not meta.is_file():
            continue
        if read_json(meta, "config_hash")["config_hash"] != config_hash(data_config(params, ds)):
            stale.append(f"{meta}: made under another data config")
            continue
        target = paths.earlier_meta_path(params, ds)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(meta, target)
        n += 1
    return n, stale


SEALED = (paths.METRICS, paths.SELECTED, paths.TRAIN_RECORD)  # and every reference: the records whose seal is checked


def _seal_restored(path: Path) -> None:
    """A committed record from before content digests gets them once its bytes matched the stash's manifest
    (a run's metrics.json also the digest of the history.csv restored beside it)."""
    from ..io.digests import SEAL, seal

    if path.suffix != ".json" or not (path.name in SEALED or path.parent.parent.name == "references"):
        return
    rec = read_json(path)
    if SEAL in rec:
        return
    if path.name == paths.METRICS and (path.parent / paths.HISTORY).is_file():
        rec["history_sha256"] = sha256_of(path.parent / paths.HISTORY)
    write_json(path, seal(rec))


def _same(a: Path, b: Path) -> bool:
    """The same record: the same bytes, or the same JSON content with or without the digests restore adds."""
    from ..io.digests import SEAL, same_content

    if sha256_of(a) == sha256_of(b):
        return True
    if a.suffix != ".json":
        return False
    ra, rb = read_json(a), read_json(b)
    strip = lambda r: {k: v for k, v in r.items() if k not in (SEAL, "history_sha256")}  # noqa: E731
    return isinstance(ra, dict) and isinstance(rb, dict) and same_content(strip(ra), strip(rb))


def _record_dir(f: Path, staged: Path) -> str:
    """The folder a record belongs to (a run's, a trial's: its files are restored together); a reference is
    its own file."""
    rel = f.relative_to(staged)
    if rel.parts[0] == "references":
        return rel.as_posix()
    return (rel.parent.parent if rel.parent.name == "finetune" else rel.parent).as_posix()


def _rung0_count(params: dict) -> int:
    """The rung-0 trials of a method (``tuning.settings``' count; the ones after them are promoted), 0 without
    tuning."""
    return tuning.settings(params)["trials"] if (params.get("tuning") or {}).get("enabled") else 0


def _made_from(clash: set[str], dirs: set[str], rung0: int) -> set[str]:
    """The stash's record folders made from one that clashes: a method's selection, final runs and (from a rung-0
    trial) promoted trials were made from the stash's trials, so beside another run's trial they would not hold
    (``tuning/<dataset>/<method>[/trial<i>]``, ``runs/<dataset>/<method>/seed<k>``)."""
    held = set()
    for c in clash:
        kind, *rest = c.split("/")
        if kind != "tuning" or len(rest) < 2:
            continue
        cell, rung0_trial = rest[:2], len(rest) == 3 and int(rest[2].removeprefix("trial")) < rung0
        for d in dirs - clash:
            k, *r = d.split("/")
            if r[:2] != cell or k not in ("tuning", "runs"):
                continue
            if k == "runs" or len(r) == 2 or (rung0_trial and int(r[2].removeprefix("trial")) >= rung0):
                held.add(d)
    return held


def _files_of(folder: Path):
    """The files of a record folder: a run's (its finetune/ too), a trial's, or a method's tuning folder, whose
    selection is its own record while the trial folders under it are theirs."""
    if folder.is_dir():
        yield from (f for f in folder.rglob("*") if f.is_file()
                    and not f.relative_to(folder).parts[0].startswith("trial"))


def _clashes(files: list[Path], staged: Path, root: Path) -> set[str]:
    """The record folders under ``root`` that hold another run: a file the stash would restore there exists
    with other content, or none of its files is there but the folder holds others (a model, a checkpoint)."""
    groups: dict[str, list[Path]] = {}
    for f in files:
        groups.setdefault(_record_dir(f, staged), []).append(f)
    clash = set()
    for d, fs in groups.items():
        there = [f for f in fs if (root / f.relative_to(staged)).is_file()]
        if any(not _same(root / f.relative_to(staged), f) for f in there):
            clash.add(d)
        elif not there and any(_files_of(root / d)):
            clash.add(d)
    return clash
