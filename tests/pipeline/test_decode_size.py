"""decode_size: images decoded and resized in the workers (decode_on="cpu"), bad images
as ordinary bad samples; the decode after delivery (decode_on=<decoder>) keeps its own
header check and CPU fallback."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import simplejpeg
import torch
from PIL import Image

import feedline
from feedline import vision
from feedline.decode import Limits
from feedline.decode.jpeg_batch import CompressedBatch, CpuJpegDecoder
from feedline.decode.resized import decode_resized
from feedline.errors import DecodeError, WorkerError
from feedline.format import pack

BAD = {3: b"", 7: b"\xff\xd8\xff\xe0 garbage", 12: None}  # empty, headerless, body cut


def _cut_in_the_scan(data: bytes) -> bytes:
    """The JPEG cut halfway through its entropy-coded data: the header still reads."""
    sos = data.index(b"\xff\xda")
    return data[: sos + (len(data) - sos) // 2]


def _image(i: int) -> np.ndarray:
    h, w = (40, 30) if i % 4 == 0 else (30, 40)  # portrait and landscape
    rng = np.random.default_rng(i)
    y, x = np.mgrid[0:h, 0:w]
    base = ((np.sin(x / (3 + i % 5)) + np.cos(y / 7)) * 50 + 128)[..., None]
    return np.clip(base + rng.normal(0, 5, (h, w, 3)), 0, 255).astype(np.uint8)


def _dataset(tmp: Path, n: int = 32, bad: dict[int, bytes | None] | None = None) -> str:
    src = tmp / "src"
    src.mkdir()
    for i in range(n):
        data = simplejpeg.encode_jpeg(_image(i), quality=90)
        if bad and i in bad:
            data = bad[i] if bad[i] is not None else _cut_in_the_scan(data)
        (src / f"s{i:03d}.jpg").write_bytes(data)
        (src / f"s{i:03d}.cls").write_text(str(i))
    pack([os.fspath(src)], os.fspath(tmp / "ds"))
    return os.fspath(tmp / "ds")


def _epochs(loader: feedline.Loader, epochs: int = 2) -> list[dict[str, Any]]:
    out = []
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        out.extend({"keys": list(b["__key__"]), "cls": b["cls"].tolist(), "jpg": b["jpg"].clone()}
                   for b in loader)
    return out


@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_decoded_and_resized_in_the_workers_into_the_rows(tmp_path, worker_type):
    ds = _dataset(tmp_path)
    with feedline.Loader(ds, batch_size=8, workers=2, worker_type=worker_type, seed=1,
                         decode_size=(20, 24)) as loader:
        batches = _epochs(loader)
        assert loader.stats["recipes"] == {"jpg": "decode-rows", "cls": "gather"}
        assert "in the workers" in loader.stats["decode_on"]["where"]
    raw = feedline.open_dataset(ds)
    for b in batches:
        assert tuple(b["jpg"].shape) == (8, 20, 24, 3) and b["jpg"].dtype == torch.uint8
        for k, c in zip(b["keys"], b["cls"], strict=True):
            want = decode_resized(bytes(raw[c]["jpg"]), Limits(), (20, 24))
            assert k == f"s{c:03d}"
            np.testing.assert_array_equal(b["jpg"][b["cls"].index(c)].numpy(), want)


def test_the_same_images_as_the_decode_after_delivery(tmp_path):
    """Against what decode_size did before (decoded and resized after delivery, torch's
    antialiased bilinear): within a few grey levels, under one on average."""
    ds = _dataset(tmp_path)
    kw: dict[str, Any] = {"batch_size": 8, "workers": 2, "seed": 4, "decode_size": (24, 20)}
    with feedline.Loader(ds, **kw) as ours, \
            feedline.Loader(ds, decode_on=CpuJpegDecoder(threads=2), **kw) as after:
        a, b = _epochs(ours, 1), _epochs(after, 1)
    assert [x["keys"] for x in a] == [x["keys"] for x in b]
    diff = torch.cat([(x["jpg"].int() - y["jpg"].int()).abs().flatten() for x, y in zip(a, b, strict=True)])
    assert diff.max() <= 4 and diff.float().mean() < 1.0


@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_bad_images_are_skipped_listed_and_resume_is_exact(tmp_path, worker_type):
    ds = _dataset(tmp_path, bad=BAD)
    kw: dict[str, Any] = {"batch_size": 4, "workers": 2, "worker_type": worker_type, "seed": 2,
                          "decode_size": (16, 16), "on_error": "skip"}
    with feedline.Loader(ds, **kw) as loader:
        whole = _epochs(loader)
        skipped = {s["key"] for s in loader.stats["skipped_samples"]}
        assert all(s["stage"] == "decode" and s["error"] == "DecodeError"
                   for s in loader.stats["skipped_samples"])
    assert skipped == {f"s{i:03d}" for i in BAD}
    assert len(whole) == 2 * (32 // 4)  # the same number of full batches as without damage
    delivered = {k for b in whole for k in b["keys"]}
    assert not delivered & skipped and all(tuple(b["jpg"].shape) == (4, 16, 16, 3) for b in whole)
    # stop after 3 batches of epoch 1, save as JSON, resume in a new loader
    with feedline.Loader(ds, **kw) as first:
        first.set_epoch(1)
        it = iter(first)
        for _ in range(3):
            next(it)
        state = json.loads(json.dumps(first.state_dict()))
    with feedline.Loader(ds, **kw) as again:
        again.load_state_dict(state)
        again.set_epoch(1)
        rest = [list(b["__key__"]) for b in again]
    assert rest == [b["keys"] for b in whole[8 + 3:]]


@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_a_bad_image_raises_naming_shard_key_and_field(tmp_path, worker_type):
    ds = _dataset(tmp_path, n=16, bad={5: None})
    with feedline.Loader(ds, batch_size=4, workers=1, worker_type=worker_type, shuffle=False,
                         decode_size=(16, 16)) as loader, pytest.raises(WorkerError) as e:
        list(loader)
    place = e.value.place
    assert place["key"] == "s005" and place["field"] == "jpg" and place["shard"].endswith(".tar")
    assert "JPEG data unreadable" in str(e.value)


def test_a_transform_sees_the_resized_hwc_array(tmp_path):
    ds = _dataset(tmp_path, n=16)
    seen: list[tuple[Any, ...]] = []

    def tf(sample: dict[str, Any]) -> dict[str, Any]:
        img = sample["jpg"]
        seen.append((type(img), img.shape, img.dtype))
        return {"x": vision.to_chw(img), "cls": sample["cls"]}

    with feedline.Loader(ds, batch_size=4, workers=1, decode_size=(12, 10), transform=tf) as loader:
        shapes = {tuple(b["x"].shape) for b in loader}
    assert shapes == {(4, 3, 12, 10)}
    assert set(seen) == {(np.ndarray, (12, 10, 3), np.dtype(np.uint8))}


def test_png_fields_are_resized_too_and_a_bad_size_is_refused(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for i in range(8):
        img = Image.fromarray(_image(i)).convert("P" if i % 2 else "L")
        img.save(src / f"p{i}.png")
    pack([os.fspath(src)], os.fspath(tmp_path / "ds"))
    with feedline.Loader(os.fspath(tmp_path / "ds"), batch_size=4, workers=1,
                         decode_size=(8, 6)) as loader:
        shapes = {tuple(b["png"].shape) for b in loader}
        assert loader.stats["recipes"]["png"] == "decode-rows"
    assert shapes == {(4, 8, 6, 3)}
    for bad in ((0, 3), (224,), "224x224"):
        with pytest.raises(ValueError, match="decode_size"):
            feedline.Loader(os.fspath(tmp_path / "ds"), batch_size=4, decode_size=bad)


class NoProgressive(CpuJpegDecoder):
    """A stand-in for a device decoder that rejects what the CPU still reads (nvJPEG's
    hardware engine and progressive JPEGs): the CPU path of the same interface."""

    name = "no-progressive"

    def decode(self, batch: CompressedBatch, *, size: tuple[int, int] | None = None) -> Any:
        for i in range(len(batch)):
            if b"\xff\xc2" in bytes(batch.item(i)):  # SOF2: progressive
                raise RuntimeError("unsupported JPEG (progressive)")
        return super().decode(batch, size=size)


def test_after_delivery_skips_garbage_in_the_workers_and_falls_back_to_the_cpu(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for i in range(16):
        progressive = i in (2, 9)
        buf = Image.fromarray(_image(i))
        buf.save(src / f"s{i:03d}.jpg", progressive=progressive, quality=90)
        (src / f"s{i:03d}.cls").write_text(str(i))
    (src / "s003.jpg").write_bytes(b"")
    (src / "s011.jpg").write_text("not a jpeg at all")
    pack([os.fspath(src)], os.fspath(tmp_path / "ds"))
    ds = os.fspath(tmp_path / "ds")
    with feedline.Loader(ds, batch_size=4, workers=2, shuffle=False, on_error="skip",
                         decode_on=NoProgressive(), decode_size=(16, 16)) as loader:
        batches = list(loader)
        info = loader.stats["decode_on"]
        skipped = {s["key"] for s in loader.stats["skipped_samples"]}
    assert skipped == {"s003", "s011"}  # header check in the workers: skipped, refilled
    assert len(batches) == 4 and all(tuple(b["jpg"].shape) == (4, 16, 16, 3) for b in batches)
    assert info["cpu_fallbacks"] == 2 and sorted(info["cpu_fallback_keys"]) == ["s002", "s009"]


def test_after_delivery_a_body_damaged_jpeg_raises_naming_its_key(tmp_path):
    ds = _dataset(tmp_path, n=16, bad={6: None})
    with feedline.Loader(ds, batch_size=4, workers=1, shuffle=False, on_error="skip",
                         decode_on=CpuJpegDecoder(), decode_size=(16, 16)) as loader, \
            pytest.raises(DecodeError) as e:
        list(loader)
    assert e.value.place["key"] == "s006" and e.value.place["field"] == "jpg"
    assert "CPU fallback" in str(e.value) and "on_error='skip' cannot skip it" in str(e.value)


def test_a_mask_field_keeps_its_class_ids(tmp_path):
    """jpg + seg.png (a palette mask, VOC style): the photo is resized, the mask is not
    interpolated into colours: it comes out as stored, palette indices."""
    src = tmp_path / "src"
    src.mkdir()
    masks = {}
    for i in range(8):
        (src / f"s{i}.jpg").write_bytes(simplejpeg.encode_jpeg(_image(i)))
        ids = (np.arange(12 * 16).reshape(12, 16) + i) % 5
        mask = Image.fromarray(ids.astype(np.uint8), "P")
        mask.putpalette([0, 0, 0, 128, 0, 0, 0, 128, 0, 128, 128, 0, 0, 0, 128])
        mask.save(src / f"s{i}.seg.png")
        masks[f"s{i}"] = ids
    pack([os.fspath(src)], os.fspath(tmp_path / "ds"))
    with feedline.Loader(os.fspath(tmp_path / "ds"), batch_size=4, workers=1,
                         decode_size=(10, 10)) as loader:
        for b in loader:
            assert tuple(b["jpg"].shape) == (4, 10, 10, 3)
            for k, m in zip(b["__key__"], b["seg.png"], strict=True):
                np.testing.assert_array_equal(m.numpy(), masks[k])


def test_auto_measuring_a_batch_with_a_damaged_jpeg_names_it():
    """decode_on="auto" times the first batch on the CPU; a damaged image there does not
    break the measurement: the decode proper names it."""
    from feedline.pipeline.device_decode import DeviceDecode

    blobs = [simplejpeg.encode_jpeg(_image(i)) for i in range(4)]
    blobs[2] = _cut_in_the_scan(blobs[2])
    stage = DeviceDecode(["jpg"], None, "auto", device="cpu", workers=1, size=(8, 8))
    with pytest.raises(DecodeError) as e:
        stage({"jpg": blobs, "__key__": list("abcd")})
    assert e.value.place["key"] == "c" and stage.report()["cpu_decode_s_first_batch"] > 0
