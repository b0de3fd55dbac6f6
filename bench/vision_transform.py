"""Are feedline.vision's helpers fast enough to run in the workers, and on threads?

Question: per image, what does the train recipe of ``vision.ImageTransform``
(random resized crop, flip, normalise to float32 CHW; the resize is Pillow's
bilinear with ``reducing_gap=2``) cost next to the recipe a torchvision user
runs (``RandomResizedCrop`` on a PIL image with the full antialiasing filter,
then ``ToTensor`` + ``Normalize``, written here with Pillow and numpy since
torchvision is not a dependency)? The same decoded images (phone-photo sizes,
landscape and portrait) and the same crop boxes go through both, alternating
(ours, baseline, ours, ...) for ``--repeat`` rounds; the script prints the
median microseconds per image of each and the ratio ours / baseline (below 1:
faster than the baseline).

Then the thread question: the whole ``ImageTransform`` on small photos
(96x128 to 64x64, where per-call overheads dominate) run by one thread and by
two at once: the speed-up two threads get (2 when the work releases the GIL;
below 1 when the threads take turns on it). Printed for information; it is what
``worker_type="auto"`` measures in a loader.

    .venv/bin/python bench/vision_transform.py [--quick] [--repeat N] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from typing import Any

import numpy as np
from PIL import Image

from feedline import vision

SIZES = [(480, 640), (640, 480), (1536, 2048), (2048, 1536)]


def _images(n: int, quick: bool) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    sizes = SIZES[:2] if quick else SIZES
    out = []
    for i in range(n):
        h, w = sizes[i % len(sizes)]
        yy, xx = np.mgrid[0:h, 0:w]
        base = np.stack([yy * 255 // h, xx * 255 // w, (yy + xx) % 256], axis=2)
        out.append(np.clip(base + rng.integers(-10, 10, base.shape), 0, 255).astype(np.uint8))
    return out


def ours(img: np.ndarray, box: tuple[int, int, int, int], flip: bool) -> np.ndarray:
    top, left, h, w = box
    crop = vision.resize(img[top: top + h, left: left + w], 224)
    return vision.normalize(crop[:, ::-1] if flip else crop)


MEAN = np.array(vision.IMAGENET_MEAN, np.float32)[:, None, None]
STD = np.array(vision.IMAGENET_STD, np.float32)[:, None, None]


def baseline(img: np.ndarray, box: tuple[int, int, int, int], flip: bool) -> np.ndarray:
    """torchvision's recipe: PIL crop + bilinear resize (antialiased), flip, ToTensor, Normalize."""
    top, left, h, w = box
    pil = Image.fromarray(img).resize((224, 224), Image.BILINEAR, box=(left, top, left + w, top + h))
    if flip:
        pil = pil.transpose(Image.FLIP_LEFT_RIGHT)
    chw = np.asarray(pil, dtype=np.float32).transpose(2, 0, 1) / 255.0
    return (chw - MEAN) / STD


def _time(fn: Any, work: list[tuple[np.ndarray, tuple[int, int, int, int], bool]]) -> float:
    t0 = time.perf_counter()
    for img, box, flip in work:
        fn(img, box, flip)
    return (time.perf_counter() - t0) / len(work) * 1e6


def thread_speedup(n: int, repeat: int) -> dict[str, float]:
    """``ImageTransform`` on small photos: microseconds per image on one thread, and the
    speed-up of two threads running it at once (median of ``repeat`` rounds)."""
    rng = np.random.default_rng(2)
    imgs = [rng.integers(0, 256, (96, 128, 3) if i % 2 else (128, 96, 3), dtype=np.uint8)
            for i in range(16)]
    tf = vision.ImageTransform("jpg", size=64)

    def work() -> None:
        for i in range(n):
            tf({"jpg": imgs[i % len(imgs)]})

    one, ups = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        work()
        t1 = time.perf_counter() - t0
        pair = [threading.Thread(target=work) for _ in range(2)]
        t0 = time.perf_counter()
        for t in pair:
            t.start()
        for t in pair:
            t.join()
        one.append(t1 / n * 1e6)
        ups.append(2 * t1 / (time.perf_counter() - t0))
    return {"us_per_image_one_thread": statistics.median(one), "two_thread_speedup": statistics.median(ups)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small images, few rounds (smoke test)")
    p.add_argument("--repeat", type=int, default=None, help="alternating rounds (default 7, quick 3)")
    p.add_argument("--json", default=None, help="write results to this JSON file")
    args = p.parse_args(argv)
    repeat = args.repeat or (3 if args.quick else 7)
    images = _images(8 if args.quick else 16, args.quick)
    rng = np.random.default_rng(1)
    work = [(img, vision.crop_box(img.shape[0], img.shape[1], rng), bool(rng.random() < 0.5))
            for img in images]
    diff = max(float(np.abs(ours(*w) - baseline(*w)).mean()) for w in work)
    times: dict[str, list[float]] = {"feedline.vision": [], "pillow": []}
    for _ in range(repeat):
        times["feedline.vision"].append(_time(ours, work))
        times["pillow"].append(_time(baseline, work))
    med = {k: statistics.median(v) for k, v in times.items()}
    result = {
        "question": "cost per image of a train transform: feedline.vision vs Pillow",
        "images": [list(i.shape) for i in images], "repeat": repeat,
        "median_us_per_image": med, "runs_us_per_image": times,
        "ratio_vision_over_pillow": med["feedline.vision"] / med["pillow"],
        "max_mean_abs_diff_normalised": diff,
    }
    result["small_on_threads"] = threads = thread_speedup(100 if args.quick else 600, repeat)
    for k, v in med.items():
        print(f"{k:16s} {v:9.0f} us/image (median of {repeat})")
    print(f"ImageTransform on 96x128 -> 64x64: {threads['us_per_image_one_thread']:.0f} us/image on "
          f"one thread; two threads at once: {threads['two_thread_speedup']:.2f}x one")
    print(f"ratio feedline.vision / pillow: {result['ratio_vision_over_pillow']:.2f}x "
          f"(mean |difference| of the outputs at most {diff:.3f} in normalised units)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=1)
    return result


if __name__ == "__main__":
    main()
