"""Audio helpers for ``Loader(decode=..., transform=...)``: WAV files to fixed-size clips.

A ``.wav`` field arrives as ``bytes`` unless a decoder is given. The recipe for
clips of varying length, channel count and sample rate::

    from feedline import audio
    loader = feedline.Loader(ds, batch_size=32, decode={"wav": audio.decode_wav},
                             transform=audio.ClipTransform("wav", seconds=1.0, rate=16000))
    # batch["wav"]: float32[32, 1, 16000]; batch["wav_frames"]: int64[32], the frames
    # that are audio (the rest of a short clip is zeros)

- :func:`decode_wav` (the standard library's ``wave``, no extra dependency):
  integer PCM of 8, 16, 24 or 32 bits to ``{"samples": int16/int32 [frames,
  channels], "rate": int}``; it runs in the workers (threads or processes).
  Compressed or float WAV (and WAVE_FORMAT_EXTENSIBLE on Python < 3.12) is a
  ``DecodeError`` naming the sample: decode those with your own function
  (``soundfile.read(io.BytesIO(data))``) in ``decode={"wav": fn}``.
- :func:`to_float` scales integer PCM to ``float32`` in ``[-1, 1)``;
  :func:`resample` changes the rate by linear interpolation (cheap, no
  anti-alias filter: fine for mixing two rates into one batch, not for
  listening tests; resample offline when quality matters);
  :func:`crop_or_pad` gives exactly ``frames`` frames.
- :class:`ClipTransform`: decode's dict to ``float32 [channels, frames]``,
  mono or stereo, one rate, random crop when ``train=True`` (the start for
  eval), zero padding at the end, and the count of real frames.
"""

from __future__ import annotations

import io
import wave
from typing import Any

import numpy as np

from feedline.errors import ConfigError, DecodeError

__all__ = ["ClipTransform", "crop_or_pad", "decode_wav", "resample", "to_float"]

_DTYPES: dict[int, str] = {1: "u1", 2: "<i2", 4: "<i4"}


def decode_wav(data: bytes | bytearray | memoryview) -> dict[str, Any]:
    """Integer PCM WAV bytes -> ``{"samples": array[frames, channels], "rate": int}``.

    Samples are ``int16`` for 8- and 16-bit files (8-bit re-centred and scaled
    by 256) and ``int32`` for 24- and 32-bit files (24-bit scaled by 256), so
    :func:`to_float` maps every width to ``[-1, 1)``.

    Raises:
        DecodeError: not a WAV file, or a format ``wave`` does not read.
    """
    try:
        with wave.open(io.BytesIO(bytes(data))) as w:
            width, channels, rate = w.getsampwidth(), w.getnchannels(), w.getframerate()
            raw = w.readframes(w.getnframes())
    except (wave.Error, EOFError, ValueError) as exc:
        raise DecodeError(f"WAV unreadable: {exc}",
                          fix="decode compressed or float WAV with your own function, e.g. "
                          "decode={'wav': fn} calling soundfile.read(io.BytesIO(data))") from exc
    frames = len(raw) // (width * channels)
    raw = raw[: frames * width * channels]
    if width == 3:
        b = np.frombuffer(raw, np.uint8).reshape(-1, 3).astype(np.int32)
        samples = ((b[:, 0] << 8) | (b[:, 1] << 16) | (b[:, 2] << 24)).astype(np.int32)
    else:
        samples = np.frombuffer(raw, _DTYPES[width])
        if width == 1:
            samples = ((samples.astype(np.int16) - 128) * 256).astype(np.int16)
    return {"samples": samples.reshape(frames, channels), "rate": rate}


def to_float(samples: np.ndarray) -> np.ndarray:
    """Integer PCM (``int16``/``int32``) to ``float32`` in ``[-1, 1)``; float input is returned as ``float32``."""
    if samples.dtype.kind == "f":
        return samples.astype(np.float32, copy=False)
    if samples.dtype.kind != "i":
        raise ConfigError(f"to_float: integer or float samples needed, got {samples.dtype}")
    return samples.astype(np.float32) / float(2 ** (8 * samples.dtype.itemsize - 1))


def resample(samples: np.ndarray, rate: int, to: int) -> np.ndarray:
    """``float32 [frames, channels]`` from ``rate`` to ``to`` Hz by linear interpolation."""
    if rate == to or len(samples) == 0:
        return samples
    n = max(1, round(len(samples) * to / rate))
    at = np.arange(n, dtype=np.float64) * (rate / to)
    src = np.arange(len(samples), dtype=np.float64)
    return np.stack([np.interp(at, src, samples[:, c]) for c in range(samples.shape[1])], 1).astype(np.float32)


def crop_or_pad(samples: np.ndarray, frames: int, start: int = 0) -> tuple[np.ndarray, int]:
    """``samples[start : start + frames]`` along axis 0, zero-padded at the end to ``frames``;
    returns it and how many frames are real."""
    part = samples[start : start + frames]
    if len(part) == frames:
        return part, frames
    out = np.zeros((frames, *samples.shape[1:]), samples.dtype)
    out[: len(part)] = part
    return out, len(part)


class ClipTransform:
    """A ``transform=`` that makes every clip of ``field`` one shape: ``float32 [channels, frames]``.

    The field must hold :func:`decode_wav`'s dict (or a ``[frames, channels]``
    array at ``rate``). Steps: :func:`to_float`, mix down to mono
    (``channels=1``, the mean) or repeat mono to stereo (``channels=2``),
    :func:`resample` to ``rate``, then a crop of ``seconds`` (random start when
    ``train=True``, from a generator private to the worker thread; the start
    when ``False``) or zero padding at the end. ``f"{field}_frames"`` gets the
    number of real frames, for masking the padding.

    Raises:
        ConfigError: a bad argument; at call time, a sample without ``field``
            (the loader adds the sample key).
    """

    def __init__(self, field: str = "wav", *, seconds: float = 1.0, rate: int = 16000, channels: int = 1,
                 train: bool = True) -> None:
        if not isinstance(field, str) or not field:
            raise ConfigError(f"ClipTransform: field must be a field name, got {field!r}")
        if isinstance(rate, bool) or not isinstance(rate, int) or rate < 1:
            raise ConfigError(f"ClipTransform: rate must be a positive integer (Hz), got {rate!r}")
        if channels not in (1, 2):
            raise ConfigError(f"ClipTransform: channels must be 1 or 2, got {channels!r}")
        if not isinstance(seconds, (int, float)) or not 0 < seconds * rate < 2**31:
            raise ConfigError(f"ClipTransform: seconds must be positive, got {seconds!r}")
        self.field, self.rate, self.channels, self.train = field, rate, channels, bool(train)
        self.frames = max(1, round(seconds * rate))

    def __call__(self, sample: dict[str, Any]) -> dict[str, Any]:
        value = sample.get(self.field) if isinstance(sample, dict) else None
        if value is None:
            have = sorted(sample) if isinstance(sample, dict) else type(sample).__name__
            raise ConfigError(f"ClipTransform: the sample has no field {self.field!r} (it has {have})",
                              fix="pass the audio field's name, and decode={'wav': audio.decode_wav}")
        samples, rate = (value["samples"], value["rate"]) if isinstance(value, dict) else (value, self.rate)
        x = to_float(np.asarray(samples).reshape(len(samples), -1))
        if x.shape[1] != self.channels:
            x = x.mean(axis=1, keepdims=True) if self.channels == 1 else np.repeat(x[:, :1], 2, axis=1)
        x = resample(x, int(rate), self.rate)
        start = 0
        if self.train and len(x) > self.frames:
            start = int(_rng().integers(0, len(x) - self.frames + 1))
        clip, real = crop_or_pad(x, self.frames, start)
        result = dict(sample)
        result[self.field] = np.ascontiguousarray(clip.T)
        result[f"{self.field}_frames"] = real
        return result

    def __repr__(self) -> str:
        return (f"ClipTransform({self.field!r}, seconds={self.frames / self.rate}, rate={self.rate}, "
                f"channels={self.channels}, train={self.train})")


def _rng() -> np.random.Generator:
    """The calling thread's generator, the same policy as :mod:`feedline.vision`'s helpers."""
    from feedline.vision import _rng as thread_rng

    return thread_rng(None)
