"""Tars made with the ``tar`` command, as users make them by hand: GNU and POSIX (pax) headers,
paths over 100 characters, non-ASCII names, ``./`` prefixes, directory members. Adopted with
``index_tars`` they read back sample by sample; a tar made without ``--sort=name`` (a
sample's files apart, which WebDataset would split too) is refused saying how to fix it."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import feedline
from feedline.errors import FormatError
from feedline.format import index_tars

pytestmark = pytest.mark.skipif(shutil.which("tar") is None, reason="needs the tar command")

LONG = "a_rather_long_folder_name_" * 5  # 130 characters: past ustar's 100-character name field


def _tree(root: Path, n: int) -> None:
    for i in range(n):
        folder = root / LONG / "sub.dir" / f"caméra_{i % 2}"
        folder.mkdir(parents=True, exist_ok=True)
        buf = io.BytesIO()
        np.save(buf, np.full((2, 3), i, np.int16))
        (folder / f"{i:04d}.npy").write_bytes(buf.getvalue())
        (folder / f"{i:04d}.cls").write_text(f"{i}\n")
        (folder / f"{i:04d}.json").write_text(json.dumps({"i": i}))


@pytest.mark.parametrize("fmt", ["gnu", "pax"])
def test_tars_made_by_the_tar_command_adopt_and_read_back(tmp_path: Path, fmt: str) -> None:
    _tree(tmp_path / "src", 9)
    (tmp_path / "ds").mkdir()
    tar = tmp_path / "ds" / "part-0.tar"
    subprocess.run(["tar", "--sort=name", f"--format={fmt}", "-cf", os.fspath(tar), "."],
                   cwd=tmp_path / "src", check=True)
    index_tars([tar])
    ds = feedline.open_dataset(tmp_path / "ds")
    assert len(ds) == 9
    assert {f: s.kind for f, s in ds.schema.items()} == {"cls": "label", "json": "var", "npy": "npy"}
    seen = []
    with feedline.Loader(os.fspath(tmp_path / "ds"), batch_size=4, workers=2, drop_last=False) as loader:
        for batch in loader:
            for key, arr, label, meta in zip(batch["__key__"], batch["npy"], batch["cls"], batch["json"],
                                             strict=True):
                i = int(key[-4:])
                assert key == f"./{LONG}/sub.dir/caméra_{i % 2}/{i:04d}"
                assert np.array_equal(arr.numpy(), np.full((2, 3), i, np.int16))
                assert int(label) == i and meta == {"i": i}
                seen.append(i)
    assert sorted(seen) == list(range(9))


def test_a_tar_with_a_sample_split_apart_says_sort_name(tmp_path: Path) -> None:
    _tree(tmp_path / "src", 3)
    (tmp_path / "ds").mkdir()
    tar = tmp_path / "ds" / "part-0.tar"
    folder = Path(LONG) / "sub.dir" / "caméra_0"
    # what a directory-order `tar` does: one sample's .npy, another's, then the first's .cls
    names = [folder / "0000.npy", folder / "0002.npy", folder / "0000.cls"]
    subprocess.run(["tar", "--no-recursion", "-cf", os.fspath(tar), *map(os.fspath, names)],
                   cwd=tmp_path / "src", check=True)
    with pytest.raises(FormatError, match="--sort=name") as err:
        index_tars([tar])
    assert err.value.key == f"{folder}/0000" and err.value.shard == "part-0.tar"
