"""Image helpers for ``Loader(transform=...)``: numpy ``uint8`` HWC arrays in and out.

Resizing is Pillow's C resampler (antialiased bilinear, run with the GIL released, so
thread workers resize in parallel); the rest is numpy.

The transform contract: ``transform(sample) -> sample`` runs in the loader's
workers (threads, or spawned processes, so it must be picklable there) after
decoding, once per sample. ``sample`` is a dict of decoded fields (a JPEG or
PNG field is a ``uint8`` array of shape ``(H, W, 3)``, HWC, RGB) plus
``"__key__"``; it returns the sample to collate (a dict, the same or a new one;
or a tuple such as ``(image, label)``, which makes each batch a tuple of tensors
as a DataLoader over an ``ImageFolder`` gives, for loops written
``for images, labels in loader:``; never ``None``). Returned numpy arrays of one shape per field become one
torch tensor ``[B, ...]`` per batch; so to get dense image batches, give every
image the same size here (``random_resized_crop`` / ``resize``).

Helpers (all take and return numpy arrays; none allocates more than its output):

- :func:`random_resized_crop`, :func:`resize`, :func:`center_crop` -> ``uint8`` HWC;
- :func:`resize_nearest` -> a label map (segmentation mask) resized without blending ids;
- :func:`hflip`, :func:`random_hflip` -> ``uint8`` HWC (a view when flipped);
- :func:`to_rgb` -> ``uint8`` HWC with 3 channels (grey repeated, alpha dropped, 16-bit
  scaled to 8);
- :func:`to_chw` -> ``uint8`` CHW; :func:`normalize` -> ``float32`` CHW,
  ``(x / 255 - mean) / std`` per channel;
- :class:`ImageTransform`: the usual train/eval recipe for the image field
  (or fields, for a dataset mixing JPEG and PNG), a ready-made ``transform=``.

Example::

    from feedline import vision
    train_tf = vision.ImageTransform("jpg", size=224, train=True)  # crop, flip, CHW, normalise
    loader = feedline.Loader(ds, batch_size=64, transform=train_tf)
    # batch["jpg"]: float32[64, 3, 224, 224]

    def image_and_label(sample):          # a tuple per sample: a tuple per batch, so
        out = train_tf(sample)            # `for images, labels in loader:` works as with
        return out["jpg"], out["cls"]     # a DataLoader over an ImageFolder
    loader = feedline.Loader(ds, batch_size=64, transform=image_and_label)

Random choices come from ``rng`` (a ``numpy.random.Generator``) when given;
otherwise from a generator private to the calling thread, seeded from the OS,
so augmentations differ between runs, as with torchvision (the loader's
*order* still depends only on ``seed`` and the epoch). For reproducible
augmentation write your own transform that calls these helpers with an
``rng`` derived from what you know (e.g. ``sample["__key__"]`` and the epoch).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
from PIL import Image

from feedline.decode.resized import JPEG_EXTENSIONS, CheckedJpeg, decode_crop, plain_jpeg
from feedline.errors import ConfigError

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

_local = threading.local()

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "ImageTransform",
    "center_crop",
    "hflip",
    "normalize",
    "random_hflip",
    "random_resized_crop",
    "resize",
    "resize_nearest",
    "to_chw",
    "to_rgb",
]


def _image(img: Any, name: str = "img") -> np.ndarray:
    if not isinstance(img, np.ndarray):
        raise TypeError(f"{name} must be a numpy array (HWC uint8), got {type(img).__name__}")
    if img.dtype != np.uint8 or img.ndim not in (2, 3) or 0 in img.shape:
        raise ConfigError(
            f"{name} must be a non-empty uint8 array of shape (H, W) or (H, W, C), "
            f"got {img.dtype} {img.shape}",
            fix="apply the helpers to decoded images, before any other conversion",
        )
    return img if img.ndim == 3 else img[:, :, None]


def _size(size: int | Sequence[int], name: str = "size") -> tuple[int, int]:
    pair = (size, size) if isinstance(size, (int, np.integer)) else tuple(size)
    if len(pair) != 2 or not all(
        isinstance(v, (int, np.integer)) and not isinstance(v, bool) and 0 < v <= 1 << 15
        for v in pair
    ):
        raise ConfigError(f"{name} must be an int or (height, width) in 1..32768, got {size!r}")
    return int(pair[0]), int(pair[1])


def _rng(rng: np.random.Generator | None) -> np.random.Generator:
    if rng is not None:
        return rng
    gen = getattr(_local, "rng", None)
    if gen is None:
        gen = _local.rng = np.random.default_rng()
    return gen


REDUCING_GAP = 2.0
"""Pillow's ``reducing_gap``: a large downscale first averages whole pixel blocks down to
at least twice the target size, then resamples (as fast as the full filter is slow on a
12-megapixel photo, and within 0.01 of it in normalised units)."""

def resize(img: np.ndarray, size: int | Sequence[int]) -> np.ndarray:
    """Resize ``img`` (HWC uint8, 1-4 channels) to ``size`` = ``(height, width)`` (an int:
    square).

    Bilinear with antialiasing (Pillow's ``BILINEAR``; an image with alpha is resized
    premultiplied, as Pillow does); a downscale by more than 2x first averages whole pixel
    blocks (:data:`REDUCING_GAP`), so phone-size photos shrink fast and without aliasing.
    Returns a new ``uint8`` HWC array.
    """
    src = _image(img)
    oh, ow = _size(size)
    h, w, c = src.shape
    if (h, w) == (oh, ow):
        return src.copy()
    if c > 4:
        raise ConfigError(f"resize: {c} channels; an image has 1 to 4", fix="resize each channel")
    pil = Image.fromarray(np.ascontiguousarray(src[:, :, 0] if c == 1 else src))
    out = np.array(pil.resize((ow, oh), Image.Resampling.BILINEAR, reducing_gap=REDUCING_GAP))
    return out if out.ndim == 3 else out[:, :, None]


def resize_nearest(arr: np.ndarray, size: int | Sequence[int]) -> np.ndarray:
    """Resize a label map (a segmentation mask of class ids, a depth or instance map) to
    ``size`` = ``(height, width)`` by nearest neighbour: every output value is one of the
    input's, never a blend of two class ids (which :func:`resize`'s bilinear filter would
    make). Any dtype, shape ``(H, W)`` or ``(H, W, C)``; returns a new contiguous array of
    the same dtype and number of dimensions. Pixel centres are mapped as Pillow's
    ``NEAREST`` maps them."""
    if not isinstance(arr, np.ndarray) or arr.ndim not in (2, 3) or 0 in arr.shape:
        raise ConfigError(f"resize_nearest: need a non-empty (H, W) or (H, W, C) array, got "
                          f"{type(arr).__name__} {getattr(arr, 'shape', '')}")
    oh, ow = _size(size)
    h, w = arr.shape[:2]
    rows = np.minimum(((np.arange(oh) + 0.5) * (h / oh)).astype(np.intp), h - 1)
    cols = np.minimum(((np.arange(ow) + 0.5) * (w / ow)).astype(np.intp), w - 1)
    return np.ascontiguousarray(arr[rows[:, None], cols[None, :]])


def center_crop(img: np.ndarray, size: int | Sequence[int]) -> np.ndarray:
    """The central ``size`` window of ``img`` (a view); the image must be at least that big."""
    src = _image(img)
    oh, ow = _size(size)
    h, w, _ = src.shape
    if oh > h or ow > w:
        raise ConfigError(f"center_crop: size {(oh, ow)} exceeds the image {(h, w)}",
                          fix="resize first, e.g. resize(img, 256) then center_crop(img, 224)")
    top, left = (h - oh) // 2, (w - ow) // 2
    return src[top: top + oh, left: left + ow]


def crop_box(
    height: int, width: int, rng: np.random.Generator,
    scale: tuple[float, float] = (0.08, 1.0), ratio: tuple[float, float] = (3 / 4, 4 / 3),
) -> tuple[int, int, int, int]:
    """``(top, left, h, w)`` of a random crop covering ``scale`` of the area with
    aspect ratio in ``ratio`` (log-uniform), as torchvision's RandomResizedCrop
    (ten tries, then the largest central crop within ``ratio``)."""
    area = height * width
    log_lo, log_hi = math.log(ratio[0]), math.log(ratio[1])
    for _ in range(10):
        target = area * rng.uniform(scale[0], scale[1])
        aspect = math.exp(rng.uniform(log_lo, log_hi))
        w = round(math.sqrt(target * aspect))
        h = round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            return int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1)), h, w
    in_ratio = width / height
    if in_ratio < ratio[0]:
        w, h = width, round(width / ratio[0])
    elif in_ratio > ratio[1]:
        h, w = height, round(height * ratio[1])
    else:
        w, h = width, height
    h, w = max(1, min(h, height)), max(1, min(w, width))
    return (height - h) // 2, (width - w) // 2, h, w


def random_resized_crop(
    img: np.ndarray, size: int | Sequence[int], *,
    scale: tuple[float, float] = (0.08, 1.0), ratio: tuple[float, float] = (3 / 4, 4 / 3),
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """A random crop of ``img`` (see :func:`crop_box`) resized to ``size``: ``uint8`` HWC."""
    src = _image(img)
    if not (0 < scale[0] <= scale[1] <= 1) or not (0 < ratio[0] <= ratio[1]):
        raise ConfigError(f"random_resized_crop: need 0 < scale[0] <= scale[1] <= 1 and "
                          f"0 < ratio[0] <= ratio[1], got scale={scale}, ratio={ratio}")
    top, left, h, w = crop_box(src.shape[0], src.shape[1], _rng(rng), scale, ratio)
    return resize(src[top: top + h, left: left + w], size)


def hflip(img: np.ndarray) -> np.ndarray:
    """Mirror left-right (a view)."""
    return _image(img)[:, ::-1]


def random_hflip(
    img: np.ndarray, p: float = 0.5, *, rng: np.random.Generator | None = None
) -> np.ndarray:
    """Mirror with probability ``p``; otherwise ``img`` itself (as HWC)."""
    if not 0 <= p <= 1:
        raise ConfigError(f"random_hflip: p must be in [0, 1], got {p!r}")
    src = _image(img)
    return src[:, ::-1] if _rng(rng).random() < p else src


def to_chw(img: np.ndarray) -> np.ndarray:
    """HWC -> CHW, contiguous, still ``uint8`` (what ``torchvision`` models take after
    ``.float() / 255``)."""
    return np.ascontiguousarray(_image(img).transpose(2, 0, 1))


def normalize(
    img: np.ndarray, mean: Sequence[float] = IMAGENET_MEAN, std: Sequence[float] = IMAGENET_STD,
) -> np.ndarray:
    """``(img / 255 - mean) / std`` per channel, as contiguous ``float32`` CHW.

    ``mean`` and ``std`` are in 0..1 units (torchvision's convention), one per
    channel (or one for all).
    """
    src = _image(img)
    c = src.shape[2]
    m = np.asarray(mean, dtype=np.float32).reshape(-1)
    s = np.asarray(std, dtype=np.float32).reshape(-1)
    if m.size not in (1, c) or s.size not in (1, c) or not np.all(s > 0):
        raise ConfigError(f"normalize: need 1 or {c} means and positive stds, got "
                          f"mean={tuple(mean)}, std={tuple(std)}")
    scale = np.broadcast_to(1.0 / (255.0 * s), (c,))[:, None, None]
    offset = np.broadcast_to(m / s, (c,))[:, None, None]
    out = np.empty((c, src.shape[0], src.shape[1]), dtype=np.float32)
    np.multiply(src.transpose(2, 0, 1), scale, out=out)
    out -= offset
    return out


def _eight_bits(img: Any) -> Any:
    """A 16-bit image (``uint16``: 16-bit PNG scans, depth maps) scaled to ``uint8``
    (value / 257, rounded: 65535 -> 255); anything else as it is."""
    if isinstance(img, np.ndarray) and img.dtype == np.uint16:
        return ((img.astype(np.uint32) + 128) // 257).astype(np.uint8)
    return img


def to_rgb(img: np.ndarray) -> np.ndarray:
    """Three channels: grey (and grey + alpha) repeated, an alpha channel dropped. A 16-bit
    image (``uint16``, as a 16-bit PNG decodes) is first scaled to 8 bits (value / 257), where
    Pillow's ``convert("RGB")`` would clip it to white."""
    src = _image(_eight_bits(img))
    c = src.shape[2]
    if c == 3:
        return src
    if c in (1, 2):
        return np.repeat(src[:, :, :1], 3, axis=2)
    if c == 4:
        return src[:, :, :3]
    raise ConfigError(f"to_rgb: cannot make RGB from {c} channels")


class ImageTransform:
    """The usual image recipe for the image of a sample, as a ``transform=``.

    The image is made RGB (:func:`to_rgb`), then ``train=True``:
    :func:`random_resized_crop` to ``size``, :func:`random_hflip`;
    ``train=False``: :func:`resize` the short side to ``size / 0.875`` and
    :func:`center_crop` ``size``. Then :func:`normalize` to ``float32`` CHW, or
    :func:`to_chw` (``uint8``) when ``mean=None``. Every sample thus leaves with
    an image of one shape, whatever its size, orientation or channels.

    With ``masks=`` (segmentation: ``images/x.jpg`` + ``masks/x.png`` packed with
    ``--key parallel``), each mask field gets the image's own crop and flip and is
    resized by nearest neighbour (:func:`resize_nearest`: class ids are never blended),
    so ``batch[mask]`` is ``uint8[N, h, w]`` (``[N, h, w, C]`` for a colour mask) aligned
    pixel for pixel with the image; ``.long()`` it for ``cross_entropy``.

    A JPEG image field may come still compressed (``bytes``): the Loader keeps the JPEG
    fields of :attr:`encoded_fields` so in its workers. The crop (train) or the resized
    image (eval) is then drawn from the header's size and decoded at the largest DCT
    downscale that keeps it at least twice ``size`` (:func:`feedline.decode.resized.decode_crop`):
    a 1920x1080 photo's RandomResizedCrop to 224 takes 5-15 % less CPU than a full decode
    and crop, the eval resize to 256 about 35 % less; the pixels are within a grey level
    or two of those (a blur of fine detail the downscale removes anyway).

    A window of frames, ``(T, H, W, C)`` (a camera's field of
    :class:`feedline.episodes.Windows`), gets one crop and flip drawn for all its frames
    and leaves as ``(T, 3, h, w)``: batches are ``[N, T, 3, h, w]``.

    Args:
        field: the image field (``"jpg"``), or several (``("jpg", "png")``) when a
            dataset mixes formats: each sample's first present one is used, the
            others are dropped, and the result is stored under ``out``.
        size: output ``(height, width)``, or an int for square.
        train: random augmentation (True) or the deterministic eval path.
        mean, std: per-channel statistics in 0..1 units; ``mean=None`` skips
            normalising.
        out: the field name of the result (default: the first of ``field``).
        masks: label-map fields to transform with the image (``"masks.png"`` or
            several); each must be present in every sample, with the image's height
            and width.

    Raises:
        ConfigError: a bad argument; at call time, a sample with none of the
            fields, whose image is not ``uint8``, or whose mask is missing or of
            another size than its image (the loader adds the sample key).
    """

    def __init__(
        self, field: str | Sequence[str], size: int | Sequence[int] = 224, *,
        train: bool = True, mean: Sequence[float] | None = IMAGENET_MEAN,
        std: Sequence[float] = IMAGENET_STD, out: str | None = None,
        masks: str | Sequence[str] = (),
    ) -> None:
        fields = (field,) if isinstance(field, str) else tuple(field)
        self.masks = (masks,) if isinstance(masks, str) else tuple(masks)
        if not all(isinstance(m, str) and m for m in self.masks) or set(self.masks) & set(fields):
            raise ConfigError(f"ImageTransform: masks must be field names other than the image's, "
                              f"got {masks!r}")
        if not fields or not all(isinstance(f, str) and f for f in fields):
            raise ConfigError(f"ImageTransform: field must be a field name or names, got {field!r}")
        if out is not None and (not isinstance(out, str) or not out):
            raise ConfigError(f"ImageTransform: out must be a field name, got {out!r}")
        self.fields = fields
        self.out = out or fields[0]
        self.size = _size(size)
        self.train = bool(train)
        self.mean = None if mean is None else tuple(float(v) for v in mean)
        self.std = tuple(float(v) for v in std)
        if self.mean is not None:
            normalize(np.zeros((1, 1, 3), np.uint8), self.mean, self.std)  # checks them now

    def __call__(self, sample: dict[str, Any]) -> dict[str, Any]:
        name = next((f for f in self.fields if isinstance(sample, dict) and f in sample), None)
        if name is None:
            have = sorted(sample) if isinstance(sample, dict) else type(sample).__name__
            want = " or ".join(repr(f) for f in self.fields)
            raise ConfigError(f"ImageTransform: the sample has no field {want} (it has {have})",
                              fix="pass the image field's name(s)")
        value = sample[name]
        if isinstance(value, (bytes, bytearray, memoryview)):
            return self._encoded(sample, name, value)
        if isinstance(value, np.ndarray) and value.ndim == 4 and not self.masks:
            return self._window(sample, name, value)
        img = to_rgb(_image(_eight_bits(value), name=f"field {name!r}"))
        masks = {m: self._mask(sample, m, img.shape[:2]) for m in self.masks}
        draw = self._draw(img.shape)
        img = self._apply(img, draw, resize)
        masks = {m: self._apply(a, draw, resize_nearest) for m, a in masks.items()}
        result = {k: v for k, v in sample.items() if k not in self.fields}
        result[self.out] = to_chw(img) if self.mean is None else normalize(img, self.mean, self.std)
        result.update((m, np.ascontiguousarray(a)) for m, a in masks.items())
        return result

    @property
    def encoded_fields(self) -> tuple[str, ...]:
        """The image fields this transform decodes itself when given their JPEG bytes (the
        Loader's workers then hand them over compressed): the JPEG fields among ``field``;
        none with ``masks`` (a mask needs its image's pixels at full size)."""
        if self.masks:
            return ()
        return tuple(f for f in self.fields if f.rsplit(".", 1)[-1].lower() in JPEG_EXTENSIONS)

    def _encoded(self, sample: dict[str, Any], name: str, data: Any) -> dict[str, Any]:
        """The image field as JPEG bytes: decoded at a reduced scale where the crop allows."""
        from feedline.decode import Limits
        from feedline.decode.codecs import decode_jpeg

        limits = Limits()  # bytes the Loader kept were checked against its own limits
        header = data.header if isinstance(data, CheckedJpeg) else plain_jpeg(data, limits)
        if header is None or self.masks:  # CMYK, or masks that need the full-size image
            return self({**sample, name: decode_jpeg(data, limits)})
        draw = self._draw((*header, 3))
        if self.train:
            top, left, h, w, flip = draw
            img = decode_crop(data, header, (top, left, h, w), self.size)
            img = img[:, ::-1] if flip else img
        else:
            img = center_crop(decode_crop(data, header, None, draw), self.size)
        result = {k: v for k, v in sample.items() if k not in self.fields}
        result[self.out] = to_chw(img) if self.mean is None else normalize(img, self.mean, self.std)
        return result

    def _window(self, sample: dict[str, Any], name: str, frames: np.ndarray) -> dict[str, Any]:
        """A window of frames ``(T, H, W, C)`` (:class:`feedline.episodes.Windows`): one crop and
        flip drawn for the whole window, so motion between frames is not augmentation noise;
        ``(T, 3, h, w)`` out."""
        imgs = [to_rgb(_image(_eight_bits(f), name=f"field {name!r}")) for f in frames]
        draw = self._draw(imgs[0].shape)
        done = [self._apply(img, draw, resize) for img in imgs]
        result = {k: v for k, v in sample.items() if k not in self.fields}
        result[self.out] = np.stack([to_chw(i) if self.mean is None else normalize(i, self.mean, self.std)
                                     for i in done])
        return result

    def _draw(self, shape: tuple[int, ...]) -> tuple[Any, ...]:
        """The random crop box and flip (train), or the scaled size (eval), for an image of ``shape``."""
        if self.train:
            rng = _rng(None)
            box = crop_box(shape[0], shape[1], rng)
            return (*box, rng.random() < 0.5)  # the draws random_hflip(random_resized_crop(img)) makes
        oh, ow = self.size
        f = max(oh, ow) / 0.875 / min(shape[0], shape[1])
        return (max(oh, round(shape[0] * f)), max(ow, round(shape[1] * f)))

    def _apply(self, img: np.ndarray, draw: tuple[Any, ...], scale: Any) -> np.ndarray:
        """``img`` cropped, flipped and resized by ``draw`` with ``scale`` (:func:`resize` for an
        image, :func:`resize_nearest` for a mask)."""
        if self.train:
            top, left, h, w, flip = draw
            out = scale(img[top: top + h, left: left + w], self.size)
            return out[:, ::-1] if flip else out
        return _center(scale(img, draw), self.size) if scale is resize_nearest else center_crop(scale(img, draw), self.size)

    def _mask(self, sample: dict[str, Any], name: str, hw: tuple[int, ...]) -> np.ndarray:
        arr = sample.get(name)
        if not isinstance(arr, np.ndarray) or arr.ndim not in (2, 3):
            got = "no such field" if arr is None else f"{type(arr).__name__} {getattr(arr, 'shape', '')}"
            raise ConfigError(f"ImageTransform: mask {name!r} must be a decoded (H, W) or "
                              f"(H, W, C) array, got {got} (the sample has {sorted(sample)})",
                              fix="pass masks= the mask field's name as the batch shows it")
        if arr.shape[:2] != hw:
            raise ConfigError(f"ImageTransform: mask {name!r} is {arr.shape[:2]}, its image "
                              f"{tuple(hw)}: a mask must cover its image pixel for pixel",
                              fix="re-export the mask at the image's size")
        return arr

    def __repr__(self) -> str:
        return (f"ImageTransform({self.fields!r}, size={self.size}, train={self.train}, "
                f"mean={self.mean}, std={self.std}, out={self.out!r}, masks={self.masks!r})")


def _center(arr: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """The central ``size`` window of an (H, W) or (H, W, C) array of any dtype."""
    top, left = (arr.shape[0] - size[0]) // 2, (arr.shape[1] - size[1]) // 2
    return arr[top: top + size[0], left: left + size[1]]
