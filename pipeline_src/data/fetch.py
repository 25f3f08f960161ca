"""A dataset's raw files made: a synthetic language generated, a local corpus copied, a registered corpus
downloaded (or copied from the mirror); then the fetch recorded, so later steps can tell it is current."""
from __future__ import annotations

from ..config import mirror_dir
from ..io import paths
from ..io.errors import StaleError
from .checks import check_raw, record_fetch


def fetch_dataset(params: dict, dataset: str, say=print) -> None:
    """Make ``dataset``'s raw folder unless it is current under this config; ``say`` gets one line per event."""
    corpus = params["datasets"][dataset]["corpus"]
    out = paths.raw_dir(params, dataset)
    if out.exists():
        try:
            check_raw(params, dataset)
            say(f"{out} is current (fetched under this config{', local files unchanged' if corpus['type'] == 'local' else ''}): "
                f"nothing to do")
            return
        except StaleError as e:
            say(f"refetching: {e}")
    if corpus["type"] == "synthetic":
        from .synthetic import generate

        truth = generate(corpus, out, params["seed"])
        say(f"synthetic language: {truth['contexts']} contexts x {truth['vocab_size']} words, "
            f"true test ppl {truth['test_ppl']:.3f}, log-prob rank {truth['log_prob_rank']}")
    elif corpus["type"] == "zipfian":
        from .zipfian import generate

        truth = generate(corpus, out, params["seed"])
        say(f"zipfian language: {truth['vocab_size']:,} words in {truth['classes']} classes, Zipf exponent "
            f"{truth['zipf_exponent_fitted']:.3f} fitted on train ({truth['train_types_seen']:,} types seen), true "
            f"test ppl {truth['test_ppl']:.2f} (unigram {truth['test_unigram_ppl']:.2f}), log-prob rank "
            f"{truth['log_prob_rank']}, {truth['generation_s']:.1f} s")
    elif corpus["type"] == "zipfian-topics":
        from .topics import generate

        truth = generate(corpus, out, params["seed"])
        say(f"zipfian language with {truth['topics']} document topics: {truth['vocab_size']:,} words, true test ppl "
            f"{truth['test_ppl']:.2f}, memoryless line {truth['test_memoryless_ppl']:.2f}, knowing the topic worth "
            f"{truth['topic_value_nats']:.3f} nats a token, {truth['generation_s']:.1f} s")
    elif corpus["type"] == "local":
        from .corpora import copy_local

        copy_local(corpus, out)
    else:
        from .corpora import fetch

        fetch(corpus["type"], out, mirror_dir(params))
    record_fetch(params, dataset)
    say(f"wrote {out}")
