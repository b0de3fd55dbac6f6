"""DCPWriter: dcp.save/async_save writing through feedline's O_DIRECT stream, read back by DCP's own reader."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp

from feedline.checkpoint import CheckpointStager, DCPWriter
from feedline.checkpoint._dcp_storage import DirectStream
from feedline.errors import ConfigError
from feedline.io._posix import probe_direct

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


def _state() -> dict:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(301, 77), torch.nn.LayerNorm(77))
    return {"model": model.state_dict(), "ids": torch.arange(4097, dtype=torch.int16),
            "empty": torch.empty(0, 3), "step": 12, "name": "run-a", "lrs": [0.1, 0.01]}


def _zeros_like(state: dict) -> dict:
    return {"model": {k: torch.zeros_like(v) for k, v in state["model"].items()},
            "ids": torch.zeros_like(state["ids"]), "empty": torch.empty(0, 3), "step": 0, "name": "",
            "lrs": [0.0, 0.0]}


def _equal(a: dict, b: dict) -> bool:
    return (all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
            and torch.equal(a["ids"], b["ids"]) and a["step"] == b["step"] and a["name"] == b["name"]
            and a["lrs"] == b["lrs"])


@pytest.mark.timeout(60)
def test_files_are_byte_identical_to_dcps_own_writer_and_load_back(tmp_path: Path) -> None:
    state = _state()
    dcp.save(state, storage_writer=dcp.FileSystemWriter(tmp_path / "stock"))
    ours = DCPWriter(tmp_path / "ours")
    dcp.save(state, storage_writer=ours)
    direct_ok, _ = probe_direct(str(tmp_path))
    assert ours.choice.name == ("direct" if direct_ok else "buffered"), ours.choice
    data = sorted(p.name for p in (tmp_path / "ours").iterdir())
    assert data == sorted(p.name for p in (tmp_path / "stock").iterdir()) and ".metadata" in data
    for name in data:
        if name.endswith(".distcp"):
            assert (tmp_path / "ours" / name).read_bytes() == (tmp_path / "stock" / name).read_bytes()
    target = _zeros_like(state)
    dcp.load(target, checkpoint_id=tmp_path / "ours")
    assert _equal(target, state)


@pytest.mark.timeout(60)
def test_async_save_with_the_stager_and_checkpoint_id_reset(tmp_path: Path) -> None:
    state, stager = _state(), CheckpointStager()
    writer = DCPWriter(tmp_path / "unused")
    for step in (1, 2):
        state["step"] = step
        expect = {k: v.clone() for k, v in state["model"].items()}
        fut = dcp.async_save(state, checkpoint_id=tmp_path / f"s{step}", storage_writer=writer,
                             async_stager=stager)
        for v in state["model"].values():
            v.add_(1.0)  # training goes on while the direct writes run
        fut.result()
        target = _zeros_like(state)
        dcp.load(target, checkpoint_id=tmp_path / f"s{step}")
        assert target["step"] == step and all(torch.equal(target["model"][k], expect[k]) for k in expect)
    assert not (tmp_path / "unused").exists() and stager.allocations == 1
    stager.close()


@pytest.mark.parametrize("sizes", [[0], [1], [4095], [4096], [4097], [3, 8192, 5000, 1], [20000], [12288, 12288]])
def test_direct_stream_keeps_every_byte_and_the_logical_position(tmp_path: Path, sizes: list[int]) -> None:
    path = tmp_path / "f.distcp"
    stream = DirectStream(str(path), piece=8192)
    flags = int(Path(f"/proc/self/fdinfo/{stream.fileno()}").read_text().split("flags:")[1].split()[0], 8)
    assert flags & os.O_DIRECT, "the data file is not open with O_DIRECT"
    expect = bytearray()
    for k, n in enumerate(sizes):
        chunk = bytes((k * 31 + i) % 251 for i in range(n))
        assert stream.tell() == len(expect)
        assert stream.write(memoryview(chunk)) == n
        expect += chunk
    assert stream.tell() == len(expect)
    stream.close()
    stream.close()  # twice is harmless
    assert path.read_bytes() == bytes(expect)


@pytest.mark.parametrize("io", ["auto", "buffered"])
def test_durable_false_skips_every_fsync_and_still_loads(tmp_path: Path, io: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # a spy on the real os.fsync (DCP's, DirectStream's and the folder's all go through it)
    calls: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd))[1])
    state = _state()
    dcp.save(state, storage_writer=DCPWriter(tmp_path / "durable", io=io))
    synced = len(calls)
    assert synced >= 3  # data file(s), .metadata, folder
    calls.clear()
    fast = DCPWriter(tmp_path / "fast", io=io, durable=False)
    dcp.save(state, storage_writer=fast)
    assert calls == [] and fast.sync_files is False
    assert DCPWriter(tmp_path / "x", sync_files=False).durable is False  # DCP's spelling, same meaning
    target = _zeros_like(state)
    dcp.load(target, checkpoint_id=tmp_path / "fast")
    assert _equal(target, state)
    with pytest.raises(ConfigError, match="disagree"):
        DCPWriter(tmp_path / "y", durable=False, sync_files=True)


def test_io_choices_are_checked() -> None:
    with pytest.raises(ConfigError, match="host memory"):
        DCPWriter("x", io="gds")
    with pytest.raises(ConfigError, match="io must be one of"):
        DCPWriter("x", io="fast")


_FULL = """
import resource, signal, sys, warnings, json
warnings.simplefilter("ignore")
import torch, torch.distributed.checkpoint as dcp
from feedline.checkpoint import DCPWriter
from feedline.errors import WriteError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
try:
    dcp.save({"w": torch.ones(1 << 19)}, storage_writer=DCPWriter(sys.argv[1]))
    print(json.dumps({"error": None}))
except BaseException as e:  # DCP raises CheckpointException, a BaseException
    chain, cur = [], e
    while cur is not None:
        chain.append(f"{type(cur).__name__}: {cur}")
        cur = cur.__cause__ or cur.__context__
    print(json.dumps({"error": " | ".join(chain)}))
"""


@pytest.mark.timeout(90)
def test_a_full_disk_is_a_write_error_naming_the_file_and_commits_nothing(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", _FULL, str(tmp_path / "ck")], capture_output=True, text=True,
                          env=env, timeout=80)
    assert proc.returncode == 0, proc.stderr[-2000:]
    error = json.loads(proc.stdout.strip().splitlines()[-1])["error"]
    assert error is not None and "WriteError" in str(error) and ".distcp" in error and "free space" in error, error
    assert not (tmp_path / "ck" / ".metadata").exists()  # nothing committed: dcp.load would refuse it


def test_writer_is_loaded_lazily() -> None:
    code = "import sys, feedline.checkpoint; print('torch.distributed.checkpoint' in sys.modules)"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    with warnings.catch_warnings():
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.stdout.strip() == "False", out.stderr
