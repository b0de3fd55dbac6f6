"""index_tars(): adopt existing WebDataset tar files without rewriting them.

Each tar is scanned once with the stdlib ``tarfile`` reader (headers only;
payloads are read to checksum them), its ``.idx`` is written beside it (or in
``out_dir``) and a manifest names the tars by their path relative to the
dataset root.
"""

from __future__ import annotations

import io
import mmap
import os
import tarfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from feedline.errors import ConfigError, FormatError
from feedline.format._atomic import fsync_dir, remove_quietly, write_atomic
from feedline.format._checksum import check_algo, checksum, checksum_function, hasher, hexdigest
from feedline.format._files import path_argument, path_list
from feedline.format._index import FORMAT_VERSION, MEMBER_DTYPE, ShardIndex, encode_index
from feedline.format._lock import DATASET_LOCK, hold_dataset, release
from feedline.format._manifest import (
    MANIFEST_NAME,
    Manifest,
    ShardInfo,
    field_stats,
    read_manifest,
    write_manifest,
)
from feedline.format._schema import HEAD_BYTES, SchemaBuilder, candidate_kind, shard_schema
from feedline.format._tar import BLOCK, split_name

_FIX = "repack the files with `feedline pack`"
_COMPRESSED = (".tar.gz", ".tgz", ".tar.zst", ".tar.bz2", ".tar.xz")
_MAGIC = {b"\x1f\x8b": "gzip", b"\x28\xb5\x2f\xfd": "zstd", b"BZh": "bzip2", b"\xfd7zXZ": "xz"}


def _compression(path: Path) -> str | None:
    """The compressor whose magic number starts ``path``, or None for anything else."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(6)
    except OSError:
        return None  # unreadable: index_tar says so with its shard named
    return next((name for magic, name in _MAGIC.items() if head.startswith(magic)), None)


class _Capped(io.FileIO):
    """A tar read by ``tarfile``, whose reads never ask for more than the file holds: a
    pax or GNU long-name header claiming 1 TiB made ``tarfile`` allocate that much
    (a raw ``MemoryError``); capped, it reads what is there and finds the tar short."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, "rb")
        self.size = os.fstat(self.fileno()).st_size

    def read(self, size: int | None = -1) -> bytes:
        left = max(0, self.size - self.tell())
        return super().read(left if size is None or size < 0 or size > left else size)


def _scan(path: Path, shard: str) -> list[tuple[str, str, int, int]]:
    """(key, field, data offset, size) of each regular member, in tar order.

    The tar must end with its end-of-archive marker (two zero blocks) right
    after the last member: a tar cut at a header boundary, or one whose next
    header is garbage, reads as complete to ``tarfile``, silently short of its
    last members.
    """
    out: list[tuple[str, str, int, int]] = []
    file_size = path.stat().st_size
    last = "the start of the file"
    try:
        with _Capped(path) as raw, tarfile.open(fileobj=raw, mode="r:") as tar:
            for info in tar:
                last = f"member {info.name!r}"
                if info.size < 0:
                    raise FormatError(f"member {info.name!r} has a negative size ({info.size})", shard=shard,
                                      fix="re-copy the tar; its header is corrupt")
                if info.isdir():
                    continue
                if not info.isreg() or info.issparse():
                    key, field = split_name(info.name) or (None, None)
                    raise FormatError(f"member {info.name!r} is {_kind(info)}", shard=shard, key=key, field=field,
                                      fix=_FIX)
                parts = split_name(info.name)
                if parts is None:
                    raise FormatError(
                        f"member {info.name!r} has no field extension (WebDataset would skip it)",
                        shard=shard,
                        fix=_FIX,
                    )
                if parts[1].startswith("__"):  # read back, "x.__key__" would replace sample x's key
                    raise FormatError(
                        f"member {info.name!r} has field {parts[1]!r}: fields starting with '__' name a "
                        "sample's own entries (__key__, __url__)", shard=shard, key=parts[0], field=parts[1],
                        fix=_FIX)
                if info.offset_data + info.size > file_size:
                    raise FormatError(
                        "member runs past the end of the file: the tar is truncated",
                        shard=shard, key=parts[0], field=parts[1], fix="re-copy the tar",
                    )
                out.append((parts[0], parts[1], info.offset_data, info.size))
            end = tar.offset
    except (tarfile.TarError, OSError, UnicodeError, ValueError, EOFError, OverflowError) as e:
        raise FormatError(f"cannot read tar: {e}", shard=shard, fix="check that the file is an uncompressed tar") from None
    _check_end(path, end, file_size, last, shard)
    return out


def _kind(info: tarfile.TarInfo) -> str:
    """What a non-regular member is and why it cannot be adopted, in words."""
    skipped = ", not a regular file: WebDataset readers skip it, so its sample would differ"
    if info.islnk():
        return f"a hard link to {info.linkname!r} (tar stores a file linked twice once){skipped}"
    if info.issym():
        return f"a symbolic link to {info.linkname!r}{skipped}"
    if info.issparse():
        return "a sparse file (tar --sparse): its bytes are not stored in one piece, so they cannot be read in place"
    kinds = {tarfile.FIFOTYPE: "a FIFO", tarfile.CHRTYPE: "a character device", tarfile.BLKTYPE: "a block device"}
    return kinds.get(info.type, f"of tar type {info.type!r}") + skipped


def _check_end(path: Path, end: int, file_size: int, last: str, shard: str) -> None:
    """The two zero blocks of the end-of-archive marker must follow the last member."""
    with open(path, "rb") as f:
        f.seek(end)
        marker = f.read(2 * BLOCK)
    if len(marker) < 2 * BLOCK or marker.count(0) != len(marker):
        what = "ends" if file_size - end < 2 * BLOCK else "has unreadable bytes"
        raise FormatError(
            f"the tar {what} at byte {end}, after {last}, without an end-of-archive marker: it was cut "
            "short or is corrupt there, so its last sample may be incomplete and later ones missing",
            shard=shard, fix="re-copy the tar from its source (or re-create it with tar/WebDataset)",
        )


def _members(entries: list[tuple[str, str, int, int]], shard: str) -> tuple[list[str], list[str], np.ndarray]:
    keys: list[str] = []
    field_ids: dict[str, int] = {}
    members = np.zeros(len(entries), dtype=MEMBER_DTYPE)
    seen: set[str] = set()
    for i, (key, field, offset, size) in enumerate(entries):
        if not keys or keys[-1] != key:
            if key in seen:
                raise FormatError(
                    "the members of a sample are not contiguous (WebDataset would split it into "
                    "several samples too): `tar` without --sort=name lists files in directory order",
                    shard=shard, key=key,
                    fix="create the tar with `tar --sort=name -cf ...`, or pack the files with `feedline pack`")
            seen.add(key)
            keys.append(key)
        members[i] = (len(keys) - 1, field_ids.setdefault(field, len(field_ids)), offset, size, 0)
    return keys, list(field_ids), members


def _checksums(path: Path, members: np.ndarray, algo: str, keys: list[str], fields: list[str]) -> tuple[int, list[Any]]:
    """Fill ``members['checksum']``; the whole-file checksum and each member's schema fact
    (one mmap of the file).

    Raises:
        FormatError: an ``.npy`` member needing pickle or unreadable, or a ``cls`` label
            that is not an integer (names shard, key and field).
    """
    fn = checksum_function(algo)
    whole = hasher(algo)
    facts: list[Any] = []
    kinds = [candidate_kind(f) for f in fields]
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        view = memoryview(mm)
        try:
            whole.update(view)
            sums = members["checksum"]
            rows = zip(members["sample"].tolist(), members["field"].tolist(), members["offset"].tolist(),
                       members["size"].tolist(), strict=True)
            for i, (sample, fid, offset, size) in enumerate(rows):
                with view[offset : offset + size] as data:
                    sums[i] = fn(data)
                # a copy of the first bytes: no view of the map may outlive this loop
                head = bytes(view[offset : offset + min(size, HEAD_BYTES)]) if kinds[fid] != "var" else b""
                try:
                    facts.append(SchemaBuilder.check(fields[fid], head, size))
                except ConfigError as e:
                    bad = FormatError(e.message, shard=path.name, key=keys[sample], field=fields[fid],
                                      fix="fix or remove that file and re-create the tar")
                    break
            else:
                bad = None
        finally:
            view.release()
    if bad is not None:
        raise bad
    return whole.intdigest(), facts


def index_tar(tar: str | os.PathLike[str], index_path: str | os.PathLike[str], *, checksum_algo: str = "xxh3") -> ShardIndex:
    """Write the index of one existing tar to ``index_path`` (atomically) and return it.

    Raises:
        FormatError: not a tar, non-regular members, members without a field,
            or a sample whose members are not contiguous.
    """
    path = Path(tar)
    shard = path.name
    keys, fields, members = _members(_scan(path, shard), shard)
    size = path.stat().st_size
    whole, facts = _checksums(path, members, checksum_algo, keys, fields)
    records, aux, columns = shard_schema(fields, members, len(keys), facts)
    data = encode_index(keys, fields, members, shard_size=size, shard_checksum=whole, checksum_algo=checksum_algo,
                        field_records=records, aux=aux, columns=columns)
    try:
        index = ShardIndex.from_bytes(data, shard_size=size, shard=shard)
    except FormatError as e:  # the tar itself breaks a rule (a field twice...): re-indexing cannot help
        raise FormatError(e.message, fix=_FIX, **e.place) from None
    write_atomic(index_path, data)
    return index


def _shard_name(root: Path, tar: Path) -> str:
    """The tar's name in the manifest: its path below ``root``, or (a tar outside
    ``root``) its file name, under which :func:`_link_into` links it into ``root``:
    a manifest only names files inside its dataset folder."""
    rel = os.path.relpath(tar, root).replace(os.sep, "/")
    return tar.name if rel.split("/")[0] == ".." else rel


def _link_into(root: Path, tar: Path, name: str) -> None:
    """Make ``root/name`` a symbolic link to ``tar`` when ``tar`` lies outside ``root``."""
    link = root / name
    if os.path.lexists(link) and os.path.samefile(link, tar):
        return
    if os.path.relpath(tar, root).replace(os.sep, "/").split("/")[0] != "..":
        return
    if os.path.lexists(link):
        raise ConfigError(
            f"{str(link)!r} exists and is not {str(tar)!r}: the adopted tar is linked under that name",
            path=str(link), fix="give another --out folder, or remove that file",
        )
    os.symlink(os.path.relpath(os.path.realpath(tar), os.path.realpath(root)), link)


def _check_existing(root: Path, shard_names: list[str]) -> Manifest | None:
    """Refuse to replace the manifest of a dataset already in ``root`` unless these
    tars are exactly its shards (re-indexing it, e.g. to upgrade its format).

    Returns that dataset's manifest, else None: the re-index keeps its class names
    (the tars hold the label numbers, not the names) and its ``key_escape`` (the
    tars hold escaped keys, not the file names).
    """
    if not (root / MANIFEST_NAME).exists():
        return None
    try:
        old = read_manifest(root)
        existing = sorted(s.name for s in old.shards)
    except FormatError as e:
        raise ConfigError(
            f"{str(root)!r} holds a manifest.json that cannot be read ({e.message}); indexing into it "
            "would replace it",
            path=str(root / MANIFEST_NAME),
            fix="give another --out folder, or remove that manifest.json if the dataset is no longer wanted",
        ) from None
    if existing != sorted(shard_names):
        given = sorted(set(shard_names) - set(existing))
        missing = sorted(set(existing) - set(shard_names))
        detail = (f"; not given: {', '.join(missing[:3])}{'...' if len(missing) > 3 else ''}" if missing
                  else f"; not in it: {', '.join(given[:3])}{'...' if len(given) > 3 else ''}")
        raise ConfigError(
            f"{str(root)!r} already holds a dataset of {len(existing)} shard(s); indexing these "
            f"{len(shard_names)} tar(s) there would replace its manifest{detail}",
            path=str(root / MANIFEST_NAME),
            fix="give --out another folder for the adopted tars, or pass every shard of that dataset "
                "to re-index it",
        )
    return old


def expand_tars(tars: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """The tar files ``tars`` names, a folder standing for its ``*.tar`` files in name order.

    Raises:
        ConfigError: nothing given, a path that does not exist, a folder with no
            ``.tar`` file, or a compressed tar (naming it, with the fix).
    """
    paths: list[Path] = []
    for t in path_list(tars, "tars"):
        p = Path(t)
        if p.is_dir():
            found = sorted(q for q in p.iterdir() if q.name.endswith(".tar") and q.is_file())
            if not found:
                other = sorted(q.name for q in p.iterdir() if q.name.endswith(_COMPRESSED))
                hint = f" (compressed: {', '.join(other[:3])})" if other else ""
                raise ConfigError(
                    f"folder {str(p)!r} holds no .tar file{hint}",
                    fix="decompress .tar.gz/.tgz shards first (gunzip keeps them tars), or pass the tar files"
                        if other else "pass the folder holding the .tar shards, or the tar files themselves")
            paths.extend(found)
        elif not p.is_file():
            raise ConfigError(f"tar file {str(p)!r} does not exist", fix="check the path")
        elif (kind := _compression(p)) is not None:
            raise ConfigError(
                f"{str(p)!r} is {kind}-compressed: its members cannot be read in place",
                fix="decompress it first (e.g. gunzip -k FILE, or zstd -d FILE), then index the .tar")
        else:
            paths.append(p)
    if not paths:
        raise ConfigError("index_tars: no tar files given", fix="pass one or more .tar files, or their folder")
    return paths


def index_tars(
    tars: Iterable[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str] | None = None,
    *,
    checksum_algo: str = "xxh3",
    progress: Callable[[int, int], None] | None = None,
) -> Manifest:
    """Build ``.idx`` files and a manifest for existing WebDataset tars.

    Args:
        tars: tar files, in dataset order, or folders standing for their ``*.tar``
            files in name order. They are never modified.
        out_dir: the dataset root, where indexes and ``manifest.json`` go
            (default: the folder of the first tar). Shards are named by their
            path relative to it.
        checksum_algo: ``"xxh3"`` or ``"crc32c"``.
        progress: called with ``(tars done, tars total)`` after each tar.

    A folder that already holds a dataset (a ``manifest.json``) is only written
    when the tars are exactly that dataset's shards (re-indexing it, e.g. to
    upgrade a version-1 dataset to the field schema); its manifest is removed
    first and written again last, keeping its class names.

    Raises:
        ConfigError: no tars, a missing file, or ``out_dir`` holding another
            dataset (naming it, with the fix).
        WriteError: another index_tars or pack writing into ``out_dir`` now (it
            holds the folder's lock).
        FormatError: a tar that cannot be adopted (see :func:`index_tar`), or tars
            that together hold no sample.
    """
    algo = check_algo(checksum_algo)
    paths = expand_tars(tars)
    names = [p.name for p in paths]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise ConfigError(f"two tars are named {dup!r}: their indexes would collide", fix="rename one of them")
    root = Path(path_argument(out_dir, "out_dir")) if out_dir is not None else paths[0].parent
    shard_names = [_shard_name(root, p) for p in paths]
    root.mkdir(parents=True, exist_ok=True)
    lock = hold_dataset(root)
    try:
        return _index_into(root, paths, shard_names, algo, progress)
    finally:
        release(lock, root / DATASET_LOCK)


def _index_into(root: Path, paths: list[Path], shard_names: list[str], algo: str,
                progress: Callable[[int, int], None] | None) -> Manifest:
    """index_tars() once it holds the folder's lock."""
    names = [p.name for p in paths]
    old = _check_existing(root, shard_names)
    for p, shard_name in zip(paths, shard_names, strict=True):
        _link_into(root, p, shard_name)
    remove_quietly(root / MANIFEST_NAME)  # the same dataset re-indexed: no manifest while its indexes change
    infos: list[ShardInfo] = []
    indexes: list[ShardIndex] = []
    for p, shard_name in zip(paths, shard_names, strict=True):
        idx_path = root / (p.name + ".idx")
        index = index_tar(p, idx_path, checksum_algo=algo)
        data = idx_path.read_bytes()
        infos.append(
            ShardInfo(
                name=shard_name,
                index=idx_path.name,
                size=index.shard_size,
                index_size=len(data),
                num_samples=index.num_samples,
                checksum=hexdigest(index.shard_checksum),
                index_checksum=hexdigest(checksum(data, algo)),
            )
        )
        indexes.append(index)
        if progress is not None:
            progress(len(indexes), len(paths))
    if not any(i.num_samples for i in indexes):
        raise FormatError(
            f"the tar{'s hold' if len(paths) > 1 else ' holds'} no files: a dataset of 0 samples cannot be loaded",
            shard=names[0] if len(paths) == 1 else None,
            fix="check that these are the right files (empty tars are fine only beside non-empty ones)",
        )
    fsync_dir(root)
    manifest = Manifest(
        version=FORMAT_VERSION,
        checksum_algo=algo,
        align=0,
        shards=tuple(infos),
        fields=field_stats(indexes),
        num_samples=sum(i.num_samples for i in infos),
        classes=old.classes if old is not None else None,
        key_escape=old.key_escape if old is not None else None,
    )
    write_manifest(root, manifest)
    return manifest
