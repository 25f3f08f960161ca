#!/usr/bin/env bash
# The token axis checked on a lent GPU (issue 78, item 7; docs/results/token-axis.md): four methods of zipf-10k
# trained for the same seconds on this device (seed 1, each with its published run's settings, a one-rung
# warmup-stable-decay ladder at the tokens those seconds buy here), scored on test, and set beside the published
# ladders' readings at those tokens and at the `h100` profile's (reporting/device_check.py). Device time: about
# 4 x (10 s calibration + SECONDS + scoring) plus the data's generation when it is not carried
# (data/raw/zipf-10k and data/prepared/zipf-10k, made by `python -m pipeline_src fetch/prepare`).
# On the device machine, from the repository root:  PYTHONPATH=. bash workflow/gpu/token-axis-check.sh
# The same command runs on a CPU (device: auto picks it); tests/test_device_check.py runs its code on a tiny cell.
set -euo pipefail
CONFIG=${CONFIG:-config/token-axis.yaml}
DATASET=${DATASET:-zipf-10k}
METHODS=${METHODS:-softmax,hierarchical-softmax,sampled-softmax,adaptive-softmax}
SECONDS_EACH=${SECONDS_EACH:-45}
OUT_DIR=${OUT:-results}/device-check
PY=${PYTHON:-python}
for step in fetch prepare; do  # no-ops when carried: each checks its record first
  [ -f "data/prepared/$DATASET/meta.json" ] && break
  $PY -m pipeline_src "$step" --config "$CONFIG" --dataset "$DATASET"
done
$PY -m pipeline_src device-check --config "$CONFIG" --dataset "$DATASET" --methods "$METHODS" \
  --seconds "$SECONDS_EACH" --name token-axis --profile h100 --out "$OUT_DIR" | tee "$OUT_DIR.txt"
