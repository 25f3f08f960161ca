"""The run's mutable state: everything a checkpoint needs besides weights, optimizer and RNG states."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field


@dataclass
class RunState:
    lr: float  # the epoch's base learning rate (each parameter group scales it by its lr_mult)
    epoch: int = 0  # epochs completed
    step_in_epoch: int = 0  # steps done in the current epoch (a resume starts after them)
    best_valid_nll: float = math.inf
    history: list[dict] = field(default_factory=list)  # one row per completed epoch (history.csv)
    train_time_s: float = 0.0  # completed epochs' step time, validation excluded
    train_tokens: int = 0
    wall_time_s: float = 0.0  # over every call of this run (a resumed run adds to it)
    loss_sum: float = 0.0  # the current epoch's summed training loss, as last read from the device
    loss_count: int = 0
    epoch_train_time_s: float = 0.0  # the current epoch's, until it is added to the totals
    epoch_tokens: int = 0
    start_valid_nll: float | None = None  # finetuning: the trained weights' validation nll (its epoch 0)
    finetune_stopped_at: int | None = None  # finetuning: the epoch the nonmono rule ended it
    averaging_from_epoch: int | None = None  # nt-asgd: the first epoch of the weights' average
    collapsed: dict | None = None  # the first epoch validated no better than the unigram model (guard.collapse)
    steps: int = 0  # optimizer steps over every epoch and call
    anytime: list[dict] = field(default_factory=list)  # with a budget: validations at its fractions (budget.py)
    token_points: list[dict] = field(default_factory=list)  # and at training.anytime_epochs of data (budget.py)
    snapshots: list[dict] = field(default_factory=list)  # and where training.snapshots kept the weights (budget.py)
    budget_spent: bool = False
    validation_s: float = 0.0  # time spent validating during training (never in a budget)
    machines: list[dict] = field(default_factory=list)  # time budgets: each call's kernels and probe (budget.py)
    branch: dict | None = None  # a ladder's cooldown branch while it runs: its rung and where it forked (ladder.py)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> RunState:
        """A checkpoint's state; one written before a field existed leaves it at its default."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    @property
    def tokens(self) -> int:
        return self.train_tokens + self.epoch_tokens

    @property
    def seconds(self) -> float:
        return self.train_time_s + self.epoch_train_time_s
