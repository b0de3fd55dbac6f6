"""Shards, indexes and manifests damaged on disk: bit flips, truncation, garbage.

What is guaranteed: a damaged dataset never crashes or hangs the reader; truncation and
a broken index or manifest are a FormatError at open naming the shard; a flipped payload
byte is a ChecksumError naming shard, key and field with ``verify=True`` and is found by
``feedline verify`` (exit 1). With the default ``verify=False`` a flipped payload byte is
returned as read: that is the documented cost of the fast path (docs/faults.md).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import feedline
from feedline.errors import ChecksumError, FeedlineError, FormatError

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "feedline", *args], env=env,
                          capture_output=True, text=True, timeout=100)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from feedline.format import pack

    root = tmp_path_factory.mktemp("shards")
    src = root / "src"
    src.mkdir()
    for i in range(24):
        (src / f"s{i:02d}.bin").write_bytes(os.urandom(2000 + 97 * i))
        (src / f"s{i:02d}.cls").write_text(str(i))
    pack(src, root / "data", shard_size=16 << 10)
    return root / "data"


def _copy(dataset: Path, tmp_path: Path) -> tuple[Path, list[Path]]:
    out = tmp_path / "copy"
    shutil.copytree(dataset, out)
    return out, sorted(out.glob("*.tar"))


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x5A
    path.write_bytes(bytes(data))


def test_a_flipped_payload_byte(dataset: Path, tmp_path: Path) -> None:
    copy, shards = _copy(dataset, tmp_path)
    clean = feedline.open_dataset(dataset).read_many([0])[0]
    _flip(shards[0], 512 + 10)  # inside the first member's payload (after its header)
    with pytest.raises(ChecksumError) as info:
        feedline.open_dataset(copy, verify=True).read_many([0])
    assert info.value.shard == shards[0].name and info.value.key == "s00"
    assert info.value.field == "bin"
    # the default fast path returns what is on disk: documented, verify finds it
    fast = feedline.open_dataset(copy).read_many([0])[0]
    assert bytes(fast["bin"]) != bytes(clean["bin"])
    res = _cli("verify", str(copy))
    assert res.returncode == 1 and "s00" in res.stdout + res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize("keep", [0, 511, 512, 700, 1024, 4096])
def test_a_truncated_shard_is_a_format_error_at_open(dataset: Path, tmp_path: Path,
                                                      keep: int) -> None:
    copy, shards = _copy(dataset, tmp_path)
    os.truncate(shards[-1], keep)
    with pytest.raises(FormatError, match="truncated") as info:
        feedline.open_dataset(copy)
    assert info.value.shard == shards[-1].name and info.value.fix
    res = _cli("verify", str(copy))
    assert res.returncode == 1 and "Traceback" not in res.stderr


@pytest.mark.parametrize("what", ["idx-flip", "idx-cut", "idx-empty", "manifest-garbage",
                                  "manifest-cut", "shard-missing"])
def test_damaged_metadata_is_a_placed_error_never_a_crash(dataset: Path, tmp_path: Path,
                                                          what: str) -> None:
    copy, shards = _copy(dataset, tmp_path)
    idx = Path(f"{shards[0]}.idx")
    manifest = copy / "manifest.json"
    if what == "idx-flip":
        _flip(idx, idx.stat().st_size // 2)
    elif what == "idx-cut":
        os.truncate(idx, idx.stat().st_size // 2)
    elif what == "idx-empty":
        os.truncate(idx, 0)
    elif what == "manifest-garbage":
        manifest.write_bytes(b"\x00{not json")
    elif what == "manifest-cut":
        os.truncate(manifest, manifest.stat().st_size // 2)
    else:
        shards[0].unlink()
    with pytest.raises(FeedlineError) as info:
        ds = feedline.open_dataset(copy, verify=True)
        ds.read_many(list(range(len(ds))))
    assert info.value.fix or info.value.place
    res = _cli("verify", str(copy))
    assert res.returncode in (1, 2) and "Traceback" not in res.stderr


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_every_single_byte_flip_of_a_shard_is_caught(dataset: Path, tmp_path: Path) -> None:
    """Exhaustive over one small shard: each flipped byte is either caught by verify=True
    (ChecksumError/FormatError) or lies in tar padding no sample reads."""
    copy, shards = _copy(dataset, tmp_path)
    target = shards[0]
    original = target.read_bytes()
    ds_clean = feedline.open_dataset(dataset)
    n = len(ds_clean)
    clean = [{k: bytes(v) for k, v in s.items() if k != "__key__"}
             for s in ds_clean.read_many(list(range(n)))]
    for offset in range(0, len(original), 7):
        data = bytearray(original)
        data[offset] ^= 0xFF
        target.write_bytes(bytes(data))
        try:
            got = feedline.open_dataset(copy, verify=True).read_many(list(range(n)))
        except (ChecksumError, FormatError):
            continue
        assert [{k: bytes(v) for k, v in s.items() if k != "__key__"} for s in got] == clean
