"""An asyncio training service: ``asyncio.run(main())``; each batch comes from
``await loop.run_in_executor(None, next, it, None)`` (the default executor's threads
advance the DataLoader iterator, a different thread from one call to the next), and
the step awaits the "device" (``await asyncio.sleep`` for 25 ms) after a small forward
and backward pass. The data is in memory (num_workers=0, batch 16, well under a
millisecond). 40 steps.

Truth: compute-bound, almost no waiting on data.
"""

import asyncio
import time

import torch
from torch.utils.data import DataLoader, Dataset


class InMemory(Dataset):
    def __init__(self):
        self.x = torch.randn(640, 20)

    def __len__(self):
        return 640

    def __getitem__(self, i):
        return self.x[i], float(i % 2)


async def main():
    loader = DataLoader(InMemory(), batch_size=16, shuffle=True)
    model = torch.nn.Linear(20, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loop = asyncio.get_running_loop()
    it = iter(loader)
    steps = 0
    while (batch := await loop.run_in_executor(None, next, it, None)) is not None:
        x, y = batch
        t0 = time.perf_counter()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(model(x).squeeze(1),
                                                                    y.float())
        opt.zero_grad()
        loss.backward()
        opt.step()
        await asyncio.sleep(max(0.0, 0.025 - (time.perf_counter() - t0)))
        steps += 1
    print(f"steps {steps}")


if __name__ == "__main__":
    asyncio.run(main())
