"""Test data for feedline.io: real tar shards with indexes and a manifest, made in tmp_path.

``build_dataset`` writes shards with the stdlib ``tarfile`` (like a WebDataset
writer would), then indexes them with feedline.format's index encoder and
manifest writer: the same files ``feedline index`` adopts. ``packed`` uses
``feedline.format.pack`` with ``align=4096``.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np

from feedline.format._checksum import checksum, hexdigest
from feedline.format._index import MEMBER_DTYPE, ShardIndex, encode_index
from feedline.format._manifest import Manifest, ShardInfo, field_stats, write_manifest

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


def index_tar(path: Path, algo: str = "xxh3") -> tuple[bytes, int]:
    """Index bytes for an existing tar (what `feedline index` produces) and the shard checksum."""
    data = path.read_bytes()
    keys: list[str] = []
    fields: list[str] = []
    rows = []
    with tarfile.open(path, "r") as tar:
        for m in tar.getmembers():
            key, field = m.name.split(".", 1)
            if not keys or keys[-1] != key:
                keys.append(key)
            if field not in fields:
                fields.append(field)
            payload = data[m.offset_data : m.offset_data + m.size]
            rows.append((len(keys) - 1, fields.index(field), m.offset_data, m.size, checksum(payload, algo)))
    members = np.array(rows, dtype=MEMBER_DTYPE)
    shard_sum = checksum(data, algo)
    blob = encode_index(keys, fields, members, shard_size=len(data), shard_checksum=shard_sum, checksum_algo=algo)
    return blob, shard_sum


def build_dataset(root: Path, shards: list[Samples], algo: str = "xxh3") -> Path:
    """Write shards + indexes + manifest under ``root``; returns ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    infos, indexes = [], []
    for i, samples in enumerate(shards):
        tar = root / f"shard-{i:05d}.tar"
        write_tar(tar, samples)
        blob, shard_sum = index_tar(tar, algo)
        (root / f"{tar.name}.idx").write_bytes(blob)
        indexes.append(ShardIndex.from_bytes(blob, shard_size=tar.stat().st_size, shard=tar.name))
        infos.append(
            ShardInfo(
                name=tar.name,
                index=f"{tar.name}.idx",
                size=tar.stat().st_size,
                index_size=len(blob),
                num_samples=len(samples),
                checksum=hexdigest(shard_sum),
                index_checksum=hexdigest(checksum(blob, algo)),
            )
        )
    manifest = Manifest(
        version=1,
        checksum_algo=algo,
        align=0,
        shards=tuple(infos),
        fields=field_stats(indexes),
        num_samples=sum(len(s) for s in shards),
    )
    write_manifest(root, manifest)
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
