"""Decode JPEG fields after delivery, from compressed bytes: ``Loader(decode_on=...)``.

With ``decode_on="gpu"`` (or ``"auto"`` deciding so) the workers do not decode
JPEG fields: they read the compressed bytes (a few percent of the pixels'
size). :class:`DeviceDecode` then packs a batch's images into one contiguous
(pinned) buffer plus offsets and hands it to a
:class:`~feedline.decode.jpeg_batch.JpegBatchDecoder`, which decodes them in
device memory: only compressed bytes cross PCIe. Packing buffers form a small
ring; on CUDA a buffer is refilled only after the event recorded behind the
decode that read it has completed. Any decoder of the same interface fits
(``decode_on=CpuJpegDecoder(threads=4)`` runs the same plumbing on the CPU:
what the CPU tests exercise). A decoder that reads the images one by one
(``packed = False``, as the CPU's does) is handed a view of the workers' bytes
instead (:meth:`~feedline.decode.jpeg_batch.CompressedBatch.view`): no copy.

Decode-ahead: each delivery starts the next batch's decode on one background
thread (its own CUDA stream; the consumer's stream waits on the event recorded
after it), so the training step and the decode overlap: see :class:`DeviceDecode`.
The loader's position still counts delivered batches only, and a decode's error
is raised by the ``next()`` that delivers its batch.

``"auto"`` starts on the compressed plumbing, decodes the first batch once on
one CPU core to measure it, times the consumer's first :data:`AUTO_STEPS` steps
(their batches decoded on the CPU, no decode-ahead, so each is the consumer's
time alone), and then keeps the GPU decoder if the CPU decode would bind (CPU
time per batch / workers > the median step after the first, which carries the
warm-up: CUDA context, cuDNN autotuning, compilation), or decodes on the CPU
otherwise; the choice and the measurements are in ``loader.stats["decode_on"]``. Images a CPU decoder
produced are moved to the loader's device, like every other field of the batch.
A device decoder that fails on every image of a batch the CPU decodes (a
torchvision built without nvJPEG, a device fault) is replaced by the CPU decoder
for good, with the reason in the stats.

Bad JPEGs: the workers check each JPEG field's header (:func:`checked_jpeg`:
cheap, no pixel decoded), so an empty, headerless or non-JPEG payload is an
ordinary bad sample there (``on_error="skip"`` skips and refills it). A file
whose header reads but whose body the device decoder rejects is only found
after delivery, when its batch can no longer be refilled: the batch is then
decoded image by image, the image the device rejects is decoded on the CPU
instead (counted in ``stats["decode_on"]["cpu_fallbacks"]``), and only if the
CPU cannot decode it either is ``DecodeError`` raised, naming its key.

``decode_size`` with ``decode_on="cpu"`` (or ``"auto"`` deciding the CPU up
front) does not come here: the workers decode and resize every image field
into the batch slot rows (:func:`worker_decoders`,
:mod:`feedline.decode.resized`). With a device decoder, the non-JPEG image
fields (PNG...) are still resized in the workers.
"""

from __future__ import annotations

import queue
import statistics
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from functools import partial
from typing import Any

import numpy as np

from feedline import spans
from feedline.decode import Decoders, Limits, extension
from feedline.decode.jpeg_batch import (
    DECODE_ON,
    CompressedBatch,
    CpuJpegDecoder,
    JpegBatchDecoder,
    checked_jpeg,
    choose_jpeg_decoder,
    resize_stack,
)
from feedline.decode.resized import check_size, kept_jpeg, resizable
from feedline.errors import ArgumentError, ConfigError, DecodeError

JPEG_EXTENSIONS = ("jpg", "jpeg")
AUTO_STEPS = 3
"""Consumer steps ``decode_on="auto"`` times before it decides; the first is left out of the
step time it decides on (before: the first step alone, whose warm-up made a slow model's
step look long, so CPU decode looked like it kept up)."""


def jpeg_fields(fields: Sequence[str]) -> list[str]:
    """The dataset's fields that hold JPEGs (by extension, as the CPU decoders pick them)."""
    return [f for f in fields if f.rsplit(".", 1)[-1].lower() in JPEG_EXTENSIONS]


def image_fields(fields: Sequence[str]) -> list[str]:
    """The dataset's image fields that ``decode_size`` resizes (JPEG, PNG...; not masks:
    :func:`feedline.decode.resized.resizable`)."""
    return [f for f in fields if resizable(f)]


class _Ring:
    """Reusable packing buffers; a CUDA event guards each until the decode that read it ran."""

    def __init__(self, pinned: bool, size: int = 3) -> None:
        self.pinned = pinned
        self._bufs: list[Any] = [None] * size
        self._events: list[Any] = [None] * size
        self._i = 0

    def take(self, nbytes: int) -> tuple[int, np.ndarray]:
        i = self._i
        self._i = (i + 1) % len(self._bufs)
        if self._events[i] is not None:
            self._events[i].synchronize()
            self._events[i] = None
        buf = self._bufs[i]
        if buf is None or buf.numel() < nbytes:
            import torch

            from feedline.pinned import pinned_empty

            grown = max(nbytes, 2 * buf.numel() if buf is not None else 0, 1 << 16)
            buf = self._bufs[i] = (pinned_empty((grown,), torch.uint8) if self.pinned
                                   else torch.empty(grown, dtype=torch.uint8))
        return i, buf.numpy()

    def guard(self, i: int, device: Any) -> None:
        """Buffer ``i`` is refilled only after the work queued so far on ``device``'s current
        stream (the decode that read it) has run."""
        if self.pinned:
            import torch

            event = torch.cuda.Event()
            event.record(torch.cuda.current_stream(torch.device(device)))
            self._events[i] = event


class _Decoded:
    """One batch's decode: its JPEG fields' outputs (or its error) once :attr:`done` is set."""

    def __init__(self, job: object) -> None:
        span_attrs = getattr(job, "span_attrs", None)  # batch and pass, as the workers' spans
        self.attrs: dict[str, Any] = span_attrs("decode-ahead") if span_attrs is not None else {}
        self.batch: dict[str, Any] | None = None
        self.queued = False
        self.cancelled = False
        self.done = threading.Event()
        self.out: dict[str, Any] = {}
        self.error: BaseException | None = None
        self.event: Any = None  # CUDA: recorded on the decode stream after decode and resize
        self.compressed = 0
        self.decoded = 0


class DeviceDecode:
    """The after-delivery stage: JPEG fields as lists of compressed bytes -> decoded tensors.

    Decode-ahead: when the loader delivers batch N it calls :meth:`ahead` with batch N+1's
    future; once the workers have it, one background thread decodes it (on CUDA on its own
    stream of the loader's device, an event recorded after the decode and any resize), while
    the consumer computes on batch N (after a pass's last batch: the next pass's first, as
    the workers prepared it ahead). At N+1's delivery the consumer's current stream waits on
    that event (a device-side wait) and each output is ``record_stream``-ed to it, as
    :mod:`~feedline.pipeline.transfer` does for the copies; an error of N+1's decode is raised
    there, at the batch it belongs to. A batch without a decode ahead (the first of a pass,
    ``in_order=False``, ``auto`` deciding) is decoded the same way on the consumer's thread.
    One decode runs at a time (a lock), so the ring and the decoder are never shared.
    """

    name = "device_decode"

    def __init__(self, fields: Sequence[str], decoder: JpegBatchDecoder | None, reason: str, *,
                 device: str, workers: int, size: tuple[int, int] | None = None,
                 limits: Limits | None = None) -> None:
        """``decoder=None``: ``auto``, decided from the first batches (see the module doc)."""
        self.fields = list(fields)
        self.decoder = decoder
        self.reason = reason
        self.size = size
        self.device = device
        self.workers = workers
        self.limits = limits or Limits()
        self._ring = _Ring(pinned=str(device).startswith("cuda"))
        self.compressed_bytes = 0
        self.decoded_bytes = 0
        self.batches = 0
        self.decode_ahead = True
        """Whether :meth:`ahead` starts the next batch's decode (False: each batch decodes
        inside the ``next()`` that delivers it, as a benchmark's baseline)."""
        self.ahead_batches = 0
        """Batches whose decode had been started ahead, during the consumer's previous step."""
        self._cpu_s: float | None = None
        self._returned_at: float | None = None
        self._pending = False  # auto: first batch measured, the decision comes after AUTO_STEPS steps
        self._steps: list[float] = []  # auto: the consumer's step times while pending
        self._step_s: float | None = None  # auto: the step time it decided on
        self.cpu_fallbacks: list[str] = []
        self.owner: int | None = None
        """The loader's ``id()``: the decode-ahead thread files its spans under it."""
        self._init_threads()

    def _init_threads(self) -> None:
        self._lock = threading.RLock()  # close() may run from a finalizer on any thread
        self._decoding = threading.Lock()  # one decode at a time: the ring and decoder
        self._next: tuple[object, _Decoded] | None = None  # the batch decoding ahead, by job
        self._queue: queue.SimpleQueue[_Decoded | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._stream: Any = None
        self._closed = False

    def __getstate__(self) -> dict[str, Any]:
        skip = ("_lock", "_decoding", "_next", "_queue", "_thread", "_stream", "_closed")
        return {k: v for k, v in self.__dict__.items() if k not in skip}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_threads()

    # -- the consumer's side ------------------------------------------------------------
    def __call__(self, batch: Any, job: object = None) -> Any:
        """``batch`` with its JPEG fields decoded: the decode started ahead for ``job`` (the
        key given to :meth:`ahead`), else one run now.

        Raises:
            DecodeError: an image neither the decoder nor the CPU could decode (its key named).
        """
        if not isinstance(batch, dict):
            return batch
        if self.decoder is None:
            self._decide(batch)
        with self._lock:
            nxt, self._next = self._next, None
        entry = nxt[1] if nxt is not None and nxt[0] is job and job is not None else None
        if nxt is not None and entry is None:
            nxt[1].cancelled = True  # a pass given up: its next batch is not this one
        if entry is None:
            entry = _Decoded(job)
            entry.batch, entry.queued = batch, True
            self._run(entry)
        elif not self._start(entry, batch):  # the loader closed under it: decode it here
            self._run(entry)
        else:
            self.ahead_batches += 1
        entry.done.wait()
        return self._apply(batch, entry)

    def _apply(self, batch: dict[str, Any], entry: _Decoded) -> dict[str, Any]:
        if entry.error is not None:
            raise entry.error
        if entry.event is not None:
            import torch

            from feedline.pipeline import nested

            consumer = torch.cuda.current_stream(torch.device(self.device))
            consumer.wait_event(entry.event)
            for t in nested.tensors(entry.out):
                if t.device.type == "cuda":
                    t.record_stream(consumer)
        batch.update(entry.out)
        self.compressed_bytes += entry.compressed
        self.decoded_bytes += entry.decoded
        self.batches += 1
        self._returned_at = time.perf_counter()
        return batch

    def ahead(self, job: object, future: Future[Any]) -> None:
        """Start decoding ``job``'s batch on the decode-ahead thread once ``future`` (the
        workers' result, whose ``tree`` is the batch) is done. Not while ``auto`` measures:
        its step time must be the consumer's alone."""
        if not self.decode_ahead or self.decoder is None or self._pending or self._closed:
            return
        entry = _Decoded(job)
        with self._lock:
            old, self._next = self._next, (job, entry)
        if old is not None:
            old[1].cancelled = True
        future.add_done_callback(partial(self._arrived, entry))

    def discard(self) -> None:
        """Forget the batch decoding ahead (its pass was given up)."""
        with self._lock:
            old, self._next = self._next, None
        if old is not None:
            old[1].cancelled = True

    def close(self) -> None:
        """Stop the decode-ahead thread (after the decode it is running); a decode still
        queued fails with a ``ConfigError`` in whoever waits for it. Idempotent."""
        with self._lock:
            self._closed = True
            thread, self._thread = self._thread, None
            self._queue.put(None)
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        while True:
            try:
                entry = self._queue.get_nowait()
            except queue.Empty:
                break
            if entry is not None and not entry.done.is_set():
                entry.error = ConfigError("the loader was closed while this batch was decoding",
                                          field="decode_on", fix="iterate before close()")
                entry.done.set()

    # -- the decode-ahead thread --------------------------------------------------------
    def _arrived(self, entry: _Decoded, future: Future[Any]) -> None:
        """The workers' result is in (any thread): queue its decode unless it failed (the
        consumer raises that error when it takes the batch) or nobody wants it any more."""
        if future.cancelled() or future.exception() is not None or entry.cancelled:
            return
        tree = getattr(future.result(), "tree", None)
        if isinstance(tree, dict):
            self._start(entry, tree)

    def _start(self, entry: _Decoded, batch: dict[str, Any]) -> bool:
        """Queue ``entry``'s decode on the thread (once); False when the stage is closed."""
        with self._lock:
            if entry.queued:
                return True
            if self._closed:
                return False
            entry.batch, entry.queued = batch, True
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="feedline-decode-ahead",
                                                daemon=True)
                self._thread.start()
            self._queue.put(entry)
        return True

    def _work(self) -> None:
        spans.bind(self.owner)
        while True:
            entry = self._queue.get()
            if entry is None:
                return
            if entry.cancelled:
                entry.done.set()
                continue
            self._run(entry)

    def _run(self, entry: _Decoded) -> None:
        """Decode ``entry``'s JPEG fields (on the decode stream on CUDA); its error kept for
        the consumer; a ``decode`` span with the thread's CPU time."""
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            with self._decoding:
                if self._ring.pinned:
                    import torch

                    dev = torch.device(self.device)
                    if self._stream is None:
                        self._stream = torch.cuda.Stream(device=dev)
                    with torch.cuda.device(dev), torch.cuda.stream(self._stream):
                        self._decode_fields(entry)
                        entry.event = torch.cuda.Event()
                        entry.event.record(self._stream)
                else:
                    self._decode_fields(entry)
        except BaseException as exc:  # raised in the consumer, at this batch
            entry.error = exc
        finally:
            entry.batch = None
            entry.done.set()
        if spans.active():
            spans.emit("decode", t0, time.perf_counter(), **entry.attrs,
                       cpu=time.thread_time() - c0, after_delivery=True)

    def _decode_fields(self, entry: _Decoded) -> None:
        batch = entry.batch
        assert batch is not None
        keys = batch.get("__key__")
        for f in self.fields:
            blobs = batch.get(f)
            if not isinstance(blobs, list):
                continue
            present = [k for k, b in enumerate(blobs) if b is not None]  # an optional field
            if not present:
                continue
            names = keys if isinstance(keys, list) else []
            if len(present) < len(blobs):
                blobs, names = [blobs[k] for k in present], [names[k] for k in present if k < len(names)]
            if getattr(self.decoder, "packed", True):
                i, buf = self._ring.take(sum(len(b) for b in blobs))
                packed = CompressedBatch.pack(blobs, out=buf, keys=names)
                out = self._to_loader_device(self._decode(packed, f))
                self._ring.guard(i, self.device)
            else:  # a decoder reading image by image (the CPU's): the workers' bytes, no copy
                packed = CompressedBatch.view(blobs, keys=names)
                out = self._to_loader_device(self._decode(packed, f))
            if len(present) < len(batch[f]):  # the samples without the field keep None
                images: list[Any] = [None] * len(batch[f])
                for k, image in zip(present, out, strict=True):
                    images[k] = image
                out = images
            entry.out[f] = out
            entry.compressed += packed.nbytes
            entry.decoded += sum(int(t.numel()) for t in (out if isinstance(out, list) else [out])
                                 if t is not None)

    def _to_loader_device(self, out: Any) -> Any:
        """Images a CPU decoder produced (``auto`` deciding the CPU, or after a switch to it)
        moved to the loader's device, like every other field of the batch."""
        import torch

        dev = torch.device(self.device)
        if dev.type == "cpu" or self.decoder is None or self.decoder.device != "cpu":
            return out
        if isinstance(out, list):
            return [t.to(dev) for t in out]
        return out.to(dev)

    def _decode(self, packed: CompressedBatch, field: str) -> Any:
        """The batch on the decoder; when it fails, image by image with a CPU fallback.

        When the device decoder fails on every image of a batch (of two or more) that the
        CPU decodes, the fault is the decoder, not the data (a torchvision without nvJPEG,
        a device error): the stage switches to the CPU decoder for good and says why in
        :meth:`report`, instead of failing every image on the device first.
        """
        assert self.decoder is not None
        try:
            return self.decoder.decode(packed, size=self.size)
        except Exception as exc:
            first = exc
        before = len(self.cpu_fallbacks)
        images = [self._one(packed, k, field, first) for k in range(len(packed))]
        if len(packed) >= 2 and len(self.cpu_fallbacks) - before == len(packed):
            self.reason = (f"CPU: the {self.decoder.name} decoder failed on every image of a batch "
                           f"that the CPU decodes ({type(first).__name__}: {first}); decoding on "
                           f"the CPU from then on")
            self.decoder = CpuJpegDecoder(self.limits, threads=self.workers)
        if self.size is None:
            return images
        return resize_stack(images, self.size)

    def _one(self, packed: CompressedBatch, k: int, field: str, batch_error: BaseException) -> Any:
        """Image ``k`` alone on the decoder, else on the CPU (moved to the decoder's device).

        Raises:
            DecodeError: neither could decode it (naming its key).
        """
        assert self.decoder is not None
        one = CompressedBatch.pack([packed.item(k)], keys=[packed.key(k) or ""])
        try:
            return self.decoder.decode(one)[0]
        except Exception as exc:
            device_error = exc
        try:
            image = CpuJpegDecoder(self.limits).decode(one)[0]
        except DecodeError as exc:
            raise DecodeError(
                f"JPEG undecodable after delivery: the {self.decoder.name} decoder said "
                f"{device_error}; the CPU fallback said {exc.message}",
                key=packed.key(k), field=field,
                fix="repair or remove the file (decoded after delivery, the batch cannot "
                    "be refilled, so on_error='skip' cannot skip it); decode_on='cpu' "
                    "skips it in the workers") from batch_error
        self.cpu_fallbacks.append(packed.key(k) or f"#{k}")
        return image.to(self.decoder.device) if self.decoder.device != "cpu" else image

    def _decide(self, batch: dict[str, Any]) -> None:
        """``auto``: time one CPU decode of the first batch (one core); decide at the next step."""
        blobs = [b for f in self.fields if isinstance(batch.get(f), list) for b in batch[f]]
        t0 = time.thread_time()
        try:
            CpuJpegDecoder(self.limits).decode(CompressedBatch.pack(blobs))
        except DecodeError:
            pass  # a damaged image: the decode proper falls back or names it (_one)
        self._cpu_s = time.thread_time() - t0
        self.decoder = CpuJpegDecoder(self.limits, threads=self.workers)
        self.reason = f"auto: deciding (measured the first batch's CPU decode; timing {AUTO_STEPS} steps)"
        self._pending = True

    def before_next(self) -> None:
        """Called at each ``next()``: with ``auto``, times the consumer's step; the one that
        completes :data:`AUTO_STEPS` steps decides."""
        if self._pending and self._returned_at is not None:
            self._steps.append(time.perf_counter() - self._returned_at)
            self._returned_at = None  # a step is timed once, even if next() is called again before a batch
            if len(self._steps) < AUTO_STEPS:
                return
            step_s = self._step_s = statistics.median(self._steps[1:])
            self._pending = False
            self.decoder, self.reason = choose_jpeg_decoder(
                "auto", self.device, limits=self.limits, cpu_decode_s=self._cpu_s,
                workers=self.workers, step_s=step_s)
            if self.decoder.device == "cpu":
                self.decoder = CpuJpegDecoder(self.limits, threads=self.workers)

    def report(self) -> dict[str, Any]:
        dec = self.decoder
        return {"fields": self.fields, "decoder": dec.name if dec else None,
                "device": dec.device if dec else None, "reason": self.reason,
                "batches": self.batches, "decoded_ahead": self.ahead_batches,
                "compressed_bytes": self.compressed_bytes,
                "decoded_bytes": self.decoded_bytes,
                "cpu_decode_s_first_batch": self._cpu_s,
                "auto_steps_s": [round(x, 6) for x in self._steps], "auto_step_s": self._step_s,
                "cpu_fallbacks": len(self.cpu_fallbacks),
                "cpu_fallback_keys": self.cpu_fallbacks[-100:]}


def make_device_decode(decode_on: Any, fields: Sequence[str], *, device: str, workers: int,
                       size: tuple[int, int] | None, limits: Limits | None
                       ) -> tuple[DeviceDecode | None, str]:
    """The stage for ``decode_on`` (``None`` when JPEGs decode in the workers) and why.

    Raises:
        ConfigError: ``decode_on="gpu"`` without CUDA or a GPU JPEG library, a bad value,
            or ``decode_size`` for a dataset with no image field.
        ValueError: ``size`` is not two positive integers.
    """
    jpegs = jpeg_fields(fields)
    size = None if size is None else check_size(size)
    if not isinstance(decode_on, str) and not (hasattr(decode_on, "name") and hasattr(decode_on, "device")):
        raise ArgumentError(f"decode_on must be one of {DECODE_ON} or a JpegBatchDecoder, got {decode_on!r}",
                            field="decode_on")
    if isinstance(decode_on, str) and decode_on not in DECODE_ON:
        raise ConfigError(f"decode_on must be one of {DECODE_ON} or a JpegBatchDecoder, "
                          f"got {decode_on!r}", field="decode_on")
    if size is not None and not image_fields(fields):
        what = (f"this dataset has none (its fields: {', '.join(fields)})" if fields else
                "this dataset has no named fields (a map-style dataset decodes its own samples)")
        raise ConfigError(f"decode_size resizes the image fields (JPEG, PNG...) of a packed "
                          f"dataset, and {what}", field="decode_size",
                          fix="resize in transform= (feedline.vision.resize), or drop decode_size")
    in_workers = "in the workers" + (f", decoded and resized to decode_size={size}"
                                     if size is not None else "")
    if not jpegs:
        return None, f"no JPEG fields; {in_workers}"
    if not isinstance(decode_on, str):  # a JpegBatchDecoder, used as given
        why = f"decoder given: {decode_on.name} on {decode_on.device}"
        return DeviceDecode(jpegs, decode_on, why, device=device, workers=workers, size=size,
                            limits=limits), why
    if decode_on == "cpu":
        return None, f"{in_workers} (decode_on='cpu')"
    dec: JpegBatchDecoder | None
    dec, why = choose_jpeg_decoder(decode_on, device, limits=limits)
    if decode_on == "auto":
        if dec.device == "cpu" and "no measurement" not in why:
            return None, f"{in_workers} ({why})"
        dec, why = None, "auto: deciding from the first batches"
    return DeviceDecode(jpegs, dec, why, device=device, workers=workers, size=size,
                        limits=limits), why


def worker_decoders(decoders: Decoders, stage: DeviceDecode | None,
                    size: tuple[int, int] | None) -> Decoders:
    """The decoders the workers run: with ``stage`` (a decode after delivery) its JPEG
    fields stay compressed, header-checked (:func:`checked_jpeg`); with ``size`` every
    other image field is decoded and resized to it (:mod:`feedline.decode.resized`)."""
    if stage is not None:
        check = partial(checked_jpeg, limits=decoders.limits)
        decoders = decoders.replace(
            overrides={**dict(decoders.overrides), **dict.fromkeys(stage.fields, check)})
    return decoders if size is None else decoders.replace(size=size)


def kept_for_transform(decoders: Decoders, transform: Any, fields: Sequence[str] | None,
                       stage: DeviceDecode | None) -> Decoders:
    """The decoders the workers run before a ``transform`` that decodes JPEG fields itself
    (its ``encoded_fields``, as :class:`feedline.vision.ImageTransform` has, which decodes
    a crop at a reduced DCT scale): those fields of a packed dataset are handed over as
    their checked bytes (:func:`~feedline.decode.resized.kept_jpeg`) unless ``decode=``
    names them, ``decode_size`` resizes them or a device decodes them after delivery."""
    wanted = getattr(transform, "encoded_fields", ())
    if stage is not None or decoders.size is not None or not fields or not isinstance(wanted, tuple):
        return decoders
    keep = [f for f in wanted if isinstance(f, str) and f in fields and extension(f) in JPEG_EXTENSIONS
            and f not in decoders.overrides and extension(f) not in decoders.overrides]
    if not keep:
        return decoders
    kept = partial(kept_jpeg, limits=decoders.limits)
    return decoders.replace(overrides={**dict(decoders.overrides), **dict.fromkeys(keep, kept)})


__all__ = ["DeviceDecode", "image_fields", "jpeg_fields", "kept_for_transform", "make_device_decode",
           "worker_decoders"]
