"""Launch cost on any machine (cost/opcount.py), for every method params.yaml defines: the top-level ATen operators
of one training step of the head (forward and backward, no encoder, no optimizer) at half the sweep's rows (1,120,
chunks of 128, 10k and 20k words) do not grow with the classes, bands or words the targets touch, nor with the vocabulary, except
where a bounded structure is named (hierarchical softmax's size bins and adaptive softmax's tail clusters present,
at most log2 V + 1 and two; the kernel proposal's tree, log V deep); and stay within 3x the softmax's, except the
heads named in ``ABOVE_3X`` with their counts (docs/bench.md)."""
import math

import pytest
import torch
import yaml
from conftest import ROOT

from pipeline_src.cost.opcount import op_count
from pipeline_src.heads import HeadContext, build_head

METHODS = yaml.safe_load((ROOT / "params.yaml").read_text())["methods"]
GROWS_WITH_PRESENT = {"hierarchical-softmax": 60 * 8, "adaptive-softmax": 50 * 2}  # per size bin / tail present x at most
GROWS_WITH_V = {"sampled-softmax-kernel": 150 * math.log2(2)}  # a draw walks the tree: log2 V levels
ABOVE_3X = {  # operators per step, as a multiple of the softmax's, and why
    "mixtape": 10,  # sigmoid-tree gates per context and component (Yang et al. 2019), per chunk
    "monotonic-mlp": 7,  # the pointwise MLP's layers on every logit, per chunk
    "sampled-softmax-kernel": 5,  # the quadratic kernel's tree draws, log2 V levels each
}


def _head(spec: dict, v: int):
    counts = (1000.0 / torch.arange(1, v + 1)).floor()  # frequency-sorted, Zipfian
    ctx = HeadContext(vocab_size=v, in_dim=16, unigram_counts=counts)
    try:
        return build_head({**spec, "chunk_size": 128}, ctx)
    except Exception:  # a head without chunks
        return build_head(spec, ctx)


def _count(spec: dict, v: int, target: torch.Tensor) -> int:
    torch.manual_seed(0)
    head = _head(spec, v).train()
    return op_count(head, torch.randn(len(target), 16), target)


@pytest.fixture(scope="module")
def counts() -> dict[str, tuple[int, int, int]]:
    """Each method's count at 10k words with every target one frequent word, spread over the vocabulary, and at
    20k spread (twice the words: a count that grew with V would show; docs/bench.md counts 100k too)."""
    g = torch.Generator().manual_seed(0)
    one, spread = torch.full((1120,), 5), torch.randint(0, 10_000, (1120,), generator=g)
    spread_20k = torch.randint(0, 20_000, (1120,), generator=g)
    return {m: (_count(s, 10_000, one), _count(s, 10_000, spread), _count(s, 20_000, spread_20k))
            for m, s in METHODS.items()}


@pytest.mark.parametrize("method", sorted(METHODS))
def test_no_head_launches_per_class_band_or_word(counts, method):
    one, spread, big = counts[method]
    kind = METHODS[method].get("type", method)
    assert spread - one <= GROWS_WITH_PRESENT.get(kind, 1), (one, spread)  # what the targets touch costs nothing
    assert abs(big - spread) <= GROWS_WITH_V.get(method, 1) + GROWS_WITH_PRESENT.get(kind, 0), (spread, big)
    softmax = counts["softmax"][1]
    assert max(one, spread, big) <= ABOVE_3X.get(method, 3) * softmax, (method, one, spread, big, softmax)
