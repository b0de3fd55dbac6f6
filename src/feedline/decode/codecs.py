"""Field codecs: bytes in, arrays or Python values out.

Each codec takes the field's bytes (any buffer: ``bytes`` or a ``memoryview``
into a read buffer) and :class:`Limits`, and returns a ``numpy.ndarray``, an
``int``, a ``str`` or a JSON value. Array codecs for raw and ``.npy`` fields
return *zero-copy views* of the input buffer: copy them (collate does) before
the buffer is reused. Every codec checks the declared size bounds before it
allocates and raises :class:`feedline.errors.DecodeError` on bad input.
"""

from __future__ import annotations

import io
import json
import math
import zipfile
from dataclasses import dataclass
from typing import Any

import numpy as np

from feedline.dense import why_not_dense
from feedline.errors import ArgumentError, ConfigError, DecodeError
from feedline.format._schema import parse_npy_header

Buffer = bytes | bytearray | memoryview


@dataclass(frozen=True)
class Limits:
    """Declared size bounds that every decode is checked against.

    Attributes:
        max_bytes: largest encoded field accepted, in bytes.
        max_pixels: largest decoded image accepted (height x width).
    """

    max_bytes: int = 256 * 2**20
    max_pixels: int = 64 * 2**20

    def __post_init__(self) -> None:
        for name in ("max_bytes", "max_pixels"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ArgumentError(f"Limits.{name} must be a positive integer, got {value!r}", field=name)
            if value < 1:
                raise ConfigError(f"Limits.{name} must be a positive integer, got {value!r}", field=name)


RAW_DTYPES: dict[str, str] = {
    "f16": "<f2", "f32": "<f4", "f64": "<f8",
    "i8": "i1", "i16": "<i2", "i32": "<i4", "i64": "<i8",
    "u8": "u1", "u16": "<u2", "u32": "<u4", "u64": "<u8",
}


def decode_raw(data: Buffer, ext: str, limits: Limits) -> np.ndarray:
    """A 1-D little-endian array view of a raw field named by dtype (``f32``, ``u8``...)."""
    dtype = RAW_DTYPES.get(ext)
    if dtype is None:
        raise DecodeError(f"no raw dtype for extension {ext!r}", field=ext)
    item = np.dtype(dtype).itemsize
    if len(data) % item:
        raise DecodeError(
            f"raw {ext} field of {len(data)} bytes is not a multiple of {item}", field=ext
        )
    return np.frombuffer(data, dtype=dtype)


def decode_npy(data: Buffer, limits: Limits) -> np.ndarray:
    """A ``.npy`` array (format 1.x/2.x/3.x) as a zero-copy view; never unpickles.

    An array stored in the other byte order (``>f4`` from a big-endian tool, MATLAB or
    Java writers) comes back converted to native order (a copy; same values): torch can
    neither wrap nor stack a non-native array, where ``np.load`` would keep ``>f4``."""
    mv = memoryview(data).cast("B")
    try:  # pack's parser: the header cached per distinct text, and safe in threads on Python 3.11
        offset, dtype, shape, fortran = parse_npy_header(mv)
    except ValueError as exc:
        raise DecodeError(str(exc), fix="store arrays with numpy.save") from None
    if dtype.hasobject:
        raise DecodeError(".npy holds Python objects (needs pickle)", fix="store numeric arrays")
    if any(s < 0 for s in shape):
        raise DecodeError(f".npy shape {shape} is negative")
    count = math.prod(shape)  # Python ints: a hostile shape cannot wrap around
    body = len(mv) - offset
    if count * dtype.itemsize != body:
        raise DecodeError(f".npy body is {body} bytes, header says {count * dtype.itemsize}")
    arr = np.frombuffer(mv, dtype=dtype, count=count, offset=offset)
    arr = arr.reshape(shape, order="F" if fortran else "C")
    return arr if _native(dtype) else arr.astype(dtype.newbyteorder("="))


def _native(dtype: np.dtype[Any]) -> bool:
    """Whether ``dtype`` and every field of a structured dtype are in native byte order."""
    if dtype.fields is None:
        return dtype.isnative if dtype.subdtype is None else _native(dtype.subdtype[0])
    return all(_native(f[0]) for f in dtype.fields.values())


def decode_npz(data: Buffer, limits: Limits) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` (``numpy.savez``/``savez_compressed``) by name; never
    unpickles (an object array is a DecodeError, as in :func:`decode_npy`).

    The members' declared sizes are checked against ``limits.max_bytes`` before any is
    inflated, and no member inflates past its declared size (a zip bomb is refused). Two
    members of one array name (a zip allows it) are a DecodeError, not one dropped.
    """
    try:
        with zipfile.ZipFile(io.BytesIO(bytes(data))) as zf:
            infos = zf.infolist()
            total = sum(info.file_size for info in infos)
            if total > limits.max_bytes:
                raise DecodeError(f".npz inflates to {total} bytes, more than max_bytes={limits.max_bytes}",
                                  fix="raise the decode limit max_bytes or store smaller arrays")
            out: dict[str, np.ndarray] = {}
            for info in infos:
                name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
                if name in out:  # a zip may hold one name twice ("a" and "a.npy" are one array too)
                    raise DecodeError(f".npz holds two members named {name!r}: which one is meant is not said",
                                      fix="re-save it with numpy.savez (one member per array name)")
                try:
                    out[name] = decode_npy(zf.read(info), limits)
                except DecodeError as exc:
                    raise DecodeError(f".npz member {info.filename!r}: {exc.message}", fix=exc.fix) from None
            return out
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError, OSError,
            ValueError, RuntimeError) as exc:
        raise DecodeError(f".npz unreadable: {exc}", fix="store arrays with numpy.savez") from exc


def decode_torch(data: Buffer, limits: Limits) -> Any:
    """A ``torch.save`` file (``.pt``/``.pth``) through ``torch.load(weights_only=True)``:
    tensors, numbers, strings and lists/tuples/dicts of them, nothing else.

    ``weights_only`` is torch's restricted unpickler (its default since 2.6): it rebuilds
    only those types and refuses any other object, so loading a file cannot run code the
    way a plain pickle can. Tensors come back as numpy arrays (zero-copy, on the CPU,
    detached), so they stack into batch slots like ``.npy`` fields; a dtype numpy lacks
    (``bfloat16``) stays a tensor. Numbers come back as 0-d arrays and lists as tuples,
    so ``(image, label)`` and ``{"x": t, "y": 3}`` batch member by member. A pickle of anything else (a model object, a custom
    class) is a :class:`DecodeError`.

    What it rebuilds is still checked (:class:`_TorchWalk`): at most :data:`TORCH_MAX_VALUES`
    values (a shared one counted at each place) nested :data:`TORCH_MAX_DEPTH` deep, tensors
    whose bytes as batched fit ``limits.max_bytes``, only dense strided tensors (sparse,
    quantized, nested, ``meta``: :class:`DecodeError`); a lazy conjugate/negative view is resolved.
    """
    import pickle
    import re

    import torch

    head = bytes(memoryview(data)[:4])
    if not (head.startswith(b"PK\x03\x04") or head[:1] == b"\x80"):  # torch.save's zip, or a legacy pickle
        raise DecodeError("not a torch.save file (neither its zip nor a pickle header)",
                          fix="re-save it with torch.save, or --exclude it when packing")
    try:
        value = torch.load(io.BytesIO(bytes(data)), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        why = re.search(r"WeightsUnpickler error:\s*(.*?)(?:\. Please|\n\n|$)", str(exc), re.S)
        raise DecodeError(
            "torch.load(weights_only=True) refused it: it holds more than tensors, numbers, "
            f"strings and containers ({(why.group(1) if why else str(exc))[:200].strip()})",
            fix="save tensors, numbers and dicts/lists of them (torch.save({'x': t})), or pass "
            "decode={field: fn} with a module-level function for files you trust") from None
    except (RuntimeError, EOFError, OSError, ValueError, KeyError, AttributeError) as exc:
        raise DecodeError(f"torch.save file unreadable: {type(exc).__name__}: {str(exc)[:300]}",
                          fix="re-save it with torch.save") from None
    return _torch_to_numpy(value, torch, limits)


TORCH_MAX_VALUES = 2**20  # values a .pt field may hold, a shared one counted at each place it appears
TORCH_MAX_DEPTH = 100  # nested containers in a .pt field


class _TorchWalk:
    """Converts a loaded ``.pt`` value (:func:`_torch_to_numpy`) within the decode limits.

    A pickle can name one object from many places (its memo), so a 100-byte file can describe a
    list of two references to a list of two references... 40 deep: 2**40 values once walked as a
    tree, as the collate walks it (before: the decode never returned). Each object is converted
    once (a shared one stays shared) and its size *as a tree* is counted from its parts', so the
    count costs one pass over the objects in the file: more than :data:`TORCH_MAX_VALUES` values
    is refused, and so are tensors whose bytes, as collate copies them into a batch (each place
    counted), exceed ``limits.max_bytes`` (a tensor of stride 0 shows 10**12 elements from 4
    stored bytes: collate would allocate them all).
    """

    def __init__(self, torch: Any, limits: Limits) -> None:
        self.torch, self.limits = torch, limits
        self.done: dict[int, tuple[Any, int, int]] = {}  # id -> (converted, values, bytes) as a tree

    def convert(self, value: Any, depth: int = 0) -> tuple[Any, int, int]:
        """``(converted value, values in it as a tree, tensor bytes in it as a tree)``."""
        known = self.done.get(id(value))
        if known is not None:
            return known
        if depth > TORCH_MAX_DEPTH:
            raise DecodeError(f"torch.save file nests containers more than {TORCH_MAX_DEPTH} deep",
                              fix="store a flat dict or list of tensors")
        torch = self.torch
        if isinstance(value, torch.Tensor):
            out = (self.tensor(value), 1, value.numel() * value.element_size())
        elif isinstance(value, (bool, int, float)):
            out = (np.asarray(value), 1, 0)
        elif isinstance(value, dict):
            parts = {k: self.convert(v, depth + 1) for k, v in value.items()}
            out = ({k: p[0] for k, p in parts.items()}, *self.total(parts.values()))
        elif isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
            items = [self.convert(v, depth + 1) for v in value]
            out = (tuple(p[0] for p in items), *self.total(items))
        else:
            out = (value, 1, 0)
        self.done[id(value)] = out
        return out

    def total(self, parts: Any) -> tuple[int, int]:
        values, nbytes = 1 + sum(p[1] for p in parts), sum(p[2] for p in parts)
        if values > TORCH_MAX_VALUES:
            raise DecodeError(f"torch.save file holds {values} values, more than {TORCH_MAX_VALUES} (a "
                              "value shared by several containers counts at each)",
                              fix="store many values as one tensor (torch.stack) rather than as a list")
        self.check_bytes(nbytes, "")
        return values, nbytes

    def check_bytes(self, nbytes: int, what: str) -> None:
        if nbytes > self.limits.max_bytes:
            raise DecodeError(f"torch.save file's tensors hold {nbytes} bytes once expanded{what}, more "
                              f"than max_bytes={self.limits.max_bytes}",
                              fix="raise the decode limit max_bytes, or save t.clone() of views")

    def tensor(self, value: Any) -> Any:
        odd = why_not_dense(value)
        if odd:
            raise DecodeError(f"torch.save file holds a tensor that is {odd}: it has no plain dense "
                              "values to batch", fix="save t.to_dense() (sparse), t.dequantize() "
                              "(quantized), t.unbind() (nested); a meta tensor has no data to save")
        self.check_bytes(value.numel() * value.element_size(),
                         f" ({list(value.shape)} {str(value.dtype).removeprefix('torch.')} "
                         f"from {value.untyped_storage().nbytes()} stored bytes)")
        t = value.detach().resolve_conj().resolve_neg()  # numpy() refuses the lazy conj/neg bits
        try:
            return t.numpy()
        except TypeError:  # bfloat16 and other dtypes numpy lacks
            return t


def _torch_to_numpy(value: Any, torch: Any, limits: Limits) -> Any:
    """Tensors as numpy arrays, numbers as 0-d arrays and lists as tuples, so a saved
    ``(image, label)`` or ``{"x": t, "y": 3}`` collates as ``default_collate`` does it;
    within the limits of :class:`_TorchWalk`."""
    return _TorchWalk(torch, limits).convert(value)[0]


def check_pixels(height: int, width: int, limits: Limits) -> None:
    if height * width > limits.max_pixels:
        raise DecodeError(
            f"image of {width}x{height} pixels exceeds max_pixels={limits.max_pixels}",
            fix="raise max_pixels or resize the images when packing",
        )


def _fits_rgb(out: np.ndarray, height: int, width: int) -> bool:
    if out.shape != (height, width, 3) or out.dtype != np.uint8:
        return False
    flags = out.flags
    return bool(flags.c_contiguous and flags.writeable)


def decode_jpeg(data: Buffer, limits: Limits, out: np.ndarray | None = None, *,
                header: tuple[int, int] | None = None) -> np.ndarray:
    """An RGB ``uint8`` array (H, W, 3) via simplejpeg (libjpeg-turbo; releases the GIL).

    Args:
        out: optional C-contiguous ``uint8`` array of shape (H, W, 3), e.g. a row of a
            batch slot: when the image has exactly that shape it is decoded straight into
            ``out`` (no allocation, no later copy) and ``out`` is returned; otherwise a
            fresh array is returned and ``out`` is left untouched.
        header: the (height, width) the caller already read from this JPEG's header and
            checked against ``limits`` (:func:`feedline.decode.jpeg_batch.jpeg_shape`):
            the header is then not parsed again.
    """
    import simplejpeg

    # a byte memoryview (a read buffer) goes to simplejpeg as is: no copy. Its decode runs
    # without the GIL for bytes and memoryviews alike (a Cython typed memoryview argument).
    buf: Buffer = data
    if isinstance(data, memoryview) and (data.format not in ("B", "b", "c")
                                         or not data.c_contiguous):
        buf = bytes(data)
    if header is not None:
        height, width = header
    else:
        try:
            height, width, _, _ = simplejpeg.decode_jpeg_header(buf)
        except ValueError as exc:
            raise DecodeError(f"JPEG header unreadable: {exc}") from exc
        check_pixels(height, width, limits)
    try:
        if out is not None and _fits_rgb(out, height, width):
            simplejpeg.decode_jpeg(buf, colorspace="RGB", buffer=out)
            return out
        return np.asarray(simplejpeg.decode_jpeg(buf, colorspace="RGB"))
    except ValueError as exc:
        raise DecodeError(f"JPEG data unreadable: {exc}") from exc


def decode_png(data: Buffer, limits: Limits, colours: bool = False) -> np.ndarray:
    """An array (H, W[, C]) via Pillow; the size is checked before pixels load.

    The codec of PNG and of every other non-JPEG image format Pillow reads (WebP, BMP,
    TIFF, GIF, PPM/PGM): the first frame of an animated file.

    Pixels come out as Pillow stores them: grey (H, W), RGB (H, W, 3), RGBA (H, W, 4), and
    a palette image as its palette *indices* (H, W) -- the class ids of a segmentation mask
    (VOC, Cityscapes, ADE20K store masks so), exactly what ``np.asarray(Image.open(f))``
    gives; CMYK (no use as CMYK) as RGB.

    ``colours=True`` (what :meth:`~feedline.decode.Decoders.decode_sample` asks for a
    sample's only image, a photo, see there): a palette image comes out as its colours, RGB
    (H, W, 3), or RGBA when it has transparency, and a 1-bit image as grey ``uint8`` 0/255,
    as ``Image.convert`` gives them; every other mode as stored.
    """
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(bytes(data))) as img:
            check_pixels(img.size[1], img.size[0], limits)
            if img.mode == "CMYK":
                return np.asarray(img.convert("RGB"))
            if colours and img.mode in ("P", "PA"):
                alpha = img.mode == "PA" or "transparency" in img.info
                return np.asarray(img.convert("RGBA" if alpha else "RGB"))
            if colours and img.mode == "1":
                return np.asarray(img.convert("L"))
            return np.asarray(img)
    except UnidentifiedImageError:
        raise not_an_image(data) from None
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise DecodeError(f"image unreadable: {exc}") from exc


def not_an_image(data: Buffer) -> DecodeError:
    """The error for bytes Pillow does not recognise, saying what they are (its own
    message names only its ``<_io.BytesIO object at 0x...>``)."""
    view = memoryview(data).cast("B")
    return DecodeError(f"not an image Pillow can read ({view.nbytes} bytes, starting {bytes(view[:16])!r})",
                       fix="remove or replace the file (feedline verify DIR --decode lists every such "
                       "sample)")


def decode_json(data: Buffer, limits: Limits) -> Any:
    """A JSON value (dict, list, str, number); nested deeper than Python's recursion limit
    (``[[[...]]]`` 10**5 deep) it is a DecodeError, as any other unreadable JSON."""
    try:
        return json.loads(bytes(data))
    except (ValueError, UnicodeDecodeError) as exc:
        raise DecodeError(f"JSON unreadable: {exc}") from exc
    except RecursionError:
        raise DecodeError("JSON nested deeper than Python's recursion limit",
                          fix="store flatter JSON (lists of records, not records inside records)") from None


def decode_text(data: Buffer, limits: Limits) -> str:
    """UTF-8 text."""
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError(f"text is not UTF-8: {exc}") from exc


def decode_cls(data: Buffer, limits: Limits) -> int:
    """An integer class label written as ASCII digits (WebDataset's ``.cls``)."""
    text = bytes(data).strip()
    try:
        return int(text)
    except ValueError as exc:
        raise DecodeError(f"class label {text[:32]!r} is not an integer") from exc
