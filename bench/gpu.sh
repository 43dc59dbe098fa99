#!/usr/bin/env bash
# The tutorial's CIFAR-10 ViT on one NVIDIA GPU, three ways in one run: (a) the tutorial's Ray
# Train + Ray Data pipeline, (b) `trainctl train` with TRAIN_USE_GPU=true, (c) the bare loop on
# batches already in GPU memory (bf16, eager and compiled: the ceiling). Prints images/s, epoch
# times, peak GPU memory, start-up phases, the ratios b/a and b/c, then one JSON line.
#
# Needs no internet: the data is synthetic and generated locally. Run it from a checkout with the
# project's virtualenv (`make setup`) or inside the app image:
#   bench/gpu.sh                 # the full run (GPU required; about 6 minutes on an H100)
#   bench/gpu.sh --smoke         # tiny models on CPU: checks that the script works, nothing more
#   bench/gpu.sh --parts b,c --images 20000 --epochs 3
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-.venv/bin/python}"
[[ -x "$PYTHON" ]] || PYTHON=python3
# Offline by construction; also keep the libraries from trying the network.
export RAY_USAGE_STATS_ENABLED=0 HF_HUB_OFFLINE=1

if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
elif [[ " $* " != *" --smoke "* ]]; then
  echo "bench/gpu.sh: nvidia-smi not found; this benchmark needs an NVIDIA GPU (or --smoke)" >&2
  exit 2
fi
exec "$PYTHON" -m bench.gpu_vit "$@"
