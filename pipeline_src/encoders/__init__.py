"""Encoders: tokens (T, B) -> contexts (T, B, d) for any output layer, chosen by ``model.encoder``.

An encoder exposes ``out_dim`` (the head's d), ``embedding`` (the input table, which a head may tie),
``init_state(batch, device)`` (a flat tuple of tensors the training loop detaches and carries),
``forward(tokens, state) -> (contexts, state)`` and ``penalty()``: its regularisation terms from the
last training forward pass (0 for none), which the language model adds to the head's loss. The training
loop knows nothing more about it.
"""
from __future__ import annotations

import dataclasses

from ..config import ModelConfig, same_value
from .awd import AWDLSTMEncoder
from .lstm import LSTMEncoder
from .transformer import TransformerEncoder

ENCODERS = {"lstm": LSTMEncoder, "awd-lstm": AWDLSTMEncoder, "transformer": TransformerEncoder}


def check_model(cfg: ModelConfig, bptt: int) -> tuple[str, str] | None:
    """The model section's cross-field rules, as (key, why) for the first broken one: an option that belongs
    to another encoder (declared on its field), the chosen encoder's own rules (its ``check``), and the
    tied head's width."""
    for f in dataclasses.fields(ModelConfig):
        owner = f.metadata.get("encoder")
        if owner and owner != cfg.encoder and not same_value(getattr(cfg, f.name), f.default):
            return f"model.{f.name}", f"a{'n' * (owner[0] in 'aeiou')} {owner} option, but model.encoder is {cfg.encoder!r}"
    check = getattr(ENCODERS[cfg.encoder], "check", None)
    problem = check(cfg, bptt) if check else None
    if problem:
        return problem
    if cfg.tie_weights and cfg.proj_dim not in (None, cfg.emb_dim):
        return "model.proj_dim", (f"{cfg.proj_dim} with tie_weights true; a tied head's input is emb_dim "
                                  f"({cfg.emb_dim}): drop proj_dim or untie")
    return None


def build_encoder(vocab_size: int, cfg: ModelConfig):
    return ENCODERS[cfg.encoder](vocab_size, cfg)
