"""Atomic file output: every artifact appears whole or not at all, and nothing but the artifact is replaced.

Writers go to a temporary sibling and are renamed into place only after they succeeded, so an interrupted
step never leaves a half-written output behind (and a killed writer's temporary is removed by the next writer
of the same path). A file never replaces a directory and a directory never replaces a file; a directory output
replaces only an earlier copy of itself (one holding its ``marker`` file) or an empty directory, so a path that
points at a user's folder is refused, never emptied.
"""
from __future__ import annotations

import contextlib
import glob
import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

from .errors import OutputError
from .tracked import refuse_tracked


def check_file_output(path: str | os.PathLike) -> None:
    """Refuse, before any work, a file output where a directory stands (the working directory included), or
    over a file git tracks (``tracked.py``)."""
    path = Path(path)
    if path.is_dir():
        what = "the working directory" if path.resolve() == Path.cwd().resolve() else "an existing directory"
        raise OutputError(f"{path} is {what}: refusing to replace it with a file (name a file path)")
    refuse_tracked(path)


def check_dir_output(path: str | os.PathLike, marker: str) -> None:
    """Refuse a directory output where a file stands, or where a directory stands that is not an earlier
    output of the same step (no ``marker`` file in it) and is not empty."""
    path = Path(path)
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise OutputError(f"{path} is a file or a link: refusing to replace it with a directory")
    if path.is_dir() and not (path / marker).is_file() and any(path.iterdir()):
        raise OutputError(f"{path} is a directory this step did not write (no {marker} in it): refusing to "
                          f"replace it; move it away or choose another data_dir/results_dir")
    refuse_tracked(path, "replace")


def remove_leftovers(path: Path, suffix: str) -> None:
    """Remove the temporaries an earlier writer of ``path`` left when it was killed (SIGKILL, an abort, a node
    lost): each is named after its writer's process id, so a writer still at work keeps its own."""
    for t in path.parent.glob(f".{glob.escape(path.name)}.*{glob.escape(suffix)}"):
        pid = t.name[len(path.name) + 2:].split(".", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            shutil.rmtree(t, ignore_errors=True) if t.is_dir() else t.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = "", marker: str | None = None) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` on success.

    Without ``marker`` the caller writes a file there; with it, a directory that holds a file named
    ``marker`` (what makes an existing directory at ``path`` replaceable: an earlier copy of the same
    output). Both are checked before the work and again before the rename. On any exception the
    temporary is removed and ``path`` is left untouched.
    """
    path = Path(path)
    check = (lambda: check_dir_output(path, marker)) if marker else (lambda: check_file_output(path))
    check()
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_leftovers(path, ".tmp" + suffix)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp" + suffix, dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    tmp.unlink()  # callers create a file or a directory here themselves
    try:
        yield tmp
        check()
        if marker:
            if not (tmp / marker).is_file():
                raise OutputError(f"{path}: the step wrote no {marker}; nothing replaced")
            if path.is_dir():
                shutil.rmtree(path)
        elif tmp.is_dir():
            raise OutputError(f"{path}: the step wrote a directory where a file was declared; nothing replaced")
        os.replace(tmp, path)
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp.exists():
            tmp.unlink()


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


INFINITY = {"Infinity": math.inf, "-Infinity": -math.inf}  # how strict JSON carries an infinite value here


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Strict JSON (JSON has no NaN or infinity; Python's ``NaN`` and ``Infinity`` tokens are not JSON and
    break other readers): an infinity is a value (a test nll of a model that gave a test word probability 0)
    and is written as the string ``"Infinity"`` or ``"-Infinity"``, which :func:`~pipeline_src.io.artifacts.read_json`
    reads back as a float; a NaN is a missing value (a diverged run's) and is written as ``null``."""
    text = json.dumps(_finite(obj), indent=2, sort_keys=True, default=_json_default, allow_nan=False)
    write_text(path, text + "\n")


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        if math.isnan(obj):
            return None
        return obj if math.isfinite(obj) else ("Infinity" if obj > 0 else "-Infinity")
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    if hasattr(obj, "item") and getattr(obj, "ndim", 0) == 0:  # numpy / torch scalars
        return _finite(obj.item())
    return obj


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item"):  # numpy / torch scalars
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"cannot serialise {type(obj).__name__} to JSON")


LOCK = ".lock"


@contextlib.contextmanager
def exclusive(directory: str | os.PathLike, what: str) -> Iterator[None]:
    """Hold ``directory/.lock`` (host, process id, SLURM job id and restart count) while a step writes into
    ``directory``: a second process is refused with one line; a lock whose process is gone (same host), or that
    the same SLURM job left before it was requeued (a lower ``SLURM_RESTART_COUNT``, on any node), is stale and
    taken over. Two steps of one allocation (one job id, one restart count) exclude each other like any two."""
    import socket

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    lock = directory / LOCK
    me = {"host": socket.gethostname(), "pid": os.getpid(), "slurm_job": os.environ.get("SLURM_JOB_ID"),
          "slurm_restart": _int(os.environ.get("SLURM_RESTART_COUNT"))}
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            owner = _owner(lock)
            requeued = (me["slurm_job"] is not None and owner.get("slurm_job") == me["slurm_job"]
                        and _int(owner.get("slurm_restart")) < me["slurm_restart"])  # left by an earlier start
            if requeued or (owner.get("host") == me["host"] and not _alive(owner.get("pid"))):
                if _take_stale(lock, owner, me):  # stale: its process is gone
                    continue
                owner = _owner(lock)  # another process took it over between our read and our removal
            raise OutputError(f"{directory} is being written by another {what} (process {owner.get('pid', '?')} "
                              f"on {owner.get('host', '?')}, {lock}); wait for it, or delete {lock} if that "
                              f"process is gone") from None
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(me, f)
        except BaseException:  # a full disk: an empty lock left here would refuse every later run
            lock.unlink(missing_ok=True)
            raise
        break
    else:  # stale twice: another process took the lock over in between, and holds it now
        raise OutputError(f"{directory} is being written by another {what} ({lock} was taken over as this one "
                          f"started); wait for it, or delete {lock} if no process holds it")
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)


def holder(directory: str | os.PathLike) -> dict | None:
    """Who holds ``directory/.lock`` now (host, pid), or None: no lock, or one whose process on this host is gone."""
    import socket

    owner = _owner(Path(directory) / LOCK)
    if not owner or (owner.get("host") == socket.gethostname() and not _alive(owner.get("pid"))):
        return None
    return owner


def _owner(lock: Path) -> dict:
    """What a lock file says of its holder (host, pid, slurm_job); {} when it is gone, unreadable or not a record."""
    try:
        owner = json.loads(lock.read_text())
    except (OSError, ValueError):
        return {}
    return owner if isinstance(owner, dict) else {}


def _take_stale(lock: Path, owner: dict, me: dict) -> bool:
    """Remove a lock judged stale on what ``owner`` read, only if it still says so: it is renamed aside (one
    atomic step, so no two processes remove it both) and its content checked; a lock another process wrote since
    the read is put back, and False says the lock is held."""
    aside = lock.with_name(f"{lock.name}.stale-{me['host']}-{me['pid']}")
    try:
        os.rename(lock, aside)
    except FileNotFoundError:
        return True  # already removed by another: try to take it
    if _owner(aside) == owner:
        aside.unlink(missing_ok=True)
        return True
    try:
        os.link(aside, lock)  # a live holder's lock, back where it was (unless a third took the place meanwhile)
    except FileExistsError:
        pass
    except OSError:  # a file system without hard links: put it back by renaming
        os.replace(aside, lock)
        return False
    aside.unlink(missing_ok=True)
    return False


def _int(value) -> int:
    """A restart count from the environment or a lock (absent or unreadable: 0, the first start)."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _alive(pid) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
