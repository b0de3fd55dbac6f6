"""feedline.audio: WAV clips of any length, channel count, width and rate into one batch shape."""

from __future__ import annotations

import io
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
    with pytest.raises(DecodeError, match="WAV unreadable"):
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
