"""The language model = encoder (pipeline_src/encoders/, chosen by model.encoder) + output layer."""
from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.profiler import record_function

from ..config import ModelConfig
from ..encoders import build_encoder
from ..heads import HeadContext, OutputLayer, build_head

State = tuple[Tensor, ...]  # the encoder's recurrent state, a flat tuple the training loop detaches


class LanguageModel(nn.Module):
    """Encoder + head. The training loop only calls ``loss`` and ``target_log_prob``."""

    def __init__(self, vocab_size: int, model_cfg: ModelConfig, method_spec: dict,
                 unigram_counts: Tensor | None = None):
        super().__init__()
        self.encoder = build_encoder(vocab_size, model_cfg)
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
        """inputs, targets (T, B) -> scalar training loss (the head's, plus the encoder's regularisation
        terms, e.g. AWD-LSTM's AR and TAR), new state."""
        with record_function("encoder"):
            h, state = self.encoder(inputs, state)
        with record_function("head"):
            loss = self.head.loss(h.reshape(-1, h.shape[-1]), targets.reshape(-1))
        penalty = self.encoder.penalty()
        return (loss + penalty if torch.is_tensor(penalty) else loss), state

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())  # parameters() skips the tied duplicate
