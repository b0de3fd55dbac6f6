"""Layout arithmetic (hypothesis): payloads are aligned (large ones to 4096, small ones packed at 64), in
order, never overlap, and round-trip; many small tensors cost about their size, through O_DIRECT too."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import torch
from ckstate import assert_same
from hypothesis import given, settings
from hypothesis import strategies as st

from feedline.checkpoint import Checkpointer, load
from feedline.checkpoint._layout import SMALL_ALIGN, make_layout
from feedline.io._buffers import PAGE
from feedline.io._posix import probe_direct

DTYPES = ["uint8", "int16", "float32", "float64", "complex64", "bool"]
TORCH_DTYPES = [torch.float16, torch.bfloat16, torch.int32, torch.bool, torch.float64]

shapes = st.lists(st.integers(0, 70), min_size=0, max_size=3).map(tuple)
np_leaf = st.builds(lambda d, s: np.ones(s, dtype=d), st.sampled_from(DTYPES), shapes)
torch_leaf = st.builds(lambda d, s: torch.ones(s, dtype=d), st.sampled_from(TORCH_DTYPES), shapes)
plain = st.one_of(st.none(), st.booleans(), st.integers(-2**62, 2**62), st.floats(allow_nan=False),
                  st.text(max_size=5))
states = st.recursive(st.one_of(np_leaf, torch_leaf, plain),
                      lambda kids: st.one_of(st.lists(kids, max_size=4),
                                             st.dictionaries(st.one_of(st.text(max_size=4), st.integers(0, 9)),
                                                             kids, max_size=4)),
                      max_leaves=12)


@given(st.lists(st.one_of(np_leaf, torch_leaf), max_size=12))
def test_offsets_are_aligned_ordered_and_disjoint(leaves: list) -> None:
    layout = make_layout(leaves)
    end = 0
    for e in layout.entries:
        align = PAGE if e.nbytes >= PAGE else SMALL_ALIGN
        assert e.offset % align == 0 and e.offset >= end and e.offset - end < align
        end = e.offset + e.nbytes
    assert layout.data_bytes == end


@settings(max_examples=25, deadline=None)
@given(states)
def test_any_nested_state_round_trips(state: object) -> None:
    with tempfile.TemporaryDirectory() as d, Checkpointer(Path(d), io="buffered", durable=False) as ck:
        ck.save(1, {"s": state})
        assert_same({"s": state}, ck.load())


def test_small_tensors_are_packed_and_round_trip_through_direct_writes(tmp_path: Path) -> None:
    # 3000 tensors of 1-64 floats (as a model with many biases and norms has): each used to take a page
    gen = torch.Generator().manual_seed(0)
    sizes = torch.randint(1, 65, (3000,), generator=gen).tolist()
    state = {"small": [torch.randn(n, generator=gen) for n in sizes], "big": torch.randn(5000, generator=gen),
             "c128": np.full(3, 1 + 2j), "after": torch.arange(7, dtype=torch.int16)}
    payload = sum(4 * n for n in sizes) + 20000 + 48 + 14
    layout = make_layout(state)
    assert layout.data_bytes < payload + 3000 * SMALL_ALIGN + 2 * PAGE < 3000 * PAGE // 10
    with Checkpointer(tmp_path / "ck", io="direct") as ck:  # O_DIRECT: whole pages direct, the tail buffered
        ck.save(1, state)
        ck.wait()
        direct_ok, _ = probe_direct(str(tmp_path))
        assert ck._writer.fallback_reason is None or not direct_ok
    (data,) = (tmp_path / "ck").glob("*.bin")
    assert data.stat().st_size == layout.data_bytes
    back = load(tmp_path / "ck")
    assert_same(state, back)
    assert all(t.data_ptr() % SMALL_ALIGN == 0 for t in back["small"])


def test_a_version_1_checkpoint_with_page_aligned_payloads_still_loads(tmp_path: Path) -> None:
    state = {"w": torch.randn(2048), "b": torch.randn(3), "x": np.arange(5000, dtype=np.int32)}
    with Checkpointer(tmp_path, io="buffered", durable=False) as ck:
        ck.save(1, state)
    # what version 1 wrote: the same header with every payload on a page boundary (b at 8192, x at 12288)
    header = json.loads((tmp_path / "step-0000000001.json").read_text())
    (data,) = tmp_path.glob("*.bin")
    raw = data.read_bytes()
    old = bytearray(12288 + 20000)
    for t in header["tensors"]:
        start = {"w": 0, "b": 8192, "x": 12288}[t["name"]]
        old[start : start + t["nbytes"]] = raw[t["offset"] : t["offset"] + t["nbytes"]]
        t["offset"] = start
    data.write_bytes(bytes(old))
    header["version"], header["data_bytes"] = 1, len(old)
    del header["header_xxh3"]  # version 1 wrote no checksum of the header itself
    (tmp_path / "step-0000000001.json").write_text(json.dumps(header))
    assert_same(state, load(tmp_path))


def test_a_tensor_reached_twice_is_stored_once_and_loads_shared(tmp_path: Path) -> None:
    # tied weights: state_dict() lists the embedding and the head that shares it (before: stored twice,
    # loaded as two tensors)
    emb = torch.nn.Embedding(300, 16)
    head = torch.nn.Linear(16, 300, bias=False)
    head.weight = emb.weight
    arr = np.arange(2000, dtype=np.float32)
    base = torch.arange(64.0)
    state = {"emb": emb.state_dict(), "head": head.state_dict(), "a": arr, "a_again": arr,
             "view": base[8:40], "same_view": base[8:40], "other_view": base[8:41], "base": base}
    layout = make_layout(state)
    names = {e.name: e for e in layout.entries}
    assert names["head/weight"].offset == names["emb/weight"].offset and names["a_again"].offset == names["a"].offset
    assert names["same_view"].offset == names["view"].offset
    assert len({names[k].offset for k in ("view", "other_view", "base")}) == 3  # overlapping, not equal: each
    assert layout.data_bytes < 300 * 16 * 4 + 2000 * 4 + 3 * PAGE  # the embedding and the array once
    with Checkpointer(tmp_path, io="buffered", durable=False) as ck:
        ck.save(1, state)
        back = ck.load()
        assert_same(state, back)
        assert back["head"]["weight"] is back["emb"]["weight"] and back["a_again"] is back["a"]
        assert back["other_view"].data_ptr() != back["view"].data_ptr()
        kept = ck.load(into={"emb": torch.nn.Embedding(300, 16).state_dict()}, copy=True)
        assert kept["a_again"] is kept["a"] and torch.equal(kept["head"]["weight"], emb.weight)
        fresh_emb = torch.nn.Embedding(300, 16)
        fresh_head = torch.nn.Linear(16, 300, bias=False)
        fresh_head.weight = fresh_emb.weight
        ck.load(into={"emb": fresh_emb.state_dict(), "head": fresh_head.state_dict()})
        assert torch.equal(fresh_head.weight, emb.weight) and fresh_head.weight is fresh_emb.weight


@settings(max_examples=25, deadline=None)
@given(st.lists(st.one_of(np_leaf, torch_leaf), min_size=1, max_size=5), st.lists(st.integers(0, 4), max_size=10))
def test_repeated_leaves_round_trip_shared(pool: list, picks: list[int]) -> None:
    state = [pool[i % len(pool)] for i in picks]
    with tempfile.TemporaryDirectory() as d, Checkpointer(Path(d), io="buffered", durable=False) as ck:
        ck.save(1, state)
        back = ck.load()
    assert_same(state, back)
    for i, a in enumerate(state):
        for j in range(i):
            same_leaf = state[j] is a and (a.nbytes if isinstance(a, np.ndarray) else a.numel()) > 0
            assert (back[j] is back[i]) == same_leaf, (i, j)


def test_lazy_conjugate_and_negative_views_of_one_tensor_are_stored_apart(tmp_path: Path) -> None:
    # x.conj() shares x's memory, address, strides, dtype and shape but shows other values
    x = torch.randn(4, dtype=torch.complex64)
    state = {"x": x, "conj": x.conj(), "neg": torch._neg_view(x), "x_again": x}
    with Checkpointer(tmp_path, io="buffered", durable=False) as ck:
        ck.save(1, state)
        back = ck.load()
    assert torch.equal(back["conj"], x.conj().resolve_conj()) and torch.equal(back["neg"], -x)
    assert torch.equal(back["x"], x) and back["x_again"] is back["x"]


def test_a_zero_size_leaf_twice_loads_as_two(tmp_path: Path) -> None:
    # found by the explore profile: zero-size leaves have no bytes to share, on save or on load
    empty = np.zeros(0, dtype=np.uint8)
    with Checkpointer(tmp_path, io="buffered", durable=False) as ck:
        ck.save(1, [empty, empty])
        back = ck.load()
    assert back[0] is not back[1] and back[0].shape == (0,)
