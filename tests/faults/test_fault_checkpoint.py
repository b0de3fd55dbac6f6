"""Hostile and unlucky use of ``feedline.checkpoint``: odd states, hostile headers, shared folders.

Every case is either a correct round trip or a ``feedline.errors`` error that
names its place (``tensor=`` or ``path=``); nothing else may escape (no
``RecursionError``, ``StopIteration``, ``OSError``, ``RuntimeError``), nothing
may hang, and a hostile header never hands back a tensor other than the one
saved. The header fuzz runs 300 seeded mutations by default and 20000 marked
``slow``; the state fuzz 150 random states by default and 5000 ``slow``. Also
here: one folder shared by two checkpointers, threads, a signal handler, a fork
and a reader beside a rotating writer; a real full tmpfs. Kill -9 during saves
and RLIMIT_FSIZE are in ``tests/checkpoint/test_faults.py``.
"""

from __future__ import annotations

import copy
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import xxhash

from feedline.checkpoint import Checkpointer, load
from feedline.errors import (
    ChecksumError,
    ConfigError,
    FeedlineError,
    FormatError,
    ReadError,
    StateError,
    WriteError,
)

ROOT = Path(__file__).resolve().parents[2]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape \
            and (a.numel() == 0 or bool((a.reshape(-1) == b.reshape(-1)).all()))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and (a == b or (a != a and b != b))  # NaN equals NaN here


def _save(d: Path, state: Any, step: int = 1) -> None:
    with Checkpointer(d, io="buffered") as ck:
        ck.save(step, state)
        ck.wait()


# -- states: a round trip, or a ConfigError naming the place -------------------------------------

def _cycle() -> Any:
    x: dict[str, Any] = {"a": 1}
    x["self"] = {"back": x}
    return x


def _deep(n: int) -> Any:
    x: Any = [1]
    for _ in range(n):
        x = [x]
    return x


class _Custom:
    pass


ROUND_TRIPS: dict[str, Callable[[], Any]] = {
    "non-contiguous tensor": lambda: {"t": torch.arange(12.0).reshape(3, 4).t()},
    "negative-stride array": lambda: {"a": np.arange(10)[::-2]},
    "zero-size": lambda: {"t": torch.zeros(0, 5), "a": np.zeros((3, 0)), "big0": torch.zeros(2**20, 0)},
    "bool": lambda: {"t": torch.tensor([True, False]), "a": np.array([True])},
    "complex": lambda: {"t": torch.randn(3, dtype=torch.complex64), "a": np.array([1 + 2j])},
    "bfloat16, float8, uint16": lambda: {"b": torch.randn(5, dtype=torch.bfloat16),
                                         "f8": torch.randn(5).to(torch.float8_e4m3fn),
                                         "u16": torch.tensor([1, 60000]).to(torch.uint16)},
    "0-d": lambda: {"t": torch.tensor(3.0), "a": np.array(5)},
    # np.float64 is a float and np.str_ a str: they used to be saved as plain values, and a
    # non-finite np.float64 as the header text "np.float64(nan)", which no load could read.
    "numpy scalars": lambda: {"f": np.float32(1.5), "d": np.float64("nan"), "inf": np.float64("-inf"),
                              "i": np.int64(-3), "b": np.bool_(True), "s": np.str_("x"), "by": np.bytes_(b"y")},
    "nested lists of tensors": lambda: {"l": [[torch.ones(2), [np.zeros(3), (torch.zeros(1),)]]]},
    "plain values": lambda: {"big": 2**100, "f": [float("inf"), -0.0, 1e-310], "u": "ключ😀\x00",
                             (1, 2): None, None: b"\x00\xff", "__tensor__": 1, 1.5: ()},
    "root is a tensor": lambda: torch.ones(3),
    "datetime array": lambda: {"o": np.array(["2020-01-01"], dtype="M8[D]")},
    "199 levels deep": lambda: _deep(198),
}

REFUSED: dict[str, tuple[Callable[[], Any], str]] = {
    "set": (lambda: {"s": {1, 2}}, "s"),
    "custom class": (lambda: {"x": [1, {"y": _Custom()}]}, "x/1/y"),
    "python complex": (lambda: {"c": 1j}, "c"),
    "object array": (lambda: {"o": np.array([1, "a"], dtype=object)}, "o"),
    "structured array": (lambda: {"o": np.zeros(3, dtype=[("a", "i4")])}, "o"),
    "a cycle": (_cycle, "self/back"),
    "5000 levels deep": (lambda: {"x": _deep(5000)}, "x/0/0"),
    "sparse tensor": (lambda: {"s": torch.eye(3).to_sparse()}, "s"),
    "meta tensor": (lambda: {"m": torch.empty(3, device="meta")}, "m"),
    "quantized tensor": (lambda: {"q": torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.qint8)}, "q"),
    "nested tensor": (lambda: {"n": torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])}, "n"),
    # bytes viewed as a quantized dtype have no scale: before, saved and committed, then every load refused it
    "raw view as qint8": (lambda: {"q": torch.zeros(4, dtype=torch.uint8).view(torch.qint8)}, "q"),
}


@pytest.mark.parametrize("name", list(ROUND_TRIPS))
def test_odd_states_round_trip(tmp_path: Path, name: str) -> None:
    state = ROUND_TRIPS[name]()
    _save(tmp_path, state)
    assert _same(state, load(tmp_path))


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("name", list(REFUSED))
def test_unstorable_states_are_a_config_error_naming_the_place(tmp_path: Path, name: str) -> None:
    make, place = REFUSED[name]
    with Checkpointer(tmp_path, io="buffered") as ck:
        with pytest.raises(ConfigError) as e:
            ck.save(1, make())
        assert str(e.value.tensor).startswith(place)
        ck.save(2, {"ok": torch.ones(2)})  # the checkpointer still works
    assert load(tmp_path)["ok"].sum() == 2 and [p.name for p in tmp_path.glob("step-*.json")] == \
        ["step-0000000002.json"]


def test_tensors_sharing_storage_are_saved_as_copies_of_what_they_show(tmp_path: Path) -> None:
    base = torch.arange(1000.0)
    _save(tmp_path, {"a": base, "view": base[2:5], "again": base})
    out = load(tmp_path)
    assert torch.equal(out["view"], base[2:5]) and out["view"].numel() == 3  # not the whole storage
    assert out["view"].data_ptr() != out["a"].data_ptr() + 8  # a view: its own copy
    # the same tensor twice (tied weights) is stored once and loads as one tensor, as it was saved
    assert out["a"] is out["again"] and torch.equal(out["again"], base)
    (data,) = tmp_path.glob("step-*.bin")
    assert data.stat().st_size < 2 * 4000


def test_steps_past_ten_digits_stay_visible(tmp_path: Path) -> None:
    # {step:010d} writes 13 digits; the listing only matched 10, so the save committed and vanished.
    _save(tmp_path, {"x": 1}, step=10**12)
    assert Checkpointer(tmp_path).latest() == 10**12 and load(tmp_path) == {"x": 1}


@pytest.mark.parametrize("step", [True, -1, 1.0, "3", None])
def test_a_step_that_is_not_a_count_is_refused(tmp_path: Path, step: Any) -> None:
    with Checkpointer(tmp_path) as ck, pytest.raises(ConfigError, match="step"):
        ck.save(step, {})


def test_a_numpy_step_is_a_step(tmp_path: Path) -> None:
    with Checkpointer(tmp_path) as ck:
        ck.save(np.int64(7), {"a": 1})
    assert json.loads((tmp_path / "step-0000000007.json").read_text())["step"] == 7


# -- load(into=) a state of another structure ------------------------------------------------------

def test_load_into_another_structure(tmp_path: Path) -> None:
    _save(tmp_path, {"p": torch.zeros(3), "a": np.zeros(2, dtype=np.float32), "m": {"w": torch.ones(2)}})
    param = torch.nn.Parameter(torch.full((3,), 9.0))
    other = {"p": param, "extra": torch.ones(1), "m": [torch.zeros(2)]}
    with pytest.raises(StateError, match="2 tensor\\(s\\) of the state loaded into are not in the checkpoint"):
        load(tmp_path, into=other)  # strict by default, as load_state_dict
    assert float(param.detach().sum()) == 27  # nothing was loaded
    out = load(tmp_path, into=other, strict=False)
    assert out["p"] is param and float(param.detach().sum()) == 0  # a Parameter (requires_grad): was a RuntimeError
    assert "extra" not in out and torch.equal(out["m"]["w"], torch.ones(2))  # unmatched paths: from the file
    with pytest.raises(StateError, match="numpy array in the checkpoint but a torch tensor") as e:
        load(tmp_path, into={"a": torch.zeros(2)})
    assert e.value.tensor == "a"
    with pytest.raises(StateError, match="torch tensor in the checkpoint but a numpy array"):
        load(tmp_path, into={"p": np.zeros(3, dtype=np.float32)})
    frozen = np.zeros(2, dtype=np.float32)
    frozen.flags.writeable = False
    with pytest.raises(StateError, match="cannot be overwritten") as e:  # was FormatError "damaged"
        load(tmp_path, into={"a": frozen})
    assert e.value.tensor == "a"


# -- hostile headers -----------------------------------------------------------------------------

STATE = {"w": torch.arange(10.0), "a": np.arange(7, dtype=np.int16), "m": {"x": [1, 2]}}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pristine")
    _save(d, STATE)
    return d


@pytest.fixture
def saved(pristine: Path, tmp_path: Path) -> tuple[Path, Path, dict[str, Any]]:
    d = tmp_path / "ck"
    shutil.copytree(pristine, d)
    hp = d / "step-0000000001.json"
    return d, hp, json.loads(hp.read_text())


def resealed(doc: Any) -> str:
    """``doc`` as header text whose own checksum matches its content, as a buggy or hostile
    writer would leave it: the checks past the header checksum are what is tested."""
    from feedline.checkpoint._store import HEADER_CHECKSUM, _canonical

    if isinstance(doc, dict):
        doc = {k: v for k, v in doc.items() if k != HEADER_CHECKSUM}
        try:
            doc[HEADER_CHECKSUM] = f"{xxhash.xxh3_64_intdigest(_canonical(doc)):016x}"
        except (ValueError, TypeError):  # NaN: no canonical form, left without a checksum
            pass
    return json.dumps(doc)


def _t(h: dict[str, Any], i: int = 0) -> dict[str, Any]:
    return h["tensors"][i]


def _nest(n: int) -> str:
    return "[" * n + "]" * n


HEADER_EDITS: dict[str, tuple[Callable[[dict[str, Any]], Any], type[FeedlineError]]] = {
    # each was, before: the raw exception in the comment, or a silent wrong answer
    "data name with NUL": (lambda h: h.update(data="a\x00b"), FormatError),  # ValueError
    "data name empty (the folder)": (lambda h: h.update(data=""), FormatError),  # opened the folder
    "data name ../x": (lambda h: h.update(data="../x"), FormatError),
    "data_bytes 10**18": (lambda h: h.update(data_bytes=10**18), FormatError),  # StopIteration
    "data_bytes -1": (lambda h: h.update(data_bytes=-1, tensors=[], state={}), FormatError),  # ValueError
    "data_bytes 1e300": (lambda h: h.update(data_bytes=1e300), FormatError),  # StopIteration
    "offset -4096": (lambda h: _t(h).update(offset=-4096), FormatError),  # read other bytes
    "offset 2**62": (lambda h: _t(h).update(offset=2**62), FormatError),
    "shape [10**12], 0 bytes": (lambda h: _t(h).update(shape=[10**12], nbytes=0, xxh3=_t(h, 1)["xxh3"]),
                                FormatError),  # verify=False: torch.empty(10**12)
    "shape [2**31, 2**31, 0]": (lambda h: _t(h).update(shape=[2**31, 2**31, 0]), FormatError),
    "shape negative": (lambda h: _t(h).update(shape=[-1]), FormatError),
    "shape of another size": (lambda h: _t(h).update(shape=[3, 3]), FormatError),
    "torch dtype __class__": (lambda h: _t(h).update(dtype="__class__"), FormatError),
    "torch dtype qint8": (lambda h: _t(h).update(dtype="qint8"), FormatError),
    "numpy dtype object": (lambda h: _t(h, 1).update(dtype="O"), FormatError),
    "numpy dtype of fields": (lambda h: _t(h, 1).update(dtype=[["a", "<i2"]]), FormatError),
    "checksum wrong": (lambda h: _t(h).update(xxh3="0" * 16), ChecksumError),
    "checksum not hex": (lambda h: _t(h).update(xxh3="zz"), FormatError),
    "tensors a dict": (lambda h: h.update(tensors={"a": 1}), FormatError),
    "tensor index -1": (lambda h: h.update(state={"w": {"__tensor__": -1}}), FormatError),  # the last tensor
    "tensor index true": (lambda h: h.update(state={"w": {"__tensor__": True}}), FormatError),  # tensor 1
    "tensor index 10**30": (lambda h: h.update(state={"w": {"__tensor__": 10**30}}), FormatError),
    "bytes not base64": (lambda h: h.update(state={"__bytes__": "!!"}), FormatError),  # b"" silently
    "scalar out of range": (lambda h: h.update(state={"__scalar__": "<i1", "value": 1000}), FormatError),
    "scalar of objects": (lambda h: h.update(state={"__scalar__": "O", "value": "x"}), FormatError),
    "dict pairs not pairs": (lambda h: h.update(state={"__dict__": [[1]]}), FormatError),
    "version 3": (lambda h: h.update(version=3), FormatError),
    # loaded, these were two tensors sharing memory (an in-place step on one changed the other)
    "same bytes as another dtype": (lambda h: _t(h, 1).update(offset=0, nbytes=40, shape=[20],
                                                              xxh3=_t(h)["xxh3"]), FormatError),
    "payload inside another": (lambda h: _t(h, 1).update(offset=0), FormatError),
    "version 1 with payloads 64 bytes apart": (lambda h: h.update(version=1), FormatError),  # v1 paged each
    "step of another file": (lambda h: h.update(step=2), FormatError),
}
RAW_HEADERS: dict[str, Callable[[str], bytes]] = {
    "JSON nested 10**5 deep": lambda text: _nest(100_000).encode(),  # RecursionError
    "state nested 5000 deep": lambda text: text.replace('"state":{', f'"state":{{"deep":{_nest(5000)},', 1).encode(),
    "integer of 10**4 digits": lambda text: text.replace('"step":1', '"step":' + "1" * 10_000, 1).encode(),
    "not UTF-8": lambda text: b"\xff\xfe\x00{",
}


def _load_in_thread(d: Path, **kw: Any) -> Any:
    """``load(d)`` with a deadline: a hang is a failure, not a stuck suite."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = load(d, **kw)
        except BaseException as e:
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(30)
    assert not t.is_alive(), "load hung"
    if "error" in box:
        raise box["error"]
    return box["value"]


@pytest.mark.parametrize("verify", [True, False])
@pytest.mark.parametrize("name", list(HEADER_EDITS))
def test_hostile_header_edits_are_refused(saved: tuple[Path, Path, dict[str, Any]], name: str,
                                          verify: bool) -> None:
    d, hp, header = saved
    edit, error = HEADER_EDITS[name]
    edit(header)
    hp.write_text(resealed(header))
    if error is ChecksumError and not verify:
        error = FeedlineError  # not checked without verify; the case must not crash either
        _load_in_thread(d, verify=verify)
        return
    with pytest.raises(error) as e:
        _load_in_thread(d, verify=verify)
    assert e.value.place.get("path") or e.value.place.get("tensor")


@pytest.mark.parametrize("name", list(RAW_HEADERS))
def test_hostile_header_texts_are_a_format_error(saved: tuple[Path, Path, dict[str, Any]], name: str) -> None:
    d, hp, _ = saved
    hp.write_bytes(RAW_HEADERS[name](hp.read_text()))
    with pytest.raises(FormatError) as e:
        _load_in_thread(d)
    assert e.value.path


@pytest.mark.parametrize("what", ["folder", "fifo"])
def test_a_header_that_is_not_a_file_is_a_read_error(saved: tuple[Path, Path, dict[str, Any]], what: str) -> None:
    d, hp, _ = saved
    hp.unlink()
    if what == "folder":
        hp.mkdir()
    else:
        os.mkfifo(hp)  # open() would wait for a writer forever
    with pytest.raises(ReadError, match="cannot read checkpoint header") as e:
        _load_in_thread(d)
    assert e.value.path == str(hp)


def test_a_checkpoint_folder_that_is_a_file(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(ConfigError, match="not a folder"):
        Checkpointer(f)  # was FileExistsError
    with pytest.raises(ReadError, match="cannot list"):
        load(f)  # was NotADirectoryError


def _mutate(rng: random.Random, doc: Any) -> Any:
    """One random edit somewhere in a JSON document: a value replaced, a key dropped or added, a list cut."""
    odd = [None, True, False, -1, 0, 1, 2**31, 2**64, -(2**63), 1.5, float("nan"), "", "x", "../x", "<f4",
           "float32", "O", [], {}, [1], {"__tensor__": 0}, {"__tensor__": -1}, {"__dict__": [[1]]},
           {"__scalar__": "<i1", "value": 999}, {"__bytes__": "@@"}, {"__tuple__": 3}]
    paths: list[tuple[Any, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for k in list(node):
                paths.append((node, k))
                walk(node[k])
        elif isinstance(node, list):
            for i in range(len(node)):
                paths.append((node, i))
                walk(node[i])

    walk(doc)
    parent, key = rng.choice(paths)
    roll = rng.random()
    if roll < 0.6:
        parent[key] = copy.deepcopy(rng.choice(odd))
    elif roll < 0.75 and isinstance(parent, dict):
        del parent[key]
    elif roll < 0.85 and isinstance(parent, dict):
        parent[rng.choice(["__tensor__", "__dict__", "__bytes__", "__scalar__", "__tuple__", "evil"])] = \
            copy.deepcopy(rng.choice(odd))
    elif isinstance(parent[key], int) and not isinstance(parent[key], bool):
        parent[key] = parent[key] + rng.choice([-4096, -1, 1, 4096, 2**40])
    elif isinstance(parent[key], list):
        del parent[key][rng.randrange(len(parent[key]) + 1):]
    else:
        parent[key] = copy.deepcopy(rng.choice(odd))
    return doc


def _fuzz(saved: tuple[Path, Path, dict[str, Any]], cases: int, seed: int) -> dict[str, int]:
    d, hp, header = saved
    rng = random.Random(seed)
    outcomes: dict[str, int] = {}
    for _ in range(cases):
        doc = copy.deepcopy(header)
        for _ in range(rng.choice([1, 1, 2, 3])):
            _mutate(rng, doc)
        hp.write_text(resealed(doc))
        verify = rng.random() < 0.7
        try:
            out = _load_in_thread(d, verify=verify)
        except FeedlineError as e:
            assert e.place, e
            outcomes[type(e).__name__] = outcomes.get(type(e).__name__, 0) + 1
            continue
        outcomes["loaded"] = outcomes.get("loaded", 0) + 1
        if verify and isinstance(out, dict) and isinstance(out.get("w"), torch.Tensor) and out["w"].shape == (10,):
            assert torch.equal(out["w"], STATE["w"]), (doc, out)  # never another tensor's bytes
    return outcomes


def test_header_fuzz(saved: tuple[Path, Path, dict[str, Any]]) -> None:
    outcomes = _fuzz(saved, 300, seed=0)
    assert outcomes.get("FormatError", 0) > 100, outcomes


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_header_fuzz_large(saved: tuple[Path, Path, dict[str, Any]]) -> None:
    outcomes = _fuzz(saved, 20_000, seed=1)
    assert sum(outcomes.values()) == 20_000


# -- one folder, two checkpointers; foreign files ------------------------------------------------

_HOLDER = """
import sys
import numpy as np
from feedline.checkpoint import Checkpointer
ck = Checkpointer(sys.argv[1], io="buffered", keep=1)
ck.save(1, {"a": np.ones(4)})
ck.wait()
print("holding", flush=True)
sys.stdin.read()
"""


def _holder(d: Path) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    p = subprocess.Popen([sys.executable, "-c", _HOLDER, str(d)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True, env=env)
    assert p.stdout is not None and p.stdout.readline().strip() == "holding"
    return p


@pytest.mark.timeout(60)
def test_a_second_checkpointer_on_a_folder_is_refused_while_the_first_saves(tmp_path: Path) -> None:
    # Before: both saved; each one's rotation removed the other's data file mid-save
    # ("committing step 52 failed: No such file or directory", 4 of 5 runs of 30 saves each).
    holder = _holder(tmp_path)
    try:
        second = Checkpointer(tmp_path, keep=1)
        assert second.load()["a"].sum() == 4  # loading needs no lock
        with pytest.raises(ConfigError, match=f"another Checkpointer \\(pid {holder.pid}\\)"):
            second.save(2, {"a": np.zeros(4)})
    finally:
        holder.kill()  # kill -9: the lock goes with the process
        holder.wait()
    second.save(3, {"a": np.zeros(4)})
    second.close()
    assert second.steps() == [3]
    with Checkpointer(tmp_path) as a, Checkpointer(tmp_path) as b:  # in one process too
        a.save(4, {})
        with pytest.raises(ConfigError, match="another Checkpointer"):
            b.save(5, {})
    with Checkpointer(tmp_path) as c:  # close() released it
        c.save(6, {})


def test_rotation_leaves_foreign_files_alone(tmp_path: Path) -> None:
    foreign = ["step-notes.bin", "step-0000000001.bin", "step-0000000001.backup.bin", "README.txt",
               ".step-mine.partial", "step-0000000001.json.orig"]
    for name in foreign:
        (tmp_path / name).write_text("mine")
    (tmp_path / "step-0000000009.dir").mkdir()
    with Checkpointer(tmp_path, keep=1, io="buffered") as ck:
        for step in range(1, 4):
            ck.save(step, {"a": np.full(3, step)})
    assert ck.steps() == [3] and load(tmp_path)["a"][0] == 3
    for name in foreign:
        assert (tmp_path / name).read_text() == "mine", name  # "step-*.bin" were removed as orphans
    assert (tmp_path / "step-0000000009.dir").is_dir()
    ours = sorted(p.name for p in tmp_path.glob("step-0000000003.*"))
    assert len(ours) == 2 and not [p for p in tmp_path.iterdir() if p.name[:15] in ("step-0000000001",
                                                                                  "step-0000000002")
                                   and len(p.name) == 29]  # our old data files (token of 8 hex digits)


# -- a full file system for real: a 2 MiB tmpfs -------------------------------------------------

@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Any:
    mnt = tmp_path / "fs"
    mnt.mkdir()
    if shutil.which("mount") is None or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root); tests/checkpoint/test_faults.py covers "
                    "a full disk through RLIMIT_FSIZE")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.fixture
def no_odirect_fs(tmp_path: Path) -> Any:
    """A real file system that refuses O_DIRECT at open (ramfs: EINVAL), where the test may mount one."""
    mnt = tmp_path / "ramfs"
    mnt.mkdir()
    if shutil.which("mount") is None or subprocess.run(
            ["mount", "-t", "ramfs", "ramfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a ramfs here (needs root)")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.mark.timeout(60)
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_file_system_that_refuses_o_direct_gets_buffered_writes_and_says_so(no_odirect_fs: Path) -> None:
    # Checkpointer(io="direct") already fell back, but writer_choice kept saying "direct", "io='direct'
    # requested"; DCPWriter(io="direct") failed the whole dcp.save with WriteError "Invalid argument".
    import torch.distributed.checkpoint as dcp

    from feedline.checkpoint import DCPWriter
    from feedline.checkpoint._dcp_storage import DirectStream

    state = {"x": torch.randn(5000), "tail": torch.arange(7, dtype=torch.int8)}
    for io in ("direct", "auto"):
        with Checkpointer(no_odirect_fs / f"ck-{io}", io=io) as ck:
            ck.save(1, state)
            ck.wait()
            assert _same(state, ck.load())
            assert ck.writer_choice is not None and ck.writer_choice.name == "buffered", ck.writer_choice
            assert "O_DIRECT" in ck.writer_choice.reason and "buffered writes" in ck.writer_choice.reason
        writer = DCPWriter(no_odirect_fs / f"dcp-{io}", io=io)
        dcp.save(state, storage_writer=writer)
        target = {k: torch.zeros_like(v) for k, v in state.items()}
        dcp.load(target, checkpoint_id=no_odirect_fs / f"dcp-{io}")
        assert _same(state, target)
        assert writer.choice.name == "buffered" and "O_DIRECT" in writer.choice.reason, writer.choice
    with pytest.raises(WriteError, match="refuses O_DIRECT"):
        DirectStream(str(no_odirect_fs / "direct.distcp"))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("seed", [1, 2])
def test_saves_onto_a_full_tmpfs_keep_every_committed_checkpoint(small_tmpfs: Path, seed: int) -> None:
    """30 saves of 1 KB to 2.5 MB onto 2 MiB, keep= None, 1 or 2: a save that does not fit is a
    WriteError; every committed checkpoint loads and holds its step; no data file is left
    that no header names (measured before this suite: the same)."""
    rng = random.Random(seed)
    outcomes: dict[str, int] = {}
    with Checkpointer(small_tmpfs, keep=rng.choice([None, 1, 2]), io="direct") as ck:
        for step in range(30):
            size = rng.choice([1000, 50_000, 300_000, 700_000, 1_200_000, 2_500_000])
            try:
                ck.save(step, {"a": np.full(size // 8, step, dtype=np.int64), "step": step})
                ck.wait()
                outcomes["ok"] = outcomes.get("ok", 0) + 1
            except FeedlineError as e:
                assert type(e).__name__ == "WriteError" and "free space" in str(e), e
                outcomes["full"] = outcomes.get("full", 0) + 1
            for s in ck.steps():
                got = load(small_tmpfs, s)
                assert got["step"] == s and bool((got["a"] == s).all())
            live = {json.loads((small_tmpfs / f"step-{s:010d}.json").read_text())["data"] for s in ck.steps()}
            stray = [n for n in os.listdir(small_tmpfs)
                     if (n.endswith(".bin") and n not in live) or n.endswith(".partial")]
            assert stray == [], (step, stray)
    assert outcomes.get("ok") and outcomes.get("full"), outcomes


@pytest.mark.timeout(60)
def test_io_auto_on_a_full_file_system_is_a_write_error(small_tmpfs: Path) -> None:
    # io="auto" probes O_DIRECT with a small file; on a full disk the probe raised ENOSPC raw
    # from save() (and from DCPWriter's constructor)
    with open(small_tmpfs / "filler", "wb") as f:
        try:
            while True:
                f.write(b"x" * 65536)
                f.flush()
        except OSError:
            pass
    with Checkpointer(small_tmpfs / "ck") as ck:
        ck.save(1, {"a": np.ones(100_000)})
        with pytest.raises(FeedlineError, match="No space left") as e:
            ck.wait()
        assert type(e.value).__name__ == "WriteError" and ck.writer_choice is not None
        assert "cannot write a probe file" in ck.writer_choice.reason
    assert list((small_tmpfs / "ck").glob("step-*")) == []


_FORKED = """
import os, signal, sys
import numpy as np
from feedline.checkpoint import Checkpointer
from feedline.errors import ConfigError
ck = Checkpointer(sys.argv[1], io="buffered", keep=2)
ck.save(1, {"a": np.ones(10)})
ck.wait()
ck.save(2, {"a": np.ones(200_000)})  # possibly still writing at the fork
pid = os.fork()
if pid == 0:
    signal.alarm(20)  # a hang is SIGALRM
    for call in (lambda: ck.save(3, {}), ck.wait):
        try:
            call()
            os._exit(3)
        except ConfigError as e:
            assert "is a fork of it" in str(e)
    assert ck.load(1)["a"].sum() == 10
    ck.close()
    sys.exit(0)  # the inherited Checkpointer's finalizer runs at exit
_, status = os.waitpid(pid, 0)
print(status, flush=True)
ck.save(4, {"a": np.ones(10)})
ck.close()
print(ck.steps(), flush=True)
"""


@pytest.mark.timeout(60)
def test_a_forked_child_cannot_save_through_its_parents_checkpointer(tmp_path: Path) -> None:
    # before: save() and wait() in the child waited forever (no writer thread after fork)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", _FORKED, str(tmp_path)], capture_output=True, text=True,
                         env=env, timeout=50)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[:2] == ["0", "[2, 4]"], out.stdout  # the child exited 0; the parent's saves go on


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_hundred_thousand_tiny_tensors_round_trip(tmp_path: Path) -> None:
    """Small tensors are packed 64 bytes apart: 10**5 scalars take 6.1 MiB on disk and in staging
    (before, each started on its own 4 KiB page: 405 MiB; 4 s blocked, 9 s until durable, 4 s to
    load on the 2-core VM)."""
    state = {f"t{i}": torch.tensor(float(i)) for i in range(100_000)}
    _save(tmp_path, state)
    out = load(tmp_path)
    assert len(out) == 100_000 and all(out[f"t{i}"].item() == i for i in range(0, 100_000, 997))
    assert sum(p.stat().st_size for p in tmp_path.glob("step-*.bin")) <= 100_000 * 64


def test_a_save_below_the_newest_step_is_kept_and_warns(tmp_path: Path) -> None:
    # Training rewound to an earlier checkpoint: before, with keep=2, the save of step 60 into a
    # folder holding 90 and 100 was the lowest step and was removed the moment it was committed.
    from feedline.checkpoint import CheckpointWarning

    with Checkpointer(tmp_path, keep=2) as ck:
        for step in (80, 90, 100):
            ck.save(step, {"s": step})
        with pytest.warns(CheckpointWarning, match="latest\\(\\) and load\\(\\) still return step 100"):
            ck.save(60, {"s": 60})
        ck.wait()
        assert ck.steps() == [60, 100] and ck.load(60) == {"s": 60}
        ck.save(70, {"s": 70})  # warned once per checkpointer
    assert ck.steps() == [70, 100]


def test_rotation_keeps_the_data_of_a_header_it_cannot_read(tmp_path: Path) -> None:
    # before: a damaged header's data file was deleted as an orphan by the next save
    with Checkpointer(tmp_path, keep=3) as ck:
        ck.save(1, {"a": np.ones(3)})
        ck.wait()
        data = json.loads((tmp_path / "step-0000000001.json").read_text())["data"]
        (tmp_path / "step-0000000001.json").write_text('{"damaged')
        ck.save(2, {"a": np.zeros(3)})
    assert (tmp_path / data).exists()


class _SignalsWhileEncoded(dict):  # type: ignore[type-arg]
    """A state whose encoding sends this process SIGUSR1: the handler runs inside save()."""

    def items(self):  # type: ignore[no-untyped-def]
        os.kill(os.getpid(), signal.SIGUSR1)
        return super().items()


@pytest.mark.timeout(60)
def test_a_save_from_a_signal_handler_inside_a_save_is_refused(tmp_path: Path) -> None:
    # before: the handler's save staged into the same buffer the interrupted save then
    # overwrote: both checkpoints committed, loading wrong tensors with matching checksums
    # (measured: 3 of 3 runs with a 320 MB state, SIGUSR1 at 0.15-0.6 s)
    ck = Checkpointer(tmp_path, io="buffered")
    seen: list[BaseException] = []

    def handler(signum: int, frame: Any) -> None:
        try:
            ck.save(2, {"x": torch.full((1000,), -1.0)})
        except ConfigError as e:
            seen.append(e)

    old = signal.signal(signal.SIGUSR1, handler)
    try:
        state = _SignalsWhileEncoded(x=torch.arange(1000.0))
        ck.save(1, state)
        ck.close()
    finally:
        signal.signal(signal.SIGUSR1, old)
    assert len(seen) == 1 and "from a signal handler?" in str(seen[0])
    assert ck.steps() == [1] and torch.equal(load(tmp_path)["x"], torch.arange(1000.0))


@pytest.mark.filterwarnings("ignore:saving step")  # the threads' steps interleave
@pytest.mark.timeout(120)
def test_saves_from_several_threads_run_one_after_another(tmp_path: Path) -> None:
    with Checkpointer(tmp_path, io="buffered") as ck:
        def saver(t: int) -> None:
            for i in range(4):
                step = t * 10 + i
                ck.save(step, {"x": torch.full((300_000,), float(step))})

        threads = [threading.Thread(target=saver, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    assert len(ck.steps()) == 16  # before: tensors of another thread's save, checksums matching
    for step in ck.steps():
        assert bool((load(tmp_path, step)["x"] == step).all()), step


_WRITER = """
import sys
import numpy as np
from feedline.checkpoint import Checkpointer
ck = Checkpointer(sys.argv[1], io="buffered", keep=1, durable=False)
ck.save(0, {"a": np.zeros(20_000), "s": 0})
ck.wait()
print("first", flush=True)
for s in range(1, 120):
    ck.save(s, {"a": np.full(20_000, s), "s": s})
ck.close()
"""


@pytest.mark.timeout(120)
def test_loading_the_latest_beside_a_writer_that_rotates(tmp_path: Path) -> None:
    # An evaluation job loading the latest while training saves with keep=1: before, about 1
    # load in 1000 failed (ReadError "no checkpoint for step N" or "cannot open checkpoint
    # data") when the step it listed was rotated away before it was read.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path)], stdout=subprocess.PIPE,
                              text=True, env=env)
    assert writer.stdout is not None and writer.stdout.readline().strip() == "first"
    loads = 0
    while writer.poll() is None:
        state = load(tmp_path)
        assert bool((state["a"] == state["s"]).all())
        loads += 1
    assert writer.wait() == 0 and loads > 100


@pytest.mark.timeout(60)
def test_a_closed_checkpointer_refuses_saves_and_close_waits_for_one_staging(tmp_path: Path) -> None:
    # before: save()/reserve() after close() raised RuntimeError "cannot schedule new futures
    # after shutdown"; a close() from another thread could shut the writer under a save
    ck = Checkpointer(tmp_path, io="buffered")
    errors: list[BaseException] = []
    started = threading.Event()

    def saver() -> None:
        try:
            for step in range(1000):
                ck.save(step, {"x": torch.full((200_000,), float(step))})
                started.set()
        except BaseException as e:  # the first save after close()
            errors.append(e)
            started.set()

    th = threading.Thread(target=saver)
    th.start()
    assert started.wait(30)
    ck.close()
    th.join(30)
    assert len(errors) == 1 and isinstance(errors[0], ConfigError) and "is closed" in str(errors[0])
    with pytest.raises(ConfigError, match="is closed"):
        ck.reserve({"x": torch.ones(2)})
    for step in ck.steps():
        assert bool((load(tmp_path, step)["x"] == step).all())


# -- random states: a round trip, or a ConfigError naming a path that is in the state ----------

def _random_leaf(rng: random.Random) -> Any:
    kind = rng.randrange(14)
    shape = tuple(rng.choice([0, 1, 2, 3, 5, 4097]) for _ in range(rng.randrange(3)))
    if kind == 0:
        return torch.randn(shape).to(rng.choice([torch.float32, torch.bfloat16, torch.float16, torch.float64]))
    if kind == 1:
        return torch.randint(0, 100, shape).to(rng.choice([torch.int8, torch.int64, torch.uint8, torch.bool]))
    if kind == 2:
        return torch.randn((*shape, 3))[..., ::2]  # not contiguous
    if kind == 3:
        return np.random.default_rng(rng.randrange(99)).standard_normal(shape).astype(rng.choice(["<f4", ">f8", "<c8"]))
    if kind == 4:
        return rng.choice([np.float64("nan"), np.float32(-0.0), np.int8(-5), np.uint64(2**63), np.bool_(False),
                           np.str_("s"), np.bytes_(b"b"), np.complex64(1j)])  # np.complex64: refused
    if kind == 5:
        return rng.choice([None, True, -(2**70), 1.5, float("inf"), "ключ", b"\x00", ""])
    if kind == 6:
        return rng.choice([{1, 2}, 1j, _Custom(), np.array([None]), torch.eye(2).to_sparse()])  # refused
    return rng.choice([[], (), {}, [1, (2, 3)]])


def _random_state(rng: random.Random, depth: int = 0) -> Any:
    if depth > 3 or rng.random() < 0.3:
        return _random_leaf(rng)
    if rng.random() < 0.5:
        keys = [rng.choice(["a", "b/c", "__x", "", "ключ"]) for _ in range(rng.randrange(4))]
        keys += [rng.choice([0, 7, -1, None, (1, "t"), 2.5, np.int64(3)]) for _ in range(rng.randrange(2))]
        return {k: _random_state(rng, depth + 1) for k in keys}
    items = [_random_state(rng, depth + 1) for _ in range(rng.randrange(4))]
    return tuple(items) if rng.random() < 0.3 else items


def _state_fuzz(tmp_path: Path, cases: int, seed: int) -> dict[str, int]:
    rng = random.Random(seed)
    outcomes = {"round trip": 0, "refused": 0}
    with Checkpointer(tmp_path, io="buffered", keep=1) as ck:
        for step in range(cases):
            state = _random_state(rng)
            try:
                ck.save(step, state)
            except ConfigError as e:
                assert e.tensor is not None, e  # names a place
                outcomes["refused"] += 1
                continue
            got = ck.load()
            assert _same(state, got), (step, state, got)
            outcomes["round trip"] += 1
    return outcomes


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.timeout(120)
def test_random_states_round_trip_or_are_refused(tmp_path: Path) -> None:
    outcomes = _state_fuzz(tmp_path, 150, seed=0)
    assert outcomes["round trip"] > 50 and outcomes["refused"] > 10, outcomes


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.timeout(1800)
def test_random_states_large(tmp_path: Path) -> None:
    outcomes = _state_fuzz(tmp_path, 5000, seed=1)
    assert sum(outcomes.values()) == 5000
