"""Shared pieces of the scenario training scripts (each script's truth is set by construction).

``compute(seconds)`` stands for the device step: a real forward/backward/update
of a small model plus a sleep that sets the step's length (on a GPU the host
would wait for the kernels the same way). ``burn(seconds)`` is CPU work
(decode), ``sleep`` in a dataset is storage latency (read).
"""

from __future__ import annotations

import importlib
import sys
import time
import types

import torch

torch.set_num_threads(1)


def _defer_dynamo() -> None:
    """Leave ``torch._dynamo`` unimported until something needs more of it than torch.optim does.

    Building or stepping a ``torch.optim`` optimizer imports ``torch._dynamo`` (torch 2.13: 1.5 s
    of CPU, a quarter of a scenario run) for two calls that do nothing outside
    ``torch.compile``: ``graph_break()`` and ``disable(fn)``. Here they are those no-ops; any
    other use of the module (none in these scripts) imports the real one and gets its answer.
    The scripts' truths are about their loaders and steps; optimizers, their hooks and
    schedulers run unchanged. Only the test scripts do this, never feedline.
    """
    if "torch._dynamo" in sys.modules:
        return
    stub = types.ModuleType("torch._dynamo")

    def graph_break() -> None:
        return None

    def disable(fn: object = None, recursive: bool = True, **kwargs: object) -> object:
        return fn

    def real(name: str) -> object:
        if sys.modules.get("torch._dynamo") is stub:
            del sys.modules["torch._dynamo"]
        if torch.__dict__.get("_dynamo") is stub:
            del torch._dynamo
        return getattr(importlib.import_module("torch._dynamo"), name)

    stub.graph_break, stub.disable, stub.__getattr__ = graph_break, disable, real  # type: ignore[attr-defined]
    sys.modules["torch._dynamo"] = stub
    torch._dynamo = stub  # type: ignore[attr-defined]


_defer_dynamo()


def burn(seconds: float) -> None:
    """Spend ``seconds`` of this thread's CPU time (a stand-in for decoding)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


class Step:
    """A small model trained for real; each call takes about ``seconds``."""

    def __init__(self, features: int, seconds: float) -> None:
        self.model = torch.nn.Linear(features, 1)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.seconds = seconds
        warm = torch.zeros(2, features)  # autograd's first backward is slow: not a step
        self.model(warm).sum().backward()
        self.opt.zero_grad()

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> float:
        t0 = time.perf_counter()
        x = x.to("cpu")
        loss = ((self.model(x).squeeze(1) - y) ** 2).mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        rest = self.seconds - (time.perf_counter() - t0)
        if rest > 0:
            time.sleep(rest)
        return float(loss.detach())


class Samples(torch.utils.data.Dataset):
    """``n`` samples of ``features`` floats; ``item(i)`` adds the per-sample cost."""

    def __init__(self, n: int, features: int, read_s: float = 0.0, decode_s: float = 0.0,
                 slow_every: int = 0, slow_s: float = 0.0, batch: int = 1,
                 batch_read_s: float = 0.0) -> None:
        self.n, self.features, self.batch_read_s = n, features, batch_read_s
        self.read_s, self.decode_s = read_s, decode_s
        self.slow_every, self.slow_s, self.batch = slow_every, slow_s, batch

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.read_s:
            time.sleep(self.read_s)
        if self.batch_read_s and i % self.batch == 0:  # one storage round trip per batch
            time.sleep(self.batch_read_s)
        if self.decode_s:
            burn(self.decode_s)
        if self.slow_every and i % (self.slow_every * self.batch) == 0:
            time.sleep(self.slow_s)
        x = torch.full((self.features,), float(i % 7))
        return x, x.sum() / self.features


def train(loader: torch.utils.data.DataLoader, step: Step, epochs: int = 1000) -> None:
    """The ordinary loop: iterate, step; nothing diagnose-specific."""
    for _ in range(epochs):
        for x, y in loader:
            step(x, y)
