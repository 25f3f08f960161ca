"""Every step checks that its inputs were made by the config it runs with, and says how to rebuild.

- ``data/raw/<ds>/fetched.json``: the hash of the corpus config (and data seed) that fetched it;
  for a ``local`` corpus, ``source.json`` also holds the sha256 of the user's files, re-hashed here.
- ``data/prepared/<ds>/meta.json``: the hash of the data config (corpus, tokenizer, noise, seed).
- ``model.pt`` / ``train.json``: the hash of the whole run config.
A mismatch is a ``StaleError``: one line naming the artifact, both hashes and the command that rebuilds.
"""
from __future__ import annotations

import json
from pathlib import Path

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


def check_raw(params: dict, dataset: str) -> Path:
    raw = paths.raw_dir(params, dataset)
    rec = raw / FETCHED
    if not rec.exists():
        raise StaleError(f"{raw} has no {FETCHED} (not fetched, or by an older version): run {_rebuild('fetch', dataset)}")
    got = json.loads(rec.read_text())["config_hash"]
    want = config_hash(fetch_config(params, dataset))
    if got != want:
        raise StaleError(f"{raw} was fetched under another corpus config (hash {got}; this config: {want}): "
                         f"rerun {_rebuild('fetch', dataset)}")
    src = raw / "source.json"
    source = json.loads(src.read_text()) if src.exists() else {}
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
    meta = prepared / "meta.json"
    if not meta.exists():
        raise StaleError(f"{meta} is missing: run {_rebuild('prepare', dataset)} first")
    got = json.loads(meta.read_text())["config_hash"]
    want = config_hash(data_config(params, dataset))
    if got != want:
        raise StaleError(f"{prepared} was prepared under another data config (hash {got}; this config: {want}): "
                         f"rerun {_rebuild('prepare', dataset)}")
    return prepared


def check_model(path: Path, stored_hash: str, cfg: dict, rebuild: str) -> None:
    want = config_hash(cfg)
    if stored_hash != want:
        raise StaleError(f"{path} was trained under another config (hash {stored_hash}; this config: {want}): "
                         f"rerun `{rebuild}` (or `snakemake`)")


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
