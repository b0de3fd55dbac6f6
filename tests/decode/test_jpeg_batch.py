"""The CPU path of the batched JPEG interface: compressed bytes in one buffer, decoded on the host.

This is the plumbing a GPU decode uses (tests/gpu/decode_jpeg_batch_test.py runs the
device decoders on a CUDA machine); here it runs with simplejpeg.
"""

from __future__ import annotations

import numpy as np
import pytest
import simplejpeg
import torch

from feedline.decode import Limits
from feedline.decode.jpeg_batch import (
    CompressedBatch,
    CpuJpegDecoder,
    check_headers,
    choose_jpeg_decoder,
)
from feedline.errors import ConfigError, DecodeError


def _jpegs(shapes: list[tuple[int, int]], seed: int = 0) -> list[bytes]:
    rng = np.random.default_rng(seed)
    out = []
    for h, w in shapes:
        y, x = np.mgrid[0:h, 0:w]
        img = np.stack([(x * 255 // max(1, w - 1)), (y * 255 // max(1, h - 1)),
                        np.full_like(x, int(rng.integers(0, 255)))], axis=-1).astype(np.uint8)
        out.append(simplejpeg.encode_jpeg(img, quality=90))
    return out


def test_pack_is_contiguous_with_offsets():
    blobs = _jpegs([(24, 32), (32, 24), (16, 16)])
    buf = np.zeros(sum(map(len, blobs)) + 100, dtype=np.uint8)
    batch = CompressedBatch.pack(blobs, out=buf, keys=["a", "b", "c"])
    assert batch.data is buf and len(batch) == 3
    assert batch.nbytes == sum(map(len, blobs))
    assert [bytes(batch.item(i)) for i in range(3)] == blobs
    assert batch.key(1) == "b" and batch.key(7) is None
    with pytest.raises(ConfigError, match="does not fit"):
        CompressedBatch.pack(blobs, out=np.zeros(10, dtype=np.uint8))


def test_cpu_decoder_equals_per_image_decode():
    blobs = _jpegs([(24, 32), (32, 24), (40, 40)], seed=1)
    images = CpuJpegDecoder().decode(CompressedBatch.pack(blobs))
    assert isinstance(images, list) and len(images) == 3
    for im, b in zip(images, blobs, strict=True):
        assert isinstance(im, torch.Tensor) and im.dtype == torch.uint8
        assert np.array_equal(im.numpy(), simplejpeg.decode_jpeg(b, colorspace="RGB"))


def test_size_gives_a_dense_batch_from_mixed_orientations():
    blobs = _jpegs([(24, 32), (32, 24), (24, 32)], seed=2)
    dense = CpuJpegDecoder().decode(CompressedBatch.pack(blobs), size=(24, 32))
    assert isinstance(dense, torch.Tensor) and tuple(dense.shape) == (3, 24, 32, 3)
    # images already of the target size are not resampled
    assert np.array_equal(dense[0].numpy(), simplejpeg.decode_jpeg(blobs[0], colorspace="RGB"))


def test_hostile_bytes_name_the_sample():
    blobs = [*_jpegs([(16, 16)]), b"\xff\xd8 not a jpeg at all"]
    with pytest.raises(DecodeError) as e:
        CpuJpegDecoder().decode(CompressedBatch.pack(blobs, keys=["ok", "evil"]))
    assert e.value.key == "evil" and e.value.field == "jpg"


def test_limits_are_checked_on_the_host_before_decode():
    batch = CompressedBatch.pack(_jpegs([(64, 64)]), keys=["big"])
    with pytest.raises(DecodeError, match="max_pixels") as e:
        check_headers(batch, Limits(max_pixels=1000))
    assert e.value.key == "big"
    with pytest.raises(DecodeError, match="max_bytes"):
        check_headers(batch, Limits(max_bytes=10))


def test_choose_decoder_says_why():
    dec, why = choose_jpeg_decoder("cpu", "cuda:0")
    assert dec.device == "cpu" and why == "decode_on='cpu'"
    dec, why = choose_jpeg_decoder("auto", "cpu")
    assert dec.device == "cpu" and "device is cpu" in why
    if not torch.cuda.is_available():
        dec, why = choose_jpeg_decoder("auto", "cuda:0", cpu_decode_s=1.0, step_s=0.001)
        assert dec.device == "cpu" and "CUDA is not available" in why
        with pytest.raises(ConfigError, match="decode_on='gpu'") as e:
            choose_jpeg_decoder("gpu", "cuda:0")
        assert e.value.fix
    with pytest.raises(ConfigError, match="decode_on must be"):
        choose_jpeg_decoder("tpu", "cpu")


def test_device_decoders_say_what_is_missing_at_construction() -> None:
    """No AttributeError or ImportError from deep inside a decode: the decoder cannot be made,
    and the error says why (CUDA first, then the library)."""
    from feedline.decode.jpeg_batch import NvImageCodecDecoder, TorchvisionJpegDecoder
    from feedline.errors import DeviceError

    if not torch.cuda.is_available():
        for cls in (TorchvisionJpegDecoder, NvImageCodecDecoder):
            with pytest.raises(DeviceError, match="needs CUDA") as e:
                cls("cuda:0")
            assert "decode_on='cpu'" in (e.value.fix or "")
    import importlib.util

    if importlib.util.find_spec("torchvision") is None:
        with pytest.raises(ConfigError, match="needs torchvision") as e:
            TorchvisionJpegDecoder("cpu")
        assert "pip install torchvision" in (e.value.fix or "")


@pytest.mark.parametrize("threads", [1, 2, 3, 8])
def test_threads_split_the_batch_into_runs_in_order(threads):
    """The batch is split into one run of images per thread (the caller decoding the first):
    every image equal to it decoded alone, in order, whatever the split; with ``size`` equal
    to their size the dense batch is their stack."""
    blobs = _jpegs([(24, 32)] * 7, seed=3)
    decoder = CpuJpegDecoder(threads=threads)
    images = decoder.decode(CompressedBatch.pack(blobs))
    assert isinstance(images, list) and len(images) == 7
    for k, (im, b) in enumerate(zip(images, blobs, strict=True)):
        assert np.array_equal(im.numpy(), simplejpeg.decode_jpeg(b, colorspace="RGB")), k
    dense = decoder.decode(CompressedBatch.view(blobs), size=(24, 32))
    assert isinstance(dense, torch.Tensor) and tuple(dense.shape) == (7, 24, 32, 3)
    assert torch.equal(dense, torch.stack(images))


def test_threads_keep_order_and_name_the_failing_image():
    """Mixed sizes (an array per image) over 3 threads come back in order; an image whose
    header reads but whose body does not is named by its key, whichever thread decoded it."""
    shapes = [(24, 32), (32, 24), (16, 16), (40, 8), (24, 32)]
    blobs = _jpegs(shapes, seed=4)
    images = CpuJpegDecoder(threads=3).decode(CompressedBatch.pack(blobs))
    assert [tuple(im.shape[:2]) for im in images] == shapes
    for im, b in zip(images, blobs, strict=True):
        assert np.array_equal(im.numpy(), simplejpeg.decode_jpeg(b, colorspace="RGB"))
    broken = [*blobs[:3], blobs[3][: len(blobs[3]) // 2], blobs[4]]  # header intact, body cut
    keys = ["a", "b", "c", "cut", "e"]
    with pytest.raises(DecodeError) as e:
        CpuJpegDecoder(threads=3).decode(CompressedBatch.pack(broken, keys=keys))
    assert e.value.key == "cut" and e.value.field == "jpg"
