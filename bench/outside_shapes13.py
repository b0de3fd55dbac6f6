"""feedline Loader vs the natural torch DataLoader on more shapes users bring (round 13).

Round 13 of ``bench/outside_shapes.py`` (same method: each shape is read once in order by
both Loaders and the DataLoader and compared value by value, then timed in interleaved
rounds with 2 workers each; medians, samples per CPU-second of the process tree), on
layouts no earlier round had:

* ``bigjpeg``: phone/camera photos, 1920x1080 JPEGs (4:2:0, quality 90) in class folders,
  packed with ``--labels from-folder``; timed with RandomResizedCrop to 224 + flip +
  normalise (``vision.ImageTransform``) against torchvision's recipe written in Pillow;
  checked without a transform (decoded pixels and labels), batch 32;
* ``segdepth``: NYU-Depth-style triples ``rgb/x.jpg`` (480x640) + ``label/x.png`` (8-bit
  class ids) + ``depth/x.png`` (16-bit millimetres), packed with ``--key parallel``; timed
  with one random crop + flip for all three (``ImageTransform(masks=...)``; bilinear image,
  nearest label and depth) against the same recipe in Pillow; checked without crops, batch 16;
* ``recsys``: 16-byte interaction records (user, item int32; rating float32; ts int32) in
  one structured ``.npy``, a map-style dataset returning one dict of Python scalars per
  record (what recommender tutorials write), given as it is to both, batch 1024;
* ``jsonl``: a text corpus ``corpus.jsonl`` (one ``{"id", "text", "meta"}`` document a line,
  20-2000 characters), tokenised per document in ``__getitem__`` (byte-level ids, BOS/EOS,
  at most 512) and padded to the batch's longest by one collate (ids, attention mask,
  lengths), the dataset given as it is to both, batch 32;
* ``nested``: per sample a JSON metadata dict (nested: source, tags, a list of objects) +
  an ``.npz`` of 1-5 per-object feature arrays of varying length, packed with
  ``feedline pack``; one collate to both that keeps the metadata and the feature lists
  as lists, batch 32.

    .venv/bin/python bench/outside_shapes13.py [--quick] [--shapes bigjpeg,recsys] [--rounds 3] [--json PATH]
"""

from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from outside_shapes import Files, ImageNetFolder, _feedline, _png, _rrc_box, decode, run
from peers_shapes import _png16, common_parser

SHAPES = ("bigjpeg", "segdepth", "recsys", "jsonl", "nested")
BATCH = {"bigjpeg": 32, "segdepth": 16, "recsys": 1024, "jsonl": 32, "nested": 32}
FULL = {"bigjpeg": 256, "segdepth": 320, "recsys": 1_000_000, "jsonl": 20_000, "nested": 4000}
QUICK = {"bigjpeg": 12, "segdepth": 20, "recsys": 5000, "jsonl": 200, "nested": 80}
SEG = ("rgb", "label", "depth")
SEG_SIZE = (240, 320)
RECORD = np.dtype([("user", "<i4"), ("item", "<i4"), ("rating", "<f4"), ("ts", "<i4")])
MAX_TOKENS, BOS, EOS, PAD = 512, 1, 2, 0


# --- data -------------------------------------------------------------------------------------

def _photo(rng: np.random.Generator, h: int, w: int, quality: int = 90) -> bytes:
    """A photo-like JPEG: smooth colour fields with fine grain, 4:2:0 as cameras write them
    (a noise image would be 3x the bytes and decode time of a real photo)."""
    import simplejpeg
    from PIL import Image

    small = rng.integers(0, 256, (h // 60 + 1, w // 60 + 1, 3), dtype=np.uint8)
    img = np.asarray(Image.fromarray(small).resize((w, h), Image.BICUBIC)).astype(np.int16)
    img += rng.integers(-4, 5, (h, w, 1), dtype=np.int16)
    return bytes(simplejpeg.encode_jpeg(np.clip(img, 0, 255).astype(np.uint8), quality=quality,
                                        colorsubsampling="420"))


def _seg_triple(rng: np.random.Generator, h: int = 480, w: int = 640) -> tuple[bytes, bytes, bytes]:
    """An RGB frame, its class-id map (0-39 in blocks) and its 16-bit depth (mm)."""
    labels = np.repeat(np.repeat(rng.integers(0, 40, (h // 20, w // 20), dtype=np.uint8), 20, 0), 20, 1)
    ramp = np.linspace(500, 9000, w, dtype=np.float32)[None, :] + rng.uniform(0, 800, (h, 1)).astype(np.float32)
    depth = (ramp + labels * 7).astype(np.uint16)
    return _photo(rng, h, w), _png(labels), _png16(depth)


def _doc(rng: np.random.Generator, i: int) -> dict[str, Any]:
    words = ("the", "loader", "reads", "packed", "shards", "quickly", "über", "naïve", "数据", "🙂", "\n")
    n = int(rng.integers(4, 400))
    text = " ".join(words[int(k)] for k in rng.integers(0, len(words), n))[:2000]
    return {"id": f"doc-{i:07d}", "text": text, "meta": {"source": ("web", "books", "code")[i % 3],
                                                        "score": round(float(rng.random()), 4)}}


def _nested(rng: np.random.Generator, i: int) -> tuple[bytes, bytes]:
    k = int(rng.integers(1, 6))
    meta = {"id": i, "source": {"camera": f"cam{i % 4}", "ts": 1.7e9 + i / 10},
            "tags": [t for t in ("night", "rain", "urban", "highway") if rng.random() < 0.4],
            "objects": [{"cls": int(rng.integers(0, 20)), "score": round(float(rng.random()), 4)}
                        for _ in range(k)]}
    buf = io.BytesIO()
    np.savez(buf, **{f"obj_{j}": rng.standard_normal((int(rng.integers(1, 40)), 64)).astype(np.float32)
                     for j in range(k)})
    return json.dumps(meta).encode(), buf.getvalue()


def build(shape: str, n: int, folder: Path) -> Path:
    """Write the shape's source files under ``folder/files``; pack them into ``folder/ds``
    when feedline reads a packed dataset."""
    src = folder / "files"
    src.mkdir(parents=True)
    rng = np.random.default_rng(0)
    if shape == "bigjpeg":
        for i in range(n):
            d = src / ("cat", "dog", "bird", "car")[i % 4]
            d.mkdir(exist_ok=True)
            (d / f"IMG_{1000 + i:05d}.jpg").write_bytes(_photo(rng, 1080, 1920))
        _feedline("pack", os.fspath(src), "--out", os.fspath(folder / "ds"), "--labels", "from-folder")
    elif shape == "segdepth":
        for d in SEG:
            (src / d).mkdir()
        for i in range(n):
            rgb, label, depth = _seg_triple(rng)
            (src / "rgb" / f"{i:05d}.jpg").write_bytes(rgb)
            (src / "label" / f"{i:05d}.png").write_bytes(label)
            (src / "depth" / f"{i:05d}.png").write_bytes(depth)
        _feedline("pack", os.fspath(src), "--out", os.fspath(folder / "ds"), "--key", "parallel")
    elif shape == "recsys":
        rec = np.empty(n, RECORD)
        rec["user"], rec["item"] = rng.integers(0, 100_000, n), rng.integers(0, 1_000_000, n)
        rec["rating"], rec["ts"] = rng.integers(1, 11, n) / 2, 1_600_000_000 + np.arange(n)
        np.save(src / "interactions.npy", rec)
    elif shape == "jsonl":
        with open(src / "corpus.jsonl", "w", encoding="utf-8") as f:
            for i in range(n):
                f.write(json.dumps(_doc(rng, i), ensure_ascii=False) + "\n")
    elif shape == "nested":
        for i in range(n):
            meta, feats = _nested(rng, i)
            (src / f"{i:06d}.json").write_bytes(meta)
            (src / f"{i:06d}.npz").write_bytes(feats)
        _feedline("pack", os.fspath(src), "--out", os.fspath(folder / "ds"))
    else:
        raise ValueError(f"no data for shape {shape!r}")
    return folder


# --- map-style datasets (given as they are to both for recsys / jsonl) ------------------------

class Interactions:
    """A recommender tutorial's dataset: the records loaded once, one dict of Python scalars
    per record (``default_collate`` makes int64 and float64 tensors of them)."""

    def __init__(self, path: Path) -> None:
        self.data = np.load(path)

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> dict[str, Any]:
        r = self.data[i]
        return {"user": int(r["user"]), "item": int(r["item"]), "rating": float(r["rating"]), "ts": int(r["ts"])}


class Corpus:
    """A JSONL corpus read as users read it: the lines kept in memory, each document parsed
    and tokenised in ``__getitem__`` (UTF-8 bytes + 3, BOS/EOS, cut at ``MAX_TOKENS``)."""

    def __init__(self, path: Path) -> None:
        with open(path, encoding="utf-8") as f:
            self.lines = f.readlines()

    def __len__(self) -> int:
        return len(self.lines)

    def __getitem__(self, i: int) -> dict[str, Any]:
        doc = json.loads(self.lines[i])
        ids = np.frombuffer(doc["text"].encode("utf-8"), np.uint8).astype(np.int64)[:MAX_TOKENS - 2] + 3
        return {"ids": np.concatenate(([BOS], ids, [EOS])), "source": doc["meta"]["source"]}


def pad_tokens(batch: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``jsonl`` collate of both: ids padded to the longest, attention mask, lengths."""
    import torch

    lengths = [len(s["ids"]) for s in batch]
    ids = np.full((len(batch), max(lengths)), PAD, np.int64)
    for row, s in zip(ids, batch, strict=True):
        row[:len(s["ids"])] = s["ids"]
    lens = torch.tensor(lengths)
    return {"input_ids": torch.from_numpy(ids), "attention_mask": torch.arange(ids.shape[1])[None] < lens[:, None],
            "lengths": lens, "source": [s["source"] for s in batch]}


def nested_collate(batch: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``nested`` collate of both: metadata dicts as a list, each sample's features a list
    of tensors (in ``obj_0, obj_1...`` order), the object count a tensor."""
    import torch

    feats = [[torch.from_numpy(np.asarray(s["npz"][k])) for k in sorted(s["npz"], key=lambda k: int(k[4:]))]
             for s in batch]
    return {"meta": [s["json"] for s in batch], "feats": feats, "count": torch.tensor([len(f) for f in feats])}


class Triples:
    """``rgb/ label/ depth/`` read as users read them: file names of ``rgb/`` sorted; with
    ``crop``, one torchvision RandomResizedCrop box and flip for the three (Pillow bilinear
    for the image, nearest for the label and depth maps), the image normalised."""

    def __init__(self, root: Path, crop: bool) -> None:
        stems = sorted(p.stem for p in (root / "rgb").iterdir())
        self.items = [(root / "rgb" / f"{k}.jpg", root / "label" / f"{k}.png", root / "depth" / f"{k}.png")
                      for k in stems]
        self.crop = crop

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        rgb, label, depth = self.items[i]
        if not self.crop:
            return {"rgb.jpg": decode("jpg", rgb.read_bytes()), "label.png": decode("png", label.read_bytes()),
                    "depth.png": decode("png", depth.read_bytes())}
        import torch
        from PIL import Image

        rng = np.random.default_rng()
        img, lab, dep = Image.open(rgb).convert("RGB"), Image.open(label), Image.open(depth)
        box, size = _rrc_box(img.width, img.height, rng), SEG_SIZE[::-1]
        img = img.resize(size, Image.BILINEAR, box=box)
        lab, dep = lab.resize(size, Image.NEAREST, box=box), dep.resize(size, Image.NEAREST, box=box)
        if rng.random() < 0.5:
            img, lab, dep = (im.transpose(Image.FLIP_LEFT_RIGHT) for im in (img, lab, dep))
        x = torch.from_numpy(np.asarray(img)).permute(2, 0, 1).float().div_(255)
        mean = torch.tensor((0.485, 0.456, 0.406)).view(3, 1, 1)
        std = torch.tensor((0.229, 0.224, 0.225)).view(3, 1, 1)
        return {"image": (x - mean) / std, "label.png": torch.from_numpy(np.asarray(lab).copy()),
                "depth.png": torch.from_numpy(np.asarray(dep).astype(np.uint16))}


# --- contenders -------------------------------------------------------------------------------

def _mapped(shape: str, folder: Path) -> Any:
    return (Interactions(folder / "files" / "interactions.npy") if shape == "recsys"
            else Corpus(folder / "files" / "corpus.jsonl"))


class NpzFiles(Files):
    """``x.json`` + ``x.npz`` files read as users read them: ``json.loads``, and ``np.load``
    of the archive into a dict of arrays."""

    def __getitem__(self, i: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for field, path in self.items[i]:
            data = path.read_bytes()
            if field == "npz":
                with np.load(io.BytesIO(data), allow_pickle=False) as z:
                    out[field] = {k: z[k] for k in z.files}
            else:
                out[field] = decode(field, data)
        return out


def baseline(shape: str, folder: Path, workers: int, shuffle: bool = True) -> Callable[[], Any]:
    """The DataLoader a user writes for ``shape``; ``shuffle=False`` and no augmentation for
    the content check."""
    from torch.utils.data import DataLoader

    collate: Callable[..., Any] | None = None
    ds: Any
    if shape == "bigjpeg":
        ds = ImageNetFolder(folder / "files", train=shuffle)  # one size: stacked either way
    elif shape == "segdepth":
        ds = Triples(folder / "files", crop=shuffle)
    elif shape == "nested":
        ds, collate = NpzFiles(folder / "files"), nested_collate
    else:
        ds, collate = _mapped(shape, folder), pad_tokens if shape == "jsonl" else None
    return lambda: DataLoader(ds, batch_size=BATCH[shape], shuffle=shuffle, num_workers=workers,
                              collate_fn=collate)


def loader(shape: str, folder: Path, workers: int, worker_type: str, shuffle: bool = True) -> Callable[[], Any]:
    """``feedline.Loader`` over the packed shape (or the map-style dataset); ``shuffle=False``:
    the content check."""
    import feedline
    from feedline import vision

    kw: dict[str, Any] = {}
    source: Any = os.fspath(folder / "ds")
    if shape == "bigjpeg" and shuffle:
        kw["transform"] = vision.ImageTransform("jpg", size=224, out="image")
    elif shape == "segdepth" and shuffle:
        kw["transform"] = vision.ImageTransform("rgb.jpg", size=SEG_SIZE, masks=("label.png", "depth.png"),
                                                out="image")
    elif shape == "nested":
        kw["collate"] = nested_collate
    elif shape in ("recsys", "jsonl"):
        source = _mapped(shape, folder)
        if shape == "jsonl":
            kw["collate"] = pad_tokens

    def make() -> Any:
        return feedline.Loader(source, batch_size=BATCH[shape], workers=workers, worker_type=worker_type,
                               drop_last=False, shuffle=shuffle, seed=0, **kw)
    return make


def main(argv: list[str] | None = None) -> int:
    args = common_parser(__doc__.splitlines()[0], SHAPES).parse_args(argv)
    return run(args, SHAPES, "outside_shapes13", QUICK if args.quick else FULL, build, make_loader=loader,
               make_baseline=baseline, batch=BATCH)


if __name__ == "__main__":
    raise SystemExit(main())
