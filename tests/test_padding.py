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
from feedline.errors import ArgumentError, ConfigError, StateError
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


def _speech(tmp_path: Path, n: int = 12) -> dict[str, int]:
    """An LJSpeech-style folder packed with its metadata.csv (speaker as the label): frames per key."""
    (tmp_path / "speech" / "wavs").mkdir(parents=True)
    rows, frames = ["file,transcript,speaker"], {}
    for i in range(n):
        name = f"LJ001-{i:04d}"
        frames[f"wavs/{name}"] = 400 + 97 * ((i * 7) % n)
        (tmp_path / "speech" / "wavs" / f"{name}.wav").write_bytes(_wav(frames[f"wavs/{name}"]))
        rows.append(f"wavs/{name}.wav,word {i},spk{i % 3}")
    (tmp_path / "speech" / "metadata.csv").write_text("\n".join(rows) + "\n")
    pack([tmp_path / "speech"], tmp_path / "ds", rules=SourceRules(
        labels=str(tmp_path / "speech" / "metadata.csv"), label_column="speaker"))
    return frames


def _speech_loader(ds: object, **kw: object) -> feedline.Loader:
    return feedline.Loader(ds, batch_size=2, workers=1, decode={"wav": audio.decode_wav},
                           transform=audio.ClipTransform("wav", seconds=None, rate=8000),
                           collate=padding.PadCollate({"wav": None}, axis=-1), **kw)


@pytest.mark.timeout(60)
def test_speech_split_by_speaker_and_padded_per_batch_to_its_longest_clip(tmp_path: Path) -> None:
    frames = _speech(tmp_path)
    ds = feedline.open_dataset(tmp_path / "ds")
    speakers = ds.labels()  # the label column, from the index: torchvision's .targets
    assert ds.classes == ("spk0", "spk1", "spk2") and speakers.tolist() == [i % 3 for i in range(12)]
    val = ds.subset(np.flatnonzero(speakers == 2))
    assert val.labels().tolist() == [2] * 4 and len(val) == 4
    with pytest.raises(ConfigError, match=r"field 'speaker' is not an integer label.*label fields: \['cls'\]"):
        ds.labels("speaker")
    with _speech_loader(val, shuffle=False) as loader:
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


@pytest.mark.timeout(60)
def test_length_buckets_from_the_index_sizes_pad_less_and_resume(tmp_path: Path) -> None:
    frames = _speech(tmp_path, n=32)
    ds = feedline.open_dataset(tmp_path / "ds")
    sizes = ds.sizes("wav")  # from the index: 44 header bytes + 2 per frame
    assert (sizes - 44).tolist() == [2 * frames[k] for k in list(ds.keys())]

    def padded_share(**kw: object) -> tuple[float, list[list[str]], dict[str, object]]:
        with _speech_loader(ds, seed=4, **kw) as loader:
            batches = list(loader)
            state = loader.state_dict()
        real = sum(int(b["wav_lengths"].sum()) for b in batches)
        return real / sum(b["wav"].numel() for b in batches), [b["__key__"] for b in batches], state

    plain, _, _ = padded_share()
    bucketed, keys, state = padded_share(lengths=sizes)
    assert bucketed > 0.9 > plain and len({k for b in keys for k in b}) == 32
    with _speech_loader(ds, seed=4, lengths=sizes) as loader:  # resume mid-epoch: the rest, in order
        it = iter(loader)
        head = [next(it)["__key__"] for _ in range(5)]
        saved = loader.state_dict()
    with _speech_loader(ds, seed=4, lengths=sizes) as loader:
        loader.load_state_dict(saved)
        assert head + [b["__key__"] for b in loader] == keys
    assert isinstance(state["shuffle"], str) and "by lengths" in state["shuffle"]
    with _speech_loader(ds, seed=4, lengths=sizes[::-1].copy()) as other, \
            pytest.raises(StateError, match="shuffle"):
        other.load_state_dict(saved)  # other lengths, another order: refused
    with pytest.raises(ConfigError, match="lengths has 3 values for a dataset of 32 samples"):
        _speech_loader(ds, lengths=[1, 2, 3])
    with pytest.raises(ArgumentError, match="lengths must be one integer per sample"):
        _speech_loader(ds, lengths=np.ones(32) * 0.5)
    with pytest.raises(ArgumentError, match=r"batch_sampler=.*similar lengths.*lengths="):
        feedline.Loader(ds, batch_sampler=object())  # a DataLoader user's bucketing: the argument to use
