"""Melamud et al.'s One Billion Word protocol (config/melamud-lm1b.yaml) end to end on a tiny corpus laid
out like the real archive: the held-out shards are selected by name, the vocabulary rule and the ids'
dtype are the paper's, and every step of the shipped config runs."""
import collections
import json

import numpy as np
import pytest
import yaml
from conftest import ROOT, write_params

from pipeline_src.cli import main
from pipeline_src.data.corpora import REGISTRY
from pipeline_src.data.prepare import EOS, UNK, _id_dtype, build_word_vocab

WORDS = [f"w{i}" for i in range(40)]


def _shard(rng, lines: int, tag: str) -> str:
    """Sentences of a tiny language; ``tag`` (a word only this shard has) shows which shard a split came from."""
    out = []
    for i in range(lines):
        n = int(rng.integers(3, 9))
        out.append(" ".join([tag] * (i == 0) + [WORDS[int(j)] for j in rng.zipf(1.6, n) % len(WORDS)]))
    return "\n".join(out) + "\n"


@pytest.fixture
def lm1b_mirror(tmp_path):
    """<mirror>/lm1b/<the archive's own member paths>, with shards the config must not use."""
    rng = np.random.default_rng(0)
    arc = REGISTRY["lm1b"].archive
    root = tmp_path / "mirror" / "lm1b"
    train_dir = root / arc.members["train"][0].rsplit("/", 1)[0]
    held_dir = root / arc.members["test"][0].rsplit("/", 1)[0]
    train_dir.mkdir(parents=True)
    held_dir.mkdir(parents=True)
    for i in range(1, 100):
        (train_dir / f"news.en-{i:05d}-of-00100").write_text(_shard(rng, 12, f"train{i:02d}"))
    for i in range(0, 50):
        (held_dir / f"news.en.heldout-{i:05d}-of-00050").write_text(_shard(rng, 30, f"heldout{i:02d}"))
    return tmp_path / "mirror"


def test_the_shipped_lm1b_config_runs_end_to_end_on_a_tiny_archive_layout(lm1b_mirror, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("LMBENCH_MIRROR", str(lm1b_mirror))  # the variable wins over `mirror:` (CI sets it)
    p = yaml.safe_load((ROOT / "config" / "melamud-lm1b.yaml").read_text())
    p.update(data_dir=str(tmp_path / "data"), results_dir=str(tmp_path / "results"), mirror=str(lm1b_mirror))
    p["evaluation"]["rank_contexts"] = 50
    p["training"]["checkpoint_every_steps"] = 3
    cfg = write_params(p, tmp_path / "lm1b.yaml")
    run = lambda *a: main([*a, "--config", str(cfg)])  # noqa: E731
    assert run("fetch", "--dataset", "lm1b") == 0 and run("prepare", "--dataset", "lm1b") == 0
    raw = tmp_path / "data" / "raw" / "lm1b"
    test, valid, train = ((raw / f"{s}.txt").read_text() for s in ("test", "valid", "train"))
    assert test.startswith("heldout00 ") and "heldout" not in test[10:]  # held-out shard 0 only
    assert valid.startswith("heldout01 ") and "heldout" not in valid[10:]  # shard 1 only
    tags = [line.split()[0] for line in train.splitlines() if line.startswith("train")]
    assert tags == [f"train{i:02d}" for i in range(1, 100)] and "heldout" not in train  # 99 shards, in order
    source = json.loads((raw / "source.json").read_text())
    assert source["files"]["test"]["members"] == [REGISTRY["lm1b"].archive.members["test"][0]]
    vocab = (tmp_path / "data" / "prepared" / "lm1b" / "vocab.txt").read_text().splitlines()
    counts = collections.Counter(train.split())
    assert all(counts[w] >= 3 for w in vocab if w not in (EOS, UNK))  # min_count 3
    for method in p["run"]["methods"]:
        assert run("train", "--dataset", "lm1b", "--method", method, "--seed", "1") == 0
        assert run("evaluate", "--dataset", "lm1b", "--method", method, "--seed", "1") == 0
    assert run("matrix", "--vocab", "30", "--dim", "4", "--seed", "1") == 0  # the config's (tiny) matrix section
    assert run("reference", "--dataset", "lm1b", "--name", "kn") == 0  # the Kneser-Ney row
    assert run("summarize") == 0
    head = __import__("pandas").read_csv(tmp_path / "results" / "headline.csv").set_index("method")
    assert head.loc["neglm", "paper_ppl"] == 65.84 and head.loc["nce", "paper_ppl"] == 69.28
    metrics = json.loads((tmp_path / "results" / "runs" / "lm1b" / "nce" / "seed1" / "metrics.json").read_text())
    assert metrics["kept_epoch"] == 1 and metrics["config"]["training"]["epochs"] == 1
    # one epoch: the last and the best-validation model are the same weights, scored by the same code
    assert metrics["best_valid_model"]["epoch"] == 1
    assert metrics["best_valid_model"]["test"]["nll"] == pytest.approx(metrics["splits"]["test"]["nll"], rel=1e-6)
    assert metrics["config"]["model"] == {"emb_dim": 512, "hidden_dim": 512, "layers": 1, "dropout": 0.1,
                                          "tie_weights": False}


def test_the_64k_vocabulary_counts_unk_and_eos_and_its_ids_fit_uint16():
    counts = collections.Counter({f"w{i}": 3 + (70_000 - i) for i in range(70_000)})
    counts["rare"] = 2  # below min_count 3
    vocab, c = build_word_vocab(counts, max_vocab=64_000, min_count=3)
    assert len(vocab) == 64_000 and EOS in vocab and UNK in vocab and "rare" not in vocab
    assert "w63997" in vocab and "w63998" not in vocab  # 63,998 words + <unk> + <eos>
    assert c[vocab.index(UNK)] == 2 + sum(3 + (70_000 - i) for i in range(63_998, 70_000))
    assert _id_dtype(len(vocab)) == np.uint16 and np.iinfo(np.uint16).max >= len(vocab) - 1
