"""Datasets for observe tests, importable by spawned DataLoader workers."""

from __future__ import annotations

import time
from typing import Any

import torch


class Slow(torch.utils.data.Dataset):
    """``n`` items; each sleeps ``sleep`` seconds (blocked) and spins ``spin`` seconds of CPU."""

    def __init__(self, sleep: float = 0.0, spin: float = 0.0, n: int = 32) -> None:
        self.sleep, self.spin, self.n = sleep, spin, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        if self.sleep:
            time.sleep(self.sleep)
        end = time.thread_time() + self.spin
        while time.thread_time() < end:
            pass
        return torch.full((4,), float(i))


def spin_collate(batch: list[torch.Tensor], spin: float = 0.02) -> torch.Tensor:
    """A collate function that spends ``spin`` seconds of CPU."""
    end = time.thread_time() + spin
    while time.thread_time() < end:
        pass
    return torch.stack(batch)


def worker_flag(worker_id: int) -> None:
    """A user worker_init_fn: leaves a mark the dataset can see."""
    torch.utils.data.get_worker_info().dataset.flag = worker_id  # type: ignore[union-attr]


class Pooled(Slow):
    """``Slow`` whose items spin on a thread pool of the process that fetches them (a
    dataset that decodes on its own threads): the fetching thread only waits."""

    def __getitem__(self, i: int) -> torch.Tensor:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(1) as pool:
            return pool.submit(Slow.__getitem__, self, i).result()


class Shards(torch.utils.data.IterableDataset):
    """``shards`` shards of ``records`` items dealt to the workers by ``get_worker_info()``
    (worker w reads shards w, w + n, ...); every item of shard ``slow`` sleeps ``sleep``."""

    def __init__(self, shards: int = 4, records: int = 8, slow: int = 3,
                 sleep: float = 0.02) -> None:
        self.shards, self.records, self.slow, self.sleep = shards, records, slow, sleep

    def __iter__(self):  # type: ignore[no-untyped-def]
        info = torch.utils.data.get_worker_info()
        wid, n = (info.id, info.num_workers) if info is not None else (0, 1)
        for s in range(wid, self.shards, n):
            for _ in range(self.records):
                if s == self.slow:
                    time.sleep(self.sleep)
                yield torch.full((4,), float(s))


class External(torch.utils.data.Dataset):
    """``n`` items, each decoded by a child interpreter that spins ``spin`` seconds of CPU
    (an external decoder run with ``subprocess.run``, as ``ffmpeg`` is)."""

    def __init__(self, spin: float = 0.02, n: int = 4) -> None:
        self.spin, self.n = spin, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        import subprocess
        import sys

        code = (f"import time\nend = time.process_time() + {self.spin}\n"
                "while time.process_time() < end:\n    pass\n")
        subprocess.run([sys.executable, "-S", "-c", code], check=True)
        return torch.full((4,), float(i))


PIPED_DECODER = """
import sys, time
for line in sys.stdin:
    end = time.process_time() + float(line)
    while time.process_time() < end:
        pass
    sys.stdout.write(line)
    sys.stdout.flush()
"""


class Piped(torch.utils.data.Dataset):
    """``n`` items, each decoded by one long-lived child interpreter (started at the first
    item in each process, fed through pipes) that spins ``spin`` seconds of CPU per item
    (a decoder kept running, as a streaming ``ffmpeg`` is)."""

    def __init__(self, spin: float = 0.02, n: int = 6) -> None:
        self.spin, self.n = spin, n
        self.proc: Any = None

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        import subprocess
        import sys

        if self.proc is None:
            self.proc = subprocess.Popen([sys.executable, "-S", "-u", "-c", PIPED_DECODER],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.proc.stdin.write(f"{self.spin}\n")
        self.proc.stdin.flush()
        self.proc.stdout.readline()
        return torch.full((4,), float(i))

    def close(self) -> None:
        if self.proc is not None:
            self.proc.stdin.close()
            self.proc.wait()


class Dropping(torch.utils.data.Dataset):
    """``n`` items; every ``bad``-th one fails to load and comes back ``None``."""

    def __init__(self, n: int = 12, bad: int = 3) -> None:
        self.n, self.bad = n, bad

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor | None:
        return None if i % self.bad == 0 else torch.full((2,), float(i))


def drop_none(batch: list[Any]) -> Any:
    """A collate_fn that filters out the samples that failed to load (None for none left)."""
    kept = [b for b in batch if b is not None]
    return torch.stack(kept) if kept else None
