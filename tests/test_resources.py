"""A cluster job's size from its run (cost/resources.py), against hand computations: the tokens a run trains, its
step's FLOPs, the time and memory that follow, with their margin, floor and ceiling."""
import math

import pytest

from pipeline_src.cost import resources as r

MODEL = {"emb_dim": 64, "hidden_dim": 64, "layers": 1, "tie_weights": False}


def _cfg(**training):
    return {"model": MODEL, "method": {"chunk_size": 128},
            "training": {"batch_size": 64, "bptt": 35, "epochs": 2, **training}}


def test_the_tokens_a_run_trains_are_its_budget_its_ladder_with_branches_or_its_epochs():
    assert r.run_tokens({"ladder": [500_000, 1_000_000, 16_000_000], "cooldown_fraction": 0.2}, 0) == \
        16_000_000 + 0.2 * 1_500_000
    assert r.run_tokens({"budget_tokens": 5_000, "epochs": 9}, 10**9) == 5_000
    assert r.run_tokens({"epochs": 3, "finetune_epochs": 2}, 1_000) == 5_000


def test_time_follows_tokens_flops_and_steps_with_a_margin_and_a_floor():
    flops = 24 * 64 * (64 + 64) + 6 * 10_001 * 64  # the LSTM's and a full softmax's, per token
    assert r.flops_per_token(MODEL, 10_001) == flops
    tokens = 16_000_000 + 0.2 * (500_000 + 1_000_000 + 2_000_000 + 4_000_000 + 8_000_000)
    cfg = _cfg(ladder=[500_000, 1_000_000, 2_000_000, 4_000_000, 8_000_000, 16_000_000], cooldown_fraction=0.2)
    seconds = tokens * flops / r.CPU_FLOPS + tokens / (64 * 35) * r.STEP_SECONDS[False]
    assert r.runtime_minutes(cfg, 17_000_000, 10_001, gpu=False) == math.ceil(seconds * 1.25 * 2 / 60)  # ~ 2.6 h
    gpu = tokens * flops / r.GPU_FLOPS + tokens / (64 * 35) * r.STEP_SECONDS[True]
    assert r.runtime_minutes(cfg, 17_000_000, 10_001, gpu=True) == max(10, math.ceil(gpu * 1.25 * 2 / 60))
    assert r.runtime_minutes(_cfg(budget_seconds=6.0), 10**9, 10**6, gpu=True) == 10  # a time budget: its seconds
    assert r.runtime_minutes(_cfg(epochs=10**6), 10**9, 10**6, gpu=False) == r.CEILING_MINUTES


def test_memory_counts_weights_adam_the_logits_chunk_and_activations():
    v = 100_001
    params = v * 64 + 4 * 64 * 128 + v * 65
    floats = 4 * params + 2 * 128 * v + 8 * 64 * 35 * 64
    assert r.memory_mb(_cfg(), v) == math.ceil((1500 + 4 * floats / 2**20) * 2)
    assert r.memory_mb(_cfg(), 30) == math.ceil((1500 + 4 * (4 * (30 * 64 + 4 * 64 * 128 + 30 * 65) + 2 * 128 * 30
                                                             + 8 * 64 * 35 * 64) / 2**20) * 2)


def test_a_corpus_size_is_read_from_its_preparation_then_its_spec_then_the_registry(tmp_path):
    params = {"data_dir": str(tmp_path), "datasets": {
        "z": {"corpus": {"type": "zipfian", "vocab_size": 100, "train_tokens": 5_000}},
        "w": {"corpus": {"type": "wikitext-2"}}, "l": {"corpus": {"type": "local"}}}}
    assert r.corpus_size(params, "z") == (5_000, 101)
    assert r.corpus_size(params, "w") == (2_088_628, 33_278) and r.corpus_size(params, "l") == r.UNKNOWN
    meta = tmp_path / "prepared" / "w" / "meta.json"
    meta.parent.mkdir(parents=True)
    meta.write_text('{"splits": {"train": {"tokens": 7}}, "vocab_size": 9}')
    assert r.corpus_size(params, "w") == (7, 9)
    with pytest.raises(KeyError):
        r.corpus_size(params, "missing")
