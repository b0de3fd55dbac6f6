"""A train/validation split of a packed dataset, made the way tutorials make one
(``torch.utils.data.random_split``) or with ``PackedDataset.subset``: the loader reads it as
packed (decoded images, labels gathered from the index, the samples' own keys), in threads
and processes. Before, a ``Subset`` was a plain map-style dataset whose samples were the
raw field bytes: every field arrived as a list of ``memoryview`` and ``__key__`` was the
subset's index, with no error."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from loader_helpers import make_packed

import feedline
from feedline.errors import SampleIndexError, StateError
from feedline.io import PackedSubset


@pytest.fixture(scope="module")
def ds(tmp_path_factory: pytest.TempPathFactory) -> feedline.io.PackedDataset:
    return feedline.open_dataset(make_packed(tmp_path_factory.mktemp("subset"), n=30))


def _keys(loader: feedline.Loader) -> list[str]:
    keys = []
    for batch in loader:
        assert batch["jpg"].dtype == torch.uint8 and batch["jpg"].shape[1:] == (24, 32, 3)
        # sample s0007 has cls 7 and a float32 field of 7s: the rows are the samples named
        assert batch["cls"].tolist() == [int(k[1:]) for k in batch["__key__"]]
        assert batch["f32"][:, 0].tolist() == [float(k[1:]) for k in batch["__key__"]]
        keys += batch["__key__"]
    return keys


@pytest.mark.timeout(120)
@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_random_split_reads_as_packed(ds: feedline.io.PackedDataset, worker_type: str) -> None:
    train, val = torch.utils.data.random_split(ds, [0.8, 0.2], generator=torch.Generator().manual_seed(0))
    with feedline.Loader(val, batch_size=3, workers=2, worker_type=worker_type, shuffle=False,
                         drop_last=False) as loader:
        assert loader.dataset is val  # as DataLoader.dataset: len(loader.dataset) in the eval loop
        assert _keys(loader) == [f"s{i:04d}" for i in val.indices]
        assert loader.stats["recipes"]["cls"] == "gather"
        recipes = loader.stats["recipes"]
    with feedline.Loader(ds, batch_size=3, workers=2, worker_type=worker_type, shuffle=False) as whole:
        next(iter(whole))
        assert recipes == whole.stats["recipes"]  # a split gets every fast path the whole has
    with feedline.Loader(train, batch_size=4, workers=2, worker_type=worker_type, seed=1) as loader:
        keys = _keys(loader)
    assert len(keys) == 24 and set(keys) <= {f"s{i:04d}" for i in train.indices}


@pytest.mark.timeout(60)
def test_subset_of_subset_and_the_method(ds: feedline.io.PackedDataset) -> None:
    outer = torch.utils.data.Subset(ds, list(range(10, 30)))
    inner = torch.utils.data.Subset(outer, [5, 0, 19])  # samples 15, 10, 29
    with feedline.Loader(inner, batch_size=3, workers=1, shuffle=False) as loader:
        assert _keys(loader) == ["s0015", "s0010", "s0029"]
    part = ds.subset(np.array([3, -1]))
    assert isinstance(part, PackedSubset) and len(part) == 2 and part.keys() == ["s0003", "s0029"]
    assert part.locate(1) == ds.locate(29) and part[0]["__key__"] == "s0003"
    with pytest.raises(SampleIndexError, match="out of range"):
        ds.subset([30])
    with pytest.raises(SampleIndexError, match="out of range"):
        part.read_many([2])


@pytest.mark.timeout(60)
def test_resume_state_is_tied_to_its_split(ds: feedline.io.PackedDataset) -> None:
    a, b = ds.subset(range(0, 15)), ds.subset(range(15, 30))
    loader = feedline.Loader(a, batch_size=5, workers=1, seed=0)
    it = iter(loader)
    first = next(it)["__key__"]
    state = json.loads(json.dumps(loader.state_dict()))
    rest = [k for batch in it for k in batch["__key__"]]
    loader.close()
    again = feedline.Loader(ds.subset(range(0, 15)), batch_size=5, workers=1, seed=0)
    again.load_state_dict(state)
    assert [k for batch in again for k in batch["__key__"]] == rest and first[0] not in rest
    again.close()
    with pytest.raises(StateError):
        feedline.Loader(b, batch_size=5, workers=1, seed=0).load_state_dict(state)


@pytest.mark.timeout(60)
def test_a_subset_of_a_map_style_dataset_is_left_alone(tmp_path: Path) -> None:
    class Subset(torch.utils.data.Subset):  # a subclass with samples of its own
        def __getitem__(self, i: int) -> dict:
            return {"x": np.full(2, self.indices[i], np.int64)}

        def __getitems__(self, indices: list[int]) -> list[dict]:
            return [self[i] for i in indices]

    ds = feedline.open_dataset(os.fspath(make_packed(tmp_path, n=6)))
    with feedline.Loader(Subset(ds, [4, 2]), batch_size=2, workers=1, shuffle=False) as loader:
        assert next(iter(loader))["x"].tolist() == [[4, 4], [2, 2]]


@pytest.mark.timeout(60)
def test_classes_as_imagefolder_has_them(tmp_path: Path) -> None:
    # a tutorial's num_classes = len(train_loader.dataset.classes): before, a packed dataset had
    # no classes attribute (only feedline.format.read_manifest(path).classes)
    for name in ("owls/1.jpg", "cats/1.jpg", "cats/2.jpg"):
        (tmp_path / "train" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "train" / name).write_bytes(b"\xff\xd8" + name.encode())
    from feedline.format import SourceRules, pack

    pack([tmp_path / "train"], tmp_path / "ds", rules=SourceRules(labels="from-folder"))
    loader = feedline.Loader(os.fspath(tmp_path / "ds"), batch_size=1, workers=1)
    assert loader.dataset.classes == ("cats", "owls") and loader.dataset.class_to_idx == {"cats": 0, "owls": 1}
    assert loader.dataset.subset([2]).classes == ("cats", "owls")
    loader.close()
    assert feedline.open_dataset(make_packed(tmp_path / "plain", n=2)).classes is None
