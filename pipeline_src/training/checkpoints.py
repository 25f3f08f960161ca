"""Checkpoints: written atomically with the previous generation kept beside (``checkpoint.prev.pt``), so a
damaged newest file is not the end of a run; resumed from the newest readable one."""
from __future__ import annotations

import errno
import os
import shutil
import sys
from pathlib import Path

import torch

from ..config import config_hash, train_hash
from ..io import paths
from ..io.atomic import atomic_path, remove_leftovers
from ..io.errors import StaleError, UnreadableError

CHECKPOINT, PREVIOUS = paths.CHECKPOINT, paths.PREVIOUS_CHECKPOINT


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
    """Both generations and a ladder's fork (a finished run, or one that diverged and must not be resumed into
    the blow-up)."""
    for name in (CHECKPOINT, PREVIOUS, paths.FORK):
        (out_dir / name).unlink(missing_ok=True)
        remove_leftovers(out_dir / name, ".tmp")  # a writer killed mid-save left its temporary: not in a finished run


def load_newest(out_dir: Path, device: torch.device) -> dict | None:
    """The newest readable checkpoint: ``checkpoint.pt``, else the previous generation, else None
    (start afresh). An unreadable file is set aside as ``<name>.corrupt`` and the choice is said."""
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


def check_model(path: Path, ckpt: dict, cfg: dict, rebuild: str) -> None:
    """Refuse a model file that another training config made; evaluation settings may differ
    (:func:`~pipeline_src.config.train_hash`): a changed evaluation re-evaluates, it does not retrain."""
    if train_hash(ckpt.get("config") or {}) != train_hash(cfg):
        raise StaleError(f"{path} was trained under another config (hash {ckpt['config_hash']}; this config: "
                         f"{config_hash(cfg)}): rerun `{rebuild}` (or `snakemake`)")


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
