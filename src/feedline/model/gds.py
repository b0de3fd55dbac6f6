"""GPUDirect Storage alignment rules and the DMA request queue of seed 001.

GDS (cuFile) moves bytes from NVMe straight into device memory only when the
file offset, the device buffer address and the transfer size are all multiples
of the alignment (4096 bytes by default). :func:`check_alignment` is the one
place that rule lives; the real read planner in ``feedline.io`` reuses it.

:class:`GPUDirectStoragePipeline` is a pure-Python model of the DMA engine's
request queue: requests are validated on entry, and each
:meth:`~GPUDirectStoragePipeline.step_pipeline` call completes whole requests,
in order, within a byte budget. It moves no bytes and needs no GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from feedline.errors import AlignmentError

DEFAULT_ALIGNMENT = 4096
ALIGNED_FIELDS = ("file_offset", "buffer_address", "size_bytes")


def _check_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    return value


def _check_alignment_arg(alignment: object) -> int:
    value = _check_int("alignment", alignment)
    if value <= 0:
        raise ValueError(f"alignment must be a positive number of bytes, got {value}")
    return value


@dataclass(frozen=True)
class _Violation:
    field: str
    value: int
    alignment: int

    @property
    def reason(self) -> str:
        if self.value < 0:
            return f"GDS alignment violated: {self.field} ({self.value}) is negative"
        return (
            f"GDS alignment violated: {self.field} ({self.value}) "
            f"is not a multiple of {self.alignment}"
        )


def _first_violation(
    file_offset: int, buffer_address: int, size_bytes: int, alignment: int
) -> _Violation | None:
    alignment = _check_alignment_arg(alignment)
    values = (file_offset, buffer_address, size_bytes)
    for name, raw in zip(ALIGNED_FIELDS, values, strict=True):
        value = _check_int(name, raw)
        if value < 0 or value % alignment != 0:
            return _Violation(name, value, alignment)
    return None


def check_alignment(
    file_offset: int, buffer_address: int, size_bytes: int, alignment: int = DEFAULT_ALIGNMENT
) -> tuple[bool, str | None]:
    """Check the GDS rule: offset, buffer address and size are aligned and non-negative.

    Args:
        file_offset: byte offset of the read in the file.
        buffer_address: device (or bounce) buffer address the bytes land at.
        size_bytes: number of bytes to transfer.
        alignment: required alignment in bytes (4096 for GDS and O_DIRECT).

    Returns:
        ``(True, None)`` when all three are valid, else ``(False, reason)``; the
        reason names the first offending field exactly (``file_offset``,
        ``buffer_address`` or ``size_bytes``), e.g. ``"GDS alignment violated:
        buffer_address (16385) is not a multiple of 4096"``.

    Raises:
        TypeError: a value is not an ``int``.
        ValueError: ``alignment`` is not positive.
    """
    violation = _first_violation(file_offset, buffer_address, size_bytes, alignment)
    if violation is None:
        return True, None
    return False, violation.reason


class GPUDirectStoragePipeline:
    """A simulated GDS DMA request queue with the interface of seed 001.

    Args:
        gpu_id: the device the requests target (recorded, not used).
        alignment_bytes: the alignment every request must satisfy.

    Attributes:
        pending_queue: requests not yet transferred, oldest first; each a dict
            with ``sample_id``, ``file_offset``, ``buffer_address``, ``size_bytes``.
        completed_samples: transferred requests (the same dicts), in order.
        bytes_completed: total bytes of the completed requests.

    Raises:
        TypeError, ValueError: ``gpu_id`` is not a non-negative int, or
            ``alignment_bytes`` is not a positive int.
    """

    def __init__(self, gpu_id: int = 0, alignment_bytes: int = DEFAULT_ALIGNMENT) -> None:
        if _check_int("gpu_id", gpu_id) < 0:
            raise ValueError(f"gpu_id must be >= 0, got {gpu_id}")
        self.gpu_id = gpu_id
        self.alignment = _check_alignment_arg(alignment_bytes)
        self.pending_queue: list[dict[str, Any]] = []
        self.completed_samples: list[dict[str, Any]] = []
        self.bytes_completed = 0

    def validate_alignment(
        self, file_offset: int, buffer_address: int, size_bytes: int
    ) -> tuple[bool, str | None]:
        """``(True, None)`` if the request satisfies this queue's alignment, else
        ``(False, reason)`` naming the offending field. See :func:`check_alignment`."""
        return check_alignment(file_offset, buffer_address, size_bytes, self.alignment)

    def enqueue_read(
        self, sample_id: Any, file_offset: int, buffer_address: int, size_bytes: int
    ) -> None:
        """Queue a direct read of ``size_bytes`` at ``file_offset`` into ``buffer_address``.

        Raises:
            AlignmentError: (a ``ValueError``) a field is misaligned or negative;
                ``err.field`` names it and the message carries the fix.
            TypeError: a field is not an ``int``.
        """
        violation = _first_violation(file_offset, buffer_address, size_bytes, self.alignment)
        if violation is not None:
            raise AlignmentError(
                violation.reason,
                field=violation.field,
                key=sample_id,
                fix=f"round {violation.field} to a multiple of {self.alignment} "
                "(pad the shard layout or read through an aligned bounce buffer)",
            )
        self.pending_queue.append(
            {
                "sample_id": sample_id,
                "file_offset": file_offset,
                "buffer_address": buffer_address,
                "size_bytes": size_bytes,
            }
        )

    @property
    def bytes_pending(self) -> int:
        """Total bytes still queued."""
        return sum(int(r["size_bytes"]) for r in self.pending_queue)

    def step_pipeline(self, max_bytes_transferred: float) -> list[Any]:
        """Run one DMA period that may move up to ``max_bytes_transferred`` bytes.

        Whole requests complete in queue order while they fit in the budget; the
        first one that does not fit stops the period (no partial transfers, no
        reordering, unused budget is not carried over). A request larger than
        every period's budget therefore never completes: size budgets to at least
        the largest request.

        Returns:
            The sample ids completed in this period, in order.

        Raises:
            TypeError, ValueError: the budget is not a finite, non-negative number.
        """
        budget = max_bytes_transferred
        if isinstance(budget, bool) or not isinstance(budget, (int, float)):
            raise TypeError(f"max_bytes_transferred must be a number, got {budget!r}")
        if not budget >= 0 or budget == float("inf"):
            raise ValueError(f"max_bytes_transferred must be finite and >= 0, got {budget}")
        done = 0
        for request in self.pending_queue:
            size = int(request["size_bytes"])
            if size > budget:
                break
            budget -= size
            done += 1
        finished = self.pending_queue[:done]
        del self.pending_queue[:done]
        self.completed_samples.extend(finished)
        self.bytes_completed += sum(int(r["size_bytes"]) for r in finished)
        return [r["sample_id"] for r in finished]


__all__ = ["ALIGNED_FIELDS", "DEFAULT_ALIGNMENT", "GPUDirectStoragePipeline", "check_alignment"]
