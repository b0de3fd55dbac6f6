"""open_dataset / PackedDataset: round trips, batching, errors, pickling, threads."""

from __future__ import annotations

import pickle
import tarfile
import threading
from pathlib import Path

import numpy as np
import pytest
from iodata import Samples, build_dataset, expected_samples, make_samples

import feedline
from feedline.errors import ChecksumError, ConfigError, FormatError, ReadError
from feedline.io import open_dataset


def _as_bytes(sample: dict[str, object]) -> dict[str, object]:
    return {k: (v if k == "__key__" else bytes(v)) for k, v in sample.items()}  # type: ignore[call-overload]


def _expected(key: str, fields: dict[str, bytes]) -> dict[str, object]:
    return {"__key__": key, **fields}


def test_every_sample_round_trips(dataset: Path, small_shards: list[Samples]) -> None:
    want = expected_samples(small_shards)
    with open_dataset(dataset, io="buffered") as ds:
        assert len(ds) == len(want)
        assert ds.keys() == [k for k, _ in want]
        for i, (key, fields) in enumerate(want):
            assert _as_bytes(ds[i]) == _expected(key, fields)
        assert ds.fields == sorted({f for _, fs in want for f in fs})


def test_fields_equal_a_plain_read_of_the_tar_member(dataset: Path) -> None:
    ds = open_dataset(dataset, io="buffered")
    seen = 0
    for shard in sorted(dataset.glob("*.tar")):
        with tarfile.open(shard) as tar:
            for m in tar.getmembers():
                key, field = m.name.split(".", 1)
                i = ds.keys().index(key)
                f = tar.extractfile(m)
                assert f is not None
                assert bytes(ds[i][field]) == f.read()
                seen += 1
    assert seen > 40


def test_read_many_order_duplicates_and_negative_indices(dataset: Path, small_shards: list[Samples]) -> None:
    want = expected_samples(small_shards)
    ds = open_dataset(dataset, io="buffered")
    order = [39, 0, 17, 17, 5, 38, -1, 20, 14, 15]
    got = ds.read_many(order)
    assert [g["__key__"] for g in got] == [want[i][0] for i in order]
    for i, g in zip(order, got, strict=True):
        assert _as_bytes(g) == _expected(*want[i])
    assert got[2] is not got[3]  # a repeated sample gets its own dict
    assert ds.read_many([]) == []
    assert len(ds.read_many(np.arange(len(ds)))) == len(ds)


def test_views_are_zero_copy_and_survive_later_reads(dataset: Path, small_shards: list[Samples]) -> None:
    want = expected_samples(small_shards)
    ds = open_dataset(dataset, io="buffered")
    first = ds.read_many(range(10))
    fields = [f for f in first[0] if f != "__key__"]
    view = first[0][fields[0]]
    assert isinstance(view, memoryview)
    assert view.obj is not None  # a view into a window buffer, not a bytes copy
    for _ in range(5):  # later batches must not overwrite buffers still referenced
        ds.read_many(range(10, 40))
    assert [_as_bytes(s) for s in first] == [_expected(*w) for w in want[:10]]


def test_locate_fingerprint_and_lazy_top_level_export(dataset: Path, tmp_path: Path) -> None:
    ds = feedline.open_dataset(dataset)
    assert ds.locate(0) == ("shard-00000.tar", "a000000")
    assert ds.locate(15) == ("shard-00001.tar", "b000000")
    assert ds.locate(-1) == ("shard-00002.tar", "c000004")
    fp = ds.fingerprint
    assert fp == open_dataset(dataset).fingerprint
    other = build_dataset(tmp_path / "other", [make_samples(15, seed=9, prefix="a")])
    assert open_dataset(other).fingerprint != fp
    with pytest.raises(IndexError):
        ds[40]
    with pytest.raises(TypeError):
        ds["0"]  # type: ignore[index]


def test_bad_options_are_config_errors(dataset: Path) -> None:
    with pytest.raises(ConfigError, match="io must be one of"):
        open_dataset(dataset, io="fast")
    with pytest.raises(ConfigError, match="max_window"):
        open_dataset(dataset, max_window=1000)
    with pytest.raises(ConfigError, match="needs a local dataset"):
        open_dataset("s3://bucket/x", io="direct")


def test_small_windows_still_return_every_sample(dataset: Path, small_shards: list[Samples]) -> None:
    want = expected_samples(small_shards)
    ds = open_dataset(dataset, io="buffered", max_window=4096, max_gap=0)
    got = ds.read_many(range(len(ds)))
    assert [_as_bytes(g) for g in got] == [_expected(*w) for w in want]


def test_pickle_reopens_lazily(dataset: Path, small_shards: list[Samples]) -> None:
    ds = open_dataset(dataset, io="buffered", verify=True)
    clone = pickle.loads(pickle.dumps(ds))
    assert clone._opened is None
    assert _as_bytes(clone[3]) == _expected(*expected_samples(small_shards)[3])
    assert clone.fingerprint == ds.fingerprint


def test_concurrent_read_many_from_threads(dataset: Path, small_shards: list[Samples]) -> None:
    want = [_expected(*w) for w in expected_samples(small_shards)]
    ds = open_dataset(dataset, io="buffered", verify=True)
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for _ in range(30):
                idx = rng.integers(0, len(want), 12)
                got = ds.read_many(idx)
                assert [_as_bytes(g) for g in got] == [want[i] for i in idx]
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_verify_names_shard_key_and_field_of_a_flipped_byte(dataset: Path) -> None:
    ds = open_dataset(dataset, io="buffered")
    shard = dataset / "shard-00001.tar"
    index = ds._state().catalog.shards[1].index
    rec = index.sample_members(4)[0]
    data = bytearray(shard.read_bytes())
    data[int(rec["offset"]) + int(rec["size"]) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    plain = open_dataset(dataset, io="buffered")
    plain[19]  # without verify the flipped byte is simply returned
    checked = open_dataset(dataset, io="buffered", verify=True)
    checked[18]
    with pytest.raises(ChecksumError) as err:
        checked.read_many([18, 19, 20])
    assert err.value.shard == "shard-00001.tar"
    assert err.value.key == "b000004"
    assert err.value.field == index.fields[int(rec["field"])]


def test_truncated_shard_is_a_format_error_at_open(dataset: Path) -> None:
    shard = dataset / "shard-00001.tar"
    shard.write_bytes(shard.read_bytes()[:-1])
    with pytest.raises(FormatError, match="truncated") as err:
        open_dataset(dataset)
    assert err.value.shard == "shard-00001.tar"


def test_trailing_garbage_is_a_format_error_at_open(dataset: Path) -> None:
    shard = dataset / "shard-00002.tar"
    shard.write_bytes(shard.read_bytes() + b"x")
    with pytest.raises(FormatError, match="trailing"):
        open_dataset(dataset)


def test_corrupt_index_is_rejected_at_open(dataset: Path) -> None:
    idx = dataset / "shard-00000.tar.idx"
    data = bytearray(idx.read_bytes())
    data[100] ^= 1
    idx.write_bytes(bytes(data))
    with pytest.raises(FormatError) as err:
        open_dataset(dataset)
    assert err.value.shard == "shard-00000.tar"


def test_shard_truncated_after_open_is_a_read_error_at_the_sample(dataset: Path) -> None:
    ds = open_dataset(dataset, io="buffered")
    index = ds._state().catalog.shards[0].index
    cut = int(index.sample_members(10)[0]["offset"]) + 1  # inside sample 10's first field
    shard = dataset / "shard-00000.tar"
    shard.write_bytes(shard.read_bytes()[:cut])
    assert bytes(ds[9][index.fields[0]]) is not None  # samples before the cut still read
    with pytest.raises(ReadError) as err:
        ds.read_many([8, 9, 10, 11])
    assert err.value.shard == "shard-00000.tar"
    assert err.value.key == "a000010"
    assert err.value.field == index.fields[int(index.sample_members(10)[0]["field"])]


def test_missing_manifest_is_a_format_error(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match="no manifest"):
        open_dataset(tmp_path)


def test_missing_manifest_fix_names_the_command_for_what_the_folder_holds(tmp_path: Path) -> None:
    """A newcomer's first try, ``Loader("train")`` on the raw ImageFolder: the fix is the pack
    command with labels; loose files get a plain pack, tar shards ``feedline index``."""
    (tmp_path / "train" / "cats").mkdir(parents=True)
    (tmp_path / "train" / "cats" / "1.jpg").write_bytes(b"\xff\xd8")
    (tmp_path / "photos").mkdir()
    (tmp_path / "photos" / "000001.jpg").write_bytes(b"\xff\xd8")
    (tmp_path / "shards").mkdir()
    (tmp_path / "shards" / "shard-000000.tar").write_bytes(bytes(1024))
    expect = {"train": f"feedline pack {tmp_path / 'train'} --out {tmp_path / 'train'}-packed --labels from-folder",
              "photos": f"feedline pack {tmp_path / 'photos'} --out {tmp_path / 'photos'}-packed`",
              "shards": f"feedline index {tmp_path / 'shards'}"}
    for name, command in expect.items():
        with pytest.raises(FormatError, match="no manifest") as e:
            open_dataset(tmp_path / name)
        assert e.value.fix is not None and command in e.value.fix, e.value.fix


def test_importing_feedline_io_loads_no_heavy_or_optional_dependency() -> None:
    import subprocess
    import sys

    code = (
        "import sys, feedline.io; "
        "print([m for m in ('torch', 'kvikio', 'fsspec', 's3fs', 'webdataset') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_release_buffers_drops_the_cache_and_keeps_held_views(dataset: Path,
                                                              small_shards: list[Samples]) -> None:
    ds = open_dataset(dataset)
    assert ds.release_buffers() == 0  # nothing read yet: nothing cached
    held = ds.read_many([0, 1])
    want = {k: bytes(v) for k, v in held[0].items() if k != "__key__"}
    ds.read_many([2])
    assert ds._state().pool.cached_bytes() > 0
    assert ds.release_buffers() > 0
    assert ds._state().pool.cached_bytes() == 0 and ds.release_buffers() == 0
    again = ds.read_many([0])[0]  # later reads allocate afresh
    assert {k: bytes(v) for k, v in held[0].items() if k != "__key__"} == want
    assert {k: bytes(v) for k, v in again.items() if k != "__key__"} == want


def test_the_ways_users_name_a_dataset(dataset: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    n = len(open_dataset(dataset))
    monkeypatch.setenv("HOME", str(dataset.parent))
    for name in (dataset.as_uri(), str(dataset / "manifest.json"), (dataset / "manifest.json").as_uri(),
                 f"~/{dataset.name}"):
        with open_dataset(name) as ds:
            assert len(ds) == n and Path(ds.root) == dataset, name
    shard = next(dataset.glob("*.tar"))
    with pytest.raises(ConfigError, match="is a file") as e:
        open_dataset(shard)
    assert str(dataset) in (e.value.fix or "")
