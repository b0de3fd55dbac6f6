"""feedline Loader vs the natural torch DataLoader on more shapes users bring (round 10).

A second set beside bench/peers_shapes.py, built the way a user following README.md would
build it (``feedline pack`` on the command line, ``DatasetWriter`` for arrays), each loaded
by ``feedline.Loader`` (threads and processes) and by the DataLoader a user would write for
that layout, in interleaved rounds, with 2 workers each. Before timing, every shape is read
once in order (``shuffle=False``) by both Loaders and the DataLoader and the batches are
compared value by value (``correct`` in the JSON; a difference is listed, not raised):

* ``robot``: episodes ``episode_003/step_0042.{cam.png, lidar.npy, imu.f32, joints.json}``:
  PNG RGB frames 96x128, lidar float32 (N, 4) with N varying (a list), IMU 6 raw floats,
  joint angles as JSON (a list of dicts), batch 16; each episode's ``meta.json`` is left out
  with the ``--exclude '*/meta.json'`` pack's note gives;
* ``tokvar``: token sequences of 16-1024 ids as raw ``.u16``, padded into int64 by a
  collate (``collate=`` / ``collate_fn=``), batch 32;
* ``blocks``: fixed 1025-token blocks written with ``DatasetWriter`` (``.npy`` uint16);
  the baseline is the nanoGPT-style ``np.memmap`` of one ``train.bin`` cut into the same
  blocks, batch 64;
* ``imagenet``: an ImageFolder of mixed-size JPEGs (150-500 px each side, some grey, some
  progressive); timed with ``vision.ImageTransform(size=224)`` against torchvision's recipe
  written in Pillow (``Image.open().convert("RGB")``, RandomResizedCrop, flip, normalise);
  checked without a transform (decoded pixels and labels), batch 32;
* ``kaggle``: Kaggle's dog-breed layout, ``train/<id>.jpg`` + ``labels.csv`` (``id,breed``,
  ids without the extension), packed with ``--labels labels.csv``; the baseline reads the
  CSV once, batch 64;
* ``pngmix``: per sample an RGBA PNG, a grey PNG, a 16-bit depth PNG, a raw ``.u16`` depth,
  a raw ``.f16`` feature and a raw ``.i32`` that one sample in 7 lacks (``None`` in its
  list), batch 64;
* ``ptdict``: ``torch.save`` dicts of an uint8 image, float16 and bool tensors, a Python
  int label, a name string and 1-3 boxes (a list), batch 64.

Round 11 (``--round11`` runs only these), layouts no earlier round had:

* ``asr``: speech clips ``{id}.wav`` (16 kHz mono int16, 0.5-3 s) + ``{id}.txt`` transcripts,
  decoded by ``feedline.audio.decode_wav`` (the baseline: the standard library's ``wave``)
  and padded into ``float32[B, T]`` + lengths + the texts by one collate, batch 16;
* ``nusc``: nuScenes-style sensor folders ``CAM_FRONT/<token>.jpg`` ... six cameras (90x160),
  ``LIDAR_TOP/<token>.bin`` (float32 (N, 5), N varying) and ``CALIB/<token>.json`` (a 3x3
  intrinsic per camera), packed with ``--key parallel``; a custom collate stacks the cameras
  into ``uint8[B, 6, H, W, 3]``, the intrinsics into ``float32[B, 6, 3, 3]`` and lists the
  point clouds (``decode={"bin": ...}`` / the same function in the baseline), batch 8;
* ``hfimg``: a HuggingFace ``imagefolder`` export, ``train/*.jpg`` + ``train/metadata.jsonl``
  (``file_name``, ``label``, ``text``), packed with ``--labels train/metadata.jsonl``; the
  baseline reads the JSONL once, captions as a list, batch 64;
* ``segcrop``: Pascal VOC-style ``JPEGImages/x.jpg`` (200-320 px each side) +
  ``SegmentationClass/x.png`` (palette class ids), packed with ``--key parallel``; timed with
  random 128x128 crops + flips, ``vision.ImageTransform(..., masks=...)`` against the
  same recipe written in Pillow (bilinear image, nearest mask); checked without crops (the
  images of several sizes come as lists), batch 16;
* ``bigf16``: one large array per sample, ``{id}.npy`` float16 (3, 1024, 1024) = 6 MiB,
  packed with ``feedline pack``, batch 4.

Rates count the samples after the first batch over the time from it to the last batch
(``peers_shapes.run_once``); medians of ``--rounds`` rounds, ratio against the DataLoader
of the same run, and samples per CPU-second of the contender's process tree (other load on
a shared host lowers samples/s, not this). Numbers from a shared machine are preliminary.

    .venv/bin/python bench/outside_shapes.py [--quick] [--round11] [--shapes robot,kaggle] [--rounds 3] [--json PATH]
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers_shapes import _jpg, _npy, _png16, _wav, common_parser, prepare, run_once

ROUND11 = ("asr", "nusc", "hfimg", "segcrop", "bigf16")
SHAPES = ("robot", "tokvar", "blocks", "imagenet", "kaggle", "pngmix", "ptdict", *ROUND11)
BATCH = {"robot": 16, "tokvar": 32, "blocks": 64, "imagenet": 32, "kaggle": 64, "pngmix": 64, "ptdict": 64,
         "asr": 16, "nusc": 8, "hfimg": 64, "segcrop": 16, "bigf16": 4}
FULL = {"robot": 1000, "tokvar": 20_000, "blocks": 10_000, "imagenet": 1000, "kaggle": 4000,
        "pngmix": 5000, "ptdict": 10_000, "asr": 1000, "nusc": 300, "hfimg": 2000, "segcrop": 600,
        "bigf16": 160}
QUICK = {"robot": 40, "tokvar": 96, "blocks": 160, "imagenet": 40, "kaggle": 96, "pngmix": 96, "ptdict": 96,
         "asr": 40, "nusc": 24, "hfimg": 96, "segcrop": 40, "bigf16": 12}
CAMS = ("CAM_FRONT", "CAM_FRONT_LEFT", "CAM_FRONT_RIGHT", "CAM_BACK", "CAM_BACK_LEFT", "CAM_BACK_RIGHT")
PARALLEL = {"nusc": (*CAMS, "LIDAR_TOP", "CALIB"), "segcrop": ("JPEGImages", "SegmentationClass")}
"""Shapes packed with ``--key parallel``: their top folders (each one field)."""
BLOCK = 1025
BREEDS = ("affenpinscher", "boston_bull", "dingo", "golden_retriever", "pekinese", "shih-tzu")
RAW = {"f32": "<f4", "u16": "<u2", "f16": "<f2", "i32": "<i4"}


# --- data -------------------------------------------------------------------------------------

def _png(a: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(a).save(buf, format="PNG")
    return buf.getvalue()


def _mixed_jpeg(rng: np.random.Generator, i: int) -> bytes:
    """An ImageNet-like JPEG: its own size, grey one in 7, progressive one in 5."""
    from PIL import Image

    h, w = (int(x) for x in rng.integers(150, 501, 2))
    small = rng.integers(0, 256, (h // 8 + 1, w // 8 + 1, 3), dtype=np.uint8)
    img = Image.fromarray(np.repeat(np.repeat(small, 8, 0), 8, 1)[:h, :w])
    buf = io.BytesIO()
    img.convert("L" if i % 7 == 3 else "RGB").save(buf, format="JPEG", quality=88, progressive=i % 5 == 1)
    return buf.getvalue()


def _pt(rng: np.random.Generator, i: int) -> bytes:
    import torch

    buf = io.BytesIO()
    torch.save({"image": torch.from_numpy(rng.integers(0, 256, (3, 32, 32), dtype=np.uint8)),
                "feat": torch.from_numpy(rng.standard_normal(16).astype(np.float16)),
                "mask": torch.from_numpy(rng.random((8, 8)) > 0.5), "label": i % 5, "name": f"obj {i}",
                "boxes": torch.from_numpy(rng.random((int(rng.integers(1, 4)), 4), dtype=np.float32))}, buf)
    return buf.getvalue()


def _palette_mask(rng: np.random.Generator, h: int, w: int) -> bytes:
    """A VOC ``SegmentationClass`` PNG: palette mode, class ids 0-20 in blocks, 255 borders."""
    from PIL import Image

    ids = np.repeat(np.repeat(rng.integers(0, 21, (h // 16 + 1, w // 16 + 1), dtype=np.uint8), 16, 0), 16, 1)[:h, :w]
    ids[::16] = 255
    img = Image.fromarray(ids, mode="P")
    img.putpalette([c for k in range(256) for c in (k * 37 % 256, k * 91 % 256, k * 53 % 256)])
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def _round11(shape: str, rng: np.random.Generator, i: int) -> Iterator[tuple[str, bytes]]:
    """The files of sample ``i`` of a round-11 shape."""
    if shape == "asr":
        yield f"{i:06d}.wav", _wav(rng, (8_000, 48_001))  # 0.5-3 s
        yield f"{i:06d}.txt", " ".join(f"w{int(x)}" for x in rng.integers(0, 999, int(rng.integers(2, 12)))).encode()
    elif shape == "nusc":
        token = f"{int(rng.integers(0, 2**62)):016x}"
        for cam in CAMS:
            yield f"{cam}/{token}.jpg", _jpg(rng, 90, 160)
        yield f"LIDAR_TOP/{token}.bin", rng.standard_normal((int(rng.integers(2000, 8000)), 5)).astype("<f4").tobytes()
        calib = {cam: np.round(rng.random((3, 3)) * 500, 3).tolist() for cam in CAMS}
        yield f"CALIB/{token}.json", json.dumps({"intrinsics": calib, "timestamp": int(1e6) + i}).encode()
    elif shape == "hfimg":
        yield f"train/{i:06d}.jpg", _jpg(rng, 128, 128)
    elif shape == "segcrop":
        h, w = (int(x) for x in rng.integers(200, 321, 2))
        yield f"JPEGImages/2007_{i:06d}.jpg", _jpg(rng, h, w)
        yield f"SegmentationClass/2007_{i:06d}.png", _palette_mask(rng, h, w)
    elif shape == "bigf16":
        yield f"{i:05d}.npy", _npy(rng.standard_normal((3, 1024, 1024), dtype=np.float32).astype(np.float16))
    else:
        raise ValueError(f"no files for shape {shape!r}")


def files(shape: str, n: int, seed: int = 0) -> Iterator[tuple[str, bytes]]:
    """``(path below the source folder, bytes)`` of the shape's ``n`` samples (deterministic)."""
    rng = np.random.default_rng(seed)
    for i in range(n):
        if shape == "robot":
            key = f"episode_{i // 100:03d}/step_{i % 100:04d}"
            if i % 100 == 0:  # what each episode holds beside its steps (left out by pack --exclude)
                yield f"episode_{i // 100:03d}/meta.json", json.dumps({"robot": "franka", "hz": 10}).encode()
            yield f"{key}.cam.png", _png(rng.integers(0, 256, (96, 128, 3), dtype=np.uint8))
            yield f"{key}.lidar.npy", _npy(rng.standard_normal((int(rng.integers(500, 3000)), 4)).astype(np.float32))
            yield f"{key}.imu.f32", rng.standard_normal(6).astype("<f4").tobytes()
            yield f"{key}.joints.json", json.dumps({"q": [round(float(x), 6) for x in rng.standard_normal(7)],
                                                    "gripper": round(float(rng.random()), 6)}).encode()
        elif shape == "tokvar":
            yield f"{i:07d}.u16", rng.integers(0, 50_257, int(rng.integers(16, 1025))).astype("<u2").tobytes()
        elif shape == "imagenet":
            yield f"n{1440764 + i % 5:08d}/n{1440764 + i % 5:08d}_{i:05d}.JPEG", _mixed_jpeg(rng, i)
        elif shape == "kaggle":
            yield f"{int(rng.integers(0, 2**62)):032x}.jpg", _jpg(rng, 96, 128)
        elif shape == "pngmix":
            key = f"{i:06d}"
            yield f"{key}.rgba.png", _png(rng.integers(0, 256, (32, 32, 4), dtype=np.uint8))
            yield f"{key}.gray.png", _png(rng.integers(0, 256, (32, 32), dtype=np.uint8))
            yield f"{key}.depth.png", _png16(rng.integers(0, 65536, (32, 32), dtype=np.uint16))
            yield f"{key}.depth.u16", rng.integers(0, 65536, 32 * 32).astype("<u2").tobytes()
            yield f"{key}.feat.f16", rng.standard_normal(64).astype("<f2").tobytes()
            if i % 7 != 3:
                yield f"{key}.extra.i32", rng.integers(-9, 9, 8).astype("<i4").tobytes()
        elif shape == "ptdict":
            yield f"{i:07d}.pt", _pt(rng, i)
        else:
            yield from _round11(shape, rng, i)


def _feedline(*args: str) -> None:
    """A ``feedline`` command as a user types it (this checkout's package)."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent / "src")}
    subprocess.run([sys.executable, "-m", "feedline", *args], check=True, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def build(shape: str, n: int, folder: Path) -> Path:
    """Write the shape's files under ``folder/files`` and pack them into ``folder/ds``."""
    src = folder / "files"
    if shape == "blocks":
        import feedline

        rng = np.random.default_rng(0)
        tokens = rng.integers(0, 50_257, n * BLOCK).astype(np.uint16)
        src.mkdir(parents=True)
        tokens.tofile(src / "train.bin")
        with feedline.DatasetWriter(os.fspath(folder / "ds"), shard_size="256MiB") as w:
            for i in range(n):
                w.write({"__key__": f"{i:08d}", "tokens": tokens[i * BLOCK:(i + 1) * BLOCK]})
        return folder
    labels: list[tuple[str, str]] = []
    for k, (rel, data) in enumerate(files(shape, n)):
        path = src / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        labels.append((Path(rel).stem, BREEDS[k % len(BREEDS)]))
    args = [os.fspath(src), "--out", os.fspath(folder / "ds")]
    if shape == "robot":  # what pack's note says for the per-episode meta.json
        args += ["--exclude", "*/meta.json"]
    elif shape == "imagenet":
        args += ["--labels", "from-folder"]
    elif shape == "kaggle":
        with open(folder / "labels.csv", "w", newline="") as f:
            csv.writer(f).writerows([("id", "breed"), *labels])
        args += ["--labels", os.fspath(folder / "labels.csv")]
    elif shape in PARALLEL:
        args += ["--key", "parallel"]
    elif shape == "hfimg":  # what datasets' imagefolder reads: metadata.jsonl beside the images
        with open(src / "train" / "metadata.jsonl", "w") as f:
            for k, (rel, _) in enumerate(labels):
                f.write(json.dumps({"file_name": f"{rel}.jpg", "label": k % 10, "text": f"a photo, number {k}"}) + "\n")
        args += ["--labels", os.fspath(src / "train" / "metadata.jsonl")]
    _feedline("pack", *args)
    return folder


# --- what both read ---------------------------------------------------------------------------

def decode(name: str, data: bytes) -> Any:
    """The baseline's decode of a file by its extension (the libraries feedline uses)."""
    import simplejpeg
    import torch

    ext = name.rsplit(".", 1)[-1].lower()
    if ext in RAW:
        return torch.from_numpy(np.frombuffer(data, RAW[ext]).copy())
    if ext in ("jpg", "jpeg"):
        return torch.from_numpy(simplejpeg.decode_jpeg(data, colorspace="RGB"))
    if ext == "png":
        from PIL import Image

        return torch.from_numpy(np.asarray(Image.open(io.BytesIO(data))).copy())
    if ext == "npy":
        return torch.from_numpy(np.load(io.BytesIO(data), allow_pickle=False))
    if ext == "json":
        return json.loads(data)
    if ext == "pt":
        return torch.load(io.BytesIO(data), weights_only=True)
    if ext == "wav":
        return read_wav(data)
    if ext == "txt":
        return data.decode("utf-8")
    if ext == "bin":
        return lidar_points(data)
    raise ValueError(f"no decoder for {name}")


def read_wav(data: bytes) -> dict[str, Any]:
    """The baseline's WAV decode (the standard library's ``wave``), as ``audio.decode_wav``
    gives it: int16 samples ``[frames, channels]`` and the rate."""
    import wave

    with wave.open(io.BytesIO(data)) as w:
        frames = np.frombuffer(w.readframes(w.getnframes()), "<i2").reshape(-1, w.getnchannels())
        return {"samples": frames.copy(), "rate": w.getframerate()}


def lidar_points(data: bytes) -> np.ndarray:
    """A ``LIDAR_TOP/*.bin`` point cloud: float32 (N, 5) (x, y, z, intensity, ring), as
    nuScenes' devkit reads it; both contenders' ``bin`` decoder."""
    return np.frombuffer(data, "<f4").reshape(-1, 5).copy()


class Files:
    """A map-style Dataset over the original files, one sample per WebDataset key (sorted),
    a field per file: what users write for ``key.field.ext`` files."""

    def __init__(self, root: Path) -> None:
        groups: dict[str, list[tuple[str, Path]]] = {}
        for path in root.rglob("*"):
            if path.is_file() and path.name != "meta.json":  # an episode's metadata is no sample
                rel = path.relative_to(root).as_posix()
                dot = rel.find(".", rel.rfind("/") + 1)
                groups.setdefault(rel[:dot], []).append((rel[dot + 1:], path))
        self.items = [sorted(groups[k]) for k in sorted(groups)]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {field: decode(field, path.read_bytes()) for field, path in self.items[i]}


class Blocks:
    """nanoGPT's data: one ``train.bin`` of uint16 tokens as a memmap, cut into blocks."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data = np.memmap(path, dtype=np.uint16, mode="r")

    def __len__(self) -> int:
        return len(self.data) // BLOCK

    def __getitem__(self, i: int) -> dict[str, Any]:
        import torch

        return {"tokens.npy": torch.from_numpy(np.array(self.data[i * BLOCK:(i + 1) * BLOCK]))}


def _rrc_box(w: int, h: int, rng: np.random.Generator) -> tuple[int, int, int, int]:
    """torchvision's ``RandomResizedCrop.get_params`` (scale 0.08-1, ratio 3/4-4/3)."""
    area = w * h
    for _ in range(10):
        target = area * rng.uniform(0.08, 1.0)
        ratio = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
        cw, ch = round(math.sqrt(target * ratio)), round(math.sqrt(target / ratio))
        if 0 < cw <= w and 0 < ch <= h:
            x, y = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
            return x, y, x + cw, y + ch
    side = min(w, h)
    return (w - side) // 2, (h - side) // 2, (w - side) // 2 + side, (h - side) // 2 + side


class ImageNetFolder:
    """torchvision's ImageFolder as users write it: sorted class folders and files, each image
    ``Image.open(path).convert("RGB")``; ``train`` runs torchvision's RandomResizedCrop(224),
    RandomHorizontalFlip, ToTensor and Normalize (Pillow bilinear, as torchvision on PIL),
    otherwise the decoded pixels (simplejpeg, as feedline) are given as they are."""

    def __init__(self, root: Path, train: bool) -> None:
        classes = sorted(d.name for d in root.iterdir() if d.is_dir())
        self.items = [(f, c) for c, name in enumerate(classes) for f in sorted((root / name).iterdir())]
        self.train = train

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        from PIL import Image

        path, label = self.items[i]
        if not self.train:
            return {"jpg": decode("jpg", path.read_bytes()), "cls": label}
        return {"image": train_view(Image.open(path), 224), "cls": label}


def train_view(img: Any, size: int) -> Any:
    """torchvision's training view of a Pillow image: RGB, RandomResizedCrop(size) (Pillow
    bilinear), RandomHorizontalFlip, ToTensor, Normalize with the ImageNet statistics."""
    import torch
    from PIL import Image

    rng = np.random.default_rng()
    img = img.convert("RGB")
    img = img.resize((size, size), Image.BILINEAR, box=_rrc_box(img.width, img.height, rng))
    if rng.random() < 0.5:
        img = img.transpose(Image.FLIP_LEFT_RIGHT)
    x = torch.from_numpy(np.asarray(img)).permute(2, 0, 1).float().div_(255)
    mean = torch.tensor((0.485, 0.456, 0.406)).view(3, 1, 1)
    std = torch.tensor((0.229, 0.224, 0.225)).view(3, 1, 1)
    return (x - mean) / std


class KaggleCsv:
    """Kaggle's ``train/<id>.jpg`` + ``labels.csv`` (``id,breed``): breeds numbered in sorted
    order, rows in the table's order sorted by id (as the packed dataset orders them)."""

    def __init__(self, folder: Path) -> None:
        with open(folder / "labels.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        number = {b: i for i, b in enumerate(sorted({r["breed"] for r in rows}))}
        self.items = sorted((folder / "files" / f"{r['id']}.jpg", number[r["breed"]]) for r in rows)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        path, label = self.items[i]
        return {"jpg": decode("jpg", path.read_bytes()), "cls": label}


class Parallel:
    """A ``--key parallel`` tree as users read it: one folder per field, a sample per file
    name of the first folder (sorted), field ``<folder>.<ext>``; with ``crop`` (``segcrop``),
    the image and its mask cropped together (torchvision's RandomResizedCrop box, Pillow
    bilinear for the image, nearest for the mask), flipped and normalised."""

    def __init__(self, root: Path, folders: tuple[str, ...], crop: int = 0) -> None:
        stems = sorted(p.stem for p in (root / folders[0]).iterdir())
        found = {d: {p.stem: p for p in (root / d).iterdir()} for d in folders}
        self.items = [[(f"{d}{found[d][k].suffix}", found[d][k]) for d in folders] for k in stems]
        self.crop = crop

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        if not self.crop:
            return {field: decode(field, path.read_bytes()) for field, path in self.items[i]}
        import torch
        from PIL import Image

        (_, img_path), (mask_field, mask_path) = self.items[i]
        rng = np.random.default_rng()
        img, mask = Image.open(img_path).convert("RGB"), Image.open(mask_path)
        box, size = _rrc_box(img.width, img.height, rng), (self.crop, self.crop)
        img, mask = img.resize(size, Image.BILINEAR, box=box), mask.resize(size, Image.NEAREST, box=box)
        if rng.random() < 0.5:
            img, mask = img.transpose(Image.FLIP_LEFT_RIGHT), mask.transpose(Image.FLIP_LEFT_RIGHT)
        x = torch.from_numpy(np.asarray(img)).permute(2, 0, 1).float().div_(255)
        mean = torch.tensor((0.485, 0.456, 0.406)).view(3, 1, 1)
        std = torch.tensor((0.229, 0.224, 0.225)).view(3, 1, 1)
        return {"image": (x - mean) / std, mask_field: torch.from_numpy(np.asarray(mask).copy())}


class HfImageFolder:
    """HuggingFace ``imagefolder``'s layout read by hand: ``metadata.jsonl`` once, rows sorted
    by file name; the other columns (the caption) as a dict, as the packed ``json`` field."""

    def __init__(self, folder: Path) -> None:
        with open(folder / "train" / "metadata.jsonl") as f:
            rows = [json.loads(line) for line in f]
        self.items = sorted((folder / "train" / r.pop("file_name"), r.pop("label"), r) for r in rows)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        path, label, rest = self.items[i]
        return {"jpg": decode("jpg", path.read_bytes()), "cls": label, "json": rest}


# --- collates (module level: process workers import them) -------------------------------------

def _lists(batch: list[dict[str, Any]], names: tuple[str, ...]) -> dict[str, Any]:
    """``default_collate`` for every field but ``names``, which are lists (``None`` where a
    sample lacks the field)."""
    from torch.utils.data import default_collate

    out = default_collate([{k: v for k, v in s.items() if k not in names and k != "__key__"} for s in batch])
    for name in names:
        out[name] = [s.get(name) for s in batch]
    return out


def robot_collate(batch: list[dict[str, Any]]) -> dict[str, Any]:
    return _lists(batch, ("lidar.npy", "joints.json"))


def pngmix_collate(batch: list[dict[str, Any]]) -> dict[str, Any]:
    return _lists(batch, ("extra.i32",))


def pad_u16(batch: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``tokvar`` collate of both contenders: ids padded with 0 into int64, lengths."""
    import torch

    seqs = [np.asarray(s["u16"]) for s in batch]
    out = np.zeros((len(seqs), max(len(s) for s in seqs)), dtype=np.int64)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = s
    return {"tokens": torch.from_numpy(out), "lengths": torch.tensor([len(s) for s in seqs])}


def pt_collate(batch: list[dict[str, Any]]) -> dict[str, Any]:
    """``default_collate`` of the ``.pt`` dicts, the boxes (1-3 per sample) as a list."""
    from torch.utils.data import default_collate

    out = default_collate([{k: v for k, v in s["pt"].items() if k != "boxes"} for s in batch])
    out["boxes"] = [s["pt"]["boxes"] for s in batch]
    return {"pt": out}


def pad_audio(batch: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``asr`` collate of both contenders: clips scaled to float32 in [-1, 1) and padded
    with zeros to the longest, their lengths, the transcripts."""
    import torch

    clips = [np.asarray(s["wav"]["samples"])[:, 0] for s in batch]
    out = np.zeros((len(clips), max(len(c) for c in clips)), dtype=np.float32)
    for i, c in enumerate(clips):
        out[i, : len(c)] = c * np.float32(1 / 32768)
    return {"audio": torch.from_numpy(out), "lengths": torch.tensor([len(c) for c in clips]),
            "text": [s["txt"] for s in batch]}


def av_collate(batch: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``nusc`` collate of both contenders: six cameras stacked, intrinsics from the
    calibration JSON, point clouds listed (each its own length)."""
    import torch

    cams = np.stack([np.stack([np.asarray(s[f"{c}.jpg"]) for c in CAMS]) for s in batch])
    calib = [s["CALIB.json"] for s in batch]
    return {"cams": torch.from_numpy(cams),
            "intrinsics": torch.tensor([[c["intrinsics"][cam] for cam in CAMS] for c in calib], dtype=torch.float32),
            "timestamp": torch.tensor([c["timestamp"] for c in calib]),
            "lidar": [torch.from_numpy(np.asarray(s["LIDAR_TOP.bin"])) for s in batch]}


def hf_collate(batch: list[dict[str, Any]]) -> dict[str, Any]:
    return _lists(batch, ("json",))


def seg_lists(batch: list[dict[str, Any]]) -> dict[str, Any]:
    """``segcrop`` uncropped (the content check): images of several sizes as lists."""
    return _lists(batch, ("JPEGImages.jpg", "SegmentationClass.png"))


COLLATE: dict[str, Callable[..., Any]] = {"robot": robot_collate, "tokvar": pad_u16,
                                          "pngmix": pngmix_collate, "ptdict": pt_collate,
                                          "asr": pad_audio, "nusc": av_collate, "hfimg": hf_collate}


def baseline(shape: str, folder: Path, workers: int, shuffle: bool = True) -> Callable[[], Any]:
    """The DataLoader a user writes for ``shape``; ``shuffle=False`` and no augmentation for
    the content check."""
    from torch.utils.data import DataLoader

    ds: Any
    if shape == "blocks":
        ds = Blocks(folder / "files" / "train.bin")
    elif shape == "imagenet":
        ds = ImageNetFolder(folder / "files", train=shuffle)
    elif shape == "kaggle":
        ds = KaggleCsv(folder)
    elif shape == "hfimg":
        ds = HfImageFolder(folder / "files")
    elif shape in PARALLEL:
        ds = Parallel(folder / "files", PARALLEL[shape], crop=128 if shape == "segcrop" and shuffle else 0)
    else:
        ds = Files(folder / "files")
    collate = COLLATE.get(shape)
    if shape == "imagenet" and not shuffle:
        collate = _list_jpg
    if shape == "segcrop" and not shuffle:
        collate = seg_lists
    return lambda: DataLoader(ds, batch_size=BATCH[shape], shuffle=shuffle, num_workers=workers,
                              collate_fn=collate)


def _list_jpg(batch: list[dict[str, Any]]) -> dict[str, Any]:
    return _lists(batch, ("jpg",))


def loader(shape: str, folder: Path, workers: int, worker_type: str, shuffle: bool = True) -> Callable[[], Any]:
    """``feedline.Loader`` over the packed shape; ``shuffle=False``: the content check."""
    import feedline
    from feedline import vision

    kw: dict[str, Any] = {}
    if shape == "imagenet" and shuffle:
        kw["transform"] = vision.ImageTransform("jpg", size=224, out="image")
    if shape == "segcrop" and shuffle:
        kw["transform"] = vision.ImageTransform("JPEGImages.jpg", size=128, masks="SegmentationClass.png",
                                                out="image")
    if shape in ("tokvar", "asr", "nusc"):
        kw["collate"] = COLLATE[shape]
    if shape == "asr":
        from feedline import audio

        kw["decode"] = {"wav": audio.decode_wav}
    elif shape == "nusc":
        kw["decode"] = {"bin": lidar_points}

    def make() -> Any:
        return feedline.Loader(os.fspath(folder / "ds"), batch_size=BATCH[shape], workers=workers,
                               worker_type=worker_type, drop_last=False, shuffle=shuffle, seed=0, **kw)
    return make


# --- the content check ------------------------------------------------------------------------

def _plain(x: Any) -> Any:
    """Tensors as numpy arrays, tuples as lists, dicts without ``__key__``."""
    if hasattr(x, "numpy") and hasattr(x, "dtype"):
        return x.numpy() if str(x.dtype) != "torch.bfloat16" else x.float().numpy()
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items() if k != "__key__"}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


def differences(got: Any, want: Any, where: str = "") -> list[str]:
    """Where ``got`` (a Loader batch) differs from ``want`` (the DataLoader's): values,
    shapes, dtypes, structure."""
    if isinstance(want, dict) or isinstance(got, dict):
        if not (isinstance(want, dict) and isinstance(got, dict)):
            return [f"{where}: {type(got).__name__} where the DataLoader gives {type(want).__name__}"]
        if set(got) != set(want):
            return [f"{where}: fields {sorted(map(str, got))} vs {sorted(map(str, want))}"]
        return [d for k in want for d in differences(got[k], want[k], f"{where}/{k}")]
    if isinstance(want, np.ndarray) and isinstance(got, np.ndarray):
        if got.shape != want.shape or got.dtype != want.dtype:
            return [f"{where}: {got.dtype}{list(got.shape)} vs {want.dtype}{list(want.shape)}"]
        return [] if np.array_equal(got, want, equal_nan=True) else [f"{where}: values differ"]
    if isinstance(want, list) and isinstance(got, list):
        if len(got) != len(want):
            return [f"{where}: {len(got)} items vs {len(want)}"]
        return [d for k, (g, w) in enumerate(zip(got, want, strict=False)) for d in differences(g, w, f"{where}[{k}]")][:3]
    if isinstance(want, np.ndarray) or isinstance(got, np.ndarray) or isinstance(want, list) or isinstance(got, list):
        return [f"{where}: {type(got).__name__} where the DataLoader gives {type(want).__name__}"]
    return [] if got == want else [f"{where}: {got!r} vs {want!r}"]


def check(shape: str, folder: Path, workers: int, *, make_loader: Callable[..., Any] | None = None,
          make_baseline: Callable[..., Any] | None = None) -> dict[str, Any]:
    """Every batch of both Loaders against the DataLoader's, in order (``make_loader`` /
    ``make_baseline``: another round's :func:`loader` and :func:`baseline`)."""
    make_loader, make_baseline = make_loader or loader, make_baseline or baseline
    want = [_plain(b) for b in make_baseline(shape, folder, workers, shuffle=False)()]
    out: dict[str, Any] = {}
    for worker_type in ("thread", "process"):
        it = make_loader(shape, folder, workers, worker_type, shuffle=False)()
        try:
            got = [_plain(b) for b in it]
        finally:
            it.close()
        diffs = [f"{len(got)} batches vs {len(want)}"] if len(got) != len(want) else []
        for k, (g, w) in enumerate(zip(got, want, strict=False)):
            diffs += [f"batch {k}{d}" for d in differences(g, w)]
        out[worker_type] = diffs[:5]
    return out


# --- the run ----------------------------------------------------------------------------------

def measure(shape: str, folder: Path, rounds: int, workers: int, *, make_loader: Callable[..., Any] | None = None,
            make_baseline: Callable[..., Any] | None = None, batch: int | None = None) -> dict[str, Any]:
    make_loader, make_baseline = make_loader or loader, make_baseline or baseline
    contenders = {"Loader (threads)": make_loader(shape, folder, workers, "thread"),
                  "Loader (processes)": make_loader(shape, folder, workers, "process"),
                  "DataLoader": make_baseline(shape, folder, workers)}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in contenders}
    for _ in range(rounds):  # interleaved: A, B, C, A, B, C...
        for name, make in contenders.items():
            runs[name].append(run_once(make))
    base = statistics.median(r["samples_per_s"] for r in runs["DataLoader"])
    rows = []
    for name, rs in runs.items():
        rates = [r["samples_per_s"] for r in rs]
        rows.append({"name": name, "samples_per_s": statistics.median(rates), "min": min(rates),
                     "max": max(rates), "samples": rs[-1]["samples"],
                     "first_batch_s": statistics.median(r["first_batch_s"] for r in rs),
                     "samples_per_cpu_s": statistics.median(r["samples_per_cpu_s"] for r in rs),
                     "ratio": statistics.median(rates) / base})
    return {"shape": shape, "batch": batch or BATCH[shape], "rows": rows, "load": os.getloadavg()[0]}


def show(res: dict[str, Any]) -> None:
    """Print one shape's rows and its content check."""
    shape = res["shape"]
    for row in res["rows"]:
        print(f"{shape:8s} {row['name']:20s} {row['samples_per_s']:9.0f} samples/s "
              f"[{row['min']:.0f}-{row['max']:.0f}]  {row['ratio']:5.2f}x DataLoader  "
              f"{row['samples_per_cpu_s']:8.0f} samples/CPU-s  "
              f"first batch {row['first_batch_s']:.2f} s  load {res['load']:.2f}", flush=True)
    print(f"{shape:8s} batches equal to the DataLoader's: {res['correct']}"
          + "".join(f"\n  {t}: {d}" for t, ds in res["differences"].items() for d in ds), flush=True)


def main(argv: list[str] | None = None) -> int:
    p = common_parser(__doc__.splitlines()[0], SHAPES)
    p.add_argument("--round11", action="store_true", help=f"only round 11's shapes ({','.join(ROUND11)})")
    args = p.parse_args(argv)
    if args.round11 and args.shapes == ",".join(SHAPES):
        args.shapes = ",".join(ROUND11)
    return run(args, SHAPES, "outside_shapes", QUICK if args.quick else FULL, build)


def run(args: Any, every: tuple[str, ...], name: str, sizes: dict[str, int],
        build_shape: Callable[[str, int, Path], Path], *, make_loader: Callable[..., Any] | None = None,
        make_baseline: Callable[..., Any] | None = None, batch: dict[str, int] | None = None) -> int:
    """Build, check and time each chosen shape of a round (this one's, or round 12's
    functions), print each, write the JSON: the ``main`` of every round."""
    shapes, rounds, scratch = prepare(args, every, name.replace("_", "-") + "-")
    results = []
    try:
        for shape in shapes:
            folder = build_shape(shape, sizes[shape], scratch / shape)
            wrong = check(shape, folder, args.workers, make_loader=make_loader, make_baseline=make_baseline)
            res = {**measure(shape, folder, rounds, args.workers, make_loader=make_loader,
                             make_baseline=make_baseline, batch=(batch or BATCH)[shape]),
                   "differences": wrong, "correct": not any(wrong.values())}
            results.append(res)
            show(res)
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    if args.json:
        doc = {"benchmark": name, "quick": bool(args.quick), "preliminary": True, "rounds": rounds,
               "workers": args.workers, "sizes": {s: sizes[s] for s in shapes}, "shapes": results}
        Path(args.json).write_text(json.dumps(doc, indent=1))
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
