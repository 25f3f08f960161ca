"""Encoders: tokens (T, B) -> contexts (T, B, d) for any output layer, chosen by ``model.encoder``.

An encoder exposes ``out_dim`` (the head's d), ``embedding`` (the input table, which a head may tie),
``init_state(batch, device)`` (a flat tuple of tensors the training loop detaches and carries),
``forward(tokens, state) -> (contexts, state)`` and ``penalty()``: its regularisation terms from the
last training forward pass (0 for none), which the language model adds to the head's loss. The training
loop knows nothing more about it.

An encoder's settings are fields of ``config.settings.ModelConfig`` (those only one encoder reads are marked
so) and its cross-field rules live with the others in ``config/dataset_rules.py``: the config is validated
without importing torch (a second of every light pipeline step and every Snakemake start); the modules here
are imported when an encoder is built.
"""
from __future__ import annotations

import importlib

from ..config.settings import ModelConfig

ENCODERS = {"lstm": "lstm.LSTMEncoder", "awd-lstm": "awd.AWDLSTMEncoder", "transformer": "transformer.TransformerEncoder"}


def encoder_class(name: str) -> type:
    module, cls = ENCODERS[name].split(".")
    return getattr(importlib.import_module(f"{__name__}.{module}"), cls)


def build_encoder(vocab_size: int, cfg: ModelConfig):
    return encoder_class(cfg.encoder)(vocab_size, cfg)
