"""A tqdm progress bar around the loader and gradient accumulation (optimizer step every
4 batches); 2 workers with 1 ms of reads per batch; each micro-batch's forward/backward
takes 50 ms (the device).

Truth: compute-bound; the loader is far ahead of a 50 ms step.
"""

import time

import torch
from torch.utils.data import DataLoader, TensorDataset
from tqdm import tqdm


class Slowish(TensorDataset):
    def __getitem__(self, i):
        time.sleep(0.000125)
        return super().__getitem__(i)


def main() -> None:
    data = Slowish(torch.randn(320, 20), torch.randn(320))
    loader = DataLoader(data, batch_size=8, shuffle=True, num_workers=2)
    model = torch.nn.Linear(20, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    accum = 4
    for epoch in range(2):
        bar = tqdm(loader, desc=f"epoch {epoch}", mininterval=0.5)
        for i, (x, y) in enumerate(bar):
            t0 = time.perf_counter()
            loss = ((model(x).squeeze(1) - y) ** 2).mean() / accum
            loss.backward()
            if (i + 1) % accum == 0:
                opt.step()
                opt.zero_grad()
            time.sleep(max(0.0, 0.050 - (time.perf_counter() - t0)))
            bar.set_postfix(loss=f"{loss.item():.3f}")
        print(f"epoch {epoch} done: {i + 1} micro-batches")


if __name__ == "__main__":
    main()
