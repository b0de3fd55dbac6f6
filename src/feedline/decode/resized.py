"""Decode an image field straight to RGB of one size: what ``Loader(decode_size=(h, w))`` runs.

Which fields: every JPEG field, and other image formats when the field is the
sample's image (named by its bare extension, ``png``), not a mask or a depth
map (``seg.png``): :func:`resizable`.

The result is always a ``uint8`` array of shape ``(h, w, 3)`` (HWC, RGB),
whatever the stored image: colour, grayscale, CMYK/YCCK, baseline or
progressive JPEG, or any format Pillow reads (PNG with a palette, alpha or
16-bit depth, BMP, TIFF, WebP...). The image is stretched to ``(h, w)``: the
aspect ratio is not kept (crop in ``transform=`` for that).

How (chosen by measurement, see ``bench/loader_jpeg.py --decode-size``):

* JPEG: libjpeg-turbo (simplejpeg) decodes at a reduced scale when the image
  is much larger than the target (a power-of-two DCT downscale, stopping while
  the decoded image is still at least twice the target on both axes), then
  Pillow's antialiased bilinear ``Image.resize`` makes it ``(h, w)``. On a
  12-megapixel photo to 224x224 that is about 2x faster than decoding every
  pixel and resizing (120 vs 265 ms on one core), and within 1-2 grey levels
  of it. Decoding straight into the slot row instead of a sample array saves
  one copy of the small result (under 2 % of the decode).
* CMYK/YCCK JPEGs (Adobe inversion) and every other format: Pillow decodes
  (``draft`` gives JPEG the same reduced-scale decode), converts to RGB
  (a palette through its colours, transparency dropped, grey repeated) and
  resizes the same way. A ``.jpg`` field that holds another format Pillow
  recognises (a PNG saved as ``.jpg``) is decoded the same way.

The resize matches ``torch.nn.functional.interpolate(mode="bilinear",
antialias=True, align_corners=False)`` followed by rounding, what the
after-delivery decoders apply (:mod:`feedline.decode.jpeg_batch`), to within
one grey level (Pillow's filter is the one torch's antialias copies).

EXIF orientation is **not** applied, as in ``torchvision.datasets.ImageFolder``
(PIL's ``Image.open``), ``torchvision.io.decode_jpeg`` and every other feedline
decode path: pixels come out as stored, so a phone photo taken upright may be
stored (and delivered) on its side. Apply it when packing (e.g. Pillow's
``ImageOps.exif_transpose``) if your model should see photos upright.

Every size is checked against :class:`~feedline.decode.Limits` before any
pixel is allocated; a damaged or unknown image raises
:class:`~feedline.errors.DecodeError`.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from feedline.decode.codecs import Buffer, Limits, check_pixels, not_an_image
from feedline.errors import ConfigError, DecodeError

JPEG_EXTENSIONS = ("jpg", "jpeg", "jpe")
IMAGE_EXTENSIONS = (*JPEG_EXTENSIONS, "png", "ppm", "pgm", "pbm", "bmp", "gif", "tif", "tiff",
                    "webp")
"""Image field extensions (see :func:`resizable` for which ``decode_size`` applies to)."""

MARGIN = 2
"""A reduced-scale decode stops while the image is still this many times the target."""

_PILLOW_JPEG = ("CMYK", "YCCK")


def resizable(field: str) -> bool:
    """Whether ``decode_size`` resizes ``field``: every JPEG field (photos: ``jpg``,
    ``cam0.jpg``), and a field of another image format only when its name is the bare
    extension (``png``, ``webp``: the sample's image, as an ImageFolder pack names it).
    ``seg.png``, ``mask.png``, ``depth.png``... keep their stored pixels: a mask of class
    ids must not be interpolated into colours (resize those in ``transform=``, nearest).
    """
    name = field.lower()
    ext = name.rsplit(".", 1)[-1]
    return ext in JPEG_EXTENSIONS or (name == ext and ext in IMAGE_EXTENSIONS)


def check_size(size: Any, name: str = "decode_size") -> tuple[int, int]:
    """``size`` as ``(height, width)`` of positive ints up to 32768.

    Raises:
        ConfigError: anything else (named by ``name``; a ``ValueError``).
    """
    ok = (isinstance(size, (tuple, list)) and len(size) == 2
          and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and 0 < v <= 1 << 15
                  for v in size))
    if not ok:
        raise ConfigError(f"{name} must be (height, width), two integers in 1..32768, got {size!r}",
                          field=name)
    return int(size[0]), int(size[1])


def scale_for(height: int, width: int, size: tuple[int, int]) -> int:
    """The power-of-two downscale (1, 2, 4 or 8) libjpeg applies while decoding: the
    largest that keeps the image at least ``MARGIN`` times ``size`` on both axes."""
    s = 1
    while (s < 8 and -(-height // (2 * s)) >= MARGIN * size[0]
           and -(-width // (2 * s)) >= MARGIN * size[1]):
        s *= 2
    return s


def _bytes_of(data: Buffer) -> Buffer:
    if isinstance(data, memoryview) and (data.format not in ("B", "b", "c")
                                         or not data.c_contiguous):
        return bytes(data)
    return data


def _finish(img: Any, size: tuple[int, int], out: np.ndarray | None) -> np.ndarray:
    """Resize a Pillow RGB or RGBX image to ``size``, into ``out`` when it fits (else a new
    array); the X byte is dropped."""
    from PIL import Image

    h, w = size
    if img.size != (w, h):
        img = img.resize((w, h), Image.Resampling.BILINEAR)
    arr = np.asarray(img)[:, :, :3]
    if out is not None and out.shape == (h, w, 3) and out.dtype == np.uint8:
        np.copyto(out, arr)
        return out
    return np.ascontiguousarray(arr)


def _jpeg(data: Buffer, limits: Limits, size: tuple[int, int], out: np.ndarray | None
          ) -> np.ndarray | None:
    """simplejpeg's path; ``None`` when Pillow should decode instead (not a plain JPEG)."""
    import simplejpeg
    from PIL import Image

    try:
        height, width, colorspace, _ = simplejpeg.decode_jpeg_header(data)
    except ValueError:
        return None
    check_pixels(height, width, limits)
    if colorspace in _PILLOW_JPEG:
        return None
    s = scale_for(height, width, size)
    try:
        # RGBX: Pillow maps 4-byte pixels without a copy (RGB would be unpacked first)
        arr = simplejpeg.decode_jpeg(data, colorspace="RGBX", min_height=-(-height // s),
                                     min_width=-(-width // s))
    except ValueError as exc:
        raise DecodeError(f"JPEG data unreadable: {exc}") from exc
    rows, cols = arr.shape[:2]
    return _finish(Image.frombuffer("RGBX", (cols, rows), arr, "raw", "RGBX", 0, 1), size, out)


def _pillow(data: Buffer, limits: Limits, size: tuple[int, int], out: np.ndarray | None,
            why: str | None) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(bytes(data))) as img:
            check_pixels(img.size[1], img.size[0], limits)
            if img.format == "JPEG":
                img.draft(img.mode, (MARGIN * size[1], MARGIN * size[0]))
            if img.mode in ("P", "PA") and "transparency" in img.info:
                img = img.convert("RGBA")
            if img.mode == "I" or img.mode.startswith("I;16"):
                img = _sixteen(img)
            return _finish(img.convert("RGB"), size, out)
    except UnidentifiedImageError:
        if why:
            raise DecodeError(why, fix="remove or replace the file") from None
        raise not_an_image(data) from None
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise DecodeError(f"image unreadable: {exc}") from exc


def _sixteen(img: Any) -> Any:
    """A 16-bit (or 32-bit integer) grey image scaled to 8 bits (Pillow's own conversion
    would clip at 255)."""
    from PIL import Image

    arr = np.clip(np.asarray(img), 0, 65535).astype(np.uint32)
    return Image.fromarray((arr >> 8).astype(np.uint8))


def decode_resized(data: Buffer, limits: Limits, size: tuple[int, int],
                   out: np.ndarray | None = None, *, jpeg: bool = True) -> np.ndarray:
    """The image in ``data`` as ``uint8`` RGB of shape ``size + (3,)`` (see the module doc).

    Args:
        jpeg: the field is a JPEG by name (try libjpeg-turbo first); else Pillow.
        out: a C-contiguous ``uint8`` array of shape ``(h, w, 3)`` (a batch slot row) to
            write into; it is returned. Otherwise a new array is returned.

    Raises:
        DecodeError: damaged, unknown or over the declared limits.
    """
    buf = _bytes_of(data)
    if jpeg:
        arr = _jpeg(buf, limits, size, out)
        if arr is not None:
            return arr
        return _pillow(buf, limits, size, out, "not a JPEG (and no other image format "
                       "Pillow recognises)")
    return _pillow(buf, limits, size, out, None)


def plain_jpeg(data: Buffer, limits: Limits) -> tuple[int, int] | None:
    """``(height, width)`` of the JPEG in ``data`` when libjpeg-turbo decodes it to RGB
    (checked against ``limits``); ``None`` for a CMYK/YCCK one (Pillow's, see the module doc).

    Raises:
        DecodeError: no JPEG header, or over ``limits``.
    """
    import simplejpeg

    try:
        height, width, colorspace, _ = simplejpeg.decode_jpeg_header(_bytes_of(data))
    except ValueError as exc:
        raise DecodeError(f"JPEG header unreadable: {exc}") from exc
    check_pixels(height, width, limits)
    return None if colorspace in _PILLOW_JPEG else (height, width)


def decode_crop(data: Buffer, header: tuple[int, int], box: tuple[int, int, int, int] | None,
                size: tuple[int, int]) -> np.ndarray:
    """The window ``box`` = ``(top, left, height, width)`` (stored pixels; ``None``: the
    whole image) of a plain JPEG (``header`` from :func:`plain_jpeg`) resized to ``size``:
    ``uint8`` RGB ``(h, w, 3)``, what ``resize(decoded[window], size)`` of
    :mod:`feedline.vision` gives, made cheaper: libjpeg-turbo decodes at the largest DCT
    downscale that keeps the window at least ``MARGIN`` times ``size`` (:func:`scale_for`;
    a 1920x1080 photo's RandomResizedCrop to 224 is decoded at half size about one time in
    four, its eval resize to 256 always), and Pillow resizes the window of that (its box in
    sub-pixel units, so the window is the same) in one call, without copying the decoded
    pixels into a crop and a Pillow image first.

    Raises:
        DecodeError: the JPEG data is damaged.
    """
    import simplejpeg
    from PIL import Image

    height, width = header
    top, left, h, w = box if box is not None else (0, 0, height, width)
    s = scale_for(h, w, size)
    try:
        arr = simplejpeg.decode_jpeg(_bytes_of(data), colorspace="RGBX", min_height=-(-height // s),
                                     min_width=-(-width // s))
    except ValueError as exc:
        raise DecodeError(f"JPEG data unreadable: {exc}") from exc
    rows, cols = arr.shape[:2]
    img = Image.frombuffer("RGBX", (cols, rows), arr, "raw", "RGBX", 0, 1)
    sy, sx = rows / height, cols / width
    out = img.resize((size[1], size[0]), Image.Resampling.BILINEAR,
                     box=(left * sx, top * sy, (left + w) * sx, (top + h) * sy), reducing_gap=MARGIN)
    return np.asarray(out)[:, :, :3]


class CheckedJpeg(bytes):
    """The bytes of a plain JPEG whose header the workers read and checked against the
    loader's limits: ``header`` is its ``(height, width)``."""

    header: tuple[int, int]


def kept_jpeg(data: Buffer, limits: Limits) -> Any:
    """What the workers hand a transform that decodes JPEG fields itself
    (``encoded_fields``, as :class:`feedline.vision.ImageTransform` has): the bytes of a plain
    JPEG, its header read and checked against ``limits`` (so a damaged one is a bad sample
    in the decode stage, named by its field, and the transform need not check it again):
    a :class:`CheckedJpeg`; a CMYK/YCCK one decoded as the ``jpg`` codec decodes it.

    Raises:
        DecodeError: no JPEG header, over ``limits``, or an undecodable CMYK/YCCK JPEG.
    """
    header = plain_jpeg(data, limits)
    if header is None:
        from feedline.decode.codecs import decode_jpeg

        return decode_jpeg(data, limits)
    kept = CheckedJpeg(data)
    kept.header = header
    return kept


__all__ = ["IMAGE_EXTENSIONS", "JPEG_EXTENSIONS", "CheckedJpeg", "check_size", "decode_crop", "decode_resized",
           "kept_jpeg", "plain_jpeg", "resizable", "scale_for"]
