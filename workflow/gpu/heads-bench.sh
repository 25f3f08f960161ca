#!/usr/bin/env bash
# Every head's training step on a lent GPU (issue 79, item 5; docs/bench.md "The same cells on a GPU"): bench-cells
# at the sweep's shapes (64 x 35 rows, d = 64, Adam; zipf-10k, -100k, -1m), each head whose step the own-floor work
# changed timed as it was and as it is (the *before* columns: torch's SparseAdam, hierarchical softmax's autograd
# path, torch's adaptive module, the infrequent self-normalised loss through autograd), against its own floor
# measured on that device. Run it before workflow/gpu/token-axis-check.sh; about 3 minutes of device time once the
# languages are prepared (fetch and prepare are no-ops where data/ was carried).
# On the device machine, from the repository root:  PYTHONPATH=. bash workflow/gpu/heads-bench.sh
# Its table and record come back under $OUT/heads-bench/; `publish` them from there as benchmarks/bench-cells-gpu.
# The same command runs on a CPU with CONFIG naming a config whose device is cpu (tests/test_stepbench.py runs it
# on a tiny cell).
set -euo pipefail
CONFIG=${CONFIG:-config/bench-cells-gpu.yaml}
DATASETS=${DATASETS:-zipf-10k zipf-100k zipf-1m}
OUT_DIR=${OUT:-results}/heads-bench
PY=${PYTHON:-python}
mkdir -p "$OUT_DIR"
for ds in $DATASETS; do
  for step in fetch prepare; do
    $PY -m pipeline_src "$step" --config "$CONFIG" --dataset "$ds" > "$OUT_DIR/$step-$ds.log" 2>&1
  done
done
$PY -m pipeline_src bench-cells --config "$CONFIG" 2>&1 | tee "$OUT_DIR/bench-cells.txt"
RESULTS=$($PY -c "import sys; from pipeline_src.config import load; print(load(sys.argv[1])['results_dir'])" "$CONFIG")
cp "$RESULTS"/cell-bench.csv "$RESULTS"/cell-bench.json "$OUT_DIR/"
