"""DCP interop: feedline's reused (pinned) staging as a ``dcp.async_save`` stager.

``torch.distributed.checkpoint.async_save(state, checkpoint_id=..., async_stager=
CheckpointStager())`` copies the state's tensors into one 4096-aligned staging
buffer that is kept between saves (pinned when the state is on a GPU), instead
of allocating a fresh CPU copy of the whole state on every save; DCP's own
writer then serialises the staged copy in its background thread. Use it for
sharded/multi-rank training that already saves with DCP (its planner
de-duplicates replicated tensors and resharding on load keeps working); use
:class:`~feedline.checkpoint.Checkpointer` for single-process or per-rank local
states, where feedline also does the writing (O_DIRECT/GDS, atomic commit, keep=K).

Sharded state works: a ``DTensor``'s local shard is staged and wrapped again
with the same mesh and placements (as DCP's own stager does, the staged shard
stays in host memory), so each rank writes its shards and ``dcp.load``
reshards (2 ranks saved, 1 loads, and the reverse: tests/checkpoint/test_dcp.py).

The staged tensors are views of the reused buffer: wait for one
``async_save`` to finish (``future.result()``) before starting the next, as the
DCP documentation asks anyway.
"""

from __future__ import annotations

import copy
from typing import Any

from feedline.checkpoint._layout import make_layout
from feedline.checkpoint._staging import CopyStreams, StagingArena, bytes_view, stage_into
from feedline.units import parse_bytes


class CheckpointStager:
    """An ``AsyncStager`` for ``dcp.async_save`` that stages into reused feedline buffers.

    Args:
        pinned_budget: most bytes of staging memory (``None``: sized by the first save).
        pinned: page-lock the staging memory; ``None`` pins when the state has CUDA tensors.

    Non-tensor values are deep-copied. A ``DTensor`` is staged as its local
    shard and comes back a ``DTensor`` of the same mesh, placements and global
    shape; the deprecated ``ShardedTensor`` is refused
    (:class:`~feedline.errors.ConfigError`).
    """

    _synchronize_after_execute = False  # stage() returns only when the copies are done

    def __init__(self, *, pinned_budget: int | str | None = None, pinned: bool | None = None) -> None:
        self._budget = None if pinned_budget is None else parse_bytes(pinned_budget, name="pinned_budget")
        self._pinned = pinned
        self._arena: StagingArena | None = None
        self._streams: CopyStreams | None = None

    @property
    def should_synchronize_after_execute(self) -> bool:
        """False: :meth:`stage` is synchronous, nothing is left to wait for."""
        return self._synchronize_after_execute

    @property
    def allocations(self) -> int:
        """How many times staging memory was allocated."""
        return 0 if self._arena is None else self._arena.allocations

    def stage(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        """A copy of ``state_dict`` whose tensors live in the staging buffer (safe to train on)."""
        tensors: list[Any] = []
        skeleton = _detach(state_dict, tensors)
        layout = make_layout(tensors)
        if self._arena is None:
            on_gpu = "cuda" in layout.devices()
            self._arena = StagingArena(self._budget, pinned=on_gpu if self._pinned is None else self._pinned)
            if on_gpu:
                self._streams = CopyStreams()
        buf = self._arena.buffer(layout.data_bytes)
        stage_into(layout, buf, streams=self._streams)
        staged = [bytes_view(buf, e) for e in layout.entries]
        return _attach(skeleton, staged)

    def synchronize_staging(self) -> None:
        """Nothing to do: staging is complete when :meth:`stage` returns."""

    def close(self) -> None:
        """Free the staging memory."""
        if self._arena is not None:
            self._arena.release()


class _Slot:
    __slots__ = ("index", "spec")

    def __init__(self, index: int, spec: Any = None) -> None:
        self.index = index
        self.spec = spec  # a DTensor's spec (mesh, placements, global shape): the staged shard is wrapped again


def _detach(value: Any, tensors: list[Any]) -> Any:
    if type(value).__name__ == "DTensor" and hasattr(value, "to_local"):
        tensors.append(value._local_tensor)  # the shard itself (to_local() is an autograd view of it)
        return _Slot(len(tensors) - 1, value._spec)
    if hasattr(value, "untyped_storage") and hasattr(value, "dtype"):
        tensors.append(value)
        return _Slot(len(tensors) - 1)
    if isinstance(value, dict):
        return {k: _detach(v, tensors) for k, v in value.items()}
    if isinstance(value, list):
        return [_detach(v, tensors) for v in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_detach(v, tensors) for v in value)
    return copy.deepcopy(value)


def _attach(value: Any, staged: list[Any]) -> Any:
    if isinstance(value, _Slot):
        if value.spec is not None:
            from torch.distributed.tensor import DTensor

            # as DCP's own stager makes its host copy (DTensor.to("cpu")): the shard in host memory, the
            # spec unchanged; DTensor.from_local would move a host shard back to a CUDA mesh's device
            return DTensor(staged[value.index], value.spec, requires_grad=False)
        return staged[value.index]
    if isinstance(value, dict):
        return {k: _attach(v, staged) for k, v in value.items()}
    if isinstance(value, list):
        return [_attach(v, staged) for v in value]
    if isinstance(value, tuple):
        return tuple(_attach(v, staged) for v in value)
    return value
