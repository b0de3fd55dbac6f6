#!/usr/bin/env bash
# Run every CPU benchmark one after another (never two at once: they would
# measure each other) and keep each one's JSON and log in bench/results/.
# Usage: bash bench/run_all.sh [--quick] [names...]   e.g.  bash bench/run_all.sh loader_jpeg
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
py=.venv/bin/python
extra=()
if [ "${1:-}" = "--quick" ]; then extra=(--quick); shift; fi
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  names=(pack_vs_tar pack_rerun read_sequential read_small_files read_vs_webdataset read_npy_rows read_verify
         loader_small loader_jpeg loader_fields loader_overlap loader_memory diagnose_overhead vision_transform peers
         checkpoint pack_samples)
fi
mkdir -p bench/results
status=0
for n in "${names[@]}"; do
  echo "== $n" >&2
  if ! "$py" "bench/$n.py" "${extra[@]}" --json "bench/results/$n.json" 2>&1 | tee "bench/results/$n.log"; then
    echo "!! $n failed (see bench/results/$n.log)" >&2
    status=1
  fi
done
exit $status
