"""Sharding with real ranks: torch.distributed + gloo on 127.0.0.1, spawned processes."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import numpy as np
import pytest
import torch.multiprocessing as tmp
from dist_worker import run_rank
from loader_helpers import flat


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(world: int, out: Path) -> list[dict[str, list[list[int]]]]:
    tmp.spawn(run_rank, args=(world, _free_port(), str(out)), nprocs=world, join=True)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("world", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_ranks_get_disjoint_equal_parts_of_one_global_order(world: int, tmp_path: Path) -> None:
    results = _run(world, tmp_path)
    assert [r["world"] for r in results] == [[rank, world] for rank in range(world)]
    for epoch in ("0", "1"):
        parts = [flat(r[epoch]) for r in results]
        assert len({len(p) for p in parts}) == 1 and len(parts[0]) > 0  # equal length
        everything = flat(parts)
        assert len(set(everything)) == len(everything)  # disjoint
        # interleaving the ranks gives back the global (seed, epoch) order
        order = np.random.Generator(np.random.PCG64([7, int(epoch)])).permutation(103)
        inter = np.stack([np.array(p) for p in parts], axis=1).reshape(-1)
        assert inter.tolist() == order[: len(inter)].tolist()
