"""feedline.audio: WAV clips of any length, channel count, width and rate into one batch shape."""

from __future__ import annotations

import io
import struct
import wave
from pathlib import Path

import numpy as np
import pytest

import feedline
from feedline import audio
from feedline.errors import DecodeError
from feedline.format import pack


def _wav(samples: np.ndarray, rate: int, width: int = 2) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(samples.shape[1])
        w.setsampwidth(width)
        w.setframerate(rate)
        if width == 3:
            b = samples.astype("<i4").view(np.uint8).reshape(-1, 4)[:, :3]
            w.writeframes(b.tobytes())
        else:
            w.writeframes(samples.astype({1: "u1", 2: "<i2", 4: "<i4"}[width]).tobytes())
    return out.getvalue()


def test_decode_wav_gives_the_samples_and_rate_of_every_pcm_width() -> None:
    rng = np.random.default_rng(0)
    s16 = rng.integers(-2**15, 2**15, (100, 2)).astype(np.int16)
    got = audio.decode_wav(_wav(s16, 22050))
    assert got["rate"] == 22050 and got["samples"].dtype == np.int16
    np.testing.assert_array_equal(got["samples"], s16)
    s24 = rng.integers(-2**23, 2**23, (50, 1))
    np.testing.assert_array_equal(audio.decode_wav(_wav(s24, 8000, width=3))["samples"], s24 * 256)
    u8 = rng.integers(0, 256, (30, 1))
    np.testing.assert_array_equal(audio.decode_wav(_wav(u8, 8000, width=1))["samples"], (u8 - 128) * 256)
    assert audio.to_float(np.array([-2**15, 2**15 - 1], np.int16)).tolist() == [-1.0, (2**15 - 1) / 2**15]
    with pytest.raises(DecodeError, match="not a WAV file"):
        audio.decode_wav(b"RIFF not really")


def test_clip_transform_makes_one_shape_from_any_length_channels_and_rate() -> None:
    stereo = {"samples": np.full((11025, 2), 16384, np.int16), "rate": 22050}   # 0.5 s at 22.05 kHz
    out = audio.ClipTransform("wav", seconds=1.0, rate=16000)({"wav": stereo, "__key__": "k"})
    assert out["wav"].shape == (1, 16000) and out["wav"].dtype == np.float32
    assert out["wav_frames"] == 8000 and out["__key__"] == "k"
    np.testing.assert_allclose(out["wav"][0, :8000], 0.5)
    assert not out["wav"][0, 8000:].any()
    ramp = {"samples": np.arange(30000, dtype=np.int16).reshape(-1, 1), "rate": 16000}  # no int16 overflow
    train = audio.ClipTransform(seconds=1.0, rate=16000, channels=2)({"wav": ramp})
    assert train["wav"].shape == (2, 16000) and train["wav_frames"] == 16000
    first = train["wav"][0, 0] * 2**15
    np.testing.assert_allclose(train["wav"][0] * 2**15, np.arange(16000) + first)  # one contiguous piece
    evaluation = audio.ClipTransform(seconds=1.0, train=False)({"wav": ramp})
    assert evaluation["wav"][0, 0] == 0.0


@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_a_loader_batches_wavs_of_two_rates_and_layouts(tmp_path: Path, worker_type: str) -> None:
    rng = np.random.default_rng(1)
    lengths = {}
    (tmp_path / "clips").mkdir()
    for i in range(8):
        rate, channels = (16000, 1) if i % 2 else (8000, 2)
        n = int(rng.integers(rate // 4, rate))
        lengths[f"clip_{i}"] = round(n * 16000 / rate)
        (tmp_path / "clips" / f"clip_{i}.wav").write_bytes(
            _wav(rng.integers(-1000, 1000, (n, channels)), rate))
    pack([tmp_path / "clips"], tmp_path / "ds")
    loader = feedline.Loader(tmp_path / "ds", batch_size=4, workers=2, worker_type=worker_type, seed=0,
                             decode={"wav": audio.decode_wav},
                             transform=audio.ClipTransform("wav", seconds=1.0, rate=16000, train=False))
    seen = {}
    try:
        for batch in loader:
            assert tuple(batch["wav"].shape) == (4, 1, 16000) and str(batch["wav"].dtype) == "torch.float32"
            seen.update(zip(batch["__key__"], batch["wav_frames"].tolist(), strict=True))
    finally:
        loader.close()
    assert seen == lengths


def _riff(tag: int, channels: int, rate: int, bits: int, payload: bytes, *, sub: int | None = None,
          declared: int | None = None) -> bytes:
    """A WAV written by hand: any format tag, WAVE_FORMAT_EXTENSIBLE with sub-format ``sub``,
    a ``data`` size that may claim more than the file holds."""
    block = channels * ((bits + 7) // 8)
    head = struct.pack("<HHIIHH", 0xFFFE if sub is not None else tag, channels, rate, rate * block, block, bits)
    if sub is not None:  # cbSize, valid bits, channel mask, then the sub-format GUID
        head += struct.pack("<HHIH", 22, bits, 0, sub) + bytes.fromhex("000000001000800000aa00389b71")
    data_size = len(payload) if declared is None else declared
    body = (b"WAVE" + b"fmt " + struct.pack("<I", len(head)) + head + b"LIST" + struct.pack("<I", 3) + b"abc\0"
            + b"data" + struct.pack("<I", data_size) + payload)
    return b"RIFF" + struct.pack("<I", len(body)) + body


def test_decode_wav_reads_float_and_extensible_files() -> None:
    # Before: format 3 and WAVE_FORMAT_EXTENSIBLE were DecodeError 'unknown format: 3' / '65534'.
    ramp = np.linspace(-1, 1, 60).reshape(30, 2)
    for bits, dtype in ((32, "<f4"), (64, "<f8")):
        for sub in (None, 3):
            got = audio.decode_wav(_riff(3, 2, 44100, bits, ramp.astype(dtype).tobytes(), sub=sub))
            assert got["rate"] == 44100 and got["samples"].dtype == np.float32
            np.testing.assert_allclose(got["samples"], ramp, rtol=1e-6)
    s16 = np.arange(-50, 50, dtype=np.int16).reshape(50, 2)
    ext = audio.decode_wav(_riff(1, 2, 8000, 16, s16.tobytes(), sub=1))  # odd LIST chunk padded, skipped
    np.testing.assert_array_equal(ext["samples"], s16)
    clip = audio.ClipTransform(seconds=30 / 44100, rate=44100, channels=2, train=False)(
        {"wav": audio.decode_wav(_riff(3, 2, 44100, 32, ramp.astype("<f4").tobytes()))})
    np.testing.assert_allclose(clip["wav"], ramp.T, rtol=1e-6)


def test_zero_frames_and_a_data_size_beyond_the_file() -> None:
    empty = audio.decode_wav(_riff(1, 2, 8000, 16, b""))
    assert empty["samples"].shape == (0, 2)
    out = audio.ClipTransform(seconds=0.01, rate=8000)({"wav": empty})  # before: raw ValueError (reshape)
    assert out["wav"].shape == (1, 80) and out["wav_frames"] == 0 and not out["wav"].any()
    s16 = np.arange(100, dtype=np.int16).reshape(-1, 1)
    for declared in (10**6, 2**30, 0xFFFFFFFF):  # cut off, a 1 GB claim, a streaming placeholder
        got = audio.decode_wav(_riff(1, 1, 8000, 16, s16.tobytes() + b"\x01", declared=declared))
        np.testing.assert_array_equal(got["samples"], s16)  # the whole frames present


WAV = _riff(1, 1, 8000, 16, bytes(200))


@pytest.mark.parametrize(("data", "match"), [
    (b"", r"not a WAV file \(empty"),
    (WAV[:8], "truncated: the file ends at byte 8"),
    (WAV[:12], "no 'fmt ' chunk"),
    (WAV[:30], "truncated: its 'fmt ' chunk ends at byte 30"),
    (WAV[:36], "no 'data' chunk"),
    (b"ID3\x03\x00" + bytes(60), r"not a WAV file \(starts with b'ID3"),
    (b"\xff\xd8\xff\xe0" + bytes(60), "not a WAV file"),
    (b"RIFX" + WAV[4:], "big-endian RIFX"),
    (_riff(6, 1, 8000, 8, bytes(10)), r"compressed \(A-law\)"),
    (_riff(0x55, 1, 8000, 16, bytes(10)), r"compressed \(MP3\)"),
    (_riff(1, 0, 8000, 16, b""), "0 channel"),
    (_riff(1, 1, 0, 16, bytes(10)), "at 0 Hz"),  # before: ZeroDivisionError in ClipTransform
    (_riff(3, 1, 8000, 16, bytes(10)), "float of 16 bits"),
], ids=["empty", "cut-in-riff", "cut-after-riff", "cut-in-fmt", "no-data", "mp3", "jpeg", "rifx", "alaw",
        "mp3-in-riff", "0-channels", "0-hz", "float16"])
def test_damaged_or_foreign_wav_bytes_are_decode_errors(data: bytes, match: str) -> None:
    with pytest.raises(DecodeError, match=match) as info:
        audio.decode_wav(data)
    assert info.value.fix


def test_a_bad_wav_in_a_loader_names_its_key(tmp_path: Path) -> None:
    (tmp_path / "clips").mkdir()
    for i in range(3):
        (tmp_path / "clips" / f"c{i}.wav").write_bytes(_riff(1, 1, 8000, 16, bytes(200 * i)))  # c0: 0 frames
    (tmp_path / "clips" / "bad.wav").write_bytes(b"ID3\x03 an mp3 under a .wav name")
    pack([tmp_path / "clips"], tmp_path / "ds")
    loader = feedline.Loader(tmp_path / "ds", batch_size=4, workers=1, shuffle=False, on_error="skip",
                             decode={"wav": audio.decode_wav},
                             transform=audio.ClipTransform(seconds=0.01, rate=8000, train=False))
    try:
        frames = {k: int(n) for b in loader for k, n in zip(b["__key__"], b["wav_frames"], strict=True)}
    finally:
        loader.close()
    assert frames == {"c0": 0, "c1": 80, "c2": 80}
    strict = feedline.Loader(tmp_path / "ds", batch_size=4, workers=1, shuffle=False,
                             decode={"wav": audio.decode_wav})
    try:
        with pytest.raises(feedline.FeedlineError, match="not a WAV file") as info:
            list(strict)
    finally:
        strict.close()
    assert info.value.key == "bad" and info.value.field == "wav"
