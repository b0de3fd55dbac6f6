"""The read planner's arithmetic, checked as invariants with hypothesis."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from feedline.errors import AlignmentError
from feedline.io.planner import Window, align_down, align_up, coalesce, validate_direct

ALIGN = 4096


@st.composite
def layouts(draw: st.DrawFn) -> tuple[list[tuple[int, int]], int, int, int]:
    """Sorted (possibly overlapping/repeated) extents inside a file, and planner bounds."""
    n = draw(st.integers(0, 40))
    pos = 0
    extents = []
    for _ in range(n):
        pos += draw(st.one_of(st.just(0), st.integers(0, 200_000)))
        size = draw(st.one_of(st.integers(0, 3000), st.integers(0, 300_000)))
        extents.append((pos, pos + size))
        if draw(st.booleans()) and extents:
            extents.append(extents[-1])  # the same sample asked for twice
    file_size = max((e for _, e in extents), default=0) + draw(st.integers(0, 10_000))
    max_window = ALIGN * draw(st.integers(1, 64))
    max_gap = draw(st.integers(0, 100_000))
    return extents, file_size, max_window, max_gap


def _check(windows: list[Window], extents: list[tuple[int, int]], file_size: int, max_window: int, direct: bool) -> None:
    covered = [i for w in windows for i in range(w.lo, w.hi)]
    assert covered == list(range(len(extents)))  # each extent in exactly one window, in order
    for w in windows:
        assert w.hi > w.lo
        assert w.start % ALIGN == 0
        assert w.start >= 0 and w.end <= file_size
        if direct:
            assert w.size % ALIGN == 0
            assert w.length == min(w.start + w.size, file_size) - w.start
            assert w.size - w.length < ALIGN or w.start + w.size > file_size
        else:
            assert w.size == w.length
            assert w.end == min(align_up(max(e for _, e in extents[w.lo : w.hi]), ALIGN), file_size)
        for off, end in extents[w.lo : w.hi]:
            assert w.start <= off and end <= w.end
        lo_end = align_up(max(e for _, e in extents[w.lo : w.hi]), ALIGN)
        if w.hi - w.lo > 1 and len({extents[i] for i in range(w.lo, w.hi)}) > 1:
            assert lo_end - w.start <= max_window  # only a lone extent may exceed the bound


@settings(max_examples=80, deadline=None)
@given(layouts(), st.booleans())
def test_windows_cover_align_and_bound(layout: tuple[list[tuple[int, int]], int, int, int], direct: bool) -> None:
    extents, file_size, max_window, max_gap = layout
    windows = coalesce(extents, file_size=file_size, max_window=max_window, max_gap=max_gap, direct=direct)
    _check(windows, extents, file_size, max_window, direct)


@settings(max_examples=50, deadline=None)
@given(layouts())
def test_gaps_larger_than_max_gap_split_windows(layout: tuple[list[tuple[int, int]], int, int, int]) -> None:
    extents, file_size, max_window, max_gap = layout
    windows = coalesce(extents, file_size=file_size, max_window=max_window, max_gap=max_gap)
    for w in windows:
        reach = extents[w.lo][1]
        for off, end in extents[w.lo + 1 : w.hi]:
            assert off - reach <= max_gap
            reach = max(reach, end)


def test_neighbours_merge_and_a_big_member_stands_alone() -> None:
    mib = 1 << 20
    extents = [(512, 1000), (1536, 5000), (20 * mib, 30 * mib), (30 * mib + 512, 30 * mib + 600)]
    windows = coalesce(extents, file_size=31 * mib, max_window=8 * mib, max_gap=64 * 1024)
    assert [(w.lo, w.hi) for w in windows] == [(0, 2), (2, 3), (3, 4)]
    assert windows[0] == Window(0, 8192, 8192, 0, 2)
    assert windows[1].size == 10 * mib  # bigger than max_window: a single member
    direct = coalesce([(0, 10)], file_size=10, direct=True)
    assert direct == [Window(0, 4096, 10, 0, 1)]  # final partial block: size rounded, length clamped


def test_bad_arguments_name_the_parameter() -> None:
    with pytest.raises(ValueError, match="align"):
        coalesce([], file_size=0, align=3000)
    with pytest.raises(ValueError, match="max_window"):
        coalesce([], file_size=0, max_window=5000)
    with pytest.raises(ValueError, match="max_gap"):
        coalesce([], file_size=0, max_gap=-1)
    with pytest.raises(ValueError, match="sorted"):
        coalesce([(10, 20), (0, 5)], file_size=100)
    with pytest.raises(ValueError, match="outside the file"):
        coalesce([(0, 200)], file_size=100)


def test_validate_direct_uses_the_gds_rule_and_names_the_field() -> None:
    validate_direct(Window(8192, 4096 * 10, 4096 * 10, 0, 1), 16384)
    with pytest.raises(AlignmentError, match="buffer_address") as err:
        validate_direct(Window(8192, 4096, 4096, 0, 1), 16385, shard="s.tar")
    assert err.value.shard == "s.tar"
    with pytest.raises(AlignmentError, match="file_offset"):
        validate_direct(Window(100, 4096, 4096, 0, 1), 0)
    with pytest.raises(AlignmentError, match="size_bytes"):
        validate_direct(Window(0, 100, 100, 0, 1), 0)


@given(st.integers(0, 1 << 40), st.sampled_from([512, 4096, 1 << 20]))
def test_align_helpers(value: int, align: int) -> None:
    assert align_down(value, align) % align == 0 <= value - align_down(value, align) < align
    assert align_up(value, align) % align == 0 <= align_up(value, align) - value < align
