"""Datasets for observe tests, importable by spawned DataLoader workers."""

from __future__ import annotations

import time

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
