"""``Decoders.rows_codec``: a batch's column of images decoded into slot rows."""

from __future__ import annotations

import io

import numpy as np
import pytest
import simplejpeg
from PIL import Image

from feedline.decode import Decoders, Limits, decode_jpeg


def _jpegs(shapes: list[tuple[int, int]], seed: int = 0) -> list[bytes]:
    rng = np.random.default_rng(seed)
    return [simplejpeg.encode_jpeg(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), quality=85)
            for h, w in shapes]


@pytest.mark.timeout(30)
def test_jpeg_rows_write_what_decode_jpeg_writes() -> None:
    blobs = _jpegs([(24, 32)] * 5)
    gray = np.random.default_rng(1).integers(0, 256, (24, 32, 1), dtype=np.uint8)
    blobs.append(simplejpeg.encode_jpeg(gray, colorspace="GRAY"))
    fn = Decoders().rows_codec("jpg")
    rows = np.full((8, 24, 32, 3), 7, np.uint8)
    column = [memoryview(bytearray(b)) for b in blobs[:3]] + blobs[3:]
    assert fn is not None and fn(column, rows, 2)
    for i, b in enumerate(blobs):
        assert np.array_equal(rows[2 + i], decode_jpeg(b, Limits()))
    assert (rows[:2] == 7).all()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("case", ["smaller", "larger", "missing", "over max_bytes", "garbage",
                                  "float rows"])
def test_jpeg_rows_say_false_for_what_does_not_fit(case: str) -> None:
    blob = {"smaller": _jpegs([(16, 32)])[0], "larger": _jpegs([(32, 32)])[0], "missing": None,
            "garbage": b"\xff\xd8 not a jpeg"}.get(case, _jpegs([(24, 32)])[0])
    dtype = np.float32 if case == "float rows" else np.uint8
    limits = Limits(max_bytes=100) if case == "over max_bytes" else Limits()
    fn = Decoders(limits=limits).rows_codec("x.jpeg")
    assert fn is not None and not fn([blob], np.zeros((1, 24, 32, 3), dtype), 0)


@pytest.mark.timeout(30)
def test_resized_and_overridden_fields_take_their_own_codec() -> None:
    img = np.random.default_rng(2).integers(0, 256, (40, 60, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "PNG")
    dec = Decoders(size=(20, 30))
    rows = np.zeros((1, 20, 30, 3), np.uint8)
    fn = dec.rows_codec("png")
    assert fn is not None and fn([buf.getvalue()], rows, 0)
    assert np.array_equal(rows[0], dec.decode_field("png", buf.getvalue()))
    assert Decoders().rows_codec("png") is None
    assert Decoders({"jpg": lambda b: b}).rows_codec("jpg") is None
