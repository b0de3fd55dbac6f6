"""Sources and manifests that lie: a source replaced by same-size content with an older
mtime (``cp -p``, ``rsync -a``, ``tar x``), symlinks out of the source tree or dangling,
a manifest naming files outside its folder. Never stale or foreign bytes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import feedline
from feedline.errors import FormatError

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "feedline", *args], env=env,
                          capture_output=True, text=True, timeout=100)


def _source(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    for i in range(6):
        (src / f"k{i}.bin").write_bytes(os.urandom(5000))
    return src


@pytest.mark.parametrize("older", [True, False])
def test_a_rerun_never_keeps_stale_bytes_of_a_same_size_source(tmp_path: Path,
                                                                older: bool) -> None:
    src, out = _source(tmp_path), tmp_path / "out"
    assert _cli("pack", str(src), "--out", str(out)).returncode == 0
    target = src / "k3.bin"
    stat = target.stat()
    fresh = os.urandom(stat.st_size)
    target.write_bytes(fresh)
    if older:  # what cp -p / rsync -a / tar x do: the copy keeps the old timestamp
        os.utime(target, ns=(stat.st_atime_ns - 10**12, stat.st_mtime_ns - 10**12))
    else:
        os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert _cli("pack", str(src), "--out", str(out)).returncode == 0
    ds = feedline.open_dataset(out)
    assert bytes(ds.read_many([3])[0]["bin"]) == fresh
    assert _cli("verify", str(out)).returncode == 0


def test_symlinks_out_of_the_tree_and_dangling_are_listed_not_packed(tmp_path: Path) -> None:
    src, out = _source(tmp_path), tmp_path / "out"
    outside = tmp_path / "secret.bin"
    outside.write_bytes(b"not yours")
    (src / "k8.bin").symlink_to(outside)
    (src / "k9.bin").symlink_to(tmp_path / "nowhere")
    res = _cli("pack", str(src), "--out", str(out))
    assert res.returncode == 0, res.stderr[-1500:]
    said = " ".join((res.stdout + res.stderr).split())
    assert "k8.bin" in said and "k9.bin" in said
    assert len(feedline.open_dataset(out)) == 6


@pytest.mark.parametrize("name", ["../other/shard-000000.tar", "{abs}",
                                  "sub/../../other/shard-000000.tar"])
def test_a_manifest_naming_files_outside_its_folder_is_refused(tmp_path: Path,
                                                               name: str) -> None:
    src = _source(tmp_path)
    assert _cli("pack", str(src), "--out", str(tmp_path / "other")).returncode == 0
    evil = tmp_path / "evil"
    evil.mkdir()
    manifest = json.loads((tmp_path / "other" / "manifest.json").read_text())
    name = name.format(abs=tmp_path / "other" / "shard-000000.tar")
    manifest["shards"][0]["name"] = name
    manifest["shards"][0]["index"] = name + ".idx"
    (evil / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(FormatError, match="outside"):
        feedline.open_dataset(evil)
    shutil.rmtree(evil)
