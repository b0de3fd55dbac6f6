"""Helpers for the fault-injection suite: small picklable datasets, arena listings."""

from __future__ import annotations

import ctypes
import os
import re
import signal
from pathlib import Path
from typing import Any

import numpy as np

ARENA = re.compile(r"feedline-\d+-[0-9a-f]{32}")


class Numbers:
    """Sample i: {"x": float32[4] filled with i, "y": i}; picklable (spawn workers)."""

    def __init__(self, n: int = 64) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"x": np.full((4,), i, np.float32), "y": i}


class CrashOn(Numbers):
    """Like Numbers; sample ``bad`` crashes the process reading it (``how``)."""

    def __init__(self, n: int, bad: int, how: str) -> None:
        super().__init__(n)
        self.bad, self.how = bad, how

    def __getitem__(self, i: int) -> dict[str, Any]:
        if i == self.bad:
            if self.how == "segv":
                ctypes.string_at(0)  # a real invalid read: SIGSEGV
            elif self.how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            elif self.how == "exit":
                os._exit(3)
        return super().__getitem__(i)


def arenas(shm_dir: Path) -> list[str]:
    """Names of feedline arenas in ``shm_dir``."""
    return sorted(n for n in os.listdir(shm_dir) if ARENA.fullmatch(n))


def ids(batch: dict[str, Any]) -> list[int]:
    """Sample ids of a Numbers batch."""
    return [int(i) for i in batch["y"].tolist()]
