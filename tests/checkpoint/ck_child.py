"""Child processes for the fault tests (run as a script, never imported by pytest).

``ck_child.py loop DIR N``: save make_state(step) for steps 0..N-1, printing
``staged S`` when save S returns and ``committed S`` as soon as save S+1 returns (save waits for S's commit) and
``committed N-1`` at the end; the parent kills it with SIGKILL at random times.

``ck_child.py fulldisk DIR IO LIMIT``: under RLIMIT_FSIZE=LIMIT, a small save
commits, a large one must fail with WriteError and leave the small one loadable,
and a small save after that works again. Prints one JSON line with the findings.
``ck_child.py tmpfsfull DIR IO SIZE``: the same without the rlimit, DIR being a tmpfs of
SIZE bytes (a real ENOSPC: the large save is SIZE plus 32 KiB).
"""

from __future__ import annotations

import json
import resource
import signal
import sys

import numpy as np


def loop(directory: str, n: int) -> None:
    from ckstate import make_state

    from feedline.checkpoint import Checkpointer

    ck = Checkpointer(directory, keep=3, io="auto")
    print("ready", flush=True)
    for step in range(n):
        ck.save(step, make_state(step))
        print(f"staged {step}", flush=True)
        if step:
            print(f"committed {step - 1}", flush=True)
    ck.wait()
    print(f"committed {n - 1}", flush=True)


def fulldisk(directory: str, io: str, limit: int, rlimit: bool = True) -> None:
    if rlimit:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # get EFBIG instead of being killed
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    from feedline.checkpoint import Checkpointer
    from feedline.errors import WriteError

    out: dict[str, object] = {}
    ck = Checkpointer(directory, io=io)
    small = {"v": np.arange(1000, dtype=np.int64)}
    ck.save(1, small)
    ck.wait()
    ck.save(2, {"v": np.ones(limit // 8 + 4096, dtype=np.int64)})
    try:
        ck.wait()
        out["error"] = None
    except WriteError as e:
        out["error"] = str(e)
        out["error_type"] = type(e).__name__
    out["latest"] = ck.latest()
    out["previous_ok"] = bool(np.array_equal(ck.load()["v"], small["v"]))
    out["files"] = sorted(p.name for p in ck.directory.iterdir())
    ck.save(3, small)
    ck.wait()
    out["after"] = ck.latest()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "loop":
        loop(sys.argv[2], int(sys.argv[3]))
    else:
        fulldisk(sys.argv[2], sys.argv[3], int(sys.argv[4]), rlimit=sys.argv[1] == "fulldisk")
