"""Check that two pipeline runs produced the same results (e.g. a local run and a SLURM run).

Usage: python .ci/compare_results.py RESULTS_A RESULTS_B

Compares summary.csv and matrix.csv column by column, except the columns that measure the machine
(throughput, memory, wall time). Training is deterministic on CPU with the same thread count, so the
metrics must agree to the last bit; the tolerance below only absorbs CSV float formatting.
"""
import sys

import numpy as np
import pandas as pd

MACHINE_COLUMNS = {"tokens_per_s_train", "tokens_per_s_eval", "peak_mem_mb", "wall_time_s", "fit_time_s",
                   "train_time_s", "load_avg", "argmax_lp_s_per_word"}
KEYS = {"summary.csv": ["dataset", "method", "seed", "split"], "matrix.csv": ["vocab", "dim", "seed", "method"]}


def compare(a_dir: str, b_dir: str) -> list[str]:
    problems = []
    for name, keys in KEYS.items():
        a = pd.read_csv(f"{a_dir}/{name}").sort_values(keys).reset_index(drop=True)
        b = pd.read_csv(f"{b_dir}/{name}").sort_values(keys).reset_index(drop=True)
        if not a[keys].equals(b[keys]):
            problems.append(f"{name}: different rows ({len(a)} vs {len(b)})")
            continue
        for col in sorted(set(a.columns) - MACHINE_COLUMNS):
            if col not in b.columns:
                problems.append(f"{name}: column {col} missing in {b_dir}")
            elif pd.api.types.is_numeric_dtype(a[col]):
                if not np.allclose(a[col], b[col], rtol=1e-12, atol=0, equal_nan=True):
                    bad = (~np.isclose(a[col], b[col], rtol=1e-12, atol=0, equal_nan=True)).sum()
                    problems.append(f"{name}: {col} differs in {bad} rows")
            elif not a[col].fillna("").equals(b[col].fillna("")):
                problems.append(f"{name}: {col} differs")
        print(f"{name}: {len(a)} rows compared")
    return problems


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    problems = compare(sys.argv[1], sys.argv[2])
    for p in problems:
        print("MISMATCH", p)
    sys.exit(1 if problems else 0)
