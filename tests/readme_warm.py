"""Run the README's python blocks in one warm interpreter: ``python readme_warm.py serve SOCK``
imports torch and feedline once, then for each ``python readme_warm.py run SOCK FILE`` forks a
child that runs FILE as ``python FILE`` would: ``__main__``, ``sys.argv``, ``sys.path[0]`` the
script's folder, the client's working folder, environment and stdin/stdout/stderr, exit status
(1 and the traceback for an uncaught exception). Each block still runs in its own process; only
the imports (2-3 s of CPU each on two cores) are shared. No torch op runs before the fork,
so no thread pool is inherited.
"""

from __future__ import annotations

import builtins
import json
import os
import socket
import sys
import types


def serve(path: str) -> None:
    import torch  # noqa: F401  (the shared set-up: what every block imports)

    import feedline
    import feedline.observe  # noqa: F401

    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)
    print("ready", flush=True)
    while True:
        conn, _ = srv.accept()
        with conn:
            msg, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
            while chunk := conn.recv(1 << 16):  # the rest of the request, up to the client's EOF
                msg += chunk
            req = json.loads(msg)
            pid = os.fork()
            if pid == 0:
                srv.close()
                _child(req, fds)
            for fd in fds:
                os.close(fd)
            _, status = os.waitpid(pid, 0)
            conn.sendall(str(os.waitstatus_to_exitcode(status)).encode())


def _child(req: dict, fds: list[int]) -> None:
    for target, fd in zip((0, 1, 2), fds, strict=True):
        os.dup2(fd, target)
        os.close(fd)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115
    sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    script = os.path.abspath(req["file"])
    sys.argv = [req["file"]]
    sys.path[0] = os.path.dirname(script)
    main = types.ModuleType("__main__")  # what `python FILE` runs the file in
    main.__file__ = script
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    code = 0
    try:
        with open(script, encoding="utf-8") as f:
            source = f.read()
        exec(compile(source, script, "exec"), main.__dict__)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, int) and e.code is not None:
            print(e.code, file=sys.stderr)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    sys.exit(code)  # a normal exit: atexit handlers and buffers run as after `python FILE`


def run(path: str, file: str) -> int:
    req = json.dumps({"file": file, "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(path)
        socket.send_fds(conn, [req], [0, 1, 2])
        conn.shutdown(socket.SHUT_WR)
        return int(conn.recv(64) or b"1")


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2])
    else:
        sys.exit(run(sys.argv[2], sys.argv[3]))
