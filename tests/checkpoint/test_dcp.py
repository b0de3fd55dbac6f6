"""DCP interop: two real ranks on gloo (127.0.0.1) save with feedline's stager (and DCPWriter) and load back;
sharded (DTensor) state saved by two ranks loads in one process, and the reverse."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed.checkpoint as dcp

from feedline.checkpoint import CheckpointStager, DCPWriter

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


@pytest.mark.timeout(180)
@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_two_ranks_async_save_with_the_feedline_stager_and_resharding(tmp_path: Path) -> None:
    # resharding: one process saves whole tensors, the two ranks load them as DTensor shards, save their
    # own shards (async, the stager + DCPWriter; before: the stager refused DTensors with a ConfigError
    # telling the user to use the stager), and one process loads those whole
    sys.path.insert(0, str(HERE))
    try:
        from ck_dcp_child import full
    finally:
        sys.path.remove(str(HERE))
    dcp.save({"model": full(1), "step": 9}, storage_writer=DCPWriter(tmp_path / "one"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    procs = [subprocess.Popen([sys.executable, str(HERE / "ck_dcp_child.py"), str(tmp_path), str(r), "2"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for r in range(2)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=170)
        assert p.returncode == 0, err[-3000:]
        outs.append(json.loads(out.strip().splitlines()[-1]))
    for doc in outs:
        for step in (1, 2):
            assert doc[f"step{step}"] == {"model_ok": True, "local_ok": True, "step": step}, doc
        assert doc["allocations"] == 1 and doc["writer"] in ("direct", "buffered"), doc
        assert doc["one_to_many"] is True, doc
        assert doc["fsdp2"] is True, doc  # fully_shard params (DTensor) and AdamW state round trip
    assert (tmp_path / "s1" / ".metadata").exists() and (tmp_path / "s2" / ".metadata").exists()
    for d in ("s2", "many"):
        assert sorted(p.name for p in (tmp_path / d).iterdir()) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    many = full(2)
    target = {"model": {k: torch.zeros_like(v) for k, v in many.items()}, "step": 0}
    dcp.load(target, checkpoint_id=tmp_path / "many")  # 2 ranks -> one process, whole tensors
    assert target["step"] == 7 and all(torch.equal(target["model"][k], many[k]) for k in many)


def test_stage_copies_into_a_reused_buffer_and_keeps_plain_values() -> None:
    stager = CheckpointStager()
    live = {"w": torch.randn(5, 7), "opt": {"state": {0: {"m": torch.ones(3)}}, "lr": 0.1},
            "arr": np.arange(5), "t": (torch.zeros(2), "x")}
    staged = stager.stage(live)
    live["w"].add_(1)
    assert not torch.equal(staged["w"], live["w"]) and torch.equal(staged["w"] + 1, live["w"])
    assert staged["opt"]["state"][0]["m"].tolist() == [1, 1, 1] and staged["opt"]["lr"] == 0.1
    np.testing.assert_array_equal(staged["arr"], np.arange(5))
    assert isinstance(staged["t"], tuple) and staged["t"][1] == "x"
    stager.stage(live)
    assert stager.allocations == 1 and stager.should_synchronize_after_execute is False
    stager.close()
