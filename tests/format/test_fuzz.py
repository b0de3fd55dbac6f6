"""Fuzz the shard reader: mutated shards, indexes and manifests raise only FeedlineError.

Mutations: bit flips, truncations, appended garbage, random overwrites, and
header / record fields set to edge values with the index checksum re-signed
(so the structural checks, not only the checksum, are exercised). The default
run does a few thousand cases; ``-m slow`` runs many more.
"""

from __future__ import annotations

import io
import json
import random
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import xxhash

from feedline.errors import FeedlineError
from feedline.format import (
    HEADER_DTYPE,
    MANIFEST_NAME,
    MEMBER_DTYPE,
    ShardIndex,
    index_tar,
    pack,
    parse_manifest,
)
from feedline.format._schema import FIELD_DTYPE

EDGE = [0, 1, 511, 512, 4096, (1 << 16) - 1, 1 << 31, (1 << 32) - 1, 1 << 40, (1 << 63) - 1, (1 << 64) - 1]


def _resign(raw: bytearray) -> bytes:
    """Recompute the index checksum so a structural mutation gets past it."""
    n = HEADER_DTYPE.itemsize
    raw[n - 8 : n] = bytes(8)
    h = xxhash.xxh3_64(bytes(raw[:n]))
    h.update(bytes(raw[n:]))
    raw[n - 8 : n] = h.intdigest().to_bytes(8, "little")
    return bytes(raw)


def _flip(rnd: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rnd.randint(1, 8)):
        if out:
            out[rnd.randrange(len(out))] ^= 1 << rnd.randrange(8)
    return bytes(out)


def _truncate(rnd: random.Random, data: bytes) -> bytes:
    return data[: rnd.randrange(len(data))] if data else data


def _extend(rnd: random.Random, data: bytes) -> bytes:
    return data + rnd.randbytes(rnd.choice([1, 7, 512, 4096]))


def _overwrite(rnd: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    if out:
        at = rnd.randrange(len(out))
        out[at : at + 8] = rnd.randbytes(8)
    return bytes(out[: len(data)])


def _header_field(rnd: random.Random, data: bytes) -> bytes:
    raw = bytearray(data)
    name = rnd.choice([n for n, *_ in HEADER_DTYPE.descr if n not in ("magic", "checksum")])
    off = HEADER_DTYPE.fields[name][1]  # type: ignore[index]
    width = HEADER_DTYPE[name].itemsize
    raw[off : off + width] = (rnd.choice(EDGE) % (1 << (8 * width))).to_bytes(width, "little")
    return _resign(raw)


def _record_field(rnd: random.Random, data: bytes) -> bytes:
    raw = bytearray(data)
    count = int(np.frombuffer(raw, HEADER_DTYPE, count=1)["num_members"][0])
    if not count:
        return data
    i = rnd.randrange(count)
    name = rnd.choice(["sample", "field", "offset", "size"])
    base = HEADER_DTYPE.itemsize + i * MEMBER_DTYPE.itemsize + MEMBER_DTYPE.fields[name][1]  # type: ignore[index]
    width = MEMBER_DTYPE[name].itemsize
    value = rnd.choice([*EDGE, rnd.randrange(1 << 20)])
    raw[base : base + width] = (value % (1 << (8 * width))).to_bytes(width, "little")
    return _resign(raw)


def _schema_at(raw: bytes | bytearray) -> tuple[int, int, int]:
    """(offset of the field schema records, number of fields, number of members) of a v2 or v3 index."""
    head = np.frombuffer(bytes(raw[: HEADER_DTYPE.itemsize]), HEADER_DTYPE, count=1)[0]
    members, fields = int(head["num_members"]), int(head["num_fields"])
    at = HEADER_DTYPE.itemsize + members * MEMBER_DTYPE.itemsize + int(head["keys_bytes"]) + int(head["fields_bytes"])
    return at, fields, members


def _schema_field(rnd: random.Random, data: bytes) -> bytes:
    """A field schema record's kind, ndim, dtype or shape set to an edge value, or a member's aux."""
    raw = bytearray(data)
    at, fields, members = _schema_at(raw)
    if rnd.random() < 0.6 and fields:
        base = at + rnd.randrange(fields) * FIELD_DTYPE.itemsize
        name = rnd.choice(["kind", "ndim", "flags", "dtype", "shape"])
        off, width = FIELD_DTYPE.fields[name][1], FIELD_DTYPE[name].itemsize  # type: ignore[index]
        if name == "dtype":
            value = rnd.choice([b"O", b"<f4", b"|u1", b"<i8", b"S0", b"V8", b"f4,i4", b"(2,)f4", b"<M8[D]",
                                b"<U99999999999", rnd.randbytes(12)])
            raw[base + off : base + off + width] = value[:width].ljust(width, b"\0")
        elif name == "shape":
            dim = rnd.randrange(8) * 8
            raw[base + off + dim : base + off + dim + 8] = (rnd.choice([*EDGE, 3, 4, 5]) % (1 << 64)).to_bytes(8, "little")
        else:
            raw[base + off : base + off + width] = (rnd.choice([0, 1, 2, 3, 4, 8, 9, 255]) % (1 << (8 * width))).to_bytes(width, "little")
    elif members:
        base = at + fields * FIELD_DTYPE.itemsize + rnd.randrange(members) * 8
        value = rnd.choice([*EDGE, -1, -(1 << 63), 10, 128, rnd.randrange(1 << 12)])
        raw[base : base + 8] = (value % (1 << 64)).to_bytes(8, "little")
    return _resign(raw)


INDEX_MUTATIONS = [_flip, _truncate, _extend, _overwrite, _header_field, _header_field, _record_field, _record_field,
                   _record_field, _schema_field, _schema_field, _schema_field]
SHARD_MUTATIONS = [_flip, _truncate, _extend, _overwrite]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, bytes, bytes, Path]:
    """(shard, index, manifest) bytes of a small aligned dataset, and a scratch folder."""
    root = tmp_path_factory.mktemp("fuzz")
    src = root / "src"
    rnd = random.Random(7)
    for i in range(12):
        d = src / ("a" if i % 2 else "b")
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{i:04d}.jpg").write_bytes(rnd.randbytes(rnd.randint(0, 3000)))
        (d / f"{i:04d}.json").write_bytes(b'{"i": %d}' % i)
        (d / f"{i:04d}.cls").write_bytes(b"%d" % (i % 3))
        (d / f"{i:04d}.emb.npy").write_bytes(_npy(np.arange(rnd.randint(3, 4) if i == 5 else 3, dtype=np.float32)))
        (d / f"{i:04d}.vec.npy").write_bytes(_npy(np.full((2, 2), i, dtype=np.int16)))
        (d / f"{i:04d}.f32").write_bytes(bytes(16))
    manifest = pack(src, root / "ds", align=4096)
    info = manifest.shards[0]
    return (
        (root / "ds" / info.name).read_bytes(),
        (root / "ds" / info.index).read_bytes(),
        (root / "ds" / MANIFEST_NAME).read_bytes(),
        root,
    )


def _npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def _open_and_read(shard: bytes, index: bytes) -> None:
    idx = ShardIndex.from_bytes(index, shard_size=len(shard), shard="fuzz.tar")
    for i in range(idx.num_samples):
        idx.sample_fields(i, shard, verify=True)
    for name, info in idx.schema.items():  # what a loader does with a schema it is handed
        if info.kind == "label":
            idx.label_column(name)
        elif info.kind in ("raw", "npy"):
            assert info.nbytes is not None and info.nbytes <= len(shard)
            rows = np.empty((idx.num_samples, *(info.shape or ())), info.dtype)
            flat = rows.reshape(-1).view(np.uint8)
            for i, r in enumerate(idx.field_rows(name).tolist()):
                start = int(idx.members["offset"][r]) + int(idx.aux[r])
                flat[i * info.nbytes : (i + 1) * info.nbytes] = np.frombuffer(shard, np.uint8, info.nbytes, start)


def _only_feedline_errors(case: Callable[[], object], what: str) -> bool:
    try:
        case()
    except FeedlineError:
        return True
    except Exception as e:  # the assertion below names the case and the escaped exception
        raise AssertionError(f"{what}: escaped {type(e).__name__}: {e}") from e
    return False


def _run(corpus: tuple[bytes, bytes, bytes, Path], cases: int, seed: int) -> int:
    shard, index, manifest, _ = corpus
    rnd = random.Random(seed)
    caught = 0
    for n in range(cases):
        kind = rnd.random()
        if kind < 0.6:
            mutate = rnd.choice(INDEX_MUTATIONS)
            bad_index = mutate(rnd, index)
            caught += _only_feedline_errors(partial(_open_and_read, shard, bad_index), f"case {n}: index {mutate.__name__}")
        elif kind < 0.9:
            mutate = rnd.choice(SHARD_MUTATIONS)
            bad_shard = mutate(rnd, shard)
            caught += _only_feedline_errors(partial(_open_and_read, bad_shard, index), f"case {n}: shard {mutate.__name__}")
        else:
            mutate = rnd.choice(SHARD_MUTATIONS)
            bad = mutate(rnd, manifest)
            caught += _only_feedline_errors(partial(parse_manifest, bad), f"case {n}: manifest {mutate.__name__}")
    return caught


@pytest.mark.timeout(60)
def test_fuzz_reader_default(corpus: tuple[bytes, bytes, bytes, Path]) -> None:
    caught = _run(corpus, 5000, seed=1)
    assert caught > 3500  # nearly every mutation is detected, the rest are harmless


def _adopt_mutated(corpus: tuple[bytes, bytes, bytes, Path], cases: int, seed: int) -> None:
    shard, _, _, root = corpus
    rnd = random.Random(seed)
    path = root / "mut.tar"
    for n in range(cases):
        mutate = rnd.choice(SHARD_MUTATIONS)
        path.write_bytes(mutate(rnd, shard))
        _only_feedline_errors(partial(index_tar, path, root / "mut.tar.idx"), f"case {n}: tar {mutate.__name__}")


@pytest.mark.timeout(60)
def test_fuzz_adopting_mutated_tars(corpus: tuple[bytes, bytes, bytes, Path]) -> None:
    _adopt_mutated(corpus, 100, seed=2)


def test_untouched_corpus_opens(corpus: tuple[bytes, bytes, bytes, Path]) -> None:
    shard, index, manifest, _ = corpus
    _open_and_read(shard, index)
    assert parse_manifest(manifest).num_samples == 12
    assert json.loads(manifest)["align"] == 4096


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("seed", range(10))
def test_fuzz_reader_many(corpus: tuple[bytes, bytes, bytes, Path], seed: int) -> None:
    _run(corpus, 50_000, seed=100 + seed)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_fuzz_adopting_many(corpus: tuple[bytes, bytes, bytes, Path]) -> None:
    _adopt_mutated(corpus, 5000, seed=3)
