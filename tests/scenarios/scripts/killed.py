"""Trains 100 steps (compute-bound), then ends as argv[1] says: KILL, SEGV, TERM (signals to
itself) or exit3 (os._exit(3)): no Python shutdown, no atexit."""

import os
import signal
import sys

from _common import Samples, Step
from torch.utils.data import DataLoader

if __name__ == "__main__":
    how = sys.argv[1]
    loader = DataLoader(Samples(4096, 8), batch_size=8)
    step = Step(8, 0.010)
    wait_for = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
    for k, (x, y) in enumerate(loader):
        step(x, y)
        if k == 99:
            print("ready", flush=True)
            if how == "wait":  # until a signal from outside ends the run
                signal.pause()
            if how == "exit3":
                os._exit(3)
            os.kill(os.getpid(), getattr(signal, "SIG" + how))
