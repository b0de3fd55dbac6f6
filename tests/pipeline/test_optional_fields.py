"""Fields that only some samples have, as datasets hold them: a driving log where one
frame in three has a hand-labelled mask, a photo folder mixing JPEG, PNG, WebP, BMP and
TIFF, and a map-style caption dataset where some items lack the caption. The loader gives
such a field as a list with ``None`` where a sample lacks it (dense where a whole batch has
it), in threads and processes, over shuffled epochs; a field batch 0 never saw still
arrives; a sample with a field the layout does not know is still a named bad sample."""

from __future__ import annotations

import io
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import simplejpeg
from PIL import Image

import feedline
from feedline.errors import FeedlineError
from feedline.format import pack

N, H, W = 26, 12, 20


def _rgb(i: int) -> np.ndarray:
    return np.random.default_rng(i).integers(0, 255, (H, W, 3), dtype=np.uint8)


def _image_bytes(arr: np.ndarray, fmt: str) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format=fmt, **({"lossless": True} if fmt == "WEBP" else {}))
    return buf.getvalue()


@pytest.fixture(scope="module")
def drive_log(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict[str, Any]]]:
    """Frames ``log_2024-05-01/frame.000123.{cam.jpg,lidar.npy[,mask.png]}``: mask every
    third frame, lidar of varying length."""
    root = tmp_path_factory.mktemp("drive")
    src = root / "log_2024-05-01"
    src.mkdir()
    want: dict[str, dict[str, Any]] = {}
    for i in range(N):
        key = f"log_2024-05-01/frame_{i:06d}"
        cam = simplejpeg.encode_jpeg(_rgb(i))
        (src / f"frame_{i:06d}.cam.jpg").write_bytes(cam)
        lidar = np.random.default_rng(50 + i).standard_normal((30 + i, 4)).astype(np.float32)
        np.save(src / f"frame_{i:06d}.lidar.npy", lidar)
        entry: dict[str, Any] = {"cam.jpg": simplejpeg.decode_jpeg(cam), "lidar.npy": lidar}
        if i % 3 == 1:
            mask = (np.arange(H * W, dtype=np.uint8).reshape(H, W) + i) % 7
            (src / f"frame_{i:06d}.mask.png").write_bytes(_image_bytes(mask, "PNG"))
            entry["mask.png"] = mask
        want[key] = entry
    out = root / "ds"
    pack([os.fspath(root)], os.fspath(out), shard_size=64 << 10)
    return out, want


def _check_batches(loader: feedline.Loader, want: dict[str, dict[str, Any]],
                   fields: set[str]) -> list[str]:
    seen: list[str] = []
    for batch in loader:
        keys = batch["__key__"]
        assert set(batch) == fields | {"__key__"}
        for name in fields:
            column = batch[name]
            for row, key in enumerate(keys):
                value = column[row]
                if name not in want[key]:
                    assert value is None, (key, name)
                else:
                    expected = want[key][name]
                    got = value.numpy()
                    assert got.dtype == expected.dtype and np.array_equal(got, expected), (key, name)
        seen.extend(keys)
    return seen


@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_optional_mask_is_none_where_missing(drive_log: tuple[Path, dict[str, dict[str, Any]]],
                                             worker_type: str) -> None:
    root, want = drive_log
    loader = feedline.Loader(os.fspath(root), batch_size=4, workers=2, worker_type=worker_type,
                             seed=7, drop_last=False)
    epochs = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the list-fallback note
        for epoch in range(2):
            loader.set_epoch(epoch)
            epochs.append(_check_batches(loader, want, {"cam.jpg", "lidar.npy", "mask.png"}))
    assert sorted(epochs[0]) == sorted(want) == sorted(epochs[1])
    assert epochs[0] != epochs[1]


def test_field_batch_zero_lacks_arrives(tmp_path: Path) -> None:
    """A photo folder sorted so that batch 0 holds JPEGs only; PNG, WebP, BMP and TIFF
    photos come later and arrive decoded under their own fields."""
    src = tmp_path / "photos"
    src.mkdir()
    formats = {"jpg": "JPEG", "png": "PNG", "webp": "WEBP", "bmp": "BMP", "tiff": "TIFF"}
    want: dict[str, dict[str, Any]] = {}
    names = ["jpg"] * 8 + ["png", "webp", "bmp", "tiff", "jpg", "png"]
    for i, ext in enumerate(names):
        data = _image_bytes(_rgb(i), formats[ext])
        (src / f"{i:03d}.{ext}").write_bytes(data)
        with Image.open(io.BytesIO(data)) as img:
            want[f"{i:03d}"] = {ext: np.asarray(img.convert("RGB"))}
    pack([os.fspath(src)], os.fspath(tmp_path / "ds"), shard_size=1 << 20)
    loader = feedline.Loader(os.fspath(tmp_path / "ds"), batch_size=4, workers=1,
                             shuffle=False, drop_last=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        seen = _check_batches(loader, want, set(formats))
    assert seen == sorted(want)


class Captions:
    """A map-style dataset as HuggingFace-style exports give it: some items have no caption."""

    def __len__(self) -> int:
        return 10

    def __getitem__(self, i: int) -> dict[str, Any]:
        item: dict[str, Any] = {"pixels": np.full((2, 3), i, np.float32), "id": i}
        if i % 4:
            item["caption"] = f"picture {i}"
        return item


def test_map_style_optional_key() -> None:
    loader = feedline.Loader(Captions(), batch_size=5, workers=2, shuffle=False, drop_last=False)
    batches = list(loader)
    assert [b["id"].tolist() for b in batches] == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
    assert batches[0]["caption"] == [None, "picture 1", "picture 2", "picture 3", None]
    assert batches[1]["pixels"].shape == (5, 2, 3)


class Extra(Captions):
    def __getitem__(self, i: int) -> dict[str, Any]:
        item = super().__getitem__(i)
        if i == 7:
            item["surprise"] = 1
        return item


def test_unknown_field_is_a_named_bad_sample() -> None:
    loader = feedline.Loader(Extra(), batch_size=5, workers=1, shuffle=False, drop_last=False)
    with pytest.raises(FeedlineError, match="'surprise'") as info:
        list(loader)
    assert info.value.place.get("key") == "7"
    assert "with None where it has no value" in str(info.value)


class Declared(Captions):
    """The fix the error gives: every item has the key, None where it has no value."""

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {**super().__getitem__(i), "surprise": 1 if i == 7 else None}


def test_a_field_given_as_none_is_a_list_with_none() -> None:
    loader = feedline.Loader(Declared(), batch_size=5, workers=1, shuffle=False, drop_last=False)
    assert [b["surprise"] for b in loader] == [[None] * 5, [None, None, 1, None, None]]


def test_batch_decode_stage_skips_samples_without_the_field(tmp_path: Path) -> None:
    """``decode_on=`` a batch JPEG decoder (the GPU path, here its CPU decoder): a photo
    folder where some samples are PNG gives the JPEG field with None in their rows."""
    from feedline.decode import Limits
    from feedline.decode.jpeg_batch import CpuJpegDecoder

    src = tmp_path / "mixed"
    src.mkdir()
    want: dict[str, dict[str, Any]] = {}
    for i in range(6):
        ext, fmt = ("png", "PNG") if i in (1, 4) else ("jpg", "JPEG")
        data = _image_bytes(_rgb(i), fmt)
        (src / f"{i:03d}.{ext}").write_bytes(data)
        with Image.open(io.BytesIO(data)) as img:
            want[f"{i:03d}"] = {ext: simplejpeg.decode_jpeg(data) if ext == "jpg" else np.asarray(img)}
    pack([os.fspath(src)], os.fspath(tmp_path / "ds"), shard_size=1 << 20)
    loader = feedline.Loader(os.fspath(tmp_path / "ds"), batch_size=3, workers=1, shuffle=False,
                             drop_last=False, decode_on=CpuJpegDecoder(Limits()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert _check_batches(loader, want, {"jpg", "png"}) == sorted(want)
    assert loader.stats["decode_on"]["fields"] == ["jpg"]
