"""nanoGPT's data layout: one ``train.bin`` of uint16 tokens read as windows of
``block_size + 1``, every window start one index of a map-style dataset. A real corpus
has 10^8 to 10^10 starts; the loader's order and pass bookkeeping must not be arrays or
lists of that length (10^8 took 29 s and 1.5 GiB before the first batch; 10^10 was
killed at 14 GiB)."""

from __future__ import annotations

import json
import pickle
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


class MappedWindows(Windows):
    """Also says, from inside the worker, whether its token array is a map of the file."""

    def __getitem__(self, i: int) -> dict[str, Any]:
        array = self.data  # a copy unpickles as an np.memmap too, but of no file
        while isinstance(array, np.ndarray) and not (isinstance(array, np.memmap) and array.filename) \
                and array.base is not None:
            array = array.base
        return {**super().__getitem__(i), "mapped": isinstance(array, np.memmap) and bool(array.filename)}


@pytest.mark.timeout(60)
def test_process_workers_map_the_token_file_instead_of_receiving_its_bytes(train_bin: Path) -> None:
    """Pickled as usual, the memmap would arrive in every worker as a copy of the file."""
    tokens = np.fromfile(train_bin, np.uint16)
    loader = feedline.Loader(MappedWindows(train_bin, 32), batch_size=8, workers=2, seed=0,
                             worker_type="process")
    for _, batch in zip(range(12), loader, strict=False):
        assert bool(batch["mapped"].all())
        for x, s in zip(batch["x"], batch["start"].tolist(), strict=True):
            assert x.tolist() == tokens[s:s + 32].tolist()
    loader.close()


def test_memmaps_and_their_views_pickle_as_references(tmp_path: Path) -> None:
    from feedline.pipeline._by_reference import dumps

    path = tmp_path / "big.bin"
    np.arange(1 << 20, dtype=np.uint32).tofile(path)
    whole = np.memmap(path, np.uint32, mode="r")
    grid = np.memmap(path, np.uint32, mode="r", offset=4100, shape=(1000, 100))
    for view in (whole, whole[12345:600000], whole[3::7], grid[:, 5::3], grid[10:20].T):
        data = dumps(view)
        back = pickle.loads(data)
        assert len(data) < 400 and np.array_equal(back, view) and not back.flags.writeable
    made = np.memmap(tmp_path / "new.bin", np.float32, mode="w+", shape=(100,))
    made[:] = 7
    made.flush()
    back = pickle.loads(dumps(made))  # mapped r+: the file is not truncated again
    assert back.tolist() == [7.0] * 100 and back.flags.writeable
    in_memory = whole[:10] + 1  # arithmetic leaves the file: pickled by value
    assert np.array_equal(pickle.loads(dumps(in_memory)), np.arange(1, 11))
    assert pickle.loads(dumps({"x": whole[::-1][:3]})) ["x"].tolist() == [(1 << 20) - 1, (1 << 20) - 2,
                                                                          (1 << 20) - 3]
