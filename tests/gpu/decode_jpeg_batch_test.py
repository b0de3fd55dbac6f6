"""GPU-machine check: the device JPEG decoders agree with the CPU path of the same interface.

Collected only with FEEDLINE_GPU=1 (bench/gpu_check.py). Fails, never skips, without CUDA.
"""

from __future__ import annotations

import numpy as np
import simplejpeg
import torch

from feedline.decode.jpeg_batch import (
    CompressedBatch,
    CpuJpegDecoder,
    TorchvisionJpegDecoder,
    choose_jpeg_decoder,
    gpu_decoders_available,
)


def _jpegs(n: int, h: int, w: int) -> list[bytes]:
    y, x = np.mgrid[0:h, 0:w]
    out = []
    for i in range(n):
        img = np.stack([(x + 7 * i) % 256, (y + 3 * i) % 256, (x + y) % 256], axis=-1).astype(np.uint8)
        out.append(simplejpeg.encode_jpeg(img, quality=90))
    return out


def test_torchvision_gpu_decode_matches_cpu() -> None:
    assert torch.cuda.is_available(), "this test needs a CUDA device (run it on the GPU box)"
    blobs = _jpegs(8, 120, 160) + _jpegs(2, 160, 120)
    pinned = torch.empty(sum(map(len, blobs)), dtype=torch.uint8).pin_memory()
    batch = CompressedBatch.pack(blobs, out=pinned.numpy())
    gpu = TorchvisionJpegDecoder("cuda:0").decode(batch)
    cpu = CpuJpegDecoder().decode(batch)
    assert len(gpu) == len(cpu) == 10
    for g, c in zip(gpu, cpu, strict=True):
        assert g.device.type == "cuda" and g.shape == c.shape
        # nvJPEG and libjpeg-turbo differ in IDCT/upsampling rounding only
        assert (g.cpu().int() - c.int()).abs().float().mean().item() < 3.0
    dense = TorchvisionJpegDecoder("cuda:0").decode(batch, size=(120, 160))
    assert tuple(dense.shape) == (10, 120, 160, 3) and dense.device.type == "cuda"


def test_auto_picks_the_gpu_only_when_cpu_decode_would_bind() -> None:
    assert torch.cuda.is_available()
    assert gpu_decoders_available(), "torchvision or nvimgcodec expected on the GPU image"
    dec, why = choose_jpeg_decoder("auto", "cuda:0", cpu_decode_s=0.4, workers=4, step_s=0.05)
    assert dec.device.startswith("cuda") and "GPU" in why
    dec, why = choose_jpeg_decoder("auto", "cuda:0", cpu_decode_s=0.04, workers=4, step_s=0.05)
    assert dec.device == "cpu" and "within" in why


def test_a_damaged_jpeg_after_delivery_falls_back_or_names_its_key() -> None:
    """DeviceDecode with the real GPU decoder: a batch with a JPEG cut in its scan data is
    decoded image by image; the cut one is decoded on the CPU if libjpeg-turbo accepts it,
    else a DecodeError names its key. Every other image comes back decoded on the device."""
    from feedline.errors import DecodeError
    from feedline.pipeline.device_decode import DeviceDecode

    assert torch.cuda.is_available()
    blobs = _jpegs(6, 120, 160)
    sos = blobs[3].index(b"\xff\xda")
    blobs[3] = blobs[3][: sos + (len(blobs[3]) - sos) // 2]
    stage = DeviceDecode(["jpg"], TorchvisionJpegDecoder("cuda:0"), "test", device="cuda:0",
                         workers=2, size=(64, 64))
    keys = [f"k{i}" for i in range(6)]
    try:
        out = stage({"jpg": list(blobs), "__key__": keys})
    except DecodeError as e:
        assert e.place["key"] == "k3" and "CPU fallback" in str(e)
        return
    # nvJPEG may tolerate the cut (grey rows) or reject it (then the CPU decoded it)
    assert tuple(out["jpg"].shape) == (6, 64, 64, 3) and out["jpg"].device.type == "cuda"
    assert stage.report()["cpu_fallback_keys"] in ([], ["k3"])
