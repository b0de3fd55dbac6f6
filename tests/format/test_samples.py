"""DatasetWriter / pack_samples: datasets written from Python samples, read back by the real reader."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import feedline
from feedline.errors import ConfigError, WriteError
from feedline.format import (
    DatasetWriter,
    PackProgress,
    merge_parts,
    pack_samples,
    read_manifest,
    verify,
)
from feedline.format._samples import PARTS, STAGING
from feedline.io import open_dataset


def _samples(n: int, seed: int = 0, prefix: str = "") -> list[dict]:
    rng = np.random.default_rng(seed)
    return [
        {
            "__key__": f"{prefix}frame.{i:05d}" if i % 2 else f"{prefix}{i:05d}",
            "jpg": rng.bytes(int(rng.integers(1, 3000))),
            "depth": rng.standard_normal((4, 3)).astype(np.float16),
            "cls": i % 5,
            "meta": {"i": i, "tags": ["a", "ü"]},
            "caption": f"sample {i}",
            "emb": torch.arange(6, dtype=torch.float32) * i,
            "vec.f32": np.full(8, i, np.float32),
        }
        for i in range(n)
    ]


def _load_npy(data: object) -> np.ndarray:
    return np.load(io.BytesIO(bytes(data)), allow_pickle=False)  # type: ignore[call-overload]


def test_every_value_type_round_trips_with_schema_labels_and_checksums(tmp_path: Path) -> None:
    src = _samples(60)
    seen: list[PackProgress] = []
    manifest = pack_samples(src, tmp_path / "ds", shard_size="8KiB", align=512, progress=seen.append)
    assert len(manifest.shards) > 3 and manifest.num_samples == 60 and manifest.align == 512
    assert [p.files_done for p in seen] == list(range(1, 61)) and seen[-1].files_total == 60
    assert verify(tmp_path / "ds") == []
    assert not (tmp_path / "ds" / STAGING).exists()
    ds = open_dataset(tmp_path / "ds")
    schema = ds.schema
    assert schema["cls"].kind == "label" and schema["cls"].dtype == "<i8"
    assert (schema["depth.npy"].kind, schema["depth.npy"].dtype, schema["depth.npy"].shape) == ("npy", "<f2", (4, 3))
    assert (schema["vec.f32"].kind, schema["vec.f32"].shape) == ("raw", (8,))
    for i, want in enumerate(src):
        got = ds[i]
        assert got["__key__"] == want["__key__"]  # dotted keys read back as written
        assert bytes(got["jpg"]) == want["jpg"]
        assert np.array_equal(_load_npy(got["depth.npy"]), want["depth"])
        assert _load_npy(got["depth.npy"]).dtype == np.float16
        assert int(bytes(got["cls"])) == want["cls"]
        assert json.loads(bytes(got["meta.json"])) == want["meta"]
        assert bytes(got["caption.txt"]).decode() == want["caption"]
        assert np.array_equal(_load_npy(got["emb.npy"]), want["emb"].numpy())
        assert np.frombuffer(bytes(got["vec.f32"]), np.float32).tolist() == [float(i)] * 8


def test_loader_batches_equal_the_source(tmp_path: Path) -> None:
    src = [{k: v for k, v in s.items() if k != "jpg"} for s in _samples(40)]  # random bytes are no JPEG
    pack_samples(src, tmp_path / "ds", shard_size="16KiB")
    loader = feedline.Loader(str(tmp_path / "ds"), batch_size=8, shuffle=False, drop_last=False, workers=1)
    rows = 0
    for batch in loader:
        keys = batch["__key__"]
        want = [next(s for s in src if s["__key__"] == k) for k in keys]
        assert batch["cls"].dtype == torch.int64
        assert batch["cls"].tolist() == [s["cls"] for s in want]
        assert torch.equal(batch["depth.npy"], torch.from_numpy(np.stack([s["depth"] for s in want])))
        rows += len(keys)
    assert rows == 40


def test_duplicate_key_is_refused_naming_it_and_the_previous_dataset_stays(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    first = pack_samples(_samples(10), out, shard_size="4KiB")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    dup = [*_samples(5), {"__key__": "00002", "cls": 1}]
    with pytest.raises(ConfigError, match="'00002' written twice") as info:
        pack_samples(dup, out, shard_size="4KiB")
    assert info.value.key == "00002"
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing moved, staging gone
    assert read_manifest(out) == first and verify(out) == []


def test_an_exception_in_the_with_block_or_the_iterable_leaves_no_dataset(tmp_path: Path) -> None:
    out = tmp_path / "new"

    def broken():
        yield from _samples(30)
        raise RuntimeError("source went away")

    with pytest.raises(RuntimeError, match="went away"):
        pack_samples(broken(), out, shard_size="4KiB")
    assert sorted(os.listdir(out)) == []  # no shard, no manifest, no lock file, no staging
    with pytest.raises(feedline.FeedlineError, match="no manifest"):
        open_dataset(out)


def test_a_larger_rewrite_then_a_smaller_one_removes_stale_shards(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    big = pack_samples(_samples(40), out, shard_size="4KiB")
    small = pack_samples(_samples(3), out, shard_size="4KiB")
    assert len(big.shards) > len(small.shards)
    assert sorted(p.name for p in out.glob("shard-*")) == sorted(
        [s.name for s in small.shards] + [s.index for s in small.shards])
    assert len(open_dataset(out)) == 3


@pytest.mark.parametrize(("field", "value", "message"), [
    ("jpg", np.zeros((2, 2, 3), np.float32), "must be uint8 HxW or HxWxC"),
    ("tif", np.zeros((2, 2, 3), np.uint8), "cannot be stored as .tif"),
    ("img.bmp", Image.new("RGB", (2, 2)), "encoded as jpg, png or webp"),
    ("x.f32", np.zeros(3, np.float64), "holds float32, this array is float64"),
    ("obj", np.array([{}, 1], dtype=object), "needs pickle"),
    ("year.json", 3, "stored as a label"),
    ("thing", object(), "cannot store a object"),
    ("meta", {"a": {1, 2}}, "not JSON"),
    ("cls", "three", "not an integer|integer"),
])
def test_values_that_cannot_be_stored_are_refused_naming_key_and_field(
        tmp_path: Path, field: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        pack_samples([{"__key__": "k1", field: value}], tmp_path / "ds")
    assert info.value.key == "k1"
    assert not (tmp_path / "ds" / "manifest.json").exists()


def test_names_get_an_extension_from_the_value_and_keys_default_to_a_count(tmp_path: Path) -> None:
    manifest = pack_samples([{"year": 2020, "score": 0.5, "ok": True, "label": np.int64(4)}] * 3, tmp_path / "ds")
    assert sorted(manifest.fields) == ["label", "ok.npy", "score.npy", "year.cls"]
    ds = open_dataset(tmp_path / "ds")
    assert [ds[i]["__key__"] for i in range(3)] == ["000000000", "000000001", "000000002"]
    assert ds.schema["year.cls"].kind == "label" and ds.schema["score.npy"].dtype == "<f8"


def test_a_second_writer_into_the_same_folder_is_refused(tmp_path: Path) -> None:
    with DatasetWriter(tmp_path / "ds") as w:
        w.write({"cls": 1})
        with pytest.raises(WriteError, match="writing into"):
            DatasetWriter(tmp_path / "ds")
    assert len(open_dataset(tmp_path / "ds")) == 1


def test_parts_written_by_ranks_merge_into_one_dataset(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    for rank in (1, 0):  # any order: merged in part order
        pack_samples(_samples(15, seed=rank, prefix=f"r{rank}/"), out, part=rank, shard_size="8KiB",
                     classes=["a", "b", "c", "d", "e"])
    manifest = merge_parts(out)
    assert manifest.num_samples == 30 and manifest.classes == ("a", "b", "c", "d", "e")
    assert not (out / PARTS).exists() and verify(out) == []
    ds = open_dataset(out)
    keys = [ds[i]["__key__"] for i in range(30)]
    assert keys == [s["__key__"] for r in (0, 1) for s in _samples(15, seed=r, prefix=f"r{r}/")]


def test_merge_refuses_a_key_in_two_parts(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    for rank in (0, 1):
        pack_samples(_samples(4), out, part=rank)
    with pytest.raises(ConfigError, match="is in part-00000 and part-00001"):
        merge_parts(out)
    assert not (out / "manifest.json").exists() and (out / PARTS / "part-00001" / "manifest.json").exists()


def test_a_refused_sample_can_be_skipped_and_an_empty_write_is_an_error(tmp_path: Path) -> None:
    with DatasetWriter(tmp_path / "ds", shard_size=600) as w:
        w.write({"__key__": "a", "cls": 1})
        with pytest.raises(ConfigError, match="has no fields"):
            w.write({"__key__": "b"})  # rolls to a new shard, then is refused
        w.write({"__key__": "c", "cls": 2})
    assert [s.num_samples for s in read_manifest(tmp_path / "ds").shards] == [1, 1]
    assert [open_dataset(tmp_path / "ds")[i]["__key__"] for i in range(2)] == ["a", "c"]
    with pytest.raises(ConfigError, match="no samples were written"):
        pack_samples([], tmp_path / "empty")
    assert os.listdir(tmp_path / "empty") == []


class _TorchvisionLike(torch.utils.data.Dataset):
    """Items as a torchvision classification dataset gives them: (PIL image, int)."""

    def __init__(self, n: int) -> None:
        rng = np.random.default_rng(3)
        self.arrays = [rng.integers(0, 255, (8 + i % 3, 10, 3), dtype=np.uint8) for i in range(n)]

    def __len__(self) -> int:
        return len(self.arrays)

    def __getitem__(self, i: int) -> tuple[Image.Image, int]:
        if i >= len(self):
            raise IndexError(i)
        return Image.fromarray(self.arrays[i]), i % 4


def test_a_dataset_of_image_label_tuples_packs_with_fields(tmp_path: Path) -> None:
    src = _TorchvisionLike(12)
    pack_samples(src, tmp_path / "ds", fields=("png", "cls"))
    ds = open_dataset(tmp_path / "ds")
    for i in range(12):
        got = ds[i]
        assert np.array_equal(np.asarray(Image.open(io.BytesIO(bytes(got["png"])))), src.arrays[i])  # lossless
        assert int(bytes(got["cls"])) == i % 4
    with pytest.raises(ConfigError, match="pass fields="):
        pack_samples(src, tmp_path / "no-fields")
    with pytest.raises(ConfigError, match="for fields"):
        pack_samples(src, tmp_path / "short", fields=("png",))


def test_image_values_in_jpg_fields_are_encoded(tmp_path: Path) -> None:
    smooth = np.tile(np.linspace(0, 255, 32, dtype=np.uint8)[None, :, None], (24, 1, 3))
    pack_samples([{"jpg": smooth, "img": Image.fromarray(smooth).convert("RGBA")}], tmp_path / "ds")
    got = open_dataset(tmp_path / "ds")[0]
    decoded = np.asarray(Image.open(io.BytesIO(bytes(got["jpg"]))))
    assert decoded.shape == smooth.shape and np.abs(decoded.astype(int) - smooth).mean() < 2  # quality 95
    assert Image.open(io.BytesIO(bytes(got["img.png"]))).mode == "RGBA"


def test_a_writer_killed_mid_write_leaves_the_previous_dataset_and_the_next_one_succeeds(tmp_path: Path) -> None:
    import subprocess
    import sys

    out = tmp_path / "ds"
    first = pack_samples(_samples(8), out, shard_size="4KiB")
    script = (
        "import os, signal, numpy as np, feedline\n"
        f"w = feedline.DatasetWriter({str(out)!r}, shard_size='64KiB', durable=False)\n"
        "for i in range(400):\n"
        "    w.write({'__key__': f'new{i}', 'x': np.zeros(512, np.uint8), 'cls': i})\n"
        "    if i == 300: os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert proc.returncode == -9, proc.stderr
    assert len(list((out / STAGING).glob("shard-*.tar"))) >= 2  # it had written shards when it died
    assert read_manifest(out) == first and verify(out) == [] and len(open_dataset(out)) == 8
    second = pack_samples(_samples(3), out)
    assert second.num_samples == 3 and not (out / STAGING).exists() and verify(out) == []
