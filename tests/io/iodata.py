"""Test data for feedline.io: real tar shards with indexes and a manifest, made in tmp_path.

``build_dataset`` writes shards with the stdlib ``tarfile`` (like a WebDataset
writer would), then indexes them with feedline.format's index encoder and
manifest writer: the same files ``feedline index`` adopts. ``packed`` uses
``feedline.format.pack`` with ``align=4096``.
"""

from __future__ import annotations

import io
import shutil
import tarfile
from pathlib import Path

import numpy as np
from hypothesis import strategies as st

from feedline.format import index_tars, pack

Samples = list[tuple[str, dict[str, bytes]]]


def make_samples(n: int, *, seed: int = 0, max_size: int = 20000, prefix: str = "") -> Samples:
    """``n`` samples with 1-3 fields of random bytes (sizes 0..max_size, odd sizes included)."""
    rng = np.random.default_rng(seed)
    out: Samples = []
    for i in range(n):
        fields = {"bin": rng.integers(0, 256, int(rng.integers(1, max_size)), dtype=np.uint8).tobytes()}
        if i % 2 == 0:
            fields["json"] = f'{{"i": {i}}}'.encode()
        if i % 3 == 0:
            fields["lidar.npy"] = rng.integers(0, 256, int(rng.integers(0, max_size)), dtype=np.uint8).tobytes()
        out.append((f"{prefix}{i:06d}", fields))
    return out


def write_tar(path: Path, samples: Samples) -> None:
    """A plain pax tar, members ``key.field`` in sample order."""
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for key, fields in samples:
            for field, data in fields.items():
                info = tarfile.TarInfo(f"{key}.{field}")
                info.size = len(data)
                info.mtime = 0
                tar.addfile(info, io.BytesIO(data))


def build_dataset(root: Path, shards: list[Samples], algo: str = "xxh3") -> Path:
    """Write plain tars under ``root`` and adopt them (``feedline index``); returns ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    tars = []
    for i, samples in enumerate(shards):
        tar = root / f"shard-{i:05d}.tar"
        write_tar(tar, samples)
        tars.append(tar)
    index_tars(tars, root, checksum_algo=algo)
    return root


def pack_dataset(root: Path, shards: list[Samples], *, align: int = 4096, shard_size: int = 1 << 30) -> Path:
    """Pack the samples with ``feedline.format.pack`` (files grouped by basename)."""
    src = root.parent / f"{root.name}-src"
    src.mkdir(parents=True, exist_ok=True)
    for samples in shards:
        for key, fields in samples:
            for field, data in fields.items():
                (src / f"{key}.{field}").write_bytes(data)
    pack([src], root, shard_size=shard_size, align=align)
    return root


def expected_samples(shards: list[Samples]) -> list[tuple[str, dict[str, bytes]]]:
    """The samples in global order (what ds[i] must return)."""
    return [s for shard in shards for s in shard]


def disk_dir() -> Path | None:
    """A folder on a disk file system where O_DIRECT works (None if there is none).

    /tmp may be tmpfs; the repository's (git-ignored) .pytest_cache is on the
    checkout's disk.
    """
    from feedline.io import probe_direct

    root = Path(__file__).resolve().parents[2] / ".pytest_cache" / "feedline-direct"
    root.mkdir(parents=True, exist_ok=True)
    ok, _ = probe_direct(str(root))
    return root if ok else None


FLIPS = st.lists(st.integers(0, 10**9), min_size=1, max_size=3)
"""Byte offsets to flip (modulo the file size): the property tests' damage, with CUTS."""
CUTS = st.one_of(st.none(), st.integers(0, 10**9))


def damage(shard: Path, flips: list[int], cut: int | None) -> tuple[set[int], int]:
    """Flip a byte at each of ``flips`` (modulo the size), then cut the file at ``cut``.

    Returns the flipped offsets and the new length.
    """
    data = bytearray(shard.read_bytes())
    flipped = {f % len(data) for f in flips}
    for f in flipped:
        data[f] ^= 0x5A
    if cut is not None:
        data = data[: cut % len(data)]
    shard.write_bytes(bytes(data))
    return flipped, len(data)


def fresh_copy(pristine: Path, root: Path) -> Path:
    """``root`` as an exact copy of the dataset ``pristine`` (replacing what was there)."""
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(pristine, root)
    return root
