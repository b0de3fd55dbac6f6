"""DatasetWriter / pack_samples: a dataset from Python samples (HDF5, Parquet, SQL, a Dataset object...).

``feedline pack`` reads files in folders; data that lives in a table, an array
store or a ``torch.utils.data.Dataset`` is written sample by sample instead::

    with DatasetWriter("data/train", shard_size="256MiB") as w:
        for i, (img, label) in enumerate(source):
            w.write({"__key__": f"{i:06d}", "jpg": jpeg_bytes, "cls": label,
                     "depth": depth_array, "meta": {"id": i}})

The result is the dataset ``feedline pack`` writes (the same shards through
:class:`~feedline.format.ShardWriter`, indexes with the field schema and the
int64 label column, checksums, ``align``, the folder's one-writer lock and the
manifest written last), so ``Loader``, ``verify`` and ``inspect`` read it
unchanged. Values become member bytes by their type (:func:`encode_value`):

==================  =============================================================
bytes, memoryview   as given; the field's extension says the type (``jpg``, ``png``...)
PIL image           encoded as a ``jpg`` (quality 95), ``png`` or ``webp`` field says; ``img`` -> ``img.png``
numpy array         ``.npy`` (``numpy.save`` format, no pickle): ``depth`` -> ``depth.npy``;
                    a raw dtype field (``x.f32``) takes the bytes of an array of that dtype;
                    a ``uint8`` HxW(xC) array in a ``jpg``/``png``/``webp`` field is encoded
torch tensor        as its numpy array (moved to CPU), never pickled
int, numpy integer  a label (``cls``, ``label``, ``target``...: the index's int64 column);
                    another name gets ``.cls``: ``year`` -> ``year.cls``
float, numpy scalar a 0-d ``.npy``
str                 UTF-8; a name without extension gets ``.txt``
dict, list          JSON; a name without extension gets ``.json``
==================  =============================================================

``__key__`` is the sample's key (a str; default: its running number, 9
digits); keys are unique across the whole dataset (a repeat is an error naming
it). A key whose last part holds a dot (``frame.000123``) is stored escaped
and read back as written (as ``pack --key file`` does).

Nothing replaces an existing dataset until :meth:`DatasetWriter.close`: shards
are written into a hidden staging folder inside ``out`` and moved into place,
then the manifest is written. An exception inside the ``with`` block (or
:meth:`DatasetWriter.abort`) removes the staging folder and leaves the folder
as it was: a dataset already there stays intact and readable.

Several processes (one per rank) write parts of one dataset with ``part=``:
each writes ``out/parts/part-NNNNN/``, a complete dataset of its own; then one
process calls :func:`merge_parts` to move every part's shards into ``out`` and
write one manifest, in part order.
"""

from __future__ import annotations

import functools
import io
import json
import os
import shutil
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence, Sized
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from feedline.errors import ArgumentError, ConfigError, FeedlineError
from feedline.format._atomic import fsync_dir, named, remove_quietly
from feedline.format._checksum import check_algo
from feedline.format._files import path_argument
from feedline.format._index import FORMAT_VERSION, ShardIndex
from feedline.format._lock import DATASET_LOCK, hold_dataset, release
from feedline.format._manifest import (
    MANIFEST_NAME,
    Manifest,
    ShardInfo,
    field_stats,
    load_index,
    read_manifest,
    write_manifest,
)
from feedline.format._pack import SHARD_PATTERN, PackProgress, _clean_stale
from feedline.format._schema import LABELS, RAW_DTYPES
from feedline.format._tar import (
    BLOCK,
    END_OF_ARCHIVE,
    KEY_ESCAPE,
    escape_key_part,
    header_upper_bound,
    round_up,
)
from feedline.format._writer import ShardWriter, check_align
from feedline.units import parse_bytes

STAGING = ".feedline-staging"
"""The hidden folder inside ``out`` where a :class:`DatasetWriter` writes its shards until it commits."""
PARTS = "parts"
KEY = "__key__"
_IMAGE_EXTS = frozenset({"jpg", "jpeg", "png", "webp", "bmp", "gif", "tif", "tiff", "wav", "flac", "mp3", "mp4"})
_PIL_FORMATS = {"jpg": "JPEG", "jpeg": "JPEG", "png": "PNG", "webp": "WEBP"}
JPEG_QUALITY = 95
"""The JPEG quality an image value is encoded with in a ``jpg`` field (lossy: give bytes to keep yours)."""
_FIX_VALUE = ("give bytes (encoded as the field's extension says), a numpy array or torch tensor, "
              "an int label, a str, or a dict/list (JSON)")

ProgressArg = bool | Callable[[PackProgress], None] | None


def _ext(field: str) -> tuple[str, bool]:
    """The field's type word (its last dotted part, lower case) and whether it had a dot."""
    return field.rsplit(".", 1)[-1].lower(), "." in field


def _npy(array: np.ndarray, key: str, field: str) -> bytes:
    if array.dtype.hasobject:
        raise ConfigError(f"{key}.{field}: an array of dtype object needs pickle, which feedline never writes",
                          key=key, field=field, fix="convert it to a numeric dtype, or store it as JSON (a list)")
    if array.dtype.fields is not None or array.dtype.subdtype is not None:
        buf = io.BytesIO()  # structured: numpy writes its descr
        np.lib.format.write_array(buf, np.asanyarray(array), allow_pickle=False)
        return buf.getvalue()
    array = np.asarray(array)
    if not array.flags.c_contiguous:
        array = array.copy(order="C")  # not np.ascontiguousarray: it makes a 0-d array 1-d
    return _npy_prefix(array.dtype.str, array.shape) + array.tobytes()


@functools.lru_cache(maxsize=256)
def _npy_prefix(dtype: str, shape: tuple[int, ...]) -> bytes:
    """The ``.npy`` header numpy writes for a C-ordered array of ``dtype`` and ``shape``
    (made once per field shape: ``write_array`` per sample costs more than the copy)."""
    fmt = np.lib.format
    header = {"descr": fmt.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": shape}
    buf = io.BytesIO()
    try:
        fmt.write_array_header_1_0(buf, header)
    except ValueError:  # a header over 64 KiB (thousands of dimensions)
        buf = io.BytesIO()
        fmt.write_array_header_2_0(buf, header)
    return buf.getvalue()


def _is_tensor(value: object) -> bool:
    return type(value).__module__.startswith("torch") and hasattr(value, "detach")


def _is_image(value: object) -> bool:
    return type(value).__module__.startswith("PIL.") and hasattr(value, "save") and hasattr(value, "mode")


def _encode_image(key: str, field: str, ext: str, value: Any) -> bytes:
    """A PIL image or a ``uint8`` array (``H, W`` or ``H, W, 1|3|4``) encoded as ``ext`` says
    (JPEG at :data:`JPEG_QUALITY`, PNG and WebP lossless)."""
    from PIL import Image

    if isinstance(value, np.ndarray):
        if value.dtype != np.uint8 or not (value.ndim == 2 or (value.ndim == 3 and value.shape[2] in (1, 3, 4))):
            raise ConfigError(f"{key}.{field}: an array encoded as .{ext} must be uint8 HxW or HxWxC (C 1, 3 or 4), "
                              f"got {value.dtype.name} {value.shape}", key=key, field=field,
                              fix=f"convert it (CHW tensors: .permute(1, 2, 0)), or name the field '{field}.npy'")
        value = Image.fromarray(value[..., 0] if value.ndim == 3 and value.shape[2] == 1 else value)
    fmt = _PIL_FORMATS[ext]
    if fmt == "JPEG" and value.mode not in ("L", "RGB", "CMYK"):
        value = value.convert("RGB")
    options: dict[str, Any] = {"quality": JPEG_QUALITY} if fmt == "JPEG" else {"lossless": True} if fmt == "WEBP" else {}
    buf = io.BytesIO()
    value.save(buf, format=fmt, **options)
    return buf.getvalue()


def encode_value(key: str, field: str, value: Any) -> tuple[str, bytes | memoryview]:
    """The member (field name, bytes) a sample value is stored as (table in the module docstring).

    Raises:
        ConfigError: a value of another type, a numpy array for an image field
            (``jpg``: encode it first, or name the field ``.npy``), an array whose
            dtype differs from a raw field's (``x.f32`` needs float32), an object
            array; naming ``key`` and ``field``.
    """
    if not isinstance(field, str) or not field or field.startswith(".") or field.endswith("."):
        raise ConfigError(f"sample {key!r}: field name {field!r} must be a non-empty str like 'jpg' or 'depth.npy'",
                          key=key, field=str(field), fix="name each field by what it holds: jpg, cls, depth.npy, meta.json")
    ext, dotted = _ext(field)
    if isinstance(value, bytes | bytearray | memoryview):
        return field, value if not isinstance(value, bytearray) else bytes(value)
    if _is_image(value):
        if ext in _PIL_FORMATS:
            return field, _encode_image(key, field, ext, value)
        if not dotted:
            return field + ".png", _encode_image(key, field, "png", value)
        raise ConfigError(f"{key}.{field}: an image is encoded as jpg, png or webp, not .{ext}", key=key, field=field,
                          fix=f"name the field '{field.rsplit('.', 1)[0]}.png' (lossless) or '.jpg'")
    if _is_tensor(value):
        value = value.detach().cpu().numpy()
    if isinstance(value, bool | np.bool_):
        value = np.asarray(value)
    if isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_):
        if ext in LABELS or (ext == "txt" and dotted and field.rsplit(".", 2)[-2].lower() in LABELS):
            return field, str(int(value)).encode()
        if not dotted:
            return field + ".cls", str(int(value)).encode()
        raise ConfigError(f"{key}.{field}: an int is stored as a label, which this field's extension {ext!r} is not",
                          key=key, field=field, fix=f"name the field 'cls' or '{field.rsplit('.', 1)[0]}.cls', or give bytes")
    if isinstance(value, float | np.generic):
        value = np.asarray(value)
    if isinstance(value, np.ndarray):
        if ext in _PIL_FORMATS:
            return field, _encode_image(key, field, ext, value)
        if ext == "npy":
            return field, _npy(value, key, field)
        if ext in RAW_DTYPES:
            want = np.dtype(RAW_DTYPES[ext])
            if value.dtype != want:
                raise ConfigError(f"{key}.{field}: a .{ext} field holds {want.name}, this array is {value.dtype.name}",
                                  key=key, field=field, fix=f"convert it (array.astype(np.{want.name})) or name the field .npy")
            return field, np.ascontiguousarray(value).data.cast("B")
        if not dotted and ext not in _IMAGE_EXTS and ext not in LABELS and ext not in ("txt", "json"):
            return field + ".npy", _npy(value, key, field)
        raise ConfigError(f"{key}.{field}: a numpy array cannot be stored as .{ext} as it is",
                          key=key, field=field,
                          fix=f"encode it yourself (e.g. simplejpeg/PIL to bytes), or name the field '{field}.npy'")
    if isinstance(value, str):
        return (field if dotted or ext in ("txt", "json") or ext in LABELS else field + ".txt"), value.encode("utf-8")
    if isinstance(value, dict | list | tuple):
        try:
            text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{key}.{field}: not JSON: {e}", key=key, field=field,
                              fix="give JSON values (str, int, float, bool, None, lists, dicts)") from None
        return (field if dotted or ext == "json" else field + ".json"), text.encode("utf-8")
    raise ConfigError(f"{key}.{field}: cannot store a {type(value).__name__}", key=key, field=field, fix=_FIX_VALUE)


class _Bar:
    """A rich progress bar on stderr: samples written (of ``total`` when known), MB/s."""

    def __init__(self, total: int | None) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        columns = [TextColumn("writing"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[mb]:.0f} MB"),
                   TimeElapsedColumn()]
        self.bar = Progress(*columns, console=Console(stderr=True), transient=False)
        self.task = self.bar.add_task("samples", total=total, mb=0.0)
        self.bar.start()

    def __call__(self, p: PackProgress) -> None:
        self.bar.update(self.task, completed=p.files_done, mb=p.bytes_done / 1e6)

    def close(self) -> None:
        self.bar.stop()


class DatasetWriter:
    """Write a feedline dataset from Python samples (dicts of field -> value), one shard after another.

    Args:
        out: the dataset folder (created). A dataset already there is replaced only
            when this writer closes without error.
        shard_size: target shard size, bytes or a string (``"256MiB"``); samples are
            never split (one larger than this gets a shard of its own).
        align: 0 or a multiple of 512 (4096 for O_DIRECT / GDS), as ``pack``.
        checksum_algo: ``"xxh3"`` or ``"crc32c"``.
        durable: fsync shards, indexes and the manifest (default), as ``pack``.
        classes: class names in label order (``cls`` ``i`` is ``classes[i]``), kept in the manifest.
        progress: True draws a progress bar on stderr; a callable receives a
            :class:`~feedline.format.PackProgress` after each sample (``files_*`` count samples).
        total: the number of samples to come, for the bar (optional).
        part: write part ``part`` of a dataset written by several processes, into
            ``out/parts/part-NNNNN/``; join them with :func:`merge_parts`.

    Raises:
        ConfigError: bad arguments.
        WriteError: another writer (pack, index, a DatasetWriter) holds the folder.
    """

    def __init__(self, out: str | os.PathLike[str], *, shard_size: int | str = 1 << 30, align: int = 0,
                 checksum_algo: str = "xxh3", durable: bool = True, classes: Iterable[str] | None = None,
                 progress: ProgressArg = None, total: int | None = None, part: int | None = None) -> None:
        size = parse_bytes(shard_size, name="shard_size")
        if size <= 0:
            raise ConfigError(f"shard_size: must be a positive number of bytes, got {shard_size!r}",
                              field="shard_size", fix="e.g. shard_size='256MiB'")
        if part is not None and (isinstance(part, bool) or not isinstance(part, int) or part < 0):
            raise ConfigError(f"part: must be an integer >= 0 (the rank), got {part!r}", field="part")
        if progress is not None and not isinstance(progress, bool) and not callable(progress):
            raise ArgumentError(f"progress must be True/False or callable, got {progress!r}", field="progress")
        root = Path(path_argument(out, "out"))
        self.out = root / PARTS / f"part-{part:05d}" if part is not None else root
        if self.out.exists() and not self.out.is_dir():
            raise ConfigError(f"out {str(self.out)!r} is a file, not a folder", path=str(self.out),
                              fix="give a folder (it is created)")
        self.shard_size = size
        self.align = check_align(align)
        self.algo = check_algo(checksum_algo)
        self.durable = durable
        self.classes = tuple(classes) if classes is not None else None
        self.out.mkdir(parents=True, exist_ok=True)
        self._lock = hold_dataset(self.out)
        self._staging = self.out / STAGING
        try:
            shutil.rmtree(self._staging, ignore_errors=True)  # of a writer killed earlier (we hold the lock)
            self._staging.mkdir()
        except BaseException:
            release(self._lock, self.out / DATASET_LOCK)
            raise
        self._shard: ShardWriter | None = None
        self._infos: list[ShardInfo] = []
        self._indexes: list[ShardIndex] = []
        self._keys: set[str] = set()
        self._escaped = False
        self._count = 0
        self._bytes = 0
        self._total = total or 0
        self._bar = _Bar(total) if progress is True else None
        self._progress: Callable[[PackProgress], None] | None = (
            self._bar if self._bar is not None else (progress if callable(progress) else None))
        self.manifest: Manifest | None = None
        self._closed = False

    @property
    def num_samples(self) -> int:
        """Samples written so far."""
        return self._count

    def write(self, sample: Mapping[str, Any]) -> None:
        """Append one sample: ``{"__key__": str (optional), field: value, ...}``.

        Raises:
            ConfigError: a key written before, a sample without fields, a value that
                cannot be stored (:func:`encode_value`), naming the key and field.
            OSError: a shard that cannot be written (named).
        """
        if self._closed:
            raise ValueError("write on a closed DatasetWriter")
        if not isinstance(sample, Mapping):
            raise ConfigError(f"a sample is a dict of field -> value, got {type(sample).__name__}",
                              fix='write({"__key__": "000001", "jpg": data, "cls": 3})')
        key = sample.get(KEY, f"{self._count:09d}")
        if not isinstance(key, str) or not key:
            raise ConfigError(f"__key__ must be a non-empty str, got {key!r}", key=str(key),
                              fix='e.g. "__key__": f"{i:06d}"')
        if key in self._keys:
            raise ConfigError(f"sample key {key!r} written twice", key=key,
                              fix="give every sample its own __key__ (or leave it out: samples are numbered)")
        fields: dict[str, bytes | memoryview] = {}
        for field, value in sample.items():
            if field == KEY:
                continue
            name, data = encode_value(key, field, value)
            if name in fields:
                raise ConfigError(f"sample {key!r}: fields {field!r} and another both become {name!r}",
                                  key=key, field=name, fix="give the fields distinct names")
            fields[name] = data
        slash = key.rfind("/") + 1
        stored = key[:slash] + escape_key_part(key[slash:])
        self._escaped |= stored != key
        need = sum(header_upper_bound(f"{stored}.{f}", len(d), self.align if n == 0 else 0) + round_up(len(d), BLOCK)
                   for n, (f, d) in enumerate(fields.items()))
        shard = self._shard
        if shard is not None and shard.num_samples and shard.position + need > self.shard_size - len(END_OF_ARCHIVE):
            self._finish_shard()
            shard = None
        path = self._staging / SHARD_PATTERN.format(len(self._infos))
        try:
            if shard is None:
                shard = self._shard = ShardWriter(path, align=self.align, checksum_algo=self.algo, durable=self.durable)
            shard.write_sample(stored, fields)
        except OSError as e:
            raise named(e, path) from None
        self._keys.add(key)
        self._count += 1
        self._bytes += sum(len(d) for d in fields.values())
        if self._progress is not None:
            self._progress(PackProgress(self._count, self._total, self._bytes, 0, len(self._infos), 0, 0))

    def write_all(self, samples: Iterable[Mapping[str, Any]]) -> None:
        """:meth:`write` each sample."""
        for s in samples:
            self.write(s)

    def _finish_shard(self) -> None:
        shard, self._shard = self._shard, None
        if shard is None:
            return
        if not shard.num_samples:  # its first sample was refused (the caller went on)
            shard.abort()
            return
        try:
            self._infos.append(shard.close())
        except OSError as e:
            raise named(e, shard.path) from None
        assert shard.index is not None
        self._indexes.append(shard.index)

    def close(self) -> Manifest:
        """Finish the last shard, move the shards into ``out`` and write the manifest; return it.

        Until the manifest is written a reader finds no dataset (or the previous one,
        until its manifest is removed, just before the shards are moved).
        """
        if self.manifest is not None:
            return self.manifest
        if self._closed:
            raise ValueError("close on an aborted DatasetWriter")
        try:
            self._finish_shard()
            if not self._count:
                raise ConfigError(f"no samples were written to {str(self.out)!r}", path=str(self.out),
                                  fix="write at least one sample (an empty iterable, or every sample refused?)")
            manifest = Manifest(
                version=FORMAT_VERSION, checksum_algo=self.algo, align=self.align, shards=tuple(self._infos),
                fields=field_stats(self._indexes), num_samples=self._count, classes=self.classes,
                key_escape=KEY_ESCAPE if self._escaped else None,
            )
            _commit(self.out, self._staging, manifest, self.durable)
        except BaseException:
            self.abort()
            raise
        self.manifest = manifest
        self._end()
        return manifest

    def abort(self) -> None:
        """Drop everything written; ``out`` stays as it was (a previous dataset intact)."""
        if self._closed:
            return
        if self._shard is not None:
            self._shard.abort()
            self._shard = None
        shutil.rmtree(self._staging, ignore_errors=True)
        self._end()

    def _end(self) -> None:
        self._closed = True
        if self._bar is not None:
            self._bar.close()
        release(self._lock, self.out / DATASET_LOCK)

    def __enter__(self) -> DatasetWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            warnings.warn(f"DatasetWriter({str(self.out)!r}) was never closed: nothing was written",
                          ResourceWarning, stacklevel=1)
            self.abort()


def _commit(out: Path, staging: Path, manifest: Manifest, durable: bool) -> None:
    """Replace the dataset in ``out`` with the shards in ``staging`` and write ``manifest`` last."""
    if (out / MANIFEST_NAME).exists():
        remove_quietly(out / MANIFEST_NAME)
        if durable:
            fsync_dir(out)
    for info in manifest.shards:
        os.replace(staging / info.name, out / info.name)
        os.replace(staging / info.index, out / info.index)
    _clean_stale(out, len(manifest.shards))
    write_manifest(out, manifest, durable=durable)
    shutil.rmtree(staging, ignore_errors=True)


def pack_samples(samples: Iterable[Any], out: str | os.PathLike[str], *, fields: Sequence[str] | None = None,
                 progress: ProgressArg = None, **options: Any) -> Manifest:
    """Write every sample of ``samples`` into the dataset ``out`` (:class:`DatasetWriter`) and return its manifest.

    A sample is a dict (``{"__key__": ..., field: value}``) or, with ``fields``, a tuple
    such as a torchvision dataset's ``(image, label)``: ``pack_samples(ds, out,
    fields=("png", "cls"))`` (keys are then the running number).
    ``options`` are :class:`DatasetWriter`'s (``shard_size``, ``align``, ``classes``, ``part``...).
    The bar's total is ``len(samples)`` when it has one. An exception from the
    iterable (or a bad sample) leaves ``out`` as it was.
    """
    total = options.pop("total", None)
    if total is None and isinstance(samples, Sized):
        total = len(samples)
    names = tuple(fields) if fields is not None else None
    with DatasetWriter(out, progress=progress, total=total, **options) as w:
        for item in samples:
            w.write(item if isinstance(item, Mapping) else _as_sample(item, names, w.num_samples))
    assert w.manifest is not None
    return w.manifest


def _as_sample(item: Any, fields: tuple[str, ...] | None, n: int) -> dict[str, Any]:
    if fields is None:
        raise ConfigError(f"sample {n} is a {type(item).__name__}, not a dict of field -> value",
                          fix="pass fields=('jpg', 'cls') to name the parts of tuple samples (a torchvision dataset's)")
    if not isinstance(item, tuple | list) or len(item) != len(fields):
        raise ConfigError(f"sample {n} is {type(item).__name__} of {len(item) if hasattr(item, '__len__') else '?'} "
                          f"values for fields {fields}", fix="give one field name per value of a sample")
    return dict(zip(fields, item, strict=True))


def merge_parts(out: str | os.PathLike[str], *, durable: bool = True) -> Manifest:
    """Join the parts written by ``DatasetWriter(out, part=k)`` into one dataset in ``out``.

    Every part's shards move into ``out`` (renumbered, parts in order), the manifest
    is written last and ``out/parts`` is removed. Keys must be unique across parts.

    Raises:
        ConfigError: no parts, parts with different ``checksum_algo``/``align``/``classes``,
            a key in two parts.
        FormatError: a part without its manifest (not closed, or failed).
    """
    root = Path(path_argument(out, "out"))
    parts = sorted(p for p in (root / PARTS).glob("part-*") if p.is_dir())
    if not parts:
        raise ConfigError(f"no parts under {str(root / PARTS)!r}", path=str(root),
                          fix="write them with DatasetWriter(out, part=rank) first")
    lock = hold_dataset(root)
    try:
        manifests = [read_manifest(p) for p in parts]
        first = manifests[0]
        for p, m in zip(parts, manifests, strict=True):
            if (m.checksum_algo, m.align, m.classes) != (first.checksum_algo, first.align, first.classes):
                raise ConfigError(f"part {p.name} was written with other checksum_algo/align/classes than {parts[0].name}",
                                  path=str(p), fix="write every part with the same options")
        seen: dict[str, str] = {}
        staging = root / STAGING
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        infos: list[ShardInfo] = []
        indexes: list[ShardIndex] = []
        escaped = any(m.key_escape for m in manifests)
        for p, m in zip(parts, manifests, strict=True):
            for info in m.shards:
                index = load_index(p, info)
                for k in index.keys:
                    if k in seen:
                        raise ConfigError(f"sample key {k!r} is in {seen[k]} and {p.name}", key=k,
                                          fix="give each rank its own keys (e.g. prefix them with the rank)")
                    seen[k] = p.name
                name = SHARD_PATTERN.format(len(infos))
                try:
                    os.link(p / info.name, staging / name)  # no copy: the part's file is removed below
                except OSError:
                    shutil.copyfile(p / info.name, staging / name)
                shutil.copyfile(p / info.index, staging / (name + ".idx"))
                infos.append(ShardInfo(name=name, index=name + ".idx", size=info.size, index_size=info.index_size,
                                       num_samples=info.num_samples, checksum=info.checksum,
                                       index_checksum=info.index_checksum))
                indexes.append(index)
        manifest = Manifest(version=FORMAT_VERSION, checksum_algo=first.checksum_algo, align=first.align,
                            shards=tuple(infos), fields=field_stats(indexes),
                            num_samples=sum(i.num_samples for i in infos), classes=first.classes,
                            key_escape=KEY_ESCAPE if escaped else None)
        try:
            _commit(root, staging, manifest, durable)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        shutil.rmtree(root / PARTS, ignore_errors=True)
    except FeedlineError:
        shutil.rmtree(root / STAGING, ignore_errors=True)
        raise
    finally:
        release(lock, root / DATASET_LOCK)
    return manifest

