"""How long does a checkpoint stop training? torch.save vs dcp.save vs dcp.async_save vs Checkpointer.

Question: with ~1 GiB of training state on CPU (a real model, a Transformer
encoder scaled up, plus its AdamW state after one step), how long is the
training loop blocked per save, and how long until the checkpoint is durable
(fsynced)? Contenders, interleaved round by round (order rotated each round):
``torch.save`` + fsync (blocking: the baseline), ``dcp.save``,
``dcp.async_save``, ``dcp.async_save`` with feedline's ``CheckpointStager`` and
``DCPWriter`` (O_DIRECT), and ``feedline.checkpoint.Checkpointer.save`` (io=auto).
Every contender starts after ``os.sync()`` (the same for each: none inherits
dirty pages; page caches are not dropped, the host is shared), and each
``Checkpointer.save`` round is printed as the loop thread's CPU in ``save()``
plus its wait for a core (``/proc/thread-self/schedstat``), with the host's
Dirty + Writeback before it in the JSON: on a shared 2-core host the slow
rounds were that wait, never the staging (docs/checkpoints.md).
Also: write throughput of feedline's O_DIRECT writer vs
``dd if=/dev/zero oflag=direct bs=8M conv=fsync`` to the same folder
(interleaved), and a training loop on the same model that saves every 50 steps
vs the same loop without saves (stall %, from ABBA-interleaved 50-step segments: the median
pair ratio and its spread, the same pairs without the loop's waits for a core, and each
save's cost against the same segment's later steps; with the floor: state bytes / memcpy
bandwidth vs 50 steps), and a state of 10^5 tiny tensors (scalars and vectors of 1-64
floats): data file size against the payload and against one 4 KiB page per tensor (format
version 1's layout), blocked, durable and load time. Torch runs with one thread (the writer thread needs the other
core of a 2-core host). Goals: blocked <= 0.1x torch.save and <= 0.5x
dcp.async_save; direct write >= 0.9x dd; loop within 3 %.

    .venv/bin/python bench/checkpoint.py [--quick] [--repeat N] [--loop-pairs N] [--dir DIR] [--json PATH]
                                         [--only saves,write,loop,small]
                                         [--device cuda]

With ``--device cuda`` (the GPU check) the state lives on the GPU instead and
the script reports the blocked time against state size / measured D2H
bandwidth, and ``io="gds"`` (KvikIO from device memory) vs ``io="direct"``
(pinned bounce buffer).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from feedline.checkpoint import Checkpointer, load
from feedline.checkpoint._writers import DirectWriter
from feedline.io._buffers import aligned_empty


def make_state(d_model: int, layers: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """A Transformer encoder and its AdamW state after one step (params + exp_avg + exp_avg_sq)."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model, nhead=8, dim_feedforward=4 * d_model, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, num_layers=layers, enable_nested_tensor=False)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model(torch.randn(1, 4, d_model)).sum().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return model, opt


def state_of(model: torch.nn.Module, opt: torch.optim.Optimizer) -> dict[str, Any]:
    return {"model": model.state_dict(), "optim": opt.state_dict()}


def nbytes_of(state: Any) -> int:
    if isinstance(state, torch.Tensor):
        return state.numel() * state.element_size()
    if isinstance(state, dict):
        return sum(nbytes_of(v) for v in state.values())
    if isinstance(state, (list, tuple)):
        return sum(nbytes_of(v) for v in state)
    return 0


def _fsync_path(path: Path) -> None:
    for p in [path, *path.rglob("*")] if path.is_dir() else [path]:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def save_torch(state: dict[str, Any], where: Path, ck: Any) -> tuple[float, float]:
    t0 = time.perf_counter()
    torch.save(state, where / "ckpt.pt")
    _fsync_path(where / "ckpt.pt")  # durable, as the others are; the loop waits for all of it
    t = time.perf_counter() - t0
    return t, t


def save_dcp(state: dict[str, Any], where: Path, ck: Any) -> tuple[float, float]:
    import torch.distributed.checkpoint as dcp

    t0 = time.perf_counter()
    dcp.save(state, checkpoint_id=str(where / "dcp"))
    t = time.perf_counter() - t0
    return t, t


def save_dcp_async(state: dict[str, Any], where: Path, ck: Any) -> tuple[float, float]:
    import torch.distributed.checkpoint as dcp

    t0 = time.perf_counter()
    fut = dcp.async_save(state, checkpoint_id=str(where / "dcp_async"))
    t1 = time.perf_counter()
    fut.result()
    return t1 - t0, time.perf_counter() - t0


_DCP_STAGER: list[Any] = []  # one CheckpointStager kept across rounds, as a training run keeps it


def save_dcp_feedline(state: dict[str, Any], where: Path, ck: Any) -> tuple[float, float]:
    import torch.distributed.checkpoint as dcp

    from feedline.checkpoint import CheckpointStager, DCPWriter

    if not _DCP_STAGER:
        _DCP_STAGER.append(CheckpointStager())
    t0 = time.perf_counter()
    fut = dcp.async_save(state, storage_writer=DCPWriter(where / "dcp_feedline"), async_stager=_DCP_STAGER[0])
    t1 = time.perf_counter()
    fut.result()
    return t1 - t0, time.perf_counter() - t0


_ROUND_INFO: dict[str, Any] = {}  # what a contender measured besides (blocked, durable), per round


def run_queue_wait() -> float | None:
    """Seconds the calling thread has so far waited for a core while runnable (Linux schedstat), or None."""
    try:
        with open("/proc/thread-self/schedstat", encoding="ascii") as fh:
            return int(fh.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def dirty_mib() -> float | None:
    """Dirty + Writeback page cache of the whole host, MiB (Linux), or None."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            kib = {k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in fh)}
        return (kib["Dirty"] + kib["Writeback"]) / 1024
    except (OSError, ValueError, KeyError):
        return None


def save_feedline(state: dict[str, Any], where: Path, ck: Checkpointer) -> tuple[float, float]:
    q0 = run_queue_wait()
    t0 = time.perf_counter()
    ck.save(len(ck.stats.blocked_s), state)
    t1 = time.perf_counter()
    q1 = run_queue_wait()
    ck.wait()
    _ROUND_INFO.update(cpu_s=ck.stats.last_blocked_cpu_s,
                       runq_wait_s=None if q0 is None or q1 is None else q1 - q0)
    return t1 - t0, time.perf_counter() - t0


CONTENDERS = {"torch.save": save_torch, "dcp.save": save_dcp, "dcp.async_save": save_dcp_async,
              "dcp.async_save+feedline": save_dcp_feedline, "Checkpointer.save": save_feedline}


def bench_saves(state: dict[str, Any], root: Path, repeat: int) -> dict[str, dict[str, Any]]:
    ck = Checkpointer(root / "feedline", keep=1, io="auto")
    runs: dict[str, dict[str, list[Any]]] = {n: {"blocked": [], "durable": [], "info": []} for n in CONTENDERS}
    names = list(CONTENDERS)
    for r in range(repeat + 1):  # round 0 is a warm-up (first allocations, imports), not counted
        for name in names[r % len(names):] + names[: r % len(names)]:
            where = Path(tempfile.mkdtemp(dir=root, prefix="round-"))
            os.sync()  # the same start for every contender: no dirty pages of the one before (nor the host's)
            dirty = dirty_mib()
            _ROUND_INFO.clear()
            blocked, durable = CONTENDERS[name](state, where, ck)
            shutil.rmtree(where)
            if r:
                runs[name]["blocked"].append(blocked)
                runs[name]["durable"].append(durable)
                runs[name]["info"].append({"dirty_mib_before": dirty, **_ROUND_INFO})
    ck.close()
    while _DCP_STAGER:
        _DCP_STAGER.pop().close()
    out = {n: {"blocked_s": statistics.median(v["blocked"]), "durable_s": statistics.median(v["durable"]),
               "blocked_runs": v["blocked"], "durable_runs": v["durable"], "rounds": v["info"]}
           for n, v in runs.items()}
    cpu = [i["cpu_s"] for i in runs["Checkpointer.save"]["info"]]
    out["Checkpointer.save"]["blocked_cpu_s"] = statistics.median(cpu)
    out["Checkpointer.save"]["writer"] = ck.writer_choice.name if ck.writer_choice else None
    out["Checkpointer.save"]["writer_reason"] = ck.writer_choice.reason if ck.writer_choice else None
    out["Checkpointer.save"]["staging_allocations"] = ck.staging_allocations
    return out


def bench_write(nbytes: int, root: Path, repeat: int) -> dict[str, Any]:
    """feedline's O_DIRECT writer vs dd oflag=direct bs=8M conv=fsync, same size, same folder, interleaved.

    Two pairs: into a new file (what dd does by default), and over an existing file of the size
    (what a Checkpointer with ``keep=`` does from its third save on, recycling a rotated
    checkpoint's data file; dd with ``conv=notrunc``).
    """
    count = max(1, nbytes // (8 << 20))
    size = count * (8 << 20)
    buf = aligned_empty(size)
    buf[:] = 1
    writer = DirectWriter()
    runs: dict[str, list[float]] = {"ours": [], "dd": [], "ours_over": [], "dd_over": []}
    path = root / "write.bin"

    def dd(*conv: str) -> None:
        subprocess.run(["dd", "if=/dev/zero", f"of={path}", "oflag=direct", "bs=8M", f"count={count}",
                        "conv=" + ",".join(("fsync", *conv))], check=True, capture_output=True)

    steps = {"ours": lambda: writer.write(str(path), buf, size), "dd": dd,
             "ours_over": lambda: writer.write(str(path), buf, size, overwrite=True),
             "dd_over": lambda: dd("notrunc")}
    for r in range(repeat + 1):
        for name in ("ours", "dd", "ours_over", "dd_over") if r % 2 else ("dd", "ours", "dd_over", "ours_over"):
            fresh = not name.endswith("_over")
            if fresh:
                path.unlink(missing_ok=True)
            elif not path.exists():
                writer.write(str(path), buf, size)  # the file to write over
            os.sync()
            t0 = time.perf_counter()
            steps[name]()
            if r:
                runs[name].append(size / (time.perf_counter() - t0))
    path.unlink(missing_ok=True)
    med = {k: statistics.median(v) / 1e6 for k, v in runs.items()}
    return {"bytes": size, "feedline_MBps": med["ours"], "dd_MBps": med["dd"],
            "feedline_over_MBps": med["ours_over"], "dd_over_MBps": med["dd_over"],
            "feedline_runs_MBps": [x / 1e6 for x in runs["ours"]], "dd_runs_MBps": [x / 1e6 for x in runs["dd"]],
            "feedline_over_runs_MBps": [x / 1e6 for x in runs["ours_over"]],
            "dd_over_runs_MBps": [x / 1e6 for x in runs["dd_over"]],
            "direct": writer.fallback_reason is None, "fallback_reason": writer.fallback_reason}


def memcpy_bandwidth(nbytes: int, repeat: int) -> float:
    """Bytes per second of one host memcpy of ``nbytes`` between two resident buffers (median)."""
    src, dst = aligned_empty(nbytes), aligned_empty(nbytes)
    src[:] = 1
    dst[:] = 0
    runs = []
    for _ in range(max(3, repeat)):
        t0 = time.perf_counter()
        dst[:] = src
        runs.append(nbytes / (time.perf_counter() - t0))
    return statistics.median(runs)


def bench_loop(root: Path, every: int, pairs: int, d_model: int, layers: int, tokens: int,
               repeat: int) -> dict[str, Any]:
    """A training loop that saves every ``every`` steps vs the same loop without saves.

    The model is a Transformer encoder with AdamW (its state is the saves' ~1 GiB
    at full size), one sequence of ``tokens`` per step: a small batch, so the
    step is short and a save weighs as much as it can. Rather than two whole
    runs (on a shared host the load drifts by more than the 3 % measured), the
    loop runs ``every``-step segments in pairs, ABBA-interleaved: A = ``every``
    plain steps; B = a save, then ``every`` steps while it is written, then
    ``wait()`` for the write (normally 0): B's time is what one save costs the
    loop, blocked time and the background write's interference included. The
    ratio is the median over pairs of B / A (spread: the lowest and highest pair).

    Segments of the same kind vary by several % on a shared host, more than
    the stall measured, so two figures less exposed to other processes come
    with it. ``ratio_on_core``: the same pairs with the time the loop thread
    waited, runnable, for a core (``/proc/thread-self/schedstat``) taken out
    of both segments, and the writer thread's CPU time for that save charged
    to B, as if every bit of it had taken the loop's core. ``attributed``:
    per save, blocked time + the extra time of the steps that ran while the
    write was in flight, against the median of the same segment's later steps
    (same host load, seconds apart) + the final wait, as a % of ``every`` plain
    steps. The first save's staging memory is prepared with ``reserve()``
    before the loop; the cost of a first save without it is measured
    separately (it is paid once per process).
    """
    model, opt = make_state(d_model, layers)
    x = torch.randn(1, tokens, d_model)

    def step() -> None:
        loss = model(x).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    def state() -> dict[str, Any]:
        return {"model": model.state_dict(), "optim": opt.state_dict(), "rng": torch.get_rng_state()}

    size = nbytes_of(state())
    for _ in range(2):
        step()
    cold = Checkpointer(root / "cold", keep=1, io="auto")
    t0 = time.perf_counter()
    cold.save(0, state())
    cold_first = time.perf_counter() - t0
    cold.close()
    del cold
    ck = Checkpointer(root / "loop", keep=1, io="auto")
    ck.reserve(state())
    ck.wait()
    t0 = time.perf_counter()
    ck.save(0, state())
    reserved_first = time.perf_counter() - t0
    ck.wait()
    seg: dict[str, list[float]] = {"A": [], "B": []}
    runq: dict[str, list[float]] = {"A": [], "B": []}
    segments: list[dict[str, Any]] = []
    saves: list[dict[str, float]] = []
    for i in range(pairs):
        for kind in ("AB" if i % 2 == 0 else "BA"):
            q0 = run_queue_wait()
            t0 = time.perf_counter()
            if kind == "B":
                ck.save(i + 1, state())
            steps: list[float] = []
            writing = 0  # the first steps of B, which started while the write was in flight
            for _ in range(every):
                s0 = time.perf_counter()
                writing += ck._busy()
                step()
                steps.append(time.perf_counter() - s0)
            w0 = time.perf_counter()
            ck.wait()
            t1 = time.perf_counter()
            q1 = run_queue_wait()
            seg[kind].append(t1 - t0)
            runq[kind].append(0.0 if q0 is None or q1 is None else q1 - q0)
            segments.append({"kind": kind, "s": t1 - t0, "runq_wait_s": runq[kind][-1], "steps_s": steps,
                             "steps_while_writing": writing})
            if kind == "B":
                later = steps[writing:] or steps
                extra = sum(steps[:writing]) - writing * statistics.median(later)
                blocked = ck.stats.last_blocked_s
                saves.append({"blocked_s": blocked, "blocked_cpu_s": ck.stats.last_blocked_cpu_s,
                              "writing_steps": writing, "extra_s": extra,
                              "wait_s": t1 - w0, "writer_cpu_s": ck.stats.last_writer_cpu_s,
                              "durable_s": ck.stats.last_durable_s,
                              "attributed_s": blocked + extra + (t1 - w0)})
    ck.close()
    plain_steps = [s for g in segments if g["kind"] == "A" for s in g["steps_s"]]
    step_s = statistics.median(plain_steps)
    ratios = [b / a for a, b in zip(seg["A"], seg["B"], strict=True)]
    on_core = [(b - qb + s["writer_cpu_s"]) / (a - qa) for a, qa, b, qb, s
               in zip(seg["A"], runq["A"], seg["B"], runq["B"], saves, strict=True)]
    bw = memcpy_bandwidth(size, repeat)
    floor_s = size / bw
    ratio = statistics.median(ratios)

    def med(key: str) -> float:
        return statistics.median(s[key] for s in saves)

    per_save = med("attributed_s")
    return {"save_every": every, "pairs": pairs, "state_bytes": size, "tokens_per_step": tokens,
            "step_s": step_s, "segment_plain_s": statistics.median(seg["A"]),
            "segment_saving_s": statistics.median(seg["B"]), "plain_runs": seg["A"], "saving_runs": seg["B"],
            "pair_ratios": ratios, "ratio": ratio, "ratio_spread": [min(ratios), max(ratios)],
            "stall_pct": (ratio - 1) * 100, "total_ratio": sum(seg["B"]) / sum(seg["A"]), "goal_pct": 3.0,
            "runq_wait_plain_s": runq["A"], "runq_wait_saving_s": runq["B"],
            "pair_ratios_on_core": on_core, "ratio_on_core": statistics.median(on_core),
            "blocked_s": med("blocked_s"), "blocked_runs": [s["blocked_s"] for s in saves],
            "steps_while_writing_per_save": med("writing_steps"),
            "interference_s_per_save": med("extra_s"), "wait_s_per_save": med("wait_s"),
            "writer_cpu_s_per_save": med("writer_cpu_s"), "durable_s": med("durable_s"),
            "attributed_s_per_save": per_save, "attributed_pct": per_save / (every * step_s) * 100,
            "attributed_runs_pct": [s["attributed_s"] / (every * step_s) * 100 for s in saves],
            "saves": saves, "segments": segments,
            "memcpy_GBps": bw / 1e9, "floor_s": floor_s, "floor_pct": floor_s / (every * step_s) * 100,
            "first_save_s": {"without_reserve": cold_first, "after_reserve": reserved_first}}


def bench_small(root: Path, n: int, repeat: int) -> dict[str, Any]:
    """``n`` tiny tensors (half scalars, half 1-64 floats): file size vs payload and vs a page each; times."""
    gen = torch.Generator().manual_seed(0)
    sizes = torch.randint(1, 65, (n - n // 2,), generator=gen).tolist()
    state = {"scalars": [torch.tensor(float(i)) for i in range(n // 2)],
             "vectors": [torch.randn(k, generator=gen) for k in sizes]}
    payload = 4 * (n // 2 + sum(sizes))
    blocked, durable, loads, data = [], [], [], 0
    for r in range(repeat):
        where = root / f"small-{r}"
        with Checkpointer(where, io="auto") as ck:
            t0 = time.perf_counter()
            ck.save(1, state)
            t1 = time.perf_counter()
            ck.wait()
            t2 = time.perf_counter()
        data = sum(p.stat().st_size for p in where.glob("step-*.bin"))
        t3 = time.perf_counter()
        back = load(where)
        loads.append(time.perf_counter() - t3)
        assert len(back["vectors"]) == len(sizes)
        blocked.append(t1 - t0)
        durable.append(t2 - t0)
        shutil.rmtree(where, ignore_errors=True)
    return {"tensors": n, "payload_bytes": payload, "data_bytes": data, "page_each_bytes": n * 4096,
            "vs_payload": data / payload, "vs_page_each": data / (n * 4096),
            "blocked_s": statistics.median(blocked), "durable_s": statistics.median(durable),
            "load_s": statistics.median(loads), "blocked_runs": blocked}


def bench_gpu(device: str, d_model: int, layers: int, root: Path, repeat: int) -> dict[str, Any]:
    """CUDA state: blocked time vs state size / D2H bandwidth; GDS writes vs the pinned bounce buffer."""
    model, opt = make_state(d_model, layers)
    model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model(torch.randn(1, 4, d_model, device=device)).sum().backward()
    opt.step()
    state = state_of(model, opt)
    size = nbytes_of(state)
    src = torch.empty(size, dtype=torch.uint8, device=device)
    dst = torch.empty(size, dtype=torch.uint8, pin_memory=True)
    d2h = []
    for _ in range(repeat + 1):
        torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize(device)
        d2h.append(size / (time.perf_counter() - t0))
    del src, dst
    bw = statistics.median(d2h[1:])
    out: dict[str, Any] = {"device": torch.cuda.get_device_name(device), "state_bytes": size, "d2h_GBps": bw / 1e9,
                           "ideal_blocked_s": size / bw, "io": {}}
    for io in ("direct", "gds"):
        try:
            ck = Checkpointer(root / io, keep=1, io=io)
            blocked, durable = [], []
            for r in range(repeat + 1):
                b, d = save_feedline(state, root, ck)
                if r:
                    blocked.append(b)
                    durable.append(d)
            try:
                differ = check_round_trip(ck, state)
            except Exception as e:  # a checkpoint that does not load back (ChecksumError...) is a wrong result too
                differ = [f"load raised {type(e).__name__}: {e}"]
            ck.close()
            out["io"][io] = {"blocked_s": statistics.median(blocked), "durable_s": statistics.median(durable),
                             "blocked_vs_ideal": statistics.median(blocked) / (size / bw),
                             "write_MBps": size / statistics.median(d - b for d, b in zip(durable, blocked, strict=True)) / 1e6,
                             "writer": ck.writer_choice.name if ck.writer_choice else None,
                             "round_trip_equal": not differ, "round_trip_differ": differ[:20]}
        except Exception as e:  # kvikio missing: say so in the result, keep the other row
            out["io"][io] = {"error": f"{type(e).__name__}: {e}"}
    for io, row in out["io"].items():
        print(f"  {io:7s} " + (f"blocked {row['blocked_s'] * 1e3:.1f} ms ({row['blocked_vs_ideal']:.2f}x size/D2H), "
                               f"durable {row['durable_s']:.2f} s, write {row['write_MBps']:.0f} MB/s, round trip "
                               + ("equal on the device" if row["round_trip_equal"] else
                                  f"DIFFERS: {', '.join(row['round_trip_differ'])}")
                               if "error" not in row else row["error"]))
    return out


def named_tensors(state: Any, path: tuple[Any, ...] = ()) -> dict[tuple[Any, ...], torch.Tensor]:
    """Every tensor of a nested state, by its path of keys and indexes."""
    if isinstance(state, torch.Tensor):
        return {path: state}
    items = state.items() if isinstance(state, dict) else enumerate(state) if isinstance(state, (list, tuple)) else ()
    return {k: v for key, value in items for k, v in named_tensors(value, (*path, key)).items()}


def check_round_trip(ck: Checkpointer, state: dict[str, Any]) -> list[str]:
    """Save ``state`` once more and read it back, on the device: the names of the tensors whose bytes
    differ ([]: all equal). Every tensor gets +1 queued right before ``save()`` (the copy must wait for
    it) and +1 right after (it must not reach the checkpoint), so the state is left +2; the model is
    also loaded ``into=`` zeroed tensors on its device."""
    tensors = named_tensors(state)
    numeric = [t for t in tensors.values() if t.dtype != torch.bool]
    for t in numeric:
        t.add_(1)  # queued on the device's current stream, not yet run when save() starts copying
    expect = {k: t.clone() for k, t in tensors.items()}
    ck.save(len(ck.stats.blocked_s), state)
    for t in numeric:
        t.add_(1)  # after save() returned: must not reach the checkpoint
    ck.wait()
    got = named_tensors(load(ck.directory))
    differ = [".".join(map(str, k)) for k, v in expect.items()
              if k not in got or got[k].shape != v.shape or not torch.equal(got[k].to(v.device), v)]
    target = {"model": {k: torch.zeros_like(v) for k, v in state["model"].items()}}
    load(ck.directory, into=target)
    differ += [f"into model.{k}" for k, v in target["model"].items() if not torch.equal(v, expect[("model", k)])]
    return differ


def _ms(seconds: float | None) -> str:
    return "?" if seconds is None else f"{seconds * 1e3:.0f}"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny state for smoke tests")
    p.add_argument("--repeat", type=int, default=None, help="counted rounds per contender (median reported)")
    p.add_argument("--dir", default=None, help="folder on the disk to measure (default: bench/results)")
    p.add_argument("--json", default=None, help="write results to this JSON file")
    p.add_argument("--loop-pairs", type=int, default=None,
                   help="A/B segment pairs of the training-loop comparison (default 6; 2 with --quick)")
    p.add_argument("--device", default="cpu", help="cpu (the comparisons) or cuda[:N] (D2H-bound staging, GDS)")
    p.add_argument("--only", default=None,
                   help="comma-separated sections to run: saves, write, loop, small (default: all)")
    args = p.parse_args(argv)
    only = set(args.only.split(",")) if args.only else set(SECTIONS)
    if only - set(SECTIONS):
        p.error(f"--only: unknown sections {sorted(only - set(SECTIONS))}; known: {', '.join(SECTIONS)}")
    torch.set_num_threads(1)  # 2 shared cores: more threads oversubscribe them (and the writer needs one)
    repeat = args.repeat or (1 if args.quick else 5)
    d_model, layers = (64, 2) if args.quick else (1024, 7)
    base = Path(args.dir or Path(__file__).resolve().parent / "results")
    base.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(dir=base, prefix="bench-checkpoint-"))
    if args.device != "cpu":
        if not torch.cuda.is_available():  # before: "Torch not compiled with CUDA enabled" from deep inside
            shutil.rmtree(root, ignore_errors=True)
            raise SystemExit(f"--device {args.device} needs CUDA, which torch {torch.__version__} does not "
                             "see here; --device cpu runs the comparisons")
        try:
            print(f"CUDA state, {repeat} rounds, folder {base}")
            gpu = bench_gpu(args.device, d_model, layers, root, repeat)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        if args.json:
            with open(args.json, "w", encoding="utf-8") as fh:
                json.dump({"quick": args.quick, "repeat": repeat, "gpu": gpu}, fh, indent=1)
        if any(row.get("round_trip_equal") is False for row in gpu["io"].values()):
            raise SystemExit("a checkpoint read back differs from the state saved (see 'round trip' above)")
        return gpu
    result: dict[str, Any] = {
        "question": "time the loop is blocked per checkpoint, time to durable, write throughput, loop stall",
        "quick": args.quick, "repeat": repeat, "dir": str(base), "sections": [n for n in SECTIONS if n in only]}
    try:
        model, opt = make_state(d_model, layers)
        state = state_of(model, opt)
        size = result["state_bytes"] = nbytes_of(state)
        if "saves" in only:
            result["saves"] = bench_saves(state, root, repeat)
        del state, model, opt
        if "write" in only:
            result["write"] = bench_write(size, root, repeat)
        if "loop" in only:
            result["loop"] = bench_loop(root, 10 if args.quick else 50, args.loop_pairs or (2 if args.quick else 6),
                                        d_model, layers, 16, repeat)
        if "small" in only:
            result["small"] = bench_small(root, 2000 if args.quick else 100_000, repeat)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result["comparisons"] = comparisons(result)
    result["note"] = "measured on a host shared with other work; medians of interleaved rounds"
    print(f"state: {size / 2**30:.3f} GiB (TransformerEncoder d={d_model} x{layers} + AdamW), "
          f"{repeat} interleaved rounds, folder {base}")
    for name in result["sections"]:
        REPORTS[name](result[name])
    for c in result["comparisons"]:
        print(f"  {c['what']}: {c['ours']} / {c['baseline']} = {c['ratio']:.3f} (goal {c['goal']})")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=1)
    return result


SECTIONS = ("saves", "write", "loop", "small")


def comparisons(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The ratios against the goals, for the sections that ran."""
    out = []
    saves, write, loop = result.get("saves"), result.get("write"), result.get("loop")
    if saves:
        ours = saves["Checkpointer.save"]["blocked_s"]
        feed = saves["dcp.async_save+feedline"]
        out += [
            {"what": "blocked per save", "ours": "Checkpointer.save", "baseline": "torch.save",
             "ratio": ours / saves["torch.save"]["blocked_s"], "goal": "<= 0.1"},
            {"what": "blocked per save", "ours": "Checkpointer.save", "baseline": "dcp.async_save",
             "ratio": ours / saves["dcp.async_save"]["blocked_s"], "goal": "<= 0.5"},
            {"what": "blocked per save", "ours": "dcp.async_save+feedline", "baseline": "dcp.async_save",
             "ratio": feed["blocked_s"] / saves["dcp.async_save"]["blocked_s"], "goal": "(info)"},
            {"what": "time to durable", "ours": "dcp.async_save+feedline", "baseline": "dcp.async_save",
             "ratio": feed["durable_s"] / saves["dcp.async_save"]["durable_s"], "goal": "(info)"}]
    if write:
        out.append({"what": "write throughput", "ours": "feedline direct", "baseline": "dd oflag=direct bs=8M",
                    "ratio": write["feedline_MBps"] / write["dd_MBps"], "goal": ">= 0.9"})
        out.append({"what": "write throughput, over a recycled file", "ours": "feedline direct (keep= saves)",
                    "baseline": "dd oflag=direct bs=8M conv=notrunc",
                    "ratio": write["feedline_over_MBps"] / write["dd_over_MBps"], "goal": "(info)"})
    if loop:
        out.append({"what": "training loop time", "ours": f"save every {loop['save_every']}",
                    "baseline": "no saves", "ratio": loop["ratio"], "goal": "<= 1.03"})
    return out


def report_saves(saves: dict[str, Any]) -> None:
    print(f"  {'contender':24s} {'blocked/save':>14s} {'durable':>10s}")
    for name, row in saves.items():
        print(f"  {name:24s} {row['blocked_s'] * 1e3:11.1f} ms {row['durable_s']:8.2f} s")
    ours = saves["Checkpointer.save"]
    print(f"  Checkpointer writer: {ours['writer']} ({ours['writer_reason']})")
    print("  Checkpointer.save rounds, blocked = loop CPU in save() + waiting for a core (run queue): " +
          ", ".join(f"{b * 1e3:.0f} = {_ms(i['cpu_s'])} + {_ms(i['runq_wait_s'])} ms"
                    for b, i in zip(ours["blocked_runs"], ours["rounds"], strict=True)))


def report_write(write: dict[str, Any]) -> None:
    print(f"  write {write['bytes'] / 2**20:.0f} MiB: feedline direct {write['feedline_MBps']:.0f} MB/s, "
          f"dd oflag=direct bs=8M {write['dd_MBps']:.0f} MB/s; over an existing file (a Checkpointer with keep= "
          f"recycles rotated data files): feedline {write['feedline_over_MBps']:.0f} MB/s, "
          f"dd conv=notrunc {write['dd_over_MBps']:.0f} MB/s")


def report_loop(loop: dict[str, Any]) -> None:
    every = loop["save_every"]
    lo, hi = loop["ratio_spread"]
    print(f"  loop, {every}-step segments, {loop['pairs']} ABBA pairs, step {loop['step_s'] * 1e3:.0f} ms: "
          f"plain {loop['segment_plain_s']:.2f} s, with a save {loop['segment_saving_s']:.2f} s: "
          f"{loop['ratio']:.3f}x (stall {loop['stall_pct']:+.2f} %; pairs {lo:.3f}-{hi:.3f}: "
          f"{', '.join(f'{r:.3f}' for r in loop['pair_ratios'])})")
    print(f"    without the loop's waits for a core, the writer's CPU charged to the loop: "
          f"{loop['ratio_on_core']:.3f}x (pairs {', '.join(f'{r:.3f}' for r in loop['pair_ratios_on_core'])}; "
          f"waited for a core {sum(loop['runq_wait_plain_s']):.1f} s plain, "
          f"{sum(loop['runq_wait_saving_s']):.1f} s saving)")
    print(f"    per save: blocked {loop['blocked_s'] * 1e3:.0f} ms, {loop['steps_while_writing_per_save']:.0f} steps "
          f"overlap the write ({loop['interference_s_per_save'] * 1e3:+.0f} ms vs the segment's later steps), "
          f"writer CPU {loop['writer_cpu_s_per_save'] * 1e3:.0f} ms, wait {loop['wait_s_per_save'] * 1e3:.0f} ms: "
          f"{loop['attributed_pct']:+.2f} % of {every} plain steps (saves "
          f"{', '.join(f'{r:+.2f}' for r in loop['attributed_runs_pct'])} %)")
    print(f"    floor: {loop['state_bytes'] / 2**30:.3f} GiB / memcpy {loop['memcpy_GBps']:.1f} GB/s = "
          f"{loop['floor_s'] * 1e3:.0f} ms = {loop['floor_pct']:.2f} % of {every} steps; first save "
          f"{loop['first_save_s']['without_reserve']:.2f} s without reserve(), "
          f"{loop['first_save_s']['after_reserve']:.2f} s after it")


def report_small(small: dict[str, Any]) -> None:
    print(f"  {small['tensors']} tiny tensors: data file {small['data_bytes'] / 2**20:.1f} MiB = "
          f"{small['vs_payload']:.2f}x the payload, {small['vs_page_each']:.3f}x a 4 KiB page each "
          f"({small['page_each_bytes'] / 2**20:.0f} MiB); blocked {small['blocked_s']:.2f} s, durable "
          f"{small['durable_s']:.2f} s, load {small['load_s']:.2f} s")


REPORTS = {"saves": report_saves, "write": report_write, "loop": report_loop, "small": report_small}


if __name__ == "__main__":
    main()
