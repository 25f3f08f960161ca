"""Learning-rate schedules: the learning rate of the next epoch, decided at the end of each epoch.

The training loop asks one question, ``next_lr(tc, epoch, lr, improved)``, after validating epoch
``epoch`` (1-based) at rate ``lr``; the schedule is a config choice (``training.schedule``):

- ``plateau`` (the PyTorch word-language-model example): divide by ``lr_decay`` whenever the
  validation perplexity did not improve on the best so far.
- ``fixed-then-geometric`` (Zaremba et al. 2014; Melamud et al. 2017): ``lr`` for epochs
  1 .. decay_start - 1, then lr / lr_decay^(e - decay_start + 1) at epoch e, whatever validation
  does. ``decay_start`` is the first epoch trained at a reduced rate (Zaremba's medium model:
  decay_start 7, lr_decay 1.2, as in their code's ``lr_decay ** max(i + 1 - max_epoch, 0)`` with
  max_epoch 6 and 0-based epoch i).
- ``nt-asgd`` (Merity et al. 2018): a constant ``lr``; after each epoch's validation, if it is worse than
  the best of the checks up to ``nonmono`` epochs ago (``nt_asgd_trigger``), averaging starts: from then
  on the model is validated, kept and tested with the mean of its weights over the steps since
  (``pipeline_src/training/averaging.py``). With ``asgd_start_epoch`` set, averaging starts after that epoch
  instead, whatever validation does (ET-ASGD; ``asgd_switch``).

Step-level schedules set the rate before every step from the training tokens seen (``step_lr``), so that a
run's rate curve is the same on any machine and any batch layout of equal size; the epoch's question is then
answered with the rate unchanged:

- ``cosine``: a linear warmup over ``warmup_tokens``, then lr x (1 + cos(pi t / T)) / 2 down to 0 at T =
  ``budget_tokens`` (t the tokens before the step).
- ``wsd`` (warmup-stable-decay; Hägele et al. 2024, Hu et al. 2024): the warmup, then a constant ``lr`` (the
  trunk); a cooldown branch of rung R (``training/ladder.py``), forked at F = (1 - f) R tokens, decays it to 0 by
  R: lr x (1 - sqrt(x)) (``cooldown_shape: 1-sqrt``) or lr x (1 - x) (``linear``), x = (t - F) / (R - F).
"""
from __future__ import annotations

import math

from ..config import ConfigError, TrainConfig

SCHEDULES = ("plateau", "fixed-then-geometric", "nt-asgd", "cosine", "wsd")
STEP_SCHEDULES = ("cosine", "wsd")  # the rate is set before every step from the tokens seen (step_lr)


def warmup_factor(tc: TrainConfig, tokens_after: int) -> float:
    """The warmup's share of lr for a step that ends at ``tokens_after`` tokens (so the first step is not 0)."""
    return 1.0 if tc.warmup_tokens <= 0 else min(1.0, tokens_after / tc.warmup_tokens)


def cooldown_factor(shape: str, done: float) -> float:
    """The cooldown's share of lr when ``done`` (0..1) of it is behind: 1 at its start, 0 at its end."""
    done = min(max(done, 0.0), 1.0)
    if shape == "1-sqrt":
        return 1.0 - math.sqrt(done)
    if shape == "linear":
        return 1.0 - done
    raise ConfigError(f"key 'training.cooldown_shape': {shape!r} is not one of ['1-sqrt', 'linear']")


def step_lr(tc: TrainConfig, tokens: int, step_tokens: int, branch: tuple[int, int] | None = None) -> float:
    """The rate of the step that starts at ``tokens`` training tokens and trains ``step_tokens`` more, under a
    step-level schedule; ``branch``: (fork tokens F, rung R) while a wsd cooldown branch runs."""
    warm = warmup_factor(tc, tokens + step_tokens)
    if tc.schedule == "cosine":
        return tc.lr * warm * 0.5 * (1.0 + math.cos(math.pi * min(tokens / tc.budget_tokens, 1.0)))
    if tc.schedule == "wsd":
        if branch is None:
            return tc.lr * warm
        fork, rung = branch
        return tc.lr * warm * cooldown_factor(tc.cooldown_shape, (tokens - fork) / max(rung - fork, 1))
    raise ConfigError(f"key 'training.schedule': {tc.schedule!r} is not a step-level schedule {list(STEP_SCHEDULES)}")


def nt_asgd_trigger(previous: list[float], current: float, nonmono: int) -> bool:
    """The non-monotone trigger of AWD-LSTM's reference code: with the validation losses of the earlier
    checks ``previous`` (oldest first), switch when there are more than ``nonmono`` of them and ``current``
    is worse than the best of all but the last ``nonmono``."""
    return len(previous) > nonmono and current > min(previous[:len(previous) - nonmono])


def asgd_switch(tc: TrainConfig, epoch: int, previous: list[float], current: float) -> bool:
    """Whether averaging starts after 1-based ``epoch``: at the end of epoch ``asgd_start_epoch`` when it
    is set (ET-ASGD: Ganea et al. 2019, Parthiban et al. 2021, whose code then skips the trigger), else by
    the non-monotone trigger."""
    if tc.asgd_start_epoch is not None:
        return epoch == tc.asgd_start_epoch
    return nt_asgd_trigger(previous, current, tc.nonmono)


def lr_at(tc: TrainConfig, epoch: int) -> float:
    """The fixed-then-geometric rate of 1-based ``epoch`` (closed form, used to check next_lr)."""
    return tc.lr / tc.lr_decay ** max(0, epoch - tc.decay_start + 1)


def next_lr(tc: TrainConfig, epoch: int, lr: float, improved: bool) -> float:
    """The rate for epoch ``epoch + 1``, given epoch ``epoch`` ran at ``lr`` and whether it improved."""
    if tc.schedule == "plateau":
        return lr if improved else lr / tc.lr_decay
    if tc.schedule == "fixed-then-geometric":
        return lr_at(tc, epoch + 1)
    if tc.schedule in ("nt-asgd", *STEP_SCHEDULES):  # a step-level schedule sets the rate before every step
        return lr
    raise ConfigError(f"key 'training.schedule': {tc.schedule!r} is not one of {list(SCHEDULES)}")
