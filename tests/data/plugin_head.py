"""A head from outside the repository, as a user writes one (tests/test_plugins.py): a softmax whose logits are
scaled by a learned temperature. Not registered: a params file names it as "tests/data/plugin_head.py:ScaledSoftmax"."""
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pipeline_src.heads.base import HeadContext, OutputLayer, output_embedding


class ScaledSoftmax(OutputLayer):
    family = "softmax and its controls"

    @dataclass(frozen=True)
    class Options:
        init_scale: float = field(default=1.0, metadata={"exclusiveMinimum": 0, "description": "the scale at start"})
        init_range: float = 0.1

    def __init__(self, ctx: HeadContext, opts: "ScaledSoftmax.Options"):
        super().__init__(ctx, opts)
        self.weight, self.bias = output_embedding(ctx, opts.init_range)
        self.log_scale = nn.Parameter(torch.tensor(float(opts.init_scale)).log())

    def _logits(self, hidden: Tensor) -> Tensor:
        return self.log_scale.exp() * F.linear(hidden, self.weight, self.bias)  # (N, V)

    def loss(self, hidden: Tensor, target: Tensor) -> Tensor:
        return F.cross_entropy(self._logits(hidden), target)

    def log_prob(self, hidden: Tensor) -> Tensor:
        return F.log_softmax(self._logits(hidden), dim=-1)

    def forward_macs(self, exact: bool) -> float:
        return self.in_dim * self.vocab_size
