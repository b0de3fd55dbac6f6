"""Round 11 of the seeded sweep (issue 13): the object-store path, the checkpointer, and
resume state across a changed dataset. ``hostile_sweep.py`` adds these cases to its own
(groups ``remote``, ``checkpoint``, ``reshape``); each ends in a clear error naming the
thing or a right result, as the others.

The remote cases share one moto S3 server behind ``test_fault_remote.FaultProxy`` on
127.0.0.1, started by the first of them (seconds) and stopped at exit.
"""

from __future__ import annotations

import atexit
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import xxhash

import feedline

CaseFn = Callable[[Path], str]

# ----------------------------------------------------------------------------- remote

_STORE: dict[str, Any] = {}
_RETRYING = {"read_timeout": 2, "connect_timeout": 2, "retries": {"max_attempts": 3}}


def _store(h: ModuleType) -> dict[str, Any]:
    if not _STORE:
        try:
            from test_fault_remote import BUCKET, start_store
        except ImportError as e:  # moto or s3fs missing
            raise h.Skip(f"no S3 test server here ({e})") from None
        root = Path(tempfile.mkdtemp(prefix="sweep-store-"))
        proxy, options, direct, stop = start_store(root)
        atexit.register(stop)
        truth = {}
        for p in sorted((root / "src").iterdir()):
            truth[p.stem] = p.read_bytes()
        _STORE.update(proxy=proxy, options=options, direct=direct, truth=truth, bucket=BUCKET, root=root)
    return _STORE


def _reset(proxy: Any) -> None:
    proxy.release.set()  # a stalled or silent handler lets go
    time.sleep(0.05)
    proxy.release.clear()
    proxy.mode, proxy.only, proxy.hits, proxy.times, proxy.delay = "pass", "", 0, 1 << 30, 0.0


# (mode, times, delay, retries): what the proxy does to requests of the target
_REMOTE_MODES: dict[str, tuple[str, int, float, int]] = {
    "500-once": ("500", 1, 0.0, 3),
    "500-always": ("500", 1 << 30, 0.0, 3),
    "503-twice": ("503", 2, 0.0, 3),
    "503-always": ("503", 1 << 30, 0.0, 3),
    "slow-once": ("slow", 1, 3.0, 3),  # one answer later than the 2 s read timeout
    "slow-always": ("slow", 1 << 30, 3.0, 2),
    "cut": ("cut", 1 << 30, 0.0, 1),
    "short": ("short", 1 << 30, 0.0, 1),
    "underlong": ("underlong", 1 << 30, 0.0, 1),
    "stall": ("stall", 1 << 30, 0.0, 1),
    "trickle": ("trickle", 1 << 30, 0.0, 1),
}


def remote_case(h: ModuleType, mode: str, target: str, how: str) -> CaseFn:
    """Open (manifest, index) or read (shard: ``read_many`` or a Loader) through a failing
    store: the right bytes, or a clear error naming the object, within the bound."""

    def run(tmp: Path) -> str:
        store = _store(h)
        proxy = store["proxy"]
        kind, times, delay, retries = _REMOTE_MODES[mode]
        options = {**store["options"], "config_kwargs": {**_RETRYING, "retries": {"max_attempts": retries}}}
        url = f"s3://{store['bucket']}/ds"
        t0 = time.monotonic()
        try:
            ds = None if how == "open" else feedline.open_dataset(url, storage_options=options)
            proxy.mode, proxy.only, proxy.times, proxy.delay = kind, target, times, delay

            def go() -> dict[str, bytes]:
                nonlocal ds
                if ds is None:
                    ds = feedline.open_dataset(url, storage_options=options)
                if how == "loader":
                    with feedline.Loader(ds, batch_size=2, workers=2, shuffle=False, timeout=60) as loader:
                        return {k: bytes(v) for b in loader for k, v in zip(b["__key__"], b["bin"], strict=True)}
                return {s["__key__"]: bytes(s["bin"]) for s in ds.read_many(range(len(ds)))}

            with h.deadline(150):
                got_kind, got = h.expect_clear(go, target)
        finally:
            _reset(proxy)
        return remote_verdict(h, store, mode, got_kind, got, time.monotonic() - t0)

    return run


def remote_verdict(h: ModuleType, store: dict[str, Any], mode: str, got_kind: str, got: Any, took: float) -> str:
    """Every object's bytes exactly, or the clear error ``expect_clear`` let through."""
    if got_kind == "ok":
        if got != store["truth"]:
            raise h.Failure(f"{mode}: wrong or missing bytes: {sorted(set(store['truth']) ^ set(got))[:3]}")
        return f"exact after {took:.1f} s"
    return f"{took:.1f} s: {got}"


def deleted_case(h: ModuleType, how: str) -> CaseFn:
    """A shard object deleted between two batches of an epoch."""

    def run(tmp: Path) -> str:
        store = _store(h)
        direct, bucket = store["direct"], store["bucket"]
        url = f"s3://{bucket}/ds"
        ds = feedline.open_dataset(url, storage_options=store["options"])
        last = json.loads((store["root"] / "ds" / "manifest.json").read_text())["shards"][-1]["name"]
        key = f"{bucket}/ds/{last}"
        try:
            def go() -> int:
                with feedline.Loader(ds, batch_size=1, workers=1 if how == "thread" else 2, shuffle=False,
                                     timeout=60) as loader:
                    it = iter(loader)
                    next(it)
                    direct.rm(key)
                    return 1 + sum(1 for _ in it)

            with h.deadline(120):
                got_kind, got = h.expect_clear(go, last)
        finally:
            direct.put_file(str(store["root"] / "ds" / last), key)
        if got_kind == "ok":
            raise h.Failure(f"an epoch of {got} samples with shard {last} deleted under it")
        return got

    return run


def credentials_case(h: ModuleType) -> CaseFn:
    def run(tmp: Path) -> str:
        store = _store(h)
        names = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                 "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE", "AWS_EC2_METADATA_DISABLED")
        saved = {n: os.environ.get(n) for n in names}
        for n in names[:4]:
            os.environ.pop(n, None)
        os.environ.update(AWS_SHARED_CREDENTIALS_FILE=str(tmp / "none"), AWS_CONFIG_FILE=str(tmp / "none"),
                          AWS_EC2_METADATA_DISABLED="true")
        anonymous = {k: v for k, v in store["options"].items() if k not in ("key", "secret")}
        try:
            with h.deadline(60):
                got_kind, got = h.expect_clear(
                    lambda: feedline.open_dataset(f"s3://{store['bucket']}/ds", storage_options=anonymous),
                    "manifest.json")
        finally:
            for n, v in saved.items():
                if v is None:
                    os.environ.pop(n, None)
                else:
                    os.environ[n] = v
        if got_kind == "ok":
            raise h.Failure("opened without credentials")
        return got

    return run


# ----------------------------------------------------------------------------- checkpoint

_CK_STATE = {"w": np.arange(64, dtype=np.float32).reshape(8, 8), "b": np.ones(8, np.float64),
             "step": 7, "opt": {"lr": 0.1, "m": np.zeros(3, np.int64)}}


def _saved(tmp: Path) -> tuple[Path, Path]:
    from feedline.checkpoint import Checkpointer

    d = tmp / "ck"
    with Checkpointer(d, io="buffered") as ck:
        ck.save(1, _CK_STATE)
        ck.save(2, _CK_STATE)
    headers = sorted(p for p in d.iterdir() if p.suffix == ".json")
    return d, headers[-1]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray):
        b = b.numpy() if hasattr(b, "numpy") else b
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    return bool(a == b)


def _resealed(doc: Any) -> str:
    from feedline.checkpoint._store import HEADER_CHECKSUM, _canonical

    doc = {k: v for k, v in doc.items() if k != HEADER_CHECKSUM}
    try:
        doc[HEADER_CHECKSUM] = f"{xxhash.xxh3_64_intdigest(_canonical(doc)):016x}"
    except (ValueError, TypeError):
        pass
    return json.dumps(doc)


def _arrays(node: Any) -> list[np.ndarray]:
    if isinstance(node, dict):
        return [a for v in node.values() for a in _arrays(v)]
    if isinstance(node, (list, tuple)):
        return [a for v in node for a in _arrays(v)]
    if hasattr(node, "numpy") and hasattr(node, "dtype"):
        return [node.numpy()]
    return [node] if isinstance(node, np.ndarray) else []


def _json_edits(rng: random.Random, doc: Any) -> Any:
    """One hostile change somewhere in a header document."""
    paths: list[tuple[Any, ...]] = []

    def walk(node: Any, path: tuple[Any, ...]) -> None:
        paths.append(path)
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, (*path, k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, (*path, i))

    walk(doc, ())
    path = rng.choice(paths[1:])
    values = ["../../etc/passwd", "/etc/passwd", 10**30, -1, 2**63, 2**64, 1e308, float("nan"), "float128",
              "object", "<U8", "torch.float32", "__class__", [2**40, 2**40], [-1, 64], [[1]], {"a": 1}, None, True,
              "", "x" * 5000, [0] * 10000]
    node = doc
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = rng.choice(values)
    return doc


def checkpoint_header_case(h: ModuleType, seed: int) -> CaseFn:
    """A hostile header (paths outside the folder, huge sizes, dtype strings that are not
    dtypes, shapes that overflow, a JSON bomb): a FeedlineError naming the file or tensor,
    or (an edit of a value nothing reads) the saved state, exactly."""

    def run(tmp: Path) -> str:
        from feedline.checkpoint import load

        rng = random.Random(seed)
        reseal = seed % 2 == 1  # as a buggy writer would: the checks past the header checksum
        d, hp = _saved(tmp)
        if seed % 7 == 0:  # a JSON bomb: deep nesting or a huge number
            text = hp.read_text()
            hp.write_text(rng.choice(["[" * 200_000 + "]" * 200_000, text.replace(":", ": " + "1" * 50_000, 1)]))
        else:
            doc = json.loads(hp.read_text())
            for _ in range(rng.randint(1, 3)):
                doc = _json_edits(rng, doc)
            hp.write_text(_resealed(doc) if reseal else json.dumps(doc))
        with h.deadline(60):
            kind, got = h.expect_clear(lambda: load(d), str(d), "tensor", hp.name, "checkpoint", "step")
        if kind == "ok":
            if not reseal and not _same(_CK_STATE, got):
                raise h.Failure(f"a hostile header loaded as another state: {str(got)[:200]}")
            data = b"".join(p.read_bytes() for p in d.glob("*.bin"))
            for leaf in _arrays(got):  # resealed: what the header says, but only bytes of the data file
                if leaf.nbytes and leaf.tobytes() not in data:
                    raise h.Failure(f"a loaded array of bytes the checkpoint does not hold: {leaf[:4]}")
            return "loaded: " + ("as saved" if _same(_CK_STATE, got) else "what the resealed header says")
        return got

    return run


def checkpoint_keep_case(h: ModuleType, keep: Any) -> CaseFn:
    def run(tmp: Path) -> str:
        from feedline.checkpoint import Checkpointer

        def go() -> Any:
            with Checkpointer(tmp / "ck", keep=keep, io="buffered") as ck:
                for step in range(3):
                    ck.save(step, _CK_STATE)
            return sorted(p.name for p in (tmp / "ck").iterdir())

        kind, got = h.expect_clear(go, "keep")
        if kind == "ok" and not (keep is None or (type(keep) is int and keep >= 1)):
            raise h.Failure(f"keep={keep!r} accepted: {got}")
        return str(got)

    return run


_CK_CHILD = """
import sys, time, numpy as np
from feedline.checkpoint import Checkpointer
d, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
state = {"w": np.full((256, 1024), float(tag == "b"), np.float32), "tag": tag}
with Checkpointer(d, io="buffered", keep=2) as ck:
    print("ready", flush=True)
    for step in range(n):
        ck.save(step, state)
        ck.wait()
print("done", flush=True)
"""


def _child(tmp: Path, tag: str, n: int) -> subprocess.Popen[str]:
    script = tmp / "child.py"
    script.write_text(_CK_CHILD)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    return subprocess.Popen([sys.executable, str(script), str(tmp / "ck"), tag, str(n)], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _latest_intact(h: ModuleType, d: Path) -> str:
    from feedline.checkpoint import load

    kind, got = h.expect_clear(lambda: load(d), str(d))
    if kind != "ok":
        raise h.Failure(f"no loadable checkpoint left: {got}")
    state = got[1] if isinstance(got, tuple) else got
    w = state["w"].numpy() if hasattr(state["w"], "numpy") else state["w"]
    if not (w == float(state["tag"] == "b")).all():
        raise h.Failure(f"checkpoint {state['tag']} holds another process's tensor")
    return f"latest {state['tag']} intact"


def checkpoint_two_processes_case(h: ModuleType) -> CaseFn:
    def run(tmp: Path) -> str:
        a, b = _child(tmp, "a", 20), _child(tmp, "b", 20)
        try:
            outs = [p.communicate(timeout=120) for p in (a, b)]
        except subprocess.TimeoutExpired:
            a.kill()
            b.kill()
            raise h.Failure("two processes saving into one folder: still running after 120 s") from None
        codes = [a.returncode, b.returncode]
        for (_, err), code in zip(outs, codes, strict=True):
            last = (err.strip().splitlines() or [""])[-1]
            if code != 0 and not last.startswith("feedline.errors."):  # refused with a feedline error, or done
                raise h.Failure(f"exit {code}: {err[-500:]}")
        return f"exits {codes}; " + _latest_intact(h, tmp / "ck")

    return run


def checkpoint_sigterm_case(h: ModuleType, seed: int) -> CaseFn:
    def run(tmp: Path) -> str:
        rng = random.Random(seed)
        p = _child(tmp, "a", 1000)
        assert p.stdout is not None
        if p.stdout.readline().strip() != "ready":
            p.kill()
            raise h.Failure(f"child did not start: {p.communicate()[1][-500:]}")
        time.sleep(rng.uniform(0.05, 1.5))
        p.send_signal(rng.choice([signal.SIGTERM, signal.SIGINT, signal.SIGKILL]))
        try:
            p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            raise h.Failure("still saving 60 s after the signal") from None
        if not any((tmp / "ck").glob("*.json")):
            return "signalled before the first commit: nothing to load"
        return _latest_intact(h, tmp / "ck")

    return run


def checkpoint_structure_case(h: ModuleType, seed: int) -> CaseFn:
    """load_into a state of another structure: a clear error naming the tensor, nothing changed."""

    def run(tmp: Path) -> str:
        import torch

        from feedline.checkpoint import Checkpointer

        rng = random.Random(seed)
        model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
        with Checkpointer(tmp / "ck", io="buffered") as ck:
            ck.save(1, {"model": model.state_dict()})
        other = rng.choice([
            torch.nn.Sequential(torch.nn.Linear(4, 3)),
            torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 3)),
            torch.nn.Sequential(torch.nn.Linear(4, 3).double(), torch.nn.Linear(3, 2)),
            torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2), torch.nn.ReLU(), torch.nn.Linear(2, 1)),
        ])
        before = {k: v.clone() for k, v in other.state_dict().items()}
        from feedline.checkpoint import load

        kind, got = h.expect_clear(lambda: load(tmp / "ck", into={"model": other.state_dict()}), "model/")
        after = other.state_dict()
        if kind == "ok":  # every tensor of the smaller model found its saved value (the rest is returned)
            saved = model.state_dict()
            if any(k not in saved or not torch.equal(saved[k], v) for k, v in after.items()):
                raise h.Failure("a state of another structure loaded with other values")
            return "loaded: the model's tensors are a part of the checkpoint's"
        if any(not torch.equal(before[k], v) for k, v in after.items()):
            raise h.Failure(f"refused ({got[:80]}) but some tensors were changed")
        return got

    return run


# ----------------------------------------------------------------------------- reshape


def _keys_src(tmp: Path, n: int, tag: str = "") -> Path:
    src = tmp / f"src{tag}{n}"
    src.mkdir(parents=True)
    for i in range(n):
        (src / f"s{i:03d}.bin").write_bytes(f"{tag}{i}".encode() * 20)
    return src


def reshape_case(h: ModuleType, change: str) -> CaseFn:
    """State saved after 3 batches, loaded into a loader over a changed dataset or setup:
    a StateError, or a resume after which every sample of the epoch is read exactly once."""

    def run(tmp: Path) -> str:
        from feedline.format import pack

        pack(_keys_src(tmp, 40), tmp / "a", shard_size=2000)
        base = {"batch_size": 4, "workers": 1, "seed": 5, "shuffle": True, "drop_last": False}
        with feedline.Loader(feedline.open_dataset(tmp / "a"), **base) as first:
            it = iter(first)
            seen = [k for _ in range(3) for k in next(it)["__key__"]]
            state = first.state_dict()
        kw, ds_dir = dict(base), tmp / "a"
        if change in ("more", "fewer", "content", "renamed", "same-repacked"):
            n = {"more": 44, "fewer": 36}.get(change, 40)
            src = _keys_src(tmp / "b-src" if change in ("same-repacked", "renamed") else tmp, n, "x" if change == "content" else "")
            if change == "renamed":
                (src / "s000.bin").rename(src / "t000.bin")
            pack(src, tmp / "b", shard_size=2000)
            ds_dir = tmp / "b"
        elif change == "seed":
            kw["seed"] = 6
        elif change == "batch":
            kw["batch_size"] = 3
        elif change == "world2":
            kw.update(rank=0, world_size=2)
        elif change == "shuffle":
            kw["shuffle"] = False
        elif change == "drop_last":
            kw["drop_last"] = True
        ds = feedline.open_dataset(ds_dir)
        with feedline.Loader(ds, **kw) as loader:
            with h.deadline(60):
                kind, got = h.expect_clear(lambda: loader.load_state_dict(state))
            if kind != "ok":
                return got
            with h.deadline(60):
                rest = [k for b in loader for k in b["__key__"]]
        everything = {ds[i]["__key__"] for i in range(len(ds))}
        if sorted(seen + rest) != sorted(everything) or len(set(seen + rest)) != len(seen + rest):
            twice = sorted(set(seen) & set(rest))[:3]
            lost = sorted(everything - set(seen) - set(rest))[:3]
            raise h.Failure(f"{change}: accepted, then twice {twice}, never {lost} "
                            f"({len(rest)} after resume)")
        return f"accepted: {len(rest)} samples after resume, each once"

    return run


def cases(h: ModuleType) -> list[tuple[str, str, CaseFn]]:
    out: list[tuple[str, str, CaseFn]] = []
    for mode in _REMOTE_MODES:
        for target, how in ((".tar", "read"), (".tar", "loader"), (".idx", "open"), ("manifest.json", "open")):
            out.append(("remote", f"{mode}-{target}-{how}", remote_case(h, mode, target, how)))
    for how in ("thread", "threads2"):
        out.append(("remote", f"shard-deleted-mid-epoch-{how}", deleted_case(h, how)))
    out.append(("remote", "credentials-missing", credentials_case(h)))
    for seed in range(30):
        out.append(("checkpoint", f"header-{seed}", checkpoint_header_case(h, 1100 + seed)))
    for keep in (0, -1, True, 1.5, "2", 1, None):
        out.append(("checkpoint", f"keep={keep!r}", checkpoint_keep_case(h, keep)))
    out.append(("checkpoint", "two-processes-one-folder", checkpoint_two_processes_case(h)))
    for seed in range(6):
        out.append(("checkpoint", f"signal-during-save-{seed}", checkpoint_sigterm_case(h, seed)))
    for seed in range(4):
        out.append(("checkpoint", f"load-into-other-structure-{seed}", checkpoint_structure_case(h, seed)))
    for change in ("more", "fewer", "content", "renamed", "same-repacked", "seed", "batch", "world2", "shuffle",
                   "drop_last"):
        out.append(("reshape", change, reshape_case(h, change)))
    return out
