"""Hostile ``.pt`` and ``.npz`` fields: what ``torch.load(weights_only=True)`` lets through is
still checked, and an ``.npz`` naming one array twice is refused.

``weights_only`` refuses code, but it rebuilds whatever tensors and containers a file
describes: a pickle names one object from many places (a 40-deep chain of ``[x, x]`` is
2**40 values to walk), nests lists thousands deep, or makes a 4-byte storage show 10**12
elements through stride 0; and tensors can be sparse, quantized, nested, on ``meta`` or
carry a lazy conjugate bit. Each is a :class:`DecodeError` naming the field and key within
the decode limits, or (conj/neg) the right values; never a hang, a raw ``RecursionError``
or ``RuntimeError``, nor an array whose batch would allocate terabytes.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import feedline
from feedline.decode import Decoders
from feedline.errors import DecodeError, WorkerError
from feedline.format import pack


def _saved(obj: Any) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _shared_chain(depth: int) -> Any:
    x: Any = torch.zeros(1)
    for _ in range(depth):
        x = [x, x]  # the pickle stores each list once; walked as a tree it doubles per level
    return x


def _deep(depth: int) -> bytes:
    x: Any = torch.zeros(1)
    for _ in range(depth):
        x = [x]
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 4 * depth))  # torch.save pickles recursively
    try:
        return _saved(x)
    finally:
        sys.setrecursionlimit(old)


_CASES: dict[str, tuple[Callable[[], bytes], str]] = {
    "shared_chain": (lambda: _saved(_shared_chain(40)), "more than 1048576"),
    "deep": (lambda: _deep(3000), "more than 100 deep"),
    "stride0": (lambda: _saved(torch.zeros(1).as_strided((10**6, 10**6), (0, 0))), "once expanded"),
    "sparse": (lambda: _saved(torch.eye(3).to_sparse()), "sparse_coo"),
    "quantized": (lambda: _saved(torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.qint8)), "quantized"),
    "nested": (lambda: _saved(torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])), "nested"),
    "meta": (lambda: _saved(torch.empty(3, device="meta")), "meta device"),
}


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("case", sorted(_CASES))
def test_hostile_torch_fields_are_decode_errors_naming_the_field(case: str) -> None:
    make, words = _CASES[case]
    data = make()
    start = time.perf_counter()
    with pytest.raises(DecodeError, match=words) as err:
        Decoders().decode_field("state.pt", data, key="0007")
    assert time.perf_counter() - start < 5  # before: shared_chain never returned
    assert err.value.field == "state.pt" and err.value.key == "0007" and err.value.fix


def test_conjugate_and_negative_views_load_as_their_values() -> None:
    z = torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64)
    conj = Decoders().decode_field("x.pt", _saved({"conj": z.conj()}), key="0")["conj"]
    neg = Decoders().decode_field("x.pt", _saved(z.conj().imag), key="0")
    np.testing.assert_array_equal(conj, np.array([1 - 2j, 3 + 4j], np.complex64))
    np.testing.assert_array_equal(neg, np.array([-2, 4], np.float32))


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_shared_chain_in_a_packed_dataset_is_a_worker_error_naming_the_sample(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "0000.pt").write_bytes(_saved(_shared_chain(40)))
    pack([os.fspath(src)], os.fspath(tmp_path / "ds"))
    with (feedline.Loader(os.fspath(tmp_path / "ds"), batch_size=1, workers=1) as loader,
          pytest.raises(WorkerError, match="values") as err):
        next(iter(loader))
    assert err.value.field == "pt" and err.value.key == "0000"


def _zip(members: list[tuple[str, np.ndarray]]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns of the duplicate name it writes
        for name, arr in members:
            buf = io.BytesIO()
            np.save(buf, arr)
            zf.writestr(name, buf.getvalue())
    return out.getvalue()


@pytest.mark.parametrize("names", [("a.npy", "a.npy"), ("a", "a.npy")])
def test_an_npz_naming_one_array_twice_is_a_decode_error(names: tuple[str, str]) -> None:
    data = _zip([(names[0], np.zeros(2)), (names[1], np.ones(2))])
    with pytest.raises(DecodeError, match="two members named 'a'") as err:  # before: the last one, silently
        Decoders().decode_field("scan.npz", data, key="0003")
    assert err.value.field == "scan.npz" and err.value.key == "0003"


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_verify_decode_lists_every_hostile_field_without_a_traceback(tmp_path: Path) -> None:
    """``feedline verify --decode`` over the cases above and a JSON 10**5 lists deep: each sample
    is an UNDECODABLE line naming key and field, exit 1 (before: a ``RecursionError``
    traceback from the JSON, and the shared chain never finished)."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "0000.pt").write_bytes(_saved(_shared_chain(40)))
    (src / "0001.pt").write_bytes(_CASES["stride0"][0]())
    (src / "0002.npz").write_bytes(_zip([("a.npy", np.zeros(2)), ("a.npy", np.ones(2))]))
    (src / "0003.json").write_bytes(b"[" * 100_000 + b"]" * 100_000)
    (src / "0004.json").write_bytes(b"[" * 500 + b"]" * 500)  # deep but readable: not listed
    pack([os.fspath(src)], os.fspath(tmp_path / "ds"))
    env = {**os.environ, "PYTHONPATH": str(Path(feedline.__file__).resolve().parents[1])}
    run = subprocess.run([sys.executable, "-m", "feedline", "verify", "--decode", os.fspath(tmp_path / "ds")],
                         capture_output=True, text=True, timeout=100, env=env, stdin=subprocess.DEVNULL)
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
    listed = [line.split(" field=")[0].split("key=")[1] for line in run.stdout.splitlines()
              if line.startswith("UNDECODABLE")]
    assert listed == ["0000", "0001", "0002", "0003"], run.stdout
    assert "JSON nested deeper" in run.stdout and "4 problem(s)" in run.stdout
