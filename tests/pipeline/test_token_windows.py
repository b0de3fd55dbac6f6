"""nanoGPT's data layout: one ``train.bin`` of uint16 tokens read as windows of
``block_size + 1``, every window start one index of a map-style dataset. A real corpus
has 10^8 to 10^10 starts; the loader's order and pass bookkeeping must not be arrays or
lists of that length (10^8 took 29 s and 1.5 GiB before the first batch; 10^10 was
killed at 14 GiB)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import feedline


class Windows:
    """The map-style dataset a nanoGPT user writes: window ``i`` is tokens ``i .. i+block``
    (``starts`` > the file's windows: index modulo them, to stand for a bigger corpus)."""

    def __init__(self, path: Path, block: int, starts: int | None = None) -> None:
        self.data = np.memmap(path, dtype=np.uint16, mode="r")
        self.block = block
        self.windows = len(self.data) - block
        self.starts = starts or self.windows

    def __len__(self) -> int:
        return self.starts

    def __getitem__(self, i: int) -> dict[str, Any]:
        j = i % self.windows
        chunk = torch.from_numpy(self.data[j:j + self.block + 1].astype(np.int64))
        return {"x": chunk[:-1], "y": chunk[1:], "start": i}


@pytest.fixture
def train_bin(tmp_path: Path) -> Path:
    path = tmp_path / "train.bin"
    np.random.default_rng(0).integers(0, 50257, 4096, dtype=np.uint16).tofile(path)
    return path


def test_windows_of_a_token_file_arrive_as_written(train_bin: Path) -> None:
    tokens = np.fromfile(train_bin, np.uint16)
    loader = feedline.Loader(Windows(train_bin, 32), batch_size=16, workers=2, seed=0)
    starts = []
    for batch in loader:
        assert batch["x"].shape == (16, 32) and batch["x"].dtype == torch.int64
        for x, y, s in zip(batch["x"], batch["y"], batch["start"].tolist(), strict=True):
            assert x.tolist() == tokens[s:s + 32].tolist() and y.tolist() == tokens[s + 1:s + 33].tolist()
        starts += batch["start"].tolist()
    assert len(starts) == len(set(starts)) == (4096 - 32) // 16 * 16


@pytest.mark.timeout(60)
def test_a_corpus_of_10_to_the_12_windows_starts_at_once_and_resumes_exactly(train_bin: Path) -> None:
    ds = Windows(train_bin, 32, starts=10**12)
    loader = feedline.Loader(ds, batch_size=64, workers=2, seed=7)
    assert len(loader) == 10**12 // 64
    loader.set_epoch(3)
    it = iter(loader)
    first = [next(it)["start"].tolist() for _ in range(3)]
    state = json.loads(json.dumps(loader.state_dict()))
    following = next(it)["start"].tolist()
    flat = [s for b in first for s in b]
    assert len(set(flat)) == len(flat) and all(0 <= s < 10**12 for s in flat)
    assert max(flat) > 10**11  # drawn from the whole range, not its start
    resumed = feedline.Loader(ds, batch_size=64, workers=2, seed=7)
    resumed.load_state_dict(state)
    assert next(iter(resumed))["start"].tolist() == following
    del it, loader, resumed
