"""The per-rank body of the distributed sharding test (spawned by torch.multiprocessing)."""

from __future__ import annotations

import json
import os

import torch.distributed as dist
from loader_helpers import Numbers, batch_ids


def run_rank(rank: int, world: int, port: int, out_dir: str) -> None:
    import feedline

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    try:
        group = dist.new_group(list(range(world)))
        loader = feedline.Loader(Numbers(103), batch_size=4, workers=2, seed=7,
                                 process_group=group, drop_last=True)
        result = {}
        for epoch in (0, 1):
            loader.set_epoch(epoch)
            ids = []
            for batch in loader:
                ids.append(batch_ids(batch))
                dist.barrier(group)  # lockstep: every rank has this batch
            result[str(epoch)] = ids
        result["world"] = [loader.rank, loader.world_size]
        loader.close()
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
            json.dump(result, f)
    finally:
        dist.destroy_process_group()
