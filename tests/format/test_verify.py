"""verify(), inspect() and the manifest: every mismatch named by shard, key and field."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from feedline.errors import FormatError
from feedline.format import (
    MANIFEST_NAME,
    inspect,
    load_index,
    pack,
    parse_manifest,
    read_manifest,
    verify,
)

Samples = dict[str, dict[str, bytes]]


@pytest.fixture
def dataset(source: tuple[Path, Samples], tmp_path: Path) -> Path:
    pack(source[0], tmp_path / "ds", shard_size=64 << 10, align=4096)
    return tmp_path / "ds"


@pytest.fixture(scope="module")
def good_manifest(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    root = tmp_path_factory.mktemp("manifest")
    for i in range(3):
        (root / f"{i}.jpg").write_bytes(b"x" * i)
    pack(root, root / "ds")
    return (root / "ds" / MANIFEST_NAME).read_bytes()


def _flip(path: Path, pos: int) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        byte = f.read(1)
        f.seek(pos)
        f.write(bytes([byte[0] ^ 0x01]))


def test_flipped_payload_bytes_are_reported_by_shard_key_and_field(dataset: Path) -> None:
    manifest = read_manifest(dataset)
    info = manifest.shards[1]
    index = load_index(dataset, info)
    rec = index.sample_members(2)[1]
    _flip(dataset / info.name, int(rec["offset"]) + int(rec["size"]) // 2)
    problems = verify(dataset)
    key, field = index.keys[2], index.fields[int(rec["field"])]
    assert [(p.shard, p.key, p.field) for p in problems] == [(info.name, None, None), (info.name, key, field)]
    assert "checksum" in problems[0].message
    assert key in str(problems[1]) and field in str(problems[1])


def test_corrupt_or_missing_index_is_a_problem_not_a_crash(dataset: Path) -> None:
    manifest = read_manifest(dataset)
    _flip(dataset / manifest.shards[0].index, 200)
    os.unlink(dataset / manifest.shards[1].index)
    problems = verify(dataset)
    shards = {p.shard for p in problems}
    assert shards == {manifest.shards[0].name, manifest.shards[1].name}
    assert all(p.key is None for p in problems)


def test_truncated_shard_is_a_problem(dataset: Path) -> None:
    manifest = read_manifest(dataset)
    path = dataset / manifest.shards[0].name
    path.write_bytes(path.read_bytes()[:-1])
    problems = verify(dataset)
    assert any("truncated" in p.message for p in problems)


def test_inspect_counts_aligned_samples(dataset: Path, source: tuple[Path, Samples]) -> None:
    info = inspect(dataset)
    assert info["num_samples"] == len(source[1])
    assert info["alignment"]["aligned_samples"] == len(source[1])
    assert info["align"] == 4096
    assert sum(s["num_samples"] for s in info["shards"]) == info["num_samples"]
    json.dumps(info)  # JSON-ready


def test_missing_manifest_means_no_dataset(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match="no manifest") as e:
        read_manifest(tmp_path)
    assert e.value.path == str(tmp_path / MANIFEST_NAME)
    with pytest.raises(FormatError):
        verify(tmp_path)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.update(version=4), "version 4"),
        (lambda d: d.update(format="other"), "not a feedline manifest"),
        (lambda d: d.update(checksum_algo="md5"), "unknown"),
        (lambda d: d.update(num_samples=d["num_samples"] + 1), "disagrees"),
        (lambda d: d["shards"][0].update(size=-1), "'size'"),
        (lambda d: d["shards"][0].update(size=True), "'size'"),
        (lambda d: d["shards"][0].update(name="/etc/passwd"), "outside the dataset folder"),
        (lambda d: d["shards"][0].update(name="../../../etc/passwd"), "outside the dataset folder"),
        (lambda d: d["shards"][0].update(index="sub/../../x.idx"), "outside the dataset folder"),
        (lambda d: d["shards"][0].update(name="..\\..\\x.tar"), "outside the dataset folder"),
        (lambda d: d.update(classes=["a", "a"]), "'classes'"),
        (lambda d: d.update(classes="cats"), "'classes'"),
        (lambda d: d["shards"][0].update(checksum="xyz"), "hex"),
        (lambda d: d["shards"].append(dict(d["shards"][0])), "twice"),
        (lambda d: d.update(shards={}), "'shards' list"),
        (lambda d: d["fields"].update(jpg=3), "'extension'"),
        (lambda d: d["fields"]["jpg"].update(count="many"), "'count'"),
        (lambda d: d["fields"]["jpg"].update(min_size=10**9), "min_size > max_size"),
    ],
)
def test_bad_manifests_are_format_errors(good_manifest: bytes, edit: object, message: str) -> None:
    doc = json.loads(good_manifest)
    edit(doc)  # type: ignore[operator]
    with pytest.raises(FormatError, match=message) as e:
        parse_manifest(json.dumps(doc).encode(), "ds/manifest.json")
    assert e.value.path == "ds/manifest.json"


@pytest.mark.parametrize("data", [b"", b"{", b"\xff\xfe", b"[]", b"[" * 100000, b'{"format": "feedline"}'])
def test_garbage_manifests_are_format_errors(data: bytes) -> None:
    with pytest.raises(FormatError):
        parse_manifest(data)


def test_manifest_is_json_without_pickle_and_written_last(dataset: Path) -> None:
    doc = json.loads((dataset / MANIFEST_NAME).read_text())
    assert doc["format"] == "feedline" and doc["version"] == 3
    assert {"name", "index", "size", "index_size", "num_samples", "checksum", "index_checksum"} <= set(doc["shards"][0])
    newest_shard = max((dataset / s["name"]).stat().st_mtime_ns for s in doc["shards"])
    assert (dataset / MANIFEST_NAME).stat().st_mtime_ns >= newest_shard
    assert not [p for p in dataset.iterdir() if p.name.endswith(".partial")]


@pytest.mark.parametrize("where", ["header", "mid-sample", "one byte short", "trailing garbage", "mid-index"])
def test_damaged_files_fail_at_open_naming_the_shard(dataset: Path, where: str) -> None:
    info = read_manifest(dataset).shards[0]
    shard, index_path = dataset / info.name, dataset / info.index
    data = shard.read_bytes()
    if where == "mid-index":
        index_path.write_bytes(index_path.read_bytes()[: info.index_size // 2])
    else:
        lo, hi = load_index(dataset, info).sample_extent(1)
        cut = {"header": 100, "mid-sample": (lo + hi) // 2, "one byte short": len(data) - 1}.get(where)
        shard.write_bytes(data[:cut] if cut is not None else data + b"garbage")
    with pytest.raises(FormatError) as e:
        load_index(dataset, info)
    assert e.value.shard == info.name and e.value.fix
    assert [p.shard for p in verify(dataset)] != []


def test_a_manifest_naming_a_file_outside_the_dataset_is_refused_by_every_reader(dataset: Path, tmp_path: Path) -> None:
    """A crafted manifest with a matching index once made ds[0] return /etc/passwd-like files."""
    import feedline

    secret = tmp_path / "secret.tar"
    info = read_manifest(dataset).shards[0]
    secret.write_bytes((dataset / info.name).read_bytes())  # a real shard, so only the path is wrong
    doc = json.loads((dataset / MANIFEST_NAME).read_bytes())
    doc["shards"][0]["name"] = os.path.relpath(secret, dataset)
    (dataset / MANIFEST_NAME).write_text(json.dumps(doc))
    for reader in (read_manifest, verify, feedline.open_dataset):
        with pytest.raises(FormatError, match="outside the dataset folder"):
            reader(dataset)
