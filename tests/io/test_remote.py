"""Remote datasets: a real S3-compatible server (moto) on 127.0.0.1, read through s3fs."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from feedline.errors import FormatError
from feedline.io import open_dataset

BUCKET = "feedline-test"


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, dict[str, Any]]]:
    import s3fs

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    options = {"endpoint_url": s3_endpoint, "key": "testing", "secret": "testing", "skip_instance_cache": True}
    fs = s3fs.S3FileSystem(**options)
    if not fs.exists(BUCKET):
        fs.mkdir(BUCKET)
    yield fs, options
    for path in fs.find(BUCKET):
        fs.rm(path)


def _upload(fs: Any, local: Path, prefix: str) -> str:
    # Shards and indexes first, the manifest last (its presence marks a complete dataset).
    names = sorted(os.listdir(local), key=lambda n: n == "manifest.json")
    for name in names:
        fs.put_file(str(local / name), f"{BUCKET}/{prefix}/{name}")
    return f"s3://{BUCKET}/{prefix}"


def _bytes(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v if k == "__key__" else bytes(v) for k, v in s.items()} for s in samples]


@pytest.mark.timeout(120)
def test_s3_reads_are_byte_identical_to_local(s3: tuple[Any, dict[str, Any]], dataset: Path) -> None:
    fs, options = s3
    url = _upload(fs, dataset, "ds")
    remote = open_dataset(url, storage_options=options, verify=True)
    local = open_dataset(dataset, io="buffered")
    assert remote.backend.name == "remote"
    assert len(remote) == len(local) and remote.keys() == local.keys()
    assert remote.fingerprint == local.fingerprint
    order = [*range(len(local) - 1, -1, -1), 3, 3]
    assert _bytes(remote.read_many(order)) == _bytes(local.read_many(order))
    assert remote.locate(16) == local.locate(16)


@pytest.mark.timeout(120)
def test_s3_small_windows_and_pickled_copy(s3: tuple[Any, dict[str, Any]], dataset: Path) -> None:
    import pickle

    fs, options = s3
    url = _upload(fs, dataset, "small")
    remote = open_dataset(url, storage_options=options, max_window=4096, max_gap=0)
    clone = pickle.loads(pickle.dumps(remote))
    local = open_dataset(dataset, io="buffered")
    idx = [0, 7, 14, 15, 39]
    assert _bytes(clone.read_many(idx)) == _bytes(local.read_many(idx))


@pytest.mark.timeout(120)
def test_s3_fields_read_into_rows_like_local(s3: tuple[Any, dict[str, Any]], tmp_path: Path) -> None:
    import numpy as np
    from iodata import build_dataset

    rng = np.random.default_rng(5)
    shards = [[(f"k{s}{i:03d}", {"f32": rng.random(16, np.float32).tobytes(), "bin": bytes(i)})
               for i in range(9)] for s in range(2)]
    local_root = build_dataset(tmp_path / "fixed", shards)
    fs, options = s3
    remote = open_dataset(_upload(fs, local_root, "fixed"), storage_options=options)
    local = open_dataset(local_root, io="buffered")
    order = [17, 0, 9, 3, 3]
    got, want = np.zeros((5, 16), np.float32), np.zeros((5, 16), np.float32)
    assert remote.read_fields_into(order, {"f32": got}) == local.read_fields_into(order, {"f32": want})
    assert got.tobytes() == want.tobytes() and got[0].tobytes() == shards[1][8][1]["f32"]


@pytest.mark.timeout(120)
def test_s3_npy_rows_and_labels_like_local(s3: tuple[Any, dict[str, Any]], tmp_path: Path) -> None:
    import io

    import numpy as np
    from iodata import build_dataset

    def npy(arr: np.ndarray) -> bytes:
        buf = io.BytesIO()
        np.save(buf, arr)
        return buf.getvalue()

    rng = np.random.default_rng(6)
    shards = [[(f"k{s}{i:03d}", {"x.npy": npy(rng.random((3, 5)).astype(np.float32)), "cls": b"%d" % (s * 100 + i)})
               for i in range(7)] for s in range(2)]
    local_root = build_dataset(tmp_path / "npy", shards)
    fs, options = s3
    remote = open_dataset(_upload(fs, local_root, "npy"), storage_options=options, verify=True)
    assert remote.schema["x.npy"].kind == "npy" and remote.schema["cls"].kind == "label"
    order = [13, 0, 7, 3, 3]
    got, want = np.zeros((5, 3, 5), np.float32), np.zeros((5, 3, 5), np.float32)
    assert remote.read_fields_into(order, {"x.npy": got}) == open_dataset(local_root).read_fields_into(order, {"x.npy": want})
    assert got.tobytes() == want.tobytes()
    np.testing.assert_array_equal(got[0], np.load(io.BytesIO(shards[1][6][1]["x.npy"])))
    labels = np.zeros(5, np.int64)
    remote.gather_labels(order, {"cls": labels})
    assert labels.tolist() == [106, 0, 100, 3, 3]


@pytest.mark.timeout(120)
def test_s3_truncated_shard_and_missing_manifest(s3: tuple[Any, dict[str, Any]], dataset: Path) -> None:
    fs, options = s3
    with pytest.raises(FormatError, match="no manifest"):
        open_dataset(f"s3://{BUCKET}/nothing-here", storage_options=options)
    url = _upload(fs, dataset, "cut")
    fs.pipe_file(f"{BUCKET}/cut/shard-00001.tar", (dataset / "shard-00001.tar").read_bytes()[:-512])
    with pytest.raises(FormatError, match="truncated") as err:
        open_dataset(url, storage_options=options)
    assert err.value.shard == "shard-00001.tar"
