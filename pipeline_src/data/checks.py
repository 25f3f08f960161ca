"""Every step checks that its inputs were made by the config it runs with, and says how to rebuild.

- ``data/raw/<ds>/fetched.json``: the hash of the corpus config (and data seed) that fetched it;
  for a ``local`` corpus, ``source.json`` also holds the sha256 of the user's files, re-hashed here.
- ``data/prepared/<ds>/meta.json``: the hash of the data config (corpus, tokenizer, noise, seed).
- ``model.pt`` / ``train.json``: the hash of the whole run config.
A mismatch is a ``StaleError``: one line naming the artifact, both hashes and the command that rebuilds.
"""
from __future__ import annotations

from pathlib import Path

from ..config import config_hash, data_config
from ..io import paths
from ..io.artifacts import read_json
from ..io.errors import StaleError

FETCHED = paths.FETCHED


MIN_SCORED_TOKENS = 100  # a perplexity from fewer tokens is noise, not a result (third probe: 4 test tokens)


def scored_tokens(n_tokens: int, batch_size: int) -> int:
    """How many tokens an evaluation with ``batchify(., batch_size)`` scores: the count of
    ``batching.scored_positions`` (here, where no torch is imported)."""
    return max(n_tokens // batch_size - 1, 0) * batch_size


def fetch_config(params: dict, dataset: str) -> dict:
    """What determines a dataset's raw files: its corpus and the data seed."""
    return {"corpus": params["datasets"][dataset]["corpus"], "seed": params["seed"]}


def record_fetch(params: dict, dataset: str) -> None:
    from ..io.atomic import write_json

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
    src = raw / paths.SOURCE
    source = read_json(src) if src.exists() else {}
    if source.get("corpus") == "local":
        from ..io.digests import file_digest

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
    got = _record_hash(prepared / paths.META, f"{prepared / 'meta.json'} is missing: run "
                                                f"{_rebuild('prepare', dataset)} first")
    _same_config(prepared, got, data_config(params, dataset), "prepared", _rebuild("prepare", dataset))
    from ..io.digests import check_file

    for name, digest in (read_json(prepared / paths.META).get("files") or {}).items():  # none before digests
        path = prepared / name
        if not path.is_file():
            raise StaleError(f"{path} is missing: rerun {_rebuild('prepare', dataset)}")
        check_file(path, digest, prepared / paths.META, _rebuild("prepare", dataset))
    return prepared


def token_difference(earlier: dict, now: dict) -> str | None:
    """What tells two preparations' meta.json apart besides noise.npz's digest (a file's digest or a field), None
    when nothing does: the same data. noise.npz is a function of the train counts (held equal through train.npy and
    vocab.txt) and of the config's noise alphas (held equal through the config), so it can differ only in the last
    bits of the float kernels that made it (NumPy's SVML kernels on AVX-512 before data went through the C
    library)."""
    a, b = earlier.get("files") or {}, now.get("files") or {}
    if not a:
        return "its file digests (none recorded)"
    for name in sorted((set(a) | set(b)) - {paths.NOISE}):
        if a.get(name) != b.get(name):
            return name
    fields = sorted((set(earlier) | set(now)) - {"files", "warnings"})  # warnings: of the data and the eval batch
    return next((key for key in fields if earlier.get(key) != now.get(key)), None)


def scored_data(params: dict, dataset: str, digest: str) -> str | None:
    """How the data a record was scored on (the sha256 of its meta.json) stands to ``dataset``'s prepared data
    now: "current" (the same meta.json), "same tokens" (an earlier preparation, kept as
    ``earlier-data/<dataset>.meta.json`` beside the records, has that digest and no :func:`token_difference`),
    or what differs from the data prepared now (a file or a field: the record is stale)."""
    from ..io.digests import sha256_of

    meta = paths.prepared_dir(params, dataset) / paths.META
    if sha256_of(meta) == digest:
        return "current"
    earlier = paths.earlier_meta_path(params, dataset)
    if not (earlier.is_file() and sha256_of(earlier) == digest):
        return "meta.json"
    differs = token_difference(read_json(earlier), read_json(meta))
    return "same tokens" if differs is None else differs
