"""Layout arithmetic (hypothesis): payloads are 4096-aligned, in order, never overlap, and round-trip."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import torch
from ckstate import assert_same
from hypothesis import given, settings
from hypothesis import strategies as st

from feedline.checkpoint import Checkpointer
from feedline.checkpoint._layout import make_layout

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
        assert e.offset % 4096 == 0 and e.offset >= end and e.offset - end < 4096
        end = e.offset + e.nbytes
    assert layout.data_bytes == end


@settings(max_examples=25, deadline=None)
@given(states)
def test_any_nested_state_round_trips(state: object) -> None:
    with tempfile.TemporaryDirectory() as d, Checkpointer(Path(d), io="buffered", durable=False) as ck:
        ck.save(1, {"s": state})
        assert_same({"s": state}, ck.load())
