"""Fixtures for the format tests: small multi-field sample folders made at test time."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest


def make_source(root: Path, n: int = 24, *, seed: int = 0, max_size: int = 9000) -> dict[str, dict[str, bytes]]:
    """Write ``n`` samples (cam0.jpg, lidar.npy, json; some in a sub folder) under ``root``.

    Returns ``{member name: bytes}`` grouped by key, as ``{key: {field: bytes}}``.
    """
    rnd = random.Random(seed)
    samples: dict[str, dict[str, bytes]] = {}
    special = {1: "x" * 120 + "/long", 2: "ünïcödé/000002"}  # pax path headers
    for i in range(n):
        key = special.get(i) or (f"{i:06d}" if i % 3 else f"day1/{i:06d}")
        fields = {
            "cam0.jpg": rnd.randbytes(rnd.randint(1, max_size)),
            "lidar.npy": rnd.randbytes(rnd.randint(0, max_size)),
            "json": b'{"i": %d}' % i,
        }
        if i % 5 == 0:
            fields = {"cam0.jpg": fields["cam0.jpg"], "json": fields["json"]}
        samples[key] = fields
        for field, data in fields.items():
            path = root / f"{key}.{field}"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    return samples


@pytest.fixture
def source(tmp_path: Path) -> tuple[Path, dict[str, dict[str, bytes]]]:
    """A source folder and the samples it holds."""
    root = tmp_path / "src"
    root.mkdir()
    return root, make_source(root)


@pytest.fixture
def make_src(tmp_path: Path) -> Callable[..., tuple[Path, dict[str, dict[str, bytes]]]]:
    """Factory: ``make_src(name, n=..., seed=..., max_size=...)``."""

    def make(name: str = "src", **kw: int) -> tuple[Path, dict[str, dict[str, bytes]]]:
        root = tmp_path / name
        root.mkdir()
        return root, make_source(root, **kw)

    return make


def read_dataset(root: Path) -> dict[str, dict[str, bytes]]:
    """Every sample of the dataset at ``root`` through the index, checksums verified."""
    from feedline.format import load_index, read_manifest

    manifest = read_manifest(root)
    out: dict[str, dict[str, bytes]] = {}
    for info in manifest.shards:
        index = load_index(root, info)
        data = (root / info.name).read_bytes()
        for i, key in enumerate(index.keys):
            out[key] = {f: bytes(v) for f, v in index.sample_fields(i, data, verify=True).items()}
    return out


@pytest.fixture
def read_all() -> Callable[[Path], dict[str, dict[str, bytes]]]:
    """The :func:`read_dataset` helper."""
    return read_dataset
