"""Encoders: tokens (T, B) -> contexts (T, B, d) for any output layer, chosen by ``model.encoder``.

An encoder exposes ``out_dim`` (the head's d), ``embedding`` (the input table, which a head may tie),
``init_state(batch, device)`` (a flat tuple of tensors the training loop detaches and carries),
``forward(tokens, state) -> (contexts, state)`` and ``penalty()``: its regularisation terms from the
last training forward pass (0 for none), which the language model adds to the head's loss. The training
loop knows nothing more about it.
"""
from __future__ import annotations

from ..config import ModelConfig
from .awd import AWDLSTMEncoder
from .lstm import LSTMEncoder
from .transformer import TransformerEncoder

ENCODERS = {"lstm": LSTMEncoder, "awd-lstm": AWDLSTMEncoder, "transformer": TransformerEncoder}


def build_encoder(vocab_size: int, cfg: ModelConfig):
    return ENCODERS[cfg.encoder](vocab_size, cfg)
