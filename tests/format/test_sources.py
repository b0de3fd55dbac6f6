"""Finding and reading source files: hidden files, list files, files that changed size."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from feedline.errors import ConfigError
from feedline.format._pack import _read_file
from feedline.format._sources import collect, plan_shards


@pytest.mark.parametrize("planned", [0, 100, 5000, 9000])
def test_read_file_returns_the_whole_file_whatever_the_planned_size(tmp_path: Path, planned: int) -> None:
    path = tmp_path / "a.bin"
    path.write_bytes(bytes(range(256)) * 20)
    assert _read_file(str(path), planned) == bytes(range(256)) * 20


def test_hidden_files_and_folders_are_skipped(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "x.obj").write_bytes(b"1")
    (tmp_path / ".DS_Store").write_bytes(b"1")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "2.jpg").write_bytes(b"22")
    (tmp_path / "1.jpg").write_bytes(b"1")
    samples = collect([tmp_path]).samples
    assert [(s.key, [f.field for f in s.files]) for s in samples] == [("1", ["jpg"]), ("b/2", ["jpg"])]
    assert [s.nbytes for s in samples] == [1, 2]


def test_list_file_errors_name_the_problem(tmp_path: Path) -> None:
    listing = tmp_path / "l.txt"
    listing.write_text("missing.jpg\n")
    with pytest.raises(ConfigError, match=r"missing\.jpg"):
        collect([listing])
    listing.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(ConfigError, match="list file"):
        collect([listing])
    # a table of features given as SRC: said to be a table, with the two ways a table goes in
    table = tmp_path / "features.csv"
    table.write_text("f0,f1,target\n0.5,0.25,1\n")
    with pytest.raises(ConfigError, match=r"'.*features\.csv' is a table.*line 1 names no file: 'f0,f1,target'") as info:
        collect([table])
    assert "--labels features.csv" in info.value.fix and "DatasetWriter" in info.value.fix
    table.with_suffix(".parquet").write_bytes(b"PAR1\x00\x15\x04")
    with pytest.raises(ConfigError, match="is a table"):
        collect([table.with_suffix(".parquet")])
    # a JSONL corpus given as SRC (round 13): a table, with the text recipe named; before, the
    # whole first document was printed as a "path" with "fix the path in the list file"
    corpus = tmp_path / "part-000.jsonl"
    corpus.write_text(json.dumps({"id": "d0", "text": "word " * 2000}) + "\n")
    with pytest.raises(ConfigError, match=r"part-000\.jsonl' is a table") as info:
        collect([corpus])
    assert "feedline.text" in info.value.fix and len(str(info.value)) < 1000
    listing.write_text("x" * 3000 + "\n")  # any list file: a long line is cut in the message
    with pytest.raises(ConfigError, match=r"\(3000 characters\)") as info:
        collect([listing])
    assert len(str(info.value)) < 300


def test_plan_never_splits_a_sample_and_fills_in_order(tmp_path: Path) -> None:
    for i in range(10):
        (tmp_path / f"{i}.a").write_bytes(b"x" * 1000)
        (tmp_path / f"{i}.b").write_bytes(b"y" * 1000)
    samples = collect([tmp_path]).samples
    plan = plan_shards(samples, 8192, align=0)
    assert [s.key for shard in plan for s in shard] == [str(i) for i in range(10)]
    assert all(sum(s.bound(0) for s in shard) <= 8192 - 1024 for shard in plan)
    assert len(plan) == 5  # 2 samples of 3 KiB (headers included) fit in 8 KiB less the 1 KiB end


def test_empty_files_are_packed_and_named_in_the_notes(tmp_path: Path) -> None:
    """A camera roll synced with failures: zero-byte photos are reported before they
    fail to decode in training."""
    for name, data in (("roll/IMG_0001.HEIC.jpg", b"\xff\xd8x"), ("roll/IMG_0002.jpg", b""),
                       ("roll/sub/IMG_0003.jpeg", b""), ("roll/notes.txt", b"")):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    found = collect([tmp_path / "roll"])
    assert found.empty_files == ["IMG_0002.jpg", "notes.txt", "sub/IMG_0003.jpeg"]
    note = next(line for line in found.notes() if "empty" in line)
    assert note.startswith("3 empty file(s)") and "--exclude" in note
