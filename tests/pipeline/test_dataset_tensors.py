"""Process workers receive a map-style dataset that holds torch tensors: the NLP shape (a
list of tokenised sentences, one small tensor each) and a big tensor sliced per sample."""

from __future__ import annotations

import json
import os
import pickle
import resource
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import feedline
from feedline.pipeline import _by_reference


class Sentences:
    """Tokenised sentences of varying length kept as tensors, as a tutorial builds them."""

    def __init__(self, n: int) -> None:
        self.ids = [torch.arange(i % 37 + 3, dtype=torch.int64) + i for i in range(n)]

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"input_ids": self.ids[i], "label": i % 2}


def pad(samples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    longest = max(len(s["input_ids"]) for s in samples)
    ids = torch.zeros(len(samples), longest, dtype=torch.int64)
    mask = torch.zeros(len(samples), longest, dtype=torch.int64)
    for row, s in enumerate(samples):
        ids[row, :len(s["input_ids"])] = s["input_ids"]
        mask[row, :len(s["input_ids"])] = 1
    return {"input_ids": ids, "attention_mask": mask,
            "labels": torch.tensor([s["label"] for s in samples])}


@contextmanager
def few_descriptors(spare: int) -> Iterator[None]:
    """The soft limit of open files lowered to what is open now plus ``spare``."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + spare, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.timeout(120)
def test_many_small_tensors_start_process_workers() -> None:
    # each small tensor took a shared-memory descriptor of its own when the workers
    # started: a corpus of more sentences than the open-file limit (20,000 under
    # ulimit -n 20000) failed with "Too many open files"
    ds = Sentences(1500)
    with few_descriptors(400), feedline.Loader(
            ds, batch_size=32, workers=2, worker_type="process", shuffle=False,
            drop_last=False, collate=pad) as loader:
        batches = list(loader)
    assert len(batches) == 47 and sorted(batches[0]) == ["attention_mask", "input_ids", "labels"]
    want = pad([ds[i] for i in range(1472, 1500)])
    assert all(torch.equal(batches[-1][k], want[k]) for k in want)


def test_small_storages_go_by_value_big_ones_shared() -> None:
    big = torch.arange(_by_reference.SHARE_FROM // 8, dtype=torch.int64)
    small = [torch.randn(3, 4).t(), torch.randn(5, dtype=torch.bfloat16), torch.zeros(0),
             torch.nn.Parameter(torch.ones(3)), torch.randn(4, dtype=torch.complex64).conj(),
             torch.arange(12.0).reshape(3, 4)[1:, ::2], torch.tensor([True, False]),
             torch.ones(2, requires_grad=True), big[10:20]]
    back = pickle.loads(_by_reference.dumps(small))
    for a, b in zip(small, back, strict=True):
        assert type(a) is type(b) and a.dtype == b.dtype and a.stride() == b.stride()
        assert torch.equal(a, b) and a.requires_grad == b.requires_grad
        assert a.storage_offset() == b.storage_offset()
    assert back[-1].untyped_storage().nbytes() == big.untyped_storage().nbytes()  # a view
    assert back[-1].is_shared() and not back[0].is_shared()


def test_views_of_one_small_storage_are_sent_once() -> None:
    # each view's storage is a new wrapper object: without a memo per storage, 100 views
    # of a 400 KB tensor pickled as 40 MB
    base = torch.arange(50_000, dtype=torch.int64)
    views = [base[i:i + 10] for i in range(0, 1000, 10)]
    data = _by_reference.dumps(views)
    assert len(data) < 2 * base.nbytes
    back = pickle.loads(data)
    assert all(torch.equal(a, b) for a, b in zip(views, back, strict=True))
    assert len({v.untyped_storage().data_ptr() for v in back}) == 1  # still one storage


def test_a_big_conjugate_view_keeps_its_values() -> None:
    # a storage past SHARE_FROM went to torch's reducer as the view itself, which drops the
    # conjugate/negative bit: 1+2j arrived as 1+2j instead of 1-2j
    big = torch.full((_by_reference.SHARE_FROM // 8,), 1 + 2j, dtype=torch.complex64)
    for view in (big.conj(), big.conj().imag):
        back = pickle.loads(_by_reference.dumps(view))
        assert torch.equal(back, view.resolve_conj().resolve_neg())


class Numbered:
    def __len__(self) -> int:
        return 32

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"i": i}


def many_small(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """A collate that returns per-token tensors and complex views (what a custom collate may do)."""
    return {"tokens": [torch.full((3,), s["i"]) for s in samples for _ in range(300)],
            "conj": torch.tensor([1 + 2j, 3 - 4j]).conj(), "neg": torch.tensor([1 + 2j]).conj().imag,
            "big_conj": torch.full((_by_reference.SHARE_FROM // 8,), 1 + 2j, dtype=torch.complex64).conj()}


@pytest.mark.timeout(120)
def test_a_collates_small_tensors_and_views_come_back_from_process_workers() -> None:
    # the results went through torch's reducer: one shared-memory descriptor per tensor (2,400
    # a batch: the workers died with "Too many open files", WorkerDied exit code 1) and
    # .conj()/.imag views arrived without their bit (1-2j came back as 1+2j, -2 as 2)
    with few_descriptors(400), feedline.Loader(Numbered(), batch_size=8, workers=2, worker_type="process",
                                               shuffle=False, collate=many_small) as loader:
        batches = list(loader)
    assert [len(b["tokens"]) for b in batches] == [2400] * 4
    assert torch.equal(batches[3]["tokens"][-1], torch.full((3,), 31))
    for b in batches:
        assert b["conj"].tolist() == [1 - 2j, 3 + 4j] and b["neg"].tolist() == [-2.0]
        assert b["big_conj"].resolve_conj()[0].item() == 1 - 2j



COPY_ON_WRITE_SCRIPT = """
import json, sys
import numpy as np
import feedline


class CopyOnWrite:  # samples: slices of a copy-on-write map that __getitem__ changes in place
    def __init__(self, path):
        self.mm = np.memmap(path, dtype=np.float32, mode="c")

    def __len__(self):
        return 8

    def __getitem__(self, i):
        x = self.mm[i * 4:(i + 1) * 4]
        x -= 1000  # private pages of this worker: the file keeps 0..31
        return {"x": x}


def as_list(samples):
    return [s["x"] for s in samples]


if __name__ == "__main__":
    with feedline.Loader(CopyOnWrite(sys.argv[1]), batch_size=4, workers=1, worker_type="process",
                         shuffle=False, collate=as_list) as loader:
        got = np.concatenate([a for b in loader for a in b])
        how = loader.stats["processes"]["start_method"]
    print(json.dumps({"got": got.tolist(), "start_method": how}))
"""


@pytest.mark.timeout(120)
def test_a_changed_copy_on_write_slice_comes_back_as_its_values(tmp_path: Path) -> None:
    # results go with small tensors by value and memmaps by value too: a forked worker's
    # np.memmap slice sent as a reference would be mapped from the file again in the
    # training process, which would read 0..31, not the values the worker computed
    np.arange(32, dtype=np.float32).tofile(tmp_path / "x.bin")
    (tmp_path / "train.py").write_text(COPY_ON_WRITE_SCRIPT)
    proc = subprocess.run([sys.executable, "train.py", str(tmp_path / "x.bin")], capture_output=True,
                          text=True, cwd=tmp_path, timeout=100)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["start_method"] == "fork"  # inherited: the dataset's map is a real np.memmap
    assert out["got"] == [float(v - 1000) for v in range(32)]
