"""The model a run trains and one optimizer step of it."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch.profiler import record_function

from ..config import TrainConfig, model_settings
from ..io import paths
from ..io.artifacts import read_json
from .model import LanguageModel
from .optim import clip_grad_norm


def check_precision(tc, device) -> None:
    """bf16 autocast on a CPU needs torch's AVX-512 kernels: with AVX2 only, oneDNN has no bf16 LSTM and fails deep
    inside the first forward pass; refuse it before any work (one line, the key named). Other CPUs (ARM) are left
    to torch."""
    import platform

    if tc.precision == "bf16" and device.type == "cpu" and platform.machine().lower() in ("x86_64", "amd64"):
        capability = torch.backends.cpu.get_cpu_capability()
        if not capability.startswith("AVX512"):
            from ..io.errors import ConfigError
            raise ConfigError(f"key 'training.precision': bf16 on this CPU needs AVX-512 kernels (torch has "
                              f"{capability} here: oneDNN's LSTM has no bf16 form); use fp32 here, or bf16 on a GPU")


def build_model(run_cfg: dict, prepared: Path) -> LanguageModel:
    meta = read_json(prepared / paths.META, "vocab_size")
    counts = torch.from_numpy(np.load(prepared / paths.NOISE)["counts"])
    return LanguageModel(meta["vocab_size"], model_settings(run_cfg), run_cfg["method"], counts)


def train_step(model: LanguageModel, optimizer, x: torch.Tensor, y: torch.Tensor, hidden: tuple,
               tc: TrainConfig) -> tuple[torch.Tensor, tuple]:
    """One optimizer step on the segment x -> y (T, B), at the learning rates set in ``optimizer``:
    the loss (a detached fp32 scalar, left on the device) and the state to carry. The bench times this
    very function (pipeline_src/cost/stepbench.py); the ``record_function`` labels name its parts there and
    cost nothing without a profiler."""
    hidden = tuple(h.detach() for h in hidden)
    with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=tc.precision == "bf16"):
        loss, hidden = model.loss(x, y, hidden)
    loss = loss.float()
    optimizer.zero_grad(set_to_none=True)
    with record_function("backward"):
        loss.backward()
    if tc.clip:
        with record_function("clip"):
            clip_grad_norm(model.parameters(), tc.clip)
    with record_function("optimizer"):
        optimizer.step()
    return loss.detach(), hidden
