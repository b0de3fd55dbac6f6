#!/usr/bin/env bash
# Install the peer loaders that bench/peers.py measures feedline against into
# .peers/ (ignored by git), never into .venv: they are benchmark-only and some
# would pull another torch. Everything goes in with --no-deps; the dependencies
# the peers need at import time and that .venv lacks are listed explicitly.
# bench/peers.py appends .peers/ to sys.path (after .venv, so .venv's torch,
# numpy and friends always win).
# Usage: bash scripts/install_peers.sh        (re-running replaces .peers/)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
target=.peers
peers=(
  torchdata==0.11.0                       # torchdata.nodes
  spdl==0.8.0 spdl_core==0.8.0 spdl_io==0.8.0
  mosaicml-streaming==0.13.0
  litdata==0.2.76
)
deps=(
  # mosaicml-streaming imports these at import time
  transformers huggingface_hub hf-xet httpx2 httpcore2 h11 anyio truststore shellingham annotated-doc tokenizers safetensors regex tqdm
  zstd Brotli python-snappy cramjam catalogue
  # litdata
  lightning-utilities obstore tifffile
)
rm -rf "$target"
.venv/bin/pip install --quiet --no-deps --target "$target" "${peers[@]}" "${deps[@]}"
echo "peers installed into $target/"
