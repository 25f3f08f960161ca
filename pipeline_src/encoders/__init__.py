"""Encoders: tokens (T, B) -> contexts (T, B, d) for any output layer, chosen by ``model.encoder``.

An encoder exposes ``out_dim`` (the head's d), ``embedding`` (the input table, which a head may tie),
``init_state(batch, device)`` (a flat tuple of tensors the training loop detaches and carries),
``forward(tokens, state) -> (contexts, state)`` and ``penalty()``: its regularisation terms from the
last training forward pass (0 for none), which the language model adds to the head's loss. The training
loop knows nothing more about it.

Each encoder's rules for its settings are here, not in its module: the config is validated without importing
torch (a second of every light pipeline step and every Snakemake start), and the modules are imported when an
encoder is built.
"""
from __future__ import annotations

import dataclasses
import importlib

from ..settings import ModelConfig, same_value

ENCODERS = {"lstm": "lstm.LSTMEncoder", "awd-lstm": "awd.AWDLSTMEncoder", "transformer": "transformer.TransformerEncoder"}


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


CHECKS = {"awd-lstm": _check_awd_lstm, "transformer": _check_transformer}  # the first setting that cannot work


def check_model(cfg: ModelConfig, bptt: int) -> tuple[str, str] | None:
    """The model section's cross-field rules, as (key, why) for the first broken one: an option that belongs
    to another encoder (declared on its field), the chosen encoder's own rules (``CHECKS``), and the
    tied head's width."""
    for f in dataclasses.fields(ModelConfig):
        owner = f.metadata.get("encoder")
        if owner and owner != cfg.encoder and not same_value(getattr(cfg, f.name), f.default):
            return f"model.{f.name}", f"a{'n' * (owner[0] in 'aeiou')} {owner} option, but model.encoder is {cfg.encoder!r}"
    check = CHECKS.get(cfg.encoder)
    problem = check(cfg, bptt) if check else None
    if problem:
        return problem
    if cfg.tie_weights and cfg.proj_dim not in (None, cfg.emb_dim):
        return "model.proj_dim", (f"{cfg.proj_dim} with tie_weights true; a tied head's input is emb_dim "
                                  f"({cfg.emb_dim}): drop proj_dim or untie")
    return None


def encoder_class(name: str) -> type:
    module, cls = ENCODERS[name].split(".")
    return getattr(importlib.import_module(f"{__name__}.{module}"), cls)


def build_encoder(vocab_size: int, cfg: ModelConfig):
    return encoder_class(cfg.encoder)(vocab_size, cfg)
