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
"""
from __future__ import annotations

from ..config import ConfigError, TrainConfig

SCHEDULES = ("plateau", "fixed-then-geometric", "nt-asgd")


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
    if tc.schedule == "nt-asgd":
        return lr
    raise ConfigError(f"key 'training.schedule': {tc.schedule!r} is not one of {list(SCHEDULES)}")
