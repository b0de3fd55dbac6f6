"""Checkpoints that do not stop training: staged saves, background direct writes, atomic commit.

``Checkpointer(dir).save(step, state)`` returns once ``state`` (nested dicts of
tensors, arrays and plain values) is copied into a reused staging buffer; a
background thread writes it (buffered, O_DIRECT or GDS), fsyncs and commits it
atomically. ``load`` verifies every tensor's checksum and never unpickles.
:class:`CheckpointStager` plugs the same staging into ``dcp.async_save``.
"""

from feedline.checkpoint._checkpointer import Checkpointer, CheckpointStats
from feedline.checkpoint._dcp import CheckpointStager
from feedline.checkpoint._load import load
from feedline.checkpoint._writers import IO_CHOICES, WriterChoice, choose_writer

__all__ = ["IO_CHOICES", "CheckpointStager", "CheckpointStats", "Checkpointer", "WriterChoice", "choose_writer",
           "load"]
