"""feedline.padding.PadCollate and the speech recipe of round 13's audio newcomer: an LJSpeech-style
folder with a ``file,transcript,speaker`` metadata.csv, split by speaker, whole clips padded per batch."""

from __future__ import annotations

import io
import wave
from pathlib import Path

import numpy as np
import pytest
import torch

import feedline
from feedline import audio, episodes, padding
from feedline.errors import ConfigError
from feedline.format import pack
from feedline.format._sources import SourceRules


def _wav(frames: int, rate: int = 8000) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((np.arange(frames) % 100 + 1).astype("<i2").tobytes())
    return out.getvalue()


@pytest.mark.timeout(60)
def test_speech_split_by_speaker_and_padded_per_batch_to_its_longest_clip(tmp_path: Path) -> None:
    (tmp_path / "speech" / "wavs").mkdir(parents=True)
    rows, frames = ["file,transcript,speaker"], {}
    for i in range(12):
        name = f"LJ001-{i:04d}"
        frames[f"wavs/{name}"] = 400 + 97 * i
        (tmp_path / "speech" / "wavs" / f"{name}.wav").write_bytes(_wav(400 + 97 * i))
        rows.append(f"wavs/{name}.wav,word {i},spk{i % 3}")
    (tmp_path / "speech" / "metadata.csv").write_text("\n".join(rows) + "\n")
    pack([tmp_path / "speech"], tmp_path / "ds", rules=SourceRules(
        labels=str(tmp_path / "speech" / "metadata.csv"), label_column="speaker"))
    ds = feedline.open_dataset(tmp_path / "ds")
    speakers = ds.labels()  # the label column, from the index: torchvision's .targets
    assert ds.classes == ("spk0", "spk1", "spk2") and speakers.tolist() == [i % 3 for i in range(12)]
    val = ds.subset(np.flatnonzero(speakers == 2))
    assert val.labels().tolist() == [2] * 4 and len(val) == 4
    with pytest.raises(ConfigError, match=r"field 'speaker' is not an integer label.*label fields: \['cls'\]"):
        ds.labels("speaker")
    loader = feedline.Loader(val, batch_size=2, shuffle=False, workers=1, decode={"wav": audio.decode_wav},
                             transform=audio.ClipTransform("wav", seconds=None, rate=8000),
                             collate=padding.PadCollate({"wav": None}, axis=-1))
    with loader:
        batches = list(loader)
    for batch in batches:
        longest = max(frames[k] for k in batch["__key__"])
        assert batch["wav"].shape == (2, 1, longest) and batch["wav"].dtype == torch.float32
        assert batch["wav_lengths"].tolist() == [frames[k] for k in batch["__key__"]]
        for row, n in zip(batch["wav"], batch["wav_lengths"], strict=True):
            assert row[0, n - 1] != 0 and not row[0, n:].any()  # real audio, then zeros
        assert [j["transcript"] for j in batch["json"]] == [f"word {int(k[-4:])}" for k in batch["__key__"]]
        assert batch["cls"].tolist() == [2, 2]


def test_pad_collate_pads_rows_keeps_text_as_lists_and_names_an_unpadded_field() -> None:
    samples = [{"pts": np.ones((n, 4), np.float32), "meta": {"id": n}, "txt": "a" * n, "y": n} for n in (3, 1, 2)]
    batch = padding.PadCollate({"pts": None}, mask=True)(samples)
    assert batch["pts"].shape == (3, 3, 4) and batch["pts_lengths"].tolist() == [3, 1, 2]
    assert batch["pts_mask"].sum(1).tolist() == [3, 1, 2] and batch["y"].tolist() == [3, 1, 2]
    assert batch["meta"] == [{"id": 3}, {"id": 1}, {"id": 2}] and batch["txt"] == ["aaa", "a", "aa"]
    assert padding.PadCollate({"pts": 2}, lengths=True)(samples)["pts_lengths"].tolist() == [2, 1, 2]
    with pytest.raises(ValueError, match=r"field 'pts'.*differ in shape.*PadCollate\(pad=\{'pts': None\}\)"):
        padding.PadCollate()(samples)
    # before: episodes.Collate raised TypeError on a json dict ("can't convert np.ndarray of type numpy.object_")
    windows = episodes.Collate(pad={"pts": None})(samples)
    assert windows["meta"][0] == {"id": 3} and windows["pts_mask"].shape == (3, 3) and "pts_lengths" not in windows
