"""Committed files are protected by content, not by name: no step writes over or deletes a file that git
tracks, in this checkout or in any other (``git ls-files`` of the repository the path lies in), whatever
the file is called.

Every output goes through :mod:`.atomic`, whose checks call :func:`refuse_tracked`. The few commands that
exist to write committed files say which, for the length of their work (:func:`allow_tracked`):
``publish`` and ``restate`` their own publication and the README/docs tables, ``stash`` its own records,
``resolve --out params.yaml`` the params file DVC reads. Each of those checks first that it writes what the
same config made (``reporting/publish.py``).
"""
from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path
from typing import Iterator

from .errors import OutputError

_ALLOWED: list[Path] = []  # resolved paths (files or folders) a command may write although git tracks them
_LISTS: dict[Path, tuple[float, frozenset[str]]] = {}  # repository root -> (its index's mtime, tracked paths)
REPOSITORY = Path(__file__).resolve().parents[2]  # pipeline_src/io/tracked.py -> this checkout
OWN_FOLDERS = ("data", "results")  # the repository's folders the pipeline writes into (ignored by git)
CODE_FOLDERS = ("benchmarks", "config", "docs", "envs", "pipeline_src", "profiles", "slurm", "tests", "workflow")


def committed_folders(root: Path = REPOSITORY) -> set[str]:
    """The top-level folders of the checkout at ``root`` that hold committed files (git's list where there is
    one; this checkout's code folders where git cannot say)."""
    files = tracked_files(root)
    if not files:
        return set(CODE_FOLDERS) if root == REPOSITORY else set()
    return {line.split("/", 1)[0] for line in files if "/" in line} - set(OWN_FOLDERS)


def repository_of(path: str | os.PathLike) -> Path | None:
    """The root of the git checkout ``path`` lies in (a ``.git`` folder or worktree file), None outside any."""
    p = Path(path).resolve()
    for d in (p, *p.parents):
        if (d / ".git").exists():
            return d
    return None


def _index(root: Path) -> Path | None:
    git = root / ".git"
    if git.is_dir():
        return git / "index"
    try:  # a worktree: ".git" is a file "gitdir: <path>"
        gitdir = Path(git.read_text().split(":", 1)[1].strip())
    except (OSError, IndexError):
        return None
    return (root / gitdir if not gitdir.is_absolute() else gitdir) / "index"


def tracked_files(root: Path) -> frozenset[str]:
    """The paths (relative, posix) git tracks in the checkout at ``root``; read again when its index changes."""
    index = _index(root)
    try:
        stamp = index.stat().st_mtime_ns if index is not None else 0.0
    except OSError:
        stamp = 0.0
    cached = _LISTS.get(root)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, timeout=60)
        files = frozenset(out.stdout.decode("utf-8", "surrogateescape").split("\0")) - {""} \
            if out.returncode == 0 else frozenset()
    except (OSError, subprocess.SubprocessError):
        files = frozenset()  # no git here: nothing is known to be tracked
    _LISTS[root] = (stamp, files)
    return files


def uncommitted(path: str | os.PathLike) -> bool:
    """Whether ``path``, a file git tracks, differs from what git holds for it at HEAD (an edit not yet committed,
    which a writer allowed to replace the committed file would lose). False where git cannot say."""
    p = Path(path).resolve()
    root = repository_of(p)
    if root is None or not p.is_file():
        return False
    try:
        out = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", p.relative_to(root).as_posix()], cwd=root,
                             capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 1


def tracked_under(path: str | os.PathLike) -> list[str]:
    """The tracked files that are ``path`` or lie under it (a folder), as paths relative to their checkout."""
    p = Path(path).resolve()
    root = repository_of(p.parent if not p.exists() else p)
    if root is None or p == root:
        return [] if root is None else sorted(tracked_files(root))
    rel = p.relative_to(root).as_posix()
    files = tracked_files(root)
    if rel in files:
        return [rel]
    prefix = rel + "/"
    return sorted(f for f in files if f.startswith(prefix)) if p.is_dir() else []


def _allowed(p: Path) -> bool:
    return any(p == a or a in p.parents for a in _ALLOWED)


def refuse_tracked(path: str | os.PathLike, action: str = "write over") -> None:
    """Refuse, in one line, to ``action`` a path that is (or holds) a file git tracks, unless the command at
    work was allowed to (:func:`allow_tracked`)."""
    p = Path(path).resolve()
    if _allowed(p):
        return
    _refuse_through_link(Path(path), p, action)
    hit = tracked_under(p)
    if hit:
        root = repository_of(p.parent if not p.exists() else p)
        what = f"{hit[0]} ({len(hit)} committed files)" if len(hit) > 1 or hit[0] != p.relative_to(root).as_posix() \
            else hit[0]
        raise OutputError(f"{path}: would {action} {what}, which git tracks in {root}: no step writes or deletes "
                          f"committed files; choose an output outside them (results/, results-NAME/, a folder "
                          f"outside the repository)")


def _refuse_through_link(path: Path, resolved: Path, action: str) -> None:
    """Refuse a path that a symbolic link leads into a checkout's committed folder (docs/, config/, ...): a new
    file there is no one's output, although git tracks no file of that name yet."""
    root = repository_of(resolved.parent)
    if root is None or resolved.parent == root:
        return
    top = resolved.relative_to(root).parts[0]
    if top not in committed_folders(root) | {".git"}:
        return
    folder = root / top
    literal = Path(os.path.abspath(path))

    def leads_in(link: Path) -> bool:  # from outside the folder: to it, or from elsewhere in its checkout
        at = link.parent.resolve()
        return not at.is_relative_to(folder) and (link.resolve().is_relative_to(folder) or at.is_relative_to(root))

    led = any(a.is_symlink() and leads_in(a) for a in (literal, *literal.parents))  # not a folder reached by name
    if not led:
        return
    raise OutputError(f"{path}: would {action} {resolved}, which a symbolic link leads into {root}'s {top}/, whose "
                      f"files git tracks: no step writes into committed folders; point the link (or the output) "
                      f"outside them (results/, results-NAME/, a folder outside the repository)")


@contextlib.contextmanager
def allow_tracked(*where: str | os.PathLike) -> Iterator[None]:
    """Let this process write (and replace) tracked files at or under ``where`` while the block runs."""
    added = [Path(w).resolve() for w in where]
    _ALLOWED.extend(added)
    try:
        yield
    finally:
        for a in added:
            _ALLOWED.remove(a)


def modified_tracked(paths: list[Path]) -> list[str]:
    """Of ``paths``, the tracked files whose content differs from what git holds for them at HEAD (edited, not
    committed), as paths relative to their checkout."""
    by_root: dict[Path, list[str]] = {}
    for p in paths:
        p = Path(p).resolve()
        root = repository_of(p)
        if root is not None and p.relative_to(root).as_posix() in tracked_files(root):
            by_root.setdefault(root, []).append(p.relative_to(root).as_posix())
    changed = []
    for root, rels in by_root.items():
        try:
            out = subprocess.run(["git", "diff", "--name-only", "HEAD", "--", *rels], cwd=root, capture_output=True,
                                 text=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            continue
        if out.returncode == 0:
            changed += [line for line in out.stdout.splitlines() if line]
    return changed
