"""Stage-time distributions for the simulator, and the spec parser behind ``--read-dist``.

Three kinds, all in seconds per batch:

- :class:`Constant`: always the same time (the analytic model's assumption).
- :class:`LogNormal`: ``median * exp(sigma * N(0, 1))``; heavy right tail for
  large ``sigma`` (network and cold-cache reads look like this). Note the mean
  is ``median * exp(sigma**2 / 2)``, above the median.
- :class:`Empirical`: resampled with replacement from measured times.

:func:`parse_dist` turns ``"const"``, ``"const:12ms"``, ``"lognormal:sigma=0.5"``,
``"lognormal:sigma=0.5,median=12ms"`` (or ``mean=``) and
``"empirical:times.json"`` (``,unit=ms`` optional) into one of them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from feedline.errors import ConfigError
from feedline.units import parse_duration

_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


@runtime_checkable
class Distribution(Protocol):
    """A per-batch stage time in seconds."""

    @property
    def mean(self) -> float:
        """Expected value in seconds."""
        ...

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` independent draws (float64 seconds, all >= 0)."""
        ...

    def describe(self) -> str:
        """A short human description, e.g. ``"lognormal(median=12.0 ms, sigma=0.8)"``."""
        ...


def _check_time(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number of seconds, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
    return float(value)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


@dataclass(frozen=True)
class Constant:
    """Always ``value`` seconds."""

    value: float

    def __post_init__(self) -> None:
        _check_time("value", self.value)

    @property
    def mean(self) -> float:
        return float(self.value)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.full(n, float(self.value))

    def describe(self) -> str:
        return f"const({_ms(self.value)})"


@dataclass(frozen=True)
class LogNormal:
    """``median * exp(sigma * Z)`` with ``Z ~ N(0, 1)``; ``sigma`` is the log-space spread."""

    median: float
    sigma: float

    def __post_init__(self) -> None:
        _check_time("median", self.median)
        _check_time("sigma", self.sigma)

    @property
    def mean(self) -> float:
        return float(self.median * math.exp(self.sigma**2 / 2))

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return self.median * np.exp(self.sigma * rng.standard_normal(n))

    def describe(self) -> str:
        return f"lognormal(median={_ms(self.median)}, sigma={self.sigma:g})"


@dataclass(frozen=True)
class Empirical:
    """Bootstrap from measured times (seconds); at least one, all finite and >= 0."""

    samples: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.samples:
            raise ValueError("samples must not be empty")
        for i, t in enumerate(self.samples):
            _check_time(f"samples[{i}]", t)

    @classmethod
    def from_values(cls, values: Sequence[float]) -> Empirical:
        """Build from any sequence of seconds."""
        return cls(tuple(float(v) for v in values))

    @property
    def mean(self) -> float:
        return float(np.mean(self.samples))

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.choice(np.asarray(self.samples, dtype=np.float64), size=n, replace=True)

    def describe(self) -> str:
        p99 = float(np.percentile(self.samples, 99))
        return f"empirical(n={len(self.samples)}, mean={_ms(self.mean)}, p99={_ms(p99)})"


def as_distribution(value: float | Distribution, *, name: str = "stage") -> Distribution:
    """A number becomes :class:`Constant`; a distribution passes through.

    Raises:
        ValueError: a number that is negative, NaN or infinite (naming ``name``).
        TypeError: neither a number nor a distribution.
    """
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return Constant(_check_time(name, value))
    if isinstance(value, Distribution):
        return value
    raise TypeError(f"{name} must be seconds or a Distribution, got {value!r}")


def _options(text: str, field: str, allowed: set[str]) -> dict[str, str]:
    opts: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, val = part.partition("=")
        key = key.strip().lower()
        if not sep or key not in allowed:
            raise ConfigError(
                f"unknown option {part!r}", field=field, fix=f"use {', '.join(sorted(allowed))}"
            )
        opts[key] = val.strip()
    return opts


def _lognormal(args: str, base: float | None, field: str) -> LogNormal:
    opts = _options(args, field, {"sigma", "median", "mean"})
    if "sigma" not in opts:
        raise ConfigError("lognormal needs sigma", field=field, fix="write lognormal:sigma=0.5")
    try:
        sigma = float(opts["sigma"])
    except ValueError:
        raise ConfigError(f"sigma {opts['sigma']!r} is not a number", field=field) from None
    if not math.isfinite(sigma) or sigma < 0:
        raise ConfigError(f"sigma must be finite and >= 0, got {sigma}", field=field)
    if "median" in opts and "mean" in opts:
        raise ConfigError("give median or mean, not both", field=field)
    if "median" in opts:
        median = parse_duration(opts["median"], name=f"{field} median")
    elif "mean" in opts:
        median = parse_duration(opts["mean"], name=f"{field} mean") * math.exp(-(sigma**2) / 2)
    elif base is not None:
        median = base
    else:
        raise ConfigError("lognormal needs a median", field=field, fix="add median=12ms")
    return LogNormal(median, sigma)


def load_empirical(path: str | Path, *, stage: str | None = None, unit: str = "s") -> Empirical:
    """Measured times from a JSON file.

    The file holds a list of numbers, or an object with the list under the
    stage name (``{"read": [...]}``) or under ``"times"``. ``unit`` is ``s``,
    ``ms``, ``us`` or ``ns``.

    Raises:
        ConfigError: unreadable file, bad JSON, wrong shape, or bad values.
    """
    field = f"{stage}-dist" if stage else "path"
    if unit not in _UNITS:
        raise ConfigError(f"unknown unit {unit!r}", field=field, fix="use unit=s, ms, us or ns")
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read measured times from {str(path)!r}: {e}", field=field) from None
    if isinstance(data, dict):
        data = data.get(stage) if stage and stage in data else data.get("times")
    if not isinstance(data, list) or not data:
        raise ConfigError(
            f"{str(path)!r} holds no list of times",
            field=field,
            fix=f"write a JSON list of seconds, or {{\"{stage or 'times'}\": [...]}}",
        )
    try:
        return Empirical.from_values([float(v) * _UNITS[unit] for v in data])
    except (TypeError, ValueError) as e:
        raise ConfigError(f"bad measured time in {str(path)!r}: {e}", field=field) from None


def parse_dist(spec: str, base: float | None = None, *, stage: str = "stage") -> Distribution:
    """Parse a distribution spec; ``base`` (seconds) is the median/value when the spec omits it.

    Examples: ``"const"``, ``"const:12ms"``, ``"lognormal:sigma=0.8"``,
    ``"lognormal:sigma=0.8,mean=15ms"``, ``"empirical:reads.json,unit=ms"``.

    Raises:
        ConfigError: (a ``ValueError``) unknown kind, bad option, missing value,
            unreadable empirical file; ``err.field`` is ``"<stage>-dist"``.
    """
    field = f"{stage}-dist"
    kind, _, args = spec.strip().partition(":")
    kind = kind.strip().lower()
    if kind in ("const", "constant"):
        if args.strip():
            return Constant(parse_duration(args.strip(), name=field))
        if base is None:
            raise ConfigError("const needs a time", field=field, fix="write const:12ms")
        return Constant(base)
    if kind == "lognormal":
        return _lognormal(args, base, field)
    if kind == "empirical":
        path, unit = args, "s"
        head, sep, tail = args.rpartition(",")
        if sep and tail.strip().lower().startswith("unit="):
            path, unit = head, tail.split("=", 1)[1].strip().lower()
        if not path.strip():
            raise ConfigError("empirical needs a file", field=field, fix="write empirical:times.json")
        return load_empirical(path.strip(), stage=stage, unit=unit)
    raise ConfigError(
        f"unknown distribution {spec!r}",
        field=field,
        fix="use const, lognormal:sigma=0.5 or empirical:times.json",
    )


__all__ = [
    "Constant",
    "Distribution",
    "Empirical",
    "LogNormal",
    "as_distribution",
    "load_empirical",
    "parse_dist",
]
