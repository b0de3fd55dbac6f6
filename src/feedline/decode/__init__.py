"""feedline.decode: bytes to arrays by field type, with declared size bounds.

``Decoders().decode_sample(sample, key=...)`` decodes a packed sample's fields
by extension: raw dtypes (``f32``, ``u8``...) and ``.npy`` as zero-copy views,
``.jpg``/``.jpeg`` with simplejpeg, ``.png`` with Pillow, ``.json``, ``.txt``,
``.cls``; anything else stays bytes. Oversized fields and images raise
:class:`feedline.errors.DecodeError`.
"""

from feedline.decode.codecs import (
    Limits,
    decode_cls,
    decode_jpeg,
    decode_json,
    decode_npy,
    decode_png,
    decode_raw,
    decode_text,
)
from feedline.decode.registry import Decoders, as_decoders, extension

__all__ = [
    "Decoders",
    "Limits",
    "as_decoders",
    "decode_cls",
    "decode_jpeg",
    "decode_json",
    "decode_npy",
    "decode_png",
    "decode_raw",
    "decode_text",
    "extension",
]
