"""A 40 ms collate function (CPU) in one worker; items are cheap; the step takes 10 ms.

Truth: data-bound, binding collate.
"""

import torch
from _common import Samples, Step, burn
from torch.utils.data import DataLoader


def collate(items: list) -> tuple:
    burn(0.040)
    xs, ys = zip(*items, strict=True)
    return torch.stack(xs), torch.stack(ys)


if __name__ == "__main__":
    loader = DataLoader(Samples(4096, 8), batch_size=8, num_workers=1, collate_fn=collate)
    step = Step(8, 0.010)
    for x, y in loader:
        step(x, y)
