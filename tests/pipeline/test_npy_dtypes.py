"""``.npy`` fields as users save them: float16, int64, bool, 0-d scalars, Fortran order and
big-endian arrays, one field each, packed and loaded with the default collate. Every batch
must hold what ``np.load`` gives (values; native byte order), in threads and processes."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import feedline
from feedline.format import pack

N = 20


def _fields(i: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(i)
    return {
        "x.npy": rng.standard_normal((3, 4, 4)).astype(np.float16),
        "ids.npy": rng.integers(-2**40, 2**40, (5,), dtype=np.int64),
        "mask.npy": rng.integers(0, 2, (4, 4)).astype(bool),
        "t.npy": np.array(i * 0.5),
        "f.npy": np.asfortranarray(rng.standard_normal((2, 3)).astype(np.float32)),
        "be.npy": rng.standard_normal((20,)).astype(">f4"),  # 80 bytes: read into rows, not a column
    }


@pytest.fixture(scope="module", params=["with fortran", "rows"])
def npy_dataset(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every field (a Fortran-order 2-D array sends the batch down the per-sample path), or
    every field but that one (every field is then read straight into its rows)."""
    root = tmp_path_factory.mktemp("npy dtypes")
    src = root / "arrays"
    src.mkdir()
    for i in range(N):
        for name, arr in _fields(i).items():
            if request.param == "with fortran" or name != "f.npy":
                np.save(src / f"{i:04d}.{name}", arr)
    pack([os.fspath(src)], os.fspath(root / "ds"))
    return root / "ds"


@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_npy_dtypes_and_byte_orders_batch_as_np_load_gives_them(npy_dataset: Path, worker_type: str) -> None:
    loader = feedline.Loader(os.fspath(npy_dataset), batch_size=6, workers=2, worker_type=worker_type,
                             drop_last=False, seed=1)
    seen = []
    for epoch in range(2):
        loader.set_epoch(epoch)
        for batch in loader:
            for row, key in enumerate(batch["__key__"]):
                for name, arr in _fields(int(key)).items():
                    if name not in batch:
                        continue
                    got = batch[name][row].numpy()
                    assert got.dtype == arr.dtype.newbyteorder("="), (name, got.dtype)
                    np.testing.assert_array_equal(got, arr, err_msg=f"{key} {name}")
                seen.append(key)
    recipes = loader.stats["recipes"]
    loader.close()
    assert sorted(seen) == sorted([f"{i:04d}" for i in range(N)] * 2)
    columns = dict.fromkeys(["ids.npy", "mask.npy", "t.npy"], "gather")  # <= 64 bytes: columns of the index
    if "f.npy" in recipes:  # stored in Fortran order: per sample, and so is the batch (but the columns)
        assert recipes == {**dict.fromkeys(["be.npy", "f.npy", "x.npy"], "sample"), **columns}
    else:  # the big-endian field too is read into its rows, then byte-swapped
        assert recipes == {**dict.fromkeys(["be.npy", "x.npy"], "read-rows"), **columns}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_string_arrays_come_as_lists_of_arrays(tmp_path: Path, worker_type: str) -> None:
    """Strings saved with numpy (a ``.npy`` of words, ``np.array("cat")`` in an ``.npz``) are
    no tensor: they come as a list of the arrays ``np.load`` gives, the numbers beside them
    stacked (before: a TypeError from torch for the whole batch)."""
    import io

    (tmp_path / "src").mkdir()
    for i in range(6):
        np.save(tmp_path / "src" / f"{i:04d}.words.npy", np.array(["ab", f"c{i}"]))
        buf = io.BytesIO()
        np.savez(buf, image=np.full((2, 2), i, np.uint8), name=np.array(f"cat {i}"))
        (tmp_path / "src" / f"{i:04d}.npz").write_bytes(buf.getvalue())
    pack([os.fspath(tmp_path / "src")], os.fspath(tmp_path / "ds"), durable=False, warn=lambda line: None)
    with feedline.Loader(os.fspath(tmp_path / "ds"), batch_size=3, workers=2, shuffle=False,
                         worker_type=worker_type) as loader:
        batches = list(loader)
    assert len(batches) == 2
    for k, batch in enumerate(batches):
        ids = range(3 * k, 3 * k + 3)
        assert [w.tolist() for w in batch["words.npy"]] == [["ab", f"c{i}"] for i in ids]
        assert [str(n) for n in batch["npz"]["name"]] == [f"cat {i}" for i in ids]
        assert batch["npz"]["image"].tolist() == [[[i, i], [i, i]] for i in ids]
