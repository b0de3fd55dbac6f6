"""GPUDirect Storage through KvikIO: file bytes straight into device memory.

Optional: ``pip install 'feedline[gds]'`` (kvikio, CUDA 12) or ``'feedline[gds-cu13]'``. Nothing here is imported
until a ``gds`` reader is made or :func:`gds_status` is asked. Device buffers
are ``torch.uint8`` CUDA tensors (KvikIO takes any ``__cuda_array_interface__``
object); they come from torch's caching allocator, which already recycles
device memory and never reuses a block a live tensor view still points at.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from feedline.errors import AlignmentError, DeviceError, ReadError
from feedline.io._buffers import PAGE

_KVIKIO_FIX = ("pip install 'feedline[gds]' (kvikio for CUDA 12) or 'feedline[gds-cu13]' (CUDA 13) "
               "on a machine with CUDA")


def _import_kvikio() -> Any:
    """The kvikio module.

    Raises:
        DeviceError: kvikio is missing, or its native libraries do not load
            (``import kvikio`` loads libkvikio and libcufile, which fail with
            ``OSError`` or cuda-pathfinder's errors, not ``ImportError``).
    """
    try:
        import kvikio
        import kvikio.defaults
    except ImportError as e:
        raise DeviceError(f"io='gds' needs kvikio, which is not importable ({e})", fix=_KVIKIO_FIX) from e
    except Exception as e:  # a wheel for another CUDA, a missing libcufile...
        raise DeviceError(
            f"io='gds': kvikio is installed but does not load ({type(e).__name__}: {e})",
            fix="install the kvikio wheel for this machine's CUDA major version "
                "(kvikio-cu12 or kvikio-cu13) with its libcufile, or use io='auto'") from e
    return kvikio


def _import_torch_cuda() -> Any:
    try:
        import torch
    except ImportError as e:
        raise DeviceError(f"io='gds' needs torch for device buffers ({e})", fix="pip install torch") from e
    if not torch.cuda.is_available():
        raise DeviceError("io='gds' needs a CUDA device and none is available", fix="use io='auto' or 'buffered' on this host")
    return torch


def _compat_mode_on(kvikio: Any) -> tuple[bool, str]:
    """Whether KvikIO runs in compatibility mode (POSIX reads, no cuFile), and how we know."""
    defaults = kvikio.defaults
    preferred = getattr(defaults, "is_compat_mode_preferred", None)
    if callable(preferred):
        on = bool(preferred())
        return on, f"kvikio.defaults.is_compat_mode_preferred() is {on}"
    getter = getattr(defaults, "get", None)
    mode = getter("compat_mode") if callable(getter) else defaults.compat_mode()
    name = getattr(mode, "name", None)
    if name is None:  # older kvikio: a bool
        return bool(mode), f"kvikio.defaults.compat_mode() is {bool(mode)}"
    if name == "OFF":
        return False, "KvikIO compat mode is OFF"
    return True, f"KvikIO compat mode is {name} (cuFile may not be engaged)"


def _gds_driver_available(kvikio: Any) -> bool | None:
    """cuFile's own answer to "is GPUDirect Storage available" (the nvidia-fs driver), or
    ``None`` when this kvikio cannot say. Without it cuFile still opens files, in its own
    compatibility mode (POSIX reads through a bounce buffer), so KvikIO's compat mode being
    off does not mean GDS is used."""
    try:
        drv = getattr(kvikio, "cufile_driver", None)
        if drv is None:
            drv = importlib.import_module(f"{kvikio.__name__}.cufile_driver")
        return bool(drv.get("is_gds_available"))
    except Exception:
        return None


def gds_status() -> tuple[bool, str]:
    """``(engaged, reason)``: is GPUDirect Storage really used for reads here?

    Engaged means kvikio imports (native libraries included), CUDA is
    available, KvikIO's compatibility mode is off and cuFile does not say that
    GDS is unavailable (so reads go through cuFile with the nvidia-fs driver,
    not a POSIX bounce buffer). Never raises; the reason says what is missing.
    """
    try:
        kvikio = _import_kvikio()
    except DeviceError as e:
        return False, e.message
    try:
        _import_torch_cuda()
    except DeviceError as e:
        return False, e.message
    try:
        on, how = _compat_mode_on(kvikio)
    except Exception as e:  # a kvikio API we do not know: say so rather than guess
        return False, f"cannot read KvikIO's compat mode ({type(e).__name__}: {e})"
    if on:
        return False, f"GDS not engaged: {how}"
    if _gds_driver_available(kvikio) is False:
        return False, (f"GDS not engaged: {how}, but cuFile says GPUDirect Storage is not available "
                       "(no nvidia-fs driver), so cuFile reads through its own bounce buffer")
    return True, f"GDS engaged: {how}"


class GdsReader:
    """KvikIO ``CuFile.pread`` into 4096-aligned device buffers (torch CUDA tensors).

    The aligned body of every read is checked with the GDS rule (file offset,
    device address, size multiples of 4096); a final partial block at end of
    file is read separately with its exact size, so nothing is read past EOF.

    ``device="cuda"`` (no index) is the current device when the reader is made,
    fixed then: reads run in worker threads, and a thread's current CUDA device
    is its own (0 in a new thread), so resolving it at allocation put every
    read of a process that had called ``torch.cuda.set_device(1)`` on GPU 0.

    Raises:
        DeviceError: at construction, when kvikio or CUDA is missing (with the fix).
    """

    name = "gds"
    device = "cuda"
    direct = True

    def __init__(self, device: Any = "cuda") -> None:
        self._kvikio = _import_kvikio()
        self._torch = _import_torch_cuda()
        dev = self._torch.device(device)
        if dev.index is None:
            dev = self._torch.device(dev.type, self._torch.cuda.current_device())
        self.device_obj = dev

    def open(self, path: str) -> tuple[Any, int]:
        """Open and register ``path`` with cuFile; the handle carries the file size."""
        try:
            return self._kvikio.CuFile(path, "r"), os.path.getsize(path)
        except (OSError, RuntimeError) as e:
            raise ReadError(f"kvikio.CuFile cannot open {path}: {e}", path=path) from e

    def allocate(self, nbytes: int) -> Any:
        """A ``uint8`` device tensor of ``nbytes`` whose address is 4096-aligned."""
        raw = self._torch.empty(nbytes + PAGE, dtype=self._torch.uint8, device=self.device_obj)
        pad = (-raw.data_ptr()) % PAGE
        return raw[pad : pad + nbytes]

    def read_into(self, handle: Any, offset: int, buffer: Any) -> int:
        """Read ``buffer.numel()`` bytes at ``offset`` into device memory (fewer at EOF)."""
        from feedline.model.gds import check_alignment

        cufile, file_size = handle
        size = int(buffer.numel())
        length = max(0, min(size, file_size - offset))
        body = length - length % PAGE
        ok, reason = check_alignment(offset, int(buffer.data_ptr()), size, PAGE)
        if not ok:
            raise AlignmentError(reason or "alignment violated", fix="use buffers from GdsReader.allocate")
        try:
            got = cufile.pread(buffer, body, offset).get() if body else 0
            if got == body and length > body:
                tail = buffer[body:length]
                got += cufile.pread(tail, length - body, offset + body).get()
        except (RuntimeError, OSError) as e:  # cuFile errors arrive as RuntimeError
            raise ReadError(f"GDS read of {length} bytes at {offset} failed: {e}") from e
        return int(got)

    def close(self, handle: Any) -> None:
        """Deregister and close a handle from :meth:`open`."""
        handle[0].close()
