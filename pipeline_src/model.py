"""The shared encoder (an LSTM LM body) and the language model = encoder + output layer."""
from __future__ import annotations

import torch
from torch import Tensor, nn

from .config import ModelConfig
from .heads import HeadContext, OutputLayer, build_head

State = tuple[Tensor, Tensor]  # (h, c), each (layers, B, hidden)


class LSTMEncoder(nn.Module):
    """Embedding -> dropout -> LSTM -> dropout [-> linear projection]: to emb_dim when tied and the sizes
    differ, or, untied, to ``proj_dim`` when set (a narrow head input, e.g. the real-text bottleneck)."""

    def __init__(self, vocab_size: int, cfg: ModelConfig, init_range: float = 0.1):
        super().__init__()
        self.cfg = cfg
        self.embedding = nn.Embedding(vocab_size, cfg.emb_dim)
        nn.init.uniform_(self.embedding.weight, -init_range, init_range)
        self.drop = nn.Dropout(cfg.dropout)
        self.lstm = nn.LSTM(cfg.emb_dim, cfg.hidden_dim, cfg.layers,
                            dropout=cfg.dropout if cfg.layers > 1 else 0.0)
        if cfg.tie_weights and cfg.proj_dim not in (None, cfg.emb_dim):
            raise ValueError(f"model.proj_dim {cfg.proj_dim} with tie_weights: a tied head's input is emb_dim "
                             f"({cfg.emb_dim}); leave proj_dim out or untie")
        self.out_dim = cfg.emb_dim if cfg.tie_weights else (cfg.proj_dim or cfg.hidden_dim)
        needs_proj = self.out_dim != cfg.hidden_dim or (cfg.proj_dim is not None and not cfg.tie_weights)
        self.proj = nn.Linear(cfg.hidden_dim, self.out_dim) if needs_proj else None

    def init_state(self, batch: int, device=None) -> State:
        z = torch.zeros(self.cfg.layers, batch, self.cfg.hidden_dim, device=device)
        return z, z.clone()

    def forward(self, tokens: Tensor, state: State) -> tuple[Tensor, State]:
        """tokens (T, B) -> hidden (T, B, out_dim), new state."""
        x = self.drop(self.embedding(tokens))  # (T, B, emb)
        y, state = self.lstm(x, state)  # (T, B, hidden)
        y = self.drop(y)
        if self.proj is not None:
            y = self.proj(y)  # (T, B, emb)
        return y, state


class LanguageModel(nn.Module):
    """Encoder + head. The training loop only calls ``loss`` and ``target_log_prob``."""

    def __init__(self, vocab_size: int, model_cfg: ModelConfig, method_spec: dict,
                 unigram_counts: Tensor | None = None):
        super().__init__()
        self.encoder = LSTMEncoder(vocab_size, model_cfg)
        ctx = HeadContext(vocab_size=vocab_size, in_dim=self.encoder.out_dim, unigram_counts=unigram_counts,
                          tied_weight=self.encoder.embedding.weight if model_cfg.tie_weights else None)
        self.head: OutputLayer = build_head(method_spec, ctx)
        # a head trained through gathered rows keeps the whole step sparse: look inputs up sparsely too
        self.encoder.embedding.sparse = bool(self.head.sparse_params())

    def sparse_params(self) -> list[nn.Parameter]:
        """Parameters with sparse gradients (the sampled head's rows and then the input embedding)."""
        ps = self.head.sparse_params() + ([self.encoder.embedding.weight] if self.encoder.embedding.sparse else [])
        return list({id(p): p for p in ps}.values())

    def init_state(self, batch: int, device=None) -> State:
        return self.encoder.init_state(batch, device)

    def loss(self, inputs: Tensor, targets: Tensor, state: State) -> tuple[Tensor, State]:
        """inputs, targets (T, B) -> scalar training loss, new state."""
        h, state = self.encoder(inputs, state)
        return self.head.loss(h.reshape(-1, h.shape[-1]), targets.reshape(-1)), state

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())  # parameters() skips the tied duplicate
