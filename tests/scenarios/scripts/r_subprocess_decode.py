"""Each sample is decoded by an external program, the way video and audio datasets call
``ffmpeg``: ``subprocess.run([...], capture_output=True, check=True)`` in
``__getitem__``, its stdout parsed into a tensor. The decoder here is a child
interpreter that burns about 25 ms of CPU (a measured spin) before printing the
sample's values. 2 workers on 2 cores, batch 4 (about 4 x 25 ms of the children's CPU,
plus their start-up, a batch) against a 4 ms step; 2 epochs of 8 batches.

Truth: data-bound on decode: the workers wait on their children, but the children are
on the CPU the whole time (more workers than cores would not help). The run is 16
steps whatever diagnose does.
"""

import subprocess
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

DECODER = """
import sys, time
end = time.process_time() + 0.025
while time.process_time() < end:
    pass
i = int(sys.argv[1])
print(" ".join(str((i * k) % 7) for k in range(6)))
"""


class Clips(Dataset):
    def __len__(self) -> int:
        return 32

    def __getitem__(self, i):
        out = subprocess.run([sys.executable, "-S", "-c", DECODER, str(i)],
                             capture_output=True, text=True, check=True)
        return torch.tensor([float(v) for v in out.stdout.split()]), torch.tensor(i % 3)


if __name__ == "__main__":
    torch.set_num_threads(1)
    net = torch.nn.Linear(6, 3)
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    loader = DataLoader(Clips(), batch_size=4, shuffle=True, num_workers=2)
    for epoch in range(2):
        n = 0
        for x, y in loader:
            t0 = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(max(0.0, 0.004 - (time.perf_counter() - t0)))
            n += 1
        print(f"epoch {epoch}: {n} batches")
