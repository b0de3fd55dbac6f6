"""bench/columns_shapes14.py runs at a tiny size and gathers every record field from the index."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "columns_shapes14.py"


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_columns_bench_gathers_every_record_field(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(BENCH), "--samples", "1500", "--batches", "10", "--dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=110, check=True).stdout
    assert "read [], gathered ['item.cls', 'ts.cls', 'user.cls', 'rating.npy']" in out, out
    assert "samples per CPU-s" in out and not list(tmp_path.iterdir())  # its scratch folder removed
