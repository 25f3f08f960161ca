"""The plain LSTM encoder of the PyTorch word-language-model example."""
from __future__ import annotations

import torch
from torch import Tensor, nn

from ..config.settings import ModelConfig

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
        self.out_dim = cfg.emb_dim if cfg.tie_weights else (cfg.proj_dim or cfg.hidden_dim)
        needs_proj = cfg.proj_dim is not None if not cfg.tie_weights else cfg.hidden_dim != cfg.emb_dim
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
            y = self.proj(y)  # (T, B, out_dim)
        return y, state

    def penalty(self) -> Tensor | float:
        return 0.0
