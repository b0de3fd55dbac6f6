"""Smoke test of ``bench/loader_jpeg.py --decode-size``: runs tiny, writes well-formed
results (no timing assertions: the machine is shared)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_loader_benches import _run


@pytest.mark.timeout(300)
def test_loader_jpeg_decode_size(tmp_path: Path) -> None:
    doc = _run("loader_jpeg.py", tmp_path, "--samples", "70", "--decode-size", "32x48")
    assert doc["benchmark"] == "loader_jpeg_decode_size" and doc["params"]["decode_size"] == [32, 48]
    assert [c["baseline"] for c in doc["comparisons"]] == [
        "decode_size after delivery, 1 thread (before)", "decode_size after delivery, all cores (info)"]
    assert {r["samples"] for r in doc["rows"]} == {64}
