"""Fixtures for feedline.io tests (data builders live in iodata.py)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from iodata import Samples, build_dataset, disk_dir, make_samples


@pytest.fixture
def small_shards() -> list[Samples]:
    """Three shards, 40 samples in all, fields of odd sizes (final partial blocks)."""
    return [
        make_samples(15, seed=1, prefix="a"),
        make_samples(20, seed=2, prefix="b"),
        make_samples(5, seed=3, prefix="c"),
    ]


@pytest.fixture
def dataset(tmp_path: Path, small_shards: list[Samples]) -> Path:
    """A small dataset in tmp_path."""
    return build_dataset(tmp_path / "ds", small_shards)


@pytest.fixture
def disk_dataset(small_shards: list[Samples]) -> Iterator[Path]:
    """The small dataset on a disk file system where O_DIRECT really works (fails if none)."""
    base = disk_dir()
    if base is None:
        pytest.fail("no folder here accepts O_DIRECT; the direct path cannot be tested")
    target = Path(tempfile.mkdtemp(dir=base))
    try:
        yield build_dataset(target / "ds", small_shards)
    finally:
        shutil.rmtree(target, ignore_errors=True)
