#!/usr/bin/env bash
# Set everything up, then run `feedline demo` (extra arguments are passed on).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh"
exec "$root/.venv/bin/feedline" demo "$@"
