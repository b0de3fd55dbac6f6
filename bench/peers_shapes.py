"""feedline Loader vs torch DataLoader on datasets laid out as users have them.

Not the peers table (bench/peers.py: one field + a label, every peer), but the other
shapes a user brings, each against the obvious torch DataLoader over the same data, with
the same workers (2) and the same decoders, in interleaved rounds:

* ``seg``: ``.jpg`` frame + ``.seg.png`` mask (palette and grey masks mixed), batch 16;
* ``tokens``: ``.npy`` int32 sequences of 50-500 tokens, padded by a collate, batch 32;
* ``sensor``: ``cam0.jpg..cam5.jpg`` + ``lidar.bin`` (float32 Nx4, N varies, a list) +
  ``imu.npy`` (100x6 float64), batch 8;
* ``mnist``: ``.npy`` uint8 (1, 28, 28) + ``.cls``, batch 64;
* ``f16``: ``.npy`` float16 (3, 64, 64), batch 32;
* ``wds``: tars written by ``webdataset.TarWriter`` (keys with dots in folders, ``.jpg``,
  ``.json``, ``.txt``, ``.cls``, ``.label``, ``.class.txt``), adopted with
  ``feedline index``; the baseline is WebDataset + DataLoader over the same tars;
* ``folder``: an ImageFolder tree (class names with spaces, unicode and dots; ``IMG_2023.01.05``
  names; ``.jpg``/``.JPEG``/``.png``/``.webp``; grey, RGB and RGBA; landscape and portrait),
  packed with ``--labels from-folder``; both contenders run ``vision.ImageTransform`` to
  ``float32[3, 64, 64]``, batch 32; the baseline is a torchvision-style ImageFolder Dataset;
* ``csv``: a flat folder of ``.jpg`` plus ``labels.csv`` (``filename,label`` with class
  names), packed with ``--labels labels.csv``, batch 64; the baseline reads the CSV once;
* ``audio``: ``.wav`` clips of 0.3-2 s (16 kHz int16) + ``.txt`` transcripts, decoded with
  the standard library's ``wave`` by both, clips delivered as a list, batch 16;
* ``npymix``: five ``.npy`` fields of the dtypes users save: float16 (3, 32, 32), int64 (16,),
  bool (32, 32), a 0-d float64 and a big-endian ``>f4`` (64,) (the baseline converts it to
  native order, as torch needs), default collate, batch 64;
* ``depth``: ``.jpg`` 96x128 + a 16-bit ``.depth.png`` (uint16) + per-frame ``.json``
  intrinsics, in scene folders, batch 16 (the JSON as a list of dicts);
* ``meta``: only a ``.json`` of metadata per sample (caption, a varying list of boxes),
  batch 64, delivered as a list of dicts;
* ``toktext``: token sequences of 5-400 ids as ``.json`` lists and ``.txt`` (space-separated),
  padded by a collate that parses the JSON, batch 32;
* ``photos``: an ImageFolder as users unzip it: nested folders per class, ``.JPG/.jpeg/.PNG``
  spellings, RGB, grey, CMYK and progressive JPEGs, grey, palette and RGBA PNGs, file names
  with spaces, plus ``__MACOSX/``, ``.DS_Store`` and ``Thumbs.db`` (left out by the pack and by
  the baseline); both run ``vision.ImageTransform`` to ``float32[3, 64, 64]``, batch 32;
* ``pt``: per-sample ``torch.save`` dicts (``x`` float32 (3, 32, 32), ``y`` a 0-d int64 tensor),
  loaded with ``torch.load(weights_only=True)`` by both, collated member by member, batch 64;
* ``npz``: ``numpy.savez`` of ``image`` uint8 (32, 32, 3), ``label`` 0-d int64 and ``boxes``
  float32 (1-4, 4), batch 64 (the baseline's collate lists the boxes, as feedline does);
* ``clips``: video clips stored as frames, ``clip_00000/frame_000.jpg ... frame_007.jpg`` (64x64),
  packed with ``--key folder`` (one sample per clip, a field per frame), batch 8; the baseline
  stacks each clip's frames;
* ``coco``: a folder of ``.jpg`` (96x128) and one COCO ``annotations.json``, packed with
  ``--labels annotations.json``; the boxes arrive as a list of dicts, batch 32;
* ``phone``: an ImageFolder of 4000x3000 phone photos, both run ``vision.ImageTransform`` to
  ``float32[3, 224, 224]``, batch 8;
* ``corrupt``: an ImageFolder of 64x64 JPEGs in which one file is truncated and one empty;
  ``Loader(on_error="skip")`` against the DataLoader recipe users write (``None`` from
  ``__getitem__`` for a file that fails, dropped by the collate), batch 32.

The DataLoader baselines read the original small files (map-style Dataset: one ``open``
per field, simplejpeg / Pillow / ``np.load``, default collate; shuffled). Rates count the
samples after the first batch over the time from it to the last batch (worker start-up is
what ``first_batch_s`` reports). Medians of ``--rounds`` rounds, min-max, ratio against the
DataLoader of the same run, load average beside each shape, and samples per CPU-second of
the contender's process tree (load on a shared host lowers samples/s, not this). Numbers
from a shared machine are preliminary.

    .venv/bin/python bench/peers_shapes.py [--quick] [--shapes seg,sensor] [--auto] [--second-epoch] [--json PATH]

``--second-epoch`` times each contender's second epoch instead (the same loader
iterated twice; DataLoaders keep their workers): steady state, after start-up and
after ``worker_type="auto"`` (``--auto``) has decided.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

SHAPES = ("seg", "tokens", "sensor", "mnist", "f16", "wds", "folder", "csv", "audio", "npymix",
          "depth", "meta", "toktext", "photos", "pt", "npz", "clips", "coco", "phone", "corrupt")
BATCH = {"seg": 16, "tokens": 32, "sensor": 8, "mnist": 64, "f16": 32, "wds": 32, "folder": 32,
         "csv": 64, "audio": 16, "npymix": 64, "depth": 16, "meta": 64, "toktext": 32, "photos": 32,
         "pt": 64, "npz": 64, "clips": 8, "coco": 32, "phone": 8, "corrupt": 32}
FULL = {"seg": 1000, "tokens": 20_000, "sensor": 400, "mnist": 60_000, "f16": 20_000, "wds": 2000,
        "folder": 2000, "csv": 4000, "audio": 2000, "npymix": 20_000, "depth": 2000, "meta": 20_000,
        "toktext": 10_000, "photos": 2000, "pt": 10_000, "npz": 10_000, "clips": 400, "coco": 2000,
        "phone": 96, "corrupt": 1000}
QUICK = {"seg": 48, "tokens": 96, "sensor": 24, "mnist": 256, "f16": 96, "wds": 64, "folder": 48,
         "csv": 96, "audio": 48, "npymix": 128, "depth": 32, "meta": 128, "toktext": 64, "photos": 64,
         "pt": 128, "npz": 128, "clips": 16, "coco": 64, "phone": 16, "corrupt": 64}
BAD = {"corrupt": 2}
"""Damaged samples of a shape: the DataLoader recipe drops them (its batches come out short);
``Loader(on_error="skip")`` refills the batch with the samples that follow it in the order."""
CLASSES = ("golden retriever", "café", "n01.440764", "Zebra")
IMAGE_FIELDS = ("jpg", "png", "webp")


# --- data -----------------------------------------------------------------------------------

def _jpg(rng: np.random.Generator, h: int, w: int) -> bytes:
    import simplejpeg

    return bytes(simplejpeg.encode_jpeg((rng.integers(0, 8, (h, w, 3), dtype=np.uint8) * 32), quality=85))


def _png(mask: np.ndarray, palette: bool) -> bytes:
    from PIL import Image

    img = Image.fromarray(mask, mode="L")
    if palette:
        img = img.convert("P")
        img.putpalette([(i * 37) % 256 for i in range(768)])
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


def _pillow(rng: np.random.Generator, i: int) -> tuple[str, bytes]:
    """One photo of the ``folder`` shape: (extension as the file has it, bytes)."""
    from PIL import Image

    h, w = (96, 128) if i % 5 else (128, 96)
    img = Image.fromarray(rng.integers(0, 8, (h, w, 3), dtype=np.uint8) * 32)
    ext, fmt, mode = [("jpg", "JPEG", "RGB"), ("JPEG", "JPEG", "L"), ("png", "PNG", "RGBA"),
                      ("jpg", "JPEG", "RGB"), ("webp", "WEBP", "RGB")][i % 5]
    buf = io.BytesIO()
    img.convert(mode).save(buf, format=fmt)
    return ext, buf.getvalue()


PHOTO_KINDS = (("JPG", "JPEG", "RGB", {}), ("png", "PNG", "L", {}), ("PNG", "PNG", "P", {}),
               ("jpg", "JPEG", "CMYK", {}), ("jpeg", "JPEG", "RGB", {"progressive": True}),
               ("png", "PNG", "RGBA", {}), ("JPEG", "JPEG", "L", {}), ("jpg", "JPEG", "RGB", {}))
"""(extension as the file has it, Pillow format, mode, save options) of the ``photos`` shape."""


def _photo(rng: np.random.Generator, i: int) -> tuple[str, bytes]:
    from PIL import Image

    ext, fmt, mode, kw = PHOTO_KINDS[i % len(PHOTO_KINDS)]
    h, w = (96, 128) if i % 5 else (128, 96)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 8, (h, w, 3), dtype=np.uint8) * 32).convert(mode).save(buf, format=fmt, **kw)
    return ext, buf.getvalue()


def _png16(a: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(a).save(buf, format="PNG")  # uint16 -> mode I;16
    return buf.getvalue()


def _big_photo(rng: np.random.Generator) -> bytes:
    """A 4000x3000 JPEG about the size a phone writes (2-4 MB; noise would make 8 MB files
    whose entropy decoding, not the pixels, sets the time): smooth blocks plus grain."""
    import simplejpeg

    small = rng.integers(0, 256, (60, 80, 3), dtype=np.uint8)
    big = np.repeat(np.repeat(small, 50, axis=0), 50, axis=1)
    grain = rng.integers(0, 12, (3000, 4000, 1), dtype=np.uint8)
    return bytes(simplejpeg.encode_jpeg(np.ascontiguousarray(big // 2 + grain), quality=90))


def _pt(rng: np.random.Generator, i: int) -> bytes:
    import torch

    buf = io.BytesIO()
    torch.save({"x": torch.from_numpy(rng.standard_normal((3, 32, 32), dtype=np.float32)),
                "y": torch.tensor(i % 10)}, buf)
    return buf.getvalue()


def _tokens(rng: np.random.Generator) -> list[int]:
    return [int(t) for t in rng.integers(0, 50_000, int(rng.integers(5, 401)))]


def _wav(rng: np.random.Generator, frames: tuple[int, int] = (4800, 32_000)) -> bytes:
    """A 16 kHz mono int16 WAV of ``frames`` frames (low, high: drawn)."""
    import wave

    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16_000)
        w.writeframes((rng.standard_normal(int(rng.integers(*frames))) * 3000).astype("<i2").tobytes())
    return buf.getvalue()


def samples(shape: str, n: int, seed: int = 0) -> Iterator[tuple[str, dict[str, bytes]]]:
    """``(key, {field: bytes})`` of the shape's ``n`` samples (deterministic); the key of a
    ``folder`` or ``csv`` sample is its file name without the extension."""
    rng = np.random.default_rng(seed)
    for i in range(n):
        if shape == "folder":
            ext, data = _pillow(rng, i)
            yield f"{CLASSES[i % len(CLASSES)]}/IMG_2023.01.05_{i:05d}", {ext: data}
        elif shape == "csv":
            yield f"{i:05d}_{'abcdef'[i % 6]}.photo", {"jpg": _jpg(rng, 96, 128)}
        elif shape == "audio":
            yield f"speaker{i % 7}/utt_{i:05d}", {"wav": _wav(rng), "txt": f"words of clip {i} ünï".encode()}
        elif shape == "seg":
            mask = rng.integers(0, 21, (128, 160), dtype=np.uint8)
            yield f"img{i:06d}", {"jpg": _jpg(rng, 128, 160), "seg.png": _png(mask, i % 2 == 0)}
        elif shape == "tokens":
            yield f"{i:07d}", {"npy": _npy(rng.integers(0, 50_000, int(rng.integers(50, 501)), dtype=np.int32))}
        elif shape == "sensor":
            fields = {f"cam{c}.jpg": _jpg(rng, 120, 160) for c in range(6)}
            fields["lidar.bin"] = rng.standard_normal((int(rng.integers(1000, 4000)), 4)).astype(np.float32).tobytes()
            fields["imu.npy"] = _npy(rng.standard_normal((100, 6)))
            yield f"drive_01/frame_{i:06d}", fields
        elif shape == "mnist":
            yield f"{i:07d}", {"npy": _npy(rng.integers(0, 255, (1, 28, 28), dtype=np.uint8)),
                               "cls": b"%d" % (i % 10)}
        elif shape == "npymix":
            yield f"{i:07d}", {
                "x.npy": _npy(rng.standard_normal((3, 32, 32)).astype(np.float16)),
                "ids.npy": _npy(rng.integers(-2**40, 2**40, 16, dtype=np.int64)),
                "mask.npy": _npy(rng.integers(0, 2, (32, 32)).astype(bool)),
                "t.npy": _npy(np.array(i * 0.5)), "be.npy": _npy(rng.standard_normal(64).astype(">f4"))}
        elif shape == "depth":
            yield f"scene_{i % 5}/{i:06d}", {
                "jpg": _jpg(rng, 96, 128), "depth.png": _png16(rng.integers(0, 65535, (96, 128), dtype=np.uint16)),
                "json": json.dumps({"fx": 525.0, "fy": 525.0, "frame": i}).encode()}
        elif shape == "meta":
            yield f"{i:07d}", {"json": json.dumps({
                "id": i, "caption": f"a photo of thing {i} ü", "score": i / 7,
                "boxes": [[1, 2, 3, 4]] * (i % 5), **({"extra": None} if i % 7 == 0 else {})}).encode()}
        elif shape == "toktext":
            toks = _tokens(rng)
            yield f"{i:07d}", {"json": json.dumps(toks).encode(), "txt": " ".join(map(str, toks)).encode()}
        elif shape == "photos":
            ext, data = _photo(rng, i)
            where = "" if i % 3 else "2024/Jan/"
            yield f"{CLASSES[i % len(CLASSES)]}/{where}IMG {i:05d}.x", {ext: data}
        elif shape == "f16":
            yield f"{i:07d}", {"npy": _npy(rng.standard_normal((3, 64, 64)).astype(np.float16))}
        elif shape == "pt":
            yield f"{i:07d}", {"pt": _pt(rng, i)}
        elif shape == "npz":
            buf = io.BytesIO()
            np.savez(buf, image=rng.integers(0, 255, (32, 32, 3), dtype=np.uint8), label=np.int64(i % 10),
                     boxes=rng.random((int(rng.integers(1, 5)), 4), dtype=np.float32))
            yield f"{i:07d}", {"npz": buf.getvalue()}
        elif shape == "clips":  # key/field as --key folder makes them: clip folder / frame file
            yield f"clip_{i:05d}", {f"frame_{f:03d}.jpg": _jpg(rng, 64, 64) for f in range(8)}
        elif shape == "coco":
            yield f"{i:012d}", {"jpg": _jpg(rng, 96, 128)}
        elif shape == "phone":
            yield f"{CLASSES[i % 2]}/IMG_{i:04d}", {"jpg": _big_photo(rng)}
        elif shape == "corrupt":
            data = _jpg(rng, 64, 64)
            yield f"{CLASSES[i % 3]}/{i:05d}", {"jpg": data[: len(data) // 3] if i == 5 else b"" if i == 9 else data}
        else:
            yield f"a/b.c/{i:06d}", {
                "jpg": _jpg(rng, 96, 128), "json": json.dumps({"i": i, "tags": ["x"] * (i % 3)}).encode(),
                "txt": f"a caption {i}".encode(), "cls": b"%d" % (i % 10),
                "label": f"{(i % 7) - 3}\n".encode(), "class.txt": b"%d" % (i % 5)}


def build(shape: str, n: int, folder: Path) -> Path:
    """Write the shape's files under ``folder/files`` (tars for ``wds``) and pack or index
    them into ``folder/ds``; returns ``folder``."""
    from feedline.format import index_tars, pack

    files = folder / "files"
    if shape == "wds":
        import webdataset

        files.mkdir(parents=True)
        per = max(1, n // 4)
        writer = None
        for k, (key, fields) in enumerate(samples(shape, n)):
            if k % per == 0 and k // per < 4:
                if writer is not None:
                    writer.close()
                writer = webdataset.TarWriter(str(files / f"part-{k // per:04d}.tar"))
            assert writer is not None
            writer.write({"__key__": key, **fields})
        if writer is not None:
            writer.close()
        tars = sorted(files.glob("*.tar"))
        (folder / "ds").mkdir()
        for t in tars:
            os.link(t, folder / "ds" / t.name)
        index_tars(sorted((folder / "ds").glob("*.tar")))
        return folder
    from feedline.format import SourceRules

    rows = []
    for i, (key, fields) in enumerate(samples(shape, n)):
        for field, data in fields.items():
            path = files / (f"{key}/{field}" if shape == "clips" else f"{key}.{field}")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            rows.append(f"{path.name},{CLASSES[i % len(CLASSES)]}\n")
    if shape == "photos":  # what a zip made on a Mac and a folder browsed on Windows leave
        (files / "__MACOSX" / CLASSES[0]).mkdir(parents=True)
        (files / "__MACOSX" / CLASSES[0] / "._IMG 00000.x.JPG").write_bytes(b"\x00\x05\x16\x07" + bytes(80))
        (files / CLASSES[0] / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1" + bytes(80))
        (files / CLASSES[1] / "Thumbs.db").write_bytes(bytes(512))
    rules = None
    if shape in ("folder", "photos", "phone", "corrupt"):
        rules = SourceRules(labels="from-folder")
    elif shape == "clips":
        rules = SourceRules(key="folder")
    elif shape == "coco":
        _coco(files, folder / "annotations.json")
        rules = SourceRules(labels=os.fspath(folder / "annotations.json"))
    elif shape == "csv":
        (folder / "labels.csv").write_text("filename,label\n" + "".join(rows), encoding="utf-8")
        rules = SourceRules(labels=os.fspath(folder / "labels.csv"))
    pack([os.fspath(files)], os.fspath(folder / "ds"), durable=False, warn=lambda line: None, rules=rules)
    return folder


def _coco(files: Path, out: Path) -> None:
    """A COCO ``annotations.json`` for the images in ``files``: 0-3 boxes each."""
    rng = np.random.default_rng(1)
    images, anns = [], []
    for i, p in enumerate(sorted(files.glob("*.jpg"))):
        images.append({"id": i + 1, "file_name": p.name, "height": 96, "width": 128})
        for _ in range(int(rng.integers(0, 4))):
            anns.append({"id": len(anns) + 1, "image_id": i + 1, "category_id": int(rng.integers(1, 4)),
                         "bbox": [1.0, 2.0, 30.0, 40.0], "area": 1200.0, "iscrowd": 0})
    cats = [{"id": c + 1, "name": name} for c, name in enumerate(("person", "bicycle", "car"))]
    out.write_text(json.dumps({"images": images, "annotations": anns, "categories": cats}))


# --- the DataLoader baselines -----------------------------------------------------------------

def decode(field: str, data: bytes) -> Any:
    """The baseline's decode: the same libraries feedline's codecs use."""
    import simplejpeg
    import torch

    ext = field.rsplit(".", 1)[-1]
    if ext == "jpg":
        return torch.from_numpy(simplejpeg.decode_jpeg(data, colorspace="RGB"))
    if ext == "png":
        from PIL import Image

        return torch.from_numpy(np.asarray(Image.open(io.BytesIO(data))).copy())
    if ext == "npy":
        arr = np.load(io.BytesIO(data), allow_pickle=False)
        if not arr.dtype.isnative:  # torch refuses '>f4': what a DataLoader user must add
            arr = arr.astype(arr.dtype.newbyteorder("="))
        return torch.from_numpy(arr)
    if ext == "json":
        return json.loads(data)
    if ext == "pt":
        return torch.load(io.BytesIO(data), weights_only=True)
    if ext == "npz":
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            return {k: torch.from_numpy(z[k]) for k in z.files}
    if ext == "cls":
        return int(data)
    if ext == "bin":
        return torch.from_numpy(np.frombuffer(data, np.float32).reshape(-1, 4).copy())
    if ext == "wav":
        return torch.from_numpy(wav(data))
    if ext == "txt":
        return data.decode("utf-8")
    return data


def wav(data: bytes) -> np.ndarray:
    """The ``.wav`` decoder both contenders use (standard library, int16 mono)."""
    import wave

    with wave.open(io.BytesIO(bytes(data))) as w:
        return np.frombuffer(w.readframes(w.getnframes()), "<i2").copy()


def image_transform(size: int = 64) -> Any:
    """The ``folder`` shape's transform (``phone``: 224), the same for both contenders."""
    from feedline import vision

    return vision.ImageTransform(IMAGE_FIELDS, size=size, out="image")


class ImageFolderFiles:
    """What torchvision's ImageFolder does (sorted class folders, sorted files), decoding
    with the same libraries as feedline (simplejpeg for JPEG, Pillow for the others) and
    running the same transform."""

    def __init__(self, root: Path, size: int = 64) -> None:
        self.classes = sorted(d.name for d in root.iterdir()
                              if d.is_dir() and not d.name.startswith(".") and d.name != "__MACOSX")
        self.files = [(f, c) for c, name in enumerate(self.classes) for f in sorted((root / name).rglob("*"))
                      if f.suffix[1:].lower() in ("jpg", "jpeg", "png", "webp") and not f.name.startswith(".")]
        self.transform = image_transform(size)

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> dict[str, Any]:
        import simplejpeg
        from PIL import Image

        path, label = self.files[i]
        ext = path.suffix[1:].lower()
        data = path.read_bytes()
        if ext in ("jpg", "jpeg") and simplejpeg.decode_jpeg_header(data)[2] not in ("CMYK", "YCCK"):
            img = simplejpeg.decode_jpeg(data, colorspace="RGB")
        else:  # torchvision's ImageFolder: Image.open(f).convert("RGB")
            img = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
            ext = "png" if ext == "png" else "jpg"
        sample = self.transform({"jpg" if ext == "jpeg" else ext: img})
        return {"image": sample["image"], "cls": label}


class CsvFiles:
    """A flat folder and its ``labels.csv`` (class names), read once."""

    def __init__(self, folder: Path) -> None:
        import csv

        with open(folder / "labels.csv", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        self.classes = sorted({r["label"] for r in rows})
        number = {c: i for i, c in enumerate(self.classes)}
        self.items = [(folder / "files" / r["filename"], number[r["label"]]) for r in rows]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        path, label = self.items[i]
        return {"jpg": decode("jpg", path.read_bytes()), "cls": label}


class Files:
    """A map-style dataset over the original files, grouped by WebDataset key."""

    def __init__(self, root: Path) -> None:
        groups: dict[str, list[tuple[str, str]]] = {}
        for dirpath, _, names in os.walk(root):
            for name in names:
                rel = os.path.relpath(os.path.join(dirpath, name), root)
                dot = rel.find(".", rel.rfind("/") + 1)
                groups.setdefault(rel[:dot], []).append((rel[dot + 1:], os.path.join(dirpath, name)))
        self.items = [groups[k] for k in sorted(groups)]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        out = {}
        for field, path in self.items[i]:
            with open(path, "rb") as f:
                out[field] = decode(field, f.read())
        return out


class CocoFiles:
    """A folder of images and its COCO ``annotations.json``, read once: each image with the
    record of its boxes (what ``--labels annotations.json`` packs as the ``json`` field)."""

    def __init__(self, folder: Path) -> None:
        doc = json.loads((folder / "annotations.json").read_text())
        boxes: dict[int, list[dict[str, Any]]] = {}
        for a in doc["annotations"]:
            boxes.setdefault(a["image_id"], []).append(a)
        self.items = [(folder / "files" / im["file_name"], {**im, "annotations": boxes.get(im["id"], [])})
                      for im in doc["images"]]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        path, record = self.items[i]
        return {"jpg": decode("jpg", path.read_bytes()), "json": record}


class ClipFiles:
    """One sample per clip folder: its frames, decoded and stacked (T, H, W, 3)."""

    def __init__(self, root: Path) -> None:
        self.clips = sorted(p for p in root.iterdir() if p.is_dir())

    def __len__(self) -> int:
        return len(self.clips)

    def __getitem__(self, i: int) -> dict[str, Any]:
        import torch

        return {"frames": torch.stack([decode("jpg", f.read_bytes()) for f in sorted(self.clips[i].glob("*.jpg"))])}


class SkipBad:
    """The DataLoader recipe for damaged files: ``None`` for a sample that fails to decode,
    dropped by :func:`drop_none` (the DataLoader has no skip policy of its own)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, i: int) -> Any:
        try:
            return self.inner[i]
        except (ValueError, OSError):  # simplejpeg and Pillow's errors for a damaged file
            return None


def drop_none(batch: list[Any]) -> Any:
    from torch.utils.data import default_collate

    return default_collate([s for s in batch if s is not None])


def list_boxes(batch: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``npz`` collate: image and label stacked, the boxes (1-4 per image) as a list."""
    from torch.utils.data import default_collate

    out = default_collate([{k: v for k, v in s["npz"].items() if k != "boxes"} for s in batch])
    out["boxes"] = [s["npz"]["boxes"] for s in batch]
    return {"npz": out}


def pad_tokens(batch: list[dict[str, Any]]) -> dict[str, Any]:
    """The padding collate of the ``tokens`` shape (numpy or torch sequences alike)."""
    seqs = [np.asarray(s["npy"]) for s in batch]
    out = np.zeros((len(seqs), max(len(s) for s in seqs)), dtype=seqs[0].dtype)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = s
    return {"npy": out, "lengths": np.array([len(s) for s in seqs])}


def pad_tokens_torch(batch: list[dict[str, Any]]) -> dict[str, Any]:
    import torch

    return {k: torch.from_numpy(v) for k, v in pad_tokens(batch).items()}


def lidar(data: bytes) -> np.ndarray:
    """The ``lidar.bin`` decoder both contenders use (float32 points, N x 4)."""
    return np.frombuffer(data, np.float32).reshape(-1, 4)


def list_lidar(batch: list[dict[str, Any]]) -> dict[str, Any]:
    from torch.utils.data import default_collate

    out = default_collate([{k: v for k, v in s.items() if k != "lidar.bin"} for s in batch])
    out["lidar.bin"] = [s["lidar.bin"] for s in batch]
    return out


def list_json(batch: list[dict[str, Any]]) -> dict[str, Any]:
    """``json`` (and ``__key__``, when present) as lists; every other field by torch's
    default collate (varying-length lists in JSON would make it raise)."""
    from torch.utils.data import default_collate

    rest = [{k: v for k, v in s.items() if k not in ("json", "__key__")} for s in batch]
    out = default_collate(rest) if rest[0] else {}
    out["json"] = [s["json"] for s in batch]
    return out


def pad_json_tokens(batch: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``toktext`` collate: the ``.json`` token lists padded into int64 (numpy), the
    ``.txt`` kept as strings (the per-sample parse is the point of the shape)."""
    seqs = [s["json"] for s in batch]
    out = np.zeros((len(seqs), max(len(t) for t in seqs)), dtype=np.int64)
    for i, t in enumerate(seqs):
        out[i, : len(t)] = t
    return {"json": out, "lengths": np.array([len(t) for t in seqs]), "txt": [s["txt"] for s in batch]}


def pad_json_tokens_torch(batch: list[dict[str, Any]]) -> dict[str, Any]:
    import torch

    out = pad_json_tokens(batch)
    return {"json": torch.from_numpy(out["json"]), "lengths": torch.from_numpy(out["lengths"]),
            "txt": out["txt"]}


def list_audio(batch: list[dict[str, Any]]) -> dict[str, Any]:
    return {"wav": [s["wav"] for s in batch], "txt": [s["txt"] for s in batch]}


def _wds_batch(batch: list[dict[str, Any]]) -> dict[str, Any]:
    import torch

    return {"jpg": torch.stack([s["jpg"] for s in batch]), "cls": torch.tensor([s["cls"] for s in batch]),
            "label": torch.tensor([s["label"] for s in batch]), "json": [s["json"] for s in batch],
            "txt": [s["txt"] for s in batch], "class.txt": [s["class.txt"] for s in batch]}


def _wds_sample(s: dict[str, Any]) -> dict[str, Any]:
    return {"jpg": decode("jpg", s["jpg"]), "cls": int(s["cls"]), "label": int(s["label"]),
            "json": json.loads(s["json"]), "txt": s["txt"].decode(), "class.txt": s["class.txt"].decode()}


def baseline(shape: str, folder: Path, workers: int, persistent: bool = False) -> Callable[[], Any]:
    """The DataLoader of ``shape`` (``persistent``: its workers kept between epochs, as
    with ``--second-epoch``)."""
    from torch.utils.data import DataLoader

    keep = persistent and workers > 0
    bs = BATCH[shape]
    if shape == "wds":
        import webdataset

        urls = [os.fspath(p) for p in sorted((folder / "files").glob("*.tar"))]
        ds = (webdataset.WebDataset(urls, shardshuffle=len(urls), empty_check=False)
              .shuffle(500).map(_wds_sample).batched(bs, collation_fn=_wds_batch, partial=True))
        return lambda: DataLoader(ds, batch_size=None, num_workers=workers, persistent_workers=keep)
    files: Any = {"folder": lambda: ImageFolderFiles(folder / "files"),
                  "photos": lambda: ImageFolderFiles(folder / "files"),
                  "phone": lambda: ImageFolderFiles(folder / "files", 224),
                  "corrupt": lambda: SkipBad(ImageFolderFiles(folder / "files")),
                  "csv": lambda: CsvFiles(folder), "coco": lambda: CocoFiles(folder),
                  "clips": lambda: ClipFiles(folder / "files"),
                  }.get(shape, lambda: Files(folder / "files"))()  # map-style: len + getitem
    collate = {"tokens": pad_tokens_torch, "sensor": list_lidar, "audio": list_audio, "depth": list_json,
               "meta": list_json, "toktext": pad_json_tokens_torch, "coco": list_json, "npz": list_boxes,
               "corrupt": drop_none}.get(shape)
    return lambda: DataLoader(files, batch_size=bs, shuffle=True, num_workers=workers, collate_fn=collate,
                              persistent_workers=keep)


def loader(shape: str, folder: Path, workers: int, worker_type: str) -> Callable[[], Any]:
    import feedline

    per_shape: dict[str, dict[str, Any]] = {
        "tokens": {"collate": pad_tokens}, "sensor": {"decode": {"bin": lidar}},
        "audio": {"decode": {"wav": wav}}, "folder": {"transform": image_transform()},
        "photos": {"transform": image_transform()}, "toktext": {"collate": pad_json_tokens},
        "phone": {"transform": image_transform(224)},
        "corrupt": {"transform": image_transform(), "on_error": "skip"}}
    kw = per_shape.get(shape, {})

    def make() -> Any:
        return feedline.Loader(os.fspath(folder / "ds"), batch_size=BATCH[shape], workers=workers,
                               worker_type=worker_type, drop_last=False, **kw)
    return make


class SecondEpoch:
    """A contender timed on its second epoch (``--second-epoch``): the first (worker
    start-up, warm-up, ``worker_type="auto"``'s measurement and any move to processes)
    runs before timing starts. ``first_batch_s`` then includes the whole first epoch."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self.loader = make()

    def __iter__(self) -> Iterator[Any]:
        for _ in self.loader:
            pass
        settle = getattr(getattr(self.loader, "_rt", None), "settle", None)
        if callable(settle):
            settle(60)  # a move to processes decided by auto is complete
        if hasattr(self.loader, "set_epoch"):
            self.loader.set_epoch(1)
        return iter(self.loader)

    def close(self) -> None:
        close = getattr(self.loader, "close", None)
        if callable(close):
            close()


# --- timing -----------------------------------------------------------------------------------

def _len(batch: Any) -> int:
    """Samples in a batch: its first field's length (a dict of fields: its first member's)."""
    while isinstance(batch, dict):
        batch = next(v for k, v in batch.items() if k != "__key__")
    return len(batch)


def _cpu_s() -> float:
    """CPU seconds of this process tree: the live processes (``peers.tree_cpu_s``) plus the
    children already reaped (a DataLoader joins its workers when the epoch ends)."""
    from peers import tree_cpu_s

    t = os.times()
    return tree_cpu_s() + t.children_user + t.children_system


def run_once(make: Callable[[], Any]) -> dict[str, float]:
    """One epoch: first batch time, then samples/s and samples per CPU-second (this process
    and all its workers, which other load on a shared host does not lower) from the first
    batch to the last."""
    t0 = time.perf_counter()
    it = make()
    n0 = n = 0
    t1 = t_end = t0
    cpu1 = cpu_end = 0.0
    try:
        for k, batch in enumerate(it):
            n += _len(batch)
            t_end = time.perf_counter()
            if k == 0:
                n0, t1, cpu1 = n, t_end, _cpu_s()
        cpu_end = _cpu_s()
    finally:
        close = getattr(it, "close", None)
        if callable(close):
            close()
    rate = (n - n0) / (t_end - t1) if t_end > t1 else float("nan")
    per_cpu = (n - n0) / (cpu_end - cpu1) if cpu_end > cpu1 else float("nan")
    return {"samples": n, "first_batch_s": t1 - t0, "samples_per_s": rate, "samples_per_cpu_s": per_cpu}


def measure(shape: str, folder: Path, rounds: int, workers: int, auto: bool = False,
            second: bool = False) -> dict[str, Any]:
    contenders: dict[str, Callable[[], Any]] = {
        "Loader (threads)": loader(shape, folder, workers, "thread"),
        "Loader (processes)": loader(shape, folder, workers, "process"),
        **({"Loader (auto)": loader(shape, folder, workers, "auto")} if auto else {}),
        ("WebDataset + DataLoader" if shape == "wds" else "DataLoader (files)"):
            baseline(shape, folder, workers, persistent=second),
    }
    if second:
        contenders = {name: (lambda make=make: SecondEpoch(make)) for name, make in contenders.items()}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in contenders}
    for _ in range(rounds):  # interleaved: A, B, C, A, B, C...
        for name, make in contenders.items():
            runs[name].append(run_once(make))
    base = list(contenders)[-1]
    base_rate = statistics.median(r["samples_per_s"] for r in runs[base])
    rows = []
    for name, rs in runs.items():
        rates = [r["samples_per_s"] for r in rs]
        med = statistics.median(rates)
        rows.append({"name": name, "samples_per_s": med, "min": min(rates), "max": max(rates),
                     "first_batch_s": statistics.median(r["first_batch_s"] for r in rs),
                     "samples_per_cpu_s": statistics.median(r["samples_per_cpu_s"] for r in rs),
                     "samples": rs[-1]["samples"], "ratio": med / base_rate})
    return {"shape": shape, "batch": BATCH[shape], "baseline": base, "rows": rows,
            "load": os.getloadavg()[0]}


def common_parser(description: str, shapes: tuple[str, ...]) -> argparse.ArgumentParser:
    """The options every shapes benchmark takes (this one and bench/outside_shapes.py)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="tiny datasets, one round (smoke test)")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    p.add_argument("--rounds", type=int, help="interleaved rounds (default 3; 1 with --quick)")
    p.add_argument("--workers", type=int, default=2, help="workers of every contender")
    p.add_argument("--shapes", default=",".join(shapes), help=f"comma-separated subset of {','.join(shapes)}")
    p.add_argument("--dir", metavar="DIR", help="scratch folder for the data (default: system temp)")
    p.add_argument("--keep", action="store_true", help="keep the generated data")
    return p


def prepare(args: argparse.Namespace, shapes: tuple[str, ...], prefix: str) -> tuple[list[str], int, Path]:
    """The chosen shapes (an unknown one exits naming the choices), the rounds, and a fresh
    scratch folder (under ``--dir`` when given)."""
    chosen = [s for s in args.shapes.split(",") if s]
    unknown = set(chosen) - set(shapes)
    if unknown:
        raise SystemExit(f"unknown shape(s) {sorted(unknown)}; choose from {','.join(shapes)}")
    if args.dir is not None:
        Path(args.dir).mkdir(parents=True, exist_ok=True)
    return chosen, args.rounds or (1 if args.quick else 3), Path(tempfile.mkdtemp(prefix=prefix, dir=args.dir))


def parser() -> argparse.ArgumentParser:
    p = common_parser(__doc__.splitlines()[0], SHAPES)
    p.add_argument("--auto", action="store_true",
                   help='also run Loader(worker_type="auto") (with --second-epoch: timed after it '
                        "measured the first batches and chose threads or processes)")
    p.add_argument("--second-epoch", action="store_true",
                   help="time every contender's second epoch (DataLoaders with persistent_workers)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    shapes, rounds, scratch = prepare(args, SHAPES, "peers-shapes-")
    sizes = QUICK if args.quick else FULL
    results = []
    try:
        for shape in shapes:
            folder = build(shape, sizes[shape], scratch / shape)
            res = measure(shape, folder, rounds, args.workers, args.auto, args.second_epoch)
            results.append(res)
            for row in res["rows"]:
                print(f"{shape:7s} {row['name']:24s} {row['samples_per_s']:10.0f} samples/s "
                      f"[{row['min']:.0f}-{row['max']:.0f}]  {row['ratio']:5.2f}x {res['baseline']}  "
                      f"{row['samples_per_cpu_s']:8.0f} samples/CPU-s  "
                      f"first batch {row['first_batch_s']:.2f} s  load {res['load']:.2f}", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    if args.json:
        doc = {"benchmark": "peers_shapes", "quick": bool(args.quick), "preliminary": True,
               "second_epoch": bool(args.second_epoch),
               "rounds": rounds, "workers": args.workers, "sizes": {s: sizes[s] for s in shapes},
               "shapes": results}
        Path(args.json).write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
