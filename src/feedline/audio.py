"""Audio helpers for ``Loader(decode=..., transform=...)``: WAV files to fixed-size clips.

A ``.wav`` field arrives as ``bytes`` unless a decoder is given. The recipe for
clips of varying length, channel count and sample rate::

    from feedline import audio
    loader = feedline.Loader(ds, batch_size=32, decode={"wav": audio.decode_wav},
                             transform=audio.ClipTransform("wav", seconds=1.0, rate=16000))
    # batch["wav"]: float32[32, 1, 16000]; batch["wav_frames"]: int64[32], the frames
    # that are audio (the rest of a short clip is zeros)

Speech that must not be cut (ASR), padded per batch to its longest clip::

    loader = feedline.Loader(ds, batch_size=32, decode={"wav": audio.decode_wav},
                             transform=audio.ClipTransform("wav", seconds=None),
                             collate=feedline.padding.PadCollate({"wav": None}, axis=-1))
    # batch["wav"]: float32[32, 1, longest]; batch["wav_lengths"]: int64[32];
    # batch["json"]: the rows of a --labels metadata.csv, a list of dicts

- :func:`decode_wav` (its own RIFF reader, no extra dependency): integer PCM
  of 8, 16, 24 or 32 bits and 32/64-bit IEEE float, plain or
  WAVE_FORMAT_EXTENSIBLE, to ``{"samples": int16/int32/float32 [frames,
  channels], "rate": int}``; it runs in the workers (threads or processes).
  A compressed WAV (A-law, ADPCM, MP3), a cut-off header or other bytes under a
  ``.wav`` name is a ``DecodeError`` naming the sample: decode compressed ones
  with your own function (``soundfile.read(io.BytesIO(data))``) in
  ``decode={"wav": fn}``.
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

from typing import Any

import numpy as np

from feedline.errors import ConfigError, DecodeError

__all__ = ["ClipTransform", "crop_or_pad", "decode_wav", "resample", "to_float"]

_PCM, _FLOAT, _EXTENSIBLE = 1, 3, 0xFFFE
_INT_DTYPES: dict[int, str] = {1: "u1", 2: "<i2", 4: "<i4"}
_FLOAT_DTYPES: dict[int, str] = {4: "<f4", 8: "<f8"}
_FORMAT_NAMES: dict[int, str] = {2: "MS ADPCM", 6: "A-law", 7: "mu-law", 0x11: "IMA ADPCM", 0x55: "MP3"}
_OWN_DECODER = ("decode this format with your own function, e.g. decode={'wav': fn} calling "
                "soundfile.read(io.BytesIO(data))")


def decode_wav(data: bytes | bytearray | memoryview) -> dict[str, Any]:
    """WAV bytes (PCM or IEEE float) -> ``{"samples": array[frames, channels], "rate": int}``.

    Reads the RIFF chunks itself (no extra dependency, no copy of the payload before the
    array): integer PCM of 8, 16, 24 or 32 bits, 32- and 64-bit IEEE float (format 3), and
    both inside ``WAVE_FORMAT_EXTENSIBLE``. Samples are ``int16`` for 8- and 16-bit files
    (8-bit re-centred and scaled by 256), ``int32`` for 24- and 32-bit files (24-bit scaled
    by 256) and ``float32`` for float files, so :func:`to_float` maps every width to
    ``[-1, 1)``. A ``data`` chunk that declares more bytes than the file holds (a recording
    cut off, or a streaming writer's placeholder size) gives the whole frames present; a
    file of 0 frames gives ``samples`` of shape ``(0, channels)``.

    Raises:
        DecodeError: not a RIFF/WAVE file, a header cut off (the byte where it ends), no
            ``fmt `` or ``data`` chunk, 0 channels or a rate of 0, a block size that does not
            match the sample width, or a compressed format (A-law, ADPCM, MP3...) named.
    """
    buf = memoryview(data).cast("B")
    size = len(buf)
    if 4 <= size < 12 and buf[:4] == b"RIFF":
        raise DecodeError(f"WAV truncated: the file ends at byte {size}, inside the 12-byte RIFF header",
                          fix="re-export or re-copy the file")
    if size < 12 or buf[:4] != b"RIFF" or buf[8:12] != b"WAVE":
        head = bytes(buf[:12])
        what = ("big-endian RIFX" if head[:4] == b"RIFX" else "empty" if not head
                else f"starts with {head!r}")
        raise DecodeError(f"not a WAV file ({what}; a WAV starts with RIFF....WAVE)",
                          fix="check the file: a .wav name over other bytes (or a cut-off file) "
                          "needs re-exporting or a decoder for its real format")
    fmt: tuple[int, int, int, int, int] | None = None  # tag, channels, rate, block, bits
    pos, payload = 12, None
    while pos + 8 <= size:
        cid = bytes(buf[pos : pos + 4])
        clen = int.from_bytes(buf[pos + 4 : pos + 8], "little")
        body = pos + 8
        if cid == b"fmt ":
            if clen < 16 or body + 16 > size:
                raise DecodeError(f"WAV truncated: its 'fmt ' chunk ends at byte {size} of the file "
                                  f"(needs {body + 16})", fix="re-export or re-copy the file")
            tag, channels, rate = (int.from_bytes(buf[body : body + 2], "little"),
                                   int.from_bytes(buf[body + 2 : body + 4], "little"),
                                   int.from_bytes(buf[body + 4 : body + 8], "little"))
            block, bits = (int.from_bytes(buf[body + 12 : body + 14], "little"),
                           int.from_bytes(buf[body + 14 : body + 16], "little"))
            if tag == _EXTENSIBLE:
                if clen < 40 or body + 26 > size:
                    raise DecodeError("WAV WAVE_FORMAT_EXTENSIBLE 'fmt ' chunk too short for its "
                                      "sub-format", fix="re-export the file")
                tag = int.from_bytes(buf[body + 24 : body + 26], "little")
            fmt = (tag, channels, rate, block, bits)
        elif cid == b"data":
            payload = buf[body : min(body + clen, size)]  # a size beyond the file: what is there
            if fmt is not None:
                break
        pos = body + clen + (clen & 1)  # chunks are padded to even sizes
    if fmt is None or payload is None:
        missing = "'fmt '" if fmt is None else "'data'"
        raise DecodeError(f"WAV has no {missing} chunk (the chunks end at byte {min(pos, size)} of {size}: "
                          "truncated or not audio)", fix="re-export or re-copy the file")
    tag, channels, rate, block, bits = fmt
    if tag not in (_PCM, _FLOAT):
        name = _FORMAT_NAMES.get(tag, f"format tag {tag:#06x}")
        raise DecodeError(f"WAV is compressed ({name}): decode_wav reads PCM and IEEE float only",
                          fix=_OWN_DECODER)
    if channels == 0 or rate == 0:
        raise DecodeError(f"WAV header says {channels} channel(s) at {rate} Hz",
                          fix="re-export the file; a WAV needs at least 1 channel and a rate above 0")
    width = (bits + 7) // 8
    table = _INT_DTYPES if tag == _PCM else _FLOAT_DTYPES
    if (width not in table and not (tag == _PCM and width == 3)) or block != width * channels:
        kind = "PCM" if tag == _PCM else "float"
        raise DecodeError(f"WAV {kind} of {bits} bits in blocks of {block} bytes for {channels} "
                          "channel(s) is not a layout decode_wav reads",
                          fix=_OWN_DECODER)
    frames = len(payload) // block
    raw = payload[: frames * block]
    if width == 3:
        b = np.frombuffer(raw, np.uint8).reshape(-1, 3).astype(np.int32)
        samples = ((b[:, 0] << 8) | (b[:, 1] << 16) | (b[:, 2] << 24)).astype(np.int32)
    else:
        samples = np.frombuffer(raw, table[width])
        if tag == _FLOAT:
            samples = samples.astype(np.float32)
        elif width == 1:
            samples = ((samples.astype(np.int16) - 128) * 256).astype(np.int16)
        else:
            samples = samples.copy()  # own memory: the caller's bytes may be a reused buffer
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
    if isinstance(rate, bool) or not isinstance(rate, (int, np.integer)) or rate < 1:
        raise ConfigError(f"resample: rate must be a positive integer (Hz), got {rate!r}", field="rate")
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

    ``seconds=None`` keeps whole clips (speech that must not be cut, ASR): every clip
    comes out at ``rate`` and ``channels`` but keeps its length, so pad each batch to
    its longest clip with ``collate=feedline.padding.PadCollate({field: None}, axis=-1)``
    (``f"{field}_lengths"`` per clip) instead of padding every clip to the longest one.

    Raises:
        ConfigError: a bad argument; at call time, a sample without ``field``
            (the loader adds the sample key).
    """

    def __init__(self, field: str = "wav", *, seconds: float | None = 1.0, rate: int = 16000, channels: int = 1,
                 train: bool = True) -> None:
        if not isinstance(field, str) or not field:
            raise ConfigError(f"ClipTransform: field must be a field name, got {field!r}")
        if isinstance(rate, bool) or not isinstance(rate, int) or rate < 1:
            raise ConfigError(f"ClipTransform: rate must be a positive integer (Hz), got {rate!r}")
        if channels not in (1, 2):
            raise ConfigError(f"ClipTransform: channels must be 1 or 2, got {channels!r}")
        if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float))
                                    or not 0 < seconds * rate < 2**31):
            raise ConfigError(f"ClipTransform: seconds must be positive (or None: whole clips), got {seconds!r}")
        self.field, self.rate, self.channels, self.train = field, rate, channels, bool(train)
        self.frames = None if seconds is None else max(1, round(seconds * rate))

    def __call__(self, sample: dict[str, Any]) -> dict[str, Any]:
        value = sample.get(self.field) if isinstance(sample, dict) else None
        if value is None:
            have = sorted(sample) if isinstance(sample, dict) else type(sample).__name__
            raise ConfigError(f"ClipTransform: the sample has no field {self.field!r} (it has {have})",
                              fix="pass the audio field's name, and decode={'wav': audio.decode_wav}")
        samples, rate = (value["samples"], value["rate"]) if isinstance(value, dict) else (value, self.rate)
        arr = np.asarray(samples)  # [frames] or [frames, channels], 0 frames too
        x = to_float(arr.reshape(len(arr), int(np.prod(arr.shape[1:])) if arr.ndim > 1 else 1))
        if x.shape[1] != self.channels:
            x = x.mean(axis=1, keepdims=True) if self.channels == 1 else np.repeat(x[:, :1], 2, axis=1)
        x = resample(x, int(rate), self.rate)
        if self.frames is None:
            clip, real = x, len(x)
        else:
            start = 0
            if self.train and len(x) > self.frames:
                start = int(_rng().integers(0, len(x) - self.frames + 1))
            clip, real = crop_or_pad(x, self.frames, start)
        result = dict(sample)
        result[self.field] = np.ascontiguousarray(clip.T)
        result[f"{self.field}_frames"] = real
        return result

    def __repr__(self) -> str:
        seconds = None if self.frames is None else self.frames / self.rate
        return (f"ClipTransform({self.field!r}, seconds={seconds}, rate={self.rate}, "
                f"channels={self.channels}, train={self.train})")


def _rng() -> np.random.Generator:
    """The calling thread's generator, the same policy as :mod:`feedline.vision`'s helpers."""
    from feedline.vision import _rng as thread_rng

    return thread_rng(None)
