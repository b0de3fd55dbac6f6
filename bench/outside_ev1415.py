"""Issue 14 from the outside (evidence audit ev1415): a model nobody in the project wrote,
checkpointed with ``feedline.checkpoint.Checkpointer`` and resumed in a fresh process.

* ``resume``: an ``nn.Module`` with a registered buffer (updated every step), an embedding,
  bf16 parameters next to fp32 ones, AdamW, a ``OneCycleLR`` schedule and a CPU
  ``torch.amp.GradScaler``, plus torch/numpy/python RNG states. Process A trains 40 steps and
  saves every 10 (``keep=2``); process B builds the model from another seed, loads step 30
  and trains 31..40: every loss and the final state must be bit-identical to A's.
* ``alloc``: 6 saves of a 64 MiB state; ``staging_allocations`` and the bytes Python
  allocated inside each ``save()`` (tracemalloc: the staging buffer is a numpy array).
* ``skip``: ``if_busy="skip"`` while a 256 MiB write is in flight: counted in ``stats.skipped``.
* ``tail``: ``io="direct"``, tensors of odd sizes and a zero-size one: the data file ends
  off a 4 KiB boundary, the writer stayed ``direct``, and everything loads back equal.
* ``diagnose``: ``feedline diagnose`` of a plain DataLoader loop that saves with a
  Checkpointer every 10 steps: the report has a ``checkpoint`` stage with 6 saves.
* ``fulldisk DIR``: into a small tmpfs (mount it first): a save larger than the free space
  fails with ``WriteError``, the previous checkpoint still loads, no data file is left, a
  small save afterwards works.

    .venv/bin/python bench/outside_ev1415.py resume|alloc|skip|tail|diagnose|fulldisk [DIR]
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
from feedline.checkpoint import Checkpointer
from feedline.errors import WriteError


class Tagger(torch.nn.Module):
    """Embedding -> bf16 projection -> fp32 head, a step-counting buffer and a running mean."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(500, 48)
        self.proj = torch.nn.Linear(48, 96).to(torch.bfloat16)
        self.norm = torch.nn.LayerNorm(96)
        self.head = torch.nn.Linear(96, 7)
        self.register_buffer("seen", torch.zeros((), dtype=torch.int64))
        self.register_buffer("mean_tok", torch.zeros(48))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        e = self.emb(tokens)  # B x T x 48
        with torch.no_grad():
            self.seen += tokens.numel()
            self.mean_tok.mul_(0.9).add_(0.1 * e.mean((0, 1)))
        h = self.proj(e.to(torch.bfloat16)).float().relu()
        return self.head(self.norm(h).mean(1))


def make(seed: int) -> tuple[Tagger, Any, Any, Any]:
    torch.manual_seed(seed)
    model = Tagger()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2, total_steps=60)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=3)
    return model, opt, sched, scaler


def step_once(model: Tagger, opt: Any, sched: Any, scaler: Any) -> float:
    tokens = torch.randint(0, 500, (16, 12))
    target = torch.from_numpy(np.random.randint(0, 7, 16))
    jitter = random.random()
    loss = torch.nn.functional.cross_entropy(model(tokens), target) * (1 + 0.01 * jitter)
    opt.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    sched.step()
    return float(loss.detach())


def state_of(model: Tagger, opt: Any, sched: Any, scaler: Any, step: int) -> dict[str, Any]:
    return {"model": model.state_dict(), "optim": opt.state_dict(), "sched": sched.state_dict(),
            "scaler": scaler.state_dict(), "step": step, "rng": {
                "torch": torch.get_rng_state(), "numpy": list(np.random.get_state()),
                "python": list(random.getstate())}}


def digest(model: Tagger, opt: Any) -> str:
    import hashlib

    h = hashlib.sha256()
    for k, v in sorted(model.state_dict().items()):
        h.update(k.encode())
        h.update(v.detach().reshape(-1).contiguous().view(torch.uint8).numpy().tobytes())
    for s in opt.state.values():
        for _k, v in sorted(s.items()):
            h.update(v.reshape(-1).contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def run_a(d: str) -> dict[str, Any]:
    random.seed(5)
    np.random.seed(5)
    model, opt, sched, scaler = make(1)
    losses = []
    with Checkpointer(d, keep=2, io="auto") as ck:
        for step in range(1, 41):
            losses.append(step_once(model, opt, sched, scaler))
            if step % 10 == 0:
                ck.save(step, state_of(model, opt, sched, scaler, step))
        ck.wait()
        steps, choice = ck.steps(), f"{ck.writer_choice.name} - {ck.writer_choice.reason}"
    return {"losses": losses[30:], "digest": digest(model, opt), "steps": steps, "writer": choice,
            "scale": scaler.get_scale(), "lr": sched.get_last_lr()[0], "seen": int(model.seen)}


def run_b(d: str) -> dict[str, Any]:
    model, opt, sched, scaler = make(99)  # other weights: the load must overwrite them all
    ck = Checkpointer(d)
    state = ck.load(step=30, into={"model": model.state_dict()})
    ck.close()
    opt.load_state_dict(state["optim"])
    sched.load_state_dict(state["sched"])
    scaler.load_state_dict(state["scaler"])
    torch.set_rng_state(state["rng"]["torch"])
    np.random.set_state(tuple(state["rng"]["numpy"]))
    py = state["rng"]["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    assert state["step"] == 30 and model.proj.weight.dtype == torch.bfloat16
    losses = [step_once(model, opt, sched, scaler) for _ in range(31, 41)]
    return {"losses": losses, "digest": digest(model, opt), "scale": scaler.get_scale(),
            "lr": sched.get_last_lr()[0], "seen": int(model.seen)}


def resume() -> dict[str, Any]:
    d = tempfile.mkdtemp(prefix="ev1415-resume-", dir="/tmp")
    runs = {}
    for part in ("a", "b"):
        out = subprocess.run([sys.executable, __file__, f"_{part}", d], capture_output=True, text=True,
                             check=True)
        runs[part] = json.loads(out.stdout.strip().splitlines()[-1])
    a, b = runs["a"], runs["b"]
    same = {k: a[k] == b[k] for k in ("losses", "digest", "scale", "lr", "seen")}
    return {"bit_identical": all(same.values()), "same": same, "steps_kept": a["steps"],
            "writer": a["writer"], "losses_a": a["losses"][:3], "losses_b": b["losses"][:3]}


def alloc() -> dict[str, Any]:
    d = tempfile.mkdtemp(prefix="ev1415-alloc-", dir="/tmp")
    state = {"w": torch.randn(8 << 20), "m": np.ones(8 << 20, dtype=np.float32), "step": 0}
    per_save = []
    with Checkpointer(d, keep=2, io="auto") as ck:
        tracemalloc.start()
        for step in range(6):
            state["w"].add_(1)
            state["step"] = step
            tracemalloc.reset_peak()
            base = tracemalloc.get_traced_memory()[0]
            ck.save(step, state)
            per_save.append(tracemalloc.get_traced_memory()[1] - base)
            ck.wait()
        tracemalloc.stop()
        got = ck.load()
        ok = bool(torch.equal(got["w"], state["w"]))
    return {"state_mib": 64, "staging_allocations": ck.staging_allocations,
            "python_peak_bytes_per_save": per_save, "loads_equal": ok}


def skip() -> dict[str, Any]:
    d = tempfile.mkdtemp(prefix="ev1415-skip-", dir="/tmp")
    state = {"w": torch.randn(64 << 20)}
    with Checkpointer(d, io="auto", if_busy="skip") as ck:
        ck.save(1, state)
        ck.wait()
        t0 = time.perf_counter()
        ck.save(2, state)
        taken = [ck.save(s, state) for s in (3, 4)]
        t1 = time.perf_counter()
        ck.wait()
        return {"save_2_3_4_s": round(t1 - t0, 3), "returned": taken, "skipped": ck.stats.skipped,
                "saves": ck.stats.saves, "steps": ck.steps()}


def tail() -> dict[str, Any]:
    d = tempfile.mkdtemp(prefix="ev1415-tail-", dir="/tmp")
    state = {"a": torch.arange(4097, dtype=torch.uint8), "empty": torch.zeros(0, 5),
             "b": np.arange(3 * 1000 + 1, dtype=np.int16), "c": torch.ones(12345, dtype=torch.float64),
             "z": np.zeros((0,), dtype=np.float32), "last": torch.arange(777, dtype=torch.int32)}
    with Checkpointer(d, io="direct") as ck:
        ck.save(0, state)
        ck.wait()
        got = ck.load()
        data = next(p for p in Path(d).iterdir() if p.suffix == ".bin")
        equal = all((torch.equal(torch.as_tensor(got[k]), torch.as_tensor(v))
                     and tuple(np.shape(got[k])) == tuple(np.shape(v))) for k, v in state.items())
        return {"data_bytes": data.stat().st_size, "off_4k": data.stat().st_size % 4096,
                "writer": ck.writer_choice.name, "reason": ck.writer_choice.reason, "equal": equal}


def fulldisk(d: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    small = {"v": np.arange(1 << 20, dtype=np.int64)}  # 8 MiB
    ck = Checkpointer(d, io="auto")
    ck.save(1, small)
    ck.wait()
    out["writer"] = f"{ck.writer_choice.name} - {ck.writer_choice.reason}"
    ck.save(2, {"v": np.ones(100 << 17, dtype=np.int64)})  # 100 MiB into what is left of 64 MiB
    try:
        ck.wait()
        out["error"] = None
    except WriteError as e:
        out["error"] = f"{type(e).__name__}: {e}"
    out["latest"] = ck.latest()
    out["previous_ok"] = bool(np.array_equal(ck.load()["v"], small["v"]))
    out["files"] = sorted(p.name for p in Path(d).iterdir())
    ck.save(3, small)
    ck.wait()
    out["after"] = ck.latest()
    ck.close()
    return out


def train_ck() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(
        torch.randn(640, 256), torch.randint(0, 10, (640,))), batch_size=32)
    with Checkpointer(tempfile.mkdtemp(prefix="ev1415-diag-", dir="/tmp"), keep=1) as ck:
        for epoch in range(3):
            for i, (x, y) in enumerate(data):
                loss = torch.nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                if i % 10 == 9:
                    ck.save(epoch * 100 + i, {"model": model.state_dict(), "opt": opt.state_dict()})


def diagnose() -> dict[str, Any]:
    out = Path(tempfile.mkdtemp(prefix="ev1415-diag-", dir="/tmp")) / "report.json"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent / "src")}
    subprocess.run([sys.executable, "-m", "feedline", "diagnose", "--json", str(out), "--", sys.executable,
                    __file__, "_train_ck"], check=True, env=env, capture_output=True)
    doc = json.loads(out.read_text())
    return {"checkpoint_stage": doc["stages"].get("checkpoint"), "verdict": doc.get("verdict")}


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "_train_ck":
        train_ck()
    elif what in ("_a", "_b"):
        print(json.dumps(run_a(sys.argv[2]) if what == "_a" else run_b(sys.argv[2])))
    elif what == "fulldisk":
        print(json.dumps(fulldisk(sys.argv[2]), indent=1))
    else:
        print(json.dumps({"resume": resume, "alloc": alloc, "skip": skip, "tail": tail,
                          "diagnose": diagnose}[what](), indent=1))
