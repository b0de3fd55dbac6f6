"""feedline pack / index / inspect / verify from the command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cli_inproc import run_cli
from feedline.cli.main import main
from feedline.format import load_index, read_manifest


def _source(root: Path, n: int = 20) -> Path:
    root.mkdir()
    for i in range(n):
        (root / f"{i:05d}.cam0.jpg").write_bytes(bytes([i]) * (1000 + 300 * i))
        (root / f"{i:05d}.json").write_bytes(b'{"i": %d}' % i)
    return root


def _run(argv: list[str]) -> int:
    try:
        main(argv)
    except SystemExit as e:
        return int(e.code or 0)
    return 0


def test_pack_inspect_verify_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _source(tmp_path / "src")
    out = tmp_path / "ds"
    assert _run(["pack", str(src), "--out", str(out), "--shard-size", "32KiB", "--align", "4096", "-j", "2"]) == 0
    text = capsys.readouterr()
    assert "packed 20 samples (40 files) into" in text.out
    assert "files/s" in text.err  # the progress bar shows files/s and MB/s
    assert len(read_manifest(out).shards) > 1

    assert _run(["inspect", str(out), "--json", "-"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["num_samples"] == 20 and info["alignment"]["aligned_samples"] == 20
    assert set(info["fields"]) == {"cam0.jpg", "json"}
    assert _run(["inspect", str(out)]) == 0
    assert "20/20 samples start on a 4096-byte boundary" in capsys.readouterr().out

    assert _run(["verify", str(out)]) == 0
    assert capsys.readouterr().out.startswith("ok")


def test_verify_exits_1_naming_shard_key_and_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _source(tmp_path / "src")
    out = tmp_path / "ds"
    assert _run(["pack", str(src), "--out", str(out), "-q"]) == 0
    info = read_manifest(out).shards[0]
    index = load_index(out, info)
    rec = index.sample_members(5)[0]
    data = bytearray((out / info.name).read_bytes())
    data[int(rec["offset"])] ^= 0xFF
    (out / info.name).write_bytes(bytes(data))
    capsys.readouterr()
    assert _run(["verify", str(out)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert any("shard-000000.tar key='00005' field='cam0.jpg'" in line for line in lines)
    assert _run(["verify", str(out), "--json", "-"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False
    assert {"shard": "shard-000000.tar", "key": "00005", "field": "cam0.jpg"}.items() <= doc["problems"][1].items()


def test_index_adopts_tars_made_by_tar(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _source(tmp_path / "src", n=6)
    tar = tmp_path / "a.tar"
    names = sorted(p.name for p in src.iterdir())
    subprocess.run(["tar", "-cf", str(tar), "-C", str(src), *names], check=True)
    assert _run(["index", str(tar), "--out", str(tmp_path / "meta")]) == 0
    assert "indexed 6 samples in 1 tar(s)" in capsys.readouterr().out
    assert _run(["verify", str(tmp_path / "meta")]) == 0
    shards = tmp_path / "shards"  # a folder of tars, as WebDataset datasets are shipped
    shards.mkdir()
    subprocess.run(["tar", "-cf", str(shards / "b.tar"), "-C", str(src), *names], check=True)
    assert _run(["index", str(shards)]) == 0
    assert f"indexed 6 samples in 1 tar(s) -> {shards / 'manifest.json'}" in capsys.readouterr().out


def test_errors_are_one_line_with_exit_codes(tmp_path: Path) -> None:
    exe = [sys.executable, "-m", "feedline"]
    empty = subprocess.run([*exe, "verify", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert empty.returncode == 1
    assert empty.stderr.count("\n") == 1 and "no manifest" in empty.stderr
    bad = subprocess.run(
        [*exe, "pack", str(tmp_path), "--out", str(tmp_path / "o"), "--shard-size", "lots"],
        capture_output=True, text=True, timeout=60,
    )
    assert bad.returncode == 2 and "--shard-size" in bad.stderr


def test_pack_without_out_names_the_option_and_the_command_a_newcomer_meant(tmp_path: Path) -> None:
    src = _source(tmp_path / "my photos", n=2)
    meant = run_cli("pack", str(src), str(tmp_path / "data"))
    assert meant.returncode == 2 and "--out" in meant.stderr, meant.stderr
    assert f"feedline pack '{src}' --out {tmp_path / 'data'}" in " ".join(meant.stderr.split()), meant.stderr
    assert not (tmp_path / "data").exists()
    alone = run_cli("pack", str(src))
    assert alone.returncode == 2 and "--out DIR" in alone.stderr and "feedline pack '" not in alone.stderr


def test_pack_no_fsync_flag_packs_a_valid_dataset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _source(tmp_path / "src", n=5)
    out = tmp_path / "ds"
    assert _run(["pack", str(src), "--out", str(out), "--no-fsync", "-q"]) == 0
    assert "packed 5 samples (10 files)" in capsys.readouterr().out
    assert _run(["verify", str(out)]) == 0


def test_verify_and_inspect_take_the_manifest_or_a_file_url(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ds"
    assert _run(["pack", str(_source(tmp_path / "src", n=3)), "--out", str(out), "-q"]) == 0
    for name in (str(out / "manifest.json"), out.as_uri()):
        capsys.readouterr()
        assert _run(["verify", name]) == 0
        assert "3 samples" in capsys.readouterr().out
        assert _run(["inspect", name]) == 0
        assert f"dataset   {out}: 3 samples" in capsys.readouterr().out


def test_pack_classes_from_another_split(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--classes data/train``: val/ lacks 'b' yet 'c' keeps number 2; a dataset without a
    class list, or a missing one, is a bad argument (exit 2) before any work."""
    for split, names in (("train", ["a", "b", "c"]), ("val", ["a", "c"])):
        for c in names:
            (tmp_path / split / c).mkdir(parents=True)
            (tmp_path / split / c / "x.jpg").write_bytes(b"\xff\xd8\xff")
    capsys.readouterr()
    assert _run(["pack", str(tmp_path / "train"), "--out", str(tmp_path / "d-train"), "--labels", "from-folder", "-q"]) == 0
    # three image files: the cls member pack adds to each sample is not counted as a file
    assert "packed 3 samples (3 files, 3 classes)" in capsys.readouterr().out
    assert _run(["pack", str(tmp_path / "val"), "--out", str(tmp_path / "d-val"), "--labels", "from-folder", "-q",
                 "--classes", str(tmp_path / "d-train")]) == 0
    assert read_manifest(tmp_path / "d-val").classes == ("a", "b", "c")
    index = load_index(tmp_path / "d-val", read_manifest(tmp_path / "d-val").shards[0])
    assert index.keys == ["a/x", "c/x"]
    from feedline import open_dataset

    with open_dataset(tmp_path / "d-val") as ds:
        assert [bytes(ds[i]["cls"]) for i in range(2)] == [b"0", b"2"]
    capsys.readouterr()
    for bad in ("d-val-missing", "train"):
        assert _run(["pack", str(tmp_path / "val"), "--out", str(tmp_path / "d2"), "--labels", "from-folder",
                     "--classes", str(tmp_path / bad)]) == 2
        err = capsys.readouterr().err
        assert "--classes" in err and "Traceback" not in err and not (tmp_path / "d2").exists()


def test_a_tilde_the_shell_left_is_the_home_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """``'~/photos'`` quoted, ``--out=~/data`` and ``--labels=~/labels.csv`` reach feedline with
    the tilde (the shell expands none of them), as the Python API takes it: the home folder."""
    monkeypatch.setenv("HOME", str(tmp_path))
    _source(tmp_path / "src", 3)
    (tmp_path / "labels.csv").write_text("filename,label\n00000.json,a\n00001.json,b\n00002.json,a\n")
    assert _run(["pack", "~/src", "--out=~/ds", "--labels=~/labels.csv", "--include", "*.json", "-q"]) == 0
    assert "packed 3 samples" in capsys.readouterr().out
    assert read_manifest(tmp_path / "ds").classes == ("a", "b")
    assert _run(["index", "~/ds/shard-000000.tar", "--out=~/again"]) == 0
    assert (tmp_path / "again" / "manifest.json").exists()


def test_verify_decode_lists_the_samples_the_loader_would_skip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Checksums pass for a truncated or empty JPEG (they were packed so): ``--decode``
    finds them, naming shard, key and field, exit 1; the JSON lists them."""
    import numpy as np
    import simplejpeg

    src = tmp_path / "src"
    src.mkdir()
    good = simplejpeg.encode_jpeg(np.full((16, 16, 3), 90, np.uint8))
    for i in range(300):  # more than one chunk of samples
        (src / f"{i:04d}.jpg").write_bytes(good[: len(good) // 2] if i == 7 else b"" if i == 290 else good)
        (src / f"{i:04d}.wav").write_bytes(b"RIFF")  # no built-in codec: named as not decoded
    assert _run(["pack", str(src), "--out", str(tmp_path / "ds"), "-q"]) == 0
    assert _run(["verify", str(tmp_path / "ds")]) == 0
    capsys.readouterr()
    assert _run(["verify", str(tmp_path / "ds"), "--decode"]) == 1
    out = capsys.readouterr().out
    assert "UNDECODABLE shard=shard-000000.tar key=0007 field=jpg" in out
    assert "key=0290 field=jpg: field is empty" in out and "2 problem(s)" in out
    assert "not decoded: wav: no built-in decoder" in out  # before: silent (and "every field decoded" when ok)
    assert _run(["verify", str(tmp_path / "ds"), "--decode", "--json", str(tmp_path / "v.json")]) == 1
    doc = json.loads((tmp_path / "v.json").read_text())
    assert doc["ok"] is False and [u["key"] for u in doc["undecodable"]] == ["0007", "0290"]
    assert doc["not_decoded"] == ["wav"]


@pytest.mark.timeout(60)
def test_class_depth_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("mammal/cat/1.jpg", "mammal/dog/1.jpg", "bird/owl/1.jpg"):
        (tmp_path / "src" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "src" / name).write_bytes(b"\xff\xd8" + name.encode())
    assert _run(["pack", str(tmp_path / "src"), "--out", str(tmp_path / "ds"), "--labels", "from-folder",
                 "--class-depth", "2", "-q"]) == 0
    assert read_manifest(tmp_path / "ds").classes == ("bird/owl", "mammal/cat", "mammal/dog")
    assert _run(["pack", str(tmp_path / "src"), "--out", str(tmp_path / "x"), "--class-depth", "2", "-q"]) == 2
    assert "class_depth" in capsys.readouterr().err
