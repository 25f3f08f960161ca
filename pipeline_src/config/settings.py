"""A run's settings as typed values: the model and training dataclasses with their defaults, and what it
means for two config values to be equal. Imports nothing else of the project, so encoders and heads can
read their settings without importing the config loader (which imports them)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass


def _only(encoder: str, default):
    """A model field that only one encoder reads (set to anything but its default under another: an error)."""
    return dataclasses.field(default=default, metadata={"encoder": encoder})


@dataclass(frozen=True)
class ModelConfig:
    emb_dim: int
    hidden_dim: int
    layers: int
    dropout: float
    tie_weights: bool
    proj_dim: int | None = None  # untied: a linear projection of the encoder's output to this width (the head's d)
    encoder: str = "lstm"  # pipeline_src/encoders/: lstm (the PyTorch example's) or awd-lstm
    # awd-lstm only (Merity et al. 2018; `dropout` is then the output's locked dropout):
    last_dim: int | None = _only("awd-lstm", None)  # size of the last LSTM layer (default: emb_dim when tied, else hidden_dim)
    dropout_input: float = _only("awd-lstm", 0.0)  # locked dropout on the embedding output (their dropouti)
    dropout_hidden: float = _only("awd-lstm", 0.0)  # locked dropout between LSTM layers (dropouth)
    dropout_embedding: float = _only("awd-lstm", 0.0)  # whole-word embedding dropout (dropoute)
    weight_drop: float = _only("awd-lstm", 0.0)  # DropConnect on hidden-to-hidden weights (wdrop)
    ar: float = _only("awd-lstm", 0.0)  # activation regularisation alpha
    tar: float = _only("awd-lstm", 0.0)  # temporal activation regularisation beta
    # transformer only (`layers`, `emb_dim`, `dropout` as above; `hidden_dim` unused):
    context: int | None = _only("transformer", None)  # the attention window in tokens (evaluation: a sliding window, stride bptt)
    heads: int | None = _only("transformer", None)  # attention heads (divide emb_dim)


@dataclass(frozen=True)
class TrainConfig:
    epochs: int
    batch_size: int
    bptt: int
    optimizer: str
    lr: float
    clip: float | None
    lr_decay: float
    eval_batch_size: int
    weight_decay: float = 0.0
    max_steps_per_epoch: int | None = None
    checkpoint_every_steps: int | None = None
    precision: str = "fp32"  # "bf16": autocast the training forward pass (meant for GPUs; runs on CPU too)
    schedule: str = "plateau"  # training/schedules.py: plateau | fixed-then-geometric | nt-asgd | cosine | wsd
    decay_start: int = 1  # fixed-then-geometric: the first epoch trained at a reduced rate
    carry_state: bool = False  # keep the LSTM state across epoch boundaries (never reset it)
    keep: str = "best"  # model.pt holds the best-validation weights ("best") or the last epoch's ("last")
    nonmono: int = 5  # nt-asgd: the checks the trigger looks back past
    asgd_start_epoch: int | None = None  # nt-asgd: average from the end of this epoch on, whatever validation does
    variable_bptt: bool = False  # AWD-LSTM's random segment lengths around bptt, lr scaled by length / bptt
    bptt_max_delta: int | None = None  # variable_bptt: lengths capped at bptt + this (MoS code: 40; WT2: 20)
    finetune_epochs: int = 0  # then a finetuning stage of up to this many epochs (training.loop.finetune_config)
    finetune_lr: float | None = None  # its learning rate (None = lr; MoS's PTB command finetunes at 25 after 20)
    budget_seconds: float | None = None  # stop after this much training-step time (training/budget.py)
    budget_tokens: int | None = None  # or after the step that reaches this many training tokens
    # a time budget frozen per method: method -> the tokens it reaches (run_config turns it into the run's
    # budget_tokens; a method not listed keeps budget_seconds). Not part of any run's config: one method's number
    # changes that method's runs alone
    budget_tokens_by_method: dict = dataclasses.field(default_factory=dict)
    budget_calibration: str | None = None  # benchmarks/NAME those tokens came from (the report states it); no hash
    # a tuning's picked learning rates frozen per method (freeze-settings): method -> lr. Not part of any run's
    # config: run_config sets the run's lr from it (a tuning trial keeps its own point's)
    lr_by_method: dict = dataclasses.field(default_factory=dict)
    budget_clock: str = "wall"  # a step's seconds: "wall" (perf_counter) or "cpu" (this process's CPU time)
    anytime_points: int = 10  # with a budget: validations at equal fractions of it (the anytime curve)
    # with a budget: also validations once the tokens seen reach these many epochs of train (the equal-data reading)
    anytime_epochs: list = dataclasses.field(default_factory=list)
    valid_tokens: int | None = None  # validate in training on this prefix of the valid split (None: all of it)
    # with a token budget: multiples of it (e.g. [0.25, 1, 3, 10]) at which the run keeps its weights and validates;
    # the run then trains to the largest (run_config turns them into ``snapshots``, so no run's config holds them)
    budget_points: list = dataclasses.field(default_factory=list)
    snapshots: list = dataclasses.field(default_factory=list)  # the run's [multiple, tokens] pairs (budget.py)
    # step-level schedules (schedules.py: "cosine" to budget_tokens, "wsd" over a ladder): a linear warmup over
    # this many tokens first
    warmup_tokens: int = 0
    # schedule wsd: the token budgets (rungs) at which the run leaves an annealed model (training/ladder.py): one
    # trunk at a constant rate, and for each rung R a cooldown branch forked at (1 - cooldown_fraction) R tokens
    ladder: list = dataclasses.field(default_factory=list)
    # a method that cannot afford the whole ladder trains it only to this rung of it (a dataset's
    # ``ladder_top_by_method``; run_config sets a run's ``ladder_top``): its rungs above are not trained, and its
    # points keep their multiples of the dataset's top, so every method's rung R is the same multiple
    ladder_top_by_method: dict = dataclasses.field(default_factory=dict)
    ladder_top: int | None = None
    cooldown_fraction: float = 0.2  # the share of each rung spent cooling down (Hägele et al. 2024: 0.2)
    cooldown_shape: str = "1-sqrt"  # the decay to zero: "1-sqrt" (Hägele et al.'s best) or "linear"


def same_value(a, b) -> bool:
    """Equal as a config value: 0 and 0.0 are, False and 0 are not."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return a == b
