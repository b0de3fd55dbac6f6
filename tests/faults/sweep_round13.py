"""Round 13 of the seeded sweep (issue 13): tar oddities in adopted shards, an object store
that lies, checkpoints killed or starved mid-save, resume state from another loader, and a
hostile environment. ``hostile_sweep.py`` adds these cases to its own (groups ``adopt``,
``objstore``, ``durable``, ``foreign-state``, ``env``); each ends as the others do: a clear
error naming the thing, or a right result, and nothing left behind.

* ``adopt``: tars as real writers make them (Python's tarfile in ustar, GNU and pax
  formats, GNU tar with ``--sparse``) holding what WebDataset tars should not: long names,
  pax records, hard and symbolic links, sparse files, duplicate names, names with a
  newline or non-UTF-8 bytes, empty members. ``feedline index`` either refuses the tar
  naming it, or every payload it serves is the bytes ``tarfile`` extracts for that member.
* ``objstore``: faults round 11 does not inject (``test_fault_remote.FaultProxy`` modes):
  a store that ignores ``Range``, answers 403 (wrong credentials), 404, 429, 416, flips a
  byte, or sends an HTML page with status 200.
* ``durable``: ``kill -9`` of a process in the middle of ``Checkpointer.save`` at many
  points, a file size limit, a read-only folder, two checkpointers of one process on one
  folder: the last committed checkpoint still loads, exactly.
* ``foreign-state``: ``load_state_dict`` given a state that went through JSON or
  ``torch.save``, one of a process loader into a thread loader, a future version, one with
  keys added or missing, one mutated after it was taken.
* ``env``: the CLI with ``TMPDIR`` unwritable, ``HOME`` unset, a C locale over non-ASCII
  paths, stdin closed, stdout a closed pipe or ``/dev/full``.
"""

from __future__ import annotations

import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

CaseFn = Callable[[Path], str]
ROOT = Path(__file__).resolve().parents[2]

# ----------------------------------------------------------------------------- adopt


def _member(tf: tarfile.TarFile, name: str, data: bytes, **kw: Any) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    for k, v in kw.items():
        setattr(info, k, v)
    tf.addfile(info, io.BytesIO(data))


def _plain(tf: tarfile.TarFile, n: int = 3, size: int = 700) -> None:
    rng = random.Random(n * 31 + size)
    for i in range(n):
        _member(tf, f"s{i:03d}.bin", rng.randbytes(size))


def _tar_with(fmt: int, build: Callable[[tarfile.TarFile], None], encoding: str = "utf-8") -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        path = tmp / "t.tar"
        with tarfile.open(path, "w", format=fmt, encoding=encoding, errors="surrogateescape") as tf:
            build(tf)
        return path

    return make


def _long(tf: tarfile.TarFile) -> None:
    _plain(tf)
    _member(tf, "d" * 120 + "/" + "k" * 150 + ".bin", b"long" * 100)
    _member(tf, "x" * 250 + ".bin", b"longer" * 50)


def _ustar_prefix(tf: tarfile.TarFile) -> None:  # a name split into ustar's prefix and name fields
    _member(tf, "p" * 90 + "/" + "q" * 60 + "/s.bin", b"prefix" * 20)
    _plain(tf)


def _hardlink(tf: tarfile.TarFile) -> None:
    _plain(tf)
    _member(tf, "h.bin", b"", type=tarfile.LNKTYPE, linkname="s000.bin")


def _symlink(tf: tarfile.TarFile) -> None:
    _plain(tf)
    _member(tf, "l.bin", b"", type=tarfile.SYMTYPE, linkname="s001.bin")
    _member(tf, "out.bin", b"", type=tarfile.SYMTYPE, linkname="/etc/passwd")


def _duplicates(tf: tarfile.TarFile) -> None:
    _member(tf, "s.bin", b"first" * 10)
    _member(tf, "s.bin", b"second" * 10)
    _plain(tf)


def _dup_key_split(tf: tarfile.TarFile) -> None:  # one key, its fields not adjacent
    _member(tf, "a.x.bin", b"ax")
    _member(tf, "b.x.bin", b"bx")
    _member(tf, "a.y.bin", b"ay")


def _zero(tf: tarfile.TarFile) -> None:
    _member(tf, "z0.bin", b"")
    _plain(tf)
    _member(tf, "z1.bin", b"")
    _member(tf, "z1.other.bin", b"")


def _newline(tf: tarfile.TarFile) -> None:
    _plain(tf)
    _member(tf, "new\nline.bin", b"nl" * 30)
    _member(tf, "tab\there.bin", b"tab" * 30)


def _non_utf8(tf: tarfile.TarFile) -> None:
    _plain(tf)
    _member(tf, os.fsdecode(b"lat\xe9in.bin"), b"latin" * 30)
    _member(tf, os.fsdecode(b"\xff\xfe.bin"), b"ff" * 30)


def _pax_records(tf: tarfile.TarFile) -> None:
    info = tarfile.TarInfo("s.bin")
    data = b"pax" * 100
    info.size = len(data)
    info.pax_headers = {"comment": "x" * 3000, "SCHILY.xattr.user.k": "v", "mtime": "1700000000.123456789"}
    tf.addfile(info, io.BytesIO(data))
    _plain(tf)


def _pax_path_override(tf: tarfile.TarFile) -> None:  # the pax path wins over the ustar name
    info = tarfile.TarInfo("short.bin")
    data = b"over" * 40
    info.size = len(data)
    info.pax_headers = {"path": "renamed/by/pax/record.bin"}
    tf.addfile(info, io.BytesIO(data))
    _plain(tf)


def _pax_global(tf: tarfile.TarFile) -> None:
    tf.pax_headers = {"comment": "global header"}
    _plain(tf)


def _dirs_and_specials(tf: tarfile.TarFile) -> None:
    _member(tf, "dir", b"", type=tarfile.DIRTYPE)
    _plain(tf)
    _member(tf, "fifo.bin", b"", type=tarfile.FIFOTYPE)
    _member(tf, "chr.bin", b"", type=tarfile.CHRTYPE, devmajor=1, devminor=3)
    _member(tf, "dir/in.bin", b"indir" * 20)


def _no_field(tf: tarfile.TarFile) -> None:
    _plain(tf)
    _member(tf, "README", b"no extension" * 5)
    _member(tf, "./dot.bin", b"dotslash" * 5)


def _big_names_many(tf: tarfile.TarFile) -> None:
    for i in range(300):
        _member(tf, f"{'n' * 200}{i:04d}.bin", bytes([i % 256]) * (i % 7))


def _base256_size(tmp: Path) -> Path:
    """A GNU header whose (small) size is written in base-256, which tar accepts."""
    data = b"b256" * 33
    info = tarfile.TarInfo("s.bin")
    info.size = len(data)
    hdr = bytearray(info.tobuf(tarfile.GNU_FORMAT))
    hdr[124:136] = b"\x80" + len(data).to_bytes(11, "big")
    hdr[148:156] = b" " * 8
    hdr[148:156] = b"%06o\0 " % sum(hdr)
    path = tmp / "t.tar"
    path.write_bytes(bytes(hdr) + data + bytes(-len(data) % 512) + bytes(1024))
    return path


def _gnu_tar(*flags: str, sparse: bool = False, link: bool = False) -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        if shutil.which("tar") is None:
            raise RuntimeError("no tar here")
        src = tmp / "src"
        (src / "sub").mkdir(parents=True)
        (src / "a.bin").write_bytes(b"A" * 3000)
        (src / "sub" / "b.bin").write_bytes(b"B" * 700)
        if sparse:
            with open(src / "sp.bin", "wb") as f:
                f.write(b"head")
                f.seek(1 << 20)
                f.write(b"tail")
        if link:
            os.link(src / "a.bin", src / "a2.bin")
        path = tmp / "t.tar"
        subprocess.run(["tar", "-cf", str(path), *flags, "-C", str(src), "."], check=True, capture_output=True)
        return path

    return make


def _gzip(tmp: Path) -> Path:
    path = tmp / "t.tar"
    with tarfile.open(path, "w:gz") as tf:
        _plain(tf)
    return path


def _garbage_after(tmp: Path) -> Path:
    path = _tar_with(tarfile.USTAR_FORMAT, _plain)(tmp)
    with open(path, "ab") as f:
        f.write(os.urandom(3000))
    return path


def _no_end_blocks(tmp: Path) -> Path:
    path = _tar_with(tarfile.USTAR_FORMAT, _plain)(tmp)
    data = path.read_bytes().rstrip(b"\0")
    path.write_bytes(data + bytes(-len(data) % 512))
    return path


def _only_dirs(tf: tarfile.TarFile) -> None:
    _member(tf, "a", b"", type=tarfile.DIRTYPE)
    _member(tf, "a/b", b"", type=tarfile.DIRTYPE)


ADOPT: dict[str, Callable[[Path], Path]] = {
    "pax-long-names": _tar_with(tarfile.PAX_FORMAT, _long),
    "gnu-long-names": _tar_with(tarfile.GNU_FORMAT, _long),
    "ustar-prefix-field": _tar_with(tarfile.USTAR_FORMAT, _ustar_prefix),
    "hardlink-member": _tar_with(tarfile.USTAR_FORMAT, _hardlink),
    "symlink-members": _tar_with(tarfile.USTAR_FORMAT, _symlink),
    "duplicate-names": _tar_with(tarfile.USTAR_FORMAT, _duplicates),
    "key-fields-apart": _tar_with(tarfile.USTAR_FORMAT, _dup_key_split),
    "zero-size-members": _tar_with(tarfile.USTAR_FORMAT, _zero),
    "newline-in-names-pax": _tar_with(tarfile.PAX_FORMAT, _newline),
    "newline-in-names-gnu": _tar_with(tarfile.GNU_FORMAT, _newline),
    "non-utf8-names-gnu": _tar_with(tarfile.GNU_FORMAT, _non_utf8),
    "non-utf8-names-pax": _tar_with(tarfile.PAX_FORMAT, _non_utf8),
    "pax-extra-records": _tar_with(tarfile.PAX_FORMAT, _pax_records),
    "pax-path-override": _tar_with(tarfile.PAX_FORMAT, _pax_path_override),
    "pax-global-header": _tar_with(tarfile.PAX_FORMAT, _pax_global),
    "dirs-fifo-chardev": _tar_with(tarfile.GNU_FORMAT, _dirs_and_specials),
    "no-extension-dotslash": _tar_with(tarfile.USTAR_FORMAT, _no_field),
    "300-long-names-gnu": _tar_with(tarfile.GNU_FORMAT, _big_names_many),
    "base256-small-size": _base256_size,
    "gnu-tar-cli": _gnu_tar(),
    "gnu-tar-posix-format": _gnu_tar("--format=posix"),
    "gnu-tar-sparse": _gnu_tar("--sparse", sparse=True),
    "gnu-tar-sparse-posix": _gnu_tar("--sparse", "--format=posix", sparse=True),
    "gnu-tar-hardlink": _gnu_tar(link=True),
    "gzip-named-tar": _gzip,
    "garbage-after-end": _garbage_after,
    "no-end-blocks": _no_end_blocks,
    "only-directories": _tar_with(tarfile.USTAR_FORMAT, _only_dirs),
}


def _extracted(tar: Path) -> dict[tuple[str, str], list[bytes]]:
    """(key, field) -> the bytes tarfile extracts for each regular member of that name."""
    out: dict[tuple[str, str], list[bytes]] = {}
    with tarfile.open(tar, "r:*", errors="surrogateescape") as tf:
        for m in tf.getmembers():
            if not m.isreg():
                continue
            f = tf.extractfile(m)
            assert f is not None
            base = m.name.rsplit("/", 1)
            name = base[-1]
            key, _, field = name.partition(".")
            prefix = base[0] + "/" if len(base) > 1 else ""
            out.setdefault((prefix + key, field), []).append(f.read())
    return out


def adopt_case(h: ModuleType, kind: str, via: str) -> CaseFn:
    """``feedline index`` (API or CLI) on a tar a real writer made: refused naming the
    tar, or every payload served is what tarfile extracts for that member; never changed."""

    def run(tmp: Path) -> str:
        try:
            tar = ADOPT[kind](tmp)
        except RuntimeError as e:
            raise h.Skip(str(e)) from None
        before = tar.read_bytes()
        out = tmp / "ds"
        if via == "cli":
            res = h.cli("index", str(tar), "--out", str(out), timeout=60)
            verdict = h.cli_clean(res, names=("t.tar",))
            kind_, msg = ("ok", None) if res.returncode == 0 else ("error", verdict)
        else:
            import feedline.format

            with h.deadline(60):
                kind_, msg = h.expect_clear(lambda: feedline.format.index_tars([tar], out), "t.tar")
        if tar.read_bytes() != before:
            raise h.Failure("feedline index changed the tar")
        if kind_ == "error":
            return msg
        truth = _extracted(tar) if not kind.startswith("gzip") else {}
        import feedline

        def read_all() -> list[tuple[str, str, bytes]]:
            ds = feedline.open_dataset(out, verify=True)
            got = []
            for i in range(len(ds)):
                s = ds[i]
                for k, v in s.items():
                    if not k.startswith("__"):
                        got.append((str(s["__key__"]), k, bytes(v) if not isinstance(v, str) else v.encode()))
            return got

        with h.deadline(60):
            kind_, got = h.expect_clear(read_all, "t.tar")
        if kind_ == "error":
            return f"indexed, then {got}"
        for key, field, data in got:
            want = truth.get((key, field))
            if want is None:  # a key normalised differently: the bytes must still be a member's own
                if not any(data in ws for ws in truth.values()):
                    raise h.Failure(f"{key}.{field}: {len(data)} bytes no member of the tar extracts to")
            elif data not in want:
                raise h.Failure(f"{key}.{field}: {data[:24]!r}... is not what tarfile extracts ({want[0][:24]!r})")
        if feedline.format.verify(out):
            raise h.Failure("verify fails right after index")
        return f"indexed: {len(got)} payloads, each the member's bytes"

    return run


# ----------------------------------------------------------------------------- objstore

_STORE_MODES = ("ranges-ignored", "403", "404-shard", "429-once", "416", "flip", "html-200", "ranges-ignored-loader",
                "403-loader", "flip-loader")


def objstore_case(h: ModuleType, mode: str, target: str) -> CaseFn:
    """A store that lies in ways round 11 does not inject: the right bytes (verify on) or a
    clear error naming the object, within the bound."""

    def run(tmp: Path) -> str:
        import sweep_round11

        import feedline

        store = sweep_round11._store(h)
        proxy = store["proxy"]
        if not hasattr(proxy, "extra_modes"):
            raise h.Skip("FaultProxy without round-13 modes")
        fault = mode.partition("-loader")[0]
        loader = mode.endswith("-loader")
        times = 1 if fault.endswith("-once") else 1 << 30
        fault = fault.replace("-once", "").replace("-shard", "")
        options = {**store["options"], "config_kwargs": {**sweep_round11._RETRYING, "retries": {"max_attempts": 3}}}
        url = f"s3://{store['bucket']}/ds"
        t0 = time.monotonic()
        try:
            ds = None if target != ".tar" else feedline.open_dataset(url, storage_options=options, verify=True)
            proxy.mode, proxy.only, proxy.times = fault, target, times

            def go() -> dict[str, bytes]:
                nonlocal ds
                if ds is None:
                    ds = feedline.open_dataset(url, storage_options=options, verify=True)
                if loader:
                    with feedline.Loader(ds, batch_size=2, workers=2, shuffle=False, timeout=60) as ld:
                        return {k: bytes(v) for b in ld for k, v in zip(b["__key__"], b["bin"], strict=True)}
                return {s["__key__"]: bytes(s["bin"]) for s in ds.read_many(range(len(ds)))}

            with h.deadline(150):
                got_kind, got = h.expect_clear(go, target if target != ".tar" else "shard", ".tar", "s3://")
        finally:
            sweep_round11._reset(proxy)
        took = time.monotonic() - t0
        if took > 120:
            raise h.Failure(f"{took:.0f} s: retries not bounded")
        return sweep_round11.remote_verdict(h, store, mode, got_kind, got, took)

    return run


# ----------------------------------------------------------------------------- durable

_SAVER = """
import os, sys, numpy as np
from feedline.checkpoint import Checkpointer
d, n, mb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ck = Checkpointer(d, io="buffered", keep=int(sys.argv[4]) or None)
for step in range(n):
    state = {"w": np.full((mb if step else 1, 1 << 18), step, np.float32), "step": step, "meta": {"s": str(step)}}
    ck.save(step, state)
    ck.wait()
    print(f"committed {step}", flush=True)
ck.close()
print("done", flush=True)
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}


def _check_latest(h: ModuleType, d: Path, committed: int) -> str:
    with h.deadline(60):
        kind, got = h.expect_clear(lambda: _load_latest(d), str(d))
    if kind != "ok":
        if committed < 0 and ("no checkpoint" in got.lower() or "none" in got.lower() or "empty" in got.lower()
                              or "not found" in got.lower() or "no committed" in got.lower()):
            return f"nothing committed: {got[:120]}"
        raise h.Failure(f"committed step {committed} but no checkpoint loads: {got}")
    step, state = got
    if step < committed:
        raise h.Failure(f"step {committed} was committed, the latest that loads is {step}")
    w = state["w"].numpy() if hasattr(state["w"], "numpy") else state["w"]
    if state["step"] != step or not (w == step).all() or state["meta"]["s"] != str(step):
        raise h.Failure(f"checkpoint {step} holds another step's data")
    return f"step {step} loads exactly"


def _load_latest(d: Path) -> tuple[int, Any]:
    from feedline.checkpoint import Checkpointer

    with Checkpointer(d, io="buffered") as ck:
        step = ck.latest()
        if step is None:
            from feedline.errors import StateError

            raise StateError(f"no committed checkpoint in {d}")
        return step, ck.load(step)


def kill9_case(h: ModuleType, seed: int) -> CaseFn:
    """``kill -9`` of a process at a random moment of its saves: what it committed loads."""

    def run(tmp: Path) -> str:
        rng = random.Random(seed)
        d = tmp / "ck"
        proc = subprocess.Popen([sys.executable, "-c", _SAVER, str(d), "50", str(rng.choice([1, 4, 16])),
                                 str(rng.choice([0, 2]))], env=_env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        lines: list[str] = []
        assert proc.stdout is not None
        deadline = time.monotonic() + 90
        want = rng.randint(0, 6)
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line.strip())
            if line.startswith("committed") and int(line.split()[1]) >= want:
                break
        time.sleep(rng.uniform(0, 0.25))  # somewhere in the next save
        proc.kill()
        proc.wait(30)
        committed = max((int(ln.split()[1]) for ln in lines if ln.startswith("committed")), default=-1)
        if committed < 0:
            raise h.Failure(f"the saver committed nothing: {proc.stderr.read()[-500:] if proc.stderr else ''}")
        left = [p.name for p in d.iterdir() if ".tmp" in p.name or p.name.startswith(".")]
        verdict = _check_latest(h, d, committed)
        # a new checkpointer on the folder saves over the debris

        with h.deadline(60):
            kind, msg = h.expect_clear(lambda: _save_again(d, 10**6), str(d))
        if kind != "ok":
            raise h.Failure(f"saving after the kill: {msg}")
        return f"{verdict}; {len(left)} temporary files left, saving again works"

    return run


def _save_again(d: Path, step: int) -> None:
    from feedline.checkpoint import Checkpointer

    with Checkpointer(d, io="buffered") as ck:
        ck.save(step, {"w": np.full((1, 1 << 18), step, np.float32), "step": step, "meta": {"s": str(step)}})
        ck.wait()
        assert ck.latest() == step


def fsize_case(h: ModuleType, limit_kib: int) -> CaseFn:
    """A file size limit (``RLIMIT_FSIZE``, SIGXFSZ ignored as a batch system's ulimit has it)
    hit during a save: a clear error naming the checkpoint, and the last committed one loads."""

    def run(tmp: Path) -> str:
        import resource

        d = tmp / "ck"

        def limit() -> None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_kib << 10, limit_kib << 10))

        body = _SAVER.replace("for step in range(n):", "from feedline.errors import FeedlineError\n"
                              "for step in range(n):")
        body = body.replace("    ck.save(step, state)\n    ck.wait()\n",
                            "    try:\n        ck.save(step, state)\n        ck.wait()\n"
                            "    except FeedlineError as e:\n        print('CLEAR ' + str(e).replace(chr(10), ' '), flush=True)\n"
                            "        sys.exit(3)\n")
        try:
            res = subprocess.run([sys.executable, "-c", body, str(d), "3", "8", "0"], env=_env(), capture_output=True,
                                 text=True, timeout=120, preexec_fn=limit)
        except subprocess.TimeoutExpired:
            raise h.Failure("hang: the save never ended") from None
        if "Traceback" in res.stderr:
            raise h.Failure(f"traceback: {res.stderr[-700:]}")
        committed = max((int(ln.split()[1]) for ln in res.stdout.splitlines() if ln.startswith("committed")),
                        default=-1)
        clear = [ln for ln in res.stdout.splitlines() if ln.startswith("CLEAR ")]
        if res.returncode == 0:
            return _check_latest(h, d, committed) + " (the limit was not reached)"
        if res.returncode != 3 or not clear:
            raise h.Failure(f"exit {res.returncode}: {res.stdout[-300:]} {res.stderr[-300:]}")
        if str(d) not in clear[0] and "checkpoint" not in clear[0].lower():
            raise h.Failure(f"the error names no checkpoint: {clear[0][:300]}")
        return _check_latest(h, d, committed) + f"; {clear[0][6:140]}"

    return run


def readonly_case(h: ModuleType, what: str) -> CaseFn:
    """A checkpoint folder made read-only (after a first save, or from the start): a clear
    error naming the folder; what was committed still loads."""

    def run(tmp: Path) -> str:
        from feedline.checkpoint import Checkpointer

        if os.geteuid() == 0 and not h.can_drop_caps():
            raise h.Skip("root without setpriv: permissions do not apply")
        d = tmp / "ck"
        committed = -1
        if what == "after-save":
            with Checkpointer(d, io="buffered") as ck:
                ck.save(0, {"w": np.zeros((1, 1 << 18), np.float32), "step": 0, "meta": {"s": "0"}})
                ck.wait()
            committed = 0
        else:
            d.mkdir()
        os.chmod(d, 0o555)
        body = ("import sys, numpy as np\nfrom feedline.checkpoint import Checkpointer\n"
                "from feedline.errors import FeedlineError\n"
                "try:\n    with Checkpointer(sys.argv[1], io='buffered') as ck:\n"
                "        ck.save(1, {'w': np.ones((1, 1 << 18), np.float32), 'step': 1, 'meta': {'s': '1'}})\n"
                "        ck.wait()\n"
                "except FeedlineError as e:\n    print('CLEAR ' + str(e).replace(chr(10), ' '))\n    sys.exit(3)\n")
        cmd = [sys.executable, "-c", body, str(d)]
        if os.geteuid() == 0:
            cmd = h.NO_DAC + cmd
        res = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=120)
        os.chmod(d, 0o755)
        if "Traceback" in res.stderr:
            raise h.Failure(f"traceback: {res.stderr[-700:]}")
        if res.returncode == 0:
            raise h.Failure("saved into a read-only folder")
        clear = [ln for ln in res.stdout.splitlines() if ln.startswith("CLEAR ")]
        if res.returncode != 3 or not clear or str(d) not in clear[0]:
            raise h.Failure(f"exit {res.returncode}, not a clear error naming {d}: {res.stdout[-300:]}")
        if committed >= 0:
            return _check_latest(h, d, committed) + f"; {clear[0][6:120]}"
        return clear[0][6:160]

    return run


def two_checkpointers_case(h: ModuleType, how: str) -> CaseFn:
    """Two Checkpointers of one process on one folder: refused naming the folder, or every
    checkpoint that loads holds exactly one save's data."""

    def run(tmp: Path) -> str:
        from feedline.checkpoint import Checkpointer

        d = tmp / "ck"

        def go() -> str:
            a = Checkpointer(d, io="buffered", keep=2 if how == "keep" else None)
            try:
                b = Checkpointer(d, io="buffered", keep=2 if how == "keep" else None)
            except BaseException:
                a.close()
                raise
            try:
                for step in range(6):
                    ck = a if step % 2 == 0 else b
                    ck.save(step if how != "same-steps" else step // 2,
                            {"w": np.full((1, 1 << 16), step, np.float32), "step": step, "meta": {"s": str(step)}})
                    if how == "interleaved":
                        continue
                    ck.wait()
            finally:
                a.close()
                b.close()
            return "saved"

        with h.deadline(90):
            kind, msg = h.expect_clear(go, str(d), "checkpoint")
        if kind == "error":
            return msg
        with Checkpointer(d, io="buffered") as ck:
            for step in ck.steps():
                state = ck.load(step)
                w = state["w"].numpy() if hasattr(state["w"], "numpy") else state["w"]
                if not (w == state["step"]).all() or state["meta"]["s"] != str(state["step"]):
                    raise h.Failure(f"checkpoint {step} mixes two saves")
            return f"both saved; {len(ck.steps())} checkpoints, each one save's data"

    return run


def bomb_case(h: ModuleType, kind: str) -> CaseFn:
    """A header edited into something hostile (deep nesting, a 10^6-long list, duplicate
    keys, huge shapes, an offset past the data file, a dtype that is not one, a NUL):
    a clear error naming the checkpoint, never a crash, a hang or a huge allocation."""

    def run(tmp: Path) -> str:

        from feedline.checkpoint import Checkpointer, load

        d = tmp / "ck"
        with Checkpointer(d, io="buffered") as ck:
            ck.save(1, {"w": np.arange(16, dtype=np.float32).reshape(4, 4), "step": 1})
            ck.wait()
        header = sorted(p for p in d.iterdir() if p.suffix == ".json")[-1]
        text = header.read_text()
        doc = json.loads(text)
        if kind == "deep-nesting":
            text = "{\"a\":" * 100_000 + "1" + "}" * 100_000
        elif kind == "long-list":
            text = json.dumps({**doc, "pad": [0] * 1_000_000})
        elif kind == "duplicate-keys":
            text = text[:-1] + "," + text[1:]
        elif kind == "huge-number":
            text = text.replace(":", ":" + "9" * 200_000 + ",\"x\":", 1)
        elif kind == "nul-bytes":
            text = text.replace("\"", "\"\0", 3)
        elif kind == "not-json":
            text = "\ufeff" + text
        else:
            text = json.dumps(_edit_tensors(doc, kind))
        header.write_text(text, errors="surrogateescape")
        with h.deadline(60):
            kind_, got = h.expect_clear(lambda: load(d), str(d), header.name, "checkpoint", "tensor")
        if kind_ == "ok":
            w = got["w"].numpy() if hasattr(got["w"], "numpy") else got["w"]
            if w.shape != (4, 4) or not (w.ravel() == np.arange(16)).all():
                raise h.Failure(f"{kind}: loaded something else: {w.shape}")
            return "loaded as saved (the edit touched nothing read)"
        return got

    return run


def _edit_tensors(doc: Any, kind: str) -> Any:
    """Apply ``kind`` to every tensor-looking record (a dict with shape/dtype) of ``doc``."""

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "shape" in node and "dtype" in node:
                if kind == "huge-shape":
                    node["shape"] = [2**31, 2**31]
                elif kind == "negative-shape":
                    node["shape"] = [-4, -4]
                elif kind == "dtype-not-dtype":
                    node["dtype"] = "os.system"
                elif kind == "dtype-object":
                    node["dtype"] = "object"
                for k in ("offset", "start"):
                    if k in node and kind == "offset-past-file":
                        node[k] = 1 << 40
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(doc)
    return doc


# ----------------------------------------------------------------------------- foreign-state


def foreign_state_case(h: ModuleType, how: str) -> CaseFn:
    """A state that travelled (JSON, torch.save), came from another kind of loader, or was
    edited: each sample of the epoch once after resume, or a clear StateError."""

    def run(tmp: Path) -> str:
        import copy

        from faults_helpers import Numbers

        import feedline

        ds = Numbers(96)
        kw: dict[str, Any] = {"batch_size": 4, "workers": 2, "seed": 3}
        with feedline.Loader(ds, **kw, worker_type="process" if how == "process-to-thread" else "thread") as a:
            it = iter(a)
            seen = [int(v) for _ in range(5) for v in next(it)["y"]]
            state = a.state_dict()
            snapshot = copy.deepcopy(state)
            del it
        if how == "json":
            state = json.loads(json.dumps(state))
        elif how == "torch-save":
            import torch

            buf = io.BytesIO()
            torch.save(state, buf)
            buf.seek(0)
            state = torch.load(buf, weights_only=True)
        elif how == "future-version":
            state = {**state, "version": 99}
        elif how == "extra-key":
            state = {**state, "sampler_rng": [1, 2, 3]}
        elif how == "missing-key":
            state = {k: v for i, (k, v) in enumerate(state.items()) if i != len(state) - 1}
        elif how == "mutated-after":
            state = a_state = snapshot
            a_state["__mutated__"] = True
            state = {k: v for k, v in a_state.items() if k != "__mutated__"}
        elif how == "empty":
            state = {}
        elif how == "list":
            state = list(state.items())
        elif how == "nested-in-trainer":
            state = {"loader": state}
        with feedline.Loader(ds, **kw) as b:
            with h.deadline(60):
                kind, got = h.expect_clear(lambda: b.load_state_dict(state), "state", "load_state_dict")
            if kind == "error":
                return got
            with h.deadline(60):
                rest = [int(v) for batch in b for v in batch["y"]]
        total = seen + rest
        want = len(ds) - len(ds) % 4
        if len(total) != want or len(set(total)) != want:
            raise h.Failure(f"{how}: accepted, then {len(set(total))} distinct of {len(total)}, want {want} once each")
        return f"accepted: {len(rest)} samples after resume, each once"

    return run


# ----------------------------------------------------------------------------- env


def _env_ds(tmp: Path, name: str = "ds") -> tuple[Path, Path]:
    src = tmp / "sr\u00e7"
    src.mkdir()
    for i in range(4):
        (src / f"s{i}.bin").write_bytes(os.urandom(300))
    (src / "\u00fcml\u00e4ut.bin").write_bytes(b"uml" * 50)
    return src, tmp / name


def env_case(h: ModuleType, env_kind: str, command: str) -> CaseFn:
    """The CLI in a hostile environment: exit 0 with the right output, or one clear error line;
    never a traceback or a hang."""

    def run(tmp: Path) -> str:
        src, out = _env_ds(tmp, "d\u00e9st")
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "120"}
        stdin: Any = subprocess.DEVNULL
        stdout: Any = subprocess.PIPE
        close_fds_in_child: list[int] = []
        if env_kind != "plain" and command != "pack":  # the dataset is made in a sane environment
            res = subprocess.run([sys.executable, "-m", "feedline", "pack", str(src), "--out", str(out)], env=env,
                                 capture_output=True, timeout=120)
            if res.returncode:
                raise h.Failure(f"pack in a plain environment failed: {res.stderr[-300:]!r}")
        if env_kind == "tmpdir-unwritable":
            ro = tmp / "ro"
            ro.mkdir()
            os.chmod(ro, 0o500)
            env["TMPDIR"] = str(ro)
        elif env_kind == "tmpdir-missing":
            env["TMPDIR"] = str(tmp / "nope")
        elif env_kind == "home-unset":
            env.pop("HOME", None)
        elif env_kind == "home-file":
            (tmp / "homefile").write_text("x")
            env["HOME"] = str(tmp / "homefile")
        elif env_kind == "c-locale":
            env.update(LC_ALL="C", LANG="C", PYTHONIOENCODING="", PYTHONUTF8="0")
        elif env_kind == "posix-ascii-io":
            env.update(LC_ALL="POSIX", LANG="POSIX", PYTHONIOENCODING="ascii", PYTHONUTF8="0")
        elif env_kind == "stdin-closed":
            stdin = None
            close_fds_in_child.append(0)
        elif env_kind == "dev-full":
            stdout = open("/dev/full", "wb")  # noqa: SIM115
        args = {"pack": ["pack", str(src), "--out", str(out)], "inspect": ["inspect", str(out)],
                "verify": ["verify", str(out)], "index": ["index", str(_wds_tar(tmp)), "--out", str(tmp / "idx")],
                "inspect-json": ["inspect", str(out), "--json", "-"]}[command]

        def pre() -> None:
            for fd in close_fds_in_child:
                os.close(fd)

        cmd = [sys.executable, "-m", "feedline", *args]
        if env_kind == "tmpdir-unwritable" and os.geteuid() == 0:
            if not h.can_drop_caps():
                raise h.Skip("root without setpriv: permissions do not apply")
            cmd = h.NO_DAC + cmd
        try:
            if env_kind == "closed-pipe":
                return _closed_pipe(h, cmd, env)
            res = subprocess.run(cmd, env=env, stdin=stdin, stdout=stdout, stderr=subprocess.PIPE, timeout=120,
                                 preexec_fn=pre)
        except subprocess.TimeoutExpired:
            raise h.Failure(f"hang: {command} in {env_kind}") from None
        finally:
            if env_kind == "dev-full":
                stdout.close()
            os.chmod(tmp, 0o755)
            if (tmp / "ro").exists():
                os.chmod(tmp / "ro", 0o755)
        if res.stdout is None:
            res.stdout = b""
        verdict = h.cli_clean(res, codes=(0, 1, 2) if env_kind != "dev-full" else (0, 1, 2, 120))
        if res.returncode == 0 and command in ("pack", "index"):
            import feedline

            target = out if command == "pack" else tmp / "idx"
            if feedline.format.verify(target):
                raise h.Failure(f"{command} in {env_kind}: verify fails")
            ds = feedline.open_dataset(target)
            if command == "pack" and len(ds) != 5:
                raise h.Failure(f"pack in {env_kind}: {len(ds)} samples of 5")
        return verdict

    return run


def _wds_tar(tmp: Path) -> Path:
    path = tmp / "w\u00e9b.tar"
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tf:
        _plain(tf, 4)
    return path


def _closed_pipe(h: ModuleType, cmd: list[str], env: dict[str, str]) -> str:
    """``feedline inspect ... | head -1``: the reader goes away after one line."""
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()
    try:
        err = proc.stderr.read()
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise h.Failure("hang after the reader closed the pipe") from None
    text = err.decode("utf-8", "replace")
    if "Traceback" in text or "Exception ignored" in text:
        raise h.Failure(f"exit {proc.returncode} with: {text[-500:]}")
    if proc.returncode not in (0, 1, 120, -signal.SIGPIPE, 128 + signal.SIGPIPE):
        raise h.Failure(f"exit {proc.returncode}: {text[-300:]}")
    return f"exit {proc.returncode}, quiet"


# ----------------------------------------------------------------------------- signals


def sigint_case(h: ModuleType, seed: int, n: int, mode: str) -> CaseFn:
    """Round 12's Ctrl-C harness on the paths it did not cover: ``process`` (CPU batches lent
    from the shared-memory arena die in the loop) and ``dropped`` (a loader made and dropped
    without close() on every pass). Every Ctrl-C reaches the loop; none is "Exception
    ignored"; the loop never hangs after one (a lock left held by a Ctrl-C)."""

    def run(tmp: Path) -> str:
        import sweep_round12 as r12

        body = r12.SIGINT_RETURN
        if mode == "process":
            body = body.replace("shuffle=False, shm_dir=shm)", "shuffle=False, shm_dir=shm, worker_type='process')")
            body = body.replace("    threading.Thread(target=sender", "    for _b in loader:\n        break\n"
                                "    _b = None\n    threading.Thread(target=sender")  # fork before the thread
        else:
            body = body.replace("""                for batch in loader:
                    if done.is_set():
                        break""", """                dropped = feedline.Loader(Numbers(64), batch_size=4, workers=2, shm_dir=shm)
                it = iter(dropped)
                next(it)
                dropped = it = None""")
        # a Ctrl-C that lands while numpy.random is first imported (the sampler's first epoch)
        # is lost inside that Cython module's initialisation, not in feedline: import it first
        body = body.replace("    import random, signal\n", "    import random, signal\n    import numpy.random\n")
        assert body != r12.SIGINT_RETURN and "numpy.random" in body
        return r12.sigint_run(h, body, n, seed, tmp)

    return run


# ----------------------------------------------------------------------------- cases


def cases(h: ModuleType) -> list[tuple[str, str, CaseFn]]:
    out: list[tuple[str, str, CaseFn]] = []
    for kind in ADOPT:
        out.append(("adopt", f"{kind}-api", adopt_case(h, kind, "api")))
    for kind in ("pax-long-names", "gnu-tar-sparse", "hardlink-member", "non-utf8-names-gnu", "newline-in-names-pax",
                 "gzip-named-tar"):
        out.append(("adopt", f"{kind}-cli", adopt_case(h, kind, "cli")))
    for mode in _STORE_MODES:
        targets = [".tar"] if mode.endswith("-loader") or mode in ("flip", "416") else [".tar", ".idx", "manifest.json"]
        if mode == "404-shard":
            targets = [".tar", ".idx"]
        for target in targets:
            out.append(("objstore", f"{mode}-{target}", objstore_case(h, mode, target)))
    for seed in range(10):
        out.append(("durable", f"kill9-mid-save-{seed}", kill9_case(h, 1300 + seed)))
    for kib in (64, 1200, 4200, 9000):
        out.append(("durable", f"fsize-{kib}KiB", fsize_case(h, kib)))
    for what in ("after-save", "from-start"):
        out.append(("durable", f"read-only-folder-{what}", readonly_case(h, what)))
    for how in ("alternating", "interleaved", "same-steps", "keep"):
        out.append(("durable", f"two-checkpointers-one-process-{how}", two_checkpointers_case(h, how)))
    for kind in ("deep-nesting", "long-list", "duplicate-keys", "huge-number", "nul-bytes", "not-json", "huge-shape",
                 "negative-shape", "dtype-not-dtype", "dtype-object", "offset-past-file"):
        out.append(("durable", f"header-{kind}", bomb_case(h, kind)))
    for how in ("json", "torch-save", "process-to-thread", "future-version", "extra-key", "missing-key",
                "mutated-after", "empty", "list", "nested-in-trainer"):
        out.append(("foreign-state", how, foreign_state_case(h, how)))
    for env_kind, commands in (("tmpdir-unwritable", ("pack", "inspect", "index")), ("tmpdir-missing", ("pack",)),
                               ("home-unset", ("pack", "verify")), ("home-file", ("inspect",)),
                               ("c-locale", ("pack", "inspect", "verify", "index")),
                               ("posix-ascii-io", ("pack", "inspect", "index")),
                               ("stdin-closed", ("pack", "inspect")), ("closed-pipe", ("inspect", "inspect-json")),
                               ("dev-full", ("inspect", "verify"))):
        for command in commands:
            out.append(("env", f"{env_kind}-{command}", env_case(h, env_kind, command)))
    for seed in range(2):
        out.append(("signals", f"sigint-as-process-batches-die-{seed}", sigint_case(h, 1350 + seed, 400, "process")))
    out.append(("signals", "sigint-as-loaders-are-dropped", sigint_case(h, 1360, 200, "dropped")))
    return out
