"""``pack --labels FILE``: a flat folder of images plus the annotation file users keep
beside it (a Kaggle-style CSV, a TSV with a path column, a JSONL of multi-label lists, COCO
``annotations.json`` with any number of boxes per image). The labels arrive in the batches
next to the pixels, class names are numbered in sorted order and listed in the manifest,
and files the table does not name, or entries that name no file, are reported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import simplejpeg

import feedline
from feedline.errors import ConfigError
from feedline.format import SourceRules, pack
from feedline.format._labels import read_table
from feedline.format._manifest import read_manifest

SRC = Path(__file__).resolve().parents[2] / "src"


def _photos(root: Path, names: list[str]) -> None:
    for i, name in enumerate(names):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        img = np.full((8, 10, 3), i * 9 % 256, np.uint8)
        (root / name).write_bytes(simplejpeg.encode_jpeg(img, quality=95))


def _load(root: Path, **kw: Any) -> dict[str, dict[str, Any]]:
    """Every sample of ``root`` by key, from a Loader (thread workers)."""
    out: dict[str, dict[str, Any]] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for batch in feedline.Loader(os.fspath(root), batch_size=3, workers=2, shuffle=False,
                                     drop_last=False, **kw):
            for i, key in enumerate(batch["__key__"]):
                out[key] = {f: v[i] for f, v in batch.items() if f != "__key__"}
    return out


def test_csv_class_names_become_sorted_indices(tmp_path: Path) -> None:
    names = [f"{i:05d}_leaf.spot.jpg" for i in range(7)]  # dots in names, Kaggle-style
    _photos(tmp_path / "train_images", names)
    diseases = ["rust", "healthy", "scab", "rust", "multiple diseases", "healthy", "scab"]
    rows = "".join(f'"{n}",{d}\n' for n, d in zip(names, diseases, strict=True))
    (tmp_path / "train.csv").write_text("image_id,label\n" + rows + "\n")
    with pytest.warns(Warning, match="not named in the labels file"):
        (tmp_path / "train_images" / "thumbs.db.jpg").write_bytes(b"\xff\xd8")
        pack([tmp_path / "train_images"], tmp_path / "ds",
             rules=SourceRules(labels=os.fspath(tmp_path / "train.csv")))
    classes = ["healthy", "multiple diseases", "rust", "scab"]
    assert list(read_manifest(tmp_path / "ds").classes or ()) == classes
    got = _load(tmp_path / "ds")
    assert len(got) == 7
    for name, disease in zip(names, diseases, strict=True):
        key = name.rsplit(".", 1)[0]  # the file's own name, dots and all
        assert classes[int(got[key]["cls"])] == disease


def test_jsonl_multi_label_lists_and_tsv_paths(tmp_path: Path) -> None:
    names = ["Île/plage 1.jpg", "Île/plage 2.jpg", "montagne/été.jpg", "montagne/hiver.jpg"]
    _photos(tmp_path / "photos", names)
    tags = [[0, 3], [], [2], [1, 2, 4]]
    with open(tmp_path / "tags.jsonl", "w", encoding="utf-8") as f:
        for n, t in zip(names, tags, strict=True):
            f.write(json.dumps({"path": n, "labels": t, "meta": {"gps": None, "iso": 100}}) + "\n")
    pack([tmp_path / "photos"], tmp_path / "ds", rules=SourceRules(labels=os.fspath(tmp_path / "tags.jsonl")))
    got = _load(tmp_path / "ds")
    by_name = got
    for n, t in zip(names, tags, strict=True):
        sample = by_name[n.rsplit(".", 1)[0]]
        assert "cls" not in sample  # a list per file is no single class
        assert sample["json"] == {"labels": t, "meta": {"gps": None, "iso": 100}}
        assert sample["jpg"].shape == (8, 10, 3)
    (tmp_path / "paths.tsv").write_text("label\tpath\n" + "".join(f"{i}\t{n}\n" for i, n in enumerate(names)))
    table = read_table(tmp_path / "paths.tsv")
    assert table.classes is None and table.rows["montagne/été.jpg"].cls == 2


def test_coco_boxes_of_any_count_go_with_their_image(tmp_path: Path) -> None:
    names = [f"COCO_val2014_{i:012d}.jpg" for i in range(6)]
    _photos(tmp_path / "val2014", names)
    images = [{"id": 1000 + i, "file_name": n, "width": 10, "height": 8} for i, n in enumerate(names)]
    anns = [{"id": 10 * i + k, "image_id": 1000 + i, "category_id": 1 + (k % 2), "bbox": [k, i, 3.5, 2.0],
             "iscrowd": 0} for i in range(6) for k in range(i % 4)]
    coco = {"info": {}, "images": images, "annotations": anns,
            "categories": [{"id": 1, "name": "person"}, {"id": 2, "name": "bicycle"}]}
    (tmp_path / "instances_val2014.json").write_text(json.dumps(coco))
    pack([tmp_path / "val2014"], tmp_path / "ds",
         rules=SourceRules(labels=os.fspath(tmp_path / "instances_val2014.json")))
    got = _load(tmp_path / "ds")
    for i, n in enumerate(names):
        record = got[n[:-4]]["json"]
        assert record["id"] == 1000 + i and record["width"] == 10
        assert [a["bbox"] for a in record["annotations"]] == [[k, i, 3.5, 2.0] for k in range(i % 4)]
        assert all(a["category_name"] == ("person" if a["category_id"] == 1 else "bicycle")
                   for a in record["annotations"])


@pytest.mark.parametrize(("name", "text", "match"), [
    ("l.csv", "file,label\na.jpg,1\na.jpg,2\n", "named twice"),
    ("l.csv", "file\na.jpg\n", "header row"),
    ("l.csv", "file,label,x\na.jpg,1\n", "line 2 has 2 cells"),
    ("l.jsonl", '{"file_name": "a.jpg"}\n{oops\n', "not valid JSON"),
    ("l.jsonl", '{"label": 3}\n', "no file name"),
    ("l.json", '"just a string"', "list or object"),
    ("l.xlsx", "", "must be from-folder or a labels file"),
])
def test_bad_labels_files_are_config_errors(tmp_path: Path, name: str, text: str, match: str) -> None:
    _photos(tmp_path / "imgs", ["a.jpg"])
    (tmp_path / name).write_text(text)
    with pytest.raises(ConfigError, match=match):
        pack([tmp_path / "imgs"], tmp_path / "ds", rules=SourceRules(labels=os.fspath(tmp_path / name)))


def test_a_bare_name_two_files_share_is_refused(tmp_path: Path) -> None:
    _photos(tmp_path / "imgs", ["day1/0001.jpg", "day2/0001.jpg"])
    (tmp_path / "l.csv").write_text("filename,label\n0001.jpg,1\n")
    with pytest.raises(ConfigError, match=r"matches 2 files: day1/0001\.jpg, day2/0001\.jpg"):
        pack([tmp_path / "imgs"], tmp_path / "ds", rules=SourceRules(labels=os.fspath(tmp_path / "l.csv")))


@pytest.mark.parametrize(("table", "text"), [
    ("semicolons.csv", "filename;label\nhusky 1.jpg;dog\ncat.jpg;cat\n"),
    ("tabs.csv", "filename\tlabel\nhusky 1.jpg\tdog\ncat.jpg\tcat\n"),
    ("excel.csv", "\ufefffilename,label\r\nhusky 1.jpg,dog\r\ncat.jpg,cat\r\n"),
    ("kaggle ids.csv", "id,breed\nhusky 1,dog\ncat,cat\n"),
    ("paths without extension.csv", "path,label\npets/husky 1,dog\ncat,cat\n"),
    ("written at the dataset root.csv", "path,label\nimgs/pets/husky 1.jpg,dog\nimgs/cat.jpg,cat\n"),
    ("absolute.csv", "path,label\n/mnt/kaggle/imgs/pets/husky 1.jpg,dog\nC:\\data\\imgs\\cat.jpg,cat\n"),
])
def test_labels_tables_as_spreadsheets_and_kaggle_write_them(tmp_path: Path, table: str, text: str) -> None:
    """``;``/tab-separated ``.csv`` (a spreadsheet in a decimal-comma locale), Excel's BOM
    and CRLF, ids without the file extension (Kaggle's ``id,breed``) and paths written from
    the dataset's root or absolute (through the source folder ``imgs``) all label the files."""
    _photos(tmp_path / "imgs", ["pets/husky 1.jpg", "cat.jpg", "unlabelled.jpg"])
    (tmp_path / table).write_text(text, encoding="utf-8", newline="")
    with pytest.warns(UserWarning, match="unlabelled.jpg"):
        pack([tmp_path / "imgs"], tmp_path / "ds", rules=SourceRules(labels=os.fspath(tmp_path / table)))
    assert read_manifest(tmp_path / "ds").classes == ("cat", "dog")
    got = {k: int(v["cls"]) for k, v in _load(tmp_path / "ds").items()}
    assert got == {"cat": 0, "pets/husky 1": 1}


def test_names_a_mac_stored_decomposed_match_a_table_typed_composed(tmp_path: Path) -> None:
    """A zip made on a Mac unpacks ``café`` as ``cafe`` + U+0301; a CSV typed anywhere else
    holds U+00E9. Same name to the user, so the same file to pack."""
    _photos(tmp_path / "imgs", ["cafe\u0301 1.jpg", "Zu\u0308rich/2.jpg"])
    (tmp_path / "l.csv").write_text("filename,label\ncaf\u00e9 1.jpg,a\nimgs/Z\u00fcrich/2.jpg,b\n", encoding="utf-8")
    pack([tmp_path / "imgs"], tmp_path / "ds", rules=SourceRules(labels=os.fspath(tmp_path / "l.csv")))
    got = {k: int(v["cls"]) for k, v in _load(tmp_path / "ds").items()}
    assert got == {"cafe\u0301 1": 0, "Zu\u0308rich/2": 1}


def test_an_id_two_files_share_without_extension_is_refused(tmp_path: Path) -> None:
    _photos(tmp_path / "imgs", ["day1/0001.jpg", "day2/0001.png"])
    (tmp_path / "l.csv").write_text("id,label\n0001,1\n")
    with pytest.raises(ConfigError, match=r"matches 2 files: day1/0001\.jpg, day2/0001\.png"):
        pack([tmp_path / "imgs"], tmp_path / "ds", rules=SourceRules(labels=os.fspath(tmp_path / "l.csv")))


def test_cli_packs_with_a_labels_file_and_reports_unmatched_rows(tmp_path: Path) -> None:
    _photos(tmp_path / "imgs", ["a.jpg", "b.jpg"])
    (tmp_path / "imgs" / "labels.csv").write_text("filename,label\na.jpg,7\nb.jpg,9\ngone.jpg,1\n")
    env = {**os.environ, "PYTHONPATH": os.fspath(SRC)}
    res = subprocess.run([sys.executable, "-m", "feedline", "pack", "imgs", "--out", "ds", "--labels",
                          "imgs/labels.csv", "-q"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    assert "gone.jpg" in res.stderr and "labels.csv (" not in res.stderr  # the table itself is not a sample
    assert "packed 2 samples" in res.stdout
    res = subprocess.run([sys.executable, "-m", "feedline", "pack", "imgs", "--out", "ds2", "--labels",
                          "nope.parquet"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode in (1, 2) and "Traceback" not in res.stderr and "from-folder" in res.stderr
    (tmp_path / "breeds.csv").write_text("id,breed,source\na,pug,web\nb,beagle,web\n")
    res = subprocess.run([sys.executable, "-m", "feedline", "pack", "imgs", "--out", "ds3", "--labels",
                          "breeds.csv", "--label-column", "breed", "-q", "--exclude", "*.csv"], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert read_manifest(tmp_path / "ds3").classes == ("beagle", "pug")


def test_splits_share_the_class_numbers_of_train(tmp_path: Path) -> None:
    """Oxford-flowers style splits: ``valid/`` lacks two of train's classes (its sorted
    folders would number 'sunflower' 1, not 3); with train's list every split agrees, for
    folders and for a CSV of names alike, and a class train never had is refused."""
    train = ["daisy", "dandelion", "rose", "sunflower", "tulipe à fleur"]
    _photos(tmp_path / "train", [f"{c}/{i}.jpg" for i, c in enumerate(train)])
    _photos(tmp_path / "valid", ["daisy/7.jpg", "sunflower/8.jpg", "tulipe à fleur/9.jpg"])
    pack([tmp_path / "train"], tmp_path / "ds-train", rules=SourceRules(labels="from-folder"))
    classes = tuple(read_manifest(tmp_path / "ds-train").classes or ())
    assert classes == tuple(train)
    with pytest.warns(Warning, match="no files packed"):
        pack([tmp_path / "valid"], tmp_path / "ds-valid", rules=SourceRules(labels="from-folder", classes=classes))
    got = _load(tmp_path / "ds-valid")
    assert {k: int(v["cls"]) for k, v in got.items()} == {
        "daisy/7": 0, "sunflower/8": 3, "tulipe à fleur/9": 4}
    (tmp_path / "test.csv").write_text("file,label\n7.jpg,sunflower\n8.jpg,rose\n")
    _photos(tmp_path / "test", ["7.jpg", "8.jpg"])
    table = read_table(tmp_path / "test.csv", classes)
    assert table.classes == classes and table.rows["7.jpg"].cls == 3 and table.rows["8.jpg"].cls == 2
    _photos(tmp_path / "valid", ["orchid/1.jpg"])
    with pytest.raises(ConfigError, match="'orchid' are not in the given class list"):
        pack([tmp_path / "valid"], tmp_path / "ds-v2", rules=SourceRules(labels="from-folder", classes=classes))
    (tmp_path / "test.csv").write_text("file,label\n7.jpg,orchid\n")
    with pytest.raises(ConfigError, match="'orchid' are not in the given class list"):
        read_table(tmp_path / "test.csv", classes)


def test_a_split_unpacked_on_a_mac_keeps_the_class_numbers_of_train(tmp_path: Path) -> None:
    """train/ unpacked on Linux names a class 'café' composed (U+00E9); valid/ came from a
    zip made on a Mac, 'cafe' + U+0301. The same class to the user: the same number."""
    _photos(tmp_path / "train", ["caf\u00e9/1.jpg", "tea/2.jpg"])
    _photos(tmp_path / "valid", ["cafe\u0301/3.jpg", "tea/4.jpg"])
    pack([tmp_path / "train"], tmp_path / "ds-train", rules=SourceRules(labels="from-folder"))
    classes = tuple(read_manifest(tmp_path / "ds-train").classes or ())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "class folder with no files" for café either
        pack([tmp_path / "valid"], tmp_path / "ds-valid", rules=SourceRules(labels="from-folder", classes=classes))
    assert {k: int(v["cls"]) for k, v in _load(tmp_path / "ds-valid").items()} == {"cafe\u0301/3": 0, "tea/4": 1}


@pytest.mark.parametrize(("text", "classes"), [
    # plant-pathology-2020: image_id + one 0/1 column per class
    ("image_id,healthy,multiple_diseases,rust,scab\nleaf_0,0,0,1,0\nleaf_1,1,0,0,0\nleaf_2,0,0,0,1\n",
     ("healthy", "multiple_diseases", "rust", "scab")),
    # ISIC 2018 GroundTruth.csv: floats 1.0/0.0, class columns in their own (unsorted) order
    ("image,MEL,NV,BCC\nleaf_0,0.0,1.0,0.0\nleaf_1,0.0,0.0,1.0\nleaf_2,1.0,0.0,0.0\n", ("MEL", "NV", "BCC")),
])
def test_one_hot_label_columns_become_cls_in_column_order(tmp_path: Path, text: str,
                                                          classes: tuple[str, ...]) -> None:
    """A table of one 0/1 column per class (one 1 per row) gives each file the index of its
    1 as ``cls`` and the columns, in the table's order (the order a one-hot target has), as
    the classes; it was packed with every column in ``json`` and no ``cls``, silently."""
    _photos(tmp_path / "imgs", ["leaf_0.jpg", "leaf_1.jpg", "leaf_2.jpg"])
    (tmp_path / "train.csv").write_text(text)
    pack([tmp_path / "imgs"], tmp_path / "ds", rules=SourceRules(labels=os.fspath(tmp_path / "train.csv")))
    assert read_manifest(tmp_path / "ds").classes == classes
    got = _load(tmp_path / "ds")
    want = {"leaf_0": 2, "leaf_1": 0, "leaf_2": 3} if len(classes) == 4 else {"leaf_0": 1, "leaf_1": 2, "leaf_2": 0}
    assert {k: int(v["cls"]) for k, v in got.items()} == want
    assert all("json" not in v for v in got.values())  # nothing but the label was in the rows


def test_a_table_with_no_label_column_is_refused_until_named(tmp_path: Path) -> None:
    """``image_id,species,split``: no column is called label/class/..., so which one labels
    the files is the user's call. Refused, naming the columns and ``--label-column``; with
    it, that column numbers the classes and the others go to ``json``; ``none`` packs the
    rows as ``json`` only. Another split's class list still applies."""
    _photos(tmp_path / "imgs", ["a.jpg", "b.jpg", "c.jpg"])
    (tmp_path / "t.csv").write_text("image_id,species,split\na,pug,train\nb,beagle,train\nc,pug,val\n")
    labels = os.fspath(tmp_path / "t.csv")
    with pytest.raises(ConfigError, match=r"which column is the label\? None of species, split") as info:
        pack([tmp_path / "imgs"], tmp_path / "ds", rules=SourceRules(labels=labels))
    assert "--label-column" in (info.value.fix or "")
    with pytest.raises(ConfigError, match=r"no column 'specie'; .* are species, split"):
        pack([tmp_path / "imgs"], tmp_path / "ds", rules=SourceRules(labels=labels, label_column="specie"))
    pack([tmp_path / "imgs"], tmp_path / "ds", rules=SourceRules(labels=labels, label_column="Species"))
    assert read_manifest(tmp_path / "ds").classes == ("beagle", "pug")
    got = _load(tmp_path / "ds")
    assert {k: (int(v["cls"]), v["json"]["split"]) for k, v in got.items()} == {
        "a": (1, "train"), "b": (0, "train"), "c": (1, "val")}
    table = read_table(labels, classes=("pug", "beagle", "boxer"), label_column="species")
    assert table.rows["a"].cls == 0 and table.classes == ("pug", "beagle", "boxer")
    table = read_table(labels, label_column="none")
    assert table.classes is None and table.rows["b"].cls is None
    assert table.rows["b"].extra == {"species": "beagle", "split": "train"}


@pytest.mark.parametrize(("text", "column", "match"), [
    ("file,a,b\nx.jpg,1,1\n", "a,b", r"row of 'x\.jpg' does not hold exactly one 1"),
    ("file,a,b\nx.jpg,1,0\n", None, None),  # one-hot found by itself
    ("file,a,b\nx.jpg,2,0\n", None, "which column is the label"),
])
def test_one_hot_rows_hold_exactly_one_1(tmp_path: Path, text: str, column: str | None, match: str | None) -> None:
    (tmp_path / "t.csv").write_text(text)
    if match is None:
        assert read_table(tmp_path / "t.csv", label_column=column).rows["x.jpg"].cls == 0
        return
    with pytest.raises(ConfigError, match=match):
        read_table(tmp_path / "t.csv", label_column=column)


def test_label_column_needs_a_csv_table(tmp_path: Path) -> None:
    (tmp_path / "t.jsonl").write_text('{"file_name": "a.jpg", "breed": "pug"}\n')
    with pytest.raises(ConfigError, match=r"applies to a \.csv/\.tsv table"):
        read_table(tmp_path / "t.jsonl", label_column="breed")
    with pytest.raises(ConfigError, match="labels is 'from-folder'"):
        SourceRules(labels="from-folder", label_column="breed")


@pytest.mark.parametrize(("text", "cls", "classes", "note"), [
    ("file,label\na.jpg,1.0\nb.jpg,0.0\n", {"a.jpg": 1, "b.jpg": 0}, None, False),  # pandas' int column
    ("file,label\na.jpg,3\nb.jpg,cat\n", {"a.jpg": 0, "b.jpg": 1}, ("3", "cat"), False),
    ("file,target\na.jpg,0.37\nb.jpg,-1.5\n", {"a.jpg": None, "b.jpg": None}, None, True),  # regression
])
def test_labels_as_spreadsheets_write_them(tmp_path: Path, text: str, cls: dict[str, int | None],
                                           classes: tuple[str, ...] | None, note: bool) -> None:
    """Integer labels saved as 1.0/0.0 are class ids; ids mixed with names are names; a
    float target gives no cls, and the table says so (pack prints it) instead of nothing."""
    (tmp_path / "t.csv").write_text(text)
    table = read_table(tmp_path / "t.csv")
    assert {k: r.cls for k, r in table.rows.items()} == cls and table.classes == classes
    assert (table.note is not None) == note
    if note:
        assert "0.37" in (table.note or "") and table.rows["a.jpg"].extra == {"label": 0.37}
        _photos(tmp_path / "imgs", ["a.jpg", "b.jpg"])
        with pytest.warns(UserWarning, match="neither class ids nor class names"):
            pack([tmp_path / "imgs"], tmp_path / "ds", rules=SourceRules(labels=os.fspath(tmp_path / "t.csv")))


def test_space_separated_ids_are_multi_label_lists_and_tag_names_a_note(tmp_path: Path) -> None:
    """Kaggle's multi-label tables: the Human Protein Atlas' ``Id,Target`` (``16 0``) gives
    each file its ids as a list, no cls (before: the string "16 0" was one class of its own);
    Planet's ``image_name,tags`` (``haze primary``) stays class names, with a note saying how to
    split them; names with spaces that are not tags (``tiger shark``) pack as before, no note."""
    (tmp_path / "hpa.csv").write_text("Id,Target\na,16 0\nb,7\nc,0 7 25\n")
    table = read_table(tmp_path / "hpa.csv")
    assert table.classes is None and {k: r.cls for k, r in table.rows.items()} == {"a": None, "b": None, "c": None}
    assert table.rows["a"].extra == {"label": [16, 0]} and table.rows["b"].extra == {"label": [7]}
    assert "multi-label" in (table.note or "") and "'16 0'" in (table.note or "")
    _photos(tmp_path / "hpa", ["a.jpg", "b.jpg", "c.jpg"])
    with pytest.warns(UserWarning, match="space-separated class ids"):
        pack([tmp_path / "hpa"], tmp_path / "ds", rules=SourceRules(labels=os.fspath(tmp_path / "hpa.csv")))
    assert {k: s["json"]["label"] for k, s in _load(tmp_path / "ds").items()} == {"a": [16, 0], "b": [7], "c": [0, 7, 25]}

    tags = ["haze primary", "clear primary", "clear primary water", "cloudy", "haze primary water", "clear"]
    (tmp_path / "planet.csv").write_text("image_name,tags\n" + "".join(f"t{i},{t}\n" for i, t in enumerate(tags)))
    table = read_table(tmp_path / "planet.csv")
    assert table.classes == tuple(sorted(tags)) and table.rows["t0"].cls == sorted(tags).index("haze primary")
    assert "6 class names made of 5 words" in (table.note or "") and ".split()" in (table.note or "")
    (tmp_path / "sharks.csv").write_text("file,label\na,tiger shark\nb,great white shark\nc,tiger\nd,hammerhead\n")
    table = read_table(tmp_path / "sharks.csv")
    assert table.note is None and table.classes == ("great white shark", "hammerhead", "tiger", "tiger shark")


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("name", "text"), [
    # a blank cell in a class-name column, and pandas' int column with a missing value
    ("t.csv", "file,label\na.jpg,cat\nb.jpg,\nc.jpg,dog\nd.jpg, \n"),
    ("t.csv", "file,label\na.jpg,0.0\nb.jpg,\nc.jpg,1.0\nd.jpg,nan\n"),
    ("t.jsonl", '{"file": "a.jpg", "label": "cat"}\n{"file": "b.jpg", "label": null}\n'
                '{"file": "c.jpg", "label": "dog"}\n{"file": "d.jpg"}\n'),
])
def test_rows_without_a_label_are_skipped_and_listed(tmp_path: Path, name: str, text: str) -> None:
    """Before: a blank cell became a class named '' and pack wrote a manifest that inspect
    and Loader refused ("'classes' must be a list of distinct non-empty names"); a NaN
    left the whole table without cls."""
    _photos(tmp_path / "imgs", ["a.jpg", "b.jpg", "c.jpg", "d.jpg"])
    (tmp_path / name).write_text(text)
    with pytest.warns(UserWarning, match=r"b\.jpg \(its label is blank in the labels file"):
        pack([tmp_path / "imgs"], tmp_path / "ds", rules=SourceRules(labels=os.fspath(tmp_path / name)))
    got = _load(tmp_path / "ds")
    assert sorted(got) == ["a", "c"] and [int(got[k]["cls"]) for k in ("a", "c")] == [0, 1]
    classes = read_manifest(tmp_path / "ds").classes
    assert classes in (None, ("cat", "dog")) and (classes is None) == ("0.0" in text)


@pytest.mark.timeout(60)
def test_a_table_typed_on_windows_matches_files_in_another_case(tmp_path: Path) -> None:
    _photos(tmp_path / "imgs", ["sub/A1.JPG", "sub/b2.jpeg", "c3.jpg"])
    (tmp_path / "t.csv").write_text("path,label\nsub/a1.jpg,cat\nSUB/B2.JPEG,dog\nC3.JPG,cat\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing unmatched, nothing skipped
        pack([tmp_path / "imgs"], tmp_path / "ds", rules=SourceRules(labels=os.fspath(tmp_path / "t.csv")))
    got = _load(tmp_path / "ds")
    assert {k: int(v["cls"]) for k, v in got.items()} == {"sub/A1": 0, "sub/b2": 1, "c3": 0}


@pytest.mark.timeout(30)
def test_a_speech_table_without_a_header_is_named_so_with_the_header_to_add(tmp_path: Path) -> None:
    """LJSpeech's metadata.csv: no header, '|' between cells and commas in the text (before:
    the first row's commas chose the comma, then "line 2 has 1 cells"). Refused, saying the
    first row is data and which header to add; with that header every column reads."""
    rows = "LJ001-0001|Printing, in the only sense|Printing, in the only sense\n" \
           "LJ001-0002|in being comparatively modern.|in being comparatively modern.\n"
    (tmp_path / "metadata.csv").write_text(rows)
    with pytest.raises(ConfigError, match="first row looks like data") as info:
        read_table(tmp_path / "metadata.csv")
    assert "'file|column2|column3'" in info.value.fix
    (tmp_path / "metadata.csv").write_text("file|text|normalized\n" + rows)
    table = read_table(tmp_path / "metadata.csv", label_column="none")
    assert table.rows["LJ001-0002"].extra == {"text": "in being comparatively modern.",
                                              "normalized": "in being comparatively modern."}
