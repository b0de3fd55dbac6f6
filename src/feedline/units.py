"""Parse and format the human units used in options: durations and byte sizes.

``parse_duration("12ms") == 0.012``; ``parse_bytes("2GiB") == 2 * 2**30``.
Both raise :class:`feedline.errors.ConfigError` (a ``ValueError``) naming the
bad text.
"""

from __future__ import annotations

import math
import numbers
import re
import sys

from feedline.errors import ArgumentError, ConfigError

MAX_SECONDS = 365 * 24 * 3600.0  # a longer duration is a typo (and overflows thread timeouts)
MAX_BYTES = 1 << 60  # no byte size an option takes is anywhere near 1 EiB

_DURATION_UNITS = {"": 1.0, "ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0}
_BYTE_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}
_NUMBER = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-zA-Zµ]*)\s*$")


def _np_bool_type() -> type:
    """numpy's bool type when numpy is loaded (it is no ``bool`` subclass), else ``bool``."""
    np = sys.modules.get("numpy")
    return np.bool_ if np is not None else bool


def parse_duration(
    text: str | float | int, *, name: str = "duration", unit_required: bool = False
) -> float:
    """Seconds from ``"12ms"``, ``"250us"``, ``"1.5s"``; a bare number is seconds.

    With ``unit_required=True`` a bare number (``"12"``) is refused instead: where
    typical values are milliseconds, "12" read as 12 s is a silent mistake.

    Raises:
        ConfigError: unknown or (with ``unit_required``) missing unit, negative,
            NaN, infinite or longer than a year.
        ArgumentError: not a str, int or float (``None``, a bool, a list).
    """
    if isinstance(text, (bool, _np_bool_type())) or not isinstance(text, (str, numbers.Real)):
        raise ArgumentError(f"{name}: expected a duration such as '12ms' or a number of seconds, "
                            f"got {type(text).__name__} {text!r}", field=name)
    if not isinstance(text, str):
        try:
            value = float(text)
        except OverflowError:
            value = math.inf
    else:
        m = _NUMBER.match(text)
        if not m or m.group(2).lower() not in _DURATION_UNITS:
            raise ConfigError(
                f"{name}: cannot parse {text!r} as a duration",
                fix="use a number with a unit: us, ms or s (e.g. 12ms)",
            )
        if unit_required and not m.group(2):
            raise ConfigError(
                f"{name}: {text!r} has no unit",
                fix=f"add one: {m.group(1)}ms, {m.group(1)}us or {m.group(1)}s",
            )
        value = float(m.group(1)) * _DURATION_UNITS[m.group(2).lower()]
    if not math.isfinite(value) or value < 0 or value > MAX_SECONDS:
        raise ConfigError(f"{name}: must be a finite, non-negative duration of at most "
                          f"{MAX_SECONDS:.0f} s (a year), got {text!r}", field=name)
    return value


def parse_bytes(text: str | int, *, name: str = "size") -> int:
    """Bytes from ``"2GiB"``, ``"512MB"``, ``"4096"``; K/M/G alone are binary units.

    Raises:
        ConfigError: unknown unit, negative value, more than 1 EiB (``"1e999"``).
        ArgumentError: not a str or int (a float, ``None``, a bool).
    """
    if isinstance(text, (bool, _np_bool_type())) or not isinstance(text, (str, numbers.Integral)):
        raise ArgumentError(f"{name}: expected a byte size such as '2GiB' or an int, "
                            f"got {type(text).__name__} {text!r}", field=name)
    if not isinstance(text, str):
        value = int(text)
    else:
        m = _NUMBER.match(text)
        if not m or m.group(2).lower() not in _BYTE_UNITS:
            raise ConfigError(
                f"{name}: cannot parse {text!r} as a byte size",
                fix="use a number with a unit such as 4096, 64KiB, 512MiB or 2GiB",
            )
        number = float(m.group(1)) * _BYTE_UNITS[m.group(2).lower()]
        value = int(number) if math.isfinite(number) else MAX_BYTES + 1  # "1e999" overflows to inf
    if value < 0:
        raise ConfigError(f"{name}: must be non-negative, got {text!r}", field=name)
    if value > MAX_BYTES:
        raise ConfigError(f"{name}: {text!r} is more than 1 EiB", field=name,
                          fix="give a size with a unit such as 512MiB or 2GiB")
    return value


def format_duration(seconds: float) -> str:
    """Four significant digits in us, ms or s: ``0.045 -> "45 ms"``, ``0.02032 -> "20.32 ms"``."""
    if seconds == 0:
        return "0 ms"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.4g} us"
    if seconds < 1.0:
        return f"{seconds * 1e3:.4g} ms"
    return f"{seconds:.4g} s"


def format_bytes(n: float) -> str:
    """``3 * 2**20 -> "3.0 MiB"``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")
