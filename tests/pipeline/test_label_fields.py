"""Integer labels under the names users give them (``label``, ``idx``, ``class.txt``...), in
tars written by hand the way WebDataset users write them, adopted with ``index_tars``.

A field the schema found to hold an integer in every sample decodes as an integer on the
per-sample path too, so its batches are gathered from the index's label column and equal
the per-sample path's (a transform forces every field onto that path); a field where some
sample holds text stays bytes.
"""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import feedline
from feedline.format import index_tars

N = 37
KEYS = [f"run.2024/cam.front/{i:06d}" for i in range(N)]  # dots in folders, as in the wild


def _labels(i: int) -> dict[str, bytes]:
    return {
        "label": f"{(i % 7) - 3}\n".encode(),           # negative, trailing newline
        "idx": str(2**40 + i).encode(),                   # beyond int32
        "class.txt": f" {i % 5} ".encode(),              # padded, a .txt label
        "target": b"tabby cat" if i == 11 else str(i).encode(),  # one text value: stays bytes
        "seq.npy": _npy(np.arange(i % 4 + 1, dtype=np.int32)),   # ragged, per sample
    }


def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


def _write_tars(root: Path) -> list[Path]:
    root.mkdir()
    paths = []
    for part, lo in enumerate(range(0, N, 10)):
        path = root / f"part-{part:03d}.tar"
        with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
            for i in range(lo, min(lo + 10, N)):
                for field, data in _labels(i).items():
                    info = tarfile.TarInfo(f"{KEYS[i]}.{field}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        paths.append(path)
    return paths


def _identity(sample: dict[str, Any]) -> dict[str, Any]:
    return sample


def _batches(root: Path, **kw: Any) -> list[dict[str, Any]]:
    out = []
    with feedline.Loader(os.fspath(root), batch_size=4, workers=2, shuffle=True, seed=3,
                         drop_last=False, **kw) as loader:
        for epoch in range(2):
            loader.set_epoch(epoch)
            out += list(loader)
        out.append(loader.stats["recipes"])
    return out


@pytest.mark.timeout(300)
@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_integer_label_fields_are_gathered_under_any_name(tmp_path: Path, worker_type: str) -> None:
    index_tars(_write_tars(tmp_path / "tars"))
    root = tmp_path / "tars"
    schema = feedline.open_dataset(root).schema
    assert {f for f, s in schema.items() if s.kind == "label"} == {"label", "idx", "class.txt"}

    *batches, recipes = _batches(root, worker_type=worker_type)
    assert recipes == {"label": "gather", "idx": "gather", "class.txt": "gather",
                       "target": "sample", "seq.npy": "sample"}
    *per_sample, sample_recipes = _batches(root, worker_type=worker_type, transform=_identity)
    assert set(sample_recipes.values()) == {"sample"}
    seen = []
    for batch, ref in zip(batches, per_sample, strict=True):
        assert batch["__key__"] == ref["__key__"]
        for i, key in enumerate(batch["__key__"]):
            want = _labels(KEYS.index(key))
            seen.append(key)
            for field in ("label", "idx", "class.txt"):
                assert batch[field].dtype == ref[field].dtype == torch.int64
                assert int(batch[field][i]) == int(ref[field][i]) == int(want[field])
            assert batch["target"][i] == ref["target"][i] == want["target"]
            assert np.array_equal(batch["seq.npy"][i].numpy(), np.load(io.BytesIO(want["seq.npy"])))
    assert sorted(seen) == sorted(KEYS * 2)


def test_a_user_decoder_wins_over_the_schema_label(tmp_path: Path) -> None:
    index_tars(_write_tars(tmp_path / "tars"))
    *batches, recipes = _batches(tmp_path / "tars", decode={"label": bytes})
    assert recipes["label"] == "sample"
    for batch in batches:
        assert all(v == _labels(KEYS.index(k))["label"] for k, v in zip(batch["__key__"], batch["label"], strict=True))
