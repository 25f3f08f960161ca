"""Output layers behind one contract (``base.OutputLayer``, after ``torch.nn.AdaptiveLogSoftmaxWithLoss``).

A head is one file here: a class decorated ``@register("name", family=..., train_cost=...)`` with its
``Options`` dataclass and the optional hooks it overrides. ``registry()`` finds the heads by importing every module of
this folder, so there is no list to join. Shared numerical kernels live in ``kernels.py``, the noise
samplers in ``sampling.py``; ``options.py`` keeps the heads' option schemas as data, so the config is
validated without importing torch: importing this package is light, and its API below loads ``base`` (and
torch) on first use.
"""
from __future__ import annotations

_API = ("HeadContext", "OutputLayer", "build_head", "options_schema", "register", "registry")
__all__ = list(_API)


def __getattr__(name: str):
    if name in _API:
        from . import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
