"""Each DataLoader worker starts one long-lived decoder process in ``worker_init_fn`` and
talks to it through pipes (``subprocess.Popen(..., stdin=PIPE, stdout=PIPE)``, one request
line out, one sample line back), the way repos keep an ``ffmpeg`` or ``sox`` process
streaming instead of paying its start-up per sample. The decoder burns about 12 ms of CPU
(a measured spin) per request. 2 workers on 2 cores, batch 4 (4 x 12 ms a batch per
worker: about 25 ms a batch with two) against a 4 ms step; 2 epochs of 10 batches.

Truth: data-bound on decode: the workers wait on a pipe, but the process at its other end
is on the CPU the whole time. The run is 20 steps whatever diagnose does.
"""

import subprocess
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

DECODER = """
import sys, time
for line in sys.stdin:
    end = time.process_time() + 0.012
    while time.process_time() < end:
        pass
    i = int(line)
    sys.stdout.write(" ".join(str((i * k) % 7) for k in range(6)) + "\\n")
    sys.stdout.flush()
"""


class Clips(Dataset):
    proc = None

    def __len__(self) -> int:
        return 40

    def __getitem__(self, i):
        self.proc.stdin.write(f"{i}\n")
        self.proc.stdin.flush()
        values = self.proc.stdout.readline().split()
        return torch.tensor([float(v) for v in values]), torch.tensor(i % 3)


def start_decoder(worker_id: int) -> None:
    ds = get_worker_info().dataset
    ds.proc = subprocess.Popen([sys.executable, "-S", "-u", "-c", DECODER], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True, bufsize=1)


if __name__ == "__main__":
    torch.set_num_threads(1)
    net = torch.nn.Linear(6, 3)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    loader = DataLoader(Clips(), batch_size=4, shuffle=True, num_workers=2,
                        worker_init_fn=start_decoder)
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
