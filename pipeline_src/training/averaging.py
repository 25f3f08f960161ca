"""Iterate averaging for NT-ASGD (Merity et al. 2018): once triggered, keep the running mean of the
parameters after every optimizer step; validation, checkpoints and the kept model use the mean.

Written for any base optimizer (dense SGD, sparse SGD, Adam), instead of ``torch.optim.ASGD``, whose
averaging with t0 = 0 and lambd = 0 (the reference code's switch) this reproduces exactly (tested against
``torch.optim.ASGD``): the mean of the weights after the 2nd, 3rd, ... n-th step since the switch. The
first step's weights are left out, as there: ASGD's factor mu is 1 for both of its first two steps
(mu = 1 / max(1, step - t0) is updated after it is used), so its second step overwrites the first.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch
from torch import Tensor, nn


class ParameterAverage:
    """The mean of a model's parameters over the steps taken since ``start``; inactive until then."""

    def __init__(self):
        self.steps = 0
        self.mean: dict[str, Tensor] | None = None

    @property
    def active(self) -> bool:
        return self.mean is not None

    def start(self, model: nn.Module) -> None:
        """Begin averaging with the next step. Until it, the mean reads as the current weights; they are
        not an iterate (the first update overwrites them)."""
        self.mean = {n: p.detach().clone() for n, p in model.named_parameters()}
        self.steps = 0

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        """After an optimizer step: fold the new weights into the mean (ASGD's mu = 1 / max(1, step - 1))."""
        self.steps += 1
        mu = 1.0 / max(1, self.steps - 1)
        for n, p in model.named_parameters():
            self.mean[n].add_(p.detach() - self.mean[n], alpha=mu)

    @contextmanager
    def applied(self, model: nn.Module) -> Iterator[None]:
        """Within the block the model holds the averaged weights; its own come back afterwards."""
        if not self.active:
            yield
            return
        own = {n: p.detach().clone() for n, p in model.named_parameters()}
        with torch.no_grad():
            for n, p in model.named_parameters():
                p.copy_(self.mean[n])
        try:
            yield
        finally:
            with torch.no_grad():
                for n, p in model.named_parameters():
                    p.copy_(own[n])

    def state_dict(self) -> dict:
        return {"steps": self.steps, "mean": self.mean}

    def load_state_dict(self, state: dict | None, device=None) -> None:
        if state:
            self.steps = state["steps"]
            self.mean = None if state["mean"] is None else {n: t.to(device) for n, t in state["mean"].items()}
