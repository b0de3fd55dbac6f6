"""verify() and inspect(): check every checksum of a dataset, summarise its layout."""

from __future__ import annotations

import mmap
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from feedline.errors import FeedlineError
from feedline.format._checksum import checksum_function, hasher, hexdigest
from feedline.format._files import open_regular
from feedline.format._index import ShardIndex
from feedline.format._manifest import Manifest, ShardInfo, load_index, read_manifest, source_keys
from feedline.format._tarwalk import headers_match

_CHUNK = 8 << 20


@dataclass(frozen=True)
class Problem:
    """One mismatch found by :func:`verify`; ``key``/``field`` are None for whole files."""

    shard: str
    key: str | None
    field: str | None
    message: str

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)

    def __str__(self) -> str:
        where = self.shard + (f" key={self.key!r}" if self.key else "") + (f" field={self.field!r}" if self.field else "")
        return f"{where}: {self.message}"


def _file_checksum(path: Path, algo: str, size: int) -> str | None:
    """The file's checksum, or None when it is not ``size`` bytes (then it is not read)."""
    h = hasher(algo)
    with open_regular(path) as f:
        if os.fstat(f.fileno()).st_size != size:
            return None
        data = f.read(_CHUNK)
        while data:
            h.update(data)
            data = f.read(_CHUNK)
    return hexdigest(h.intdigest())


def _verify_names(path: Path, info: ShardInfo, index: ShardIndex, keys: list[str]) -> list[Problem]:
    """The tar's own member names, offsets and sizes against the index: what ``tar x`` and
    WebDataset see must be what the loader reads (an index whose keys were rewritten, or
    one made for another tar, passes every checksum the manifest records). Called after
    :func:`headers_match` said no: ``tarfile`` finds each difference."""
    from feedline.format._adopt import _scan  # the tar reader of `feedline index`

    try:
        members = {off: (key, field, size) for key, field, off, size in _scan(path, info.name)}
    except FeedlineError as e:
        return [Problem(info.name, e.place.get("key"), e.place.get("field"), f"the tar's own headers: {e.message}")]
    problems: list[Problem] = []
    rec = index.members
    for s, fid, off, size in zip(rec["sample"].tolist(), rec["field"].tolist(), rec["offset"].tolist(),
                                 rec["size"].tolist(), strict=True):
        want = (index.keys[s], index.fields[fid])
        got = members.pop(off, None)
        if got is None:
            message = f"no tar member starts at byte {off}: the index does not describe this tar"
        elif got[:2] != want or got[2] != size:
            message = (f"the tar names the member at byte {off} {got[0]}.{got[1]} ({got[2]} bytes), the index "
                       f"{want[0]}.{want[1]} ({size} bytes): `tar x` and WebDataset would see other samples")
        else:
            continue
        problems.append(Problem(info.name, keys[s], want[1], message))
    for off, (key, field, size) in sorted(members.items())[:20]:
        problems.append(Problem(info.name, key, field, f"tar member {key}.{field} ({size} bytes at byte {off}) "
                                "is not in the index: the loader never reads it"))
    return problems


def _verify_members(root: Path, info: ShardInfo, algo: str, key_escape: str | None) -> list[Problem]:
    index = load_index(root, info)
    keys = source_keys(key_escape, index.keys)
    path = root / info.name
    fn = checksum_function(algo)
    problems: list[Problem] = []
    if index.shard_size == 0:
        return problems
    with open_regular(path) as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        view = memoryview(mm)
        try:
            names = [] if headers_match(view, index) else _verify_names(path, info, index, keys)
            rec = index.members
            for i, (s, fid, off, size, want) in enumerate(
                zip(rec["sample"].tolist(), rec["field"].tolist(), rec["offset"].tolist(),
                    rec["size"].tolist(), rec["checksum"].tolist(), strict=True)
            ):
                if fn(view[off : off + size]) != want:
                    problems.append(Problem(info.name, keys[s], index.fields[fid], f"member {i} checksum mismatch"))
            problems += _verify_columns(view, index, keys, info.name)
        finally:
            view.release()
    return names + problems


def _verify_columns(view: memoryview, index: ShardIndex, keys: list[str], shard: str) -> list[Problem]:
    """Each column value of the index (format version 3) against its member's bytes: the
    loader gathers the column and never reads the member, so an index whose columns were
    rewritten (checksums and all) would give other values than ``tar x`` and WebDataset."""
    problems: list[Problem] = []
    for name, column in index.columns.items():
        rows = index.field_rows(name)
        values = np.ascontiguousarray(column).reshape(len(column), -1).view(np.uint8)
        nb = values.shape[1]
        starts = (index.members["offset"][rows].astype(np.int64) + index.aux[rows]).tolist()
        for s, start in enumerate(starts):
            if view[start : start + nb] != values[s].data:
                problems.append(Problem(shard, keys[s], name, "the index's column value differs from the "
                                        "member's bytes: rebuild the index with `feedline index`"))
                if len(problems) >= 20:
                    return problems
    return problems


def verify_shard(root: str | os.PathLike[str], info: ShardInfo, algo: str, *,
                 key_escape: str | None = None) -> list[Problem]:
    """Check one shard: file sizes, whole-file checksums, index, every member.

    ``key_escape`` is the manifest's: problems then name keys as the source files were
    named (``frame.000123``, not the stored ``frame%2E000123``)."""
    root = Path(root)
    problems: list[Problem] = []
    for name, want, what, size in ((info.name, info.checksum, "shard", info.size),
                                   (info.index, info.index_checksum, "index", info.index_size)):
        try:
            got = _file_checksum(root / name, algo, size)
        except OSError as e:
            return [Problem(info.name, None, None, f"cannot read {what} file {name!r}: {e.strerror}")]
        if got is None:
            return [Problem(info.name, None, None, f"{what} file {name!r} is not the {size} bytes the "
                            "manifest records: truncated, extended or replaced")]
        if got != want:
            problems.append(Problem(info.name, None, None, f"{what} file checksum {got} != manifest {want}"))
    try:
        problems.extend(_verify_members(root, info, algo, key_escape))
    except FeedlineError as e:
        problems.append(Problem(info.name, e.place.get("key"), e.place.get("field"), e.message))
    return problems


def verify(root: str | os.PathLike[str]) -> list[Problem]:
    """Check every checksum of the dataset at ``root``: each shard file, each
    index file and each member payload. Returns the problems found (empty: ok).

    Raises:
        FormatError: no (valid) manifest at ``root``.
    """
    manifest = read_manifest(root)
    problems: list[Problem] = []
    for info in manifest.shards:
        problems.extend(verify_shard(root, info, manifest.checksum_algo, key_escape=manifest.key_escape))
    return problems


def unlisted_files(root: str | os.PathLike[str], manifest: Manifest | None = None) -> list[str]:
    """Shard and index files (``*.tar``, ``*.idx``) in the dataset's folders that its
    manifest does not name, as paths relative to ``root``, sorted.

    They are not part of the dataset (the loader never reads them): left over from an
    earlier run, or copied in beside an older manifest, in which case samples the user
    expects are missing. Only ``root`` and the folders of listed shards are looked at.
    """
    root = Path(root)
    manifest = manifest if manifest is not None else read_manifest(root)
    named = {os.path.normpath(n) for info in manifest.shards for n in (info.name, info.index)}
    folders = {"."} | {os.path.dirname(n) or "." for n in named}
    found: list[str] = []
    for folder in sorted(folders):
        try:
            entries = list(os.scandir(root / folder))
        except OSError:
            continue
        for entry in entries:
            rel = os.path.normpath(os.path.join(folder, entry.name))
            if entry.name.endswith((".tar", ".idx")) and rel not in named and entry.is_file():
                found.append(rel)
    return sorted(found)


def inspect(root: str | os.PathLike[str], align: int = 4096) -> dict[str, Any]:
    """A JSON-ready summary: shards, samples, fields, sizes, how many samples start aligned.

    Raises:
        FormatError: no valid manifest, or a shard whose index cannot be opened.
    """
    manifest = read_manifest(root)
    shards = []
    aligned_total = 0
    for info in manifest.shards:
        index = load_index(root, info)
        starts = index.members["offset"][index.sample_start[:-1]] if index.num_samples else np.zeros(0, np.uint64)
        aligned = int(np.count_nonzero(starts % np.uint64(align) == 0))
        aligned_total += aligned
        payload = int(index.members["size"].sum())
        shards.append({**vars(info), "payload_bytes": payload, "aligned_samples": aligned})
    return {
        "root": str(root),
        "version": manifest.version,
        "checksum_algo": manifest.checksum_algo,
        "align": manifest.align,
        "num_samples": manifest.num_samples,
        "num_shards": len(manifest.shards),
        "total_bytes": sum(s.size for s in manifest.shards),
        "alignment": {"boundary": align, "aligned_samples": aligned_total},
        "fields": manifest.fields,
        "classes": list(manifest.classes) if manifest.classes is not None else None,
        "shards": shards,
    }
