"""AWD-LSTM (Merity, Keskar & Socher 2018), each regulariser a small module of its own:

- ``LockedDropout``: variational dropout, one mask per sequence and unit shared by every time step
  (on the embedding output, between layers and on the output);
- ``embedding_dropout``: drops whole words (rows of the embedding table) for one forward pass;
- ``WeightDropLSTM``: DropConnect on an LSTM layer's hidden-to-hidden weights, one mask per forward pass,
  applied through ``torch.func.functional_call`` (no parameter is deleted or re-registered, so it keeps
  working across PyTorch versions);
- AR and TAR: activation regularisation of the (dropped) last-layer output and temporal activation
  regularisation of its raw output, returned by ``penalty()`` after a training forward pass.

Layer sizes: every layer but the last has ``hidden_dim`` units; the last has ``last_dim`` when set, else
``emb_dim`` when the head ties its weights to the embedding, else ``hidden_dim``.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call

from ..config.settings import ModelConfig


class LockedDropout(nn.Module):
    """x (T, B, H): one Bernoulli(1 - p) mask per (sequence, unit), the same at every time step, scaled by
    1 / (1 - p); the identity in eval mode."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0:
            return x
        mask = x.new_empty(1, x.shape[1], x.shape[2]).bernoulli_(1 - self.p) / (1 - self.p)
        return x * mask  # (T, B, H)


def embedding_dropout(weight: Tensor, tokens: Tensor, p: float, training: bool, sparse: bool = False) -> Tensor:
    """Look up ``tokens`` (T, B) in ``weight`` (V, E) with whole words dropped: each word's row is zeroed
    with probability p for this forward pass (every occurrence of it alike), the others scaled by
    1 / (1 - p). Gathering the mask per token keeps a sparse embedding gradient sparse."""
    x = F.embedding(tokens, weight, sparse=sparse)  # (T, B, E)
    if not training or p == 0:
        return x
    keep = weight.new_empty(weight.shape[0]).bernoulli_(1 - p) / (1 - p)  # (V,)
    return x * keep[tokens].unsqueeze(-1)


class WeightDropLSTM(nn.Module):
    """One LSTM layer whose hidden-to-hidden matrix gets DropConnect with probability p: a fresh mask per
    forward pass (shared by every time step of that pass), the kept weights scaled by 1 / (1 - p). The
    backward pass sees the same mask (autograd goes through the masked product)."""

    def __init__(self, input_size: int, hidden_size: int, p: float):
        super().__init__()
        self.lstm = nn.LSTM(input_size, hidden_size, 1)
        self.p = p
        self.last_mask: Tensor | None = None  # the mask of the last training forward pass (tests read it)

    def forward(self, x: Tensor, state: tuple[Tensor, Tensor]) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        if not self.training or self.p == 0:
            return self.lstm(x, state)
        w = self.lstm.weight_hh_l0  # (4H, H)
        self.last_mask = torch.empty_like(w).bernoulli_(1 - self.p)
        return functional_call(self.lstm, {"weight_hh_l0": w * self.last_mask / (1 - self.p)}, (x, state))


class AWDLSTMEncoder(nn.Module):
    """Embedding (with word dropout) -> locked dropout -> [weight-dropped LSTM layer -> locked dropout]
    x layers -> contexts (T, B, last layer size). ``dropout`` is the output's locked dropout."""

    def __init__(self, vocab_size: int, cfg: ModelConfig, init_range: float = 0.1):
        super().__init__()
        self.cfg = cfg
        self.embedding = nn.Embedding(vocab_size, cfg.emb_dim)
        nn.init.uniform_(self.embedding.weight, -init_range, init_range)
        last = cfg.last_dim or (cfg.emb_dim if cfg.tie_weights else cfg.hidden_dim)
        self.sizes = [cfg.hidden_dim] * (cfg.layers - 1) + [last]
        ins = [cfg.emb_dim] + self.sizes[:-1]
        self.rnns = nn.ModuleList(WeightDropLSTM(i, o, cfg.weight_drop) for i, o in zip(ins, self.sizes))
        self.drop_input = LockedDropout(cfg.dropout_input)
        self.drop_hidden = nn.ModuleList(LockedDropout(cfg.dropout_hidden) for _ in self.sizes[:-1])
        self.drop_output = LockedDropout(cfg.dropout)
        self.out_dim = last
        self._penalty: Tensor | float = 0.0

    def init_state(self, batch: int, device=None) -> tuple[Tensor, ...]:
        """(h_1, c_1, ..., h_L, c_L), each (1, B, size of layer l)."""
        return tuple(torch.zeros(1, batch, s, device=device) for s in self.sizes for _ in (0, 1))

    def forward(self, tokens: Tensor, state: tuple[Tensor, ...]) -> tuple[Tensor, tuple[Tensor, ...]]:
        """tokens (T, B) -> contexts (T, B, out_dim), new state."""
        x = embedding_dropout(self.embedding.weight, tokens, self.cfg.dropout_embedding, self.training,
                              sparse=self.embedding.sparse)
        x = self.drop_input(x)  # (T, B, emb)
        new_state: list[Tensor] = []
        for layer, rnn in enumerate(self.rnns):
            x, (h, c) = rnn(x, (state[2 * layer], state[2 * layer + 1]))  # (T, B, size_l)
            new_state += [h, c]
            if layer < len(self.rnns) - 1:
                x = self.drop_hidden[layer](x)
        raw = x
        y = self.drop_output(raw)
        self._penalty = 0.0
        if self.training and (self.cfg.ar or self.cfg.tar):
            # TAR needs two steps: an epoch's last variable-length segment can be 1 step long (the mean
            # of no differences would be NaN; it diverged AWD-LSTM-MoS's first epoch on PTB, batch 12)
            tar = (raw[1:] - raw[:-1]).pow(2).mean() if raw.shape[0] > 1 else raw.new_zeros(())
            self._penalty = self.cfg.ar * y.pow(2).mean() + self.cfg.tar * tar
        return y, tuple(new_state)

    def penalty(self) -> Tensor | float:
        """AR + TAR of the last training forward pass (alpha * mean(y^2) on the dropped output,
        beta * mean((h_t+1 - h_t)^2) on the raw output of the last layer); 0 in eval mode."""
        return self._penalty
