"""vision.ImageTransform given a JPEG field still compressed: the crop decoded at a reduced
DCT scale (decode.resized.decode_crop), and the Loader handing the field over so."""

from __future__ import annotations

import numpy as np
import pytest
import simplejpeg

import feedline
from feedline import vision
from feedline.decode.resized import CheckedJpeg
from feedline.errors import WorkerError


def _photo(h: int, w: int, seed: int = 0) -> bytes:
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    base = np.stack([255 * yy / h, 255 * xx / w, 128 + 60 * np.sin(xx / 37 + yy / 53)], axis=2)
    noisy = base + np.random.default_rng(seed).normal(0, 3, base.shape)
    return simplejpeg.encode_jpeg(np.clip(noisy, 0, 255).astype(np.uint8), quality=90, colorsubsampling="420")


def _both(tf: vision.ImageTransform, data: bytes, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The transform of the decoded array and of the bytes, with the same random draws."""
    vision._local.rng = np.random.default_rng(seed)
    decoded = tf({"jpg": simplejpeg.decode_jpeg(data), "cls": 3})
    vision._local.rng = np.random.default_rng(seed)
    encoded = tf({"jpg": data, "cls": 3})
    assert encoded["cls"] == 3 and set(encoded) == set(decoded)
    return decoded["jpg"].astype(int), encoded["jpg"].astype(int)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("train", [True, False])
def test_bytes_give_the_crop_of_the_decoded_image_within_a_grey_level_or_two(train: bool) -> None:
    small, big = _photo(60, 80, seed=1), _photo(480, 640, seed=2)  # big: decoded at 1/2 or 1/4
    for data, size in ((small, 32), (big, 40)):
        tf = vision.ImageTransform("jpg", size=size, train=train, mean=None)
        for seed in range(4):
            a, b = _both(tf, data, seed)
            assert a.shape == b.shape == (3, size, size)
            assert np.abs(a - b).mean() < 1.0 and np.abs(a - b).max() <= 12, (size, seed)
    # grey JPEGs come out as 3 equal channels, as the array path makes them
    grey = simplejpeg.encode_jpeg(np.full((40, 50, 1), 90, np.uint8), colorspace="GRAY")
    out = vision.ImageTransform("jpg", size=16, train=train, mean=None)({"jpg": grey})["jpg"]
    assert out.shape == (3, 16, 16) and abs(int(out.min()) - 90) <= 2 and abs(int(out.max()) - 90) <= 2


def test_bytes_that_are_no_jpeg_raise_a_decode_error() -> None:
    with pytest.raises(feedline.errors.DecodeError, match="JPEG header"):
        vision.ImageTransform("jpg", size=8)({"jpg": b"\x89PNG not a jpeg"})


def _packed(tmp_path, n: int, bad: int | None = None) -> str:
    from feedline.format import pack

    src = tmp_path / "src"
    src.mkdir()
    for i in range(n):
        (src / f"{i:03d}.jpg").write_bytes(b"not a jpeg" if i == bad else _photo(96, 128, seed=i))
        (src / f"{i:03d}.cls").write_text(str(i % 3))
    pack([src], tmp_path / "ds")
    return str(tmp_path / "ds")


class Seen:
    """An ImageTransform that records what type its image field arrived as."""

    def __init__(self) -> None:
        self.tf = vision.ImageTransform("jpg", size=24, train=False, mean=None)
        self.encoded_fields = self.tf.encoded_fields
        self.types: set[str] = set()

    def __call__(self, sample: dict) -> dict:
        self.types.add(type(sample["jpg"]).__name__)
        return self.tf(sample)


@pytest.mark.timeout(60)
def test_loader_hands_jpeg_fields_compressed_to_a_transform_that_decodes_them(tmp_path) -> None:
    ds = _packed(tmp_path, 12)
    seen, kept_off = Seen(), Seen()
    with feedline.Loader(ds, batch_size=4, workers=1, shuffle=False, transform=seen) as loader:
        got = list(loader)
    # decode= naming the field keeps it as the user's decoder gives it
    with feedline.Loader(ds, batch_size=4, workers=1, shuffle=False, transform=kept_off,
                         decode={"jpg": lambda b: simplejpeg.decode_jpeg(bytes(b))}) as loader:
        want = list(loader)
    assert seen.types == {CheckedJpeg.__name__} and kept_off.types == {"ndarray"}
    assert [b["cls"].tolist() for b in got] == [[i % 3 for i in range(k, k + 4)] for k in (0, 4, 8)]
    for g, w in zip(got, want, strict=True):
        assert tuple(g["jpg"].shape) == (4, 3, 24, 24)
        assert (g["jpg"].int() - w["jpg"].int()).abs().float().mean() < 1.0


@pytest.mark.timeout(60)
def test_a_damaged_jpeg_kept_compressed_is_a_bad_sample_named_by_key_and_field(tmp_path) -> None:
    ds = _packed(tmp_path, 6, bad=4)
    tf = vision.ImageTransform("jpg", size=16)
    with feedline.Loader(ds, batch_size=3, workers=1, shuffle=False, transform=tf) as loader, \
            pytest.raises(WorkerError, match=r"(?s)JPEG header.*field='jpg', key='004'"):
        list(loader)
    with feedline.Loader(ds, batch_size=3, workers=1, shuffle=False, transform=tf, on_error="skip",
                         drop_last=False) as loader:
        n = sum(len(b["cls"]) for b in loader)
        assert n == 6 and [s["key"] for s in loader.stats["skipped_samples"]] == ["004"]
