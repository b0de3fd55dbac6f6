#!/usr/bin/env bash
# Create (or reuse) .venv at the repo root and install feedline with its dev tools.
# torch is pinned and installed first: a bare "torch" requirement on a machine
# without torch would pull a multi-GB CUDA build. Override with FEEDLINE_TORCH.
set -euo pipefail
# pip here warns about every missing local mirror folder; keep the log readable.
quiet() { "$@" 2>&1 | { grep -v "^WARNING: Location 'file:" || true; } >&2; return "${PIPESTATUS[0]}"; }
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
torch_spec="${FEEDLINE_TORCH:-torch==2.13.0}"
py="${PYTHON:-python3}"
stamp=".venv/.feedline-setup"
want="$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16) $torch_spec"
if [ ! -x .venv/bin/python ]; then
  echo "feedline: creating .venv with $($py --version)" >&2
  "$py" -m venv .venv
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  quiet .venv/bin/python -m pip install -q --upgrade pip
  if ! .venv/bin/python -c "import torch" 2>/dev/null; then
    echo "feedline: installing $torch_spec" >&2
    quiet .venv/bin/python -m pip install -q "$torch_spec"
  fi
  echo "feedline: installing feedline[dev] (editable)" >&2
  quiet .venv/bin/python -m pip install -q -e ".[dev]"
  echo "$want" > "$stamp"
fi
