"""Checksums used by the shard format: xxh3_64 (default) and crc32c (optional).

Every checksum is an unsigned 64-bit integer, stored as ``<u8`` in the index
and as 16 hex digits in the manifest. xxh3 comes from the ``xxhash`` package (a
hard dependency); crc32c needs the optional ``crc32c`` package and says so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import xxhash

from feedline.errors import ConfigError

ALGOS = ("xxh3", "crc32c")
ALGO_IDS = {"xxh3": 0, "crc32c": 1}


class Hasher(Protocol):
    """Incremental hasher: ``update`` chunks, then ``intdigest``."""

    def update(self, data: Any) -> None: ...

    def intdigest(self) -> int: ...


def check_algo(algo: object, *, name: str = "checksum_algo") -> str:
    """Return ``algo`` if it is a known checksum name, else raise ConfigError."""
    if algo not in ALGOS:
        raise ConfigError(
            f"{name}: unknown checksum algorithm {algo!r}", fix=f"use one of {', '.join(ALGOS)}"
        )
    return str(algo)


def _crc32c_module() -> Any:
    try:
        import crc32c
    except ImportError:
        raise ConfigError(
            "checksum algorithm 'crc32c' needs the optional 'crc32c' package",
            fix="pip install crc32c, or use --checksum xxh3",
        ) from None
    return crc32c


class _Crc32cHasher:
    def __init__(self) -> None:
        self._mod = _crc32c_module()
        self._value = 0

    def update(self, data: Any) -> None:
        self._value = int(self._mod.crc32c(data, self._value))

    def intdigest(self) -> int:
        return self._value


def checksum_function(algo: str = "xxh3") -> Callable[[Any], int]:
    """The one-shot checksum function for ``algo`` (looked up once, call many times)."""
    check_algo(algo)
    if algo == "xxh3":
        return xxhash.xxh3_64_intdigest
    mod = _crc32c_module()
    return lambda data: int(mod.crc32c(data))


def checksum(data: bytes | memoryview, algo: str = "xxh3") -> int:
    """Checksum of ``data`` as an unsigned 64-bit int.

    Raises:
        ConfigError: unknown ``algo``, or ``crc32c`` without its package.
    """
    return checksum_function(algo)(data)


def hasher(algo: str = "xxh3") -> Hasher:
    """A fresh incremental hasher for ``algo`` (whole-file checksums)."""
    check_algo(algo)
    if algo == "xxh3":
        return xxhash.xxh3_64()
    return _Crc32cHasher()


def hexdigest(value: int) -> str:
    """The manifest form of a checksum: 16 lowercase hex digits."""
    return f"{value:016x}"
