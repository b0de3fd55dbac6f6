"""Round 14's Kaggle newcomer: a train.csv of ``image_id, fold, label_a, label_b, label_c, score``
beside a flat images/ folder of JPEGs and PNGs named by id, 5-fold CV without re-packing,
multi-label + float targets as one tensor (ds.column, table.Columns, table.chain)."""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import feedline
from cli_inproc import run_cli
from feedline import table, vision
from feedline.errors import ArgumentError, ConfigError
from feedline.format import pack
from feedline.format._labels import read_table
from feedline.format._sources import SourceRules

N = 20


def _kaggle(tmp_path: Path) -> list[list[object]]:
    (tmp_path / "images").mkdir()
    rows = []
    for i in range(N):
        iid = f"{(i * 2654435761) % 16**8:08x}"   # ids without extension, as Kaggle writes them
        img = Image.fromarray(np.full((12 + i % 3, 16, 3), i * 10, np.uint8))
        buf = io.BytesIO()
        img.save(buf, "PNG" if i % 4 == 0 else "JPEG")
        (tmp_path / "images" / f"{iid}.{'png' if i % 4 == 0 else 'jpg'}").write_bytes(buf.getvalue())
        rows.append([iid, i % 5, i % 2, int(i % 3 == 0), 1, round(i * 0.25, 2)])
    text = "image_id,fold,label_a,label_b,label_c,score\n" + "".join(",".join(map(str, r)) + "\n" for r in rows)
    (tmp_path / "train.csv").write_text(text)
    return rows


@pytest.mark.timeout(60)
def test_folds_and_multi_label_targets_from_the_table_without_repacking(tmp_path: Path) -> None:
    rows = _kaggle(tmp_path)
    notes: list[str] = []
    pack([tmp_path / "images"], tmp_path / "ds", warn=notes.append,
         rules=SourceRules(labels=str(tmp_path / "train.csv"), label_column="none"))
    assert any("ImageTransform(('jpg', 'png')" in n for n in notes), notes   # one note, the fix named
    ds = feedline.open_dataset(tmp_path / "ds")
    by_key = {r[0]: r for r in rows}
    fold = ds.column("fold")
    assert fold.dtype == np.int64 and fold.tolist() == [by_key[k][1] for k in ds.keys()]  # noqa: SIM118
    targets = ds.column(["label_a", "label_b", "score"])
    assert targets.shape == (N, 3) and targets.dtype == np.float64
    assert targets[:, 2].tolist() == [by_key[k][5] for k in ds.keys()]  # noqa: SIM118
    train, val = ds.subset(np.flatnonzero(fold != 2)), ds.subset(np.flatnonzero(fold == 2))
    assert val.column("fold").tolist() == [2] * 4 and len(train) == 16
    with pytest.raises(ConfigError, match=r"has no column 'nope'.*its columns: \['fold', 'label_a'"):
        ds.column("nope")
    with pytest.raises(ConfigError, match=r"no field 'meta'"):
        ds.column("fold", field="meta")

    cols = ["label_a", "label_b", "label_c", "score"]
    tf = table.chain(vision.ImageTransform(("jpg", "png"), size=8, out="image", train=False),
                     table.Columns(cols, out="y"))
    with feedline.Loader(val, batch_size=2, workers=1, shuffle=False, drop_last=False, transform=tf) as loader:
        batches = list(loader)
    assert len(batches) == 2 and "json" not in batches[0]
    for b in batches:
        assert b["image"].shape == (2, 3, 8, 8) and b["y"].dtype == torch.float32 and b["y"].shape == (2, 4)
        assert b["y"].tolist() == [[float(by_key[k][c]) for c in (2, 3, 4, 5)] for k in b["__key__"]]


@pytest.mark.timeout(30)
def test_inspect_names_the_table_columns_kept_in_json(tmp_path: Path) -> None:
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "ab12.jpg").write_bytes(b"not decoded by pack")
    (tmp_path / "t.csv").write_text("image_id,fold,label_a,score\nab12,3,1,0.5\n")
    pack([tmp_path / "images"], tmp_path / "ds", rules=SourceRules(labels=str(tmp_path / "t.csv"), label_column="none"))
    shown = run_cli("inspect", str(tmp_path / "ds"))   # where did my columns go?
    assert shown.returncode == 0, shown.stderr
    assert "columns   json of sample 0: fold, label_a, score (ds.column('fold')" in shown.stdout


@pytest.mark.timeout(30)
def test_multi_hot_columns_name_the_multi_label_recipe(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("file,a,b\nx.jpg,1,1\ny.jpg,0,1\n")
    with pytest.raises(ConfigError, match=r"several 1s: a multi-label table") as e:
        read_table(tmp_path / "t.csv", label_column="a,b")
    assert "--label-column none" in str(e.value) and "table.Columns" in str(e.value)


@pytest.mark.timeout(30)
def test_columns_transform_says_what_is_missing() -> None:
    cols = table.Columns(["a", "b"], out="y", dtype=np.int64, keep=True)
    out = cols({"__key__": "k", "json": b'{"a": 1, "b": 2}'})
    assert out["y"].tolist() == [1, 2] and out["y"].dtype == np.int64 and "json" in out
    with pytest.raises(ConfigError, match=r"sample 'k' has no column 'b' \(its columns: \['a'\]\)"):
        cols({"__key__": "k", "json": {"a": 1}})
    with pytest.raises(ConfigError, match=r"sample 'k' has no 'json' field"):
        cols({"__key__": "k", "jpg": b""})
    with pytest.raises(ConfigError, match=r"not all numbers"):
        cols({"__key__": "k", "json": {"a": 1, "b": "cat"}})
    with pytest.raises(ArgumentError, match="list of column names"):
        table.Columns("label_a")
    with pytest.raises(ArgumentError, match="callables"):
        table.chain(cols, "resize")


@pytest.mark.timeout(30)
def test_a_validation_loader_left_at_drop_last_true_says_what_it_leaves_out() -> None:
    """A fold of 10 validated with batch 4, shuffle=False and the default drop_last: the same
    last 2 samples were never validated, silently; now a DroppedTailWarning names them."""
    from feedline.pipeline.options import DroppedTailWarning

    fold = [{"x": np.full(2, i, np.float32)} for i in range(10)]
    with pytest.warns(DroppedTailWarning, match=r"the last 2 of the 10 samples .* drop_last=False"):
        loader = feedline.Loader(fold, batch_size=4, workers=1, shuffle=False)
    with loader:
        assert sum(len(b["x"]) for b in loader) == 8
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # asked for, shuffled, or nothing left out: no warning
        for kw in ({"drop_last": True}, {"drop_last": False}, {"shuffle": True}, {"batch_size": 5}):
            feedline.Loader(fold, **{"batch_size": 4, "workers": 1, "shuffle": False, **kw}).close()
