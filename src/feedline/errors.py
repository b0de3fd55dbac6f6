"""Every error feedline raises on purpose derives from :class:`FeedlineError`.

Each error carries its *place* (shard, sample key, field, worker, stage) and,
where there is one, the *fix*. Both are keyword attributes so callers can act on
them without parsing messages; ``str(err)`` joins them into one readable line.
"""

from __future__ import annotations

from typing import Any


class FeedlineError(Exception):
    """Base class of every error feedline raises on purpose.

    Args:
        message: what went wrong, one sentence.
        fix: what the user should change, if there is a known remedy.
        **place: where it happened: ``shard``, ``key``, ``field``, ``worker``,
            ``stage``, ``path``... Values of ``None`` are dropped.
    """

    def __init__(self, message: str, *, fix: str | None = None, **place: Any) -> None:
        self.message = message
        self.fix = fix
        self.place = {k: v for k, v in place.items() if v is not None}
        super().__init__(self._render())

    def _render(self) -> str:
        text = self.placed()
        if self.fix:
            text = f"{text}. Fix: {self.fix}"
        return text

    def placed(self) -> str:
        """The message with its place, without the fix: ``what [shard='s', key='k']``."""
        if not self.place:
            return self.message
        where = ", ".join(f"{k}={v!r}" for k, v in self.place.items())
        return f"{self.message} [{where}]"

    def __getattr__(self, name: str) -> Any:
        # shard / key / field / worker ... read as attributes; missing ones are None.
        if name.startswith("_") or name in ("message", "fix", "place"):
            raise AttributeError(name)
        return self.__dict__.get("place", {}).get(name)

    def __reduce__(self) -> tuple[Any, ...]:
        # Survives pickling across process workers with its place and fix intact.
        return (_rebuild, (type(self), self.message, self.fix, self.place))


def _rebuild(
    cls: type[FeedlineError], message: str, fix: str | None, place: dict[str, Any]
) -> FeedlineError:
    return cls(message, fix=fix, **place)


class ConfigError(FeedlineError, ValueError):
    """An argument or option is invalid. Also a ``ValueError``."""


class ArgumentError(ConfigError, TypeError):
    """An argument of the wrong type or name (a DataLoader name, ``shuffle="yes"``).
    Also a ``TypeError`` (and a ``ValueError``, as a ConfigError)."""


class SampleIndexError(FeedlineError, IndexError):
    """A sample index outside the dataset. Also an ``IndexError``."""


class FormatError(FeedlineError):
    """A shard, index or manifest is malformed, truncated or inconsistent."""


class ChecksumError(FormatError):
    """Stored bytes do not match their recorded checksum."""


class ReadError(FeedlineError):
    """Bytes could not be read from storage (I/O error, short read, backend failure)."""


class WriteError(FeedlineError):
    """Bytes could not be written to storage (disk full, file too large, I/O error)."""


class AlignmentError(FeedlineError, ValueError):
    """A direct read (O_DIRECT / GDS) request violates the alignment rules."""


class DecodeError(FeedlineError):
    """A field could not be decoded, or exceeds its declared size bound."""


class WorkerError(FeedlineError):
    """An exception raised inside a loader worker, re-raised in the consumer."""


class WorkerDied(FeedlineError):
    """A process worker exited or was killed by a signal."""


class LoaderTimeout(FeedlineError, TimeoutError):
    """A sample or batch did not arrive within the loader's ``timeout``."""


class ResourceError(FeedlineError):
    """A host resource is too small: /dev/shm, locked memory, the pinned budget."""


class StateError(FeedlineError, ValueError):
    """A ``state_dict`` does not match the loader it is loaded into."""


class DeviceError(FeedlineError):
    """A requested device (CUDA, GDS) is missing or unusable."""


__all__ = [
    "AlignmentError",
    "ArgumentError",
    "ChecksumError",
    "ConfigError",
    "DecodeError",
    "DeviceError",
    "FeedlineError",
    "FormatError",
    "LoaderTimeout",
    "ReadError",
    "ResourceError",
    "SampleIndexError",
    "StateError",
    "WorkerDied",
    "WorkerError",
    "WriteError",
]
