"""Every published number is read through its seal: a publication's files are checked against the digests
written when they were made before any table, report or README block is drawn from them.

A publication made since 2026-12-01 carries its seal in ``provenance.json``: ``digests`` (each copied file's
sha256) and the provenance's own ``content_sha256``. Publications from before are listed by digest in
``benchmarks/legacy-digests.json`` (every file of theirs, as committed, by ``<publication>/<file>``); a file of a publication that is in
neither is refused. A seal is the file's own digest, so whoever edits a file can rewrite it too: a committed
publication's file that differs from what git holds at HEAD is refused as well, unless the command at work is
writing it (``publish`` and ``restate``, :func:`~pipeline_src.io.tracked.allow_tracked`) or the reader says so
(``LMBENCH_ACCEPT_UNCOMMITTED=1``, e.g. between a restate and its commit).
"""
from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from ..io import paths
from ..io.artifacts import read_json
from ..io.digests import SEAL, sealed, sha256_of
from ..io.errors import ArtifactError
from ..io.paths import REPOSITORY

LEGACY = REPOSITORY / "benchmarks" / "legacy-digests.json"
ACCEPT = "LMBENCH_ACCEPT_UNCOMMITTED"


@lru_cache(maxsize=1)
def _legacy() -> dict:
    return read_json(LEGACY)["files"] if LEGACY.is_file() else {}


def _key(path: Path) -> str:
    """A publication's file as the legacy list names it: ``<publication>/<file>`` (a copy of a publication under its
    own name, e.g. in a test's folder, is held to the same digests; under another name it is listed nowhere)."""
    return f"{path.parent.name}/{path.name}"


def _fix(pub: Path) -> str:
    """What to do about a publication's file that is not as published: where git tracks the publication, git
    restores it (named as its checkout knows it, a link resolved); a copy git does not track (a profile's folder
    copied elsewhere, an uncommitted publication) is restored from its source."""
    from ..io.tracked import repository_of, tracked_under

    where = pub.resolve()
    root = repository_of(where)
    if root is None or not tracked_under(where):
        return "restore it from the publication it was copied from (git does not track this copy), or make it again"
    return f"restore it (`git -C {root} checkout -- {where.relative_to(root)}`) or republish it"


def publication_files(pub: Path) -> list[Path]:
    """The files a publication holds: provenance.json and every table it copied (each must be there)."""
    prov = read_json(pub / paths.PROVENANCE, "files", advice=lambda: _fix(pub))  # (git asked only for a bad file)
    for f in prov["files"]:
        if not (pub / f).is_file():
            raise ArtifactError(f"{pub / f}: listed by {pub / paths.PROVENANCE} but missing (deleted, or not a "
                                f"file): {_fix(pub)}")
    return [pub / paths.PROVENANCE, *(pub / f for f in prov["files"])]


_CHECKED: set = set()  # (publication, its files' sizes and times, the override): checked already in this process


def check_publication(pub: str | Path) -> None:
    """Refuse, in one line, a publication any of whose files is not what was published: its seal differs (or it
    has none and is not a listed legacy file), or it is committed and differs from git's HEAD."""
    pub = Path(pub)
    if not (pub / paths.PROVENANCE).is_file():
        raise ArtifactError(f"{pub} is not a publication (no provenance.json)")
    stamp = (pub.resolve(), os.environ.get(ACCEPT), *((p.name, p.stat().st_mtime_ns, p.stat().st_size)
                                                    for p in publication_files(pub)))
    if stamp in _CHECKED:
        return
    _check(pub)
    _CHECKED.add(stamp)


def _check(pub: Path) -> None:
    from ..io.tracked import _allowed, modified_tracked

    prov = read_json(pub / paths.PROVENANCE, advice=lambda: _fix(pub))
    if SEAL in prov:
        if not sealed(prov):
            raise ArtifactError(f"{pub / paths.PROVENANCE}: its content is not what publish wrote (content_sha256 "
                                f"differs: edited since); {_fix(pub)}")
        digests = prov.get("digests") or {}
        for f in prov["files"]:
            path = pub / f
            if f not in digests:
                raise ArtifactError(f"{path}: listed by {pub / paths.PROVENANCE} without a digest; {_fix(pub)}")
            if sha256_of(path) != digests[f]:
                raise ArtifactError(f"{path}: not the file that was published (its sha256 differs from the one "
                                    f"{pub / paths.PROVENANCE} recorded: edited since); {_fix(pub)}")
    else:
        legacy = _legacy()
        for path in publication_files(pub):
            want = legacy.get(_key(path))
            if want is None:
                raise ArtifactError(f"{path} carries no seal (a publication from before seals, not listed in "
                                    f"{LEGACY.relative_to(REPOSITORY)}): republish it with the current code")
            if sha256_of(path) != want:
                raise ArtifactError(f"{path}: not the file that was published (its sha256 differs from the one "
                                    f"{LEGACY.relative_to(REPOSITORY)} lists: edited since); {_fix(pub)}")
    if os.environ.get(ACCEPT) == "1":
        return
    edited = [p for p in modified_tracked(publication_files(pub)) if not _allowed(REPOSITORY / p)]
    if edited:
        raise ArtifactError(f"{edited[0]}: differs from what git holds at HEAD (edited, not committed{'; and ' + str(len(edited) - 1) + ' more' if len(edited) > 1 else ''}): "
                            f"`git checkout -- {edited[0]}` to read the committed numbers, commit it, or set "
                            f"{ACCEPT}=1 to read it as it is")


def seal_provenance(prov: dict, pub: Path) -> dict:
    """``prov`` with the digest of every file it lists and its own seal (what :func:`check_publication` holds)."""
    from ..io.digests import seal

    return seal({**prov, "digests": {f: sha256_of(pub / f) for f in prov["files"] if (pub / f).is_file()}})
