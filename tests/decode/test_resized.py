"""decode_resized: any image field to RGB of one size (what decode_size runs in the workers)."""

from __future__ import annotations

import io

import numpy as np
import pytest
import simplejpeg
import torch
from PIL import Image

from feedline.decode import Decoders, Limits
from feedline.decode.jpeg_batch import CompressedBatch, CpuJpegDecoder
from feedline.decode.resized import check_size, decode_resized, scale_for
from feedline.errors import DecodeError


def _photo(h: int, w: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = ((np.sin(x / 9.0) + np.cos(y / 13.0)) * 60 + 128)[..., None]
    return np.clip(base + rng.normal(0, 6, (h, w, 3)), 0, 255).astype(np.uint8)


def _save(img: Image.Image, fmt: str = "JPEG", **kw: object) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def _torch_reference(img: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """What the after-delivery decoders do: bilinear, antialiased, rounded."""
    import torch.nn.functional as F

    chw = torch.from_numpy(img).permute(2, 0, 1).unsqueeze(0).float()
    r = F.interpolate(chw, size=size, mode="bilinear", align_corners=False, antialias=True)
    return r.round_().clamp_(0, 255).to(torch.uint8)[0].permute(1, 2, 0).numpy()


@pytest.mark.parametrize(("shape", "size"), [((120, 160), (24, 32)), ((96, 64), (40, 40)),
                                             ((480, 640), (60, 80)), ((30, 40), (60, 80))])
def test_matches_the_after_delivery_resize(shape, size):
    data = simplejpeg.encode_jpeg(_photo(*shape), quality=92)
    got = decode_resized(data, Limits(), size)
    full = simplejpeg.decode_jpeg(data, colorspace="RGB")
    ref = _torch_reference(full, size)
    after = CpuJpegDecoder().decode(CompressedBatch.pack([data]), size=size)[0].numpy()
    assert got.shape == ref.shape == (*size, 3) and got.dtype == np.uint8
    np.testing.assert_array_equal(after, ref)
    diff = np.abs(got.astype(int) - ref)
    # a reduced-scale JPEG decode (4x here for 480x640 -> 60x80) and Pillow's filter:
    # within a few grey levels of decoding every pixel, under one on average
    assert diff.max() <= 4 and diff.mean() < 1.0, (diff.max(), diff.mean())


def test_reduced_scale_keeps_twice_the_target():
    assert scale_for(3000, 4000, (224, 224)) == 4  # 750x1000 >= 2 x 224
    assert scale_for(375, 500, (224, 224)) == 1
    assert scale_for(4000, 6000, (32, 32)) == 8
    assert scale_for(100, 6000, (32, 32)) == 1  # the short side decides


def test_writes_into_a_slot_row_and_returns_it():
    rows = np.zeros((2, 24, 32, 3), np.uint8)
    data = simplejpeg.encode_jpeg(_photo(60, 80))
    row = rows[1]
    got = decode_resized(data, Limits(), (24, 32), out=row)
    assert got is row and rows[1].any() and not rows[0].any()


def _variants() -> dict[str, bytes]:
    rgb = Image.fromarray(_photo(48, 64))
    rgba = rgb.convert("RGBA")
    rgba.putalpha(100)
    grey16 = Image.fromarray(_photo(48, 64)[..., 0].astype(np.uint16) * 257)
    return {
        "grey.jpg": _save(rgb.convert("L")),
        "cmyk.jpg": _save(rgb.convert("CMYK")),
        "progressive.jpg": _save(rgb, progressive=True),
        "palette.png": _save(rgba.convert("P"), "PNG", transparency=3),
        "alpha.png": _save(rgba, "PNG"),
        "grey16.png": _save(grey16, "PNG"),
        "bitmap.bmp": _save(rgb, "BMP"),
        "png_named.jpg": _save(rgb, "PNG"),  # a PNG saved with a .jpg name
    }


@pytest.mark.parametrize("name", sorted(_variants()))
def test_every_kind_of_image_becomes_rgb_of_the_size(name):
    data = _variants()[name]
    field = name.rsplit(".", 1)[1]  # the sample's image: the bare extension names it
    got = Decoders(size=(20, 30)).decode_field(field, data, key="k")
    assert got.shape == (20, 30, 3) and got.dtype == np.uint8
    # the colours survive: against Pillow's own RGB conversion, resized the same way
    with Image.open(io.BytesIO(data)) as img:
        ref = np.asarray(img.convert("RGBA" if "transparency" in img.info else img.mode)
                         .convert("RGB").resize((30, 20), Image.Resampling.BILINEAR)
                         if not img.mode.startswith("I") else
                         Image.fromarray((np.asarray(img) >> 8).astype(np.uint8)).convert("RGB")
                         .resize((30, 20), Image.Resampling.BILINEAR))
    assert np.abs(got.astype(int) - ref).mean() < 3, name


@pytest.mark.parametrize(("name", "data", "match"), [
    ("empty.jpg", b"", "not a JPEG"),
    ("text.jpg", b"a text file renamed\n" * 4, "not a JPEG"),
    ("text.png", b"a text file renamed\n" * 4, "not an image"),
    ("cut.png", _save(Image.fromarray(_photo(48, 64)), "PNG")[:300], "unreadable"),
])
def test_garbage_and_damage_are_decode_errors_with_the_place(name, data, match):
    field = name.rsplit(".", 1)[1]
    with pytest.raises(DecodeError, match=match) as e:
        Decoders(size=(16, 16)).decode_field(field, data, key="cats/x")
    assert e.value.place["key"] == "cats/x" and e.value.place["field"] == field


def test_a_truncated_jpeg_is_an_error_not_grey_pixels():
    data = simplejpeg.encode_jpeg(_photo(96, 128))
    with pytest.raises(DecodeError, match="JPEG data unreadable"):
        decode_resized(data[: len(data) // 2], Limits(), (16, 16))


def test_limits_are_checked_before_decoding():
    data = simplejpeg.encode_jpeg(_photo(64, 64))
    with pytest.raises(DecodeError, match="max_pixels"):
        decode_resized(data, Limits(max_pixels=1000), (8, 8))
    png = _save(Image.fromarray(_photo(64, 64)), "PNG")
    with pytest.raises(DecodeError, match="max_pixels"):
        decode_resized(png, Limits(max_pixels=1000), (8, 8), jpeg=False)


def test_exif_orientation_is_not_applied_as_in_torchvision():
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 degrees to view"
    data = _save(Image.fromarray(_photo(40, 80)), exif=exif.tobytes())
    stored = simplejpeg.decode_jpeg(data, colorspace="RGB")
    got = decode_resized(data, Limits(), (40, 80))
    assert stored.shape == (40, 80, 3)
    assert np.abs(got.astype(int) - stored).mean() < 1  # as stored: landscape, not rotated


def test_size_is_checked_and_decoders_pickle_with_it():
    import pickle

    for bad in ((0, 4), (4,), "224", (True, 3), (2.0, 3)):
        with pytest.raises(ValueError, match="decode_size"):
            check_size(bad)
    dec = pickle.loads(pickle.dumps(Decoders(size=(8, 9))))
    assert dec.size == (8, 9) and dec.resizes("png") and dec.resizes("cam0.JPG")
    assert not dec.resizes("cls") and not dec.resizes("seg.png")  # a mask keeps its ids
    assert not Decoders({"jpg": bytes}, size=(8, 9)).resizes("jpg")


def test_png_palette_comes_out_as_indices_without_decode_size():
    # a palette PNG is how segmentation masks are stored: without decode_size its pixels are
    # the palette indices (class ids), as np.asarray(Image.open(f)) gives; with it, colours
    rgb = _photo(16, 16)
    pal = Image.fromarray(rgb).convert("P")
    got = Decoders().decode_field("png", _save(pal, "PNG"))
    assert got.shape == (16, 16)
    np.testing.assert_array_equal(got, np.asarray(pal))
    resized = Decoders(size=(16, 16)).decode_field("png", _save(pal, "PNG"))
    np.testing.assert_array_equal(resized, np.asarray(pal.convert("RGB")))


def test_hostile_bytes_give_the_size_or_a_decode_error():
    """Bit flips, cuts and huge declared sizes over every format decode_size reads: the
    result is an (h, w, 3) array or a DecodeError, quickly; nothing else escapes."""
    import time
    import warnings

    img = Image.fromarray(_photo(24, 32))
    seeds = {"jpg": _save(img), "jpeg": _save(img, progressive=True),
             "png": _save(img, "PNG"), "PNG": _save(img.convert("P"), "PNG", bits=4),
             "bmp": _save(img, "BMP"), "webp": _save(img, "WEBP"),
             "gif": _save(img.convert("P"), "GIF"), "tiff": _save(img, "TIFF")}
    dec = Decoders(size=(8, 8), limits=Limits(max_pixels=1 << 20))
    rng = np.random.default_rng(0)
    worst = 0.0
    for trial in range(800):
        name = list(seeds)[trial % len(seeds)]
        data = bytearray(seeds[name])
        if trial % 3 == 0:
            for _ in range(int(rng.integers(1, 8))):
                data[int(rng.integers(0, len(data)))] = int(rng.integers(0, 256))
        elif trial % 3 == 1:
            data = data[: int(rng.integers(0, len(data)))]
        else:
            at = int(rng.integers(0, len(data)))
            data[at: at + 4] = b"\xff\xff\xff\x7f"
        t0 = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # Pillow warns about corrupt TIFF/EXIF tags
                out = dec.decode_field(name, bytes(data), key="k")
            assert out.shape == (8, 8, 3) and out.dtype == np.uint8
        except DecodeError as e:
            assert e.place["field"] == name
        worst = max(worst, time.perf_counter() - t0)
    assert worst < 1.0
