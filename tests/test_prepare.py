import collections
import json

import numpy as np
import pytest

from pipeline_src.data.prepare import build_word_vocab, load_split, load_vocab, noise_probs, prepare

CFG = {"dataset": "t", "corpus": {"type": "local"}, "tokenizer": {"type": "word"},
       "noise": {"alphas": [0.0, 0.75, 1.0]}, "seed": 0}


def _raw(tmp_path, train, valid="a b\n", test="b zz\n"):
    raw = tmp_path / "raw"
    raw.mkdir()
    for name, text in (("train", train), ("valid", valid), ("test", test)):
        (raw / f"{name}.txt").write_text(text)
    return raw


def test_word_vocab_is_frequency_sorted_with_eos_and_unk(tmp_path):
    raw = _raw(tmp_path, " b a b\n c b a \n")
    meta = prepare(raw, tmp_path / "out", CFG)
    vocab = load_vocab(tmp_path / "out")
    # counts: b 3, <eos> 2, a 2, c 1, <unk> 0 ; ties broken by the token string
    assert vocab == ["b", "<eos>", "a", "c", "<unk>"]
    assert load_split(tmp_path / "out", "train").tolist() == [0, 2, 0, 1, 3, 0, 2, 1]
    assert load_split(tmp_path / "out", "test").tolist() == [0, 4, 1]  # zz -> <unk>
    assert meta["splits"]["test"]["oov_replaced"] == 1
    assert meta["splits"]["train"]["tokens"] == 8 and meta["vocab_size"] == 5
    assert load_split(tmp_path / "out", "train").dtype == np.uint16


def test_max_vocab_and_min_count_merge_into_unk():
    counts = collections.Counter({"a": 5, "b": 4, "c": 2, "d": 1, "<eos>": 3})
    vocab, c = build_word_vocab(counts, max_vocab=4, min_count=1)
    assert vocab == ["a", "b", "<eos>", "<unk>"] and c.tolist() == [5, 4, 3, 3]
    vocab, c = build_word_vocab(counts, max_vocab=None, min_count=2)
    assert vocab == ["a", "b", "<eos>", "c", "<unk>"] and c.tolist() == [5, 4, 3, 2, 1]
    assert c.sum() == sum(counts.values())


def test_closed_vocabulary_keeps_unseen_symbols(tmp_path):
    raw = _raw(tmp_path, "a a\n", valid="q\n", test="a\n")
    (raw / "closed_vocab.txt").write_text("<eos>\na\nq\n")
    prepare(raw, tmp_path / "out", CFG)
    vocab = load_vocab(tmp_path / "out")
    assert "q" in vocab and load_split(tmp_path / "out", "valid").tolist() == [vocab.index("q"), vocab.index("<eos>")]


def test_noise_distributions(tmp_path):
    prepare(_raw(tmp_path, "a a a b\n"), tmp_path / "out", CFG)
    z = np.load(tmp_path / "out" / "noise.npz")
    counts, probs = z["counts"], z["probs"]
    assert z["alphas"].tolist() == [0.0, 0.75, 1.0]
    assert np.allclose(probs.sum(1), 1.0)
    assert np.allclose(probs[0], 1 / len(counts))  # alpha 0: uniform
    assert np.allclose(probs[2], counts / counts.sum())  # alpha 1: unigram
    w = counts ** 0.75
    assert np.allclose(probs[1], w / w.sum())
    assert np.allclose(noise_probs(np.array([1, 3]), 0.5), np.sqrt([1, 3]) / np.sqrt([1, 3]).sum())


def test_prepare_is_atomic_on_failure(tmp_path):
    raw = _raw(tmp_path, "a\n")
    (raw / "test.txt").unlink()
    with pytest.raises(FileNotFoundError):
        prepare(raw, tmp_path / "out", CFG)
    assert not (tmp_path / "out").exists()
    assert list(tmp_path.iterdir()) == [raw]  # no temporary left behind


def test_sentencepiece_trains_on_train_only_and_sorts_ids(tmp_path, mirror):
    text = (mirror / "tinyshakespeare" / "input.txt").read_text().splitlines()
    raw = _raw(tmp_path, "\n".join(text[:20000]) + "\n", "\n".join(text[20000:22000]) + "\n",
               "\n".join(text[22000:24000]) + "\n")
    cfg = dict(CFG, tokenizer={"type": "sentencepiece", "model_type": "bpe", "vocab_size": 300})
    meta = prepare(raw, tmp_path / "out", cfg)
    out = tmp_path / "out"
    vocab = load_vocab(out)
    assert len(vocab) == meta["vocab_size"] == 301  # 300 pieces + <eos>
    counts = np.load(out / "noise.npz")["counts"]
    assert (np.diff(counts) <= 0).all()  # frequency-sorted ids
    train = load_split(out, "train")
    assert np.bincount(train, minlength=len(vocab)).tolist() == counts.tolist()
    assert (train == vocab.index("<eos>")).sum() == 20000
    assert (out / "spm.model").exists() and json.loads((out / "meta.json").read_text())["config"] == cfg


def test_noise_and_unigram_floats_are_the_same_bits_on_any_cpu():
    """noise.npz and meta.json's unigram perplexities enter every record's data digest, so they must not depend on
    the CPU. NumPy's vectorised float64 power and log gave other last bits on the AVX-512 machine of earlier
    sessions (SVML: noise.npz and meta.json differed from an AVX2 machine's, so every record's data digest did);
    the C library's are the same everywhere. Digests measured on an AVX2 CPU."""
    import hashlib

    from pipeline_src.data.prepare import unigram_log_probs

    counts = 10_000_000 // np.arange(1, 200_002, dtype=np.int64)  # Zipfian, with many equal counts; integers only
    digest = lambda a: hashlib.sha256(a.tobytes()).hexdigest()[:16]  # noqa: E731
    assert digest(noise_probs(counts, 0.75)) == "8f7ca8ce5981ddf5"
    assert digest(unigram_log_probs(counts)) == "83148e316925c00b"


def test_the_few_tokens_warning_counts_what_an_evaluation_scores(tmp_path):
    """A review's weak case: 105 test tokens passed prepare's raw count, but an evaluation in batches of 10 scores
    (105 // 10 - 1) x 10 = 90, and publish refused them. The warning now counts the scored tokens."""
    line = " ".join(["a b c d e f g h i j k l m n"] * 7) + "\n"  # 98 words + <eos> = 99 a line
    test = line + "a b c d e\n"  # 99 + 6 = 105 tokens
    raw = _raw(tmp_path, line * 3, valid=line + line, test=test)
    meta = prepare(raw, tmp_path / "out", CFG, eval_batch_size=10)
    assert meta["splits"]["test"]["tokens"] == 105
    assert [w for w in meta["warnings"] if w.startswith("test:")] == [
        "test: 105 tokens, of which an evaluation in batches of 10 scores 90; a perplexity from fewer than 100 is "
        "noise, and publish refuses it"]
    assert not [w for w in meta["warnings"] if w.startswith("valid:")]  # 198 tokens: 180 scored
    assert not prepare(raw, tmp_path / "one", CFG, eval_batch_size=1)["warnings"]  # 104 scored one row at a time
    # a second review: the warning depends on the evaluation's batch, which the data's hash does not hold; two
    # preparations that differ in it alone hold the same tokens (records scored on one stay current on the other)
    from pipeline_src.data.checks import token_difference

    a, b = (json.loads((tmp_path / d / "meta.json").read_text()) for d in ("out", "one"))
    assert a["warnings"] != b["warnings"] and token_difference(a, b) is None


def test_the_scored_count_is_the_scored_positions():
    from pipeline_src.data.batching import scored_positions
    from pipeline_src.data.checks import scored_tokens

    for n in (0, 5, 99, 105, 1000, 2049):
        for b in (1, 4, 10, 64):
            assert scored_tokens(n, b) == scored_positions(n, b).size, (n, b)
