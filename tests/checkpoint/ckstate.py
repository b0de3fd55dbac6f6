"""States for the checkpoint tests: a real model + Adam state plus awkward leaves, made per seed."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def make_state(seed: int) -> dict[str, Any]:
    """A training state as a loop would save it: model, optimizer, loop counters, RNGs, odd tensors.

    Made on one thread: the conv backward's sums, and so the weights' low bits, depend on
    torch's thread count, which a test earlier in the session may have left at another value
    than the fault tests' children have (a parent at 1 thread found a child's checkpoint
    "different" in /model/0.weight)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _make_state(seed)
    finally:
        torch.set_num_threads(threads)


def _make_state(seed: int) -> dict[str, Any]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 5, 3), torch.nn.BatchNorm2d(5), torch.nn.Flatten(),
                                torch.nn.Linear(5 * 6 * 6, 7))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3 * (seed + 1))
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3)
    model(torch.randn(2, 3, 8, 8)).sum().backward()
    opt.step()
    sched.step()
    gen = np.random.default_rng(seed)
    return {
        "model": model.state_dict(),
        "optim": opt.state_dict(),
        "sched": sched.state_dict(),
        "step": seed,
        "torch_rng": torch.get_rng_state(),
        "py_rng": random.Random(seed).getstate(),
        "np_rng": gen.bit_generator.state,
        "odd": {
            "unaligned": gen.integers(0, 255, size=4097, dtype=np.uint8),
            "empty": torch.zeros(0, 3),
            "scalar": torch.tensor(seed * 1.5),
            "half": torch.randn(3, 5, dtype=torch.bfloat16),
            "mask": torch.tensor([True, False, True]),
            "strided": torch.arange(40, dtype=torch.int64).reshape(5, 8)[:, ::3],
            "f64": gen.standard_normal(13),
        },
        "meta": {"name": f"run-{seed}", "tags": ["a", 1, None, 2.5], "pair": (seed, "x"), 3: "int key"},
    }


def assert_same(a: Any, b: Any, path: str = "") -> None:
    """Deep equality of two states (tensors and arrays by dtype, shape and bytes)."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), path
        assert a.dtype == b.dtype and a.shape == b.shape, path
        assert torch.equal(a.cpu(), b.cpu()), path
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype, path
        np.testing.assert_array_equal(a, b, err_msg=path)
    elif isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b), path
        for k in a:
            assert_same(a[k], b[k], f"{path}/{k}")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            assert_same(x, y, f"{path}/{i}")
    else:
        assert type(a) is type(b) and a == b, path
