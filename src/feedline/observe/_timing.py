"""Step clocks: host clocks on CPU, CUDA events on a GPU (resolved lazily).

A *device timer* times the loop body of each step on the device that runs it.
On CPU the work is synchronous, so host clocks are the truth. On CUDA the work
is asynchronous: :class:`CudaTimer` records a timing event on the current
stream at each step boundary and reads the elapsed time only once the later
event has completed (``Event.query()``), so it never synchronises the stream
during the run; :meth:`CudaTimer.finish` waits once at the end.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any, Protocol


class DeviceTimer(Protocol):
    """Times intervals on one device; ``finish`` returns them in order (seconds)."""

    def start(self) -> Any: ...

    def stop(self, token: Any) -> None: ...

    def finish(self) -> list[float]: ...

    def snapshot(self) -> list[float]: ...


class HostTimer:
    """CPU device: the body runs synchronously, so host clocks measure it."""

    def __init__(self) -> None:
        self._done: list[float] = []

    def start(self) -> float:
        return time.perf_counter()

    def stop(self, token: Any) -> None:
        self._done.append(time.perf_counter() - float(token))

    def finish(self) -> list[float]:
        return list(self._done)

    def snapshot(self) -> list[float]:
        """Durations measured so far."""
        return list(self._done)


class CudaTimer:
    """CUDA device: timing events on the current stream, polled, never synchronised per step.

    Args:
        device: the CUDA device whose current stream carries the step's work.
        max_pending: events older than this many steps are resolved with a
            blocking wait (bounds memory if the device falls far behind).

    Raises:
        DeviceError: CUDA is not available.
    """

    def __init__(self, device: Any, max_pending: int = 64) -> None:
        import torch

        from feedline.errors import DeviceError

        if not torch.cuda.is_available():
            raise DeviceError(
                "CUDA timing requested but CUDA is not available",
                stage="step",
                fix="pass device='cpu' or run on a machine with a CUDA GPU",
            )
        self._torch = torch
        self._device = torch.device(device)
        self._pending: deque[tuple[int, Any, Any]] = deque()
        self._done: dict[int, float] = {}
        self._next = 0
        self._max_pending = max_pending

    def _event(self) -> Any:
        ev = self._torch.cuda.Event(enable_timing=True)
        ev.record(self._torch.cuda.current_stream(self._device))
        return ev

    def start(self) -> Any:
        return self._event()

    def stop(self, token: Any) -> None:
        self._pending.append((self._next, token, self._event()))
        self._next += 1
        self._poll()

    def _poll(self) -> None:
        while self._pending:
            idx, start, end = self._pending[0]
            if not end.query():
                if len(self._pending) <= self._max_pending:
                    return
                end.synchronize()
            self._pending.popleft()
            self._done[idx] = start.elapsed_time(end) / 1000.0

    def snapshot(self) -> list[float]:
        """Durations already resolved, in order, without waiting (a prefix of all steps)."""
        self._poll()
        out: list[float] = []
        while len(out) in self._done:
            out.append(self._done[len(out)])
        return out

    def finish(self) -> list[float]:
        for _, _, end in self._pending:
            end.synchronize()
        self._max_pending = 0
        self._poll()
        return [self._done[i] for i in sorted(self._done)]


def make_timer(device: Any) -> DeviceTimer:
    """A :class:`CudaTimer` for a CUDA device, else a :class:`HostTimer`."""
    if device_type(device) == "cuda":
        return CudaTimer(device)
    return HostTimer()


def device_type(device: Any) -> str:
    """``"cuda"`` / ``"cpu"`` / ... for a string, int (CUDA ordinal) or torch.device.

    Raises:
        TypeError: ``device`` is none of those.
    """
    if isinstance(device, bool):
        raise TypeError(f"device must be a str, int or torch.device, got {device!r}")
    if isinstance(device, int):
        return "cuda"
    if isinstance(device, str):
        return device.split(":", 1)[0].strip().lower()
    kind = getattr(device, "type", None)
    if isinstance(kind, str):
        return kind
    raise TypeError(f"device must be a str, int or torch.device, got {device!r}")
