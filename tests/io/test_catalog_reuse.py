"""A dataset opened again in the same process shares the indexes already validated
(a loader per epoch or per fold pays a ``stat`` per shard, not a parse), and never
serves an index whose file changed."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import numpy as np
import pytest

from feedline.errors import ChecksumError
from feedline.io import _catalog
from feedline.io._catalog import load_catalog


def _count_parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    real = _catalog.index_from_bytes

    def counting(info, data, **kw):  # type: ignore[no-untyped-def]
        seen.append(info.name)
        return real(info, data, **kw)

    monkeypatch.setattr(_catalog, "index_from_bytes", counting)
    return seen


def _flip(path: Path, at: int) -> None:
    """Change one byte in place, keeping size and mtime (what a careless tool does)."""
    st = path.stat()
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0xFF]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_second_open_shares_the_validated_indexes(dataset: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_catalog, "RACY_NS", 0)
    parses = _count_parses(monkeypatch)
    first = load_catalog(str(dataset))
    assert len(parses) == len(first.shards) == 3
    second = load_catalog(str(dataset))
    assert len(parses) == 3  # no index read or parsed again
    for a, b in zip(first.shards, second.shards, strict=True):
        assert b.index is a.index and b.stamp == a.stamp and b.size == a.size
    at = np.arange(40)
    assert all((x == y).all() for x, y in zip(second.locate(at), first.locate(at), strict=True))


def test_indexes_are_not_kept_once_no_catalog_holds_them(dataset: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_catalog, "RACY_NS", 0)
    parses = _count_parses(monkeypatch)
    cat = load_catalog(str(dataset))
    del cat
    gc.collect()
    load_catalog(str(dataset))
    assert len(parses) == 6  # the first catalog's indexes were freed with it


def test_a_freshly_changed_index_is_never_shared(dataset: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # within RACY_NS of its last change (file times tick coarsely) an index is read every
    # time: a byte flipped in place right after an open is caught, mtime restored or not
    parses = _count_parses(monkeypatch)
    first = load_catalog(str(dataset))
    idx = dataset / first.manifest.shards[1].index
    _flip(idx, 40)
    with pytest.raises(ChecksumError) as e:
        load_catalog(str(dataset))
    assert e.value.place["shard"] == first.manifest.shards[1].name
    assert len(parses) == 5  # shard 0 parsed twice, shard 1 read again and refused


def test_a_replaced_index_is_read_again(dataset: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_catalog, "RACY_NS", 0)
    first = load_catalog(str(dataset))
    idx = dataset / first.manifest.shards[2].index
    data = bytearray(idx.read_bytes())
    data[40] ^= 0xFF
    tmp = idx.with_suffix(".tmp")
    tmp.write_bytes(bytes(data))
    os.replace(tmp, idx)  # as `feedline index` rewrites it: a new file, a new inode
    with pytest.raises(ChecksumError):
        load_catalog(str(dataset))
