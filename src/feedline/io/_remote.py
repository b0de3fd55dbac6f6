"""Remote object stores (S3, GCS, HTTP...) through fsspec: ranged reads per window.

Optional: ``pip install 'feedline[remote]'``. A URL such as
``s3://bucket/prefix`` is opened with :func:`fsspec.core.url_to_fs`; every
window of the read planner becomes one ranged GET (``fs.cat_file(path, start,
end)``), copied once into the caller's host buffer.
"""

from __future__ import annotations

import os
import time
from typing import Any

from feedline.errors import ConfigError, ReadError

_FIX = "pip install 'feedline[remote]' (fsspec, s3fs)"
_READ_FIX = ("check the endpoint, the credentials and that the object exists; a transient failure "
             "(HTTP 500, a timeout, a cut connection) can be retried")
# An object store that accepts a connection and then never answers would block a read
# forever with some clients' defaults; these bound it unless the caller sets its own.
S3_TIMEOUTS = {"connect_timeout": 10, "read_timeout": 20}
# s3fs nests its retry loop: a ranged read retries a call that retries itself, each try
# being botocore's tries. With s3fs's default 5 that is 25 x botocore's tries per read: a
# server answering every request after the read timeout failed one ranged read after 75
# requests, 199 s with read_timeout=2 (about 40 minutes with the defaults above). 2 makes
# it 4 x botocore's tries. ``storage_options={"retries": N}`` sets it (s3fs itself takes it
# only as a class attribute); botocore's are ``config_kwargs``'s.
S3_RETRIES = 2
S3_BOTOCORE_RETRIES = {"max_attempts": 2}


def failure(e: BaseException) -> str:
    """One line for an exception raised by a remote client: its type and message (a
    timeout often has none: fsspec's ``FSTimeoutError`` after a server stalled mid-body)."""
    text = str(e).strip()
    if not text and isinstance(e, TimeoutError):
        text = "no data from the server within the read timeout (config_kwargs read_timeout)"
    return (f"{type(e).__name__}: {text}" if text else type(e).__name__).splitlines()[0][:300]


def retry_policy(fs: Any) -> str:
    """The retries a file system's client makes before it raises, in words ("" if unknown):
    s3fs's own (``retries=``) and botocore's (``config_kwargs={"retries": {"max_attempts": N}}``)."""
    parts = []
    retries = getattr(fs, "retries", None)
    if isinstance(retries, int) and not isinstance(retries, bool):
        parts.append(f"{type(fs).__name__} retries={retries}")
    config = getattr(fs, "config_kwargs", None)
    botocore = config.get("retries") if isinstance(config, dict) else None
    if isinstance(botocore, dict):  # botocore rewrites max_attempts (retries) as total_max_attempts (tries)
        total = botocore.get("total_max_attempts")
        if total is None and isinstance(botocore.get("max_attempts"), int):
            total = botocore["max_attempts"] + 1
        if total is not None:
            parts.append(f"botocore tries each request {total} times")
    return ", ".join(parts)


def remote_error(e: Exception, what: str, path: str, *, fs: Any = None, since: float | None = None) -> ReadError:
    """The ReadError for a failed remote call. Clients raise their own exception types
    (botocore's checksum and connection errors, aiohttp's payload errors) besides
    ``OSError``; every one of them is a failed read of ``path``. With ``since`` (the
    call's ``time.monotonic()`` start) and ``fs``, it says how long the call took and the
    client's retry settings: a failure after the client's retries is told from a first one."""
    took = ""
    if since is not None:
        policy = retry_policy(fs)
        took = f" after {time.monotonic() - since:.1f} s" + (f" (the client's retries: {policy})" if policy else "")
    return ReadError(f"{what} failed{took}: {failure(e)}", path=path, fix=_READ_FIX)


def normalise_root(root: str) -> str:
    """The dataset root a user means: ``file://`` URLs and ``~`` become local paths, and a
    path to the dataset's ``manifest.json`` stands for its folder.

    Raises:
        ConfigError: a local path to another file (a shard, an index): the dataset is the
            folder holding them.
    """
    if root.startswith("file://"):
        from urllib.parse import unquote, urlparse

        root = unquote(urlparse(root).path)
    if is_remote(root):
        return root[: -len("/manifest.json")] if root.endswith("/manifest.json") else root
    root = os.path.expanduser(root)
    if os.path.basename(root) == "manifest.json":
        return os.path.dirname(root) or "."
    if os.path.isfile(root):
        raise ConfigError(f"{root!r} is a file; a dataset is the folder holding manifest.json",
                          path=root, fix=f"pass its folder: {os.path.dirname(root) or '.'!r}")
    return root


def is_remote(root: str) -> bool:
    """True for URLs with a scheme other than ``file://`` (``s3://``, ``gs://``...)."""
    head, sep, _ = str(root).partition("://")
    return bool(sep) and head not in ("", "file")


def open_filesystem(root: str, storage_options: dict[str, Any] | None) -> tuple[Any, str]:
    """``(fs, path)`` for a remote ``root`` URL; ``storage_options`` go to the fs.

    Raises:
        ConfigError: fsspec (or the protocol's package, e.g. s3fs) is missing.
    """
    try:
        from fsspec.core import url_to_fs
    except ImportError as e:
        raise ConfigError(f"remote datasets need fsspec ({e})", fix=_FIX) from e
    options = dict(storage_options or {})
    retries = None
    if root.startswith(("s3://", "s3a://")):
        if "config_kwargs" not in options:
            options["config_kwargs"] = {**S3_TIMEOUTS, "retries": dict(S3_BOTOCORE_RETRIES)}
        retries = options.pop("retries", S3_RETRIES)
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 1:
            raise ConfigError(f"storage_options retries must be an int >= 1, got {retries!r}",
                              field="storage_options", fix="e.g. storage_options={'retries': 2}")
    try:
        fs, path = url_to_fs(root, **options)
    except ImportError as e:
        raise ConfigError(f"no fsspec implementation for {root!r} ({e})", fix=_FIX) from e
    except Exception as e:  # an option the file system refuses (a TypeError, a ValueError...)
        raise ConfigError(f"cannot open {root!r} with these storage_options: {failure(e)}",
                          field="storage_options", fix="check the option names and values for this protocol") from e
    if retries is not None and hasattr(fs, "retries"):
        fs.retries = retries  # on this instance (fsspec shares it between equal storage_options)
    return fs, path.rstrip("/")


class RemoteReader:
    """Ranged reads from an fsspec file system into host buffers.

    The handle is the object path; the file system object is shared by all
    handles (fsspec file systems are safe to call from several threads).
    """

    name = "remote"
    device = "cpu"
    direct = False

    def __init__(self, fs: Any) -> None:
        self.fs = fs

    def open(self, path: str) -> str:
        """Remote objects need no open; the handle is the path."""
        return path

    def read_into(self, handle: Any, offset: int, buffer: Any) -> int:
        """One ranged read of ``len(buffer)`` bytes at ``offset`` (fewer at end of object)."""
        view = memoryview(buffer).cast("B")
        t0 = time.monotonic()
        try:
            data = self.fs.cat_file(handle, start=offset, end=offset + view.nbytes)
        except Exception as e:
            raise remote_error(e, f"ranged read [{offset}, {offset + view.nbytes})", handle, fs=self.fs,
                               since=t0) from e
        n = min(len(data), view.nbytes)
        view[:n] = data[:n]
        return n

    def read_bytes(self, path: str) -> bytes:
        """The whole object (manifest, index)."""
        t0 = time.monotonic()
        try:
            return bytes(self.fs.cat_file(path))
        except Exception as e:
            raise remote_error(e, "reading the object", path, fs=self.fs, since=t0) from e

    def size(self, path: str) -> int:
        """Size of the object in bytes."""
        t0 = time.monotonic()
        try:
            return int(self.fs.size(path))
        except Exception as e:
            raise remote_error(e, "asking the object's size", path, fs=self.fs, since=t0) from e

    def close(self, handle: Any) -> None:
        """Nothing to close per object."""
