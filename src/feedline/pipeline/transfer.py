"""Transfer engines: move a filled batch from host memory to the device.

Both engines have the same interface:

* ``send(tree)`` (producer side): start moving every tensor leaf of ``tree``
  to the device; returns ``(device_tree, fence)``. The fence completes when
  the copy has finished reading host memory (slots wait on it before reuse).
* ``send_timed(tree)``: ``send`` plus the copy's device timing events (CUDA
  events on the copy stream; None on CPU), used when a span sink listens.
* ``accept(device_tree, fence)`` (consumer thread, just before the batch is
  handed to the user): order the user's work after the copy.

:class:`CudaEngine` issues copies with ``non_blocking=True`` on its own
``torch.cuda.Stream`` and records a ``torch.cuda.Event`` after them;
``accept`` makes the consumer's *current* stream wait on that event
(``stream.wait_event``: a device-side wait, the host never blocks) and calls
``record_stream`` on each device tensor so the caching allocator does not reuse
its memory while the consumer stream may still read it. Host source tensors
must be pinned for the copy to be asynchronous.

:class:`CpuEngine` hands the slot's tensors to the user without a copy: CPU
slots are lent to the user and come back to the pool only once every tensor of
the batch (and every view of one) has been freed, so the user owns the batch
for as long as it is held; its fence is ``None``.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from feedline.errors import ConfigError, DeviceError
from feedline.pipeline import nested
from feedline.pipeline.slots import Fence


class CpuEngine:
    """The engine for ``device="cpu"``: no copy, no fence.

    Its slots are not reused while lent (``reuse_slots = False``): the user owns the
    batch's memory until every tensor of it is freed, so nothing can overwrite it.
    """

    needs_pinned = False
    reuse_slots = False

    def __init__(self) -> None:
        self.device = torch.device("cpu")

    def send(self, tree: Any) -> tuple[Any, Fence | None]:
        return tree, None

    def send_timed(self, tree: Any) -> tuple[Any, Fence | None, Any]:
        """:meth:`send`, plus the copy's device timing events (None: no copy on CPU)."""
        return tree, None, None

    def accept(self, tree: Any, fence: Fence | None) -> Any:
        return tree


class CudaEngine:
    """The engine for CUDA devices: copy stream + event + ``record_stream``.

    Args:
        device: a CUDA device (``torch.device("cuda:0")``).
    """

    needs_pinned = True
    reuse_slots = True

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.stream = torch.cuda.Stream(device=device)

    def send(self, tree: Any) -> tuple[Any, Fence | None]:
        with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
            moved = nested.move(tree, self.device, non_blocking=True)
            event = torch.cuda.Event()
            event.record(self.stream)
        return moved, event

    def send_timed(self, tree: Any) -> tuple[Any, Fence | None, Any]:
        """:meth:`send` with timing events around the copies on the copy stream.

        Returns ``(device_tree, fence, (start, end))``: ``start.elapsed_time(end)``
        is the copy's device time once ``end`` (also the fence) has completed.
        """
        with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
            start = torch.cuda.Event(enable_timing=True)
            start.record(self.stream)
            moved = nested.move(tree, self.device, non_blocking=True)
            event = torch.cuda.Event(enable_timing=True)
            event.record(self.stream)
        return moved, event, (start, event)

    def accept(self, tree: Any, fence: Fence | None) -> Any:
        consumer = torch.cuda.current_stream(self.device)
        if fence is not None:
            consumer.wait_event(fence)  # type: ignore[arg-type]
        for t in nested.tensors(tree):
            if t.device.type == "cuda":
                t.record_stream(consumer)
        return tree


Engine = CpuEngine | CudaEngine


def make_engine(device: str | torch.device) -> Engine:
    """The engine for ``device`` (``"cuda"`` means the current CUDA device, resolved once
    here; pass ``"cuda:N"`` to be explicit).

    Raises:
        ConfigError: ``device`` is not a device string (a ``ValueError``).
        DeviceError: a CUDA device was asked for and CUDA is not available, or its
            index is not one this host has.
    """
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError, OverflowError) as exc:
        raise ConfigError(f"device: cannot parse {device!r} as a torch device", field="device",
                          fix='pass "cpu" or "cuda:N"') from exc
    if dev.type == "cpu":
        return CpuEngine()
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(
                f"device={device!r} needs CUDA, which is not available",
                fix='install a CUDA build of torch on a GPU host, or pass device="cpu"',
            )
        if dev.index is None:  # "cuda": the current device, fixed now for this loader
            dev = torch.device("cuda", torch.cuda.current_device())
        count = torch.cuda.device_count()
        if dev.index >= count:  # torch's own error is a raw "invalid device ordinal" later
            raise DeviceError(f"device={device!r} does not exist: this host sees {count} CUDA "
                              f"device(s) (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r})",
                              fix=f"pass a device from cuda:0 to cuda:{count - 1}")
        return CudaEngine(dev)
    raise ConfigError(f"device={device!r}: only cpu and cuda devices are supported", field="device",
                      fix='pass "cpu" or "cuda:N"')
