"""Codecs: round trips against the reference encoders, bounds, bad input."""

from __future__ import annotations

import io
import json
import sys
import threading
from typing import Any

import numpy as np
import pytest
import simplejpeg
from PIL import Image

from feedline.decode import Decoders, Limits, decode_jpeg, decode_npy, decode_raw
from feedline.errors import DecodeError


def _npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


@pytest.mark.parametrize(
    "arr",
    [np.arange(12, dtype=np.float32).reshape(3, 4), np.asfortranarray(np.ones((2, 5), "<i4")),
     np.array(7, dtype=np.uint8), np.zeros((0, 3), np.float64)],
)
def test_npy_matches_numpy_and_is_a_view(arr: np.ndarray) -> None:
    data = _npy(arr)
    out = decode_npy(memoryview(data), Limits())
    np.testing.assert_array_equal(out, arr)
    assert out.dtype == arr.dtype
    if arr.size:
        assert not out.flags.owndata  # zero-copy view into the buffer


@pytest.mark.parametrize("arr", [
    np.arange(12, dtype=">f4").reshape(3, 4), np.asfortranarray(np.arange(10, dtype=">i8").reshape(2, 5)),
    np.array(2.5, dtype=">f8"), np.zeros(3, dtype=[("a", ">f4"), ("b", ">i2", (2,))]),
])
def test_npy_in_the_other_byte_order_comes_back_native(arr: np.ndarray) -> None:
    """np.load keeps ``>f4``, which torch can neither wrap nor stack: the codec gives the
    same values in native order."""
    out = decode_npy(_npy(arr), Limits())
    assert out.dtype == arr.dtype.newbyteorder("=") and out.dtype.isnative
    assert out.shape == arr.shape
    np.testing.assert_array_equal(out, arr)


def test_npy_refuses_pickled_objects_and_bad_headers() -> None:
    with pytest.raises(DecodeError, match="pickle"):
        decode_npy(_npy(np.array([{"a": 1}], dtype=object)), Limits())
    with pytest.raises(DecodeError, match="magic"):
        decode_npy(b"not numpy at all", Limits())
    good = _npy(np.arange(10, dtype=np.int64))
    with pytest.raises(DecodeError, match="body"):
        decode_npy(good[:-3], Limits())
    with pytest.raises(DecodeError, match="past the end"):
        decode_npy(good[:12], Limits())


def test_raw_dtype_fields() -> None:
    raw = np.arange(6, dtype="<f4").tobytes()
    np.testing.assert_array_equal(decode_raw(raw, "f32", Limits()), np.arange(6))
    with pytest.raises(DecodeError, match="multiple"):
        decode_raw(raw[:-1], "f32", Limits())


def test_decoders_by_extension() -> None:
    rng = np.random.default_rng(0)
    img = rng.integers(0, 255, (16, 24, 3), dtype=np.uint8)
    png = io.BytesIO()
    Image.fromarray(img).save(png, format="PNG")
    sample = {
        "__key__": "k0",
        "jpg": memoryview(simplejpeg.encode_jpeg(img, quality=95)),
        "seg.png": memoryview(png.getvalue()),
        "json": b'{"a": [1, 2]}',
        "txt": "héllo".encode(),
        "cls": b" 3\n",
        "u8": bytes([1, 2, 3]),
        "bin": b"\x00\x01",
    }
    out = Decoders().decode_sample(sample, key="k0")
    assert out["__key__"] == "k0"
    assert out["jpg"].shape == (16, 24, 3) and out["jpg"].dtype == np.uint8
    assert np.abs(out["jpg"].astype(int) - img).mean() < 8  # lossy but close
    np.testing.assert_array_equal(out["seg.png"], img)
    assert out["json"] == {"a": [1, 2]} and out["txt"] == "héllo" and out["cls"] == 3
    assert out["u8"].tolist() == [1, 2, 3] and out["bin"] == b"\x00\x01"


def test_overrides_by_field_then_extension() -> None:
    dec = Decoders({"cls": lambda b: -1, "special.cls": lambda b: json.loads(bytes(b)),
                    "jpg": None})
    assert dec.decode_field("x.cls", b"5") == -1
    assert dec.decode_field("special.cls", b"[1]") == [1]
    assert dec.decode_field("jpg", b"\xff\xd8") == b"\xff\xd8"
    with pytest.raises(TypeError, match="decode"):
        Decoders({"jpg": 3})  # type: ignore[dict-item]


def test_size_bounds_raise_decode_error_with_place() -> None:
    img = np.zeros((40, 50, 3), np.uint8)
    dec = Decoders(limits=Limits(max_bytes=64 * 1024, max_pixels=1000))
    with pytest.raises(DecodeError, match="max_pixels") as info:
        dec.decode_field("jpg", simplejpeg.encode_jpeg(img), key="s1")
    assert info.value.field == "jpg" and info.value.key == "s1"
    png = io.BytesIO()
    Image.fromarray(img).save(png, format="PNG")
    with pytest.raises(DecodeError, match="max_pixels"):
        dec.decode_field("png", png.getvalue())
    with pytest.raises(DecodeError, match="max_bytes") as info:
        dec.decode_field("bin", bytes(65 * 1024), key="s2")
    assert info.value.key == "s2"
    with pytest.raises(ValueError, match="max_bytes"):
        Limits(max_bytes=0)


@pytest.mark.parametrize("field,data", [("jpg", b"\xff\xd8garbage"), ("png", b"\x89PNGxx"),
                                        ("json", b"{"), ("txt", b"\xff\xfe\xfa"), ("cls", b"x")])
def test_corrupt_input_is_a_decode_error(field: str, data: bytes) -> None:
    with pytest.raises(DecodeError) as info:
        Decoders().decode_field(field, data, key="bad")
    assert info.value.key == "bad"


def test_decoders_pickle() -> None:
    import pickle

    dec = Decoders({"cls": None}, Limits(max_bytes=10))
    dec.for_field("jpg")
    back = pickle.loads(pickle.dumps(dec))
    assert back.limits.max_bytes == 10 and back.decode_field("cls", b"1") == b"1"


def test_jpeg_decodes_into_a_matching_array_else_fresh() -> None:
    img = np.random.default_rng(3).integers(0, 255, (20, 28, 3), dtype=np.uint8)
    data = simplejpeg.encode_jpeg(img, quality=90)
    want = simplejpeg.decode_jpeg(data, colorspace="RGB")
    dec = Decoders()
    slot = np.zeros((2, 20, 28, 3), np.uint8)
    got = dec.decode_field("jpg", memoryview(data), out=slot[1])
    assert got is not None and np.shares_memory(got, slot[1])
    assert slot[1].tobytes() == want.tobytes() and not slot[0].any()
    other = np.zeros((20, 30, 3), np.uint8)  # wrong width: fresh array, out untouched
    fresh = dec.decode_field("jpg", data, out=other)
    assert not np.shares_memory(fresh, other) and not other.any()
    assert fresh.tobytes() == want.tobytes()
    assert dec.decodes_into("x.jpeg") and not dec.decodes_into("png")
    mine = Decoders({"jpg": lambda b: np.zeros((20, 28, 3), np.uint8)})  # override wins
    assert not mine.decodes_into("jpg")
    assert not mine.decode_field("jpg", data, out=slot[0]).any()
    sample = dec.decode_sample({"__key__": "k", "jpg": data}, into={"jpg": slot[0]})
    assert np.shares_memory(sample["jpg"], slot[0]) and slot[0].tobytes() == want.tobytes()


@pytest.mark.parametrize("wrap", [bytes, lambda d: memoryview(bytearray(b"x" + d))[1:]])
def test_jpeg_decode_releases_the_gil(wrap: Any) -> None:
    # With a 30 s switch interval a thread holding the GIL keeps it: if decoding held it,
    # the decoder would finish all 40 images before this thread's pure-Python loop ran.
    img = np.random.default_rng(0).integers(0, 255, (300, 400, 3), dtype=np.uint8)
    data = wrap(simplejpeg.encode_jpeg(img, quality=90))
    done = [0]

    def decode() -> None:
        for _ in range(40):
            decode_jpeg(data, Limits())
            done[0] += 1

    old = sys.getswitchinterval()
    sys.setswitchinterval(30.0)
    try:
        worker = threading.Thread(target=decode)
        worker.start()
        worker.join(0.01)  # lets the decoder start (join releases the GIL)
        total = 0
        for i in range(2_000_000):
            total += i
        finished_meanwhile = done[0]
        worker.join()
    finally:
        sys.setswitchinterval(old)
    assert finished_meanwhile < 40 and done[0] == 40


@pytest.mark.parametrize(("field", "fmt", "mode"), [
    ("webp", "WEBP", "RGB"), ("bmp", "BMP", "RGB"), ("tiff", "TIFF", "I;16"),
    ("photo.tif", "TIFF", "RGBA"), ("gif", "GIF", "P"), ("ppm", "PPM", "RGB"), ("scan.pgm", "PPM", "L"),
])
def test_every_pillow_image_format_decodes_as_pillow_reads_it(field: str, fmt: str, mode: str) -> None:
    """An ImageFolder of phone exports and scans: each format decodes to the pixels
    ``np.asarray(Image.open(f))`` gives, not to bytes."""
    rng = np.random.default_rng(3)
    if mode == "I;16":
        img = Image.fromarray(rng.integers(0, 65535, (9, 13), dtype=np.uint16))
    else:
        img = Image.fromarray(rng.integers(0, 255, (9, 13, 4), dtype=np.uint8), "RGBA")
        img = img.convert(mode)
    buf = io.BytesIO()
    img.save(buf, format=fmt, **({"lossless": True} if fmt == "WEBP" else {}))
    with Image.open(io.BytesIO(buf.getvalue())) as ref:
        want = np.asarray(ref)
    got = Decoders().decode_field(field, memoryview(buf.getvalue()), key="k")
    assert isinstance(got, np.ndarray) and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("field", ["jpg", "png", "npy", "json", "webp"])
def test_an_empty_field_says_it_is_empty(field: str) -> None:
    with pytest.raises(DecodeError, match=r"empty \(0 bytes\)") as info:
        Decoders().decode_field(field, b"", key="cats/IMG_1")
    assert info.value.place["key"] == "cats/IMG_1" and info.value.place["field"] == field
    assert "--exclude" in str(info.value)


def _palette_png(transparent: bool = False) -> tuple[bytes, Image.Image]:
    rgb = Image.fromarray((np.random.default_rng(5).integers(0, 8, (12, 16, 3)) * 32).astype(np.uint8))
    img = rgb.convert("P")
    buf = io.BytesIO()
    img.save(buf, format="PNG", **({"transparency": 0} if transparent else {}))
    return buf.getvalue(), Image.open(io.BytesIO(buf.getvalue()))


def test_a_palette_image_that_is_the_samples_only_image_decodes_to_its_colours() -> None:
    """An ImageFolder of photos holds the odd palette PNG (a GIF saved as PNG): as the
    sample's only image it is a photo, and torchvision's ``convert("RGB")`` gives colours.
    Beside a JPEG, or named ``seg.png``, it is a mask: its indices (class ids)."""
    data, img = _palette_png()
    colours, indices = np.asarray(img.convert("RGB")), np.asarray(img)
    assert indices.ndim == 2 and not np.array_equal(colours[..., 0], indices)
    dec = Decoders()
    jpg = simplejpeg.encode_jpeg(np.zeros((4, 4, 3), np.uint8))
    np.testing.assert_array_equal(dec.decode_sample({"png": data, "cls": b"3"})["png"], colours)
    np.testing.assert_array_equal(dec.decode_sample({"gif": data})["gif"], colours)
    np.testing.assert_array_equal(dec.decode_sample({"jpg": jpg, "png": data})["png"], indices)
    np.testing.assert_array_equal(dec.decode_sample({"seg.png": data})["seg.png"], indices)
    np.testing.assert_array_equal(dec.decode_field("png", data), indices)  # one field alone: as stored
    np.testing.assert_array_equal(Decoders({"png": lambda b: "mine"}).decode_sample({"png": data})["png"], "mine")
    tdata, timg = _palette_png(transparent=True)
    np.testing.assert_array_equal(dec.decode_sample({"png": tdata})["png"], np.asarray(timg.convert("RGBA")))


@pytest.mark.parametrize("size", [None, (16, 16)])
def test_bytes_that_are_no_image_are_shown_not_pillows_bytesio(size: tuple[int, int] | None) -> None:
    """A text file saved as ``.png`` in an ImageFolder: the error says what the bytes are
    (Pillow's own message names only ``<_io.BytesIO object at 0x7f...>``) and gives one fix."""
    with pytest.raises(DecodeError) as e:
        Decoders(size=size).decode_field("png", b"hello\nworld\n", key="b/notimage")
    text = str(e.value)
    assert "12 bytes, starting b'hello\\nworld\\n'" in text and "BytesIO" not in text
    assert e.value.fix is not None and "on_error" not in e.value.fix  # the loader adds that once


@pytest.mark.timeout(60)
def test_npy_headers_decode_in_threads_side_by_side() -> None:
    """Thread workers decode .npy fields at once; on CPython 3.11 two threads in ast.literal_eval
    can fail with 'AST constructor recursion depth mismatch' (python/cpython#106905), so the
    header parse is serialised: every array of many distinct headers decodes right."""
    import threading

    def payload(rows: int) -> bytes:
        buf = io.BytesIO()
        np.save(buf, np.full((rows, 3), rows, np.float32))
        return buf.getvalue()

    failures: list[BaseException] = []

    def work(first: int) -> None:
        try:
            for rows in range(first, first + 400):
                arr = decode_npy(payload(rows), Limits())
                assert arr.shape == (rows, 3) and float(arr[0, 0]) == rows
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(k * 1000 + 1,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
