#!/usr/bin/env bash
# Download, here (with network), the wheels bench/gpu_check.py installs on the lent GPU machine
# (no network there; its image lacks simplejpeg and kvikio). Versions are pinned: one version of
# each, for Python 3.12 on x86-64 manylinux, CUDA 13 (the H200 image: torch 2.11+cu130).
# webdataset + braceexpand: the loader_jpeg step's WebDataset contender.
# kvikio's other needs (cupy-cuda13x, cuda-pathfinder, nvidia-cufile, numpy>=2) are in that image.
# Usage: bash bench/gpu_wheels.sh [DIR]   (default .whl, ignored by git; carry it to the run)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${1:-$root/.whl}"
mkdir -p "$dest"
python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$dest" \
  simplejpeg==1.9.0 kvikio-cu13==26.10.0 libkvikio-cu13==26.10.0 rapids-logger==0.3.0 \
  webdataset==1.0.2 braceexpand==0.1.7
ls -la "$dest"
