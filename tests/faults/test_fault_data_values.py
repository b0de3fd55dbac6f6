"""Values a real dataset holds by accident: label files that are empty or not decimal
(``1e3``, ``0x10``), negative or padded labels, NaN and inf in float fields.

What is guaranteed: a ``.cls`` label that is empty or not a decimal integer stops the pack
before anything is committed, with a ``ConfigError`` naming key and field and saying what
the file holds (before: "invalid literal for int() with base 10: b''", after a warning
that the empty file had been packed and would be skipped by the loader, which the pack
never reached); a label int() reads (``-1``, `` 7\\n``, ``+3``) is that integer, as the
per-sample decoder reads it; NaN and inf come back bit for bit.
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import numpy as np
import pytest

import feedline
from feedline.errors import ConfigError
from feedline.format import pack


def _source(root: Path, odd: bytes) -> Path:
    src = root / "src"
    src.mkdir()
    for i in range(6):
        (src / f"{i:03d}.cls").write_bytes(odd if i == 2 else str(i).encode())
        (src / f"{i:03d}.bin").write_bytes(b"x" * (i + 1))
    return src


@pytest.mark.parametrize(("odd", "said"), [
    (b"", "the label file is empty"), (b" \n", "only white space"),
    (b"1e3", "'1e3' is not a decimal integer"), (b"0x10", "'0x10' is not a decimal integer"),
    (b"\xef\xbb\xbf5", "byte-order mark"),  # a UTF-8 byte-order mark
])
def test_a_label_that_is_no_integer_stops_the_pack_naming_it(tmp_path: Path, odd: bytes, said: str) -> None:
    src = _source(tmp_path, odd)
    notes: list[str] = []
    with pytest.raises(ConfigError, match=said) as info:
        pack(src, tmp_path / "ds", warn=notes.append, durable=False)
    assert (info.value.key, info.value.field) == ("002", "cls")
    assert not (tmp_path / "ds" / "manifest.json").exists()
    assert not any("empty file" in n for n in notes), notes  # before: "packed ... skips them"


@pytest.mark.parametrize(("odd", "value"), [(b"-1", -1), (b" 7\n", 7), (b"+3", 3)])
def test_a_label_int_reads_is_that_integer(tmp_path: Path, odd: bytes, value: int) -> None:
    pack(_source(tmp_path, odd), tmp_path / "ds", durable=False)
    ds = feedline.open_dataset(tmp_path / "ds")
    with feedline.Loader(ds, batch_size=6, shuffle=False, workers=1, drop_last=False) as loader:
        labels = next(iter(loader))["cls"].tolist()
    assert labels == [0, 1, value, 3, 4, 5]


def test_nan_and_inf_come_back_bit_for_bit(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    rows = [np.array([np.nan, np.inf, -np.inf, -0.0, i], np.float32) for i in range(8)]
    for i, row in enumerate(rows):
        buf = io.BytesIO()
        np.save(buf, row)
        (src / f"{i:03d}.npy").write_bytes(buf.getvalue())
    pack(src, tmp_path / "ds", durable=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with feedline.Loader(str(tmp_path / "ds"), batch_size=4, shuffle=False, workers=1) as loader:
            got = np.concatenate([b["npy"].numpy() for b in loader])
    assert got.tobytes() == np.stack(rows).tobytes()
