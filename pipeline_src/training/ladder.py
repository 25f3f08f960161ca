"""A ladder of token budgets in one run: warmup-stable-decay with a cooldown branch per rung.

Hägele et al. (2024, "Scaling Laws and Compute-Optimal Training Beyond Fixed Training Durations") and Hu et al.
(2024, MiniCPM) train one trunk at a constant rate and, for each budget R, cool a copy of it down from its weights
at (1 - f) R tokens to a rate of 0 at R: each budget gets a properly annealed model at the cost of its cooldown,
not of a run of its own. Here (``training.schedule: wsd``, ``training.ladder``):

- the trunk trains at ``lr`` after ``warmup_tokens`` (``schedules.step_lr``);
- after the step that first reaches F = R - round(f R) tokens of rung R (f = ``cooldown_fraction``), the whole
  training state is saved (``fork.pt``: weights, optimizer, RNG, LSTM state, position in the data) and a branch
  trains on from it, the rate decaying to 0 by R (``cooldown_shape``);
- after the step that first reaches R tokens, the branch's final weights are the rung's model: kept as
  ``points/<R / top>x.pt``, validated, and scored on test by ``evaluate`` like a budget point; then the trunk is
  restored from ``fork.pt`` exactly (the branch leaves no trace in it) and goes on to the next fork. The largest
  rung's branch ends the run, so ``model.pt`` (``keep: last``) holds the top rung's model.

So a rung's model is, bit for bit on a CPU, the model of a run whose only rung is R: every rung has seen exactly
the tokens of a run to R (to within the last step's), on the same data in the same order. What the branches cost
beyond the trunk is in the record (``ladder.branches`` in train.json). A checkpoint written during a branch
resumes in the branch (its fork stays on disk until the branch ends).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

from ..io import paths

FORK = paths.FORK


@dataclass(frozen=True)
class Ladder:
    rungs: tuple[int, ...]  # token budgets this run trains, increasing
    fraction: float  # cooldown_fraction
    shape: str
    scale: int = 0  # the dataset ladder's top rung, what multiples are of (a capped run's top is lower; 0: its own)

    @classmethod
    def of(cls, tc) -> "Ladder | None":
        if tc.schedule != "wsd" or not tc.ladder:
            return None
        rungs = sorted(int(r) for r in tc.ladder)
        own = tuple(r for r in rungs if tc.ladder_top is None or r <= tc.ladder_top)
        return cls(own, float(tc.cooldown_fraction), tc.cooldown_shape, rungs[-1])

    @property
    def top(self) -> int:
        return self.rungs[-1]

    def fork_at(self, rung: int) -> int:
        """The tokens after which rung ``rung``'s cooldown branch forks from the trunk."""
        return rung - round(self.fraction * rung)

    def multiple(self, rung: int) -> float:
        """A rung as a multiple of the dataset ladder's top one (its point's name, ``points/<multiple>x.pt``), the
        same for every method of the dataset, capped or not."""
        return rung / (self.scale or self.top)

    def due(self, st) -> int | None:
        """The next rung whose fork the trunk has reached and that has no model yet, or None."""
        done = {p.get("rung") for p in st.snapshots}
        for r in self.rungs:
            if r not in done:
                return r if st.tokens >= self.fork_at(r) else None
        return None

    def describe(self) -> dict:
        capped = {"of_ladder_top": self.scale} if self.scale and self.scale != self.top else {}
        return {"rungs": list(self.rungs), "cooldown_fraction": self.fraction, "cooldown_shape": self.shape,
                "forks": [self.fork_at(r) for r in self.rungs], **capped}


def branch(st) -> tuple[int, int] | None:
    """(fork tokens, rung) of the branch that is running, None on the trunk."""
    return None if st.branch is None else (st.branch["fork_tokens"], st.branch["rung"])


def ladder_step(run, flush) -> str | None:
    """After a training step of a ladder run: fork a branch when its rung's fork is reached, or end the running
    branch once it reached its rung (its model kept and validated). Returns ``"spent"`` when the top rung's model
    is kept (the run is done), ``"rewound"`` when the trunk was restored from its fork (the epoch goes on from
    there), else None. ``flush()`` brings the step-loss accounting up to date before a state is saved."""
    st, ladder = run.st, run.ladder
    if st.branch is None:
        rung = ladder.due(st)
        if rung is not None:
            flush()
            _fork(run, rung)
        return None
    if st.tokens < st.branch["rung"]:
        return None
    flush()
    point = _keep_rung(run)
    if point["rung"] == ladder.top:
        st.branch = None
        (run.out_dir / FORK).unlink(missing_ok=True)
        return "spent"
    _rewind(run)
    return "rewound"


def _fork(run, rung: int) -> None:
    from . import checkpoints

    st = run.st
    checkpoints.save(run.out_dir / FORK, run.state_dict())  # the trunk as it is: what the branch ends by restoring
    st.branch = {"rung": rung, "fork_tokens": st.tokens, "fork_steps": st.steps, "fork_seconds": st.seconds}
    print(f"ladder: rung {rung:,} tokens: cooling down from the trunk at {st.tokens:,} tokens", file=sys.stderr)


def _keep_rung(run) -> dict:
    from ..config import run_hash
    from . import checkpoints
    from .budget import snapshot_point

    st, b = run.st, run.st.branch
    multiple = run.ladder.multiple(b["rung"])
    path = paths.snapshot_path(run.out_dir, multiple)
    checkpoints.save(path, {"config": run.cfg, "config_hash": run_hash(run.cfg), "model": run.weights(),
                            "multiple": multiple, "tokens": st.tokens, "steps": st.steps, "rung": b["rung"]})
    point = snapshot_point(st, multiple, path, run.validate)
    point.update(rung=b["rung"], fork_tokens=b["fork_tokens"], branch_tokens=st.tokens - b["fork_tokens"],
                 branch_steps=st.steps - b["fork_steps"], branch_seconds=st.seconds - b["fork_seconds"],
                 lr_end=st.lr)
    print(f"ladder: rung {b['rung']:,} tokens reached ({st.tokens:,}): valid ppl {point['valid_ppl']:.2f}, weights "
          f"kept in {path.name}", file=sys.stderr)
    return point


def _rewind(run) -> None:
    """The trunk back from ``fork.pt``, keeping what the branch produced: its rung's point, its validation time,
    and its cost (``st.branches``)."""
    from . import checkpoints

    st = run.st
    kept = {"snapshots": st.snapshots, "validation_s": st.validation_s, "machines": st.machines}
    ck = checkpoints.load_torch(run.out_dir / FORK, run.device, "delete the run's folder and rerun it")
    run.load_state(ck)
    for k, v in kept.items():
        setattr(run.st, k, v)
    run.st.branch = None
    (run.out_dir / FORK).unlink()


def branches_cost(st, ladder: Ladder) -> dict:
    """What the branches cost beyond the trunk: every rung's cooldown but the top one's, which is the run's end
    (its tokens and seconds are in the run's own totals)."""
    extra = [p for p in st.snapshots if p.get("rung") is not None and p["rung"] != ladder.top]
    return {"tokens": sum(p["branch_tokens"] for p in extra), "steps": sum(p["branch_steps"] for p in extra),
            "seconds": sum(p["branch_seconds"] for p in extra)}
