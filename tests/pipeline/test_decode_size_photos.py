"""The newcomer's path on a folder of phone photos: ``feedline pack --labels from-folder``
(the CLI), then ``Loader(decode_size=(224, 224), on_error="skip")`` with a
torchvision-style transform, two epochs, a JSON state and a resume.

The tree is laid out the way users have theirs, not the way feedline's fixtures are:
portrait and landscape, EXIF orientation tags, grayscale, CMYK, progressive, a PNG with a
palette and transparency, an RGBA PNG, upper-case extensions, dots in names, a nested
folder, and the damage a camera roll collects (a 0-byte file, a truncated file, a text
file renamed .jpg).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

import feedline
from feedline import vision

SRC = Path(__file__).resolve().parents[2] / "src"
BAD = {"cats/empty", "cats/truncated", "dogs/notes"}


def _photo(h: int, w: int, seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = ((np.sin(x / (5 + seed % 7)) + np.cos(y / 9.0)) * 60 + 128)[..., None]
    return Image.fromarray(np.clip(base + rng.normal(0, 6, (h, w, 3)), 0, 255).astype(np.uint8))


def _save(path: Path, img: Image.Image, fmt: str = "JPEG", **kw: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path, fmt, **kw)


def phone_photos(root: Path, huge: bool = False) -> Path:
    """An ImageFolder tree of 22 files in 3 classes (3 of them damaged)."""
    k = 0
    for cls in ("cats", "dogs", "Birds"):
        for i in range(4):
            h, w = (48, 64) if i % 2 else (64, 48)
            _save(root / cls / f"IMG_2023.01.0{i}_{k:04d}.jpg", _photo(h, w, k), quality=85)
            k += 1
    exif = Image.Exif()
    exif[0x0112] = 6  # stored landscape, "rotate 90 to view"
    _save(root / "cats" / "rotated.JPG", _photo(48, 64, 50), exif=exif.tobytes())
    _save(root / "dogs" / "gray.jpeg", _photo(50, 40, 51).convert("L"))
    _save(root / "dogs" / "cmyk.jpg", _photo(40, 50, 52).convert("CMYK"))
    _save(root / "Birds" / "prog.JPEG", _photo(45, 60, 53), progressive=True)
    rgba = _photo(32, 32, 54).convert("RGBA")
    rgba.putalpha(128)
    _save(root / "Birds" / "palette.png", rgba.convert("P"), "PNG", transparency=0)
    _save(root / "Birds" / "alpha.PNG", rgba, "PNG")
    _save(root / "dogs" / "puppies" / "nested.jpg", _photo(48, 64, 56))
    (root / "cats" / "empty.jpg").write_bytes(b"")
    whole = io.BytesIO()
    _photo(48, 64, 55).save(whole, "JPEG")
    (root / "cats" / "truncated.jpg").write_bytes(whole.getvalue()[: len(whole.getvalue()) // 2])
    (root / "dogs" / "notes.jpg").write_text("a text file, renamed\n")
    if huge:
        _save(root / "dogs" / "huge.jpg", _photo(4000, 6000, 57), quality=90)
    return root


def _pack(tmp: Path, huge: bool = False) -> str:
    train = phone_photos(tmp / "train", huge)
    out = tmp / "data"
    env = {**os.environ, "PYTHONPATH": os.fspath(SRC)}
    res = subprocess.run([sys.executable, "-m", "feedline", "pack", os.fspath(train), "--out",
                          os.fspath(out), "--labels", "from-folder"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    return os.fspath(out)


def _to_model(sample: dict[str, Any]) -> dict[str, Any]:
    """A torchvision-style transform: whichever image field the sample has, flipped at
    random, normalised to float32 CHW."""
    img = sample["jpg"] if "jpg" in sample else sample["png"]
    assert isinstance(img, np.ndarray) and img.shape == (224, 224, 3) and img.dtype == np.uint8
    return {"image": vision.normalize(vision.random_hflip(img)), "label": sample["cls"]}


@pytest.mark.timeout(240)
@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_phone_photos_two_epochs_then_resume(tmp_path, worker_type):
    ds = _pack(tmp_path)
    classes = json.loads((Path(ds) / "manifest.json").read_text())
    kw: dict[str, Any] = {"batch_size": 4, "workers": 2, "worker_type": worker_type, "seed": 0,
                          "decode_size": (224, 224), "on_error": "skip", "transform": _to_model}
    epochs: list[list[list[str]]] = []
    with feedline.Loader(ds, **kw) as loader:
        for epoch in range(2):
            loader.set_epoch(epoch)
            keys = []
            for b in loader:
                assert tuple(b["image"].shape) == (4, 3, 224, 224)
                assert b["label"].tolist() == [["Birds", "cats", "dogs"].index(k.split("/")[0])
                                                for k in b["__key__"]]
                keys.append(list(b["__key__"]))
            epochs.append(keys)
        stats = loader.stats
        state = json.dumps(loader.state_dict())
    assert "Birds" in json.dumps(classes)
    # 22 samples, drop_last: five full batches an epoch; a skipped sample is replaced by
    # the next ones in the epoch's order (feedline.pipeline.sampler), so every batch is full
    assert stats["batches"] == 2 * 5
    listed = {s["key"] for s in stats["skipped_samples"]}
    assert listed <= BAD and stats["skipped"] == len(stats["skipped_samples"]) >= 3
    for keys in epochs:
        flat = [k for b in keys for k in b]
        assert len(flat) == 20 and not set(flat) & BAD
    assert {"cats/rotated", "dogs/gray", "dogs/cmyk", "Birds/prog", "Birds/palette",
            "Birds/alpha", "dogs/puppies/nested"} <= {k for e in epochs for b in e for k in b}
    # the state of the end of epoch 1, then a new loader from the middle of epoch 1
    assert json.loads(state)["epoch"] == 1
    with feedline.Loader(ds, **kw) as first:
        first.set_epoch(1)
        it = iter(first)
        next(it), next(it)
        saved = json.loads(json.dumps(first.state_dict()))
    with feedline.Loader(ds, **kw) as again:
        again.load_state_dict(saved)
        again.set_epoch(1)
        assert [list(b["__key__"]) for b in again] == epochs[1][2:]


def test_mixed_formats_without_a_transform_give_each_field_where_present(tmp_path):
    """No transform to merge jpg and png: each is a field, ``None`` where a photo has the
    other format; the first such batch warns naming the field."""
    ds = _pack(tmp_path)
    with feedline.Loader(ds, batch_size=4, workers=1, shuffle=False, drop_last=False,
                         decode_size=(32, 32), on_error="skip") as loader, \
            pytest.warns(RuntimeWarning, match="None where a sample lacks it"):
        batches = list(loader)
    rows = [(key, b["jpg"][i], b["png"][i]) for b in batches for i, key in enumerate(b["__key__"])]
    assert {key for key, _, _ in rows} >= {"Birds/palette", "Birds/alpha", "dogs/gray"}
    for key, jpg, png in rows:
        image = png if key in ("Birds/palette", "Birds/alpha") else jpg
        other = jpg if image is png else png
        assert other is None and tuple(image.shape) == (32, 32, 3), key


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_24_megapixel_photo_decodes_at_reduced_scale(tmp_path):
    ds = _pack(tmp_path, huge=True)
    with feedline.Loader(ds, batch_size=2, workers=2, seed=0, decode_size=(224, 224),
                         drop_last=False, on_error="skip", transform=_to_model) as loader:
        t0 = time.perf_counter()
        keys = {k for b in loader for k in b["__key__"]}
        took = time.perf_counter() - t0
    assert "dogs/huge" in keys and not keys & BAD
    assert took < 60
