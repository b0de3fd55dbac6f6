"""Choose a codec per field by its extension and decode whole samples.

A packed sample is a dict of field name -> bytes; the field name's last
dot-separated part is its extension (``"jpg"``, ``"seg.png"`` -> ``"png"``).
:class:`Decoders` maps extensions to codecs, applies user overrides by field
name or extension, enforces :class:`Limits`, and wraps any failure in a
:class:`feedline.errors.DecodeError` naming the field.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any

import numpy as np

from feedline.decode import codecs
from feedline.decode.codecs import Buffer, Limits
from feedline.decode.resized import (
    IMAGE_EXTENSIONS,
    JPEG_EXTENSIONS,
    check_size,
    decode_resized,
    resizable,
)
from feedline.decode.rows import RowsCodec, into_rows, jpeg_rows
from feedline.errors import ArgumentError, DecodeError, FeedlineError

FieldDecoder = Callable[[Buffer], Any]

_INTO: dict[str, Callable[[Buffer, Limits, np.ndarray], Any]] = {
    "jpg": codecs.decode_jpeg,
    "jpeg": codecs.decode_jpeg,
}
"""Built-in codecs that can decode straight into a caller's array (``out=``)."""

_BUILTIN: dict[str, Callable[[Buffer, Limits], Any]] = {
    "npy": codecs.decode_npy,
    "npz": codecs.decode_npz,
    "pt": codecs.decode_torch,
    "pth": codecs.decode_torch,
    "jpg": codecs.decode_jpeg,
    "jpeg": codecs.decode_jpeg,
    "png": codecs.decode_png,
    "json": codecs.decode_json,
    "txt": codecs.decode_text,
    "text": codecs.decode_text,
    "cls": codecs.decode_cls,
    "cls2": codecs.decode_cls,
    "index": codecs.decode_cls,
    # every other image format Pillow reads (webp, bmp, tiff, gif, ppm...) as PNG is read
    **{ext: codecs.decode_png for ext in IMAGE_EXTENSIONS if ext not in JPEG_EXTENSIONS},
}


_UNKNOWN = object()


def _raw_bytes(data: Buffer, limits: Limits) -> bytes:
    return bytes(data)


def extension(field: str) -> str:
    """The lower-cased extension of a field name: ``"seg.PNG" -> "png"``."""
    return field.rsplit(".", 1)[-1].lower()


class Decoders:
    """Per-field decoding with declared bounds.

    Args:
        overrides: field name or extension -> ``fn(buffer) -> value``; a value of
            ``None`` keeps the field's raw bytes. Field names win over extensions.
        limits: size bounds checked before any decode allocates.
        size: ``(height, width)``: every image field (JPEG fields, and ``png``, ``webp``...
            named by the bare extension; not ``seg.png``; not overridden: see
            :func:`feedline.decode.resized.resizable`) decodes to ``uint8`` RGB of exactly
            that shape (:func:`~feedline.decode.resized.decode_resized`); ``None``
            (default): as stored.
        labels: field names that decode as integer labels whatever their extension
            (``label``, ``idx``, ``class.txt``...): the fields a dataset's schema found to
            hold an integer in every sample (:meth:`with_labels`). Overrides still win.

    Unknown extensions decode to ``bytes``. Raw dtype extensions (``f32``,
    ``u8``, ``i64``...) and ``.npy`` decode to zero-copy array views.
    Decoders are picklable when the overrides are.
    """

    def __init__(
        self,
        overrides: Mapping[str, FieldDecoder | None] | None = None,
        limits: Limits | None = None,
        size: tuple[int, int] | None = None,
        *,
        labels: Iterable[str] = (),
    ) -> None:
        if overrides is not None and not isinstance(overrides, Mapping):
            raise ArgumentError(f"decode must be a mapping of field -> function, got {overrides!r}",
                                field="decode")
        for name, fn in (overrides or {}).items():
            if fn is not None and not callable(fn):
                raise ArgumentError(f"decode[{name!r}] must be callable or None, got {fn!r}", field="decode")
        self.overrides = dict(overrides or {})
        self.limits = limits or Limits()
        self.size = None if size is None else check_size(size)
        self.labels = frozenset(labels)
        self._cache: dict[str, Callable[[Buffer], Any]] = {}
        self._into: dict[str, Any] = {}  # field -> its decode-into codec or None (cached)
        self._rows: dict[str, RowsCodec | None] = {}  # field -> its rows codec or None (cached)
        self._photo_field: dict[tuple[str, ...], Any] = {}  # a sample's fields -> _only_image

    def __getstate__(self) -> dict[str, Any]:
        return {"overrides": self.overrides, "limits": self.limits, "size": self.size,
                "labels": self.labels}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["overrides"], state["limits"], state.get("size"),  # type: ignore[misc]
                      labels=state.get("labels", ()))

    def replace(self, *, overrides: Mapping[str, FieldDecoder | None] | None = None,
                limits: Limits | None = None, size: tuple[int, int] | None = None) -> Decoders:
        """A copy with the given settings changed (the others kept)."""
        return Decoders(self.overrides if overrides is None else overrides,
                        self.limits if limits is None else limits,
                        self.size if size is None else size, labels=self.labels)

    def with_labels(self, fields: Iterable[str]) -> Decoders:
        """A copy that also decodes ``fields`` as integer labels (see ``labels``)."""
        return Decoders(self.overrides, self.limits, self.size,
                        labels=self.labels | frozenset(fields))

    def resizes(self, field: str) -> bool:
        """Whether ``field`` is an image field that decodes to :attr:`size` (built-in codec)."""
        ext = extension(field)
        return (self.size is not None and resizable(field)
                and field not in self.overrides and ext not in self.overrides)

    def for_field(self, field: str) -> Callable[[Buffer], Any]:
        """The function that decodes ``field`` (cached per field name)."""
        fn = self._cache.get(field)
        if fn is None:
            fn = self._resolve(field)
            self._cache[field] = fn
        return fn

    def _resolve(self, field: str) -> Callable[[Buffer], Any]:
        ext = extension(field)
        for name in (field, ext):
            if name in self.overrides:
                user = self.overrides[name]
                return partial(_raw_bytes, limits=self.limits) if user is None else user
        if field in self.labels:
            return partial(codecs.decode_cls, limits=self.limits)
        if self.size is not None and resizable(field):
            return partial(decode_resized, limits=self.limits, size=self.size,
                           jpeg=ext in JPEG_EXTENSIONS)
        if ext in _BUILTIN:
            codec = _BUILTIN[ext]
            return lambda data: codec(data, self.limits)
        if ext in codecs.RAW_DTYPES:
            return partial(codecs.decode_raw, ext=ext, limits=self.limits)
        return partial(_raw_bytes, limits=self.limits)

    def decodes(self, field: str) -> bool:
        """Whether ``field`` has a decoder; ``False``: it arrives as its bytes (an unknown
        extension such as ``wav``, or an override of ``None``)."""
        fn = self.for_field(field)
        return not (isinstance(fn, partial) and fn.func is _raw_bytes)

    def raw_dtype(self, field: str) -> np.dtype[Any] | None:
        """The dtype of ``field`` when it decodes to a zero-copy 1-D view of its bytes as
        stored (a raw dtype extension such as ``f32``, not overridden); ``None`` otherwise.
        Such fields can be read straight into a batch slot with no decode at all."""
        ext = extension(field)
        if ext not in codecs.RAW_DTYPES or field in self.overrides or ext in self.overrides:
            return None
        return np.dtype(codecs.RAW_DTYPES[ext])

    def decodes_into(self, field: str) -> bool:
        """True when ``field`` is decoded by a built-in codec that can write into a
        caller's array (JPEG, or any image field with :attr:`size`; not overridden): see
        ``into=`` of :meth:`decode_sample`."""
        ext = extension(field)
        return ((ext in _INTO or self.resizes(field))
                and field not in self.overrides and ext not in self.overrides)

    def into_codec(self, field: str) -> Callable[[Buffer, np.ndarray], Any] | None:
        """``fn(data, out)`` decoding ``field`` into ``out`` (returns ``out`` when the image
        fits it exactly, else a fresh array), as :meth:`decode_field` with ``out`` does
        (without its ``max_bytes`` check and error naming); ``None`` when
        :meth:`decodes_into` is false. Cached per field."""
        into = self._into.get(field, _UNKNOWN)
        if into is _UNKNOWN:
            into = self._into[field] = self._into_codec(field)
        return into

    def _into_codec(self, field: str) -> Callable[[Buffer, np.ndarray], Any] | None:
        if not self.decodes_into(field):
            return None
        if self.size is not None and self.resizes(field):
            size, jpeg = self.size, extension(field) in JPEG_EXTENSIONS
            return lambda data, out: decode_resized(data, self.limits, size, out, jpeg=jpeg)
        codec = _INTO[extension(field)]
        return lambda data, out: codec(data, self.limits, out)

    def rows_codec(self, field: str) -> RowsCodec | None:
        """``fn(column, rows, base)`` decoding a batch's views of ``field`` into slot rows
        (see :mod:`feedline.decode.rows`); ``None`` when :meth:`decodes_into` is false.
        Cached per field."""
        if field in self._rows:
            return self._rows[field]
        into = self.into_codec(field)
        fn: RowsCodec | None = None
        if into is not None and _INTO.get(extension(field)) is codecs.decode_jpeg \
                and not self.resizes(field):
            fn = partial(jpeg_rows, limits=self.limits)
        elif into is not None:
            fn = into_rows(into, self.limits)
        self._rows[field] = fn
        return fn

    def _photo(self, field: str) -> Callable[[Buffer], Any]:
        """The decoder of ``field`` as a sample's only image: the built-in PNG-family codec
        with palette colours (:func:`~feedline.decode.codecs.decode_png` ``colours=True``);
        whatever :meth:`for_field` gives when an override, a label or ``size`` applies."""
        fn = self._cache.get("\0photo:" + field)
        if fn is None:
            ext = extension(field)
            plain = (field not in self.overrides and ext not in self.overrides
                     and field not in self.labels and not self.resizes(field))
            if plain and _BUILTIN.get(ext) is codecs.decode_png:
                limits = self.limits
                fn = lambda data: codecs.decode_png(data, limits, colours=True)  # noqa: E731
            else:
                fn = self.for_field(field)
            self._cache["\0photo:" + field] = fn
        return fn

    def decode_field(self, field: str, data: Buffer, *, key: str | None = None,
                     out: np.ndarray | None = None, photo: bool = False) -> Any:
        """Decode one field, checking ``limits.max_bytes`` first.

        ``out`` (only for fields where :meth:`decodes_into` is true, ignored otherwise):
        an array to decode into when the decoded shape and dtype match it exactly; the
        result is then ``out`` itself, else a fresh array (``out`` untouched).
        ``photo``: the field is the sample's image (see :meth:`decode_sample`): a palette
        image decodes to its colours, not its indices.

        Raises:
            DecodeError: the field is too large or its codec failed (with field and key).
        """
        size = memoryview(data).nbytes
        if size > self.limits.max_bytes:
            raise DecodeError(
                f"field of {size} bytes exceeds max_bytes={self.limits.max_bytes}",
                field=field, key=key, fix="raise the decode limit max_bytes or split the sample",
            )
        try:
            if out is not None:
                into = self.into_codec(field)
                if into is not None:
                    return into(data, out)
            return (self._photo(field) if photo else self.for_field(field))(data)
        except FeedlineError as exc:
            if size == 0 and isinstance(exc, DecodeError):
                raise DecodeError(f"field is empty (0 bytes): {exc}", field=field, key=key,
                                  fix="the source file was empty: re-create it, or leave it "
                                  "out (feedline pack --exclude)") from None
            if exc.place.get("field") in (None, extension(field)):
                exc.place.update(field=field, key=key)
                exc.args = (exc._render(),)
            raise

    def photo_field(self, names: tuple[str, ...]) -> str | None:
        """The field of a sample with fields ``names`` that :meth:`decode_sample` decodes
        as a photo (``photo=True``), if any (see there)."""
        photo = self._photo_field.get(names, _UNKNOWN)
        if photo is _UNKNOWN:  # the same few field sets recur: decided once per set
            photo = _only_image(names)
            if len(self._photo_field) < 256:
                self._photo_field[names] = photo
        return photo

    def decode_sample(self, sample: Mapping[str, Any], *, key: str | None = None,
                      into: Mapping[str, np.ndarray] | None = None) -> dict[str, Any]:
        """Decode every field of a packed sample; ``"__key__"`` and non-buffers pass through.

        ``into``: field -> array to decode that field into (see :meth:`decode_field`'s
        ``out``); a field whose image does not fit its array gets a fresh array instead.

        Palette images: a PNG-family field named by its bare extension (``png``, ``gif``,
        ``webp``...) that is the sample's *only* image field is a photo (an ImageFolder
        image, a GIF saved as PNG): it decodes to its colours, as torchvision's
        ``Image.convert("RGB")`` gives them. Beside another image (``jpg`` + ``png``) or under
        a longer name (``seg.png``, ``mask.png``), a palette image is a mask: its indices,
        the class ids. ``decode={"png": fn}`` decides otherwise.
        """
        photo = self.photo_field(tuple(sample))
        out: dict[str, Any] = {}
        for field, value in sample.items():
            if field.startswith("__") or not isinstance(value, (bytes, bytearray, memoryview)):
                out[field] = value
            else:
                target = into.get(field) if into else None
                out[field] = self.decode_field(field, value, key=key, out=target, photo=field == photo)
        return out


def _only_image(fields: Iterable[str]) -> str | None:
    """The sample's image field when it has exactly one and it is a bare non-JPEG image
    extension (``png``): the field :meth:`Decoders.decode_sample` decodes as a photo."""
    found = None
    for field in fields:
        if extension(field) in IMAGE_EXTENSIONS and not field.startswith("__"):
            if found is not None:
                return None
            found = field
    if found is None or not resizable(found) or extension(found) in JPEG_EXTENSIONS:
        return None
    return found


def as_decoders(decode: Decoders | Mapping[str, FieldDecoder | None] | None) -> Decoders:
    """Accept the ``decode=`` argument forms of :class:`feedline.Loader`."""
    if isinstance(decode, Decoders):
        return decode
    return Decoders(decode)
