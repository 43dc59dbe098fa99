#!/usr/bin/env bash
# One epoch of the tutorial's CIFAR-10 ViT on one NVIDIA GPU: the tutorial's way, then the app's
# way (uint8 ingest, normalization on the GPU, bf16 autocast; channels_last batches, and NCHW).
# Prints epoch time, images/s and peak GPU memory for each, then one JSON line.
#
# Needs no internet: the data is synthetic and generated locally. Run it from a checkout with the
# project's virtualenv (`make setup`) or inside the app image:
#   bench/gpu.sh                 # the full run (GPU required; a few minutes)
#   bench/gpu.sh --smoke         # a tiny ViT on CPU: checks that the script works, nothing more
#   bench/gpu.sh --variants tutorial,app --images 20000
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
