#!/usr/bin/env bash
# Set everything up, then run the quality gates: ruff, mypy over src/, pytest
# (every test under pytest-timeout; long benchmarks and fault tests are marked
# `slow` and left out: pass -m slow or -m "" to run them).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh"
cd "$root"
echo "== ruff" >&2
.venv/bin/ruff check src tests bench
echo "== mypy src/" >&2
.venv/bin/mypy
echo "== pytest" >&2
if [ $# -eq 0 ]; then set -- -m "not slow"; fi
exec .venv/bin/python -m pytest -q --durations=15 "$@"
