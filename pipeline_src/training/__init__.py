"""The training loop in small named parts: ``loop.py`` holds the loop itself and its API, ``model.py`` the
language model (encoder + head), ``optim.py``, ``schedules.py`` and ``averaging.py`` its optimisers, learning
rate schedules and NT-ASGD's average, ``ladder.py`` a ladder of token budgets in one run (warmup-stable-decay's
cooldown branches).

  state.py        RunState: the run's mutable state (position, learning rate, history, totals), checkpointed
  step.py         build_model and train_step: one optimizer step (the bench times this very function)
  checkpoints.py  save / resume with the previous generation kept; a damaged newest one is set aside
  guard.py        the divergence guard: the loss summed on the device and read every CHECK_EVERY steps,
                  validation worse than uniform
  epoch.py        the run set up (Run), one epoch of steps, the end of an epoch (validation, history,
                  the schedule, NT-ASGD averaging and finetuning's stop as hooks), the summary
  ladder.py       a cooldown branch per rung forked from the trunk and the trunk restored after it
"""
