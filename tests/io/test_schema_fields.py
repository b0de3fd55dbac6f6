"""``read_fields_into`` for npy fields and ``gather_labels``: the same values as per-sample decode."""

from __future__ import annotations

import io
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from iodata import Samples, build_dataset, disk_dir, pack_dataset

from feedline.decode import Decoders
from feedline.errors import ChecksumError, ConfigError, ReadError
from feedline.format import ShardIndex, encode_index, index_tars, read_manifest, write_manifest
from feedline.format._checksum import checksum, hexdigest
from feedline.io import open_dataset


def _npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def _samples(n: int, seed: int, prefix: str) -> Samples:
    """A 4 KB float32 .npy, a uint8 (2, 3) .npy, a .cls label, a label.txt and a ragged json."""
    rng = np.random.default_rng(seed)
    return [
        (f"{prefix}{i:05d}", {
            "x.npy": _npy(rng.standard_normal(1024).astype(np.float32)),
            "m.npy": _npy(rng.integers(0, 255, (2, 3), dtype=np.uint8)),
            "cls": b"%d\n" % int(rng.integers(-5, 1000)),
            "label.txt": b"%d" % int(rng.integers(0, 2**40)),
            "json": b'{"i": %d}' % i,
        })
        for i in range(n)
    ]


SHARDS = [_samples(20, 1, "a"), _samples(9, 2, "b"), _samples(14, 3, "c")]
N = sum(len(s) for s in SHARDS)
NPY = ("x.npy", "m.npy")
LABELS = ("cls", "label.txt")


@pytest.fixture(params=["adopted-buffered", "packed-buffered", "adopted-direct"])
def npy_ds(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Path, str]]:
    how, io_name = request.param.split("-")
    base = tmp_path
    if io_name == "direct":
        found = disk_dir()
        if found is None:
            pytest.fail("no folder here accepts O_DIRECT; the direct path cannot be tested")
        base = Path(tempfile.mkdtemp(dir=found))
    try:
        if how == "adopted":
            yield build_dataset(base / "ds", SHARDS), io_name
        else:
            yield pack_dataset(base / "ds", SHARDS, shard_size=60_000), io_name
    finally:
        if base is not tmp_path:
            shutil.rmtree(base, ignore_errors=True)


def _alloc(ds: object, n: int, fields: tuple[str, ...]) -> dict[str, np.ndarray]:
    schema = ds.schema  # type: ignore[attr-defined]
    return {f: np.empty((n, *schema[f].shape), schema[f].dtype) for f in fields}


def test_schema_of_the_fixture(npy_ds: tuple[Path, str]) -> None:
    ds = open_dataset(npy_ds[0], io=npy_ds[1])
    assert {f: (s.kind, s.dtype, s.shape) for f, s in ds.schema.items()} == {
        "x.npy": ("npy", "<f4", (1024,)), "m.npy": ("npy", "|u1", (2, 3)), "cls": ("label", "<i8", ()),
        "label.txt": ("label", "<i8", ()), "json": ("var", None, None),
    }


@pytest.mark.timeout(90)
def test_npy_rows_and_labels_equal_the_per_sample_decode(npy_ds: tuple[Path, str]) -> None:
    root, io_name = npy_ds
    decoders = Decoders()
    for verify in (False, True):
        ds = open_dataset(root, io=io_name, verify=verify)
        rng = np.random.default_rng(7)
        for order in (rng.permutation(N), np.arange(N), np.array([3, 3, -1, 0, 25, 24])):
            out = _alloc(ds, len(order), NPY)
            keys = ds.read_fields_into(order, out)
            labels = {f: np.full(len(order), -99, np.int64) for f in LABELS}
            ds.gather_labels(order, labels)
            want = ds.read_many(order)
            assert keys == [s["__key__"] for s in want]
            for i, sample in enumerate(want):
                decoded = decoders.decode_sample(sample)
                for f in NPY:
                    np.testing.assert_array_equal(out[f][i], decoded[f])
                assert labels["cls"][i] == decoded["cls"]
                assert labels["label.txt"][i] == int(decoded["label.txt"])


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
@pytest.mark.timeout(120)
def test_random_field_mixes(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    """Random fields of random kinds, shapes and dtypes, several shards, shuffled batches."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    dtypes = ["<f4", "<f8", "|u1", "<i2", ">i4", "<c8", "|b1"]
    spec = {}
    for j in range(data.draw(st.integers(1, 4))):
        kind = data.draw(st.sampled_from(["npy", "label", "raw"]))
        if kind == "npy":
            shape = tuple(data.draw(st.lists(st.integers(0, 5), max_size=3)))
            spec[f"f{j}.npy"] = (kind, data.draw(st.sampled_from(dtypes)), shape)
        elif kind == "label":
            spec[data.draw(st.sampled_from(["cls", "idx", "target", "cls.txt"])) + f"{j}"[:0]] = (kind, "<i8", ())
        else:
            spec[f"f{j}.{data.draw(st.sampled_from(['f32', 'u8', 'i64']))}"] = (kind, None, (int(rng.integers(1, 9)),))
    shard_sizes = data.draw(st.lists(st.integers(0, 12), min_size=1, max_size=3))
    if not sum(shard_sizes):
        shard_sizes[0] = 1
    shards: list[Samples] = []
    for s, count in enumerate(shard_sizes):
        samples: Samples = []
        for i in range(count):
            fields = {}
            for name, (kind, dtype, shape) in spec.items():
                if kind == "npy":
                    arr = (rng.standard_normal(shape) * 50).astype(dtype)
                    fields[name] = _npy(arr)
                elif kind == "label":
                    fields[name] = b"%d" % int(rng.integers(-(2**62), 2**62))
                else:
                    item = {"f32": 4, "u8": 1, "i64": 8}[name.rsplit(".", 1)[-1]]
                    fields[name] = rng.integers(0, 256, shape[0] * item, dtype=np.uint8).tobytes()
            samples.append((f"s{s}k{i:04d}", fields))
        shards.append(samples)
    root = build_dataset(tmp_path_factory.mktemp("mix") / "ds", shards)
    ds = open_dataset(root, verify=data.draw(st.booleans()))
    n = len(ds)
    order = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=0, max_size=2 * n)), dtype=np.int64)
    fixed = tuple(f for f, s in ds.schema.items() if s.kind in ("npy", "raw"))
    labels = tuple(f for f, s in ds.schema.items() if s.kind == "label")
    assert set(fixed) | set(labels) == set(spec)
    out = _alloc(ds, len(order), fixed)
    ds.read_fields_into(order, out)
    got = {f: np.zeros(len(order), np.int64) for f in labels}
    ds.gather_labels(order, got)
    decoders = Decoders({f: lambda b: int(bytes(b)) for f in labels})
    for i, sample in enumerate(ds.read_many(order)):
        decoded = decoders.decode_sample(sample)
        for f in fixed:
            np.testing.assert_array_equal(out[f][i], np.asarray(decoded[f]).reshape(out[f][i].shape))
            # the rows hold the stored dtype (">i4" too); the codec gives it in native order
            assert out[f][i].dtype.newbyteorder("=") == np.asarray(decoded[f]).dtype
        for f in labels:
            assert got[f][i] == decoded[f]


@pytest.mark.timeout(60)
def test_damaged_npy_names_shard_key_and_field(tmp_path: Path) -> None:
    root = build_dataset(tmp_path / "ds", SHARDS)
    ds = open_dataset(root, verify=True, io="buffered")
    index = ds._state().catalog.shards[1].index
    row = int(index.field_rows("x.npy")[4])
    offset = int(index.members["offset"][row])
    path = root / "shard-00001.tar"
    raw = bytearray(path.read_bytes())
    raw[offset + 20] ^= 0x01  # inside the .npy header: only a whole-member check sees it
    path.write_bytes(bytes(raw))
    out = _alloc(ds, 2, ("x.npy",))
    with pytest.raises(ChecksumError) as err:
        ds.read_fields_into([0, 24], out)
    assert (err.value.shard, err.value.key, err.value.field) == ("shard-00001.tar", "b00004", "x.npy")
    open_dataset(root, io="buffered").read_fields_into([0, 24], out)  # unverified: the payload reads
    with open(path, "r+b") as f:
        f.truncate(offset + int(index.aux[row]) + 100)
    with pytest.raises(ReadError) as err2:
        ds.read_fields_into([24], _alloc(ds, 1, ("x.npy",)))
    assert (err2.value.shard, err2.value.key, err2.value.field) == ("shard-00001.tar", "b00004", "x.npy")


def test_gather_labels_argument_errors(tmp_path: Path) -> None:
    ds = open_dataset(build_dataset(tmp_path / "ds", SHARDS))
    with pytest.raises(ConfigError, match="kind is npy"):
        ds.gather_labels([0], {"x.npy": np.zeros(1, np.int64)})
    with pytest.raises(ConfigError, match="kind is absent"):
        ds.gather_labels([0], {"nope": np.zeros(1, np.int64)})
    with pytest.raises(ConfigError, match="int64"):
        ds.gather_labels([0], {"cls": np.zeros(1, np.int32)})
    with pytest.raises(ConfigError, match="shape"):
        ds.gather_labels([0, 1], {"cls": np.zeros(1, np.int64)})
    with pytest.raises(IndexError):
        ds.gather_labels([N], {"cls": np.zeros(1, np.int64)})
    ds.gather_labels([], {"cls": np.zeros(0, np.int64)})


def test_a_v1_dataset_still_opens_and_reads(tmp_path: Path) -> None:
    """Rewrite every index of a dataset as version 1 (as feedline before the schema wrote it)."""
    root = build_dataset(tmp_path / "ds", SHARDS)
    manifest = read_manifest(root)
    infos = []
    for info in manifest.shards:
        index = ShardIndex.load(root / info.index, shard_size=info.size)
        data = encode_index(index.keys, index.fields, index.members, shard_size=index.shard_size,
                            shard_checksum=index.shard_checksum, version=1)
        (root / info.index).write_bytes(data)
        infos.append(type(info)(**{**vars(info), "index_size": len(data),
                                   "index_checksum": hexdigest(checksum(data))}))
    write_manifest(root, type(manifest)(**{**vars(manifest), "version": 1, "shards": tuple(infos)}))
    ds = open_dataset(root)
    assert read_manifest(root).version == 1
    assert {f: s.kind for f, s in ds.schema.items()} == dict.fromkeys(["cls", "json", "label.txt", "m.npy", "x.npy"], "var")
    assert bytes(ds[5]["cls"]) == SHARDS[0][5][1]["cls"]
    with pytest.raises(ConfigError, match="kind is var"):
        ds.gather_labels([0], {"cls": np.zeros(1, np.int64)})
    # the upgrade the README gives: re-index every shard in place
    index_tars([root / info.name for info in manifest.shards], root)
    upgraded = open_dataset(root)
    assert read_manifest(root).version == 3 and upgraded.schema["x.npy"].kind == "npy"
    labels = np.zeros(2, np.int64)
    upgraded.gather_labels([5, 0], {"cls": labels})
    assert labels.tolist() == [int(SHARDS[0][5][1]["cls"]), int(SHARDS[0][0][1]["cls"])]
