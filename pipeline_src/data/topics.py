"""A Zipfian language with a latent topic per document: exact truth that no n-gram holds.

The Zipfian class language (:mod:`zipfian`: its vocabulary, classes, class trigram T and emissions E) is a trigram,
so Kneser-Ney contains it. Here the text is documents of sentences; each document draws a topic z uniformly from K
(``topics``, default 32) and every word of the document is emitted from its class given z:

    E_z[w | c] = E[w | c] (1 + (lambda - 1) [home(w) = z]) / (1 + (lambda - 1) m[c, z])

each word having one home topic (a seeded uniform draw) that multiplies its weight by lambda (``topic_boost``),
m[c, z] the mass E puts on class c's words whose home is z. The classes' trigram does not depend on z. A document
ends after each sentence with probability 1 / ``doc_sentences`` (geometric, mean 20 sentences by default), and its
end is marked in the text by an empty line: a second ``<eos>`` right after a sentence's (a sentence is never empty).

Three exact lines per split (``truth.json``; the per-token arrays beside it):

- **the truth**, p(w_t | everything before it in its document): the topic's posterior updated token by token (the
  forward recursion over z, O(K) a token, as cumulative sums of log p(w | context, z) within each document);
- **the memoryless line** (the topic-marginal trigram), sum over z of p(w | context, z) / K: the truth with the
  topic averaged out, what a model that takes no evidence of the topic from anything it has read achieves. It is
  not the best a trigram model can do: the last two words carry some evidence of z, so a trigram (Kneser-Ney's
  KN3 with enough data) can land below it;
- **the topic-known line**, a model told z: their gap, memoryless minus topic-known, is what knowing the topic is
  worth per token (``topic_value_nats``); the truth's gap to the memoryless line (``memory_value_nats``) is what
  reading the topic off the document can win, an upper bound on what memory beyond a trigram wins.

The boundary ``<eos>`` costs log(1 / doc_sentences) in every line (whether a document ends does not depend on z),
and the first word of a document is drawn from the prior over z.
"""
from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

from ..io import paths
from ..io.atomic import atomic_path, write_json
from .zipfian import DEFAULTS as ZIPF_DEFAULTS
from .zipfian import ZipfLanguage, class_contexts, reference_lines, symbols, write_text

# topic_boost 32: knowing z is worth 0.38 nats a token at 10k words (0.30 at 24, 0.46 at 40; truth.json states it)
DEFAULTS = {**ZIPF_DEFAULTS, "topics": 32, "topic_boost": 32.0, "doc_sentences": 20}


class TopicLanguage:
    """The Zipfian language's parameters plus each word's home topic; exact conditionals per topic."""

    def __init__(self, spec: dict, rng: np.random.Generator):
        self.base = ZipfLanguage(spec, rng)
        b = self.base
        self.k, self.boost = int(spec["topics"]), float(spec["topic_boost"])
        self.p_end = 1.0 / spec["doc_sentences"]
        self.home = np.full(b.v, -1, dtype=np.int64)  # <eos> has none
        self.home[1:] = rng.integers(0, self.k, b.v - 1)
        mass = np.zeros((b.c, self.k))
        np.add.at(mass, (b.word_class[1:], self.home[1:]), np.exp(b.log_emit[1:]))
        self.log_norm = np.log1p((self.boost - 1.0) * mass)  # (C, K); class 0 (<eos>): 0

    def word_log_probs(self, stream: np.ndarray) -> np.ndarray:
        """(T, K) log p(w_t | its two previous classes in the sentence, z) for every token of a stream of whole
        sentences (boundary <eos> tokens removed: :func:`split_documents`)."""
        b = self.base
        cls = b.word_class[stream]
        at_home = self.home[stream][:, None] == np.arange(self.k)[None, :]
        return (b.log_t[class_contexts(cls, b.c), cls] + b.log_emit[stream])[:, None] \
            + math.log(self.boost) * at_home - self.log_norm[cls]

    def sample(self, n_tokens: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Documents until the stream holds at least ``n_tokens`` (whole documents, each followed by its boundary),
        and each document's topic."""
        b = self.base
        cdf = np.cumsum(np.exp(b.log_t), axis=1)
        cdf /= cdf[:, -1:]
        base_key, home_key = _keys(b, self.home, self.k)
        docs, topics, total, last_boundary = [], [], 0, -1
        open_topic = None  # the topic of a document still open when a round of sentences ends: it goes on
        while total < n_tokens or last_boundary < n_tokens - 1:
            cls = b._sentences(cdf, rng)  # whole sentences, one after another
            ends = np.flatnonzero(cls == 0)
            last = rng.random(ends.size) < self.p_end  # a document ends after this sentence
            doc_of_sentence = np.concatenate([[0], np.cumsum(last)[:-1]])
            doc_topic = rng.integers(0, self.k, int(doc_of_sentence[-1]) + 1)
            if open_topic is not None:
                doc_topic[0] = open_topic
            sentence = np.repeat(np.arange(ends.size), np.diff(np.concatenate([[-1], ends])))
            words = self._words(cls, doc_topic[doc_of_sentence][sentence], base_key, home_key, rng)
            # the boundary after each document's last sentence: an extra <eos> after that sentence's own
            out = np.insert(words, ends[last] + 1, 0)
            if last.any():
                last_boundary = total + int(np.flatnonzero((out[:-1] == 0) & (out[1:] == 0))[-1]) + 1
            docs.append(out)
            topics.append(doc_topic[:int(last.sum())])  # the documents this round closed, in order
            open_topic = None if last[-1] else int(doc_topic[-1])
            total += out.size
        stream, doc_topics = np.concatenate(docs), np.concatenate(topics)
        bounds = np.flatnonzero((stream[:-1] == 0) & (stream[1:] == 0)) + 1  # each boundary's position
        n_docs = int(np.searchsorted(bounds, n_tokens - 1)) + 1  # whole documents until n_tokens are reached
        return stream[:bounds[n_docs - 1] + 1], doc_topics[:n_docs]

    def _words(self, cls: np.ndarray, z: np.ndarray, base_key, home_key, rng) -> np.ndarray:
        """The word of each token given its class and topic: E_z[. | c] is E[. | c] with probability
        1 / (1 + (lambda - 1) m[c, z]), else E[. | c] restricted to the words whose home is z."""
        mass = np.expm1(self.log_norm[cls, z]) / max(self.boost - 1.0, 1e-300)  # m[c, z] (0 where lambda = 1)
        from_home = rng.random(cls.shape) < (self.boost - 1.0) * mass / (1.0 + (self.boost - 1.0) * mass)
        u = rng.random(cls.shape) * (1 - 1e-12)
        key, order = base_key
        words = order[np.searchsorted(key[order], cls + u)]
        hkey, horder = home_key
        sel = from_home & (cls != 0)
        words[sel] = horder[np.searchsorted(hkey[horder], (cls[sel] * self.k + z[sel]) + u[sel])]
        return np.where(cls == 0, 0, words)


def _keys(b: ZipfLanguage, home: np.ndarray, k: int):
    """Search keys for drawing a word: (class + its cumulative E[w | c], sorted order), and for the words of one
    home topic within a class (class * K + home + its cumulative share of that group's mass, sorted order)."""
    from .zipfian import _emission_keys

    key = _emission_keys(b.word_class, b.log_emit, b.c)
    group = b.word_class * k + home  # <eos>: class 0, home -1
    p = np.exp(b.log_emit)
    hkey = np.full(b.v, np.inf)
    words = np.flatnonzero(home >= 0)
    order = words[np.argsort(group[words], kind="stable")]
    g = group[order]
    cum = np.cumsum(p[order])
    first = np.flatnonzero(np.diff(np.concatenate([[-1], g])) != 0)
    start_cum = np.repeat(np.concatenate([[0.0], cum[first[1:] - 1]]), np.diff(np.concatenate([first, [g.size]])))
    total = np.repeat(cum[np.concatenate([first[1:], [g.size]]) - 1], np.diff(np.concatenate([first, [g.size]]))) \
        - start_cum
    hkey[order] = g + (cum - start_cum) / total
    return (key, np.argsort(key, kind="stable")), (hkey, np.argsort(hkey, kind="stable"))


def split_documents(stream: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(tokens without the boundaries, each kept token's document index, the boundary positions in ``stream``)."""
    boundary = np.zeros(stream.size, dtype=bool)
    boundary[1:] = (stream[1:] == 0) & (stream[:-1] == 0)
    doc = np.cumsum(boundary)[~boundary]
    return stream[~boundary], doc, np.flatnonzero(boundary)


def log_lines(lang: TopicLanguage, stream: np.ndarray, doc_topics: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """(T,) exact log p of every token of ``stream`` in the truth (the posterior over z within its document), the
    memoryless line (the topic-marginal trigram) and, given each document's topic (``doc_topics``, known where the
    stream was drawn), the topic-known line. A boundary costs log p_end in every line, and the first word of a
    sentence (not of a document) log (1 - p_end) more: whether a document ends does not depend on z."""
    kept, doc, bounds = split_documents(stream)
    ell = lang.word_log_probs(kept)  # (T', K)
    prior = -math.log(lang.k)
    idx = np.arange(kept.size)
    starts = np.flatnonzero(np.diff(np.concatenate([[-1], doc])) != 0)  # each document's first kept token
    start_of = starts[np.searchsorted(starts, idx, side="right") - 1]
    joint = np.vstack([np.zeros((1, lang.k)), np.cumsum(ell, axis=0)])  # (T' + 1, K)
    before = joint[idx] - joint[start_of]  # the document's log likelihood of its tokens before t, per z
    truth = np.logaddexp.reduce(prior + before + ell, axis=1) - np.logaddexp.reduce(prior + before, axis=1)
    memoryless = np.logaddexp.reduce(prior + ell, axis=1)
    first_of_sentence = np.zeros(kept.size, dtype=bool)
    first_of_sentence[1:] = kept[:-1] == 0
    first_of_sentence[starts] = False  # a document's first word: no boundary could have come instead
    extra = np.where(first_of_sentence, math.log1p(-lang.p_end), 0.0)
    lines = {"truth": truth, "memoryless": memoryless}
    if doc_topics is not None:
        lines["topic_known"] = ell[idx, doc_topics[doc]]
    keep = np.ones(stream.size, dtype=bool)
    keep[bounds] = False
    out = {}
    for name, lp in lines.items():
        full = np.full(stream.size, math.log(lang.p_end))
        full[keep] = lp + extra
        out[name] = full
    return out


def from_tables(tables, doc_sentences: float) -> TopicLanguage:
    """A TopicLanguage rebuilt from its saved tables (``truth.npz``) and ``doc_sentences`` (``truth.json``): what
    the truth's lines and band masses need, without the sampler's draws."""
    from types import SimpleNamespace

    lang = TopicLanguage.__new__(TopicLanguage)
    log_t = np.asarray(tables["log_t"])
    lang.base = SimpleNamespace(log_t=log_t, word_class=np.asarray(tables["word_class"]),
                                log_emit=np.asarray(tables["log_emit"]), c=log_t.shape[1],
                                v=np.asarray(tables["word_class"]).size)
    lang.home, lang.log_norm = np.asarray(tables["home"]), np.asarray(tables["log_norm"])
    lang.k, lang.boost = lang.log_norm.shape[1], float(tables["topic_boost"])
    lang.p_end = 1.0 / float(doc_sentences)
    return lang


def band_log_mass(lang: TopicLanguage, stream: np.ndarray, word_band: np.ndarray, bands: int) -> np.ndarray:
    """(T,) log q*(band of w_t | everything before it in its document) for every token of ``stream`` (boundaries
    included): the truth's mass on the target's frequency band, by the same forward recursion as the truth.

    With post_t(z) the topic's posterior before token t and M[c, z, b] the mass class c's words of band b have
    under topic z, a token inside a sentence has q_t(b) = sum_z post_t(z) sum_c T[context, c] M[c, z, b]; a
    sentence's first word (not its document's) mixes in the boundary: p_end [b = band(<eos>)] + (1 - p_end) times
    that sum from the start context; a boundary is that mixture at the document's end; a document's first word is
    the sum under the prior. ``word_band``: each symbol's band (``<eos>``, symbol 0, included)."""
    b = lang.base
    kept, doc, bounds = split_documents(stream)
    ell = lang.word_log_probs(kept)  # (T', K)
    idx = np.arange(kept.size)
    starts = np.flatnonzero(np.diff(np.concatenate([[-1], doc])) != 0)
    start_of = starts[np.searchsorted(starts, idx, side="right") - 1]
    joint = np.vstack([np.zeros((1, lang.k)), np.cumsum(ell, axis=0)])

    def posterior(log_lik: np.ndarray) -> np.ndarray:  # (n, K) log-likelihoods of the document so far -> post
        return np.exp(log_lik - np.logaddexp.reduce(log_lik, axis=1, keepdims=True))

    words = np.arange(1, b.v)
    at_home = lang.home[words][:, None] == np.arange(lang.k)[None, :]
    emit = np.exp(b.log_emit[words][:, None] + math.log(lang.boost) * at_home - lang.log_norm[b.word_class[words]])
    mass = np.zeros((b.c, lang.k, bands))  # M[c, z, b]
    for band in range(bands):
        sel = word_band[words] == band
        np.add.at(mass[:, :, band], b.word_class[words][sel], emit[sel])
    mass[0, :, word_band[0]] = 1.0  # the <eos> class emits <eos>
    q_ctx = (np.exp(b.log_t) @ mass.reshape(b.c, -1)).reshape(-1, lang.k, bands)  # (C*C, K, B)
    q = np.einsum("tk,tkb->tb", posterior(joint[idx] - joint[start_of]),
                  q_ctx[class_contexts(b.word_class[kept], b.c)])  # (T', B)
    first_of_sentence = np.zeros(kept.size, dtype=bool)
    first_of_sentence[1:] = kept[:-1] == 0
    first_of_sentence[starts] = False
    eos = np.arange(bands) == word_band[0]
    q[first_of_sentence] = lang.p_end * eos + (1.0 - lang.p_end) * q[first_of_sentence]
    out = np.empty(stream.size)
    keep = np.ones(stream.size, dtype=bool)
    keep[bounds] = False
    with np.errstate(divide="ignore"):
        out[keep] = np.log(q[idx, word_band[kept]])
        if bounds.size:  # the document that ends there: its posterior after its last token, the start context
            last = np.searchsorted(np.flatnonzero(keep), bounds) - 1  # each boundary's previous kept token
            at_end = posterior(joint[last + 1] - joint[start_of[last]]) @ q_ctx[0]  # (n, B)
            out[bounds] = np.log(lang.p_end + (1.0 - lang.p_end) * at_end[:, word_band[0]])
    return out


def generate(spec: dict, out_dir: Path, seed: int) -> dict:
    """Write train/valid/test text (documents separated by an empty line), ``closed_vocab.txt``, each split's
    per-token truth (``truth-{split}.npy``, as the Zipfian language's, so evaluation reads it the same way) and
    memoryless line (``memoryless-{split}.npy``), the tables (``truth.npz``) and ``truth.json`` atomically."""
    t0 = time.perf_counter()
    spec = {**DEFAULTS, **spec}
    seed = spec.get("seed", seed)
    rng = np.random.default_rng(seed)
    lang = TopicLanguage(spec, rng)
    names = symbols(lang.base.v)
    drawn = {split: lang.sample(spec[f"{split}_tokens"], rng) for split in ("train", "valid", "test")}
    streams = {split: stream for split, (stream, _) in drawn.items()}
    generation_s = time.perf_counter() - t0
    counts = np.bincount(streams["train"], minlength=lang.base.v)
    lines = {split: log_lines(lang, stream, topics) for split, (stream, topics) in drawn.items() if split != "train"}
    truth = {"corpus": "zipfian-topics", "vocab_size": lang.base.v, "classes": lang.base.c, "topics": lang.k,
             "topic_boost": lang.boost, "doc_sentences": spec["doc_sentences"], "seed": seed, "spec": spec,
             "generation_s": generation_s, "lines_s": time.perf_counter() - t0 - generation_s}
    truth.update(reference_lines(lang.base, {s: streams[s] for s in ("valid", "test")},
                                 {s: lines[s]["truth"] for s in ("valid", "test")}, counts))
    truth["train_tokens"] = int(streams["train"].size)
    for split, ls in lines.items():
        for name in ("memoryless", "topic_known"):
            truth[f"{split}_{name}_nll"] = float(-ls[name].mean())
            truth[f"{split}_{name}_ppl"] = math.exp(truth[f"{split}_{name}_nll"])
        truth[f"{split}_documents"] = int(drawn[split][1].size)
    # what knowing the topic is worth, and what memory of the document wins of it, in nats a token
    truth["topic_value_nats"] = truth["test_memoryless_nll"] - truth["test_topic_known_nll"]
    truth["memory_value_nats"] = truth["test_memoryless_nll"] - truth["test_nll"]
    with atomic_path(out_dir, marker=paths.SOURCE) as tmp:
        tmp.mkdir()
        for split, stream in streams.items():
            write_text(tmp / f"{split}.txt", stream, names)
            if split != "train":
                np.save(tmp / f"truth-{split}.npy", lines[split]["truth"])
                np.save(tmp / f"memoryless-{split}.npy", lines[split]["memoryless"])
        (tmp / paths.CLOSED_VOCAB).write_text("".join(f"{s}\n" for s in names), encoding="utf-8")
        np.savez_compressed(tmp / paths.TRUTH, log_t=lang.base.log_t, word_class=lang.base.word_class,
                            log_emit=lang.base.log_emit, home=lang.home, log_norm=lang.log_norm,
                            topic_boost=lang.boost, symbols=np.array(names))
        truth["write_s"] = time.perf_counter() - t0 - generation_s - truth["lines_s"]
        write_json(tmp / paths.TRUTH_SUMMARY, truth)
        write_json(tmp / paths.SOURCE, {"corpus": "zipfian-topics", "spec": spec, "seed": seed})
    return truth
