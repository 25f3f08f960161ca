"""A dataset's own rules, the ones the schema cannot state: training keys that only act with a schedule, stage or
budget the dataset does not use, the step-level schedules' budgets and ladders, each corpus type's rules and each
encoder's (:func:`check_dataset`). ``validation.validate`` calls it for every dataset."""
from __future__ import annotations

import dataclasses

from ..io.errors import ConfigError
from .runs import _merged, model_config, run_datasets, train_config
from .settings import ModelConfig, TrainConfig, same_value

MAX_TABLE = 50_000_000  # entries of the dense truth table (contexts x M) a synthetic language may have


def undefined(source: str, key: str, name, section: str, params: dict) -> ConfigError:
    """A name a key refers to that its section does not define, in one line listing those it does."""
    return ConfigError(f"{source}: key '{key}': {name!r} is not defined under '{section}'; "
                       f"defined: {sorted(params[section])}")


def check_dataset(params: dict, name: str, source: str) -> None:
    """A dataset's training keys, then the rules its corpus type (``_check_synthetic``) and its encoder
    (``check_model``) state for themselves."""
    _check_training(params, name, source)
    c = params["datasets"][name]["corpus"]
    problem = (_check_synthetic(c) if c["type"] == "synthetic" else
               _check_zipfian(c) if c["type"] in ("zipfian", "zipfian-topics") else None)
    if problem:
        raise ConfigError(f"{source}: key 'datasets.{name}.{problem[0]}': {problem[1]}")
    problem = check_model(model_config(params, name), train_config(params, name).bptt)
    if problem:
        raise ConfigError(f"{source}: key '{problem[0]}' (dataset {name}): {problem[1]}")


def _check_training(params: dict, name: str, source: str) -> None:
    """A training key written for a schedule or stage that this dataset does not use is an error, not a
    setting silently ignored (``lr_decay`` is required by the schema, so it is never reported)."""
    written = _merged(params, name, "training")
    tc = TrainConfig(**written)
    averaging = tc.schedule == "nt-asgd" or bool(tc.finetune_epochs)  # finetuning is nt-asgd
    no_budget = (tc.budget_seconds is None and tc.budget_tokens is None and not tc.ladder
                 and not tc.budget_tokens_by_method)
    unused = {"decay_start": (tc.schedule != "fixed-then-geometric", "schedule fixed-then-geometric"),
              "nonmono": (not averaging, "schedule nt-asgd or finetuning"),
              "asgd_start_epoch": (not averaging, "schedule nt-asgd or finetuning"),
              "bptt_max_delta": (not tc.variable_bptt, "variable_bptt: true"),
              "finetune_lr": (not tc.finetune_epochs, "finetune_epochs > 0"),
              "anytime_points": (no_budget, "budget_seconds, budget_tokens (or budget_tokens_by_method) or a ladder"),
              "anytime_epochs": (no_budget, "budget_seconds, budget_tokens (or budget_tokens_by_method) or a ladder"),
              "budget_points": (tc.budget_tokens is None and not tc.budget_tokens_by_method and not tc.ladder,
                                "a token budget: budget_tokens or budget_tokens_by_method (its points are multiples "
                                "of it)")}
    step_level = tc.schedule in ("cosine", "wsd")
    unused.update({"warmup_tokens": (not step_level, "schedule cosine or wsd"),
                   "ladder": (tc.schedule != "wsd", "schedule wsd"),
                   "ladder_top_by_method": (tc.schedule != "wsd", "schedule wsd"),
                   "cooldown_fraction": (tc.schedule != "wsd", "schedule wsd"),
                   "cooldown_shape": (tc.schedule != "wsd", "schedule wsd")})
    _check_step_schedule(tc, written, name, source)
    if tc.budget_seconds is not None and tc.budget_tokens is not None:
        raise ConfigError(f"{source}: key 'training.budget_tokens' (dataset {name}): set beside budget_seconds; a run "
                          f"has one budget (a time budget's replay is budget_tokens alone)")
    if written.get("ladder_top") is not None:
        raise ConfigError(f"{source}: key 'training.ladder_top' (dataset {name}): a run's own cap, set from "
                          f"training.ladder_top_by_method; write that instead")
    for key in ("budget_tokens_by_method", "lr_by_method", "ladder_top_by_method"):
        for method in getattr(tc, key) if name in run_datasets(params) else ():  # a dataset not run is not held to
            if method not in params["methods"]:  # methods a file extending params.yaml may have replaced
                raise undefined(source, f"training.{key}.{method} (dataset {name})", method, "methods", params)
    if tc.budget_calibration and name in run_datasets(params):  # with frozen tokens or not (fourth probe)
        from ..io.paths import PROVENANCE, REPOSITORY

        calibration = REPOSITORY / "benchmarks" / tc.budget_calibration.split("/", 1)[-1]
        if not (calibration / PROVENANCE).is_file():  # the report states it: refused here, not after every run
            raise ConfigError(f"{source}: key 'training.budget_calibration' (dataset {name}): "
                              f"{tc.budget_calibration} is no publication (no {PROVENANCE}): name the one the "
                              f"frozen tokens came from, or publish it first")
    for key, (ignored, needs) in unused.items():
        if ignored and written.get(key) not in (None, []):  # `ladder: []` in a child file unsets its base's
            raise ConfigError(f"{source}: key 'training.{key}' (dataset {name}): set to {written[key]!r}, but it "
                              f"only acts with {needs} (training.schedule is {tc.schedule!r}); remove it")


def _check_step_schedule(tc: TrainConfig, written: dict, name: str, source: str) -> None:
    """The step-level schedules know their budget in tokens: cosine ends at budget_tokens, wsd anneals at each
    rung of its ladder (training/ladder.py); neither reads a clock."""
    where = f"(dataset {name})"
    if tc.schedule == "cosine" and not tc.budget_tokens and not tc.budget_tokens_by_method:
        raise ConfigError(f"{source}: key 'training.schedule' {where}: cosine decays to 0 at the run's token budget, "
                          f"but it has none: set training.budget_tokens")
    if tc.schedule == "cosine" and tc.budget_tokens and tc.warmup_tokens >= tc.budget_tokens:
        raise ConfigError(f"{source}: key 'training.warmup_tokens' {where}: {tc.warmup_tokens} tokens of warmup do not "
                          f"end before the budget's {tc.budget_tokens}; shorten the warmup")
    if tc.schedule != "wsd":
        return
    if not tc.ladder:
        raise ConfigError(f"{source}: key 'training.ladder' {where}: schedule wsd anneals at each rung of a ladder of "
                          f"token budgets: set training.ladder (e.g. [500000, 1000000, 2000000])")
    for key in ("budget_seconds", "budget_points", "budget_tokens_by_method"):
        if written.get(key):
            raise ConfigError(f"{source}: key 'training.{key}' {where}: set beside training.ladder, which is the "
                              f"run's budgets (its largest rung ends the run); remove it")
    for method, top in tc.ladder_top_by_method.items():
        if top not in tc.ladder:
            raise ConfigError(f"{source}: key 'training.ladder_top_by_method.{method}' {where}: {top} is not a rung of "
                              f"the ladder {sorted(tc.ladder)}; a capped method stops at one of its rungs")
    if written.get("budget_tokens") is not None and written["budget_tokens"] != max(tc.ladder):
        raise ConfigError(f"{source}: key 'training.budget_tokens' {where}: {written['budget_tokens']} is not the "
                          f"ladder's top rung {max(tc.ladder)}; remove it (the ladder sets it)")
    step = tc.batch_size * tc.bptt
    short = min(tc.ladder, key=lambda r: round(tc.cooldown_fraction * r))
    if round(tc.cooldown_fraction * short) < step:
        raise ConfigError(f"{source}: key 'training.cooldown_fraction' {where}: rung {short} cools down for "
                          f"{round(tc.cooldown_fraction * short)} tokens, less than one step ({step} = batch_size x "
                          f"bptt): raise it or the rung")
    first_fork = min(tc.ladder) - round(tc.cooldown_fraction * min(tc.ladder))
    if first_fork < step:
        raise ConfigError(f"{source}: key 'training.cooldown_fraction' {where}: the first rung's cooldown would start "
                          f"at {first_fork} tokens, before the trunk's first step ({step}); lower it or raise the rung")
    if tc.warmup_tokens >= first_fork:
        raise ConfigError(f"{source}: key 'training.warmup_tokens' {where}: {tc.warmup_tokens} tokens of warmup do not "
                          f"end before the first rung's cooldown starts at {first_fork}; shorten the warmup")
    if tc.keep != "last":
        raise ConfigError(f"{source}: key 'training.keep' {where}: a ladder's models are each branch's final "
                          f"weights (the top rung's in model.pt): set keep: last")


def _check_synthetic(corpus: dict) -> tuple[str, str] | None:
    """The corpus's own rules, as (key, why): its dense truth table must fit, and a context's support is some
    of the vocabulary (a larger one was silently clipped to vocab_size)."""
    entries = corpus["vocab_size"] ** corpus["order"]
    if entries > MAX_TABLE:
        return "corpus", f"vocab_size**order = {entries:,} table entries; at most {MAX_TABLE:,} are supported"
    if corpus.get("support") is not None and corpus["support"] > corpus["vocab_size"]:
        return "corpus.support", (f"{corpus['support']} is more than vocab_size {corpus['vocab_size']} (each "
                                  f"context's next-word support is a subset of the vocabulary)")
    return None


ZIPF_CLASSES = 128  # the schema's default classes of both Zipfian types (as data/zipfian.py's DEFAULTS)


def _check_zipfian(corpus: dict) -> tuple[str, str] | None:
    """A Zipfian language assigns each word to one of its classes: no more classes than words."""
    classes = corpus.get("classes", ZIPF_CLASSES)
    if classes > corpus["vocab_size"]:
        return "corpus.classes", (f"{classes} classes{'' if 'classes' in corpus else ' (the default)'} for "
                                  f"{corpus['vocab_size']} words: each word is in one class; set classes to at most "
                                  f"vocab_size")
    return None


def _check_awd_lstm(cfg: ModelConfig, bptt: int) -> tuple[str, str] | None:
    if cfg.proj_dim is not None:
        return "model.proj_dim", "not an awd-lstm option; size its last layer with model.last_dim"
    return None


def _check_transformer(cfg: ModelConfig, bptt: int) -> tuple[str, str] | None:
    if not cfg.context or not cfg.heads or cfg.emb_dim % cfg.heads:
        return "model.context' / 'model.heads", (f"the transformer needs both, with heads dividing emb_dim "
                                                f"({cfg.emb_dim})")
    if bptt > cfg.context:
        return "training.bptt", f"{bptt} tokens per segment do not fit the transformer's context of {cfg.context}"
    return None


ENCODER_CHECKS = {"awd-lstm": _check_awd_lstm, "transformer": _check_transformer}  # the first setting that cannot work


def check_model(cfg: ModelConfig, bptt: int) -> tuple[str, str] | None:
    """The model section's cross-field rules, as (key, why) for the first broken one: an option that belongs
    to another encoder (declared on its field), the chosen encoder's own rules (``ENCODER_CHECKS``), and the
    tied head's width."""
    for f in dataclasses.fields(ModelConfig):
        owner = f.metadata.get("encoder")
        if owner and owner != cfg.encoder and not same_value(getattr(cfg, f.name), f.default):
            return f"model.{f.name}", f"a{'n' * (owner[0] in 'aeiou')} {owner} option, but model.encoder is {cfg.encoder!r}"
    check = ENCODER_CHECKS.get(cfg.encoder)
    problem = check(cfg, bptt) if check else None
    if problem:
        return problem
    if cfg.tie_weights and cfg.proj_dim not in (None, cfg.emb_dim):
        return "model.proj_dim", (f"{cfg.proj_dim} with tie_weights true; a tied head's input is emb_dim "
                                  f"({cfg.emb_dim}): drop proj_dim or untie")
    return None
