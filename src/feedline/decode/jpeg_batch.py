"""Batched JPEG decode of compressed bytes, on the CPU or on the GPU, behind one interface.

Seed 000: when CPU JPEG decode binds (high-resolution cameras, several per
frame), only the compressed bytes should cross PCIe and the decode and colour
conversion should run in device memory. The plumbing is the same either way:

1. the encoded images of a batch are packed into **one contiguous uint8
   buffer plus offsets** (:class:`CompressedBatch`, written into a reusable
   (pinned) slot buffer by :meth:`CompressedBatch.pack`);
2. each header is checked on the host against the declared
   :class:`~feedline.decode.Limits` before anything is decoded;
3. a :class:`JpegBatchDecoder` turns the batch into HWC uint8 tensors on its
   device, optionally resized to one size so the batch is dense.

Decoders: :class:`CpuJpegDecoder` (simplejpeg, what CI runs),
:class:`TorchvisionJpegDecoder` (``torchvision.io.decode_jpeg(device="cuda")``,
batched nvJPEG) and :class:`NvImageCodecDecoder` (``nvidia-nvimgcodec-cu12``).
:func:`choose_jpeg_decoder` picks one for ``decode_on="cpu"|"gpu"|"auto"`` and
says why. Heavy imports (torch, torchvision, nvimgcodec) happen on use.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from feedline.decode.codecs import Buffer, Limits, decode_jpeg
from feedline.errors import ConfigError, DecodeError, DeviceError

if TYPE_CHECKING:
    import torch

DECODE_ON = ("cpu", "gpu", "auto")


@dataclass(frozen=True)
class CompressedBatch:
    """Encoded images in one contiguous uint8 buffer: image ``i`` is ``data[offsets[i]:offsets[i+1]]``."""

    data: np.ndarray
    offsets: np.ndarray
    keys: tuple[str, ...] = ()
    parts: tuple[Buffer, ...] = ()
    """The images as separate buffers, for a batch made by :meth:`view` (``data`` is then
    empty); ``()`` for a packed batch."""

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def nbytes(self) -> int:
        """Bytes that cross PCIe for this batch (the compressed payloads only)."""
        return int(self.offsets[-1])

    def item(self, i: int) -> memoryview:
        if self.parts:
            return memoryview(self.parts[i])
        lo, hi = int(self.offsets[i]), int(self.offsets[i + 1])
        return self.data.data[lo:hi]

    def key(self, i: int) -> str | None:
        return self.keys[i] if i < len(self.keys) else None

    @classmethod
    def view(cls, blobs: Sequence[Buffer], keys: Sequence[str] = ()) -> CompressedBatch:
        """The batch over ``blobs`` as they are, with no copy: for a decoder that reads the
        images one by one through :meth:`item` (``packed = False``, as
        :class:`CpuJpegDecoder`), not the contiguous ``data`` a device copy needs."""
        offsets = np.zeros(len(blobs) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in blobs], out=offsets[1:])
        return cls(np.empty(0, dtype=np.uint8), offsets, tuple(keys), tuple(blobs))

    @classmethod
    def pack(
        cls, blobs: Sequence[Buffer], out: np.ndarray | None = None, keys: Sequence[str] = ()
    ) -> CompressedBatch:
        """Copy ``blobs`` back to back into ``out`` (a reusable, e.g. pinned, uint8 buffer).

        A new buffer is allocated when ``out`` is ``None``; a too-small ``out``
        raises :class:`~feedline.errors.ConfigError` (grow the slot).
        """
        sizes = np.fromiter((len(b) for b in blobs), dtype=np.int64, count=len(blobs))
        offsets = np.zeros(len(blobs) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        total = int(offsets[-1])
        if out is None:
            out = np.empty(total, dtype=np.uint8)
        elif out.dtype != np.uint8 or out.ndim != 1 or out.size < total:
            raise ConfigError(f"compressed batch of {total} bytes does not fit a buffer of "
                              f"{out.size} {out.dtype} items", fix="give a larger uint8 buffer")
        for b, lo, hi in zip(blobs, offsets[:-1], offsets[1:], strict=True):
            out[lo:hi] = np.frombuffer(b, dtype=np.uint8)
        return cls(out, offsets, tuple(keys))


def jpeg_shape(data: Buffer, limits: Limits) -> tuple[int, int]:
    """(height, width) from the JPEG header of ``data``, checked against ``limits``; no
    pixel is decoded.

    Raises:
        DecodeError: not a JPEG, or over ``max_bytes`` / ``max_pixels``.
    """
    import simplejpeg

    if len(data) > limits.max_bytes:
        raise DecodeError(f"JPEG of {len(data)} bytes is over max_bytes={limits.max_bytes}")
    try:
        h, w, _, _ = simplejpeg.decode_jpeg_header(data)
    except ValueError as e:
        raise DecodeError(f"not a JPEG: {e}",
                          fix="remove or replace the file, or skip it with on_error='skip'") from e
    if h * w > limits.max_pixels:
        raise DecodeError(f"JPEG of {h}x{w} pixels is over max_pixels={limits.max_pixels}")
    return h, w


def check_headers(batch: CompressedBatch, limits: Limits) -> list[tuple[int, int]]:
    """(height, width) of every image from its header, checked against ``limits`` on the host.

    Raises:
        DecodeError: a payload that is not a JPEG or is over the declared bounds,
            naming the sample key.
    """
    shapes = []
    for i in range(len(batch)):
        try:
            shapes.append(jpeg_shape(batch.item(i), limits))
        except DecodeError as e:
            raise DecodeError(e.message, key=batch.key(i), field="jpg", fix=e.fix) from e.__cause__
    return shapes


def checked_jpeg(data: Buffer, limits: Limits) -> bytes:
    """``data`` as bytes once its JPEG header reads and fits ``limits``
    (:func:`jpeg_shape`): the cheap check the workers run on a JPEG field they keep
    compressed for a decode after delivery, so that an empty, headerless or non-JPEG
    payload is a bad sample in the worker (``on_error`` decides) instead of a failed
    batch after delivery.

    Raises:
        DecodeError: not a JPEG, or over ``max_bytes`` / ``max_pixels``.
    """
    blob = bytes(data)
    jpeg_shape(blob, limits)
    return blob


class JpegBatchDecoder(Protocol):
    """Decode a :class:`CompressedBatch` into HWC uint8 tensors on :attr:`device`.

    A decoder may also say ``packed = False``: it reads the images one by one
    (:meth:`CompressedBatch.item`), so the caller may hand it a
    :meth:`CompressedBatch.view` of the bytes instead of packing them into one buffer
    (a decoder without the attribute gets a packed batch).
    """

    name: str
    device: str

    def decode(
        self, batch: CompressedBatch, *, size: tuple[int, int] | None = None
    ) -> list[torch.Tensor] | torch.Tensor:
        """A list of ``(H, W, 3)`` tensors, or one ``(N, h, w, 3)`` tensor when ``size=(h, w)``."""
        ...


def resize_stack(images: list[torch.Tensor], size: tuple[int, int] | None) -> list[torch.Tensor] | torch.Tensor:
    """Bilinear resize (on the images' device) of HWC uint8 images into one NHWC batch."""
    if size is None:
        return images
    import torch
    import torch.nn.functional as F

    out = []
    for im in images:
        if tuple(im.shape[:2]) == tuple(size):
            out.append(im)
            continue
        chw = im.permute(2, 0, 1).unsqueeze(0).float()
        r = F.interpolate(chw, size=size, mode="bilinear", align_corners=False, antialias=True)
        out.append(r.round_().clamp_(0, 255).to(torch.uint8)[0].permute(1, 2, 0))
    return torch.stack(out)


class CpuJpegDecoder:
    """simplejpeg on the host: the CPU path of the interface (what CI tests).

    Each header is parsed once (:func:`check_headers`, which also checks the limits);
    each image gets its own array. (Decoding a batch into the rows of one
    ``(N, H, W, 3)`` array was tried: that array is allocated per batch, since the
    user keeps the images, and past glibc's largest mmap threshold, 32 MiB, e.g. 64
    images of 500x375, every batch faulted in fresh pages: 244 us of system time per
    sample instead of 62-73, for no gain on 256x256 images.)

    ``threads > 1`` splits a batch into ``threads`` contiguous runs of images (not one
    task per image: fewer hand-offs): the calling thread decodes the first, a pool of
    ``threads - 1`` (created on first use) the others; simplejpeg releases the GIL.
    """

    name = "simplejpeg"
    device = "cpu"
    packed = False  # reads batch.item(i): a view of the workers' bytes will do

    def __init__(self, limits: Limits | None = None, threads: int = 1) -> None:
        self.limits = limits or Limits()
        self.threads = max(1, int(threads))
        self._pool: ThreadPoolExecutor | None = None

    def _run(self, batch: CompressedBatch, shapes: list[tuple[int, int]], lo: int, hi: int
             ) -> list[np.ndarray]:
        """Images ``lo:hi`` decoded, each named on failure."""
        out = []
        for i in range(lo, hi):
            try:
                out.append(decode_jpeg(batch.item(i), self.limits, header=shapes[i]))
            except DecodeError as e:
                raise DecodeError(e.message, key=batch.key(i), field="jpg") from e
        return out

    def decode(self, batch: CompressedBatch, *, size: tuple[int, int] | None = None) -> Any:
        import torch

        shapes = check_headers(batch, self.limits)
        n = len(batch)
        parts = min(self.threads, n)
        if parts > 1:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.threads - 1, thread_name_prefix="feedline-jpeg")
            bounds = [n * k // parts for k in range(parts + 1)]
            rest = [self._pool.submit(self._run, batch, shapes, bounds[k], bounds[k + 1])
                    for k in range(1, parts)]
            try:  # the first run on this thread: one hand-off fewer per batch
                arrays = self._run(batch, shapes, 0, bounds[1])
            except BaseException:
                for future in rest:  # the runs not started yet are not needed
                    future.cancel()
                raise
            for future in rest:
                arrays += future.result()
        else:
            arrays = self._run(batch, shapes, 0, n)
        return resize_stack([torch.from_numpy(a) for a in arrays], size)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_pool": None}


def _require(module: str, what: str, fix: str) -> None:
    """ConfigError (with the package to install) when ``module`` is not installed."""
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that is missing or broken
        found = False
    if not found:
        raise ConfigError(f"{what} needs {module}, which is not installed", field="decode_on", fix=fix)


def _require_cuda(device: str, what: str) -> None:
    """DeviceError when ``device`` is a CUDA device and CUDA is not available (or has no such index)."""
    import torch

    dev = torch.device(device)
    if dev.type != "cuda":
        return
    if not torch.cuda.is_available():
        raise DeviceError(f"{what} on {device} needs CUDA, which is not available",
                          fix="decode_on='cpu' (or CpuJpegDecoder) on this host")
    if dev.index is not None and dev.index >= torch.cuda.device_count():
        raise DeviceError(f"{what}: {device} does not exist (this host sees "
                          f"{torch.cuda.device_count()} CUDA device(s))",
                          fix="pass device='cuda:N' with N below the device count")


class TorchvisionJpegDecoder:
    """Batched nvJPEG through ``torchvision.io.decode_jpeg(list, device="cuda")``.

    torchvision takes the encoded bytes as host tensors (views of the batch
    buffer), copies them through nvJPEG's own staging and synchronises its
    decode stream before returning, so the batch buffer may be refilled as soon
    as :meth:`decode` returns; the images are ordered before later work on the
    caller's current stream. A batch fails as a whole (torchvision returns no
    partial results): :class:`~feedline.pipeline.device_decode.DeviceDecode`
    then retries image by image.

    Raises:
        DeviceError: at construction, a CUDA ``device`` without CUDA (or no such index).
        ConfigError: at construction, torchvision is not installed.
    """

    name = "torchvision.io.decode_jpeg"

    def __init__(self, device: str = "cuda", limits: Limits | None = None) -> None:
        _require_cuda(str(device), "TorchvisionJpegDecoder")
        _require("torchvision", "TorchvisionJpegDecoder",
                 "pip install torchvision (the build matching torch), or decode_on='cpu'")
        self.device = str(device)
        self.limits = limits or Limits()

    def decode(self, batch: CompressedBatch, *, size: tuple[int, int] | None = None) -> Any:
        import torch
        from torchvision.io import ImageReadMode
        from torchvision.io import decode_jpeg as tv_decode

        check_headers(batch, self.limits)
        host = torch.from_numpy(batch.data)
        parts = [host[int(lo):int(hi)] for lo, hi in zip(batch.offsets[:-1], batch.offsets[1:], strict=True)]
        try:
            chw = tv_decode(parts, mode=ImageReadMode.RGB, device=self.device)
        except RuntimeError as e:
            raise DecodeError(f"GPU JPEG decode failed: {e}", field="jpg",
                              fix="decode_on='cpu' names the bad sample") from e
        return resize_stack([im.permute(1, 2, 0) for im in chw], size)


class NvImageCodecDecoder:
    """nvImageCodec (``pip install nvidia-nvimgcodec-cu12``): hardware JPEG engines where present.

    The batch is decoded on the caller's current CUDA stream (``Decoder.decode(...,
    cuda_stream=...)``), so the images are ordered before later work on that stream.
    """

    name = "nvimgcodec"

    def __init__(self, device: str = "cuda", limits: Limits | None = None) -> None:
        _require_cuda(str(device), "NvImageCodecDecoder")
        _require("nvidia.nvimgcodec", "NvImageCodecDecoder",
                 "pip install nvidia-nvimgcodec-cu12 (cu13 for CUDA 13), or use TorchvisionJpegDecoder")
        self.device = str(device)
        self.limits = limits or Limits()
        import torch
        from nvidia import nvimgcodec

        index = torch.device(device).index
        self._decoder = nvimgcodec.Decoder(
            device_id=torch.cuda.current_device() if index is None else index)

    def decode(self, batch: CompressedBatch, *, size: tuple[int, int] | None = None) -> Any:
        import torch

        check_headers(batch, self.limits)
        blobs = [bytes(batch.item(i)) for i in range(len(batch))]
        # the decode is queued on the caller's current stream (a decode-ahead thread's own
        # stream), so later work on that stream is ordered after it: the keyword is
        # ``cuda_stream`` (a cudaStream_t as an int) in nvImageCodec's Decoder.decode
        stream = torch.cuda.current_stream(torch.device(self.device)).cuda_stream
        images = self._decoder.decode(blobs, cuda_stream=stream)
        out = []
        for i, im in enumerate(images):
            if im is None:
                raise DecodeError("nvImageCodec could not decode the image", key=batch.key(i), field="jpg")
            out.append(torch.as_tensor(im, device=self.device))
        return resize_stack(out, size)


def gpu_decoders_available() -> list[str]:
    """Names of the installed GPU JPEG libraries, best first (no import of the heavy parts)."""
    found = []
    if importlib.util.find_spec("nvidia") is not None and importlib.util.find_spec("nvidia.nvimgcodec") is not None:
        found.append("nvimgcodec")
    if importlib.util.find_spec("torchvision") is not None:
        found.append("torchvision")
    return found


def _cuda_ok(device: str) -> tuple[bool, str]:
    if not device.startswith("cuda"):
        return False, f"the loader's device is {device}"
    import torch

    if not torch.cuda.is_available():
        return False, "CUDA is not available"
    return True, ""


def _gpu_decoder(device: str, limits: Limits | None) -> JpegBatchDecoder:
    libs = gpu_decoders_available()
    if "nvimgcodec" in libs:
        return NvImageCodecDecoder(device, limits)
    return TorchvisionJpegDecoder(device, limits)


def choose_jpeg_decoder(
    decode_on: str,
    device: str,
    *,
    limits: Limits | None = None,
    cpu_decode_s: float | None = None,
    workers: int = 1,
    step_s: float | None = None,
) -> tuple[JpegBatchDecoder, str]:
    """Pick the JPEG decoder for ``decode_on`` and say why.

    ``"auto"`` picks the GPU when CUDA and a GPU library are present **and**
    the measured CPU decode would bind: ``cpu_decode_s`` (CPU seconds to decode
    one batch) divided by ``workers`` exceeds ``step_s`` (the consumer's time
    per batch). Without those measurements it stays on the CPU and says so.

    Raises:
        ConfigError: ``decode_on`` is not one of cpu/gpu/auto, or ``"gpu"`` was
            asked for without CUDA or without a GPU JPEG library (the fix names
            the package to install).
        DeviceError: ``"gpu"`` on a CUDA device index this host does not have.
    """
    if decode_on not in DECODE_ON:
        raise ConfigError(f"decode_on must be one of {DECODE_ON}, got {decode_on!r}", field="decode_on")
    cpu = CpuJpegDecoder(limits)
    if decode_on == "cpu":
        return cpu, "decode_on='cpu'"
    ok, why = _cuda_ok(str(device))
    libs = gpu_decoders_available() if ok else []
    if decode_on == "gpu":
        if not ok:
            raise ConfigError(f"decode_on='gpu' but {why}", field="decode_on",
                              fix="pass device='cuda:N' on a CUDA host, or decode_on='cpu'")
        if not libs:
            raise ConfigError("decode_on='gpu' needs torchvision or nvidia-nvimgcodec-cu12",
                              field="decode_on", fix="pip install torchvision (matching torch) "
                              "or nvidia-nvimgcodec-cu12")
        dec = _gpu_decoder(str(device), limits)
        return dec, f"decode_on='gpu' ({dec.name})"
    if not ok:
        return cpu, f"CPU: {why}"
    if not libs:
        return cpu, "CPU: no GPU JPEG library (pip install nvidia-nvimgcodec-cu12 or torchvision)"
    if cpu_decode_s is None or step_s is None:
        return cpu, "CPU: no measurement of CPU decode vs step time yet"
    per_batch = cpu_decode_s / max(1, workers)
    if per_batch > step_s:
        try:
            dec = _gpu_decoder(str(device), limits)
        except (ConfigError, DeviceError) as e:
            return cpu, f"CPU: CPU decode would bind, but the GPU decoder cannot start: {e.message}"
        return dec, (f"GPU ({dec.name}): CPU decode needs {per_batch * 1e3:.1f} ms per batch on "
                     f"{workers} worker(s), more than the {step_s * 1e3:.1f} ms step")
    return cpu, (f"CPU: decode takes {per_batch * 1e3:.1f} ms per batch on {workers} worker(s), "
                 f"within the {step_s * 1e3:.1f} ms step")


__all__ = [
    "DECODE_ON",
    "CompressedBatch",
    "CpuJpegDecoder",
    "JpegBatchDecoder",
    "NvImageCodecDecoder",
    "TorchvisionJpegDecoder",
    "check_headers",
    "checked_jpeg",
    "choose_jpeg_decoder",
    "gpu_decoders_available",
    "resize_stack",
]
