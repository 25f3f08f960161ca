"""A causal Transformer encoder (decoder-only, pre-norm) that streams like the LSTMs do.

Its recurrent state is the tail of the token stream it has seen: at most ``context - 1`` earlier
tokens, (C, B) ids. ``forward(tokens, state)`` runs the blocks over [state; tokens] with a causal mask
(``scaled_dot_product_attention``), returns the contexts of the new tokens only, and keeps the last
``context - 1`` tokens as the next state. So training and evaluation over consecutive segments of T
tokens score every token exactly once, and each token sees min(its position in the stream, context - T)
earlier tokens at least (up to context - 1): the evaluation protocol is a sliding window of
``context`` tokens with stride T (= bptt). Positions are learned and relative to the window's start.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config.settings import ModelConfig


class Block(nn.Module):
    """x + attn(LN(x)), then + MLP(LN(x)); causal self-attention with ``heads`` heads."""

    def __init__(self, d: int, heads: int, dropout: float):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.drop = nn.Dropout(dropout)
        self.p = dropout

    def forward(self, x: Tensor) -> Tensor:
        """x (B, L, d) -> (B, L, d)."""
        b, n, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.p if self.training else 0.0)
        x = x + self.drop(self.out(a.transpose(1, 2).reshape(b, n, d)))  # (B, L, d)
        return x + self.drop(self.mlp(self.ln2(x)))


class TransformerEncoder(nn.Module):
    """Token + learned position embeddings -> ``layers`` pre-norm blocks -> LayerNorm -> contexts of width
    ``emb_dim`` (so the head can tie to the token embedding). ``hidden_dim`` is unused; the window is
    ``context`` tokens and ``heads`` attention heads divide ``emb_dim``."""

    def __init__(self, vocab_size: int, cfg: ModelConfig, init_std: float = 0.02):
        super().__init__()
        self.cfg = cfg
        self.window = cfg.context
        self.embedding = nn.Embedding(vocab_size, cfg.emb_dim)
        self.position = nn.Embedding(cfg.context, cfg.emb_dim)
        for w in (self.embedding.weight, self.position.weight):
            nn.init.normal_(w, std=init_std)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg.emb_dim, cfg.heads, cfg.dropout) for _ in range(cfg.layers))
        self.ln = nn.LayerNorm(cfg.emb_dim)
        self.out_dim = cfg.emb_dim

    def init_state(self, batch: int, device=None) -> tuple[Tensor]:
        """No tokens seen yet: an empty (0, B) tail."""
        return (torch.zeros(0, batch, dtype=torch.long, device=device),)

    def forward(self, tokens: Tensor, state: tuple[Tensor]) -> tuple[Tensor, tuple[Tensor]]:
        """tokens (T, B) -> contexts (T, B, d) of the new tokens, the new tail (at most context - 1 tokens)."""
        t = tokens.shape[0]
        if t > self.window:
            raise ValueError(f"a segment of {t} tokens does not fit the context window of {self.window} "
                             "(training.bptt and the evaluation segments must be at most model.context)")
        tail = state[0].to(tokens.device).long()  # (C, B) ids (a caller may have cast the state's dtype)
        past = tail[max(0, tail.shape[0] - (self.window - t)):]  # the context - t tokens before the segment
        seq = torch.cat([past, tokens]).t()  # (B, L), L <= context
        pos = torch.arange(seq.shape[1], device=seq.device)
        x = self.drop(self.embedding(seq) + self.position(pos))  # (B, L, d)
        for block in self.blocks:
            x = block(x)
        y = self.ln(x)[:, -t:].transpose(0, 1)  # (T, B, d): the new tokens only
        return y, (torch.cat([past, tokens])[-(self.window - 1):],)

    def penalty(self) -> Tensor | float:
        return 0.0
