"""A seeded sweep of hostile cases from the outside (issue 13, round 10).

Every case ends in one of the outcomes docs/faults.md allows: a clear error naming the
thing (a ``FeedlineError`` in Python; exit 1 or 2 with one ``feedline: error`` line from
the CLI, never a traceback), or a success whose data is right (every packed payload is
the bytes of a source file, ``verify`` passes, the source tree is unchanged). Anything
else -- a raw exception, a traceback, a hang, wrong data, a changed source -- is a
failure, listed with its case.

    PYTHONPATH=src .venv/bin/python tests/faults/hostile_sweep.py [--seed 10] [--group pack] [-v]

``test_fault_hostile_sweep.py`` runs it (``slow``). Run as root, cases that need a user
who may not read a folder drop ``CAP_DAC_OVERRIDE`` with ``setpriv``, and the disk-full
cases mount a small tmpfs; without those rights they are skipped and said so.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import random
import resource
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

import feedline  # noqa: E402
import feedline.format  # noqa: E402
from feedline.errors import FeedlineError  # noqa: E402

CaseFn = Callable[[Path], str]
CASES: list[tuple[str, str, CaseFn]] = []


class Failure(Exception):
    """A case ended in an outcome the fault table does not allow."""


class Skip(Exception):
    """This machine cannot run the case (no right to drop capabilities or mount)."""


class Hang(BaseException):
    """A case ran past its deadline. Not an ``Exception``: code under test that wraps every
    exception of a call it makes (a remote client's) would turn it into its own error."""


def add(group: str, name: str, fn: CaseFn) -> None:
    CASES.append((group, name, fn))


# ----------------------------------------------------------------------------- helpers

NO_DAC = ["setpriv", "--bounding-set=-dac_override,-dac_read_search",
          "--inh-caps=-dac_override,-dac_read_search"]


def can_drop_caps() -> bool:
    return os.geteuid() == 0 and shutil.which("setpriv") is not None


def cli(*args: str, timeout: float = 120, fsize: int | None = None, no_dac: bool = False,
        cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "300"}

    def limit() -> None:
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    cmd = [sys.executable, "-m", "feedline", *args]
    if no_dac:
        cmd = NO_DAC + cmd
    try:
        return subprocess.run(cmd, env=env, capture_output=True, timeout=timeout,
                              preexec_fn=limit, cwd=cwd)
    except subprocess.TimeoutExpired as e:
        raise Failure(f"hang: {' '.join(args)} still running after {timeout} s") from e


def cli_clean(res: subprocess.CompletedProcess[bytes], *, codes: tuple[int, ...] = (0, 1, 2),
              names: tuple[str, ...] = ()) -> str:
    """Check a CLI result: no traceback, an allowed exit status, an error line naming one
    of ``names`` when it failed. Returns a short verdict."""
    err = res.stderr.decode("utf-8", "replace")
    if "Traceback" in err or "Traceback" in res.stdout.decode("utf-8", "replace"):
        raise Failure(f"traceback (exit {res.returncode}): {err[-800:]}")
    if res.returncode not in codes:
        raise Failure(f"exit {res.returncode}, expected {codes}: {err[-500:]}")
    if res.returncode != 0:
        err += res.stdout.decode("utf-8", "replace")  # verify lists its problems on stdout
        lines = [ln for ln in err.splitlines() if ln.strip()]
        if not lines:
            raise Failure(f"exit {res.returncode} with nothing on stderr")
        if names and not any(n in err for n in names):
            raise Failure(f"exit {res.returncode}, the error names none of {names}: {err[-500:]}")
        return f"exit {res.returncode}: {lines[-1][:160]}"
    return "exit 0"


def expect_clear(fn: Callable[[], Any], *names: str) -> tuple[str, Any]:
    """Run ``fn``; a FeedlineError naming one of ``names`` (when given) is clear; any
    other exception is a failure. Returns ("error", message) or ("ok", value)."""
    try:
        return "ok", fn()
    except FeedlineError as e:
        text = str(e)
        if names and not any(n in text for n in names):
            raise Failure(f"{type(e).__name__} names none of {names}: {text[:300]}") from e
        return "error", f"{type(e).__name__}: {text[:160]}"
    except Failure:
        raise
    except Hang as e:
        raise Failure(str(e)) from None
    except Exception as e:
        raise Failure(f"raw {type(e).__name__}: {str(e)[:300]}") from e


@contextlib.contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """An in-process case that runs past ``seconds`` is a hang."""

    def fire(*_: Any) -> None:
        raise Hang(f"hang: still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def tree_digest(root: Path) -> dict[str, str]:
    """What a source tree holds (names, kinds, bytes of readable regular files)."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(os.fsencode(root)):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            try:
                st = os.lstat(p)
            except OSError as e:  # a path past PATH_MAX
                out[repr(p)] = f"errno {e.errno}"
                continue
            if stat.S_ISREG(st.st_mode):
                try:
                    with open(p, "rb") as f:
                        out[repr(p)] = hashlib.sha1(f.read(1 << 20)).hexdigest() + str(st.st_size)
                except PermissionError:
                    out[repr(p)] = "unreadable"
            else:
                out[repr(p)] = stat.filemode(st.st_mode)
    return out


def payloads(out: Path, *, verify: bool = True) -> list[bytes]:
    ds = feedline.open_dataset(out, verify=verify)
    got = []
    for i in range(len(ds)):
        for k, v in ds[i].items():
            if not k.startswith("__"):
                got.append(bytes(v))
    return got


def small_dataset(tmp: Path, n: int = 12, size: int = 300) -> tuple[Path, dict[str, bytes]]:
    src = tmp / "src"
    src.mkdir()
    truth = {}
    for i in range(n):
        data = f"{i:04d}".encode() + os.urandom(size + 37 * i)
        (src / f"s{i:03d}.bin").write_bytes(data)
        truth[f"s{i:03d}"] = data
    res = cli("pack", str(src), "--out", str(tmp / "ds"), "-q", "--shard-size", "8KiB")
    if res.returncode != 0:
        raise Failure(f"could not pack the base dataset: {res.stderr[-400:]!r}")
    return tmp / "ds", truth


# ----------------------------------------------------------------------------- pack: trees

_ODD_NAMES = [
    "new\nline.bin", "tab\tname.bin", b"latin\xe9.bin", b"\xff\xfe.bin", "ü/ä.bin",
    "a" * 251 + ".bin", "sp ace .bin", "-dash.bin", "--out.bin", "x.tar", "x.idx",
    "manifest.json", "dots.a.b.c.bin", "UPPER.BIN", "back\\slash.bin", "q?uery*.bin",
    "[br].bin", "%41.bin", ".hidden.bin", "emoji\U0001f600.bin", "nul.", "only",
]


def _name(parent: Path, name: str | bytes) -> bytes:
    return os.path.join(os.fsencode(parent), name if isinstance(name, bytes) else name.encode())


def _write(path: bytes, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def make_tree(src: Path, rng: random.Random, outside: Path) -> dict[str, Any]:
    """A random source tree mixing plain files with the hostile kinds; returns what it
    holds (contents of every plain regular file, whether a privilege drop is needed)."""
    src.mkdir(parents=True)
    info: dict[str, Any] = {"contents": set(), "no_dac": False, "kinds": []}
    n = rng.randint(3, 12)
    for i in range(n):
        data = f"plain{i}-".encode() + rng.randbytes(rng.choice([0, 1, 100, 5000]))
        sub = rng.choice(["", "d1", "d1/d2", "e"])
        _write(_name(src, f"{sub}/p{i:03d}.bin" if sub else f"p{i:03d}.bin"), data)
        info["contents"].add(data)
        if i == 0:
            first = src / sub / "p000.bin"
    kinds = rng.sample(["odd_name", "fifo", "socket", "chardev", "hardlink", "sparse", "empty",
                        "symlink_in", "symlink_out", "dangling", "loop", "unreadable_file",
                        "unreadable_dir", "deep", "long_path", "dir_symlink_out", "big_name"],
                       rng.randint(1, 5))
    info["kinds"] = kinds
    for kind in kinds:
        if kind == "odd_name":
            for name in rng.sample(_ODD_NAMES, 3):
                data = b"odd-" + rng.randbytes(rng.randint(0, 300))
                _write(_name(src, name), data)
                info["contents"].add(data)
        elif kind == "fifo":
            os.mkfifo(src / "fifo.bin")
        elif kind == "socket":
            s = socket.socket(socket.AF_UNIX)
            s.bind(str(src / "sock.bin"))
            s.close()
        elif kind == "chardev":
            if os.geteuid() == 0:
                os.mknod(src / "zero.bin", 0o644 | stat.S_IFCHR, os.makedev(1, 5))
        elif kind == "hardlink":
            os.link(first, src / "hl.bin")
        elif kind == "sparse":
            with open(src / "sparse.bin", "wb") as f:
                f.truncate(rng.choice([1 << 20, 50 << 20]))
                f.seek(rng.randint(0, 1 << 19))
                f.write(b"sparse-mark")
            info["contents"].add((src / "sparse.bin").read_bytes())
        elif kind == "empty":
            (src / "empty.bin").write_bytes(b"")
            info["contents"].add(b"")
        elif kind == "symlink_in":
            (src / "lin.bin").symlink_to(os.path.relpath(first, src))
        elif kind == "symlink_out":
            (outside / "secret.bin").write_bytes(b"SECRET-outside")
            (src / "lout.bin").symlink_to(outside / "secret.bin")
        elif kind == "dir_symlink_out":
            (outside / "od").mkdir(exist_ok=True)
            (outside / "od" / "x.bin").write_bytes(b"SECRET-dir")
            (src / "ldir").symlink_to(outside / "od")
        elif kind == "dangling":
            (src / "dang.bin").symlink_to(src / "nope.bin")
        elif kind == "loop":
            (src / "loopd").mkdir()
            (src / "loopd" / "back").symlink_to("..")
        elif kind == "unreadable_file":
            (src / "secret_unreadable.bin").write_bytes(b"locked")
            os.chmod(src / "secret_unreadable.bin", 0)
            info["no_dac"] = True
        elif kind == "unreadable_dir":
            (src / "locked").mkdir()
            (src / "locked" / "in.bin").write_bytes(b"in-locked")
            os.chmod(src / "locked", 0)
            info["no_dac"] = True
        elif kind == "deep":
            d = b"/".join([b"d"] * 60)
            data = b"deep-" + rng.randbytes(10)
            _write(_name(src, d + b"/deep.bin"), data)
            info["contents"].add(data)
        elif kind == "long_path":
            d = "/".join(["x" * 200] * 22)  # a 4.4 KB path: longer than PATH_MAX
            data = b"long-" + rng.randbytes(10)
            base = os.open(src, os.O_RDONLY)
            try:
                for part in d.split("/"):
                    os.mkdir(part, dir_fd=base)
                    nxt = os.open(part, os.O_RDONLY, dir_fd=base)
                    os.close(base)
                    base = nxt
                fd = os.open("long.bin", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=base)
                os.write(fd, data)
                os.close(fd)
            finally:
                os.close(base)
            info["contents"].add(data)
        elif kind == "big_name":
            data = b"bigname-" + rng.randbytes(5)
            _write(_name(src, "n" * 255), data)  # no extension: skipped and listed
    return info


def _chmod_back(root: Path) -> None:
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            if not os.path.islink(p):
                with contextlib.suppress(OSError):
                    os.chmod(p, 0o755)


def pack_tree_case(seed: int) -> CaseFn:
    def run(tmp: Path) -> str:
        rng = random.Random(seed)
        outside = tmp / "outside"
        outside.mkdir()
        src = tmp / "src"
        info = make_tree(src, rng, outside)
        if info["no_dac"] and not can_drop_caps():
            raise Skip("needs setpriv as root to make a folder unreadable")
        os.chmod(tmp, 0o755)
        before = tree_digest(src)
        key = rng.choice(["webdataset", "file", "folder"])
        args = ["pack", str(src), "--out", str(tmp / "out"), "-q", "--key", key,
                "-j", str(rng.randint(1, 3)), "--shard-size", rng.choice(["4KiB", "1MiB", "1GiB"])]
        follow = rng.random() < 0.3
        if follow:
            args.append("--follow-symlinks")
        res = cli(*args, no_dac=info["no_dac"], timeout=180)
        verdict = cli_clean(res, codes=(0, 1, 2) if "loop" in info["kinds"] else (0, 1),
                            names=("locked", "secret_unreadable", "loopd", "src"))
        if tree_digest(src) != before:
            raise Failure("the source tree changed")
        if res.returncode == 0:
            got = payloads(tmp / "out")
            allowed = set(info["contents"])
            if follow:
                allowed |= {b"SECRET-outside", b"SECRET-dir"}
            # hard links and in-tree symlinks repeat a plain file's bytes
            wrong = [g[:30] for g in got if g not in allowed]
            if wrong:
                raise Failure(f"packed bytes that are no source file's: {wrong[:3]}")
            if not follow and any(g.startswith(b"SECRET") for g in got):
                raise Failure("packed a file outside the source without --follow-symlinks")
            if key != "folder":
                missing = [c[:20] for c in info["contents"] if c not in set(got)]
                if missing:
                    raise Failure(f"plain files not packed and not an error: {missing[:3]} "
                                  f"stderr={res.stderr[-300:]!r}")
            v = cli("verify", str(tmp / "out"))
            if v.returncode != 0:
                raise Failure(f"verify after a clean pack: exit {v.returncode} {v.stdout[-300:]!r}")
        elif "long_path" in info["kinds"] and b"File name too long" in res.stderr:
            pass  # a path past PATH_MAX (4096 bytes) cannot be opened: named, exit 1
        elif info["no_dac"] is False and "loop" not in info["kinds"]:
            raise Failure(f"pack failed on a tree with nothing unreadable: {verdict}")
        return f"{key} {info['kinds']}: {verdict}"

    return run


for _s in range(40):
    add("pack", f"tree-{_s}", pack_tree_case(_s))


# ----------------------------------------------------------------------------- pack: places

def _plain_src(tmp: Path, n: int = 5) -> Path:
    src = tmp / "src"
    src.mkdir()
    for i in range(n):
        (src / f"s{i}.bin").write_bytes(f"s{i}-".encode() + os.urandom(2000))
    return src


def place_case(kind: str) -> CaseFn:
    def run(tmp: Path) -> str:
        src = _plain_src(tmp)
        before = tree_digest(src)
        no_dac = False
        out = tmp / "out"
        extra: list[str] = []
        fsize = None
        if kind == "out-is-src":
            out = src
        elif kind == "out-in-src":
            out = src / "packed"
        elif kind == "src-in-out":
            out = tmp
        elif kind == "out-is-file":
            out = src / "s0.bin"
        elif kind == "out-readonly":
            ro = tmp / "ro"
            ro.mkdir()
            os.chmod(ro, 0o555)
            out, no_dac = ro / "o", True
        elif kind == "out-existing-readonly":
            assert cli("pack", str(src), "--out", str(out), "-q").returncode == 0
            (src / "s9.bin").write_bytes(b"new")
            before = tree_digest(src)
            os.chmod(out, 0o555)
            no_dac = True
        elif kind == "out-symlink-to-src":
            (tmp / "lnk").symlink_to(src)
            out = tmp / "lnk"
        elif kind == "out-dev-null":
            out = Path("/dev/null")
        elif kind == "out-proc":
            out = Path("/proc/self/feedline-out")
        elif kind == "out-nonempty-foreign":
            out.mkdir()
            (out / "notes.txt").write_text("mine")
            (out / "shard-000000.tar").write_bytes(b"not mine")
        elif kind.startswith("fsize-"):
            fsize = int(kind.split("-")[1])
        elif kind == "src-twice":
            extra = [str(src)]
        elif kind == "src-and-sub":
            (src / "sub").mkdir()
            (src / "sub" / "t.bin").write_bytes(b"sub")
            extra = [str(src / "sub")]
            before = tree_digest(src)
        elif kind == "src-is-binary-file":
            return _binary_list_file(tmp, src)
        elif kind == "src-empty":
            shutil.rmtree(src)
            src.mkdir()
            before = {}
        elif kind == "src-only-hidden":
            shutil.rmtree(src)
            src.mkdir()
            (src / ".git").mkdir()
            (src / ".git" / "x.bin").write_bytes(b"h")
            before = tree_digest(src)
        elif kind == "src-root-dev":
            src = Path("/dev/null")
            before = {}
        elif kind == "out-in-src-rerun":
            out = src / "o"
            assert cli("pack", str(src), "--out", str(out), "-q").returncode == 0
            before = tree_digest(src)
        res = cli("pack", str(src), *extra, "--out", str(out), "-q", fsize=fsize, no_dac=no_dac)
        names = (str(out), out.name, str(src), "File too large", "no files")
        verdict = cli_clean(res, names=names)
        after = tree_digest(src) if src != Path("/dev/null") else {}
        if kind in ("out-in-src", "out-in-src-rerun"):
            after = {k: v for k, v in after.items() if "/src/o" not in k and "/src/packed" not in k}
            before = {k: v for k, v in before.items() if "/src/o" not in k and "/src/packed" not in k}
        if kind not in ("src-in-out",) and after != before:
            raise Failure(f"the source tree changed: {verdict}")
        if kind == "src-in-out" and res.returncode == 0:
            after = tree_digest(src)
            if after != before:
                raise Failure("packing into the source's parent changed the source")
        if res.returncode == 0 and (out / "manifest.json").exists():
            got = payloads(out)
            srcs = {p.read_bytes() for p in src.rglob("*.bin") if p.is_file()} if src.is_dir() else set()
            wrong = [g[:20] for g in got if g not in srcs]
            if wrong:
                raise Failure(f"packed bytes that are no source's: {wrong[:3]}")
        if kind == "out-nonempty-foreign" and (out / "notes.txt").read_text() != "mine":
            raise Failure("a foreign file in --out was changed")
        return verdict

    return run


def _binary_list_file(tmp: Path, src: Path) -> str:
    """A JPEG given as SRC is read as a list file: its bytes are not paths."""
    photo = tmp / "photo.jpg"
    photo.write_bytes(b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + os.urandom(3000) + b"\n\x00/etc/passwd\n")
    res = cli("pack", str(photo), "--out", str(tmp / "out"), "-q")
    verdict = cli_clean(res, names=("photo.jpg",))
    if res.returncode == 0:
        got = payloads(tmp / "out")
        if any(b"root:" in g for g in got):
            raise Failure("a binary file taken as a list packed /etc/passwd")
    return verdict


for _k in ["out-is-src", "out-in-src", "src-in-out", "out-is-file", "out-readonly",
           "out-existing-readonly", "out-symlink-to-src", "out-dev-null", "out-proc",
           "out-nonempty-foreign", "fsize-1", "fsize-600", "fsize-3000", "fsize-9000",
           "src-twice", "src-and-sub", "src-is-binary-file", "src-empty", "src-only-hidden",
           "src-root-dev", "out-in-src-rerun"]:
    add("pack", f"place-{_k}", place_case(_k))


def tmpfs_case(size_kib: int) -> CaseFn:
    def run(tmp: Path) -> str:
        if os.geteuid() != 0:
            raise Skip("needs root to mount a tmpfs")
        mnt = tmp / "mnt"
        mnt.mkdir()
        if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(mnt)],
                          capture_output=True).returncode != 0:
            raise Skip("mount refused")
        try:
            src = tmp / "src"
            src.mkdir()
            for i in range(20):
                (src / f"s{i:02d}.bin").write_bytes(os.urandom(9000 + 1000 * i))
            before = tree_digest(src)
            res = cli("pack", str(src), "--out", str(mnt / "o"), "-q", "--shard-size", "40KiB")
            verdict = cli_clean(res, names=("No space left", "shard"))
            if res.returncode == 0:
                got = payloads(mnt / "o")
                if sorted(got) != sorted(p.read_bytes() for p in src.iterdir()):
                    raise Failure("a pack that exited 0 on a full disk holds other bytes")
            elif (mnt / "o" / "manifest.json").exists():
                raise Failure("a failed pack left a manifest")
            if tree_digest(src) != before:
                raise Failure("the source tree changed")
            return verdict
        finally:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)

    return run


for _kib in (8, 64, 128, 200, 300):
    add("pack", f"tmpfs-{_kib}k", tmpfs_case(_kib))


def list_file_case(kind: str) -> CaseFn:
    def run(tmp: Path) -> str:
        src = _plain_src(tmp)
        lst = tmp / "files.txt"
        names = sorted(p.name for p in src.iterdir())
        texts = {
            "crlf": b"".join(f"src/{n}\r\n".encode() for n in names),
            "nul": b"src/s0.bin\x00src/s1.bin\n", "self": b"files.txt\nsrc/s0.bin\n",
            "missing": b"src/s0.bin\nsrc/nope.bin\n", "dir": b"src\n",
            "dotdot": b"src/../src/s0.bin\n../../etc/hostname\n",
            "absolute": f"{src}/s0.bin\n/etc/hostname\n".encode(), "empty": b"",
            "comments": b"# all\n\n   \n", "dup": b"src/s0.bin\nsrc/s0.bin\n",
            "utf16": "src/s0.bin\n".encode("utf-16"), "spaces": b" src/s0.bin \n",
        }
        lst.write_bytes(texts[kind])
        before = tree_digest(src)
        res = cli("pack", str(lst), "--out", str(tmp / "out"), "-q")
        verdict = cli_clean(res, names=("files.txt", "nope.bin", "s0.bin", "no files"))
        if res.returncode == 0:
            got = payloads(tmp / "out")
            srcs = {p.read_bytes() for p in src.iterdir()} | {lst.read_bytes()}
            wrong = [g[:20] for g in got if g not in srcs]
            if wrong:
                raise Failure(f"packed bytes that are no listed file's: {wrong[:3]}")
            if kind == "dup" and len(got) != 1:
                raise Failure(f"a file listed twice packed {len(got)} times")
        if tree_digest(src) != before:
            raise Failure("the source tree changed")
        return verdict

    return run


for _k in ["crlf", "nul", "self", "missing", "dir", "dotdot", "absolute", "empty", "comments",
           "dup", "utf16", "spaces"]:
    add("pack", f"list-{_k}", list_file_case(_k))


def changing_case(kind: str, seed: int) -> CaseFn:
    """Sources that vanish, grow or shrink while pack reads them (a thread changes them
    as pack runs in another process); pack must fail naming the file, or pack bytes
    that were the file's at some point, and never touch the other sources."""

    def run(tmp: Path) -> str:
        rng = random.Random(seed)
        src = tmp / "src"
        src.mkdir()
        versions: dict[str, set[bytes]] = {}
        for i in range(200):
            data = f"{i}-".encode() + rng.randbytes(rng.choice([10, 3000, 70000]))
            (src / f"s{i:03d}.bin").write_bytes(data)
            versions[f"s{i:03d}.bin"] = {data}
        proc = subprocess.Popen([sys.executable, "-m", "feedline", "pack", str(src), "--out",
                                 str(tmp / "out"), "-q", "--no-fsync"],
                                env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(rng.uniform(0.3, 1.2))
        victims = rng.sample(sorted(versions), 20)
        for name in victims:
            p = src / name
            if kind == "vanish":
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
            elif kind == "grow":
                with open(p, "ab") as f:
                    f.write(b"grown" * 2000)
                versions[name].add(p.read_bytes())
            elif kind == "shrink":
                with open(p, "r+b") as f:
                    f.truncate(3)
                versions[name].add(p.read_bytes())
        try:
            out, err = proc.communicate(timeout=180)
        except subprocess.TimeoutExpired as e:
            proc.kill()
            raise Failure("hang: pack of changing sources") from e
        res = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        verdict = cli_clean(res, codes=(0, 1), names=tuple(victims))
        if res.returncode == 0:
            allowed = set().union(*versions.values())
            got = payloads(tmp / "out")
            wrong = [g[:20] for g in got if g not in allowed]
            if wrong:
                raise Failure(f"packed bytes that were never a source's: {wrong[:3]}")
        return f"{kind}: {verdict}"

    return run


for _i, _k in enumerate(["vanish", "grow", "shrink"] * 2):
    add("pack", f"changing-{_k}-{_i}", changing_case(_k, _i))


# ----------------------------------------------------------------------------- shards


def _reread(ds_dir: Path, truth: dict[str, bytes]) -> str:
    """Open and read everything with verify on and off; check the data and verify()."""
    outcomes = []
    for verify in (True, False):
        def read(verify: bool = verify) -> dict[str, bytes]:
            ds = feedline.open_dataset(ds_dir, verify=verify)
            return {ds[i]["__key__"]: bytes(ds[i]["bin"]) for i in range(len(ds))}

        with deadline(60):
            kind, value = expect_clear(read, "shard", "manifest", "idx", "index", "path", "key")
        if kind == "ok":
            wrong = sorted(k for k, v in value.items() if truth.get(k) != v)
            if wrong or set(value) - set(truth):
                if verify:
                    raise Failure(f"verify=True returned wrong bytes for {wrong[:3]}")
                with deadline(60):
                    vk, problems = expect_clear(lambda: feedline.format.verify(ds_dir))
                if vk == "ok" and not problems:
                    raise Failure(f"wrong bytes for {wrong[:3]} and verify() finds nothing")
                outcomes.append("wrong bytes at verify=False, verify() names them")
            elif len(value) < len(truth):
                if verify:
                    raise Failure(f"samples silently lost: {sorted(set(truth) - set(value))[:3]}")
                outcomes.append("fewer samples")
            else:
                outcomes.append("exact")
        else:
            outcomes.append(value)
    res = cli("verify", str(ds_dir))
    cli_clean(res, codes=(0, 1, 2))
    return " | ".join(outcomes)


def _edit_index(ds_dir: Path, shard: int, edit: Callable[[bytearray], None],
                reseal: bool) -> None:
    """Apply ``edit`` to a shard's .idx; with ``reseal`` recompute its own checksum and the
    manifest's record of it, as a buggy or hostile writer would."""
    from feedline.format import _index as ix

    man = json.loads((ds_dir / "manifest.json").read_text())
    rec = man["shards"][shard]
    path = ds_dir / rec["index"]
    data = bytearray(path.read_bytes())
    edit(data)
    if reseal and len(data) >= ix.HEADER_DTYPE.itemsize:
        data[ix._CHECKSUM_AT:ix._CHECKSUM_AT + 8] = bytes(8)
        import xxhash

        h = xxhash.xxh3_64()
        h.update(bytes(data))
        data[ix._CHECKSUM_AT:ix._CHECKSUM_AT + 8] = h.intdigest().to_bytes(8, "little")
        from feedline.format._checksum import checksum_function

        fn = checksum_function(man.get("checksum_algo", "xxh3"))
        rec["index_checksum"] = f"{fn(bytes(data)):016x}"
        rec["index_size"] = len(data)
        (ds_dir / "manifest.json").write_text(json.dumps(man))
    path.write_bytes(bytes(data))


def _header_field(name: str) -> tuple[int, str]:
    from feedline.format import _index as ix

    off, fmt = ix.HEADER_DTYPE.fields[name][1], ix.HEADER_DTYPE.fields[name][0].str
    return off, fmt


def index_edit_case(field: str, value: int, reseal: bool) -> CaseFn:
    def run(tmp: Path) -> str:
        ds_dir, truth = small_dataset(tmp)
        off, fmt = _header_field(field)
        width = int(fmt[2:])

        def edit(data: bytearray) -> None:
            v = value % (1 << (8 * width))
            data[off:off + width] = v.to_bytes(width, "little")

        _edit_index(ds_dir, 0, edit, reseal)
        return _reread(ds_dir, truth)

    return run


for _f, _vals in {"num_samples": [0, 1, 2**32, 2**64 - 1, -1], "num_members": [0, 2**40, -1],
                  "num_fields": [0, 70000, -1], "keys_bytes": [0, 2**63, -1],
                  "fields_bytes": [1, 2**63], "shard_size": [0, 1, 2**63],
                  "version": [0, 3, 2**32 - 1], "align": [4096, 3, 2**32 - 1],
                  "checksum_algo": [0, 9]}.items():
    for _v in _vals:
        add("shards", f"idx-header-{_f}={_v}", index_edit_case(_f, _v, True))
for _f in ("num_samples", "shard_size", "keys_bytes"):
    add("shards", f"idx-header-{_f}-unsealed", index_edit_case(_f, 7, False))


def member_edit_case(what: str) -> CaseFn:
    """Hostile member records with a valid checksum: past the end, overlapping, out of
    order, a field id out of range, a sample id out of range, a zero or huge size."""

    def run(tmp: Path) -> str:
        from feedline.format import _index as ix

        ds_dir, truth = small_dataset(tmp)
        h = ix.HEADER_DTYPE.itemsize
        m = ix.MEMBER_DTYPE.itemsize

        def edit(data: bytearray) -> None:
            recs = np.frombuffer(data, ix.MEMBER_DTYPE, count=2, offset=h).copy()
            if what == "offset-past-end":
                recs[1]["offset"] = 10**9
            elif what == "offset-huge":
                recs[1]["offset"] = 2**64 - 512
            elif what == "size-huge":
                recs[0]["size"] = 2**63
            elif what == "size-zero":
                recs[0]["size"] = 0
            elif what == "overlap":
                recs[1]["offset"] = recs[0]["offset"]
                recs[1]["size"] = recs[0]["size"]
            elif what == "overlap-partial":
                recs[1]["offset"] = recs[0]["offset"] + 1
            elif what == "swap":
                recs[[0, 1]] = recs[[1, 0]]
            elif what == "field-out-of-range":
                recs[0]["field"] = 999
            elif what == "sample-out-of-range":
                recs[1]["sample"] = 2**32 - 1
            elif what == "same-sample":
                recs[1]["sample"] = recs[0]["sample"]
            elif what == "offset-into-header":
                recs[0]["offset"] = 0
            elif what == "offset-unaligned":
                recs[0]["offset"] += 3
            elif what == "checksum-of-other":
                recs[0]["checksum"] = recs[1]["checksum"]
            data[h:h + 2 * m] = recs.tobytes()

        _edit_index(ds_dir, 0, edit, True)
        return _reread(ds_dir, truth)

    return run


for _w in ["offset-past-end", "offset-huge", "size-huge", "size-zero", "overlap", "overlap-partial",
           "swap", "field-out-of-range", "sample-out-of-range", "same-sample", "offset-into-header",
           "offset-unaligned", "checksum-of-other"]:
    add("shards", f"idx-member-{_w}", member_edit_case(_w))


def boundary_case(target: str, where: str, how: str) -> CaseFn:
    """Truncation or a bit flip at each structure boundary of a shard or its index."""

    def run(tmp: Path) -> str:
        from feedline.format import _index as ix

        ds_dir, truth = small_dataset(tmp)
        man = json.loads((ds_dir / "manifest.json").read_text())
        rec = man["shards"][0]
        path = ds_dir / (rec["name"] if target == "tar" else rec["index"])
        data = bytearray(path.read_bytes())
        if target == "tar":
            spots = {"first-header": 0, "first-size": 124, "first-payload": 512,
                     "second-header": 1024, "end-blocks": len(data) - 1024,
                     "last-byte": len(data) - 1}
        else:
            n = int(np.frombuffer(data, ix.HEADER_DTYPE, count=1)[0]["num_members"])
            h, m = ix.HEADER_DTYPE.itemsize, ix.MEMBER_DTYPE.itemsize
            spots = {"magic": 0, "counts": 16, "checksum": ix._CHECKSUM_AT, "members": h,
                     "keys": h + n * m, "last-byte": len(data) - 1}
        at = spots[where]
        if how == "cut":
            del data[at:]
        else:
            data[at] ^= 0x10
        path.write_bytes(bytes(data))
        return _reread(ds_dir, truth)

    return run


for _t, _wheres in {"tar": ["first-header", "first-size", "first-payload", "second-header",
                            "end-blocks", "last-byte"],
                    "idx": ["magic", "counts", "checksum", "members", "keys", "last-byte"]}.items():
    for _w in _wheres:
        for _h in ("cut", "flip"):
            add("shards", f"{_t}-{_h}-{_w}", boundary_case(_t, _w, _h))


_WRONG = {"str": "12", "neg": -1, "huge": 10**30, "float": 1.5, "null": None, "list": [],
          "dict": {}, "bool": True, "nan": float("nan")}


def manifest_type_case(path: tuple[Any, ...], wrong: str) -> CaseFn:
    def run(tmp: Path) -> str:
        ds_dir, truth = small_dataset(tmp)
        man = json.loads((ds_dir / "manifest.json").read_text())
        node = man
        for p in path[:-1]:
            node = node[p]
        node[path[-1]] = _WRONG[wrong]
        (ds_dir / "manifest.json").write_text(json.dumps(man))
        return _reread(ds_dir, truth)

    return run


_MAN_PATHS = [("version",), ("num_samples",), ("align",), ("checksum_algo",), ("fields",),
              ("shards",), ("shards", 0, "size"), ("shards", 0, "num_samples"),
              ("shards", 0, "name"), ("shards", 0, "index"), ("shards", 0, "checksum"),
              ("shards", 0, "index_size"), ("shards", 0, "index_checksum"), ("format",)]
_rng = random.Random(10)
for _p in _MAN_PATHS:
    for _w in _rng.sample(sorted(_WRONG), 3):
        add("shards", f"manifest-{'.'.join(map(str, _p))}={_w}", manifest_type_case(_p, _w))


_SHARD0_EDITS = {"escape-name": ("name", "../../../../etc/hostname"),
                 "escape-index-abs": ("index", "/etc/hostname"), "name-is-dir": ("name", "."),
                 "name-empty": ("name", ""), "name-nul": ("name", "shard\x00.tar"),
                 "name-is-index": ("name", None)}


def manifest_text_case(kind: str) -> CaseFn:
    def run(tmp: Path) -> str:
        ds_dir, truth = small_dataset(tmp)
        text = (ds_dir / "manifest.json").read_text()
        man = json.loads(text)
        if kind == "dup-shards-key":
            fewer = json.dumps(man["shards"][:1])
            text = text.rstrip().rstrip("}") + f', "shards": {fewer}}}'
        elif kind == "dup-shards-and-count":  # consistent, so only the twice-given keys tell
            fewer = json.dumps(man["shards"][:1])
            count = man["shards"][0]["num_samples"]
            text = text.rstrip().rstrip("}") + f', "shards": {fewer}, "num_samples": {count}}}'
        elif kind == "dup-in-shard-entry":
            text = text.replace('"name": "shard-000000.tar"',
                                '"name": "shard-000000.tar", "name": "shard-000001.tar"')
        elif kind == "dup-num-samples":
            text = text.rstrip().rstrip("}") + ', "num_samples": 1}'
        elif kind == "dup-shard-entry":
            man["shards"].append(man["shards"][0])
            man["num_samples"] += man["shards"][0]["num_samples"]
            text = json.dumps(man)
        elif kind in _SHARD0_EDITS:  # one value of the first shard's record
            field, value = _SHARD0_EDITS[kind]
            man["shards"][0][field] = man["shards"][0]["index"] if value is None else value
            text = json.dumps(man)
        elif kind == "shards-empty":
            man["shards"], man["num_samples"] = [], 0
            text = json.dumps(man)
        elif kind == "bom":
            text = "\ufeff" + text
        elif kind == "top-list":
            text = "[]"
        elif kind == "nested-deep":
            text = "[" * 100000 + "]" * 100000
        elif kind == "nan-literal":
            text = text.replace('"align": 0', '"align": NaN')
        elif kind == "huge-int-literal":
            text = text.replace('"align": 0', '"align": ' + "9" * 5000)
        elif kind == "not-utf8":
            (ds_dir / "manifest.json").write_bytes(b"\xff\xfe" + text.encode())
            return _reread(ds_dir, truth)
        (ds_dir / "manifest.json").write_text(text)
        return _reread(ds_dir, truth)

    return run


for _k in ["dup-shards-key", "dup-shards-and-count", "dup-in-shard-entry", "dup-num-samples", "dup-shard-entry", "escape-name",
           "escape-index-abs", "name-is-dir", "name-empty", "name-nul", "name-is-index",
           "shards-empty", "bom", "top-list", "nested-deep", "nan-literal", "huge-int-literal",
           "not-utf8"]:
    add("shards", f"manifest-{_k}", manifest_text_case(_k))


# ----------------------------------------------------------------------------- loader args

_LOADER_VALUES: dict[str, Any] = {
    "np-int": np.int64(2), "np-nan": np.float64("nan"), "neg-zero": -0.0, "2**63": 2**63,
    "-2**63": -(2**63), "s-1e999": "1e999", "s-nan": "nan", "s-neg": "-1", "s-pad": " 4 ",
    "fraction": Fraction(1, 2), "decimal-nan": Decimal("nan"), "-inf": float("-inf"),
    "np-bool": np.bool_(True), "bytearray": bytearray(b"x"), "s-empty": "",
}
_LOADER_KW = ["batch_size", "device", "shuffle", "seed", "drop_last", "workers", "worker_type",
              "prefetch", "pinned_budget", "io", "decode", "transform", "collate", "on_error",
              "timeout", "in_order", "rank", "world_size", "shm_dir", "start_method", "limits",
              "placement", "decode_on", "decode_size", "stages"]
_SHARED: dict[str, Any] = {}


def _shared_ds() -> Any:
    if "ds" not in _SHARED:
        tmp = Path(tempfile.mkdtemp(prefix="sweep-ds-"))
        _SHARED["ds_dir"], _SHARED["truth"] = small_dataset(tmp, n=16, size=40)
        _SHARED["ds"] = feedline.open_dataset(_SHARED["ds_dir"])
    return _SHARED["ds"]


def loader_arg_case(kw: str, label: str) -> CaseFn:
    def run(tmp: Path) -> str:
        ds = _shared_ds()
        value = _LOADER_VALUES[label]
        base: dict[str, Any] = {"batch_size": 4, "workers": 1, "shuffle": False}
        if kw in ("rank",):
            base["world_size"] = 2
        base[kw] = value

        def go() -> list[list[str]]:
            with feedline.Loader(ds, **base) as loader:
                return [list(b["__key__"]) for b in loader]

        with deadline(60):
            kind, got = expect_clear(go, kw, kw.replace("_", " "))
        if kind == "ok":
            keys = [k for b in got for k in b]
            if len(set(keys)) != len(keys) and kw not in ("rank", "world_size"):
                raise Failure(f"{kw}={value!r}: a sample twice in one epoch")
            if not keys and kw not in ("rank", "world_size"):
                raise Failure(f"{kw}={value!r} accepted, and the epoch is empty")
            suspicious = (isinstance(value, float) and (math.isnan(value) or math.isinf(value))) \
                or isinstance(value, (Fraction, Decimal, bytearray)) \
                or (isinstance(value, str) and kw in ("batch_size", "seed", "workers", "prefetch",
                                                      "rank", "world_size"))
            if suspicious:
                raise Failure(f"{kw}={value!r} accepted ({len(keys)} samples)")
            return f"accepted: {len(keys)} samples"
        return got

    return run


_rng = random.Random(11)
for _kw in _LOADER_KW:
    for _lab in _rng.sample(sorted(_LOADER_VALUES), 3):
        add("loader", f"{_kw}={_lab}", loader_arg_case(_kw, _lab))


_PROCESS_CASES: dict[str, dict[str, Any]] = {
    "timeout-nan": {"timeout": "nan"}, "timeout-neg": {"timeout": -1}, "timeout-zero": {"timeout": 0},
    "shm-proc": {"shm_dir": "/proc"}, "shm-devnull": {"shm_dir": "/dev/null"}, "shm-empty": {"shm_dir": ""},
    "shm-missing": {"shm_dir": "/nonexistent/shm"}, "prefetch-huge": {"prefetch": 10**6},
    "budget-tiny": {"pinned_budget": "1KiB"}, "budget-nan": {"pinned_budget": "nanGiB"},
    "spawn-2": {"start_method": "spawn", "workers": 2}, "workers-0": {"workers": 0},
    "transform-lambda-spawn": {"start_method": "spawn", "transform": lambda s: s},
}


def process_case(label: str) -> CaseFn:
    """Process workers with hostile options: a clear error or the right epoch, and no
    arena of this process left in /dev/shm either way."""

    def run(tmp: Path) -> str:
        ds = _shared_ds()
        kw: dict[str, Any] = {"batch_size": 4, "workers": 1, "shuffle": False,
                              "worker_type": "process", **_PROCESS_CASES[label]}

        def go() -> list[str]:
            with feedline.Loader(ds, **kw) as loader:
                return [k for b in loader for k in b["__key__"]]

        with deadline(120):
            kind, got = expect_clear(go, *_PROCESS_CASES[label], *map(str, _PROCESS_CASES[label].values()))
        left = [n for n in os.listdir("/dev/shm") if n.startswith(f"feedline-{os.getpid()}-")]
        if left:
            raise Failure(f"arenas left in /dev/shm: {left}")
        if kind == "ok":
            if sorted(got) != sorted(_SHARED["truth"]):
                raise Failure(f"an epoch of {len(got)} samples, not the dataset's {len(_SHARED['truth'])}")
            return f"accepted: {len(got)} samples"
        return got

    return run


for _lab in _PROCESS_CASES:
    add("process", f"process-{_lab}", process_case(_lab))


# ----------------------------------------------------------------------------- resume state


def _state_after(ds: Any, k: int, **kw: Any) -> dict[str, Any]:
    with feedline.Loader(ds, batch_size=kw.pop("batch_size", 4), workers=1, **kw) as loader:
        it = iter(loader)
        for _ in range(k):
            next(it)
        return loader.state_dict()


def resume_case(kind: str, seed: int) -> CaseFn:
    def run(tmp: Path) -> str:
        rng = random.Random(seed)
        ds = _shared_ds()
        state = _state_after(ds, 2)
        if kind == "json-cut":
            text = json.dumps(state)
            cut = rng.randint(1, len(text) - 1)
            try:
                state = json.loads(text[:cut])
            except json.JSONDecodeError:
                state = text[:cut]  # a user passing the text they read
        elif kind == "random-edit":
            paths = [(k,) for k in state] + [("counters", k) for k in state["counters"]]
            for _ in range(rng.randint(1, 3)):
                path = rng.choice(paths)
                node = state
                for p in path[:-1]:
                    node = node[p]
                if not isinstance(node, dict):  # an earlier edit replaced the parent
                    continue
                node[path[-1]] = rng.choice([None, "x", -5, 10**20, 1.5, [], {}, True, [-1, 3],
                                             [10**9], float("nan"), "feedline-0"])
        elif kind == "other-dataset":
            other = Path(tempfile.mkdtemp(prefix="sweep-other-", dir=tmp))
            ods, _ = small_dataset(other, n=16, size=41)
            state = _state_after(feedline.open_dataset(ods), 1)
        elif kind == "other-batch-size":
            state = _state_after(ds, 1, batch_size=2)
        elif kind == "map-style":
            from tests_faults_numbers import Numbers  # type: ignore[import-not-found]

            state = _state_after(Numbers(16), 1)
        elif kind == "extra-keys":
            state["surprise"] = 1
        elif kind == "mid-pass":
            pass
        with feedline.Loader(ds, batch_size=4, workers=1) as loader:
            if kind == "mid-pass":
                it = iter(loader)
                next(it)
            with deadline(60):
                got_kind, msg = expect_clear(lambda: loader.load_state_dict(state))
            if got_kind == "ok":
                with deadline(60):
                    rest = [list(b["__key__"]) for b in loader]
                fresh = _state_after(ds, 0)
                del fresh
                keys = [k for b in rest for k in b]
                if len(keys) != len(set(keys)):
                    raise Failure(f"{kind}: accepted state gives a sample twice")
                return f"accepted: {len(keys)} samples after resume"
            return msg

    return run


for _i in range(12):
    add("resume", f"json-cut-{_i}", resume_case("json-cut", _i))
for _i in range(15):
    add("resume", f"random-edit-{_i}", resume_case("random-edit", 100 + _i))
for _k in ["other-dataset", "other-batch-size", "extra-keys", "mid-pass"]:
    add("resume", _k, resume_case(_k, 0))


# ----------------------------------------------------------------------------- writer

_KEYS = ["", "..", "../up", "/abs", "a\x00b", "a\nb", "a.b.c", "k" * 300, "ok", "é/ü", "a//b", "a/",
         ".hidden", "__key__", "x/./y", "%2E", "CON", " ", "\udcff"]
_FIELDS = ["bin", "", "a/b", "..", "x.", ".x", "__url__", "b" * 300, "jpg", "npy", "cls", "json",
           "bin\n", "txt", "BIN", "f32"]


def _values(rng: random.Random) -> Any:
    return rng.choice([b"bytes", "text", 5, -3, 1.5, float("nan"), None, True, np.arange(3),
                       np.array(["s"]), np.zeros((2, 0)), bytearray(b"ba"), memoryview(b"mv"),
                       {"a": [1, 2]}, [1, 2], (1,), object(), 2**70, b"", np.float64(2.5),
                       np.array([object()], dtype=object), np.arange(6).reshape(2, 3)[:, ::2]])


def writer_case(seed: int) -> CaseFn:
    """DatasetWriter given hostile keys, field names and values: each sample is refused
    with a FeedlineError naming key or field, or written and read back as given."""

    def run(tmp: Path) -> str:
        rng = random.Random(seed)
        out = tmp / "out"
        written: dict[str, dict[str, Any]] = {}
        refused = 0
        with deadline(60):
            try:
                w = feedline.DatasetWriter(out, shard_size=rng.choice(["4KiB", "1MiB"]))
            except FeedlineError as e:
                return f"writer refused: {e}"
            for i in range(rng.randint(2, 6)):
                sample: dict[str, Any] = {}
                if rng.random() < 0.7:
                    sample["__key__"] = rng.choice(_KEYS) if rng.random() < 0.6 else f"s{i}"
                for _ in range(rng.randint(1, 3)):
                    field = rng.choice(_FIELDS) if rng.random() < 0.5 else rng.choice(["bin", "npy", "json"])
                    sample[field] = _values(rng) if rng.random() < 0.6 else f"v{i}".encode()
                kind, msg = expect_clear(lambda sample=sample: w.write(sample))
                if kind == "ok":
                    written[sample.get("__key__", f"{w.num_samples - 1:09d}")] = sample
                else:
                    refused += 1
            kind, msg = expect_clear(w.close)
        if kind == "error":
            if written:
                return f"close refused after {len(written)} accepted samples: {msg}"
            return msg
        ds = feedline.open_dataset(out, verify=True)
        if len(ds) != len(written):
            raise Failure(f"{len(written)} samples accepted, {len(ds)} read back")
        keys = {ds[i]["__key__"] for i in range(len(ds))}
        if keys != set(written):
            raise Failure(f"keys read back {sorted(keys)[:4]} are not the keys written {sorted(written)[:4]}")
        for i in range(len(ds)):
            got = ds[i]
            for field, value in written[got["__key__"]].items():
                if isinstance(value, (bytes, bytearray, memoryview)) and field in got \
                        and bytes(got[field]) != bytes(value):
                        raise Failure(f"key {got['__key__']!r} field {field!r}: other bytes read back")
        probs = feedline.format.verify(out)
        if probs:
            raise Failure(f"verify after a clean write: {probs[:2]}")
        return f"{len(written)} written, {refused} refused"

    return run


for _s in range(30):
    add("writer", f"writer-{_s}", writer_case(_s))


# ----------------------------------------------------------------------------- index


def _tar_member(name: bytes, data: bytes, typeflag: bytes = b"0", size: int | None = None) -> bytes:
    """One ustar header (checksum right) and its padded payload."""
    head = bytearray(512)
    head[0:100] = name[:100].ljust(100, b"\0")
    head[100:108] = b"0000644\0"
    head[108:116] = b"0000000\0"
    head[116:124] = b"0000000\0"
    n = len(data) if size is None else size
    head[124:136] = (b"%011o\0" % n) if 0 <= n < 8**11 else _base256(n)
    head[136:148] = b"00000000000\0"
    head[156:157] = typeflag
    head[257:265] = b"ustar\x0000"
    head[148:156] = b" " * 8
    head[148:156] = b"%06o\0 " % sum(head)
    return bytes(head) + data + bytes(-len(data) % 512)


def _base256(n: int) -> bytes:
    raw = (n % (1 << 88)).to_bytes(11, "big")
    return bytes([0x80 | (0x40 if n < 0 else 0)]) + raw


def _reseal(block: bytearray) -> None:
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block[:512])


def index_case(seed: int) -> CaseFn:
    """A tar with hostile member names, types and sizes (header checksums right), given to
    ``feedline index``: a FormatError naming the shard, or samples whose bytes are the
    tar's own; the tar itself is never changed."""

    def run(tmp: Path) -> str:
        rng = random.Random(seed)
        parts = []
        for i in range(rng.randint(1, 6)):
            data = rng.randbytes(rng.choice([0, 1, 511, 512, 513, 3000]))
            name = rng.choice([b"s%d.bin" % i, b"s%d.bin" % i, b"../up%d.bin" % i, b"/abs%d.bin" % i,
                               b"d/./s%d.bin" % i, b"s%d" % i, b".s%d.bin" % i, b"\xff%d.bin" % i,
                               b"s%d.bin/" % i, b"", b"s%d..bin" % i, b"s%d.__key__" % i,
                               b"a" * 99 + b"%d" % i, b"s%d.b\nin" % i])
            typeflag = rng.choice([b"0", b"0", b"0", b"\0", b"5", b"2", b"1", b"x", b"g", b"L", b"7"])
            size = rng.choice([None, None, None, -1, 2**40, len(data) + 512, -(2**70)])
            parts.append(_tar_member(name, data, typeflag, size))
        blob = bytearray(b"".join(parts) + bytes(1024 * rng.choice([0, 1, 2])))
        if blob and rng.random() < 0.4:  # a flip in a header field, checksum made right again
            at = rng.randrange(0, 512)
            blob[at] ^= 1 << rng.randrange(8)
            if not 148 <= at < 156:
                _reseal(blob)
        tar = tmp / "t.tar"
        tar.write_bytes(bytes(blob))
        before = hashlib.sha1(blob).hexdigest()
        with deadline(60):
            kind, msg = expect_clear(lambda: feedline.format.index_tars([tar], tmp / "ds"), "t.tar", "shard")
        if hashlib.sha1(tar.read_bytes()).hexdigest() != before:
            raise Failure("feedline index changed the tar")
        if kind == "error":
            return msg
        with deadline(60):
            kind, got = expect_clear(lambda: payloads(tmp / "ds"), "t.tar")
        if kind == "ok":
            for g in got:
                if g not in blob:
                    raise Failure(f"a payload that is not in the tar: {g[:20]!r}")
            if feedline.format.verify(tmp / "ds"):
                raise Failure("verify fails right after index")
            return f"indexed: {len(got)} payloads"
        return f"indexed, then {got}"

    return run


for _s in range(40):
    add("index", f"tar-{_s}", index_case(_s))


# ----------------------------------------------------------------------------- labels

_LABEL_CELLS = ["cat", "dog", "", " ", "3", "-1", "1.0", "0.37", "nan", "1e3", "10" * 20, "a,b", 'q"uote',
                "NULL", "ünï", "cat ", "Cat"]
_FILE_CELLS = ["img0.jpg", "img1.jpg", "img2.jpg", "./img0.jpg", "../outside.jpg", "/etc/hostname",
               "IMG0.JPG", "nope.jpg", "", "sub/img3.jpg", "src/img1.jpg"]


def labels_case(seed: int) -> CaseFn:
    """``pack --labels`` with a seeded hostile table (CSV, TSV, JSONL, JSON, COCO): a clear
    error, or a dataset whose payloads are files below SRC and whose cls are class ids."""

    def run(tmp: Path) -> str:
        rng = random.Random(seed)
        src = tmp / "src"
        (src / "sub").mkdir(parents=True)
        for i in range(3):
            (src / f"img{i}.jpg").write_bytes(b"img%d-" % i + rng.randbytes(50))
        (src / "sub" / "img3.jpg").write_bytes(b"img3-" + rng.randbytes(50))
        (tmp / "outside.jpg").write_bytes(b"SECRET-outside")
        kind = rng.choice(["csv", "tsv", "jsonl", "json", "coco"])
        rows = [(rng.choice(_FILE_CELLS), rng.choice(_LABEL_CELLS)) for _ in range(rng.randint(1, 6))]
        if kind in ("csv", "tsv"):
            d = "," if kind == "csv" else "\t"
            head = rng.choice([["filename", "label"], ["filename", "label", "label"], ["file", "x", "y"],
                               ["filename"], ["id", "breed"], ["\ufefffilename", "label"]])
            lines = [d.join(head)]
            for f, lab in rows:
                cells = [f, lab] + ["1"] * (len(head) - 2)
                lines.append(d.join('"' + c.replace('"', '""') + '"' if (d in c or '"' in c) else c
                                    for c in cells[:max(len(head), 1) + rng.choice([0, 0, 0, 1])]))
            text = rng.choice(["\n", "\r\n"]).join(lines) + "\n"
        elif kind == "jsonl":
            text = "\n".join(json.dumps({"file_name": f, "label": rng.choice([lab, None, 7, [1], 1.5])})
                              for f, lab in rows)
        elif kind == "json":
            text = json.dumps(rng.choice([{f: lab for f, lab in rows},
                                          [{"file_name": f, "label": lab} for f, lab in rows], 5, "x"]))
        else:
            text = json.dumps({"images": [{"id": i, "file_name": f} for i, (f, _) in enumerate(rows)],
                               "annotations": [{"image_id": rng.choice([0, 1, 99, None]), "bbox": [1, 2, 3, 4],
                                                "category_id": rng.choice([1, "x", None])}],
                               "categories": rng.choice([[{"id": 1, "name": "cat"}], [], "bad", [5]])})
        table = tmp / f"labels.{kind if kind != 'coco' else 'json'}"
        table.write_text(text)
        before = tree_digest(src)
        res = cli("pack", str(src), "--out", str(tmp / "out"), "-q", "--labels", str(table))
        verdict = cli_clean(res, codes=(0, 1, 2), names=(table.name, "no files", "labels"))
        if tree_digest(src) != before:
            raise Failure("the source tree changed")
        if res.returncode == 0:
            ds = feedline.open_dataset(tmp / "out", verify=True)
            man = json.loads((tmp / "out" / "manifest.json").read_text())
            classes = man.get("classes")
            for i in range(len(ds)):
                sample = ds[i]
                data = bytes(sample.get("jpg", b"img"))
                if not data.startswith(b"img"):
                    raise Failure(f"packed {data[:20]!r}, not a file below SRC")
                if "cls" in sample:
                    cls = int(np.asarray(sample["cls"]).reshape(-1)[0]) if not isinstance(sample["cls"], (bytes, memoryview)) \
                        else int(bytes(sample["cls"]))
                    if classes is not None and not 0 <= cls < len(classes):
                        raise Failure(f"cls {cls} outside the {len(classes)} classes")
            if classes is not None and any(not str(c).strip() for c in classes):
                raise Failure(f"a blank class name: {classes}")
        return f"{kind}: {verdict}"

    return run


for _s in range(40):
    add("labels", f"labels-{_s}", labels_case(_s))


# ----------------------------------------------------------------------------- CLI


def cli_case(args: tuple[str, ...], codes: tuple[int, ...] = (0, 1, 2),
             prep: Callable[[Path], None] | None = None) -> CaseFn:
    def run(tmp: Path) -> str:
        if prep is not None:
            prep(tmp)
        if "{ds}" in " ".join(args):
            small_dataset(tmp, n=3)
        real = [a.format(tmp=tmp, ds=tmp / "ds", long="L" * 5000) for a in args]
        return cli_clean(cli(*real, cwd=tmp, timeout=90), codes=codes)

    return run


def _garbage_ds(tmp: Path) -> None:
    (tmp / "g").mkdir()
    (tmp / "g" / "manifest.json").write_bytes(os.urandom(100))


def _file(tmp: Path) -> None:
    (tmp / "f.tar").write_bytes(os.urandom(3000))


def _ro_json(tmp: Path) -> None:
    (tmp / "ro").mkdir()
    os.chmod(tmp / "ro", 0o555)


_T4 = ("--read", "1ms", "--decode", "1ms", "--h2d", "1ms", "--gpu", "1ms")
_PY = sys.executable
_CLI = [
    ("pack",), ("pack", "{tmp}"), ("pack", "--out"), ("pack", "{tmp}", "--out", ""),
    ("pack", "", "--out", "{tmp}/o"), ("pack", "{tmp}/{long}", "--out", "{tmp}/o"),
    ("pack", "{ds}", "--out", "{tmp}/o", "--shard-size", "0"),
    ("pack", "{ds}", "--out", "{tmp}/o", "--shard-size", "-5MiB"),
    ("pack", "{ds}", "--out", "{tmp}/o", "--shard-size", "nan"),
    ("pack", "{ds}", "--out", "{tmp}/o", "--align", "-1"),
    ("pack", "{ds}", "--out", "{tmp}/o", "--align", "3"),
    ("pack", "{ds}", "--out", "{tmp}/o", "-j", "0"),
    ("pack", "{ds}", "--out", "{tmp}/o", "-j", "-3"),
    ("pack", "{ds}", "--out", "{tmp}/o", "-j", "99999999999999999999"),
    ("pack", "{ds}", "--out", "{tmp}/o", "--checksum", "md5"),
    ("pack", "{ds}", "--out", "{tmp}/o", "--key", "nope"),
    ("pack", "{ds}", "--out", "{tmp}/o", "--include", "["),
    ("pack", "{ds}", "--out", "{tmp}/o", "--include", "*.nothing"),
    ("pack", "{ds}", "--out", "{tmp}/o", "--labels", "{tmp}/missing.csv"),
    ("pack", "{ds}", "--out", "{tmp}/o", "--labels", "{ds}/manifest.json"),
    ("pack", "{ds}", "--out", "{tmp}/o", "--classes", "{tmp}"),
    ("pack", "{ds}", "--out", "{tmp}/o", "--label-column", "x"),
    ("pack", "{ds}", "--out", "{tmp}/o", "--json", "{tmp}/nodir/x.json"),
    ("pack", "{ds}", "--out", "{tmp}/o", "--json", "{tmp}"),
    ("pack", "{ds}", "--out", "{tmp}/o", "--json", "{tmp}/ro/x.json"),
    ("pack", "{ds}", "--out", "{tmp}/o", "--bogus"),
    ("index",), ("index", "{tmp}"), ("index", "{tmp}/f.tar"), ("index", "{ds}"),
    ("index", "{ds}/shard-000000.tar", "--out", "{tmp}/i"),
    ("index", "{ds}/shard-000000.tar", "--checksum", "sha1"),
    ("index", "{ds}/manifest.json"), ("index", "/dev/null"),
    ("inspect",), ("inspect", "{tmp}"), ("inspect", "{tmp}/g"), ("inspect", "{ds}/manifest.json"),
    ("inspect", "{ds}", "--json", "{tmp}/nodir/x"), ("inspect", "/"), ("inspect", "/proc"),
    ("verify",), ("verify", "{tmp}/g"), ("verify", "{ds}/shard-000000.tar"),
    ("verify", "{ds}", "--json", "{tmp}"), ("verify", "{ds}", "--decode", "--json", "-"),
    ("verify", "/dev/null"),
    ("model",), ("model", "--read", "abc"), ("model", *_T4, "--read", "-1ms"),
    ("model", *_T4, "--gpu", "0ms"), ("model", *_T4, "--decode", "nan"), ("model", *_T4, "--workers", "0"),
    ("model", *_T4, "--read-dist", "lognormal:sigma=-1", "--simulate", "--steps", "50"),
    ("model", *_T4, "--read-dist", "pareto", "--simulate"), ("model", *_T4, "--target-stall", "150%"),
    ("model", *_T4, "--target-stall", "x"), ("model", *_T4, "--read", "1e999s"),
    ("model", *_T4, "--max-workers", "-1", "--target-stall", "5%"),
    ("model", *_T4, "--simulate", "--steps", "5", "--seed", "-1"),
    ("doctor", "--workers", "-1"), ("doctor", "--batch-bytes", "lots"),
    ("doctor", "--pinned-budget", "-1GiB"), ("doctor", "--gpus", "0"),
    ("doctor", "--data", "{tmp}/nope"), ("doctor", "--json", "{tmp}/nodir/x"),
    ("diagnose",), ("diagnose", "--"), ("diagnose", "--", "{tmp}/no-such-program"),
    ("diagnose", "--", "{tmp}"), ("diagnose", "--steps", "-1", "--", "true"),
    ("diagnose", "--partial-every", "nan", "--", _PY, "-c", "pass"),
    ("diagnose", "--partial-every", "-1", "--", _PY, "-c", "pass"),
    ("diagnose", "--device", "tpu", "--", _PY, "-c", "pass"),
    ("diagnose", "--ab", "--", _PY, "-c", "pass"), ("diagnose", "--replay", "0", "--", _PY, "-c", "pass"),
    ("diagnose", "--html", "{tmp}/nodir/r.html", "--quiet", "--", _PY, "-c", "pass"),
    ("diagnose", "--trace", "{tmp}", "--quiet", "--", _PY, "-c", "pass"), ("diagnose", "--json", "{tmp}", "--", "true"),
    ("demo", "--frames", "0"), ("demo", "--device", "cuda:99", "--frames", "8", "--steps", "1"),
    ("demo", "--out", "{ds}/manifest.json", "--frames", "8", "--steps", "1"),
    ("nosuchcommand",), ("--version", "extra"), ("-h", "pack"),
]
for _a in _CLI:
    _prep = _garbage_ds if "{tmp}/g" in " ".join(_a) else _file if "f.tar" in " ".join(_a) \
        else _ro_json if "/ro/" in " ".join(_a) else None
    add("cli", " ".join(_a).replace("{tmp}", "T").replace("{ds}", "DS")[:80],
        cli_case(_a, prep=_prep))


# ----------------------------------------------------------------------------- round 11

sys.path.insert(0, str(Path(__file__).parent))
import sweep_round11  # noqa: E402

for _g, _n, _fn in sweep_round11.cases(sys.modules[__name__]):
    add(_g, _n, _fn)

# ----------------------------------------------------------------------------- round 12

import sweep_round12  # noqa: E402

for _g, _n, _fn in sweep_round12.cases(sys.modules[__name__]):
    add(_g, _n, _fn)


# ----------------------------------------------------------------------------- round 13

import sweep_round13  # noqa: E402

for _g, _n, _fn in sweep_round13.cases(sys.modules[__name__]):
    add(_g, _n, _fn)


# ----------------------------------------------------------------------------- round 14

import sweep_round14  # noqa: E402

for _g, _n, _fn in sweep_round14.cases(sys.modules[__name__]):
    add(_g, _n, _fn)


# ----------------------------------------------------------------------------- round 15

import sweep_round15  # noqa: E402

for _g, _n, _fn in sweep_round15.cases(sys.modules[__name__]):
    add(_g, _n, _fn)


# ----------------------------------------------------------------------------- runner


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=10, help="shuffles the order the cases run in")
    ap.add_argument("--group", action="append", help="only these groups (pack, shards, index, writer, "
                                                      "labels, loader, process, resume, cli, remote, "
                                                      "checkpoint, reshape, limits, leaks, concurrent, "
                                                      "distributed, signals, adopt, objstore, durable, foreign-state, env, text, pad, "
                                                      "lengths, under-pack, live, squeeze, diag-hostile, odd-files, user-code, "
                                                      "stop-cont, death, preempt, foreign-state15, cli-paths)")
    ap.add_argument("--match", help="only cases whose name holds this")
    ap.add_argument("--json", help="write every case's outcome here")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    cases = [c for c in CASES if (not args.group or c[0] in args.group)
             and (not args.match or args.match in c[1])]
    random.Random(args.seed).shuffle(cases)
    results = []
    failures = skipped = 0
    sys.modules.setdefault("tests_faults_numbers", _numbers_module())
    for group, name, fn in cases:
        tmp = Path(tempfile.mkdtemp(prefix="sweep-"))
        t0 = time.monotonic()
        try:
            verdict, status = fn(tmp), "ok"
        except Skip as e:
            verdict, status = str(e), "skip"
            skipped += 1
        except (Failure, Hang) as e:
            verdict, status = str(e), "FAIL"
            failures += 1
        except Exception as e:
            verdict, status = f"harness {type(e).__name__}: {e}", "FAIL"
            failures += 1
        finally:
            _chmod_back(tmp)
            shutil.rmtree(tmp, ignore_errors=True)
        dt = time.monotonic() - t0
        results.append({"group": group, "case": name, "status": status, "verdict": verdict,
                        "seconds": round(dt, 2)})
        if args.verbose or status == "FAIL":
            print(f"{status:4} {group:6} {name[:60]:60} {dt:5.1f}s  {verdict[:300]}", flush=True)
    print(f"{len(cases)} cases: {len(cases) - failures - skipped} ok, {failures} failed, "
          f"{skipped} skipped (seed {args.seed})")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 1 if failures else 0


def _numbers_module() -> Any:
    import types

    sys.path.insert(0, str(Path(__file__).parent))
    from faults_helpers import Numbers

    mod = types.ModuleType("tests_faults_numbers")
    mod.Numbers = Numbers  # type: ignore[attr-defined]
    return mod


if __name__ == "__main__":
    sys.exit(main())
