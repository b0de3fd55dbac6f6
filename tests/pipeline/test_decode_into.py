"""Decoding JPEGs straight into batch slots gives the same batches as decode + stack."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import simplejpeg

import feedline
from feedline.pipeline import collate


def _pack(root: Path, sizes: list[tuple[int, int]]) -> Path:
    from feedline.format import pack

    src = root / "src"
    src.mkdir(parents=True)
    for i, (h, w) in enumerate(sizes):
        img = np.random.default_rng(i).integers(0, 255, (h, w, 3), dtype=np.uint8)
        (src / f"s{i:04d}.jpg").write_bytes(simplejpeg.encode_jpeg(img, quality=85))
        (src / f"s{i:04d}.cls").write_text(str(i))
    pack([os.fspath(src)], os.fspath(root / "ds"))
    return root / "ds"


def _reference(root: Path, ids: list[int]) -> np.ndarray:
    ds = feedline.open_dataset(root)
    return np.stack([simplejpeg.decode_jpeg(bytes(ds[i]["jpg"]), colorspace="RGB")
                     for i in ids])


def _epoch(root: Path, **kw: Any) -> list[dict[str, Any]]:
    kw = {"workers": 2, "seed": 1, **kw}
    with feedline.Loader(os.fspath(root), batch_size=6, **kw) as loader:
        batches = list(loader)
        recipes = loader.stats["recipes"]
        direct = {f for f, r in recipes.items() if r == "decode-rows"}
        assert direct == (set() if kw.get("transform") else {"jpg"})
        return batches


@pytest.mark.timeout(180)
@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_direct_batches_are_byte_identical_to_decode_and_stack(tmp_path: Path,
                                                                worker_type: str) -> None:
    root = _pack(tmp_path, [(16, 24)] * 30)
    batches = _epoch(root, worker_type=worker_type)
    assert len(batches) == 5
    for b in batches:
        ids = b["cls"].tolist()
        assert b["jpg"].numpy().tobytes() == _reference(root, ids).tobytes()
    if worker_type == "process":
        return
    # a transform turns the direct path off: same bytes through decode + stack
    plain = _epoch(root, transform=lambda s: s)
    for a, b in zip(batches, plain, strict=True):
        assert a["cls"].tolist() == b["cls"].tolist() and torch_equal(a["jpg"], b["jpg"])
    # held batches are separate memory (each one a fresh slot the user owns)
    ptrs = {b["jpg"].data_ptr() for b in batches}
    assert len(ptrs) == len(batches)


def test_shape_mismatch_gives_a_list_for_that_batch_only(tmp_path: Path) -> None:
    sizes = [(16, 24)] * 30
    sizes[13] = (16, 26)  # decodes to a fresh array, not into its row
    root = _pack(tmp_path, sizes)
    with pytest.warns(RuntimeWarning, match="'jpg'.*list of tensors.*resize"):
        batches = _epoch(root, workers=1, shuffle=False)
    assert [len(b["cls"]) for b in batches] == [6] * 5
    for b in batches:
        ids = b["cls"].tolist()
        if 13 in ids:  # batch 2: the images as a list, each its own size
            assert isinstance(b["jpg"], list) and b["jpg"][13 - ids[0]].shape == (16, 26, 3)
            for i, img in zip(ids, b["jpg"], strict=True):
                want = simplejpeg.decode_jpeg(bytes(feedline.open_dataset(root)[i]["jpg"]))
                assert img.numpy().tobytes() == want.tobytes()
        else:
            assert b["jpg"].numpy().tobytes() == _reference(root, ids).tobytes()


def test_fill_moves_rows_forward_and_skips_rows_in_place() -> None:
    rng = np.random.default_rng(0)
    dst = np.zeros((5, 2, 3), np.uint8)
    values = [rng.integers(0, 255, (2, 3), dtype=np.uint8) for _ in range(5)]
    for r in (0, 2, 4):
        dst[r] = values[r]
    # position 0 in place; position 1 is the view of row 2; position 2 of row 4;
    # positions 3-4 fresh arrays
    column = [dst[0], dst[2], dst[4], values[1], values[3]]
    want = np.stack([values[0], values[2], values[4], values[1], values[3]])
    layout = collate.Layout({"x": collate.Ref(("x",))}, (collate.Leaf(("x",), (2, 3), "|u1"),), 5, 1)
    collate.fill(layout, {("x",): dst}, [{"x": v} for v in column])
    assert dst.tobytes() == want.tobytes()


def torch_equal(a: Any, b: Any) -> bool:
    return bool(a.shape == b.shape and (a == b).all())
