"""Equal budgets (Chen, Grangier & Auli 2016): a run stops after a number of training seconds or tokens,
and validates at fixed fractions of the budget on the way (its anytime curve).

Seconds are the training steps' own (``RunState.seconds``): validation, checkpoints and start-up are not
in the budget, and the validation time is recorded beside it. A run under a time budget records the
tokens it reached; the same config with ``budget_tokens`` set to them stops after the same step, so it
trains the same model (training is deterministic given the seed) and its published numbers stay
regenerable on any machine. Resume keeps the accounting: it lives in the checkpointed ``RunState``.

``budget_clock: cpu`` measures a step by this process's CPU time instead of the wall clock: on a CPU machine
shared with other work (a long sweep beside a developer's tests, two runs on two cores) a step then costs
the same seconds whatever else runs, so the budgets stay equal. It is refused on CUDA, where the steps run
on the GPU while the CPU waits.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from .state import RunState


def same_machine(st: RunState, kernels: str, gflops: float | None, where: str) -> None:
    """A time-budgeted run spends its budget on one kind of machine: a call that would resume it on other kernels
    (AVX512 against AVX2, another GPU) is refused, its remaining seconds would buy other tokens; else this call's
    machine and speed probe join ``st.machines`` (the record lists them all: ``reporting/machine.py`` holds every
    call's probe to the others')."""
    first = st.machines[0]["kernels"] if st.machines else kernels
    if first != kernels:
        from ..io.errors import ResumeError
        raise ResumeError(f"{where}: this time-budgeted run started on {first} kernels and would resume on "
                          f"{kernels}: its remaining seconds would buy other tokens. Resume it on a machine like the "
                          f"first, or delete its checkpoints to start it afresh here")
    st.machines.append({"kernels": kernels, "gemm_gflops": gflops})


def step_clock(tc, device):
    """The clock a training step is timed with (``training.budget_clock``)."""
    if tc.budget_clock == "wall":
        return time.perf_counter
    if device.type != "cpu":
        from ..config import ConfigError
        raise ConfigError(f"key 'training.budget_clock': 'cpu' times steps by this process's CPU time, but they run "
                          f"on {device.type}, where the CPU waits for them; use 'wall'")
    return time.process_time


@dataclass(frozen=True)
class Budget:
    seconds: float | None
    tokens: int | None
    points: int
    epochs: tuple = ()  # training.anytime_epochs: validations at equal data as well
    snapshots: tuple = ()  # training.snapshots: (multiple, tokens) at which the weights are kept

    @classmethod
    def of(cls, tc) -> "Budget | None":
        if tc.budget_seconds is None and tc.budget_tokens is None:
            return None
        return cls(tc.budget_seconds, tc.budget_tokens, tc.anytime_points, tuple(sorted(tc.anytime_epochs)),
                   tuple((float(m), int(t)) for m, t in tc.snapshots))

    def snapshot_due(self, st: RunState) -> tuple | None:
        """The next (multiple, tokens) whose tokens the run has reached, or None. The same rule as the budget's
        end (the step that first reaches them), so the weights kept at B tokens are a B-token run's last ones."""
        k = len(st.snapshots)
        return self.snapshots[k] if k < len(self.snapshots) and st.tokens >= self.snapshots[k][1] else None

    def epochs_due(self, st: RunState, epoch_tokens: int) -> float | None:
        """The next of ``epochs`` the tokens seen have reached (``epoch_tokens``: one epoch's), or None."""
        if len(st.token_points) < len(self.epochs) and st.tokens >= self.epochs[len(st.token_points)] * epoch_tokens:
            return self.epochs[len(st.token_points)]
        return None

    def used(self, st: RunState) -> float:
        """The share of the budget spent (1.0 and above: spent)."""
        if self.seconds is not None:
            return st.seconds / self.seconds
        return st.tokens / self.tokens

    def spent(self, st: RunState) -> bool:
        return self.used(st) >= 1.0

    def due(self, st: RunState) -> bool:
        """An anytime validation is due: the next of the ``points`` equal fractions has been reached."""
        return len(st.anytime) < self.points and self.used(st) >= (len(st.anytime) + 1) / self.points

    def describe(self) -> dict:
        return {"seconds": self.seconds, "tokens": self.tokens, "anytime_points": self.points,
                **({"anytime_epochs": list(self.epochs)} if self.epochs else {}),
                **({"snapshots": [list(p) for p in self.snapshots]} if self.snapshots else {})}


def anytime_point(st: RunState, budget: Budget, validate) -> dict:
    """Validate now (not counted in the budget), append the point to ``st.anytime`` and return it."""
    from .guard import safe_exp

    t0 = time.perf_counter()
    nll = validate()
    seconds = time.perf_counter() - t0
    st.validation_s += seconds
    point = {"point": len(st.anytime) + 1, "fraction": (len(st.anytime) + 1) / budget.points,
             "train_seconds": st.seconds, "tokens": st.tokens, "steps": st.steps,
             "valid_nll": nll, "valid_ppl": safe_exp(nll), "validation_s": seconds}
    st.anytime.append(point)
    return point


def token_point(st: RunState, epochs: float, validate) -> dict:
    """Validate now at ``epochs`` of data (the step that first reached them), append the point to
    ``st.token_points`` and return it."""
    from .guard import safe_exp

    t0 = time.perf_counter()
    nll = validate()
    seconds = time.perf_counter() - t0
    st.validation_s += seconds
    point = {"epochs": epochs, "tokens": st.tokens, "train_seconds": st.seconds, "steps": st.steps,
             "valid_nll": nll, "valid_ppl": safe_exp(nll), "validation_s": seconds}
    st.token_points.append(point)
    return point


def snapshot_point(st: RunState, multiple: float, path, validate) -> dict:
    """The weights at ``multiple`` of the budget were just saved to ``path``: validate them (not counted in the
    budget), append the point to ``st.snapshots`` and return it. ``evaluate`` scores the file on test."""
    from .guard import safe_exp

    t0 = time.perf_counter()
    nll = validate()
    seconds = time.perf_counter() - t0
    st.validation_s += seconds
    point = {"multiple": multiple, "tokens": st.tokens, "train_seconds": st.seconds, "steps": st.steps,
             "valid_nll": nll, "valid_ppl": safe_exp(nll), "validation_s": seconds, "file": path.name}
    st.snapshots.append(point)
    return point
