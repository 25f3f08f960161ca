"""The divergence guard. The training loss is summed on the device and read back every ``CHECK_EVERY``
steps (no host synchronisation per step); a non-finite sum, or a validation nll above log |V| (worse than
the uniform distribution; 2 log |V| for heads trained by a sampled surrogate, whose exact distribution is
not what they fit), ends the run as ``Diverged``."""
from __future__ import annotations

import math

import torch

from ..io.errors import Diverged
from .state import RunState

CHECK_EVERY = 25  # steps between reads of the summed training loss (the non-finite check)


def safe_exp(x: float) -> float:
    """exp that returns inf instead of raising OverflowError (a diverged run's perplexity)."""
    return math.exp(x) if x < 709.0 else math.inf


def diverged(st: RunState, first_step: int, last_step: int, reason: str, cost: dict) -> Diverged:
    return Diverged({"epoch": st.epoch + 1, "steps": f"{first_step}-{last_step}", "lr": st.lr, "reason": reason,
                     "cost": cost})


class LossGuard:
    """The current epoch's summed training loss, kept on the device; ``check`` reads it into the state."""

    def __init__(self, st: RunState, device: torch.device) -> None:
        self.st = st
        self.sum = torch.tensor(st.loss_sum, dtype=torch.float64, device=device)
        self.checked = st.step_in_epoch

    def add(self, loss: torch.Tensor, tokens: int) -> None:
        self.sum += loss.double() * tokens
        self.st.loss_count += tokens

    def check(self, last_step: int, cost) -> None:
        """Read the sum back; a non-finite one is a divergence in the steps since the last check."""
        self.st.loss_sum = float(self.sum)
        if not math.isfinite(self.st.loss_sum):
            raise diverged(self.st, self.checked + 1, last_step, "non-finite training loss", cost())
        self.checked = last_step

    @property
    def mean(self) -> float:
        return self.st.loss_sum / max(self.st.loss_count, 1)


def validation_limit(vocab_size: int, exact: bool) -> float:
    """The validation nll above which a run has diverged: uniform's, or its square for a sampled surrogate."""
    return math.log(vocab_size) * (1 if exact else 2)


def check_validation(st: RunState, valid_nll: float, vocab_size: int, exact: bool, cost) -> None:
    limit = validation_limit(vocab_size, exact)
    if not math.isfinite(valid_nll) or valid_nll > limit:
        raise diverged(st, 1, st.step_in_epoch,
                       f"validation perplexity {safe_exp(valid_nll):.4g} is worse than "
                       f"{'uniform' if exact else 'uniform squared'} ({safe_exp(limit):.4g}, |V| = {vocab_size})",
                       cost())


def collapse(valid_nll: float, unigram_nll: float, budget_ended: bool = False) -> dict | None:
    """A run whose validation after its first epoch is no better than the add-one unigram model of the train
    counts (prepare.unigram_nll, on the same validation tokens) has collapsed to a context-free solution, or
    not yet left it: the flag a report shows beside its numbers, so nobody reads them as the method's.
    ``budget_ended``: that validation closed a training budget spent inside the first epoch."""
    if not valid_nll >= unigram_nll:  # a NaN is the divergence guard's
        return None
    when = "at the end of its budget (inside the first epoch)" if budget_ended else "after the first epoch"
    return {"epoch": 1, "valid_ppl": safe_exp(valid_nll), "unigram_valid_ppl": safe_exp(unigram_nll),
            "budget_ended": budget_ended,
            "message": f"validation ppl {safe_exp(valid_nll):.2f} {when} is no better than the "
                       f"unigram model's {safe_exp(unigram_nll):.2f}: the model has not left the context-free "
                       f"solution (collapsed)"}
