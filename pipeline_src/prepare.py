"""Tokenization, frequency-sorted vocabulary, encoded splits and unigram noise distributions.

Output directory (written atomically):
  vocab.txt        one token per line; line i is id i; ids sorted by train frequency (desc), ties by token
  {split}.npy      encoded token ids (uint16 when V <= 65536, else uint32), one ``<eos>`` per line
  noise.npz        counts (V,) int64 train counts; alphas (A,); probs (A, V) float64 = counts^a / sum
  meta.json        sizes, token counts, OOV rates, the data config and its hash
  spm.model        the sentencepiece model (sentencepiece tokenization only)
"""
from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Iterable

import numpy as np

from .atomic import atomic_path, write_json
from .config import config_hash

EOS, UNK = "<eos>", "<unk>"
SPLITS = ("train", "valid", "test")


def read_lines(path: Path) -> Iterable[str]:
    with open(path, encoding="utf-8") as f:
        yield from f


def word_tokens(line: str) -> list[str]:
    """Word level as in Mikolov's and PyTorch's setups: whitespace split plus ``<eos>``."""
    return line.split() + [EOS]


def build_word_vocab(counts: collections.Counter, max_vocab: int | None, min_count: int,
                     closed: list[str] | None = None) -> tuple[list[str], np.ndarray]:
    """Frequency-sorted vocabulary; words cut by ``max_vocab``/``min_count`` are merged into ``<unk>``.

    ``closed`` (the synthetic language's symbol list) adds symbols absent from train with count 0.
    """
    counts = collections.Counter(counts)
    for tok in closed or []:
        counts.setdefault(tok, 0)
    counts.setdefault(EOS, 0)
    counts.setdefault(UNK, 0)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    keep: dict[str, int] = {}
    unk = 0
    for tok, c in ranked:
        special = tok in (EOS, UNK)
        too_rare = c < min_count and not special and closed is None
        over = max_vocab is not None and len(keep) >= max_vocab - (UNK not in keep) - (EOS not in keep)
        if special or not (too_rare or over):
            keep[tok] = c
        else:
            unk += c
    keep[UNK] += unk
    vocab = sorted(keep, key=lambda t: (-keep[t], t))
    return vocab, np.array([keep[t] for t in vocab], dtype=np.int64)


def _id_dtype(v: int):
    return np.uint16 if v <= np.iinfo(np.uint16).max + 1 else np.uint32


def _prepare_word(raw: Path, tok: dict, tmp: Path) -> tuple[list[str], np.ndarray, dict]:
    counts: collections.Counter = collections.Counter()
    for line in read_lines(raw / "train.txt"):
        counts.update(word_tokens(line))
    closed = None
    if (raw / "closed_vocab.txt").exists():
        closed = (raw / "closed_vocab.txt").read_text(encoding="utf-8").split()
    vocab, vcounts = build_word_vocab(counts, tok.get("max_vocab"), tok.get("min_count", 1), closed)
    index = {t: i for i, t in enumerate(vocab)}
    unk = index[UNK]
    stats = {}
    for split in SPLITS:
        ids, oov = [], 0
        for line in read_lines(raw / f"{split}.txt"):
            for t in word_tokens(line):
                i = index.get(t)
                if i is None:
                    oov += 1
                    i = unk
                ids.append(i)
        arr = np.asarray(ids, dtype=_id_dtype(len(vocab)))
        np.save(tmp / f"{split}.npy", arr)
        stats[split] = {"tokens": int(arr.size), "oov_replaced": oov, "unk_rate": float((arr == unk).mean())}
    return vocab, vcounts, stats


def _prepare_spm(raw: Path, tok: dict, seed: int, tmp: Path) -> tuple[list[str], np.ndarray, dict]:
    import sentencepiece as spm

    spm.set_random_generator_seed(seed)
    spm.SentencePieceTrainer.train(
        input=str(raw / "train.txt"), model_prefix=str(tmp / "spm"), vocab_size=tok["vocab_size"],
        model_type=tok.get("model_type", "unigram"), character_coverage=tok.get("character_coverage", 1.0),
        max_sentence_length=tok.get("max_sentence_length", 16384), bos_id=-1, eos_id=-1, pad_id=-1,
        unk_piece="<spm-unk>", user_defined_symbols=[UNK], num_threads=1,
        input_sentence_size=2_000_000, shuffle_input_sentence=True, minloglevel=2)
    (tmp / "spm.vocab").unlink()
    sp = spm.SentencePieceProcessor(model_file=str(tmp / "spm.model"))
    n = sp.get_piece_size()
    eos_spm = n  # our <eos> gets the id after the sentencepiece pieces, before re-sorting

    def encode(split: str) -> np.ndarray:
        out = []
        for line in read_lines(raw / f"{split}.txt"):
            out.extend(sp.encode(line.rstrip("\n")))
            out.append(eos_spm)
        return np.asarray(out, dtype=np.int64)

    encoded = {s: encode(s) for s in SPLITS}
    raw_counts = np.bincount(encoded["train"], minlength=n + 1)
    pieces = [sp.id_to_piece(i) for i in range(n)] + [EOS]
    order = sorted(range(n + 1), key=lambda i: (-raw_counts[i], pieces[i]))
    remap = np.empty(n + 1, dtype=np.int64)
    remap[order] = np.arange(n + 1)
    vocab = [pieces[i] for i in order]
    unk = vocab.index("<spm-unk>")
    stats = {}
    for split in SPLITS:
        arr = remap[encoded[split]].astype(_id_dtype(n + 1))
        np.save(tmp / f"{split}.npy", arr)
        stats[split] = {"tokens": int(arr.size), "oov_replaced": int((arr == unk).sum()),
                        "unk_rate": float((arr == unk).mean())}
    return vocab, raw_counts[order].astype(np.int64), stats


def noise_probs(counts: np.ndarray, alpha: float) -> np.ndarray:
    """Unigram^alpha: counts**alpha normalised (alpha = 0 gives uniform, 0**0 = 1)."""
    w = np.power(counts.astype(np.float64), alpha)
    return w / w.sum()


def prepare(raw: Path, out: Path, data_cfg: dict) -> dict:
    tok = data_cfg["tokenizer"]
    with atomic_path(out) as tmp:
        tmp.mkdir()
        if tok["type"] == "word":
            vocab, counts, stats = _prepare_word(raw, tok, tmp)
        else:
            vocab, counts, stats = _prepare_spm(raw, tok, data_cfg["seed"], tmp)
        (tmp / "vocab.txt").write_text("".join(f"{t}\n" for t in vocab), encoding="utf-8")
        alphas = np.asarray(data_cfg["noise"]["alphas"], dtype=np.float64)
        np.savez(tmp / "noise.npz", counts=counts, alphas=alphas,
                 probs=np.stack([noise_probs(counts, a) for a in alphas]))
        meta = {"vocab_size": len(vocab), "dtype": str(np.load(tmp / "train.npy", mmap_mode="r").dtype),
                "splits": stats, "config": data_cfg, "config_hash": config_hash(data_cfg),
                "source": json.loads((raw / "source.json").read_text()) if (raw / "source.json").exists() else None}
        write_json(tmp / "meta.json", meta)
    return meta


def load_split(prepared: Path, split: str) -> np.ndarray:
    return np.load(prepared / f"{split}.npy")


def load_vocab(prepared: Path) -> list[str]:
    return (prepared / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]
