"""Packing user trees: ImageFolder labels, key rules, include/exclude, skipped files, symbolic links."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import numpy as np
import pytest
import webdataset as wds

from feedline.errors import ConfigError
from feedline.format import index_tars, pack, read_manifest, split_name
from feedline.format._pack import PackWarning
from feedline.format._sources import SourceRules, collect

FOLDER = SourceRules(labels="from-folder")


def _tree(root: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


def _torchvision_classes(root: Path) -> list[str]:
    """torchvision.datasets.folder.find_classes (torchvision is not installable here),
    restricted to non-hidden folders as feedline documents."""
    return sorted(e.name for e in os.scandir(root) if e.is_dir() and not e.name.startswith("."))


def _phone_photos(root: Path) -> Path:
    """A user's tree: dots in names, mixed extension spellings, stray files, class
    names whose order depends on case."""
    return _tree(root, {
        "cats/IMG_2023.01.05_1234.jpg": b"c1",
        "cats/IMG_2023.01.05_9999.jpg": b"c2",
        "cats/IMG_2023.01.06_0001.JPEG": b"c3",
        "cats/old/IMG_1.jpeg": b"c4",           # deeper folders belong to the top class
        "Dogs/d.1.png": b"d1",
        "Dogs/d.2.jpg": b"d2",
        "Dogs/notes.txt": b"not an image",
        "bee/b.JPG": b"b1",
        "README": b"read me",
        "loose.jpg": b"not in a class",
        "empty_class/.keep": b"",
    })


def test_imagefolder_keys_keep_dotted_names_apart_and_labels_follow_torchvision(tmp_path: Path) -> None:
    root = _phone_photos(tmp_path / "train")
    found = collect([root], FOLDER)
    assert found.classes == tuple(_torchvision_classes(root)) == ("Dogs", "bee", "cats", "empty_class")
    got = {s.key: {f.field: (f.data if f.data is not None else Path(f.path).read_bytes()) for f in s.files}
           for s in found.samples}
    assert got == {
        "Dogs/d%2E1": {"png": b"d1", "cls": b"0"},
        "Dogs/d%2E2": {"jpg": b"d2", "cls": b"0"},
        "bee/b": {"jpg": b"b1", "cls": b"1"},
        "cats/IMG_2023%2E01%2E05_1234": {"jpg": b"c1", "cls": b"2"},
        "cats/IMG_2023%2E01%2E05_9999": {"jpg": b"c2", "cls": b"2"},
        "cats/IMG_2023%2E01%2E06_0001": {"jpg": b"c3", "cls": b"2"},
        "cats/old/IMG_1": {"jpg": b"c4", "cls": b"2"},
    }
    assert sorted(s.name for s in found.skipped) == ["Dogs/notes.txt", "README", "loose.jpg"]
    notes = "\n".join(found.notes())
    assert "skipped 3 file(s)" in notes and "README (not an image" in notes and "loose.jpg (not inside a class folder)" in notes
    # one image format a sample: one note naming the transform that reads either (not two "use --exclude")
    assert "'jpg' (6) + 'png' (1) of 7" in notes and "ImageTransform(('jpg', 'png')" in notes
    assert "field 'png' is in" not in notes
    assert "empty_class" in notes


def test_pack_imagefolder_writes_labels_and_classes_that_tar_and_webdataset_read(tmp_path: Path, read_all) -> None:  # type: ignore[no-untyped-def]
    root = _phone_photos(tmp_path / "train")
    out = tmp_path / "data"
    with pytest.warns(PackWarning, match="skipped 3 file"):
        manifest = pack(root, out, rules=FOLDER)
    assert manifest.classes == ("Dogs", "bee", "cats", "empty_class") == read_manifest(out).classes
    assert manifest.num_samples == 7
    samples = read_all(out)
    assert samples["cats/IMG_2023%2E01%2E05_9999"] == {"jpg": b"c2", "cls": b"2"}
    with tarfile.open(out / manifest.shards[0].name) as tar:
        names = tar.getnames()
    assert all(split_name(n) is not None and "." not in split_name(n)[0].rsplit("/", 1)[-1] for n in names)  # type: ignore[index]
    wds_keys = [s["__key__"] for s in wds.WebDataset(str(out / manifest.shards[0].name), shardshuffle=False)]
    assert sorted(wds_keys) == sorted(samples)

    import feedline

    ds = feedline.open_dataset(out)
    assert ds.schema["cls"].kind == "label"
    labels = {"cls": np.zeros(len(ds), np.int64)}
    ds.gather_labels(np.arange(len(labels["cls"])), labels)
    assert labels["cls"].tolist() == [0, 0, 1, 2, 2, 2, 2]


def test_reindexing_a_packed_imagefolder_keeps_its_class_names(tmp_path: Path) -> None:
    root = _phone_photos(tmp_path / "train")
    out = tmp_path / "data"
    with pytest.warns(PackWarning):
        manifest = pack(root, out, rules=FOLDER, shard_size=1 << 10)
    assert len(manifest.shards) > 1
    again = index_tars([out / s.name for s in manifest.shards])
    assert again.classes == manifest.classes == read_manifest(out).classes


def test_multi_field_layouts_still_group_by_the_first_dot(tmp_path: Path) -> None:
    root = _tree(tmp_path / "log", {
        "000123.cam0.jpg": b"a", "000123.cam1.JPEG": b"b", "000123.json": b"{}",
        "000124.cam0.jpg": b"c", "000124.cam1.jpeg": b"d", "000124.json": b"{}",
    })
    found = collect([root])
    assert [(s.key, [f.field for f in s.files]) for s in found.samples] == [
        ("000123", ["cam0.jpg", "cam1.jpg", "json"]),
        ("000124", ["cam0.jpg", "cam1.jpg", "json"]),
    ]
    assert found.notes() == []
    # the file rule on the same tree: every file is its own sample
    assert sorted(s.key for s in collect([root], SourceRules(key="file")).samples) == [
        "000123", "000123%2Ecam0", "000123%2Ecam1", "000124", "000124%2Ecam0", "000124%2Ecam1",
    ]


def test_labels_with_the_webdataset_rule_label_multi_field_samples(tmp_path: Path) -> None:
    root = _tree(tmp_path / "t", {"a/1.jpg": b"1", "a/1.json": b"{}", "b/2.jpg": b"2", "b/2.json": b"{}"})
    found = collect([root], SourceRules(key="webdataset", labels="from-folder", include=("*",)))
    assert [(s.key, [(f.field, f.data) for f in s.files if f.data]) for s in found.samples] == [
        ("a/1", [("cls", b"0")]), ("b/2", [("cls", b"1")]),
    ]
    assert [len(s.files) for s in found.samples] == [3, 3]


def test_include_and_exclude_patterns(tmp_path: Path) -> None:
    root = _tree(tmp_path / "s", {"a.jpg": b"1", "b.png": b"2", "tmp/c.jpg": b"3", "d.txt": b"4"})
    keys = lambda rules: [s.key for s in collect([root], rules).samples]  # noqa: E731
    assert keys(SourceRules(include=("*.jpg",))) == ["a", "tmp/c"]
    assert keys(SourceRules(exclude=("tmp/*", "*.txt"))) == ["a", "b"]
    found = collect([root], SourceRules(include=("*.jpg",), exclude=("tmp/*",)))
    assert [s.key for s in found.samples] == ["a"] and found.excluded == 3
    with pytest.raises(ConfigError, match="no files to pack"):
        collect([root], SourceRules(include=("*.gif",)))
    with pytest.raises(ConfigError, match="include"):
        SourceRules(include="*.jpg")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="key"):
        SourceRules(key="last-dot")


def test_a_cls_file_beside_folder_labels_is_refused(tmp_path: Path) -> None:
    root = _tree(tmp_path / "t", {"a/1.jpg": b"1", "a/1.cls": b"7"})
    with pytest.raises(ConfigError, match="already has a 'cls'"):
        collect([root], SourceRules(key="webdataset", labels="from-folder", include=("*",)))


def test_symbolic_links_stay_inside_the_source_unless_asked(tmp_path: Path) -> None:
    outside = _tree(tmp_path / "outside", {"secret.jpg": b"s", "dir/x.jpg": b"x"})
    root = _tree(tmp_path / "src", {"a.jpg": b"a", "sub/b.jpg": b"b"})
    os.symlink(outside / "secret.jpg", root / "passwd.jpg")
    os.symlink(outside / "dir", root / "linked")
    os.symlink(root / "sub" / "b.jpg", root / "inside.jpg")  # inside the tree: followed
    os.symlink(tmp_path / "gone.jpg", root / "dangling.jpg")
    found = collect([root])
    assert [s.key for s in found.samples] == ["a", "inside", "sub/b"]
    reasons = {s.name: s.reason for s in found.skipped}
    assert set(reasons) == {"passwd.jpg", "linked", "dangling.jpg"}
    assert "outside the source folder" in reasons["passwd.jpg"] and "--follow-symlinks" in reasons["linked"]
    assert reasons["dangling.jpg"].startswith("dangling symbolic link")
    assert "skipped 3 file(s)" in found.notes()[0]
    labelled = collect([root], SourceRules(labels="from-folder"))  # the class scan reports nothing twice
    assert sorted(s.name for s in labelled.skipped) == ["a.jpg", "dangling.jpg", "inside.jpg", "linked", "passwd.jpg"]
    assert labelled.classes == ("sub",)
    followed = collect([root], SourceRules(follow_symlinks=True))
    assert [s.key for s in followed.samples] == ["a", "inside", "linked/x", "passwd", "sub/b"]


@pytest.mark.parametrize("kind", ["self", "ancestor"])
def test_symbolic_link_loops_are_a_clear_error(tmp_path: Path, kind: str) -> None:
    root = _tree(tmp_path / "src", {"a.jpg": b"a", "sub/b.jpg": b"b"})
    if kind == "self":
        os.symlink("loop.jpg", root / "loop.jpg")
    else:
        os.symlink("..", root / "sub" / "up")
    with pytest.raises(ConfigError, match="symbolic-link loop") as e:
        collect([root], SourceRules(follow_symlinks=True))
    assert e.value.fix


def test_output_folder_that_is_a_source_or_a_file_is_refused(tmp_path: Path) -> None:
    root = _tree(tmp_path / "src", {"a.jpg": b"a"})
    with pytest.raises(ConfigError, match="is the source folder"):
        pack(root, root)
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(ConfigError, match="is a file"):
        pack(root, tmp_path / "file")
    assert sorted(p.name for p in root.iterdir()) == ["a.jpg"]


def test_os_metadata_is_never_a_class_or_a_sample(tmp_path: Path) -> None:
    """A tree unzipped on a Mac or browsed on Windows: ``__MACOSX/`` (AppleDouble copies
    named like the images), ``Thumbs.db``, ``desktop.ini``, ``.DS_Store``. ``__MACOSX`` sorts
    before every lower-case class name: counted as a class it would shift every label."""
    root = _tree(tmp_path / "train", {
        "__MACOSX/cats/._a.jpg": b"\x00\x05\x16\x07apple double",
        "cats/._a.jpg": b"\x00\x05\x16\x07apple double",
        "cats/a.jpg": b"a", "cats/.DS_Store": b"ds", "dogs/Thumbs.db": b"t",
        "dogs/2024/b.JPG": b"b", "dogs/desktop.ini": b"i",
    })
    found = collect([root], FOLDER)
    assert found.classes == ("cats", "dogs")
    assert [(s.key, sorted(f.field for f in s.files)) for s in found.samples] == [
        ("cats/a", ["cls", "jpg"]), ("dogs/2024/b", ["cls", "jpg"])]
    assert sorted(s.name for s in found.skipped) == ["__MACOSX", "dogs/Thumbs.db", "dogs/desktop.ini"]
    assert all("metadata" in s.reason for s in found.skipped)
    # the WebDataset rule (no labels) skips them too: no sample "Thumbs" with a field "db"
    assert [s.key for s in collect([root]).samples] == ["cats/a", "dogs/2024/b"]


def test_a_folder_of_splits_is_refused_with_the_commands_per_split(tmp_path: Path) -> None:
    """``root/{train,val,test}/<class>/...`` with --labels from-folder would label every image
    by its split: refused, naming the splits and the pack command of each (train first, the
    others with its class list). A class folder that happens to be called ``test`` beside
    others, or split-named folders holding images directly, still pack."""
    root = _tree(tmp_path / "ds", {f"{s}/{c}/{i}.jpg": b"x" for s in ("val", "Train", "test")
                                   for c in ("cat", "dog") for i in range(2)})
    with pytest.raises(ConfigError, match=r"splits \(Train, test, val\)") as err:
        collect([root], FOLDER)
    assert f"feedline pack {root}/Train --out OUT/Train --labels from-folder;" in str(err.value)
    assert f"{root}/val --out OUT/val --labels from-folder --classes OUT/Train" in str(err.value)
    assert collect([root / "Train"], FOLDER).classes == ("cat", "dog")
    mixed = _tree(tmp_path / "mixed", {"test/a/1.jpg": b"x", "cat/1.jpg": b"x"})
    assert collect([mixed], FOLDER).classes == ("cat", "test")
    flat = _tree(tmp_path / "flat", {"train/1.jpg": b"x", "val/2.jpg": b"x"})
    assert collect([flat], FOLDER).classes == ("train", "val")


def test_the_folder_rule_makes_each_folder_one_sample(tmp_path: Path, read_all) -> None:  # type: ignore[no-untyped-def]
    """Video clips stored as frames: ``clip/frame_000.jpg...`` is one sample whose fields are
    the frames; tar and WebDataset split the members back into the same key and field."""
    root = _tree(tmp_path / "v", {
        **{f"clip.v2/frame_{f:03d}.JPG": b"f%d" % f for f in range(3)},
        **{f"more/clip_7/frame_{f:03d}.jpg": b"g%d" % f for f in range(2)},
        "more/clip_7/meta.json": b"{}", "README.md": b"x",
    })
    found = collect([root], SourceRules(key="folder"))
    assert [(s.key, [f.field for f in s.files]) for s in found.samples] == [
        ("clip%2Ev2", ["frame_000.jpg", "frame_001.jpg", "frame_002.jpg"]),
        ("more/clip_7", ["frame_000.jpg", "frame_001.jpg", "meta.json"]),
    ]
    assert [s.name for s in found.skipped] == ["README.md"]
    with pytest.warns(PackWarning, match="not inside a sample folder"):
        pack([root], tmp_path / "ds", rules=SourceRules(key="folder"))
    with tarfile.open(tmp_path / "ds" / "shard-000000.tar") as tf:
        assert all(split_name(m.name) is not None for m in tf.getmembers())
    got = {(k, f) for k, fields in read_all(tmp_path / "ds").items() for f in fields}
    assert ("clip%2Ev2", "frame_002.jpg") in got and ("more/clip_7", "meta.json") in got
    # with class folders: <class>/<clip>/<frame>; frames directly in a class folder are listed
    classes = _tree(tmp_path / "c", {"walk/c1/0.jpg": b"a", "walk/c1/1.jpg": b"b", "run/c2/0.jpg": b"c",
                                     "run/stray.jpg": b"d"})
    found = collect([classes], SourceRules(key="folder", labels="from-folder"))
    assert [(s.key, [(f.field, f.data) for f in s.files]) for s in found.samples] == [
        ("run/c2", [("0.jpg", None), ("cls", b"0")]),
        ("walk/c1", [("0.jpg", None), ("1.jpg", None), ("cls", b"1")]),
    ]
    assert [s.name for s in found.skipped] == ["run/stray.jpg"]
    with pytest.raises(ConfigError, match="does not combine with a labels file"):
        SourceRules(key="folder", labels="labels.csv")


def test_folder_keys_name_files_lying_beside_sample_folders(tmp_path: Path) -> None:
    """A multi-sensor log: ``scene_007/frame_00012/{cam_front.jpg, lidar.bin, imu.json}``
    plus one ``scene_007/calib.json`` per scene. Each scene folder became a sample of its own
    (calib.json only) mixed in with the frames; the note names them and the exclude that
    leaves them out."""
    files = {f"scene_{s:03d}/frame_{f:05d}/{n}": b"x" for s in (0, 7) for f in (0, 12)
             for n in ("cam_front.jpg", "lidar.bin", "imu.json")}
    root = _tree(tmp_path / "log", {**files, "scene_000/calib.json": b"{}", "scene_007/calib.json": b"{}",
                                    "scene_007/notes.txt": b"n"})
    found = collect([root], SourceRules(key="folder"))
    assert found.enclosing == {"scene_000": ["calib.json"], "scene_007": ["calib.json", "notes.txt"]}
    note = next(line for line in found.notes() if line.startswith("--key folder"))
    assert "scene_000/ (calib.json); scene_007/ (calib.json, notes.txt)" in note
    assert "--exclude '*/calib.json' '*/notes.txt'" in note
    clean = collect([root], SourceRules(key="folder", exclude=("*/calib.json", "*/notes.txt")))
    assert clean.enclosing == {} and len(clean.samples) == 4
    assert not any(line.startswith("--key folder") for line in clean.notes())


@pytest.mark.timeout(60)
def test_nested_class_folders_say_so_and_class_depth_uses_the_sub_folders(tmp_path: Path) -> None:
    """A tree of <group>/<class>/<image>: before, it packed silently as 2 classes (the
    groups) with no word and no way to label by the sub-folders."""
    root = _tree(tmp_path / "animals", {
        "mammal/dog/1.jpg": b"d", "mammal/cat/1.jpg": b"c", "mammal/cat/2.jpg": b"c2",
        "bird/owl/1.jpg": b"o", "bird/crow/x.JPG": b"k", "bird/stray.jpg": b"s",
    })
    found = collect([root], FOLDER)  # depth 1 stays torchvision's numbering ...
    assert found.classes == ("bird", "mammal") and found.label_note is None  # bird/stray.jpg is shallow
    (root / "bird" / "stray.jpg").unlink()
    found = collect([root], FOLDER)
    assert found.classes == ("bird", "mammal")
    assert "--class-depth 2 makes each of the 4 a class" in (found.label_note or "")  # ... and says so
    with pytest.warns(PackWarning, match="sub-folder of its class folder"):
        pack([root], tmp_path / "one", rules=FOLDER)

    (root / "bird" / "stray.jpg").write_bytes(b"s")
    deep = collect([root], SourceRules(labels="from-folder", class_depth=2))
    assert deep.classes == ("bird/crow", "bird/owl", "mammal/cat", "mammal/dog")
    labels = {s.key: next(f.data for f in s.files if f.field == "cls") for s in deep.samples}
    assert labels == {"bird/crow/x": b"0", "bird/owl/1": b"1", "mammal/cat/1": b"2",
                      "mammal/cat/2": b"2", "mammal/dog/1": b"3"}
    assert [(s.name, "2 folders deep" in s.reason) for s in deep.skipped] == [("bird/stray.jpg", True)]
    with pytest.raises(ConfigError, match="class_depth"):
        SourceRules(class_depth=2)
    with pytest.raises(ConfigError, match="class_depth"):
        SourceRules(labels="from-folder", class_depth=0)
