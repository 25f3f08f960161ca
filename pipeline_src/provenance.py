"""Every step checks that its inputs were made by the config it runs with, and says how to rebuild.

- ``data/raw/<ds>/fetched.json``: the hash of the corpus config (and data seed) that fetched it;
  for a ``local`` corpus, ``source.json`` also holds the sha256 of the user's files, re-hashed here.
- ``data/prepared/<ds>/meta.json``: the hash of the data config (corpus, tokenizer, noise, seed).
- ``model.pt`` / ``train.json``: the hash of the whole run config.
A mismatch is a ``StaleError``: one line naming the artifact, both hashes and the command that rebuilds.
"""
from __future__ import annotations

import os
from pathlib import Path

from .artifacts import read_json
from . import paths
from .config import ConfigError, config_hash, data_config, run_hash, train_hash

FETCHED = "fetched.json"


class StaleError(ConfigError):
    """An input artifact was made by another config, or its source changed since."""


def fetch_config(params: dict, dataset: str) -> dict:
    """What determines a dataset's raw files: its corpus and the data seed."""
    return {"corpus": params["datasets"][dataset]["corpus"], "seed": params["seed"]}


def record_fetch(params: dict, dataset: str) -> None:
    from .atomic import write_json

    cfg = fetch_config(params, dataset)
    write_json(paths.raw_dir(params, dataset) / FETCHED, {**cfg, "config_hash": config_hash(cfg)})


def _rebuild(step: str, dataset: str) -> str:
    return f"`python -m pipeline_src {step} --dataset {dataset}` (or `snakemake`)"


def _record_hash(record: Path, missing: str) -> str:
    """The config hash a step wrote into ``record``; ``missing`` says what to do when there is none."""
    if not record.exists():
        raise StaleError(missing)
    return read_json(record, "config_hash")["config_hash"]


def _same_config(artifact: Path, got: str, cfg, made: str, rebuild: str) -> None:
    """Refuse ``artifact`` when the hash it records is not ``cfg``'s, naming both and the rebuild."""
    want = config_hash(cfg)
    if got != want:
        raise StaleError(f"{artifact} was {made} under another config (hash {got}; this config: {want}): "
                         f"rerun {rebuild}")


def check_raw(params: dict, dataset: str) -> Path:
    raw = paths.raw_dir(params, dataset)
    got = _record_hash(raw / FETCHED, f"{raw} has no {FETCHED} (not fetched, or by an older version): "
                                      f"run {_rebuild('fetch', dataset)}")
    _same_config(raw, got, fetch_config(params, dataset), "fetched", _rebuild("fetch", dataset))
    src = raw / "source.json"
    source = read_json(src) if src.exists() else {}
    if source.get("corpus") == "local":
        from .corpora import file_digest

        for split, f in source["files"].items():
            origin = Path(f["from"])
            if not origin.is_file():
                raise StaleError(f"{raw}: its {split} file {origin} no longer exists: fix corpus.{split} or rerun "
                                 f"{_rebuild('fetch', dataset)}")
            if file_digest(origin, "sha256") != f["sha256"]:
                raise StaleError(f"{origin} changed since it was fetched into {raw}: rerun {_rebuild('fetch', dataset)}")
            copy = raw / f"{split}.txt"
            if copy.is_file() and file_digest(copy, "sha256") != f["sha256"]:
                raise StaleError(f"{copy} is not the copy fetch made of {origin} (its sha256 differs: edited): rerun "
                                 f"{_rebuild('fetch', dataset)}")
    return raw


def check_prepared(params: dict, dataset: str) -> Path:
    """The prepared data exists, was made by this data config, from raw files that are still current."""
    check_raw(params, dataset)
    prepared = paths.prepared_dir(params, dataset)
    got = _record_hash(prepared / "meta.json", f"{prepared / 'meta.json'} is missing: run "
                                                f"{_rebuild('prepare', dataset)} first")
    _same_config(prepared, got, data_config(params, dataset), "prepared", _rebuild("prepare", dataset))
    from .digests import check_file

    for name, digest in (read_json(prepared / "meta.json").get("files") or {}).items():  # none before digests
        path = prepared / name
        if not path.is_file():
            raise StaleError(f"{path} is missing: rerun {_rebuild('prepare', dataset)}")
        check_file(path, digest, prepared / "meta.json", _rebuild("prepare", dataset))
    return prepared


def check_model(path: Path, ckpt: dict, cfg: dict, rebuild: str) -> None:
    """Refuse a model file that another training config made; evaluation settings may differ
    (:func:`~pipeline_src.config.train_hash`): a changed evaluation re-evaluates, it does not retrain."""
    if train_hash(ckpt.get("config") or {}) != train_hash(cfg):
        raise StaleError(f"{path} was trained under another config (hash {ckpt['config_hash']}; this config: "
                         f"{config_hash(cfg)}): rerun `{rebuild}` (or `snakemake`)")


class UnreadableError(ConfigError):
    """A torch file that cannot be loaded (truncated, corrupt, not a checkpoint)."""


def load_torch(path: Path, map_location, what_to_do: str) -> dict:
    """``torch.load`` with one clear line instead of the stream reader's traceback."""
    import torch

    if not path.exists():
        raise UnreadableError(f"{path} is missing: {what_to_do}")
    try:
        obj = torch.load(path, map_location=map_location, weights_only=False)
    except Exception as e:  # torch raises RuntimeError, EOFError, pickle errors ... for a damaged file
        raise UnreadableError(f"cannot read {path} ({type(e).__name__}: {str(e).splitlines()[0][:120]}): "
                              f"the file is truncated or corrupt; {what_to_do}") from None
    if not isinstance(obj, dict) or "config_hash" not in obj:
        raise UnreadableError(f"{path} is not a file this pipeline wrote: {what_to_do}")
    return obj


def step_hashes(params: dict) -> dict[Path, str]:
    """Every hash file's path and content: per final run, the hash of what trains it (``.train``) and of
    the whole run config (``.evaluate``); the bench's and the matrix experiment's settings, with only the
    methods each reads. A tuned run's file holds its params-file settings (its selection is an input too)."""
    from .config import run_config, run_datasets, run_pairs, run_seeds
    from .reference import reference_config

    out = {}
    for ds, method in run_pairs(params):
        for seed in run_seeds(params):
            cfg = run_config(params, ds, method, seed)
            out[paths.run_hash_path(params, ds, method, seed, "train")] = train_hash(cfg)
            out[paths.run_hash_path(params, ds, method, seed, "evaluate")] = run_hash(cfg)
    for ds in run_datasets(params):
        for name in params.get("references", {}):
            out[paths.reference_hash_path(params, ds, name)] = config_hash(reference_config(params, ds, name))
    for step in ("bench", "matrix"):
        used = {m: params["methods"][m] for m in params[step]["methods"]}
        out[paths.hashes_dir(params) / step] = config_hash({step: params[step], "methods": used, "seed": params["seed"]})
    out.update(born_old(params))
    return out


def born_old(params: dict) -> dict[Path, str]:
    """The hash files added on 2026-11-26 (data, trials, statistics), so that every setting a rule reads is an
    input file and Snakemake needs no `params` rerun trigger (which reran what `dvc repro` had already remade).
    A new one is written with the time 0: its first appearance is not a change, so a results folder made before
    it is not rerun; a later change of its content is."""
    from .config import data_config, run_datasets, run_pairs

    out = {paths.data_hash_path(params, ds): config_hash(data_config(params, ds)) for ds in run_datasets(params)}
    if (params.get("tuning") or {}).get("enabled"):
        from .runspec import resolve_run

        for ds, method in run_pairs(params):
            for t in range(params["tuning"]["trials"]):
                out[paths.trial_hash_path(params, ds, method, t)] = resolve_run(params, ds, method, trial=t).train_hash
    out[paths.statistics_hash_path(params)] = config_hash(params["statistics"])
    return out


SUMMARY_SENTINEL = "summary"


def record_hashes(params: dict) -> list[Path]:
    """Write the hash files whose content changed (their time is what Snakemake compares, their content what
    DVC does), and mark a partial summary made by hand (``summarize --partial``) for a rebuild; return the
    files written. Snakemake calls this when it reads the DAG; DVC's ``hashes`` stage when params.yaml changed."""
    from .atomic import write_text

    want = {path: f"{h}\n" for path, h in step_hashes(params).items()}
    sentinel = paths.hashes_dir(params) / SUMMARY_SENTINEL
    info = paths.summary_path(params).with_suffix(".json")
    made = read_json(info, "partial") if info.is_file() else {}
    gone = [r for r in made.get("records") or {} if not (Path(params["results_dir"]) / r).is_file()]
    if made.get("partial") or gone:  # a newer sentinel than summary.csv: Snakemake resummarises every run, and
        # remakes a run whose folder was deleted (without this it said "Nothing to be done" and kept the run)
        want[sentinel] = (f"rebuild the {'partial ' if made.get('partial') else ''}summary of "
                          f"{info.stat().st_mtime_ns}{f' ({len(gone)} runs gone)' if gone else ''}\n")
    elif not sentinel.exists():
        want[sentinel] = "complete\n"
    written = []
    old = set(born_old(params))
    for path, text in want.items():
        if not path.is_file() or path.read_text() != text:
            new = not path.is_file()
            write_text(path, text)
            if new and path in old:
                os.utime(path, (0, 0))
            written.append(path)
    return written


def dvc_record(params_file: str, root: Path = Path(".")) -> str | None:
    """After Snakemake ran ``params.yaml`` in a DVC repository, ``dvc commit`` records what it made in
    dvc.lock, so ``dvc status`` lists only what really differs from the current settings (DVC otherwise has no
    record of outputs it did not make, and calls every stage changed). Another params file is not what
    dvc.yaml describes: nothing is recorded. Returns a line to print, or None when there is no DVC here."""
    import shutil
    import subprocess
    import sys

    dvc = shutil.which("dvc", path=str(Path(sys.executable).parent)) or shutil.which("dvc")
    if not (root / ".dvc").is_dir() or dvc is None:
        return None
    if Path(params_file).resolve() != (root / "params.yaml").resolve():
        return f"dvc.lock not updated: this run used {params_file}, and dvc.yaml describes params.yaml"
    r = subprocess.run([dvc, "commit", "--force", "--quiet"], cwd=root, capture_output=True, text=True)
    if r.returncode:
        why = (r.stderr.strip().splitlines() or ["?"])[-1]
        return f"warning: `dvc commit` failed ({why}); `dvc status` will list stages Snakemake made as changed"
    return "recorded Snakemake's outputs in dvc.lock (`dvc commit`): `dvc status` lists only what differs"
