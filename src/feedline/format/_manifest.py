"""The dataset manifest (``manifest.json``): the commit mark of a dataset.

A dataset exists once its manifest exists. The manifest is plain JSON (no
pickle) naming the format version, checksum algorithm, alignment, every shard
with its index (sizes, sample counts, whole-file checksums) and the field
schema. :func:`write_manifest` is atomic; :func:`read_manifest` validates every
value and raises :class:`~feedline.errors.FormatError` naming the path.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from feedline.errors import ChecksumError, FormatError
from feedline.format._atomic import write_atomic
from feedline.format._checksum import ALGOS, checksum
from feedline.format._files import path_argument, read_regular
from feedline.format._index import READABLE_VERSIONS, ShardIndex
from feedline.format._lock import writer_of
from feedline.format._tar import KEY_ESCAPE, source_key

MANIFEST_NAME = "manifest.json"
DEFAULT_ALIGN = 4096
_MAX_MANIFEST = 256 << 20  # bytes; a manifest of a million shards is ~300 MB
_FIX = "re-run `feedline pack` (or `feedline index`) to rebuild the dataset"


@dataclass(frozen=True)
class ShardInfo:
    """One shard of a dataset; ``name`` and ``index`` are relative to the dataset root.

    ``checksum`` and ``index_checksum`` are whole-file checksums, 16 hex digits,
    with the manifest's ``checksum_algo``.
    """

    name: str
    index: str
    size: int
    index_size: int
    num_samples: int
    checksum: str
    index_checksum: str


@dataclass(frozen=True)
class Manifest:
    """A dataset: its shards in order and the schema of its fields.

    ``fields`` maps a field name (``"cam0.jpg"``) to ``{"extension", "count",
    "total_bytes", "min_size", "max_size"}``. ``classes`` are the class names of
    a dataset packed with labels from its folders, in label order (label ``i``
    is ``classes[i]``), else None. ``key_escape`` is ``"percent"`` when pack
    stored each key's last part escaped (``--key file``/``folder``: dots as
    ``%2E``, see :func:`~feedline.format._tar.escape_key_part`), so readers give
    ``__key__`` as the source name (``frame.000123``); None (absent, and in
    datasets packed before it existed) when keys are as stored in the tars.
    An older feedline ignores the field and shows the stored names, so it
    still opens such a dataset and the version is unchanged.
    """

    version: int
    checksum_algo: str
    align: int
    shards: tuple[ShardInfo, ...]
    fields: dict[str, dict[str, Any]]
    num_samples: int
    classes: tuple[str, ...] | None = None
    key_escape: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON document written to ``manifest.json``."""
        doc: dict[str, Any] = {
            "format": "feedline",
            "version": self.version,
            "checksum_algo": self.checksum_algo,
            "align": self.align,
            "num_samples": self.num_samples,
            "fields": self.fields,
            "shards": [vars(s) for s in self.shards],
        }
        if self.classes is not None:
            doc["classes"] = list(self.classes)
        if self.key_escape is not None:
            doc["key_escape"] = self.key_escape
        return doc


def write_manifest(root: str | os.PathLike[str], manifest: Manifest, *, durable: bool = True) -> Path:
    """Atomically write ``root/manifest.json`` (temp, fsync, rename, fsync dir; no fsyncs unless ``durable``)."""
    path = Path(root) / MANIFEST_NAME
    text = json.dumps(manifest.to_json(), indent=1, sort_keys=True) + "\n"
    write_atomic(path, text.encode("utf-8"), durable=durable)
    return path


_MAX_INT = 2**63 - 1  # no size, count or offset on a real file system is larger


def _int(doc: dict[str, Any], name: str, path: Path, minimum: int = 0) -> int:
    value = doc.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= _MAX_INT:
        raise FormatError(f"manifest field {name!r} must be an integer from {minimum} to 2**63 - 1, got {value!r}",
                          path=str(path), fix=_FIX)
    return value


def _str(doc: dict[str, Any], name: str, path: Path) -> str:
    value = doc.get(name)
    if not isinstance(value, str) or not value:
        raise FormatError(f"manifest field {name!r} must be a non-empty string, got {value!r}", path=str(path), fix=_FIX)
    return value


def _relative(doc: dict[str, Any], name: str, path: Path) -> str:
    """A file name that stays inside the dataset folder: relative, no ``..`` part, no NUL."""
    value = _str(doc, name, path)
    parts = value.replace("\\", "/").split("/")
    if os.path.isabs(value) or value.startswith(("/", "\\")) or "\0" in value or ".." in parts \
            or all(p in ("", ".") for p in parts):  # "." or "./": the dataset folder itself
        raise FormatError(
            f"manifest {name} {value!r} points outside the dataset folder: only paths inside it are read",
            path=str(path), fix="this manifest was edited or crafted; repack or re-index the dataset",
        )
    return value


def _classes(doc: dict[str, Any], path: Path) -> tuple[str, ...] | None:
    value = doc.get("classes")
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(c, str) and c for c in value) or len(set(value)) != len(value):
        raise FormatError("manifest 'classes' must be a list of distinct non-empty names", path=str(path), fix=_FIX)
    return tuple(value)


def _key_escape(doc: dict[str, Any], path: Path) -> str | None:
    value = doc.get("key_escape")
    if value is not None and value != KEY_ESCAPE:
        raise FormatError(f"manifest 'key_escape' must be {KEY_ESCAPE!r} or absent, got {value!r}",
                          path=str(path), fix="upgrade feedline, or repack the dataset")
    return value


def source_keys(key_escape: str | None, keys: list[str]) -> list[str]:
    """The keys as the user named the files (``frame.000123``), from the keys stored in a
    shard's index under a manifest's ``key_escape``."""
    return [source_key(k) for k in keys] if key_escape == KEY_ESCAPE else keys


_FIELD_INTS = ("count", "total_bytes", "min_size", "max_size")


def _field(name: str, entry: Any, path: Path) -> dict[str, Any]:
    if not isinstance(entry, dict) or not isinstance(entry.get("extension"), str):
        raise FormatError(f"manifest field {name!r} needs an object with an 'extension'", path=str(path), field=name, fix=_FIX)
    for key in _FIELD_INTS:
        _int(entry, key, path)
    if entry["min_size"] > entry["max_size"]:
        raise FormatError(f"manifest field {name!r} has min_size > max_size", path=str(path), field=name, fix=_FIX)
    return {"extension": entry["extension"], **{key: entry[key] for key in _FIELD_INTS}}


def _shard(doc: Any, path: Path) -> ShardInfo:
    if not isinstance(doc, dict):
        raise FormatError(f"manifest shard entry must be an object, got {doc!r}", path=str(path), fix=_FIX)
    info = ShardInfo(
        name=_relative(doc, "name", path),
        index=_relative(doc, "index", path),
        size=_int(doc, "size", path),
        index_size=_int(doc, "index_size", path),
        num_samples=_int(doc, "num_samples", path),
        checksum=_str(doc, "checksum", path),
        index_checksum=_str(doc, "index_checksum", path),
    )
    for name in ("checksum", "index_checksum"):
        value = getattr(info, name)
        if len(value) != 16 or any(c not in "0123456789abcdef" for c in value):
            raise FormatError(f"manifest {name} {value!r} is not 16 hex digits", path=str(path), shard=info.name, fix=_FIX)
    return info


def _read_bytes(path: Path) -> bytes:
    try:
        return read_regular(path, _MAX_MANIFEST + 1)  # never a FIFO or device: no hang, bounded
    except FileNotFoundError:
        if not path.parent.is_dir():
            raise FormatError(
                f"dataset folder {str(path.parent)!r} does not exist", path=str(path.parent),
                fix="check the path",
            ) from None
        writer = writer_of(path.parent)
        if writer is not None:
            raise FormatError(
                f"no manifest: a feedline pack or index (pid {writer}) is writing this folder now",
                path=str(path), fix="open it once that run has finished (its manifest is written last)",
            ) from None
        raise FormatError(
            "no manifest: this folder holds no complete feedline dataset",
            path=str(path),
            fix=_no_manifest_fix(path.parent),
        ) from None
    except OSError as e:
        raise FormatError(f"manifest cannot be read: {e.strerror}", path=str(path), fix=_FIX) from None


def _no_manifest_fix(folder: Path) -> str:
    """The command that makes a dataset of what ``folder`` holds (a look at its first entries
    only): tars are adopted, class folders of files (an ImageFolder) packed with labels,
    other files packed as they are."""
    tars = subdirs = files = 0
    try:
        with os.scandir(folder) as it:
            for n, entry in enumerate(it):
                if n >= 256:
                    break
                if entry.name.startswith("."):
                    continue
                if entry.is_dir():
                    subdirs += 1
                elif entry.name.endswith(".tar"):
                    tars += 1
                else:
                    files += 1
    except OSError:
        pass
    name = shlex.quote(str(folder))
    out = shlex.quote(f"{folder}-packed" if folder.name else "packed")
    if tars:
        return (f"these are tar shards: adopt them with `feedline index {name}` (a pack's "
                "manifest is written last, so an interrupted `feedline pack` leaves none: rerun it)")
    if subdirs and not files:
        return (f"a folder of class folders (an ImageFolder) is packed first: `feedline pack {name} "
                f"--out {out} --labels "
                "from-folder`, then load that --out folder; or pass a Dataset object to Loader")
    if files:
        return (f"raw files are packed first: `feedline pack {name} --out "
                f"{out}`, then load that "
                "--out folder")
    return "pack it with `feedline pack SRC --out DIR` or adopt tars with `feedline index`"


def _no_twice(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are unique: with a key given twice (``"shards"``, hand-edited
    or crafted), ``json`` would silently keep the last one."""
    doc = dict(pairs)
    if len(doc) != len(pairs):
        twice = next(k for i, (k, _) in enumerate(pairs) if any(k == o for o, _ in pairs[:i]))
        raise ValueError(f"the key {twice!r} is given twice in one object")
    return doc


def _load_json(data: bytes, path: Path) -> dict[str, Any]:
    if len(data) > _MAX_MANIFEST:
        raise FormatError(f"manifest is larger than {_MAX_MANIFEST} bytes", path=str(path), fix=_FIX)
    try:
        doc = json.loads(data.decode("utf-8"), object_pairs_hook=_no_twice)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise FormatError(f"manifest is not valid JSON: {e}", path=str(path), fix=_FIX) from None
    if not isinstance(doc, dict) or doc.get("format") != "feedline":
        raise FormatError("not a feedline manifest", path=str(path), fix=_FIX)
    return doc


def read_manifest(root: str | os.PathLike[str]) -> Manifest:
    """Read and validate ``root/manifest.json``.

    Raises:
        FormatError: the manifest is missing, not JSON, of another version, or
            inconsistent (sample counts, duplicate shards, bad values); the
            error names the path.
    """
    path = Path(path_argument(root, "root")) / MANIFEST_NAME
    return parse_manifest(_read_bytes(path), path)


def parse_manifest(data: bytes, path: str | os.PathLike[str] = MANIFEST_NAME) -> Manifest:
    """Validate manifest bytes (e.g. fetched from an object store); ``path`` names them in errors."""
    path = Path(path)
    doc = _load_json(data, path)
    version = _int(doc, "version", path)
    if version not in READABLE_VERSIONS:
        raise FormatError(f"manifest version {version} is not supported (expected one of {READABLE_VERSIONS})", path=str(path), fix="upgrade feedline or repack")
    algo = doc.get("checksum_algo")
    if algo not in ALGOS:
        raise FormatError(f"manifest checksum_algo {algo!r} is unknown", path=str(path), fix=_FIX)
    raw_shards = doc.get("shards")
    fields = doc.get("fields")
    if not isinstance(raw_shards, list) or not isinstance(fields, dict):
        raise FormatError("manifest needs a 'shards' list and a 'fields' object", path=str(path), fix=_FIX)
    if not raw_shards:  # pack, index and DatasetWriter refuse to write one: an edit emptied it
        raise FormatError("manifest lists no shards: no feedline command writes an empty dataset",
                          path=str(path), fix=_FIX)
    shards = tuple(_shard(s, path) for s in raw_shards)
    names = [s.name for s in shards] + [s.index for s in shards]
    if len(set(names)) != len(names):
        raise FormatError("manifest names a shard or index file twice", path=str(path), fix=_FIX)
    num_samples = _int(doc, "num_samples", path)
    if num_samples != sum(s.num_samples for s in shards):
        raise FormatError("manifest num_samples disagrees with the sum over its shards", path=str(path), fix=_FIX)
    return Manifest(
        version=version,
        checksum_algo=str(algo),
        align=_int(doc, "align", path),
        shards=shards,
        fields={name: _field(name, entry, path) for name, entry in fields.items()},
        num_samples=num_samples,
        classes=_classes(doc, path),
        key_escape=_key_escape(doc, path),
    )


def field_stats(indexes: list[ShardIndex]) -> dict[str, dict[str, Any]]:
    """The manifest's field schema computed from shard indexes."""
    stats: dict[str, dict[str, Any]] = {}
    for index in indexes:
        field_ids = index.members["field"]
        sizes = index.members["size"].astype(np.int64)
        for fid, name in enumerate(index.fields):
            mine = sizes[field_ids == fid]
            if not len(mine):
                continue
            entry = stats.setdefault(
                name,
                {"extension": name.rsplit(".", 1)[-1], "count": 0, "total_bytes": 0,
                 "min_size": int(mine.min()), "max_size": int(mine.max())},
            )
            entry["count"] += len(mine)
            entry["total_bytes"] += int(mine.sum())
            entry["min_size"] = min(entry["min_size"], int(mine.min()))
            entry["max_size"] = max(entry["max_size"], int(mine.max()))
    return dict(sorted(stats.items()))


def load_index(root: str | os.PathLike[str], info: ShardInfo) -> ShardIndex:
    """Open and validate the index of shard ``info`` of the dataset at ``root``.

    Checks the shard and index file sizes against the manifest first, then
    everything :meth:`ShardIndex.load` checks.

    Raises:
        FormatError: a missing file, a size that differs from the manifest
            (truncated shard, trailing bytes), or an invalid index.
    """
    shard_path = Path(root) / info.name
    index_path = Path(root) / info.index
    try:
        shard_size = shard_path.stat().st_size
        index_size = index_path.stat().st_size
    except OSError as e:
        raise FormatError(f"cannot open shard: {e.strerror}: {e.filename}", shard=info.name, fix=_FIX) from None
    if shard_size != info.size:
        raise FormatError(
            f"shard is {shard_size} bytes, the manifest says {info.size}: truncated or has trailing bytes",
            shard=info.name,
            fix="re-copy the shard from its source, or repack",
        )
    _check_index_size(info, index_size)
    return check_index_count(info, ShardIndex.load(index_path, shard_size=shard_size, shard=info.name))


def index_from_bytes(info: ShardInfo, data: bytes | memoryview, *, shard_size: int,
                     checksum_algo: str) -> ShardIndex:
    """Validate index bytes fetched from anywhere (an object store, say) against
    the manifest entry ``info``: size, whole-file checksum, every record, sample count.

    Raises:
        FormatError / ChecksumError: naming the shard, with the fix.
    """
    _check_index_size(info, len(data))
    if f"{checksum(data, checksum_algo):016x}" != info.index_checksum:
        raise ChecksumError("index checksum differs from the manifest", shard=info.name, fix=_FIX)
    return check_index_count(info, ShardIndex.from_bytes(data, shard_size=shard_size, shard=info.name))


def _check_index_size(info: ShardInfo, index_size: int) -> None:
    if index_size != info.index_size:
        raise FormatError(
            f"index is {index_size} bytes, the manifest says {info.index_size}",
            shard=info.name,
            fix="re-copy the .idx file, or rebuild it with `feedline index`",
        )


def check_index_count(info: ShardInfo, index: ShardIndex) -> ShardIndex:
    """``index`` if it holds the number of samples the manifest records for it.

    Raises:
        FormatError: the counts differ.
    """
    if index.num_samples != info.num_samples:
        raise FormatError(
            f"index holds {index.num_samples} samples, the manifest says {info.num_samples}",
            shard=info.name,
            fix=_FIX,
        )
    return index
