"""Every step checks that its inputs were made by the config it runs with, and says how to rebuild.

- ``data/raw/<ds>/fetched.json``: the hash of the corpus config (and data seed) that fetched it;
  for a ``local`` corpus, ``source.json`` also holds the sha256 of the user's files, re-hashed here.
- ``data/prepared/<ds>/meta.json``: the hash of the data config (corpus, tokenizer, noise, seed).
- ``model.pt`` / ``train.json``: the hash of the whole run config.
A mismatch is a ``StaleError``: one line naming the artifact, both hashes and the command that rebuilds.
"""
from __future__ import annotations

from pathlib import Path

from .artifacts import read_json
from . import paths
from .config import ConfigError, config_hash, data_config

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
    return raw


def check_prepared(params: dict, dataset: str) -> Path:
    """The prepared data exists, was made by this data config, from raw files that are still current."""
    check_raw(params, dataset)
    prepared = paths.prepared_dir(params, dataset)
    got = _record_hash(prepared / "meta.json", f"{prepared / 'meta.json'} is missing: run "
                                                f"{_rebuild('prepare', dataset)} first")
    _same_config(prepared, got, data_config(params, dataset), "prepared", _rebuild("prepare", dataset))
    return prepared


def check_model(path: Path, stored_hash: str, cfg: dict, rebuild: str) -> None:
    _same_config(path, stored_hash, cfg, "trained", f"`{rebuild}` (or `snakemake`)")


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
