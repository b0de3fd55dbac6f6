"""GPU-machine check: Loader(decode_on="gpu"|"auto") end to end on CUDA.

Collected only with FEEDLINE_GPU=1 (bench/gpu_check.py runs ``pytest tests/gpu``). Fails,
never skips, without CUDA. The workers keep JPEG fields compressed; the batch's images are
decoded on the device (nvJPEG through torchvision) and every field of a delivered batch,
the JPEG one included, is on the loader's device, whichever decoder ``auto`` settles on.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import simplejpeg
import torch

import feedline
from feedline.format import pack


def _dataset(tmp: Path, n: int = 48) -> str:
    src = tmp / "src"
    src.mkdir()
    y, x = np.mgrid[0:96, 0:128]
    for i in range(n):
        img = np.stack([(x + 5 * i) % 256, (y + 3 * i) % 256, (x + y) % 256], -1).astype(np.uint8)
        (src / f"s{i:04d}.jpg").write_bytes(simplejpeg.encode_jpeg(img, quality=90))
        (src / f"s{i:04d}.cls").write_text(str(i))
    pack([os.fspath(src)], os.fspath(tmp / "ds"))
    return os.fspath(tmp / "ds")


def test_decode_on_gpu_matches_the_cpu_decode_and_sends_only_compressed_bytes(tmp_path: Path) -> None:
    assert torch.cuda.is_available(), "this test needs a CUDA device (run it on the GPU box)"
    ds = _dataset(tmp_path)
    kw = {"batch_size": 8, "workers": 2, "shuffle": False, "decode_size": (48, 64)}
    with feedline.Loader(ds, device="cuda:0", decode_on="gpu", **kw) as gpu_loader:
        gpu = {int(c): img for b in gpu_loader for c, img in zip(b["cls"].tolist(), b["jpg"], strict=True)}
        info = gpu_loader.stats["decode_on"]
    with feedline.Loader(ds, device="cpu", decode_on="cpu", **kw) as cpu_loader:
        cpu = {int(c): img for b in cpu_loader for c, img in zip(b["cls"].tolist(), b["jpg"], strict=True)}
    assert gpu.keys() == cpu.keys() and len(gpu) == 48
    for k, img in gpu.items():
        assert img.device.type == "cuda" and img.shape == cpu[k].shape == (48, 64, 3)
        # nvJPEG and libjpeg-turbo (and the two resizes) differ by rounding only
        assert (img.cpu().int() - cpu[k].int()).abs().float().mean().item() < 4.0
    assert info["device"].startswith("cuda") and info["cpu_fallbacks"] == 0, info
    assert 0 < info["compressed_bytes"] < info["decoded_bytes"], info


def test_decode_on_auto_delivers_every_field_on_the_device(tmp_path: Path) -> None:
    """Whichever decoder auto picks (the CPU when decode is cheap against the step), the JPEG
    field arrives on the loader's device like the labels do."""
    assert torch.cuda.is_available(), "this test needs a CUDA device (run it on the GPU box)"
    ds = _dataset(tmp_path, n=32)
    with feedline.Loader(ds, batch_size=8, workers=2, device="cuda:0", decode_on="auto",
                         shuffle=False) as loader:
        batches = list(loader)
        info = loader.stats["decode_on"]
    assert len(batches) == 4, info
    for b in batches:
        assert b["cls"].device.type == "cuda"
        assert all(img.device.type == "cuda" and img.shape == (96, 128, 3) for img in b["jpg"]), info
    assert info["reason"] and info["batches"] == 4


def test_decode_ahead_on_cuda_gives_the_images_of_a_decode_in_next(tmp_path: Path) -> None:
    """With decode-ahead (the next batch decoded on its own stream while the consumer steps)
    the images equal those decoded inside next(); the consumer's stream reads them at once
    (it waits on the decode's event: no host sync), and every batch after the first of the
    pass was decoded ahead."""
    assert torch.cuda.is_available(), "this test needs a CUDA device (run it on the GPU box)"
    ds = _dataset(tmp_path, n=64)
    kw = {"batch_size": 8, "workers": 2, "shuffle": False, "decode_size": (48, 64),
          "device": "cuda:0", "decode_on": "gpu"}
    runs = {}
    for ahead in (True, False):
        with feedline.Loader(ds, **kw) as loader:
            stage = loader._device_decode
            assert stage is not None
            stage.decode_ahead = ahead
            # a reduction queued on the consumer's stream right away, kept on the device
            runs[ahead] = [(b["cls"].tolist(), b["jpg"].clone(), b["jpg"].float().sum()) for b in loader]
            info = loader.stats["decode_on"]
        assert info["decoded_ahead"] == (7 if ahead else 0), info
    for (c1, a, s1), (c2, b, s2) in zip(runs[True], runs[False], strict=True):
        assert c1 == c2 and torch.equal(a, b) and s1.item() == s2.item()
