"""Checkpoints: written atomically with the previous generation kept beside (``checkpoint.prev.pt``), so a
damaged newest file is not the end of a run; resumed from the newest readable one."""
from __future__ import annotations

import errno
import os
import shutil
import sys
from pathlib import Path

import torch

from ..atomic import atomic_path
from ..errors import ResumeError, Stopped  # noqa: F401  (raised here, named by the loop)

CHECKPOINT = "checkpoint.pt"
PREVIOUS = "checkpoint.prev.pt"  # the generation before checkpoint.pt


def save(path: Path, obj: dict) -> None:
    with atomic_path(path) as tmp:
        try:
            torch.save(obj, tmp)
        except RuntimeError as e:  # torch's writer reports a short write (a full disk) as "unexpected pos"
            free = shutil.disk_usage(tmp.parent).free
            why = str(e).splitlines()[0][:120]
            raise OSError(errno.ENOSPC if free < (1 << 20) else errno.EIO,
                          f"torch.save failed ({why}; {free:,} bytes free)", str(path)) from None


def save_generation(out_dir: Path, obj: dict) -> None:
    """``checkpoint.pt`` anew, the one it replaces kept as the previous generation."""
    path = out_dir / CHECKPOINT
    if path.exists():
        os.replace(path, out_dir / PREVIOUS)
    save(path, obj)


def remove(out_dir: Path) -> None:
    """Both generations (a finished run, or one that diverged and must not be resumed into the blow-up)."""
    (out_dir / CHECKPOINT).unlink(missing_ok=True)
    (out_dir / PREVIOUS).unlink(missing_ok=True)


def load_newest(out_dir: Path, device: torch.device) -> dict | None:
    """The newest readable checkpoint: ``checkpoint.pt``, else the previous generation, else None
    (start afresh). An unreadable file is set aside as ``<name>.corrupt`` and the choice is said."""
    from ..provenance import UnreadableError, load_torch

    for p in (out_dir / CHECKPOINT, out_dir / PREVIOUS):
        if not p.exists():
            continue
        try:
            ck = load_torch(p, device, "")
        except UnreadableError as e:
            bad = p.with_name(p.name + ".corrupt")
            os.replace(p, bad)
            print(f"warning: {str(e).split(': the file')[0]}: set aside as {bad}", file=sys.stderr)
            continue
        ck["_path"] = p
        return ck
    if any((out_dir / f"{n}.corrupt").exists() for n in (CHECKPOINT, PREVIOUS)):
        print(f"warning: no readable checkpoint left in {out_dir}: training starts afresh", file=sys.stderr)
    return None
