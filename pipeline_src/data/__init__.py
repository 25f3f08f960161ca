"""Corpora to token streams: downloads and the mirror, the synthetic languages with exact truth, tokenization
and vocabularies, unigram noise, batches and evaluation segments, frequency bands."""
