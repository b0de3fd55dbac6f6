"""feedline.Loader over shards packed from Python, with process workers whose ``decode=``
talks to a decoder process each worker starts on its first record and keeps for the run
(``subprocess.Popen(..., stdin=PIPE, stdout=PIPE)``, one request line out, one line back),
the way code wraps a command-line decoder it does not want to start per record. The
decoder burns about 5 ms of CPU (a measured spin) per record. 2 process workers on 2
cores, batch 8 (40 ms of decoder CPU a batch, about 20 ms with two) against a 4 ms step;
2 epochs of 16 batches.

Truth: data-bound on decode: the worker processes wait on a pipe, but the decoder at its
other end is on the CPU the whole time. The run is 32 steps whatever diagnose does.
"""

import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

import feedline

DECODER = """
import sys, time
for line in sys.stdin:
    end = time.process_time() + 0.005
    while time.process_time() < end:
        pass
    v = float(line.split()[0])
    sys.stdout.write(" ".join(str(v * k) for k in range(6)) + "\\n")
    sys.stdout.flush()
"""

_decoder: tuple[int, subprocess.Popen] | None = None


def decoder() -> subprocess.Popen:
    """This process's decoder, started on first use (each worker process starts its own)."""
    global _decoder
    if _decoder is None or _decoder[0] != os.getpid():
        proc = subprocess.Popen([sys.executable, "-S", "-u", "-c", DECODER], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, bufsize=1)
        _decoder = (os.getpid(), proc)
    return _decoder[1]


def parse(raw: bytes) -> np.ndarray:
    proc = decoder()
    proc.stdin.write(f"{np.frombuffer(raw, dtype=np.float32)[0]}\n")
    proc.stdin.flush()
    return np.array([float(v) for v in proc.stdout.readline().split()], dtype=np.float32)


def records():
    for i in range(128):
        yield {"__key__": f"rec-{i:04d}", "bin": np.full(4, i % 5, dtype=np.float32).tobytes(),
               "cls": i % 3}


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "records")
        feedline.pack_samples(records(), out)
        loader = feedline.Loader(out, batch_size=8, workers=2, worker_type="process",
                                 decode={"bin": parse}, seed=0)
        net = torch.nn.Linear(6, 3)
        opt = torch.optim.SGD(net.parameters(), lr=0.01)
        for epoch in range(2):
            loader.set_epoch(epoch)
            n = 0
            for batch in loader:
                t0 = time.perf_counter()
                x, y = torch.as_tensor(batch["bin"]), torch.as_tensor(batch["cls"])
                loss = torch.nn.functional.cross_entropy(net(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                time.sleep(max(0.0, 0.004 - (time.perf_counter() - t0)))
                n += 1
            print(f"epoch {epoch}: {n} batches")
