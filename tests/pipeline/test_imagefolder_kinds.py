"""An ImageFolder as users have it, packed with ``--labels from-folder`` and loaded with
``vision.ImageTransform``: nested folders per class, upper-case extensions, grey, palette and
RGBA PNGs among RGB, progressive and grey JPEGs, a ``__MACOSX`` folder. Each batch must equal
what a torchvision-style Dataset (Pillow ``convert("RGB")``, the same transform) gives."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

import feedline
from feedline import vision
from feedline.format import SourceRules, pack

KINDS = [("JPG", "JPEG", "RGB", {}), ("png", "PNG", "L", {}), ("PNG", "PNG", "P", {}),
         ("jpeg", "JPEG", "RGB", {"progressive": True}), ("png", "PNG", "RGBA", {}),
         ("JPEG", "JPEG", "L", {})]
CLASSES = ("cat", "dog")


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("my photos") / "train"
    rng = np.random.default_rng(0)
    for c in CLASSES:
        for i, (ext, fmt, mode, kw) in enumerate(KINDS * 2):
            path = root / c / ("2023" if i % 2 else "2024/Jan") / f"IMG {i}.x.{ext}"
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray((rng.integers(0, 8, (20, 28, 3)) * 32).astype(np.uint8)).convert(mode).save(
                path, format=fmt, **kw)
    (root / "__MACOSX" / "cat").mkdir(parents=True)
    (root / "__MACOSX" / "cat" / "._IMG 0.x.JPG").write_bytes(b"\x00\x05\x16\x07" + bytes(60))
    return root


def _reference(root: Path, transform: Any) -> dict[str, tuple[np.ndarray, int]]:
    out = {}
    for label, c in enumerate(CLASSES):
        for dirpath, _, names in sorted(os.walk(root / c)):
            for name in sorted(names):
                path = Path(dirpath) / name
                key = os.path.relpath(path, root).rsplit(".", 1)[0]
                image = transform({"img": np.asarray(Image.open(path).convert("RGB"))})["img"]
                out[key] = (image, label)
    return out


@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_imagefolder_of_every_image_kind_matches_a_torchvision_style_dataset(
        tree: Path, tmp_path: Path, worker_type: str) -> None:
    pack([os.fspath(tree)], os.fspath(tmp_path / "ds"), rules=SourceRules(labels="from-folder"),
         warn=lambda line: None)
    ref = _reference(tree, vision.ImageTransform("img", size=16, train=False))
    loader = feedline.Loader(os.fspath(tmp_path / "ds"), batch_size=5, workers=2, worker_type=worker_type,
                             drop_last=False, transform=vision.ImageTransform(("jpg", "png"), size=16,
                                                                              train=False, out="image"))
    seen = set()
    for batch in loader:
        for row, key in enumerate(batch["__key__"]):
            image, label = ref[key]
            assert int(batch["cls"][row]) == label, key
            np.testing.assert_allclose(batch["image"][row].numpy(), image, atol=1e-6, err_msg=key)
            seen.add(key)
    loader.close()
    assert seen == set(ref)
