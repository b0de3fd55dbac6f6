"""Dotted file names: stored escaped in the tars, given back to the user as they named them."""

from __future__ import annotations

import dataclasses
import tarfile
from pathlib import Path

import numpy as np
import pytest
import simplejpeg
from hypothesis import given
from hypothesis import strategies as st

import feedline
from feedline.errors import FormatError
from feedline.format import index_tars, pack, read_manifest, split_name, verify
from feedline.format._manifest import write_manifest
from feedline.format._pack import PackWarning
from feedline.format._sources import SourceRules, collect
from feedline.format._tar import escape_key_part, source_key

NAMES = ["frame.000123.jpg", "frame.000124.jpg", "scan.v2.npy", "a.b.c.cls", "100%.done.jpg", "x%2E.jpg"]


def _tree(root: Path, names: list[str]) -> Path:
    for i, name in enumerate(names):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if name.endswith(".npy"):
            np.save(path, np.full((2, 2), i, np.float32))
        elif name.endswith(".jpg"):
            path.write_bytes(simplejpeg.encode_jpeg(np.full((8, 8, 3), i, np.uint8)))
        else:
            path.write_bytes(str(i).encode())
    return root


def _keys_only(samples: list[dict[str, object]]) -> list[object]:
    return [s["__key__"] for s in samples]


@given(st.text(alphabet="ab.%2E5/", max_size=12))
def test_source_key_inverts_the_escape_of_the_last_part_only(name: str) -> None:
    folder, _, last = name.rpartition("/")
    stored = (folder + "/" if "/" in name else "") + escape_key_part(last)
    assert source_key(stored) == name
    assert "." not in stored.rpartition("/")[2]


def test_a_percent_sequence_the_escape_never_writes_is_kept() -> None:
    assert source_key("a%2Eb%41%2e") == "a.b%41%2e"
    assert source_key("dir%2E1/x") == "dir%2E1/x"  # folders are stored as named


@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_keys_are_the_file_names_in_the_dataset_the_loader_and_webdataset_splits(
        tmp_path: Path, worker_type: str) -> None:
    root = _tree(tmp_path / "src", [f"d/{n}" for n in NAMES])
    manifest = pack([root], tmp_path / "ds", rules=SourceRules(key="file"), warn=lambda line: None)
    assert manifest.key_escape == "percent" == read_manifest(tmp_path / "ds").key_escape
    want = sorted("d/" + n.rsplit(".", 1)[0] for n in NAMES)
    ds = feedline.open_dataset(tmp_path / "ds")
    assert sorted(ds.keys()) == want
    assert ds[ds.keys().index("d/scan.v2")]["__key__"] == "d/scan.v2"
    # the tar still holds names every WebDataset reader splits into the same key and field
    with tarfile.open(tmp_path / "ds" / manifest.shards[0].name) as tar:
        stored = [split_name(n) for n in tar.getnames()]
    assert sorted(source_key(k) for k, _ in stored) == want  # type: ignore[misc]
    assert all("." not in k.rpartition("/")[2] for k, _ in stored)  # type: ignore[misc]
    loader = feedline.Loader(ds, batch_size=2, workers=2, worker_type=worker_type, shuffle=False,
                             drop_last=False, collate=_keys_only)
    try:
        assert sorted(k for batch in loader for k in batch) == want
    finally:
        loader.close()


def test_verify_names_the_damaged_sample_by_its_file_name(tmp_path: Path) -> None:
    root = _tree(tmp_path / "src", ["frame.000123.jpg", "frame.000124.jpg"])
    manifest = pack([root], tmp_path / "ds", rules=SourceRules(key="file"))
    index = feedline.format.load_index(tmp_path / "ds", manifest.shards[0])
    rec = index.members[0]
    with open(tmp_path / "ds" / manifest.shards[0].name, "r+b") as f:
        f.seek(int(rec["offset"]))
        f.write(b"X")
    problems = verify(tmp_path / "ds")
    assert [p.key for p in problems if p.key] == ["frame.000123"]


def test_the_folder_rule_gives_dotted_folder_names_back(tmp_path: Path) -> None:
    root = _tree(tmp_path / "src", ["clip.v2/frame_000.jpg", "clip.v2/frame_001.jpg", "clip_3/frame_000.jpg"])
    pack([root], tmp_path / "ds", rules=SourceRules(key="folder"), warn=lambda line: None)
    assert feedline.open_dataset(tmp_path / "ds").keys() == ["clip.v2", "clip_3"]


def test_a_dataset_packed_before_key_escape_still_opens_with_its_stored_names(tmp_path: Path) -> None:
    root = _tree(tmp_path / "src", ["frame.000123.jpg"])
    manifest = pack([root], tmp_path / "ds", rules=SourceRules(key="file"))
    write_manifest(tmp_path / "ds", dataclasses.replace(manifest, key_escape=None))
    assert '"key_escape"' not in (tmp_path / "ds" / "manifest.json").read_text()
    assert feedline.open_dataset(tmp_path / "ds").keys() == ["frame%2E000123"]


def test_the_webdataset_rule_keeps_keys_as_stored_and_an_unknown_escape_is_refused(tmp_path: Path) -> None:
    root = _tree(tmp_path / "src", ["x%2E.jpg", "x%2E.json"])
    manifest = pack([root], tmp_path / "ds")
    assert manifest.key_escape is None
    assert feedline.open_dataset(tmp_path / "ds").keys() == ["x%2E"]
    text = (tmp_path / "ds" / "manifest.json").read_text().replace('"align"', '"key_escape": "url", "align"')
    (tmp_path / "ds" / "manifest.json").write_text(text)
    with pytest.raises(FormatError, match="key_escape"):
        read_manifest(tmp_path / "ds")


def test_dotted_names_under_the_default_rule_give_one_warning_that_names_the_file_rule(tmp_path: Path) -> None:
    root = _tree(tmp_path / "src", [f"frame.{i:06d}.jpg" for i in range(20)] + ["other.jpg"])
    notes = collect([root]).notes()
    assert len(notes) == 1
    assert "21 distinct fields in 2 sample(s) (sample 'frame' has 20: '000000.jpg'" in notes[0]
    assert "--key file" in notes[0]
    only = _tree(tmp_path / "only", [f"frame.{i:06d}.jpg" for i in range(20)])  # one sample: no field is partial
    with pytest.warns(PackWarning, match="--key file"):
        assert pack([only], tmp_path / "ds").num_samples == 1
    # a multi-camera log is not mistaken for dotted names
    log = _tree(tmp_path / "log", [f"{i:06d}.cam{c}.jpg" for i in range(4) for c in range(6)])
    assert collect([log]).notes() == []
    # a few dotted names among plain ones (a text corpus): the same advice, not only --exclude
    corpus = _tree(tmp_path / "corpus", ["doc.000.v2.txt", "doc.007.v2.txt"] + [f"doc_{i:03d}.txt" for i in range(5)])
    (note,) = collect([corpus]).notes()
    assert "sample 'doc' has 2: '000.v2.txt', '007.v2.txt'" in note and "--key file" in note


def test_reindexing_a_packed_dataset_keeps_its_file_names(tmp_path: Path) -> None:
    root = _tree(tmp_path / "src", ["frame.000123.jpg", "frame.000124.jpg"])
    manifest = pack([root], tmp_path / "ds", rules=SourceRules(key="file"))
    again = index_tars([tmp_path / "ds" / s.name for s in manifest.shards], tmp_path / "ds")
    assert again.key_escape == "percent"
    assert feedline.open_dataset(tmp_path / "ds").keys() == ["frame.000123", "frame.000124"]
