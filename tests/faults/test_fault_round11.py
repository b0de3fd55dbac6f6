"""Round 11 of hostile inputs (issue 13): a quick test for each failure the round found.

``feedline verify`` passed a dataset whose index gives the samples of a shard other keys
than the tar's own member names (every checksum the manifest records still matched: the
loader returned ``k0``'s bytes as ``k5``) and said nothing of shard files in the folder
that the manifest does not name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import xxhash

import feedline
from feedline.format import _index as ix
from feedline.format import pack, unlisted_files, verify
from feedline.format._checksum import checksum_function

ROOT = Path(__file__).resolve().parents[2]


def _dataset(tmp_path: Path, n: int = 6, shard_size: int = 1 << 20) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    for i in range(n):
        (src / f"k{i}.bin").write_bytes(bytes([i]) * 300)
    pack([src], tmp_path / "ds", shard_size=shard_size)
    return tmp_path / "ds"


def _reseal_index(ds: Path, data: bytearray) -> None:
    """Write shard 0's index with its own checksum and the manifest's record of it redone,
    as a buggy or hostile writer would."""
    data[ix._CHECKSUM_AT:ix._CHECKSUM_AT + 8] = bytes(8)
    data[ix._CHECKSUM_AT:ix._CHECKSUM_AT + 8] = xxhash.xxh3_64_intdigest(bytes(data)).to_bytes(8, "little")
    man = json.loads((ds / "manifest.json").read_text())
    rec = man["shards"][0]
    rec["index_checksum"] = f"{checksum_function(man['checksum_algo'])(bytes(data)):016x}"
    (ds / rec["index"]).write_bytes(bytes(data))
    (ds / "manifest.json").write_text(json.dumps(man))


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "feedline", *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, timeout=100)


@pytest.mark.timeout(60)
def test_verify_compares_the_index_keys_with_the_tars_member_names(tmp_path: Path) -> None:
    ds = _dataset(tmp_path)
    name = json.loads((ds / "manifest.json").read_text())["shards"][0]["index"]
    data = bytearray((ds / name).read_bytes())
    blob = b"\n".join(b"k%d" % i for i in range(6))
    at = data.index(blob)
    data[at:at + len(blob)] = b"\n".join(b"k%d" % i for i in reversed(range(6)))  # same bytes, other keys
    _reseal_index(ds, data)
    sample = feedline.open_dataset(ds, verify=True)[0]
    assert sample["__key__"] == "k5" and bytes(sample["bin"]) == bytes([0]) * 300  # what verify must catch
    problems = verify(ds)
    assert len(problems) == 6 and problems[0].key == "k5" and "k0.bin" in problems[0].message  # before: []
    res = _cli("verify", str(ds))
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    assert "the tar names the member" in res.stdout and "6 problem(s)" in res.stdout


@pytest.mark.timeout(60)
def test_verify_lists_shard_files_the_manifest_does_not_name(tmp_path: Path) -> None:
    ds = _dataset(tmp_path, shard_size=1024)  # one sample a shard
    man = json.loads((ds / "manifest.json").read_text())
    (ds / "manifest.json").write_text(json.dumps({**man, "shards": man["shards"][:4], "num_samples": 4}))
    (ds / "notes.txt").write_text("kept")
    assert unlisted_files(ds) == ["shard-000004.tar", "shard-000004.tar.idx",
                                  "shard-000005.tar", "shard-000005.tar.idx"]
    res = _cli("verify", str(ds), "--json", "-")
    assert res.returncode == 0, res.stderr  # the dataset the manifest names is intact
    doc = json.loads(res.stdout)
    assert doc["ok"] and doc["unlisted"] == unlisted_files(ds)
    res = _cli("verify", str(ds))
    assert res.stdout.count("UNLISTED shard-00000") == 4 and "ok: 4 samples" in res.stdout
