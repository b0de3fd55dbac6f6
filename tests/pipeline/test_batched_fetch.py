"""In-memory map-style datasets fetched a batch at a time: a ``TensorDataset``'s rows taken
into the slot (``take-rows``) and ``__getitems__`` called once per batch, with the batches,
order and error places of the per-sample path (a reference computed here with torch's
``default_collate``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import Subset, TensorDataset, random_split
from torch.utils.data._utils.collate import default_collate

import feedline
from feedline.errors import WorkerError
from feedline.pipeline.options import SkippedSampleWarning


def _tensors(n: int = 90) -> TensorDataset:
    """(image, label, a float64, the sample's own index: the order seen)."""
    g = torch.Generator().manual_seed(3)
    return TensorDataset(torch.randn(n, 3, 4, 4, generator=g), torch.randint(0, 9, (n,), generator=g),
                         torch.randn(n, generator=g).double(), torch.arange(n))


def _reference(ds: Any, order: list[list[int]]) -> list[Any]:
    return [default_collate([ds[i] for i in batch]) for batch in order]


def _per_sample(ds: Any, epoch: int = 0, **kw: Any) -> list[list[int]]:
    """The order of the per-sample path (a transform turns the batched fetch off): the
    rows of each batch, from a sample's own index (TensorDataset: column 3)."""
    with feedline.Loader(ds, transform=lambda s: s, **kw) as loader:
        loader.set_epoch(epoch)
        return [[int(v) for v in (b[3] if isinstance(b, (tuple, list)) else b["i"])] for b in loader]


def _equal(got: Any, want: Any) -> bool:
    if isinstance(want, dict):
        return all(_equal(got[k], want[k]) for k in want)
    if isinstance(want, (tuple, list)):
        return len(got) == len(want) and all(_equal(g, w) for g, w in zip(got, want, strict=True))
    return bool(torch.equal(torch.as_tensor(got), want))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("split", [False, True])
def test_tensor_rows_are_the_per_sample_batches_over_two_epochs(split: bool) -> None:
    """Shuffled, a short last batch, a ``random_split`` part: every batch is default_collate
    of the samples ``ds[i]`` in the loader's order, and the plan says ``take-rows``."""
    ds: Any = _tensors()
    if split:
        ds = random_split(ds, [60, 30], generator=torch.Generator().manual_seed(1))[0]
    index = {int(ds[i][3]): i for i in range(len(ds))}  # the tensors' row -> ds's index
    kw: dict[str, Any] = {"batch_size": 16, "drop_last": False, "workers": 2, "seed": 5}
    with feedline.Loader(ds, **kw) as loader:
        for epoch in range(2):
            loader.set_epoch(epoch)
            order = [[index[r] for r in rows] for rows in _per_sample(ds, epoch, **kw)]
            want = _reference(ds, order)
            got = list(loader)
            assert len(got) == len(want) and all(_equal(g, w) for g, w in zip(got, want, strict=True))
        assert set(loader.stats["recipes"].values()) == {"take-rows"}


@pytest.mark.timeout(60)
def test_a_subset_index_outside_the_tensors_is_named_by_the_per_sample_redo() -> None:
    """A batch whose take fails (a Subset index beyond the tensors) is redone per sample,
    which raises the sample's own error with its index as key."""
    ds = Subset(_tensors(20), [0, 1, 2, 3, 4, 99])
    with feedline.Loader(ds, batch_size=3, shuffle=False, workers=1) as loader, \
            pytest.raises(WorkerError) as info:
        list(loader)
    assert info.value.place["key"] == "5" and info.value.exc_type == "IndexError"


class _Rows:
    """A user's dataset with torch's batched fetch: ``__getitems__`` gathers the rows once."""

    def __init__(self, n: int = 70, bad: int | None = None) -> None:
        rng = np.random.default_rng(0)
        self.x = rng.standard_normal((n, 5)).astype(np.float32)
        self.y = rng.integers(0, 10, n)
        self.bad, self.calls = bad, []

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> dict[str, Any]:
        if i == self.bad:
            raise ValueError(f"sample {i} is damaged")
        return {"x": self.x[i], "y": int(self.y[i]), "name": f"s{i}", "i": i}

    def __getitems__(self, indices: list[int]) -> list[dict[str, Any]]:
        self.calls.append(len(indices))
        if self.bad in indices:
            raise ValueError("a batch holds a damaged sample")
        xs, ys = self.x[indices], self.y[indices]
        return [{"x": xs[k], "y": int(ys[k]), "name": f"s{i}", "i": i} for k, i in enumerate(indices)]


@pytest.mark.timeout(60)
def test_getitems_is_called_once_a_batch_with_the_per_sample_batches() -> None:
    ds = _Rows()
    kw: dict[str, Any] = {"batch_size": 16, "drop_last": False, "workers": 2, "seed": 2}
    want = _reference(ds, _per_sample(ds, **kw))
    ds.calls = []
    with feedline.Loader(ds, **kw) as loader:
        got = list(loader)
    # one call a batch (the next epoch's first batches may be fetched ahead too)
    assert len(got) == len(want) == 5 and len(ds.calls) >= 5 and set(ds.calls) <= {16, 70 - 64}
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g["x"], w["x"]) and torch.equal(g["y"], w["y"]) and g["name"] == w["name"]


@pytest.mark.timeout(60)
def test_a_failing_getitems_is_redone_per_sample_naming_the_index_or_skipping_it() -> None:
    with feedline.Loader(_Rows(bad=21), batch_size=8, shuffle=False, workers=1) as loader, \
            pytest.raises(WorkerError, match="sample 21 is damaged") as info:
        list(loader)
    assert info.value.place["key"] == "21"
    with feedline.Loader(_Rows(bad=21), batch_size=8, shuffle=False, workers=1, on_error="skip") as loader, \
            pytest.warns(SkippedSampleWarning, match="'21'"):
        names = [n for b in loader for n in b["name"]]
    assert "s21" not in names and len(names) == 64 and loader.stats["skipped"] == 1


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_process_workers_take_the_same_rows_and_call_getitems() -> None:
    """Process workers (the dataset pickled to them): the same batches on both kinds."""
    for ds in (_tensors(), _Rows()):
        kw: dict[str, Any] = {"batch_size": 16, "drop_last": False, "seed": 4}
        with feedline.Loader(ds, workers=2, **kw) as threads, \
                feedline.Loader(ds, workers=2, worker_type="process", **kw) as procs:
            for a, b in zip(list(threads), list(procs), strict=True):
                assert _equal(b, a if isinstance(a, (tuple, list)) else {k: a[k] for k in ("x", "y", "i")})
            if isinstance(ds, TensorDataset):
                assert set(procs.stats["recipes"].values()) == {"take-rows"}
