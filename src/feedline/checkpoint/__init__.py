"""Checkpoints that do not stop training: staged saves, background direct writes, atomic commit.

``Checkpointer(dir).save(step, state)`` returns once ``state`` (nested dicts of
tensors, arrays and plain values) is copied into a reused staging buffer; a
background thread writes it (buffered, O_DIRECT or GDS), fsyncs and commits it
atomically. ``load`` verifies every tensor's checksum and never unpickles.
:class:`CheckpointStager` plugs the same staging into ``dcp.async_save`` and
:class:`DCPWriter` gives ``dcp.save``/``dcp.async_save`` the same direct writes
(loaded on first use: it imports ``torch.distributed.checkpoint``).
"""

from typing import Any

from feedline.checkpoint._checkpointer import Checkpointer, CheckpointStats, CheckpointWarning
from feedline.checkpoint._dcp import CheckpointStager
from feedline.checkpoint._load import load
from feedline.checkpoint._writers import IO_CHOICES, WriterChoice, choose_writer

__all__ = [
    "IO_CHOICES",
    "CheckpointStager",
    "CheckpointStats",
    "CheckpointWarning",
    "Checkpointer",
    "DCPWriter",
    "WriterChoice",
    "choose_writer",
    "load",
]


def __getattr__(name: str) -> Any:
    if name == "DCPWriter":
        from feedline.checkpoint._dcp_storage import DCPWriter

        return DCPWriter
    raise AttributeError(f"module 'feedline.checkpoint' has no attribute {name!r}")
