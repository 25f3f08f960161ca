"""Every artifact checked against what made it: content digests written by the step that makes a record.

A JSON record (a run's ``metrics.json``, a count-based reference, a matrix fit, a tuning selection) carries
``content_sha256``: the sha256 of its own canonical JSON without that key, so a hand edit of any number in it
is refused by the steps that read it. A record also names the sha256 of the files it was made beside and
that are read with it (a run's ``history.csv``; ``bench.json`` its ``bench.csv``; ``summary.json`` each table
of the summary). The digests are never part of a config hash (published run hashes do not move). They guard
against accidental edits and mixed folders, not against someone who rewrites the digest too.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from .errors import ArtifactError

SEAL = "content_sha256"


class DigestError(ArtifactError):
    """An artifact whose content is not what the step that wrote it recorded."""


def file_digest(path: str | Path, algo: str = "sha256") -> str:
    """A file's digest (``algo``: any of hashlib's), read in 1 MiB blocks (a corpus download may be large)."""
    h = hashlib.new(algo)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def sha256_of(path: str | Path) -> str:
    return file_digest(path, "sha256")


def _content_digest(obj: dict) -> str:
    from .atomic import _finite, _json_default

    body = {k: v for k, v in obj.items() if k != SEAL}
    text = json.dumps(_finite(body), sort_keys=True, separators=(",", ":"), default=_json_default, allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def seal(obj: dict) -> dict:
    """``obj`` with its content digest (what :func:`check_seal` holds it to)."""
    return {**{k: v for k, v in obj.items() if k != SEAL}, SEAL: _content_digest(obj)}


def sealed(obj: dict) -> bool:
    return isinstance(obj, dict) and obj.get(SEAL) == _content_digest(obj)


def same_content(a: dict, b: dict) -> bool:
    """Two records with the same content, sealed or not."""
    return _content_digest(a) == _content_digest(b)


def check_seal(path: str | Path, obj: dict, rerun: str, required: bool = True) -> None:
    """Refuse a record whose content is not what its writer sealed, or that carries no seal, in one line
    (``required=False``: a record from before digests passes, where remaking it means retraining)."""
    if SEAL not in obj and not required:
        return
    if SEAL not in obj:
        raise DigestError(f"{path} carries no content digest (written by hand, or by a version before digests): "
                          f"rerun {rerun}")
    if not sealed(obj):
        raise DigestError(f"{path}: its content is not what the step that wrote it recorded (content_sha256 "
                          f"differs: edited after it was written): rerun {rerun}")


def check_file(path: str | Path, digest: str | None, recorded_in: str | Path, rerun: str) -> None:
    """Refuse a file whose sha256 is not the one ``recorded_in`` holds for it (no digest recorded: nothing to
    check)."""
    if digest is not None and sha256_of(path) != digest:
        raise DigestError(f"{path} is not the file {recorded_in} was made with (its sha256 differs: edited, or "
                          f"from another run): rerun {rerun}")
