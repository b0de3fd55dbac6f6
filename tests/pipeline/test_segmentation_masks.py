"""Segmentation data as it is stored: a JPEG frame + a PNG mask per sample, masks written by
Pillow as palette images (VOC style, 255 = ignore) or single-channel grey, mixed in one
dataset. The loader must hand back the class ids, ``np.asarray(Image.open(mask))``, as one
dense ``(N, H, W)`` uint8 field, in threads and processes, over two shuffled epochs."""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import pytest
import simplejpeg
from PIL import Image

import feedline
from feedline.format import pack

N, H, W = 21, 24, 40
VOC_PALETTE = [c for i in range(256) for c in ((i * 37) % 256, (i * 91) % 256, (i * 53) % 256)]


def _mask(i: int) -> np.ndarray:
    rng = np.random.default_rng(i)
    ids = rng.integers(0, 21, (H, W), dtype=np.uint8)
    ids[0, :] = 255  # the ignore index on the border, as VOC masks have
    return ids


def _png(i: int) -> bytes:
    img = Image.fromarray(_mask(i), mode="L")
    if i % 3:  # two thirds palette masks, one third grey
        img = img.convert("P")
        img.putpalette(VOC_PALETTE)
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def seg_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("seg")
    src = root / "VOC.2012" / "train"
    src.mkdir(parents=True)
    for i in range(N):
        frame = np.random.default_rng(100 + i).integers(0, 255, (H, W, 3), dtype=np.uint8)
        (src / f"{i:06d}.jpg").write_bytes(simplejpeg.encode_jpeg(frame))
        (src / f"{i:06d}.seg.png").write_bytes(_png(i))
    pack([os.fspath(root / "VOC.2012")], os.fspath(root / "ds"), shard_size=16 << 10)
    return root / "ds"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_palette_and_grey_masks_batch_as_class_ids(seg_dataset: Path, worker_type: str) -> None:
    seen = []
    with feedline.Loader(os.fspath(seg_dataset), batch_size=4, workers=2, worker_type=worker_type,
                         shuffle=True, drop_last=False) as loader:
        for epoch in range(2):
            loader.set_epoch(epoch)
            for batch in loader:
                masks = batch["seg.png"]
                assert masks.shape[1:] == (H, W) and str(masks.dtype) == "torch.uint8"
                assert batch["jpg"].shape[1:] == (H, W, 3)
                for key, got in zip(batch["__key__"], masks, strict=True):
                    i = int(key.rsplit("/", 1)[-1])
                    want = np.asarray(Image.open(io.BytesIO(_png(i))))
                    assert np.array_equal(got.numpy(), want) and np.array_equal(want, _mask(i))
                    seen.append(i)
    assert sorted(seen) == sorted(list(range(N)) * 2)
