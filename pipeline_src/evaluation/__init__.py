"""A trained model scored: exact log-probabilities over the whole vocabulary, per-band gaps, the log-probability
matrix's rank, the count-based reference models (Kneser-Ney) and the matrix-fitting experiment."""
