"""Child for the /dev/shm kill tests: a process-worker loader that SIGKILLs itself at
one named point of worker start-up (argv: shm_dir, point). Run as a script."""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from faults_helpers import Numbers


def die(*_: Any) -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def wrap(obj: Any, name: str, before: bool) -> None:
    real = getattr(obj, name)

    def hooked(*args: Any, **kwargs: Any) -> Any:
        if before:
            die()
        out = real(*args, **kwargs)
        die()
        return out

    setattr(obj, name, hooked)


def main() -> None:
    shm_dir, point = sys.argv[1], sys.argv[2]
    import feedline
    from feedline.pipeline import shm, workers_process

    if point == "fallocate":  # the name exists, nothing unlinked yet
        wrap(os, "posix_fallocate", before=False)
    elif point == "created":  # create() returned
        wrap(shm, "create", before=False)
    elif point == "mapping":  # workers are told to map the arena
        real_wait = workers_process.ProcessWorkers._wait_for

        def wait_for(self: Any, what: str) -> None:
            if what == "mapped":
                die()
            real_wait(self, what)

        workers_process.ProcessWorkers._wait_for = wait_for  # type: ignore[method-assign]
    elif point == "release":  # every worker mapped, before the parent lets go
        wrap(shm, "release", before=True)
    loader = feedline.Loader(Numbers(64), batch_size=4, workers=2, worker_type="process",
                             shm_dir=shm_dir, shuffle=False)
    it = iter(loader)
    next(it)
    if point == "batch":  # mid-epoch, workers busy
        die()
    print("not killed", flush=True)


if __name__ == "__main__":
    main()
