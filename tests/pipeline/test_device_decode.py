"""decode_on: JPEG fields kept compressed by the workers and decoded after delivery.

The CPU path of the interface (a CpuJpegDecoder given as decode_on) runs the same
plumbing a GPU decode does; tests/gpu/decode_jpeg_batch_test.py covers the device.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import simplejpeg
import torch

import feedline
from feedline.decode.jpeg_batch import CpuJpegDecoder
from feedline.errors import ConfigError, DecodeError, WorkerError
from feedline.format import pack
from feedline.pipeline.device_decode import AUTO_STEPS, DeviceDecode


def _dataset(tmp: Path, n: int = 24, portrait_every: int = 0, bad: int | None = None) -> str:
    src = tmp / "src"
    src.mkdir()
    for i in range(n):
        h, w = (32, 24) if portrait_every and i % portrait_every == 0 else (24, 32)
        img = np.random.default_rng(i).integers(0, 255, (h, w, 3), dtype=np.uint8)
        data = b"\xff\xd8 broken" if i == bad else simplejpeg.encode_jpeg(img, quality=90)
        (src / f"s{i:03d}.jpg").write_bytes(data)
        (src / f"s{i:03d}.cls").write_text(str(i))
    pack([os.fspath(src)], os.fspath(tmp / "ds"))
    return os.fspath(tmp / "ds")


@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_compressed_plumbing_gives_the_same_images(tmp_path, worker_type):
    ds = _dataset(tmp_path)
    kw = {"batch_size": 8, "workers": 2, "seed": 3, "worker_type": worker_type}
    with feedline.Loader(ds, **kw) as ref:
        want = {}
        for epoch in range(2):
            ref.set_epoch(epoch)
            for b in ref:
                want.update({int(c): img.clone() for c, img in zip(b["cls"], b["jpg"], strict=True)})
    with feedline.Loader(ds, decode_on=CpuJpegDecoder(threads=2), **kw) as loader:
        got = {}
        for epoch in range(2):
            loader.set_epoch(epoch)
            for b in loader:
                assert isinstance(b["jpg"], list)
                got.update({int(c): img for c, img in zip(b["cls"], b["jpg"], strict=True)})
        info = loader.stats["decode_on"]
    assert got.keys() == want.keys()
    assert all(torch.equal(got[k], want[k]) for k in want)
    assert info["decoder"] == "simplejpeg" and info["batches"] == 6
    assert 0 < info["compressed_bytes"] < info["decoded_bytes"]


def test_decode_size_makes_mixed_orientations_dense(tmp_path):
    ds = _dataset(tmp_path, portrait_every=5)
    with feedline.Loader(ds, batch_size=8, workers=2, decode_on=CpuJpegDecoder(),
                         decode_size=(24, 32)) as loader:
        shapes = {tuple(b["jpg"].shape) for b in loader}
    assert shapes == {(8, 24, 32, 3)}


@pytest.mark.parametrize("decode_on", ["cpu", "auto"])
def test_decode_size_is_honoured_when_jpegs_decode_on_the_cpu(tmp_path, decode_on):
    ds = _dataset(tmp_path, portrait_every=3)
    with feedline.Loader(ds, batch_size=8, workers=2, decode_on=decode_on,
                         decode_size=(16, 20)) as loader:
        shapes = {tuple(b["jpg"].shape) for b in loader}
        assert "in the workers, decoded and resized to decode_size=(16, 20)" in \
            loader.stats["decode_on"]["where"]
        assert loader.stats["recipes"]["jpg"] == "decode-rows"
    assert shapes == {(8, 16, 20, 3)}
    src = tmp_path / "raw"
    src.mkdir()
    (src / "a.f32").write_bytes(np.zeros(4, np.float32).tobytes())
    pack([os.fspath(src)], os.fspath(tmp_path / "nojpeg"))
    with pytest.raises(ConfigError, match="decode_size resizes the image fields"):
        feedline.Loader(os.fspath(tmp_path / "nojpeg"), batch_size=1, decode_size=(16, 20))


def test_a_bad_jpeg_names_its_sample(tmp_path):
    ds = _dataset(tmp_path, bad=5)
    with feedline.Loader(ds, batch_size=8, workers=1, shuffle=False,
                         decode_on=CpuJpegDecoder()) as loader, \
            pytest.raises((DecodeError, WorkerError)) as e:
        list(loader)
    assert "s005" in str(e.value)


def test_choices_and_reasons(tmp_path):
    ds = _dataset(tmp_path, n=8)
    with feedline.Loader(ds, batch_size=4, workers=1, decode_on="auto") as loader:
        assert "device is cpu" in loader.stats["decode_on"]["where"]
        assert loader.stats["recipes"] == {} or loader.stats["recipes"]["jpg"] != "sample"
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="decode_on='gpu'"):
            feedline.Loader(ds, batch_size=4, decode_on="gpu", device="cpu")
    with pytest.raises(ConfigError, match="decode_on must be"):
        feedline.Loader(ds, batch_size=4, decode_on="fpga")


def test_auto_measures_the_first_batch_then_decides():
    blobs = [simplejpeg.encode_jpeg(np.full((64, 64, 3), i, np.uint8)) for i in range(4)]
    stage = DeviceDecode(["jpg"], None, "auto", device="cpu", workers=2)
    first = stage({"jpg": list(blobs), "__key__": list("abcd")})
    assert len(first["jpg"]) == 4 and stage.report()["cpu_decode_s_first_batch"] > 0
    for _ in range(AUTO_STEPS - 1):  # the consumer's steps, timed; their batches decode on the CPU
        stage.before_next()
        assert "deciding" in stage.report()["reason"]
        stage({"jpg": list(blobs), "__key__": list("abcd")})
    stage.before_next()  # the last timed step: auto decides
    rep = stage.report()
    assert rep["device"] == "cpu" and "device is cpu" in rep["reason"]
    second = stage({"jpg": list(blobs), "__key__": list("abcd")})
    assert torch.equal(second["jpg"][2], first["jpg"][2])


def test_auto_decides_on_the_steps_after_the_first():
    # a slow first step (CUDA context, cuDNN autotuning, compilation) must not stand for the
    # step time: before, it alone did, and a long warm-up made CPU decode look like it kept up
    import time

    blobs = [simplejpeg.encode_jpeg(np.full((16, 16, 3), i, np.uint8)) for i in range(2)]
    stage = DeviceDecode(["jpg"], None, "auto", device="cpu", workers=1)
    for k in range(AUTO_STEPS):
        stage({"jpg": list(blobs), "__key__": list("ab")})
        time.sleep(0.5 if k == 0 else 0.0)  # the consumer's step: a warm-up, then quick ones
        stage.before_next()
    rep = stage.report()
    assert len(rep["auto_steps_s"]) == AUTO_STEPS and rep["auto_steps_s"][0] >= 0.5
    assert rep["auto_step_s"] < 0.5 and "deciding" not in rep["reason"]


class _NoNvjpeg(CpuJpegDecoder):
    """A device decoder broken as a torchvision built without nvJPEG is: every call fails."""

    name = "torchvision.io.decode_jpeg"

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def decode(self, batch, *, size=None):
        self.calls += 1
        raise RuntimeError("decode_jpegs_cuda: torchvision not compiled with nvJPEG support")


def test_a_decoder_that_fails_every_image_is_replaced_by_the_cpu_once_and_said():
    blobs = [simplejpeg.encode_jpeg(np.full((16, 24, 3), 40 * i, np.uint8)) for i in range(4)]
    broken = _NoNvjpeg()
    stage = DeviceDecode(["jpg"], broken, "decoder given", device="cpu", workers=1, size=(8, 8))
    first = stage({"jpg": list(blobs), "__key__": list("abcd")})
    assert tuple(first["jpg"].shape) == (4, 8, 8, 3)
    rep = stage.report()
    assert rep["decoder"] == "simplejpeg" and "failed on every image" in rep["reason"]
    assert "nvJPEG" in rep["reason"] and rep["cpu_fallbacks"] == 4
    calls = broken.calls
    second = stage({"jpg": list(blobs), "__key__": list("abcd")})
    assert broken.calls == calls and stage.report()["cpu_fallbacks"] == 4
    assert torch.equal(second["jpg"], first["jpg"])


def test_images_decoded_on_the_cpu_go_to_the_loaders_device():
    """auto deciding the CPU on a GPU loader must not leave the JPEG field on the host while
    every other field is on the device ("meta" stands in for cuda: a real non-CPU device here)."""
    blobs = [simplejpeg.encode_jpeg(np.full((16, 24, 3), i, np.uint8)) for i in range(3)]
    stage = DeviceDecode(["jpg"], CpuJpegDecoder(), "cpu", device="meta", workers=1)
    out = stage({"jpg": list(blobs), "__key__": list("abc")})
    assert [t.device.type for t in out["jpg"]] == ["meta"] * 3
    assert [tuple(t.shape) for t in out["jpg"]] == [(16, 24, 3)] * 3
    dense = DeviceDecode(["jpg"], CpuJpegDecoder(), "cpu", device="meta", workers=1, size=(8, 8))
    assert dense({"jpg": list(blobs)})["jpg"].device.type == "meta"


class _Seen(CpuJpegDecoder):
    """The CPU decoder, keeping the batches it was handed."""

    def __init__(self, packed: bool) -> None:
        super().__init__()
        self.packed = packed
        self.seen: list = []

    def decode(self, batch, *, size=None):
        self.seen.append(batch)
        return super().decode(batch, size=size)


@pytest.mark.parametrize("packed", [False, True])
def test_a_decoder_reading_image_by_image_gets_the_bytes_without_a_copy(packed):
    """``packed = False`` (the CPU decoder's): the stage hands it a view of the workers' bytes,
    no packing buffer taken; a decoder that wants ``data`` gets them packed. Same images."""
    blobs = [simplejpeg.encode_jpeg(np.full((16, 24, 3), 40 * i, np.uint8)) for i in range(3)]
    decoder = _Seen(packed)
    stage = DeviceDecode(["jpg"], decoder, "cpu", device="cpu", workers=1)
    out = stage({"jpg": list(blobs), "__key__": list("abc")})["jpg"]
    (batch,) = decoder.seen
    assert [bytes(batch.item(i)) for i in range(3)] == blobs and batch.keys == tuple("abc")
    assert batch.nbytes == sum(map(len, blobs))
    if packed:
        assert batch.data.size >= batch.nbytes and stage._ring._bufs[0] is not None
    else:
        assert batch.data.size == 0 and all(b is None for b in stage._ring._bufs)
        assert all(batch.item(i).obj is blobs[i] for i in range(3))  # the bytes themselves
    for im, b in zip(out, blobs, strict=True):
        assert np.array_equal(im.numpy(), simplejpeg.decode_jpeg(b, colorspace="RGB"))
