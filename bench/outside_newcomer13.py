"""feedline Loader vs the DataLoader a newcomer would write, round 13 (issue 12): a GPT corpus and a speech folder.

Same method as ``bench/outside_shapes.py`` (each shape read once in order by both Loaders
and the DataLoader and compared value by value, then timed in interleaved rounds with 2
workers each; medians; samples per CPU-second of the process tree):

* ``gpt``: a folder of ``.jsonl`` documents, tokenised by a hand-written word tokenizer
  (``<eot>`` = 0 after each document). The Loader reads the blocks of 257 tokens that
  ``feedline.text.write_token_blocks`` packed (``text.documents`` reads the corpus) and
  splits each batch with ``text.inputs_targets`` in the loop; the baseline is nanoGPT's:
  the same token stream in a ``train.bin`` (uint16) read through an ``np.memmap`` as
  non-overlapping windows ``tokens[256 i : 256 i + 257]`` to int64 ``x``/``y``, batch 64;
* ``asr``: an LJSpeech-style folder, ``wavs/*.wav`` (16 kHz mono, 0.5-4 s) and a
  ``metadata.csv`` of ``file,transcript,speaker``, packed with ``feedline pack --labels
  metadata.csv --label-column speaker``; the Loader decodes with ``audio.decode_wav``,
  keeps whole clips (``ClipTransform(seconds=None)``) and pads each batch to its longest
  clip (``padding.PadCollate({"wav": None}, axis=-1)``); the baseline reads the CSV once,
  each clip with the ``wave`` module, and pads in its ``collate_fn``, batch 16.

    .venv/bin/python bench/outside_newcomer13.py [--quick] [--shapes gpt,asr] [--rounds 3] [--json PATH]
"""

from __future__ import annotations

import csv
import io
import json
import os
import sys
import wave
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from outside_shapes import _feedline, run
from peers_shapes import common_parser

SHAPES = ("gpt", "asr")
BATCH = {"gpt": 64, "asr": 16}
FULL = {"gpt": 30000, "asr": 1600}
QUICK = {"gpt": 200, "asr": 40}
"""Documents (``gpt``) or clips (``asr``)."""
CTX, RATE = 256, 16000
WORDS = [f"w{i}" for i in range(2000)]


def _corpus(src: Path, n: int) -> None:
    rng = np.random.default_rng(0)
    src.mkdir(parents=True)
    for part in range(max(1, n // 500)):
        with open(src / f"part-{part:03d}.jsonl", "w") as f:
            for _ in range(min(500, n - 500 * part)):
                words = rng.choice(WORDS, int(rng.integers(20, 800)))
                f.write(json.dumps({"text": " ".join(words)}) + "\n")


def _gpt(folder: Path, n: int) -> None:
    from feedline import text

    src = folder / "files"
    _corpus(src / "corpus", n)
    stoi = {w: i + 1 for i, w in enumerate(WORDS)}  # the hand-written tokenizer; 0 = <eot>
    docs = [[stoi[w] for w in d.split()] for d in text.documents(src / "corpus")]
    np.concatenate([np.array([*d, 0], np.uint16) for d in docs]).tofile(src / "train.bin")
    text.write_token_blocks(docs, folder / "ds", block=CTX, eot=0)


def _asr(folder: Path, n: int) -> None:
    rng = np.random.default_rng(1)
    src = folder / "files"
    (src / "wavs").mkdir(parents=True)
    rows = [("file", "transcript", "speaker")]
    for i in range(n):
        frames = int(RATE * rng.uniform(0.5, 4.0))
        out = io.BytesIO()
        with wave.open(out, "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(RATE)
            w.writeframes(rng.integers(-3000, 3000, frames).astype("<i2").tobytes())
        name = f"wavs/LJ{1 + i // 100:03d}-{i % 100:04d}.wav"
        (src / name).write_bytes(out.getvalue())
        rows.append((name, " ".join(rng.choice(WORDS, int(rng.integers(3, 15)))), f"spk{i % 8:02d}"))
    with open(src / "metadata.csv", "w", newline="") as f:
        csv.writer(f).writerows(rows)
    _feedline("pack", os.fspath(src), "--out", os.fspath(folder / "ds"), "--labels",
              os.fspath(src / "metadata.csv"), "--label-column", "speaker", "-q")


def build(shape: str, n: int, folder: Path) -> Path:
    """Write the shape's files under ``folder/files`` and its dataset in ``folder/ds``."""
    (_gpt if shape == "gpt" else _asr)(folder, n)
    return folder


class BinWindows:
    """nanoGPT's ``train.bin`` as non-overlapping windows of ``CTX + 1`` tokens."""

    def __init__(self, path: Path) -> None:
        self.data = np.memmap(path, dtype=np.uint16, mode="r")

    def __len__(self) -> int:
        return (len(self.data) - 1) // CTX

    def __getitem__(self, i: int) -> dict[str, Any]:
        import torch

        chunk = torch.from_numpy(self.data[i * CTX:i * CTX + CTX + 1].astype(np.int64))
        return {"x": chunk[:-1], "y": chunk[1:]}


class Speech:
    """What a speech user writes: the CSV read once, each clip with ``wave``, speakers numbered in sorted order."""

    def __init__(self, root: Path) -> None:
        self.root = root
        with open(root / "metadata.csv", newline="") as f:
            self.rows = list(csv.DictReader(f))
        self.rows.sort(key=lambda r: r["file"].rsplit(".", 1)[0])  # the packed order: by key
        speakers = sorted({r["speaker"] for r in self.rows})
        self.speaker = {s: i for i, s in enumerate(speakers)}

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        row = self.rows[i]
        with wave.open(os.fspath(self.root / row["file"]), "rb") as w:
            pcm = np.frombuffer(w.readframes(w.getnframes()), "<i2")
        return {"wav": pcm.astype(np.float32)[None] / 32768.0, "cls": self.speaker[row["speaker"]],
                "json": {"transcript": row["transcript"]}}


def pad_batch(samples: list[dict[str, Any]]) -> dict[str, Any]:
    import torch

    lengths = [s["wav"].shape[-1] for s in samples]
    wav = torch.zeros(len(samples), 1, max(lengths))
    for k, s in enumerate(samples):
        wav[k, :, :lengths[k]] = torch.from_numpy(s["wav"])
    n = torch.tensor(lengths)
    return {"wav": wav, "wav_lengths": n, "wav_frames": n.clone(), "cls": torch.tensor([s["cls"] for s in samples]),
            "json": [s["json"] for s in samples]}


def baseline(shape: str, folder: Path, workers: int, shuffle: bool = True) -> Callable[[], Any]:
    from torch.utils.data import DataLoader

    if shape == "gpt":
        ds, collate = BinWindows(folder / "files" / "train.bin"), None
    else:
        ds, collate = Speech(folder / "files"), pad_batch
    return lambda: DataLoader(ds, batch_size=BATCH[shape], shuffle=shuffle, num_workers=workers,
                              collate_fn=collate)


class InputsTargets:
    """The Loader's token blocks split in the loop, as a training script does."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def __iter__(self) -> Iterator[dict[str, Any]]:
        from feedline import text

        for batch in self.loader:
            x, y = text.inputs_targets(batch)
            yield {"x": x, "y": y}

    def close(self) -> None:
        self.loader.close()


def loader(shape: str, folder: Path, workers: int, worker_type: str, shuffle: bool = True) -> Callable[[], Any]:
    import feedline
    from feedline import audio, padding

    def make() -> Any:
        if shape == "gpt":
            return InputsTargets(feedline.Loader(os.fspath(folder / "ds"), batch_size=BATCH[shape], workers=workers,
                                                 worker_type=worker_type, drop_last=False, shuffle=shuffle, seed=0))
        return feedline.Loader(os.fspath(folder / "ds"), batch_size=BATCH[shape], workers=workers,
                               worker_type=worker_type, drop_last=False, shuffle=shuffle, seed=0,
                               decode={"wav": audio.decode_wav}, transform=audio.ClipTransform("wav", seconds=None),
                               collate=padding.PadCollate({"wav": None}, axis=-1))
    return make


def main(argv: list[str] | None = None) -> int:
    args = common_parser(__doc__.splitlines()[0], SHAPES).parse_args(argv)
    return run(args, SHAPES, "outside_newcomer13", QUICK if args.quick else FULL, build, make_loader=loader,
               make_baseline=baseline, batch=BATCH)


if __name__ == "__main__":
    raise SystemExit(main())
