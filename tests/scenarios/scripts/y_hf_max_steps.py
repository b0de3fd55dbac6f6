"""HF ``Trainer``-like loop driven by ``max_steps``: ``gradient_accumulation_steps=4``
(an optimizer update every 4 micro-batches), ``max_steps=12`` updates, a linear-decay
``OneCycleLR(total_steps=max_steps)`` (it raises if stepped once too often), epochs
computed as ``ceil(max_steps / updates_per_epoch)`` and a ``break`` out of both loops at
``max_steps`` (mid-epoch 2). DataLoader(num_workers=2, persistent_workers=True), in-memory
samples (well under a millisecond per batch) against a 25 ms micro-step.

Truth: compute-bound.
"""

import math
import time
from dataclasses import dataclass

import torch
from torch.utils.data import DataLoader, TensorDataset


@dataclass
class TrainingArguments:
    max_steps: int = 12
    gradient_accumulation_steps: int = 4
    per_device_train_batch_size: int = 8
    dataloader_num_workers: int = 2
    learning_rate: float = 1e-3


def train(args, dataset):
    loader = DataLoader(dataset, batch_size=args.per_device_train_batch_size, shuffle=True,
                        num_workers=args.dataloader_num_workers, persistent_workers=True)
    model = torch.nn.Linear(24, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.learning_rate, total_steps=args.max_steps)
    updates_per_epoch = len(loader) // args.gradient_accumulation_steps
    epochs = math.ceil(args.max_steps / updates_per_epoch)
    global_step, micro = 0, 0
    for epoch in range(epochs):
        epochs_run = epoch + 1
        for step, (x, y) in enumerate(loader):
            t0 = time.perf_counter()
            loss = torch.nn.functional.mse_loss(model(x).squeeze(1), y) / args.gradient_accumulation_steps
            loss.backward()
            time.sleep(max(0.0, 0.025 - (time.perf_counter() - t0)))
            micro += 1
            if (step + 1) % args.gradient_accumulation_steps == 0:
                opt.step()
                sched.step()
                opt.zero_grad()
                global_step += 1
                if global_step >= args.max_steps:
                    break
        if global_step >= args.max_steps:
            break
    print(f"global_step {global_step} epochs {epochs_run} micro-batches {micro}")


if __name__ == "__main__":
    train(TrainingArguments(), TensorDataset(torch.randn(160, 24), torch.randn(160)))
