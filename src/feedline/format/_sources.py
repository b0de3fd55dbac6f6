"""Find the files to pack and plan which samples go to which shard.

Sources are folders (walked recursively; hidden files and folders skipped) or
list files (one path per line; blank lines and ``#`` comments skipped).
Files are grouped into samples by the WebDataset rule: the member name is the
path relative to the folder (or the list file's folder), the key is that name
up to the first dot of its last part, the field is the rest.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from operator import attrgetter
from pathlib import Path
from typing import NamedTuple

from feedline.errors import ConfigError
from feedline.format._tar import BLOCK, END_OF_ARCHIVE, header_upper_bound, round_up, split_name


class SourceFile(NamedTuple):
    """One file of a sample: field name, path on disk, size and mtime at planning time."""

    field: str
    path: str
    size: int
    mtime_ns: int


@dataclass(frozen=True)
class PlannedSample:
    """A sample to pack: key and files sorted by field name."""

    key: str
    files: tuple[SourceFile, ...]

    @cached_property
    def nbytes(self) -> int:
        """Payload bytes of the sample."""
        return sum(f.size for f in self.files)

    def bound(self, align: int) -> int:
        """Upper bound of the bytes this sample takes in a shard, headers and padding included."""
        total = 0
        for n, f in enumerate(self.files):
            name = f"{self.key}.{f.field}"
            total += header_upper_bound(name, f.size, align if n == 0 else 0) + round_up(f.size, BLOCK)
        return total


_by_name = attrgetter("name")


def _walk(root: Path, prefix: str = "", skip: Path | None = None) -> Iterable[tuple[str, str, os.stat_result]]:
    """(relative name, path, stat) of every non-hidden file below ``root``, sorted.

    The folder ``skip`` (the output folder, when it lies inside a source) is left out.
    """
    with os.scandir(root) as it:
        entries = sorted((e for e in it if not e.name.startswith(".")), key=_by_name)
    for entry in entries:
        if entry.is_dir():
            if skip is not None and Path(entry.path).resolve() == skip:
                continue
            yield from _walk(Path(entry.path), f"{prefix}{entry.name}/", skip)
        elif entry.is_file():
            yield prefix + entry.name, entry.path, entry.stat()


def _listed(list_file: Path) -> Iterable[tuple[str, str, os.stat_result]]:
    base = list_file.parent
    try:
        with open(list_file, encoding="utf-8") as f:
            lines = [line.strip() for line in f]
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read list file {str(list_file)!r}: {e}", fix="give a UTF-8 text file, one path per line") from None
    for line in lines:
        if not line or line.startswith("#"):
            continue
        path = base / line
        rel = os.path.relpath(path, base)
        if rel.startswith(".."):
            rel = path.name
        try:
            st = os.stat(path)
        except OSError as e:
            raise ConfigError(
                f"{list_file}: cannot read listed file {line!r}: {e.strerror}",
                fix="fix the path in the list file",
            ) from None
        yield rel.replace(os.sep, "/"), str(path), st


def collect(sources: Iterable[str | os.PathLike[str]], exclude: str | os.PathLike[str] | None = None) -> list[PlannedSample]:
    """All samples from ``sources``, sorted by key (fields sorted by name).

    ``exclude`` is a folder to leave out of the walk (pack's output folder).

    Raises:
        ConfigError: a missing source, a file without a field extension, the
            same key and field from two files, or no files at all.
    """
    grouped: dict[str, dict[str, SourceFile]] = {}
    skip = Path(exclude).resolve() if exclude is not None else None
    for source in sources:
        src = Path(source)
        if src.is_dir():
            entries = _walk(src, skip=skip)
        elif src.is_file():
            entries = _listed(src)
        else:
            raise ConfigError(f"source {str(src)!r} does not exist", fix="pass a folder or a list file")
        for rel, path, st in entries:
            parts = split_name(rel)
            if parts is None:
                raise ConfigError(
                    f"file {path!r} has no field extension, so it cannot join a sample",
                    fix="name files KEY.FIELD (e.g. 000123.cam0.jpg) or move it out of the source",
                )
            key, field = parts
            sample = grouped.setdefault(key, {})
            if field in sample:
                raise ConfigError(
                    f"two files give key {key!r} field {field!r}: {sample[field].path!r} and {path!r}",
                    key=key,
                    field=field,
                    fix="each key.field must come from one file",
                )
            sample[field] = SourceFile(field, path, st.st_size, st.st_mtime_ns)
    if not grouped:
        raise ConfigError("no files found in the sources", fix="check the SRC paths")
    return [
        PlannedSample(key, tuple(files[f] for f in sorted(files)))
        for key, files in sorted(grouped.items())
    ]


def plan_shards(samples: list[PlannedSample], shard_size: int, align: int) -> list[list[PlannedSample]]:
    """Greedy, deterministic split into shards of at most ``shard_size`` bytes.

    A sample is never split; a sample larger than ``shard_size`` gets a shard
    of its own (the only case where a shard exceeds the target).
    """
    capacity = shard_size - len(END_OF_ARCHIVE)
    shards: list[list[PlannedSample]] = []
    current: list[PlannedSample] = []
    used = 0
    for sample in samples:
        need = sample.bound(align)
        if current and used + need > capacity:
            shards.append(current)
            current, used = [], 0
        current.append(sample)
        used += need
    if current:
        shards.append(current)
    return shards
