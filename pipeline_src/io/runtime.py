"""Device choice, seeding, threads and peak-memory readings shared by training, evaluation and bench."""
from __future__ import annotations

import contextlib
import os
import platform
import random
import resource
import signal
from pathlib import Path

import numpy as np
import torch


def resolve_device(spec: str) -> torch.device:
    """``auto`` = CUDA when present, else CPU; an explicit ``cuda`` without a GPU is an error."""
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    from .errors import ConfigError

    dev = torch.device(spec)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"key 'device': {spec!r} was requested but no CUDA device is available (use 'auto' or 'cpu')")
    return dev


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def set_threads(threads: int | None) -> None:
    """``threads`` CPU threads for torch and for the BLAS under NumPy and SciPy (threadpoolctl). Without the
    second, a `--threads 1` job beside another on two cores still ran OpenBLAS on two threads, which spin against
    the other job: the rank diagnostic's SVD of a 1,000 x 500 matrix took 4.4 s instead of 0.08 s."""
    if threads:
        from threadpoolctl import threadpool_limits

        torch.set_num_threads(threads)
        threadpool_limits(limits=threads, user_api="blas")


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_mb(device: torch.device) -> float:
    """CUDA: peak allocated by tensors. CPU: the process's peak resident set size (ru_maxrss)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def load_average() -> float:
    """1-minute load average: how many jobs shared the machine (timings are comparable at equal load)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


PROBE = "fastest 20 ms block of 15, run clock"  # how gemm_gflops measures (records of another probe: not compared)


def gemm_gflops(clock=None, blocks: int = 15, block_seconds: float = 0.02) -> float:
    """This machine's speed now: GFLOP/s of a fixed fp32 matrix product (512 x 256 by 256 x 512) on this process's
    threads, the fastest of ``blocks`` blocks of about ``block_seconds`` each, timed by ``clock`` (the run's step
    clock: a CPU-time budget's probe ignores other work on the machine as the budget does). Contention only slows
    a block, so the fastest one reads the core's own speed; another machine changes that speed itself. No random
    numbers (the run's streams are left as they are). Under a time budget a run's tokens depend on it: records
    whose machines differ by much are not one experiment (``reporting/machine.py``)."""
    import time

    clock = clock or time.perf_counter
    a, b = torch.full((512, 256), 0.5), torch.full((256, 512), 0.25)
    a @ b  # the first call allocates
    best = 0.0
    for _ in range(blocks):
        calls, t0 = 0, clock()
        while (elapsed := clock() - t0) < block_seconds:
            a @ b
            calls += 1
        best = max(best, 2 * 512 * 256 * 512 * calls / elapsed / 1e9)
    return best


def kernels(device: torch.device) -> str:
    """What a step's speed rests on: the GPU's name, or the CPU kernels torch chose (AVX512, AVX2, ...)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return torch.backends.cpu.get_cpu_capability()


def huge_pages() -> bool:
    """Whether torch's CPU allocator advises its large blocks to transparent huge pages (``THP_MEM_ALLOC_ENABLE``,
    read once, at torch's first allocation; the CLI sets it: ``pipeline_src/__main__.py``)."""
    return os.environ.get("THP_MEM_ALLOC_ENABLE", "0") not in ("", "0")


def environment(device: torch.device, load_at_start: float, gflops: float | None = None) -> dict:
    """The setup that makes a run's timings comparable with another's; ``gflops``: the speed probe at the start of
    this call (``gemm_gflops``, taken under a time budget)."""
    env = {"cpu_model": cpu_model(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),  # kernels: AVX2, AVX512
           "cpu_count": os.cpu_count(), "threads": torch.get_num_threads(),
           "torch": torch.__version__, "python": platform.python_version(), "device": str(device),
           "load_avg_start": load_at_start, "load_avg_end": load_average(), "huge_pages": huge_pages()}
    if gflops is not None:
        env["gemm_gflops"], env["gemm_probe"] = gflops, PROBE
    if device.type == "cuda":
        env["gpu"] = kernels(device)
    return env


def rng_state() -> dict:
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    # a checkpoint loaded with map_location=cuda has these byte tensors on the GPU; the setters want CPU ones
    torch.set_rng_state(state["torch"].cpu())
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([t.cpu() for t in state["cuda"]])


class StopRequest:
    """Set by SIGTERM / SIGINT while installed: the training loop checkpoints and stops at the next step.

    SLURM sends SIGTERM on preemption, on ``scancel`` and at the time limit (then SIGKILL after
    KillWait); Snakemake sends it to its jobs when it is interrupted itself.
    """

    def __init__(self) -> None:
        self.signum: int | None = None

    def __bool__(self) -> bool:
        return self.signum is not None

    @contextlib.contextmanager
    def installed(self):
        def handler(signum, frame):
            self.signum = signum

        try:
            previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
        except ValueError:  # not the main thread: signals stay with whoever owns them
            yield self
            return
        try:
            yield self
        finally:
            for s, h in previous.items():
                signal.signal(s, h)
