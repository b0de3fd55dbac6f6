"""A user's training loop for the resume test: ``ck_train.py DIR STEPS SAVE_AT`` (the crashing child).

Real state of every awkward kind: a TransformerEncoder LM whose head is tied to
its embedding, a conv net with BatchNorm buffers and dropout, one ``Linear``
shared by both models, an embedding table, SGD (momentum, nesterov), AdamW
(amsgrad, ``step`` tensors) and Adam, three LR schedulers, ``torch.amp.GradScaler``, the torch,
numpy-global (a tuple holding an array) and ``random`` (a tuple of ints) RNG
states, and a ``feedline.Loader`` (2 threads) mid-epoch. As a script it trains,
saves at ``SAVE_AT``, trains two more steps, waits for the save and kills
itself with SIGKILL; :func:`run` is the same loop for the test process (from
scratch, or resumed from the folder's latest checkpoint). Each step's loss is
returned/printed as ``float.hex``.
"""

from __future__ import annotations

import os
import random
import signal
import sys
from typing import Any

import numpy as np
import torch
from torch import nn

import feedline
from feedline.checkpoint import Checkpointer


class Samples:
    def __len__(self) -> int:
        return 24

    def __getitem__(self, i: int) -> dict[str, Any]:
        g = np.random.default_rng(i)
        return {"img": g.standard_normal((3, 8, 8)).astype(np.float32), "tok": g.integers(0, 50, 6), "cls": i % 3}


class TiedLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, dropout=0.1, batch_first=True), 1,
                                         enable_nested_tensor=False)
        self.head = nn.Linear(16, 50, bias=False)
        self.head.weight = self.emb.weight  # tied

    def forward(self, tok: torch.Tensor) -> torch.Tensor:
        return self.head(self.enc(self.emb(tok)))


def build(seed: int) -> tuple[dict[str, nn.Module], dict[str, Any], dict[str, Any], Any, Any]:
    torch.manual_seed(seed)
    conv = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Dropout(0.2), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(4, 3))
    lm, shared = TiedLM(), nn.Linear(3, 3)
    conv.add_module("shared", shared)
    lm.add_module("shared", shared)  # one module in both models: its parameters in both state_dicts
    table = nn.Embedding(300, 8)
    models = {"conv": conv, "lm": lm, "table": table}
    opts = {"conv": torch.optim.SGD(conv.parameters(), lr=0.05, momentum=0.9, nesterov=True),
            "lm": torch.optim.AdamW([p for n, p in lm.named_parameters() if not n.startswith("shared")],
                                    lr=1e-3, amsgrad=True),
            "table": torch.optim.Adam(table.parameters(), lr=1e-2)}
    scheds = {"conv": torch.optim.lr_scheduler.StepLR(opts["conv"], 3, 0.5),
              "lm": torch.optim.lr_scheduler.OneCycleLR(opts["lm"], 0.01, total_steps=50)}
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=2)
    loader = feedline.Loader(Samples(), batch_size=4, workers=2, seed=0)
    return models, opts, scheds, scaler, loader


def run(directory: str, steps: int, save_at: int | None, *, resume: bool = False,
        on_step: Any = None) -> list[str]:
    """Train to ``steps``; save at ``save_at``; ``resume``: from the latest checkpoint, into fresh objects."""
    models, opts, scheds, scaler, loader = build(1234 if resume else 0)
    random.seed(1)
    np.random.seed(2)
    step, epoch, losses = 0, 0, []
    ck = Checkpointer(directory, keep=2)
    if resume:
        st = ck.load(into={"models": {k: m.state_dict() for k, m in models.items()}})
        for k in opts:
            opts[k].load_state_dict(st["opts"][k])
        for k in scheds:
            scheds[k].load_state_dict(st["scheds"][k])
        scaler.load_state_dict(st["scaler"])
        loader.load_state_dict(st["loader"])
        torch.set_rng_state(st["rng"]["torch"])
        np.random.set_state(st["rng"]["np"])
        random.setstate(st["rng"]["py"])
        step, epoch = st["step"], st["epoch"]
    while step < steps:
        loader.set_epoch(epoch)
        for batch in loader:
            step += 1
            noise = torch.from_numpy(np.random.standard_normal((4, 3, 8, 8)).astype(np.float32)) * random.random()
            logits = models["lm"](batch["tok"])
            loss = (nn.functional.cross_entropy(models["conv"](batch["img"] + noise), batch["cls"])
                    + nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 50), batch["tok"][:, 1:].reshape(-1))
                    + models["table"](torch.randint(0, 300, (4, 5))).pow(2).mean())
            for o in opts.values():
                o.zero_grad()
            scaler.scale(loss).backward()
            for o in opts.values():
                scaler.step(o)
            scaler.update()
            for s in scheds.values():
                s.step()
            losses.append(float(loss.detach()).hex())
            if step == save_at:
                ck.save(step, {"models": {k: m.state_dict() for k, m in models.items()},
                               "opts": {k: o.state_dict() for k, o in opts.items()},
                               "scheds": {k: s.state_dict() for k, s in scheds.items()},
                               "scaler": scaler.state_dict(), "loader": loader.state_dict(), "step": step,
                               "epoch": epoch, "rng": {"torch": torch.get_rng_state(), "np": np.random.get_state(),
                                                       "py": random.getstate()}})
            if on_step is not None:
                on_step(step, ck)
            if step >= steps:
                break
        else:
            epoch += 1
    ck.close()
    return losses


def _crash_after(save_at: int) -> Any:
    def on_step(step: int, ck: Checkpointer) -> None:
        print(step, flush=True)
        if step == save_at + 2:
            ck.wait()
            os.kill(os.getpid(), signal.SIGKILL)
    return on_step


if __name__ == "__main__":
    torch.set_num_threads(1)
    run(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), on_step=_crash_after(int(sys.argv[3])))
