"""Files users keep beside their data that feedline did not write: ``torch.save`` files,
other pickles and ``.npz`` archives. A ``.pt`` loads through ``torch.load(weights_only=True)``
(tensors and containers only: a pickle of anything else is refused, never run); any other
pickle stays bytes (pack says so); an ``.npz`` decodes to its arrays without pickle, within the
declared size bound. Dicts of arrays collate like torch's ``default_collate``: one stacked
tensor per member, a list where the members' shapes vary."""

from __future__ import annotations

import io
import os
import pickle
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import feedline
from feedline.decode import Limits
from feedline.errors import WorkerError
from feedline.format import pack


class _Booby:
    """Unpickling this writes a marker file: proof that something ran the pickle."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.write_text, (Path(self.marker), "unpickled"))


def _npz(i: int, compressed: bool = False) -> bytes:
    buf = io.BytesIO()
    save = np.savez_compressed if compressed else np.savez
    save(buf, points=np.arange(3 * (i % 4 + 1), dtype=np.float32).reshape(-1, 3), pose=np.eye(4) * i)
    return buf.getvalue()


def _write(src: Path, n: int, marker: Path) -> None:
    src.mkdir(parents=True)
    for i in range(n):
        buf = io.BytesIO()
        torch.save({"weights": torch.arange(4) + i, "scale": torch.tensor(i / 2)}, buf)
        (src / f"{i:04d}.state.pt").write_bytes(buf.getvalue())
        buf = io.BytesIO()
        torch.save([torch.full((2,), float(i)), i], buf)  # a list (image, label): saved as users do
        (src / f"{i:04d}.pair.pt").write_bytes(buf.getvalue())
        (src / f"{i:04d}.meta.pkl").write_bytes(pickle.dumps(_Booby(os.fspath(marker))))
        (src / f"{i:04d}.npz").write_bytes(_npz(i, compressed=i % 2 == 1))
        (src / f"{i:04d}.cls").write_bytes(b"%d" % (i % 3))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_torch_files_load_as_tensors_pickles_as_bytes_npz_as_arrays(tmp_path: Path, worker_type: str) -> None:
    marker = tmp_path / "marker"
    _write(tmp_path / "src", 9, marker)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pack([os.fspath(tmp_path / "src")], os.fspath(tmp_path / "ds"))
    notes = " ".join(str(w.message) for w in caught)
    assert "'meta.pkl'" in notes and "never unpickles" in notes and "state.pt" not in notes

    seen = 0
    with feedline.Loader(os.fspath(tmp_path / "ds"), batch_size=4, workers=2, drop_last=False,
                         worker_type=worker_type) as loader:
        for epoch in range(2):
            loader.set_epoch(epoch)
            for batch in loader:
                ids = [int(k) for k in batch["__key__"]]
                state, arrays = batch["state.pt"], batch["npz"]
                assert state["weights"].tolist() == [[j + i for j in range(4)] for i in ids]
                assert state["scale"].tolist() == [i / 2 for i in ids]
                image, label = batch["pair.pt"]
                assert image.tolist() == [[float(i)] * 2 for i in ids] and label.tolist() == ids
                assert torch.equal(arrays["pose"], torch.stack([torch.eye(4, dtype=torch.float64) * i
                                                                for i in ids]))
                for i, blob, points in zip(ids, batch["meta.pkl"], arrays["points"], strict=True):
                    assert blob == (tmp_path / "src" / f"{i:04d}.meta.pkl").read_bytes()
                    assert np.array_equal(np.asarray(points), np.load(io.BytesIO(_npz(i)))["points"])
                    seen += 1
    assert seen == 18
    assert not marker.exists()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_a_torch_dict_with_names_and_bfloat16_collates_as_default_collate(tmp_path: Path, worker_type: str) -> None:
    """A ``.pt`` dict with a string member and a ``bfloat16`` tensor (before: the string made the
    whole field a list of dicts; bfloat16, which numpy lacks, came as a list of tensors)."""
    from torch.utils.data import default_collate

    (tmp_path / "src").mkdir()
    saved = []
    for i in range(6):
        value = {"image": torch.full((2, 3), i, dtype=torch.uint8), "label": i, "name": f"obj {i}",
                 "emb": torch.arange(4, dtype=torch.bfloat16) / (i + 1), "meta": {"id": torch.tensor(i), "who": "me"}}
        buf = io.BytesIO()
        torch.save(value, buf)
        (tmp_path / "src" / f"{i:04d}.pt").write_bytes(buf.getvalue())
        saved.append(value)
    pack([os.fspath(tmp_path / "src")], os.fspath(tmp_path / "ds"), durable=False, warn=lambda line: None)
    with feedline.Loader(os.fspath(tmp_path / "ds"), batch_size=3, workers=2, shuffle=False,
                         worker_type=worker_type) as loader:
        batches = [b["pt"] for b in loader]
    for k, got in enumerate(batches):
        want = default_collate(saved[3 * k:3 * k + 3])
        assert got["name"] == want["name"] and got["meta"]["who"] == want["meta"]["who"]
        for member in ("image", "label", "emb"):
            assert got[member].dtype == want[member].dtype and torch.equal(got[member], want[member]), member
        assert torch.equal(got["meta"]["id"], want["meta"]["id"])


def test_a_torch_file_holding_an_object_is_refused_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    trap = io.BytesIO()
    torch.save({"x": torch.ones(2), "trap": _Booby(os.fspath(marker))}, trap)
    for case, data, words in (("object", trap.getvalue(), "weights_only"),
                              ("garbage", b"not a torch file", "not a torch.save file"),
                              ("cut", trap.getvalue()[:200], "unreadable")):
        src = tmp_path / case
        src.mkdir()
        (src / "0000.pt").write_bytes(data)
        pack([os.fspath(src)], os.fspath(tmp_path / f"ds-{case}"))
        with (feedline.Loader(os.fspath(tmp_path / f"ds-{case}"), batch_size=1, workers=1) as loader,
              pytest.raises(WorkerError, match=words) as err):
            next(iter(loader))
        assert err.value.field == "pt" and err.value.key == "0000"
    assert not marker.exists()


def _bad_npz(case: str) -> bytes:
    buf = io.BytesIO()
    if case == "bomb":  # 64 MiB inflated, ~64 KiB stored
        np.savez_compressed(buf, zeros=np.zeros(64 << 20, np.uint8))
    elif case == "objects":  # needs pickle to read
        np.savez(buf, names=np.array(["a", None], dtype=object))
    else:
        buf.write(b"PK\x03\x04 not really a zip")
    return buf.getvalue()


@pytest.mark.parametrize(("case", "words"), [("bomb", "inflates to"), ("objects", "Python objects"),
                                             ("garbage", "unreadable")])
def test_npz_bombs_and_object_arrays_are_decode_errors_naming_the_field(
        tmp_path: Path, case: str, words: str) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "0000.npz").write_bytes(_bad_npz(case))
    pack([os.fspath(src)], os.fspath(tmp_path / "ds"))
    with (feedline.Loader(os.fspath(tmp_path / "ds"), batch_size=1, workers=1,
                          limits=Limits(max_bytes=1 << 20)) as loader,
          pytest.raises(WorkerError, match=words) as err):
        next(iter(loader))
    assert err.value.field == "npz" and err.value.key == "0000"
