"""What a training job asks a cluster for, sized from the run itself (the SLURM profile; workflow/rules/common.smk's
``get_train_runtime`` and ``get_train_mem_mb``): its time from the tokens it will train and a conservative
throughput for its step's FLOPs, its memory from its parameters, optimizer state and the largest block of logits
it holds; each with a margin and a floor, so a six-second sweep run does not ask for two days and 32 GB.

- **Tokens**: a token budget (``budget_tokens``; a ladder's top rung plus its cooldown branches, f x each lower
  rung), else ``epochs`` x the training split; a time budget is its seconds (the clock it is measured by, whatever
  the node). Each is a bound the run stops at.
- **Throughput**: a training step's FLOPs per token (the LSTM's 24 h (in + h) per layer, ``lstm_flops_per_token``,
  and a full softmax's 6 V d, which bounds every head's from above) at a rate well under
  what the hardware delivers on these shapes (``CPU_FLOPS``: one thread, about a fifth of the AVX-512 core's GEMM
  rate that ``bench-cells`` measures; ``GPU_FLOPS``: a few percent of an H100's dense rate), plus each step's
  fixed cost (``STEP_SECONDS``: small steps on a GPU are launch-bound) and validation (``VALIDATION_SHARE``).
- **Memory**: 4 bytes a float for the weights, their gradients and Adam's two moments (16 bytes a parameter), the
  logits' chunk (rows x V, twice: scores and gradient) and the batch's activations, plus the process's own
  (``BASE_MB``: PyTorch and the data), times ``MARGIN``.

A site that knows better overrides any rule's sizes in ``profiles/slurm/local.yaml`` (``resources:``).
"""
from __future__ import annotations

import math

from ..io import paths
from ..io.artifacts import read_json

CPU_FLOPS = 10e9  # a training step's FLOP/s on one CPU thread at these shapes (bench-cells: 53 GFLOP/s GEMM)
GPU_FLOPS = 2e12  # and on one GPU (an H100's dense BF16 rate is 989 TFLOP/s; small steps reach a few percent)
STEP_SECONDS = {False: 0.001, True: 0.01}  # and each step's fixed cost (CPU, GPU: a GPU step at small shapes is
# mostly kernel launches: bench-cells-gpu's 6-9 ms at zipf-10k)
VALIDATION_SHARE = 0.25  # validations and checkpoints, on top of the training steps
MARGIN = 2.0  # both resources, times this
FLOOR_MINUTES, CEILING_MINUTES = 10, 7 * 24 * 60  # a job asks for at least 10 minutes and at most a week
BASE_MB, FLOOR_MB = 1500, 2000
# real corpora before they are prepared: training tokens and vocabulary (a prepared one's meta.json is read first)
KNOWN = {"ptb": (929_589, 10_000), "wikitext-2": (2_088_628, 33_278), "wikitext-103": (103_227_021, 267_735),
         "lm1b": (768_648_884, 793_471)}
UNKNOWN = (100_000_000, 100_000)  # a corpus of unknown size (local files not yet prepared): sized generously


def corpus_size(params: dict, dataset: str) -> tuple[int, int]:
    """(training tokens, vocabulary size) of ``dataset``: its preparation's meta.json when it exists, else its
    synthetic spec, else the registered corpus's published size."""
    meta = paths.prepared_dir(params, dataset) / paths.META
    if meta.is_file():
        m = read_json(meta)
        return int(m["splits"]["train"]["tokens"]), int(m["vocab_size"])
    corpus = params["datasets"][dataset]["corpus"]
    if corpus.get("train_tokens") and corpus.get("vocab_size"):
        return int(corpus["train_tokens"]), int(corpus["vocab_size"]) + 1  # + <eos>
    return KNOWN.get(corpus.get("type"), UNKNOWN)


def run_tokens(training: dict, split_tokens: int) -> float:
    """The most tokens a run trains (its budget, a ladder's branches included, or its epochs)."""
    if training.get("ladder"):
        rungs = sorted(r for r in training["ladder"] if not training.get("ladder_top") or r <= training["ladder_top"])
        return rungs[-1] + training.get("cooldown_fraction", 0.2) * sum(rungs[:-1])
    if training.get("budget_tokens"):
        return float(training["budget_tokens"])
    return float(training["epochs"]) * split_tokens + float(training.get("finetune_epochs") or 0) * split_tokens


def lstm_flops_per_token(emb_dim: int, hidden_dim: int, layers: int = 1) -> float:
    """A training step's FLOPs per token in an LSTM encoder: each layer's four gates are one (4h x (in + h)) matrix
    product, 2 FLOPs a multiply-add, forward once and backward twice (input and weight gradients): 24 h (in + h)."""
    flops, width = 0.0, emb_dim
    for _ in range(layers):
        flops += 24.0 * hidden_dim * (width + hidden_dim)
        width = hidden_dim
    return flops


def flops_per_token(model: dict, vocab: int) -> float:
    """A training step's FLOPs per token: the LSTM encoder's and a full softmax's (6 V d: every head's bound)."""
    d = model.get("proj_dim") or (model["emb_dim"] if model.get("tie_weights") else model.get("last_dim")
                                  or model["hidden_dim"])
    return lstm_flops_per_token(model["emb_dim"], model["hidden_dim"], model["layers"]) + 6.0 * vocab * d


def runtime_minutes(cfg: dict, split_tokens: int, vocab: int, gpu: bool) -> int:
    """The job's time limit in minutes (``cfg``: the run's config)."""
    tr = cfg["training"]
    if tr.get("budget_seconds"):
        seconds = float(tr["budget_seconds"])
    else:
        tokens = run_tokens(tr, split_tokens)
        seconds = (tokens * flops_per_token(cfg["model"], vocab) / (GPU_FLOPS if gpu else CPU_FLOPS)
                   + tokens / (tr["batch_size"] * tr["bptt"]) * STEP_SECONDS[gpu])
    minutes = seconds * (1 + VALIDATION_SHARE) * MARGIN / 60
    return int(min(CEILING_MINUTES, max(FLOOR_MINUTES, math.ceil(minutes))))


def memory_mb(cfg: dict, vocab: int) -> int:
    """The job's memory in MB: weights, gradients and Adam's moments, the logits' chunk and the activations."""
    m, tr = cfg["model"], cfg["training"]
    d, h, layers = m["hidden_dim"], m["hidden_dim"], m["layers"]
    params = vocab * m["emb_dim"] + layers * 4 * h * (m["emb_dim"] + h) + vocab * (d + 1)
    rows = tr["batch_size"] * tr["bptt"]
    chunk = min(rows, int((cfg.get("method") or {}).get("chunk_size") or rows))
    floats = 4 * params + 2 * chunk * vocab + 8 * rows * h * layers
    return int(max(FLOOR_MB, math.ceil((BASE_MB + 4 * floats / 2**20) * MARGIN)))


def evaluation_minutes(cfg: dict, split_tokens: int, vocab: int, gpu: bool) -> int:
    """An evaluation job's time limit: a forward pass (a third of a training step) over the validation and test
    splits, bounded by a tenth of the training split, then the same margin and floor."""
    seconds = 0.1 * split_tokens * flops_per_token(cfg["model"], vocab) / 3 / (GPU_FLOPS if gpu else CPU_FLOPS)
    return int(min(CEILING_MINUTES, max(FLOOR_MINUTES, math.ceil(seconds * MARGIN / 60))))
