"""The batch layout is decided by batch 0 of the plan: the same on every run, threads and
processes; a sample of another shape later gives that field as a list, never a crash."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import simplejpeg
from loader_helpers import Photos

import feedline
from feedline.pipeline import collate


def _run(dataset: Any, field: str, **kw: Any) -> list[tuple[Any, ...]]:
    """Per batch: keys, whether ``field`` is dense, and a digest of its values."""
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with feedline.Loader(dataset, batch_size=16, seed=0, workers=2, **kw) as loader:
            for epoch in range(2):
                loader.set_epoch(epoch)
                for b in loader:
                    value = b[field]
                    dense = not isinstance(value, list)
                    rows = [value[i] for i in range(len(value))]
                    digest = tuple((tuple(r.shape), int(r.sum())) for r in rows)
                    out.append((tuple(b["__key__"]), dense, digest))
    return out


def _photos(root: Path, n: int = 80) -> Path:
    """A packed set of JPEGs, 95% landscape 24x32, 5% portrait 32x24, with labels."""
    from feedline.format import pack

    src = root / "src"
    src.mkdir()
    portrait = set(np.random.default_rng(7).choice(n, size=n // 20, replace=False).tolist())
    for i in range(n):
        shape = (32, 24, 3) if i in portrait else (24, 32, 3)
        img = np.random.default_rng(i).integers(0, 255, shape, dtype=np.uint8)
        (src / f"img{i:03d}.jpg").write_bytes(simplejpeg.encode_jpeg(img))
        (src / f"img{i:03d}.cls").write_text(str(i % 5))
    pack([os.fspath(src)], os.fspath(root / "ds"))
    return root / "ds"


@pytest.mark.timeout(240)
@pytest.mark.parametrize("kind", ["arrays", "jpeg"])
def test_mixed_orientation_gives_the_same_batches_on_every_run(tmp_path: Path, kind: str) -> None:
    # 24x32 images: the layout is about shapes, not sizes (full-size: 10 s CPU for 5 runs)
    dataset: Any = Photos(160, scale=10) if kind == "arrays" else os.fspath(_photos(tmp_path))
    field = "image" if kind == "arrays" else "jpg"
    runs = [_run(dataset, field, worker_type=w) for w in ("thread", "thread", "process",
                                                          "thread", "process")]
    for other in runs[1:]:
        assert other == runs[0]
    dense = [d for _, d, _ in runs[0]]
    assert any(dense) and not all(dense)  # some batches hold a portrait: those are lists
    for _keys, is_dense, digest in runs[0]:
        shapes = {s for s, _ in digest}
        assert is_dense == (len(shapes) == 1)


@pytest.mark.timeout(120)
def test_the_list_fallback_warns_once_naming_the_field_and_the_fix() -> None:
    with feedline.Loader(Photos(160), batch_size=16, seed=0, workers=2) as loader:
        with pytest.warns(RuntimeWarning) as caught:
            batches = list(loader)
        assert len(batches) == 10
    ours = [w for w in caught if "'image'" in str(w.message)]
    assert len(ours) == 1 and "transform=" in str(ours[0].message)
    # the fixes a newcomer can apply as named, and the line of their own loop
    assert "decode_size=(h, w)" in str(ours[0].message) and "ImageTransform('image'" in str(ours[0].message)
    assert ours[0].filename == __file__
    assert loader.stats["list_fallbacks"]["image"] == sum(
        isinstance(b["image"], list) for b in batches) >= 1


def test_layout_takes_the_shape_most_of_batch_0_has() -> None:
    a, b = np.zeros((2, 3), np.uint8), np.zeros((3, 2), np.uint8)
    layout = collate.infer_layout([{"x": b}, {"x": a}, {"x": a}], 4, 1)
    assert layout.leaves[0].shape == (2, 3)
    even = collate.infer_layout([{"x": b}, {"x": a}], 4, 1)  # no majority: a list field
    assert even.leaves[0].shape is None
    arrays = {("x",): np.zeros((4, 2, 3), np.uint8)}
    ragged = collate.fill(layout, arrays, [{"x": a}, {"x": b}])
    assert list(ragged) == [("x",)] and ragged[("x",)][1].shape == (3, 2)
    assert collate.fill(layout, arrays, [{"x": a + 1}, {"x": a + 2}]) == {}
    assert arrays[("x",)][1].max() == 2


def test_a_packed_dict_of_arrays_is_walked_a_json_dict_is_not() -> None:
    """An ``.npz`` (or a ``.pt`` dict of tensors) stacks member by member, as torch's
    default_collate does; a JSON dict of plain values stays one per sample."""
    samples = [{"npz": {"image": np.full((2, 2), i, np.uint8), "boxes": np.zeros((i + 1, 4), np.float32)},
                "json": {"id": i, "tags": ["a"]}} for i in range(3)]
    layout = collate.infer_layout(samples, 3, 1)
    dense = {leaf.path: leaf.shape for leaf in layout.leaves}
    assert dense == {("npz", "image"): (2, 2), ("npz", "boxes"): None, ("json",): None}
    arrays = {("npz", "image"): np.zeros((3, 2, 2), np.uint8)}
    ragged = collate.fill(layout, arrays, samples)
    assert arrays[("npz", "image")][:, 0, 0].tolist() == [0, 1, 2]
    assert [b.shape[0] for b in ragged[("npz", "boxes")]] == [1, 2, 3]
    assert ragged[("json",)] == [s["json"] for s in samples]
    pairs = [{"pt": (np.full(3, i, np.float32), np.asarray(i))} for i in range(3)]  # torch.save((x, y))
    tuple_layout = collate.infer_layout(pairs, 3, 1)
    assert [(leaf.path, leaf.shape) for leaf in tuple_layout.leaves] == [(("pt", 0), (3,)), (("pt", 1), ())]


def test_a_dict_member_some_samples_lack_is_none_in_its_list_not_an_error() -> None:
    """``.npz`` files (or a transform's dicts) whose members vary between samples: a member
    a sample lacks is ``None`` in that member's list, as a missing top-level field is; a
    member batch 0 never had is still refused, naming the structure."""
    def npz(i: int) -> dict[str, Any]:
        members = {"image": np.full((2, 2), i, np.uint8)}
        if i % 3 == 0:
            members["boxes"] = np.zeros((i + 1, 4), np.float32)
        return {"npz": members}

    samples = [npz(i) for i in range(4)]  # batch 0: boxes in samples 0 and 3 only
    layout = collate.infer_layout(samples, 4, 1)
    assert [leaf.path for leaf in layout.leaves] == [("npz", "image"), ("npz", "boxes")]
    later = [npz(i) for i in range(4, 8)]  # sample 6 has boxes, the others none
    arrays = {("npz", "image"): np.zeros((4, 2, 2), np.uint8)}
    ragged = collate.fill(layout, arrays, later)
    assert arrays[("npz", "image")][:, 0, 0].tolist() == [4, 5, 6, 7]
    assert [None if b is None else b.shape for b in ragged[("npz", "boxes")]] == [None, None, (7, 4), None]
    # the member is named, with the fix for a variable list of arrays (before: only "structure
    # differs", and a fix about top-level fields and image formats)
    with pytest.raises(feedline.errors.DecodeError, match=r"structure differs.*'npz/mask'.*collate="):
        collate.fill(layout, arrays, [{"npz": {"image": np.zeros((2, 2), np.uint8), "mask": np.zeros(2)}}])


@pytest.mark.timeout(60)
def test_tensor_rows_are_stacked_by_torch_and_a_misfit_is_a_list() -> None:
    """A TensorDataset's (x, y) rows: the same values as default_collate, stacked by torch
    (before: two numpy conversions per value, 100x default_collate's time); a row of
    another shape or dtype makes that leaf a list for its batch, as for numpy rows."""
    import torch
    from torch.utils.data import TensorDataset
    from torch.utils.data._utils.collate import default_collate

    ds = TensorDataset(torch.arange(64 * 5, dtype=torch.float32).reshape(64, 5), torch.arange(64))
    samples = [ds[i] for i in range(0, 64, 2)]
    layout = collate.infer_layout(samples, 32, 8)
    assert layout.flat_tuple and [leaf.shape for leaf in layout.leaves] == [(5,), ()]
    arrays = {leaf.path: np.zeros((32, *leaf.shape), leaf.dtype) for leaf in layout.leaves}
    assert collate.fill(layout, arrays, samples) == {}
    want = default_collate(samples)
    assert np.array_equal(arrays[(0,)], want[0].numpy()) and np.array_equal(arrays[(1,)], want[1].numpy())
    odd = [*samples[:-2], (torch.zeros(6), torch.tensor(1)), (torch.zeros(5), torch.tensor(1, dtype=torch.int32))]
    ragged = collate.fill(layout, arrays, odd)
    assert set(ragged) == {(0,), (1,)} and ragged[(0,)][-2].shape == (6,)
    x, y = next(iter(feedline.Loader(ds, batch_size=8, shuffle=False, device="cpu", workers=1)))
    assert torch.equal(x, ds.tensors[0][:8]) and torch.equal(y, ds.tensors[1][:8])


class _Clips:
    """(waveform of a varying length, transcript, label): a speech dataset's __getitem__."""

    def __len__(self) -> int:
        return 32

    def __getitem__(self, i: int) -> tuple[np.ndarray, str, int]:
        return np.zeros((1, 100 + 7 * i), np.float32), "word " * (i % 5 + 1), i % 3


@pytest.mark.timeout(60)
def test_arrays_of_several_shapes_in_batch_0_are_a_list_with_one_warning_at_the_loop() -> None:
    """Before: silently a list in every batch (a DataLoader refuses to stack them, so the
    user learns to pad; here the model got a list). Strings of varying length say nothing."""
    shapes = r"\(\(1, 100\), \(1, 107\), \(1, 114\), \.\.\.\).*ClipTransform"
    with feedline.Loader(_Clips(), batch_size=8, shuffle=False, device="cpu", workers=1) as loader, \
            pytest.warns(RuntimeWarning, match=r"field '0': batch 0's samples hold it at several shapes " + shapes) as got:
        batches = list(loader)
    assert [w.filename for w in got.list] == [__file__]  # once, at the loop
    waves, texts, labels = batches[0]
    assert isinstance(waves, list) and isinstance(texts, list) and labels.shape == (8,)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with feedline.Loader(_Clips(), batch_size=8, shuffle=False, device="cpu", workers=1,
                             transform=lambda s: (s[0][:, :100], s[1], s[2])) as loader:
            assert next(iter(loader))[0].shape == (8, 1, 100)


def test_a_batch_of_flat_dicts_is_checked_at_once_and_a_misfit_still_one_by_one() -> None:
    """Map-style records (a dict of numbers per sample): the Check stage accepts the whole
    batch in one pass and the columns are taken with one C call a sample; a sample lacking a
    field is None in that field's list; one with an unknown field is still refused by name."""
    from feedline.pipeline.stages import Check

    rows = [{"user": i, "item": 10 * i, "rating": i / 2} for i in range(6)]
    layout = collate.infer_layout(rows, 6, 1)
    check = Check(layout)
    assert check.accepts(rows) and check.accepts([{"user": 1}])  # a missing field passes
    assert not check.accepts([*rows[:2], {**rows[2], "extra": 1}])
    assert not check.accepts([dict(rows[0]), type("M", (dict,), {})(rows[1])])  # a subclass: one by one
    arrays = {(k,): np.zeros(6, np.int64 if k != "rating" else np.float64) for k in ("user", "item", "rating")}
    assert collate.fill(layout, arrays, rows) == {}
    assert arrays[("item",)].tolist() == [0, 10, 20, 30, 40, 50] and arrays[("rating",)][3] == 1.5
    short = [*rows[:3], {"user": 3, "rating": 1.5}]
    ragged = collate.fill(layout, arrays, short)
    assert ragged == {("item",): [0, 10, 20, None]} and arrays[("user",)][:4].tolist() == [0, 1, 2, 3]
    with pytest.raises(feedline.errors.DecodeError, match="it has 'extra'"):
        check({**rows[0], "extra": 1}, None)
