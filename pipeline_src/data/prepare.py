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
import math
from pathlib import Path
from typing import Iterable

import numpy as np

from ..config import config_hash
from ..io import paths
from ..io.artifacts import read_json
from ..io.atomic import atomic_path, write_json
from ..io.digests import sha256_of

EOS, UNK = "<eos>", "<unk>"
SPLITS = ("train", "valid", "test")


OOV_WARN = 0.05  # out-of-vocabulary share of valid/test above which prepare warns


class CorpusContentError(ValueError):
    """A corpus file that cannot be used as it is (encoding, empty split, tokenizer limits)."""


def read_lines(path: Path) -> Iterable[str]:
    """Lines of a UTF-8 file; a byte that is not UTF-8 is an error naming the file, line and byte."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):  # a byte-order mark is not a word of the text
                raw = raw[3:]
            if b"\x00" in raw:
                raise CorpusContentError(f"{path}: line {lineno} holds a NUL byte (binary data, or UTF-16 text): "
                                         f"convert the file to UTF-8 text")
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise CorpusContentError(f"{path}: line {lineno}, byte {e.start + 1} of the line (0x{raw[e.start]:02x}) "
                                         f"is not UTF-8; convert the file (e.g. `iconv -f latin1 -t utf-8`)") from None


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
    if (raw / paths.CLOSED_VOCAB).exists():
        closed = (raw / paths.CLOSED_VOCAB).read_text(encoding="utf-8").split()
    vocab, vcounts = build_word_vocab(counts, tok.get("max_vocab"), tok.get("min_count", 1), closed)
    index = {t: i for i, t in enumerate(vocab)}
    unk = index[UNK]
    stats = {}
    for split in SPLITS:
        ids, oov, lines = [], 0, 0
        for line in read_lines(raw / f"{split}.txt"):
            lines += 1
            for t in word_tokens(line):
                i = index.get(t)
                if i is None:
                    oov += 1
                    i = unk
                ids.append(i)
        arr = np.asarray(ids, dtype=_id_dtype(len(vocab)))
        np.save(tmp / f"{split}.npy", arr)
        stats[split] = {"tokens": int(arr.size), "lines": lines, "oov_replaced": oov,
                        "unk_rate": float((arr == unk).mean()) if arr.size else 1.0}
    return vocab, vcounts, stats


def _prepare_spm(raw: Path, tok: dict, seed: int, tmp: Path) -> tuple[list[str], np.ndarray, dict]:
    import sentencepiece as spm

    spm.set_random_generator_seed(seed)
    for split in SPLITS:  # decode errors name the file and line before sentencepiece sees the text
        for _ in read_lines(raw / f"{split}.txt"):
            pass
    try:
        spm.SentencePieceTrainer.train(
            input=str(raw / "train.txt"), model_prefix=str(tmp / "spm"), vocab_size=tok["vocab_size"],
            model_type=tok.get("model_type", "unigram"), character_coverage=tok.get("character_coverage", 1.0),
            max_sentence_length=tok.get("max_sentence_length", 16384), bos_id=-1, eos_id=-1, pad_id=-1,
            unk_piece="<spm-unk>", user_defined_symbols=[UNK], num_threads=1,
            input_sentence_size=2_000_000, shuffle_input_sentence=True, minloglevel=2)
    except RuntimeError as e:
        msg = str(e).splitlines()[-1] if str(e) else type(e).__name__
        if "vocab_size" in msg.lower() or "vocabulary size" in msg.lower():
            raise CorpusContentError(f"key 'tokenizer.vocab_size': {tok['vocab_size']} is more than sentencepiece can "
                                     f"build from {raw / 'train.txt'} ({msg}); lower it") from None
        raise CorpusContentError(f"sentencepiece could not train on {raw / 'train.txt'}: {msg}") from None
    (tmp / "spm.vocab").unlink()
    sp = spm.SentencePieceProcessor(model_file=str(tmp / "spm.model"))
    n = sp.get_piece_size()
    eos_spm = n  # our <eos> gets the id after the sentencepiece pieces, before re-sorting

    lines = {}

    def encode(split: str) -> np.ndarray:
        out, n_lines = [], 0
        for line in read_lines(raw / f"{split}.txt"):
            out.extend(sp.encode(line.rstrip("\n")))
            out.append(eos_spm)
            n_lines += 1
        lines[split] = n_lines
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
        stats[split] = {"tokens": int(arr.size), "lines": lines[split], "oov_replaced": int((arr == unk).sum()),
                        "unk_rate": float((arr == unk).mean()) if arr.size else 1.0}
    return vocab, raw_counts[order].astype(np.int64), stats


def _libm(fn, x: np.ndarray) -> np.ndarray:
    """``fn`` (a function of :mod:`math`) elementwise, through the C library: NumPy's own vectorised float64
    ``power`` and ``log`` differ from it in the last bit on some CPUs (SVML on AVX-512), which made noise.npz and
    meta.json, and so every record's data digest, depend on the machine that prepared the data."""
    return np.fromiter(map(fn, x.ravel().tolist()), dtype=np.float64, count=x.size).reshape(x.shape)


def noise_probs(counts: np.ndarray, alpha: float) -> np.ndarray:
    """Unigram^alpha: counts**alpha normalised (alpha = 0 gives uniform, 0**0 = 1); the same bits on any CPU."""
    w = _libm(lambda c: math.pow(c, alpha), counts.astype(np.float64))
    return w / w.sum()


def unigram_log_probs(counts: np.ndarray) -> np.ndarray:
    """(V,) log p of the add-one unigram model of the train ``counts``: the context-free line a trained model
    must beat (a word unseen in train keeps a non-zero probability); the same bits on any CPU."""
    return _libm(math.log, (counts.astype(np.float64) + 1.0) / (counts.sum() + counts.size))


def unigram_nll(counts: np.ndarray, ids: np.ndarray) -> float:
    """Mean nll of ``ids`` under :func:`unigram_log_probs`."""
    return float(-unigram_log_probs(counts)[np.asarray(ids, dtype=np.int64).ravel()].mean())


def _check_splits(raw: Path, stats: dict, vocab: list[str], eval_batch_size: int = 1) -> list[str]:
    """Errors for unusable splits; warnings (returned) for high out-of-vocabulary rates."""
    for split in SPLITS:
        content = stats[split]["tokens"] - stats[split]["lines"]  # every line adds one <eos>
        if content <= 0:
            raise CorpusContentError(f"{raw / (split + '.txt')}: the {split} split has no tokens (empty or whitespace only)")
    if len(vocab) <= 2 or stats["train"]["unk_rate"] >= 1.0:
        raise CorpusContentError(f"{raw / 'train.txt'}: no in-vocabulary token besides <eos>/<unk>")
    from .checks import MIN_SCORED_TOKENS, scored_tokens

    warnings = []
    for split in ("valid", "test"):
        n = stats[split]["tokens"]
        scored = scored_tokens(n, eval_batch_size)
        if scored < MIN_SCORED_TOKENS:
            warnings.append(f"{split}: {n} tokens, of which an evaluation in batches of {eval_batch_size} scores "
                            f"{scored}; a perplexity from fewer than {MIN_SCORED_TOKENS} is noise, and publish "
                            f"refuses it")
        rate = stats[split]["oov_replaced"] / max(stats[split]["tokens"] - stats[split]["lines"], 1)
        stats[split]["oov_rate"] = rate
        if rate > OOV_WARN:
            warnings.append(f"{split}: {rate:.1%} of its tokens are out of the vocabulary (mapped to <unk>), above "
                            f"{OOV_WARN:.0%}; is the train split ({stats['train']['tokens']:,} tokens) large enough?")
    return warnings


def prepare(raw: Path, out: Path, data_cfg: dict, eval_batch_size: int = 1) -> dict:
    """``raw``'s splits as token ids in ``out`` (vocabulary, unigram noise, meta.json); ``eval_batch_size``, the
    dataset's ``evaluation.batch_size``, sets how many test and valid tokens an evaluation scores (warned under
    100)."""
    import sys

    tok = data_cfg["tokenizer"]
    with atomic_path(out, marker=paths.META) as tmp:
        tmp.mkdir()
        if tok["type"] == "word":
            vocab, counts, stats = _prepare_word(raw, tok, tmp)
        else:
            vocab, counts, stats = _prepare_spm(raw, tok, data_cfg["seed"], tmp)
        warnings = _check_splits(raw, stats, vocab, eval_batch_size)
        for w in warnings:
            print(f"warning: {w}", file=sys.stderr)
        (tmp / paths.VOCAB).write_text("".join(f"{t}\n" for t in vocab), encoding="utf-8")
        alphas = np.asarray(data_cfg["noise"]["alphas"], dtype=np.float64)
        np.savez(tmp / paths.NOISE, counts=counts, alphas=alphas,
                 probs=np.stack([noise_probs(counts, a) for a in alphas]))
        meta = {"vocab_size": len(vocab), "dtype": str(np.load(tmp / "train.npy", mmap_mode="r").dtype),
                "splits": stats, "warnings": warnings, "config": data_cfg, "config_hash": config_hash(data_cfg),
                "unigram_ppl": {split: math.exp(unigram_nll(counts, np.load(tmp / f"{split}.npy")))  # C library
                                for split in ("valid", "test")},
                "source": read_json(raw / paths.SOURCE) if (raw / paths.SOURCE).exists() else None,
                # what check_prepared holds the files to: an edited or truncated split is refused, not trained on
                "files": {f.name: sha256_of(f) for f in sorted(tmp.iterdir()) if f.is_file()}}
        write_json(tmp / paths.META, meta)
    return meta


def load_split(prepared: Path, split: str) -> np.ndarray:
    return np.load(prepared / f"{split}.npy")


def load_vocab(prepared: Path) -> list[str]:
    return (prepared / paths.VOCAB).read_text(encoding="utf-8").split("\n")[:-1]
