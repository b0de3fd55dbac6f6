"""Decoding one field of a batch, a column of compressed images, into its slot rows.

The loader's ``decode-rows`` recipe (:mod:`feedline.pipeline.plan`) hands each field's
byte views to one of these, which decodes view ``i`` into row ``base + i`` and says
whether every image fitted. A ``False`` is not an error: the loader then decodes those
images again one by one from the same bytes (``pipeline.plan``), giving a misfit image
as a list, or redoes the batch on the per-sample path, which raises (or skips) naming
shard, key and field.

:func:`jpeg_rows` is the W1 hot path (a 256x256 JPEG decodes in about 0.7 ms on this
machine's cores): one ``simplejpeg`` call per image, straight into its row, with the
per-image Python around it kept to a length check and a shape compare. The JPEG header
is not parsed separately (``decode_jpeg_header``, ~3 us): the decoder checks it against
the row itself, refusing an image larger than the row (no allocation, so no pixel limit
to check) and reporting a smaller one by the shape it returns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from feedline.decode.codecs import Buffer, Limits

RowsCodec = Callable[[Sequence[Any], np.ndarray, int], bool]
"""``fn(column, rows, base)``: decode ``column[i]`` into ``rows[base + i]``; False at the
first image that is missing (``None``), over ``max_bytes``, unreadable or of another size."""


def jpeg_rows(column: Sequence[Any], rows: np.ndarray, base: int, *, limits: Limits) -> bool:
    """:data:`RowsCodec` of a JPEG field into ``uint8`` (H, W, 3) rows, bytes for bytes what
    :func:`~feedline.decode.codecs.decode_jpeg` with ``out=`` writes (same call, RGB)."""
    import simplejpeg

    if rows.dtype != np.uint8 or not rows.flags.c_contiguous or not rows.flags.writeable:
        return False
    decode, shape, limit = simplejpeg.decode_jpeg, rows.shape[1:], limits.max_bytes
    for i, data in enumerate(column, base):
        if data is None or len(data) > limit:
            return False
        if type(data) is memoryview and (data.format != "B" or not data.c_contiguous):
            data = bytes(data)  # what decode_jpeg does with an odd view
        try:
            if decode(data, colorspace="RGB", buffer=rows[i]).shape != shape:
                return False  # a smaller image, decoded into the row's first bytes
        except ValueError:  # unreadable, or larger than the row
            return False
    return True


def into_rows(into: Callable[[Buffer, np.ndarray], Any], limits: Limits) -> RowsCodec:
    """:data:`RowsCodec` calling a decode-into codec (``into(data, out)`` returns ``out``
    when the image fits it) once per image: resized images, any other codec."""
    limit = limits.max_bytes

    def decode_rows(column: Sequence[Any], rows: np.ndarray, base: int) -> bool:
        for i, data in enumerate(column, base):
            if data is None or len(data) > limit:
                return False
            row = rows[i]
            if into(data, row) is not row:
                return False
        return True

    return decode_rows
