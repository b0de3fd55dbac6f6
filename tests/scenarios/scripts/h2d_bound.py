"""H2D-bound (needs CUDA): 64 MiB pageable batches copied with a blocking .to("cuda").

The loader hands over ready tensors (no read, no decode); the step on the GPU
is one small reduction. Almost all of each step is the synchronous copy from
pageable memory, so the verdict is data-bound with "h2d" binding, and the
pageable-copy finding names the fix.
"""

import torch
from torch.utils.data import DataLoader, Dataset


class Ready(Dataset):
    def __init__(self) -> None:
        self.blocks = [torch.randn(16, 1024, 1024) for _ in range(4)]  # 64 MiB each

    def __len__(self) -> int:
        return 10_000

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.blocks[i % 4]


if __name__ == "__main__":
    loader = DataLoader(Ready(), batch_size=None, num_workers=0, pin_memory=False)
    total = torch.zeros((), device="cuda")
    for x in loader:
        x = x.to("cuda")
        total += x[0, 0, :16].sum()
    print(float(total))
