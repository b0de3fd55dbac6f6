"""Small example inputs for the README: what a user brings to feedline.

``python -m feedline.demo.examples [DIR]`` writes, in DIR (default: the current folder):

* ``train/``: an ImageFolder tree of 3 classes (``cats``, ``dogs``, ``owls``), 21 phone-style
  photos each: dots in the names, 5% portrait among landscape, ``.jpg``/``.JPEG`` and a PNG,
  a sub-folder, a palette PNG, and the litter of a zip made on a Mac (``__MACOSX``) and of
  a folder browsed on Windows (``Thumbs.db``, ``.DS_Store``);
* ``photos/``: 40 WebDataset-named samples, ``000123.jpg`` + ``000123.cls``;
* ``old-shards/shard-000000.tar``: an existing WebDataset tar of 8 samples;
* ``episodes/``: 3 recorded robot episodes as a recorder writes them,
  ``episode_0000/{cam_front,cam_wrist}/000000.jpg ...`` (one frame per file, 12, 7 and 9
  frames), ``lidar/000000.bin`` (float32 N x 4 sweeps, N varying), ``joints.npy`` and
  ``actions.npy`` (T x 7 float32) and ``meta.json``; episode 1 lost its wrist camera for 2 frames;
* ``corpus/``: documents to pretrain a language model on, two ``.jsonl`` files of
  ``{"id", "text"}`` records (60 documents) and a ``books/`` folder of ``.txt`` files;
* ``speech/``: an LJSpeech-style folder, ``wavs/LJ001-0000.wav ...`` (24 clips of 0.25-1 s,
  16 kHz mono) and a ``metadata.csv`` of ``file,transcript,speaker`` (4 speakers);
* ``kaggle/``: a Kaggle competition's layout, a flat ``images/`` of 40 photos named by id
  (``3f2a9c1e.jpg``, every fifth a ``.png``) and a ``train.csv`` of ``image_id, fold,
  label_a, label_b, label_c, score`` (ids without extension, 5 folds, multi-label 0/1
  columns, a float target);
* ``scans/``: 6 CT-like scans and their segmentation masks in parallel folders,
  ``volumes/sub000.npy`` (int16 ``D x 48 x 48``, D = 10, 12 or 14) + ``masks/sub000.npy`` (uint8).

The README's examples run on these as written; ``tests/test_readme.py`` uses the same files.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tarfile
from pathlib import Path

import numpy as np
from PIL import Image

from feedline.errors import ConfigError

WRITES = ("train", "photos", "old-shards", "episodes", "corpus", "speech", "kaggle", "scans")


def _encode(img: np.ndarray, fmt: str = "JPEG") -> bytes:
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format=fmt, quality=85)
    return buf.getvalue()


def _photo(rng: np.random.Generator, h: int, w: int, tint: int) -> np.ndarray:
    yy, xx = np.mgrid[0:h, 0:w]
    img = np.stack([(yy * 255 // h), (xx * 255 // w), np.full((h, w), tint)], axis=2)
    return np.clip(img + rng.integers(-20, 20, img.shape), 0, 255).astype(np.uint8)


def write_examples(root: str | Path) -> list[Path]:
    """Write ``train/``, ``photos/``, ``old-shards/``, ``episodes/``, ``corpus/``, ``speech/``,
    ``kaggle/`` and ``scans/`` under ``root``; returns them.

    Refuses (``ConfigError``) when any of them exists, so nothing of the user's is
    overwritten."""
    root = Path(root).expanduser()
    made = [root / name for name in WRITES]
    for path in made:
        if path.exists():
            raise ConfigError("already exists; the examples write only new folders", path=str(path),
                              fix="give an empty folder: python -m feedline.demo.examples try/")
    rng = np.random.default_rng(0)
    for c, (cls, tint) in enumerate((("cats", 30), ("dogs", 130), ("owls", 230))):
        folder = root / "train" / cls
        folder.mkdir(parents=True)
        for i in range(20):
            h, w = (320, 240) if i % 20 == 3 else (240, 320)  # 5% portrait
            ext, fmt = ((".png", "PNG") if i == 7 else (".JPEG", "JPEG") if i % 5 == 1
                        else (".jpg", "JPEG"))
            (folder / f"IMG_2023.01.0{c}_{1000 + i}{ext}").write_bytes(_encode(_photo(rng, h, w, tint), fmt))
        (folder / "2024" / "Jan").mkdir(parents=True)
        Image.fromarray(_photo(rng, 240, 320, tint)).convert("P").save(folder / "2024" / "Jan" / "scan 1.PNG")
        (folder / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1" + bytes(64))
        (folder / "Thumbs.db").write_bytes(bytes(512))
        (root / "train" / "__MACOSX" / cls).mkdir(parents=True)
        (root / "train" / "__MACOSX" / cls / "._IMG_2023.01.00_1000.jpg").write_bytes(b"\x00\x05\x16\x07" + bytes(64))
    photos = root / "photos"
    photos.mkdir()
    for i in range(40):
        (photos / f"{i:06d}.jpg").write_bytes(_encode(_photo(rng, 48, 64, 7 * i % 256)))
        (photos / f"{i:06d}.cls").write_text(str(i % 4))
    (root / "old-shards").mkdir()
    with tarfile.open(root / "old-shards" / "shard-000000.tar", "w") as tar:
        for i in range(8):
            for name, data in ((f"{i:06d}.jpg", _encode(_photo(rng, 48, 64, 9))),
                               (f"{i:06d}.cls", str(i % 2).encode())):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    _episodes(root / "episodes", rng)
    _corpus(root / "corpus", rng)
    _speech(root / "speech", rng)
    _kaggle(root / "kaggle", rng)
    _scans(root / "scans", rng)
    return made


def _kaggle(root: Path, rng: np.random.Generator) -> None:
    (root / "images").mkdir(parents=True)
    rows = ["image_id,fold,label_a,label_b,label_c,score"]
    for i in range(40):
        iid = f"{int(rng.integers(16**8)):08x}"
        fmt = "PNG" if i % 5 == 4 else "JPEG"
        (root / "images" / f"{iid}.{fmt.lower().replace('jpeg', 'jpg')}").write_bytes(
            _encode(_photo(rng, 48, 64, 6 * i), fmt))
        labels = (rng.random(3) < (0.3, 0.5, 0.2)).astype(int)
        rows.append(f"{iid},{i % 5},{labels[0]},{labels[1]},{labels[2]},{rng.normal():.3f}")
    (root / "train.csv").write_text("\n".join(rows) + "\n")


def _scans(root: Path, rng: np.random.Generator) -> None:
    for part in ("volumes", "masks"):
        (root / part).mkdir(parents=True)
    for i in range(6):
        depth = (10, 12, 14)[i % 3]
        np.save(root / "volumes" / f"sub{i:03d}.npy", rng.integers(-1000, 2000, (depth, 48, 48), dtype=np.int16))
        np.save(root / "masks" / f"sub{i:03d}.npy", (rng.random((depth, 48, 48)) < 0.05).astype(np.uint8))


WORDS = ("the", "a", "of", "to", "and", "in", "is", "it", "was", "for", "on", "that", "with", "as", "by",
         "at", "from", "his", "her", "they", "we", "you", "said", "train", "model", "data", "loader",
         "batch", "token", "word", "speech", "audio", "image", "shard", "disk")


def _corpus(root: Path, rng: np.random.Generator) -> None:
    (root / "books").mkdir(parents=True)
    for part in range(2):
        with open(root / f"part-{part:03d}.jsonl", "w") as f:
            for d in range(30):
                words = rng.choice(WORDS, int(rng.integers(10, 200)))
                f.write(json.dumps({"id": f"doc{30 * part + d}", "text": " ".join(words) + "."}) + "\n")
    for b in range(2):
        (root / "books" / f"book{b}.txt").write_text(" ".join(rng.choice(WORDS, 1500)) + ".")


def _speech(root: Path, rng: np.random.Generator) -> None:
    import wave

    (root / "wavs").mkdir(parents=True)
    rows = ["file,transcript,speaker"]
    for i in range(24):
        frames = int(rng.integers(4000, 16000))
        pitch = 150 + 40 * (i % 4)
        pcm = 8000 * np.sin(2 * np.pi * pitch * np.arange(frames) / 16000) + rng.normal(0, 300, frames)
        with wave.open(str(root / "wavs" / f"LJ001-{i:04d}.wav"), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(16000)
            w.writeframes(pcm.astype("<i2").tobytes())
        rows.append(f"wavs/LJ001-{i:04d}.wav,{' '.join(rng.choice(WORDS, int(rng.integers(2, 8))))},spk{i % 4:02d}")
    (root / "metadata.csv").write_text("\n".join(rows) + "\n")


def _episodes(root: Path, rng: np.random.Generator) -> None:
    for e, frames in enumerate((12, 7, 9)):
        ep = root / f"episode_{e:04d}"
        for cam, tint in (("cam_front", 60), ("cam_wrist", 200)):
            (ep / cam).mkdir(parents=True)
            for t in range(frames):
                if not (e == 1 and cam == "cam_wrist" and t in (3, 4)):
                    (ep / cam / f"{t:06d}.jpg").write_bytes(_encode(_photo(rng, 48, 64, tint + 4 * t)))
        (ep / "lidar").mkdir()
        for t in range(frames):
            rng.random((int(rng.integers(50, 200)), 4), dtype=np.float32).tofile(ep / "lidar" / f"{t:06d}.bin")
        np.save(ep / "joints.npy", rng.random((frames, 7), dtype=np.float32))
        np.save(ep / "actions.npy", rng.random((frames, 7), dtype=np.float32))
        (ep / "meta.json").write_text(json.dumps({"task": "pick up the cube", "fps": 10, "robot": "arm7"}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m feedline.demo.examples",
                                     description="write the README's example inputs (train/, photos/, old-shards/, episodes/, "
                                                 "corpus/, speech/, kaggle/, scans/)")
    parser.add_argument("dir", nargs="?", default=".", help="where to write them (default: here)")
    args = parser.parse_args(argv)
    try:
        made = write_examples(args.dir)
    except ConfigError as e:
        print(f"feedline: error: {e}", file=sys.stderr)
        return 1
    for path in made:
        print(f"wrote {path}/")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
