"""Header, padding and alignment arithmetic (hypothesis) and the WebDataset naming rule."""

from __future__ import annotations

import io
import tarfile

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from feedline.errors import ConfigError
from feedline.format._tar import (
    BLOCK,
    _fast_header,
    _info,
    check_member_name,
    header_upper_bound,
    member_header,
    padding,
    round_up,
    split_name,
)

names = st.one_of(
    st.from_regex(r"[a-z0-9_]{1,12}(/[a-z0-9_]{1,12}){0,2}\.[a-z0-9]{1,5}(\.[a-z]{1,4})?", fullmatch=True),
    st.from_regex(r"[a-z]{90,160}\.jpg", fullmatch=True),
    st.from_regex(r"[éüß水]{1,30}\.json", fullmatch=True),
)


@settings(max_examples=80, deadline=None)
@given(
    name=names,
    size=st.integers(0, 1 << 40),
    pos=st.integers(0, 1 << 24).map(lambda x: x * BLOCK),
    align=st.sampled_from([0, 512, 1024, 4096, 8192, 65536]),
)
def test_header_aligns_payload_and_stays_within_bound(name: str, size: int, pos: int, align: int) -> None:
    header = member_header(name, size, pos, align)
    assert len(header) % BLOCK == 0
    if align:
        assert (pos + len(header)) % align == 0
    assert len(header) <= header_upper_bound(name, size, align)
    # the header parses back to the same member with the payload right after it
    with tarfile.open(fileobj=io.BytesIO(header + b"\0" * (2 * BLOCK)), mode="r:") as tar:
        info = tar.next()
    assert info is not None
    assert info.name == name and info.size == size
    assert info.offset_data == len(header)


@given(n=st.integers(0, 1 << 50), m=st.sampled_from([1, 512, 4096]))
def test_round_up_and_padding(n: int, m: int) -> None:
    r = round_up(n, m)
    assert r % m == 0 and n <= r < n + m
    assert (n + len(padding(n))) % BLOCK == 0 and len(padding(n)) < BLOCK


@pytest.mark.parametrize(
    ("name", "parts"),
    [
        ("000123.cam0.jpg", ("000123", "cam0.jpg")),
        ("a/b.c/000123.json", ("a/b.c/000123", "json")),
        ("x.y", ("x", "y")),
        ("README", None),
        (".hidden.txt", None),
        ("dir/", None),
    ],
)
def test_split_name_follows_webdataset(name: str, parts: tuple[str, str] | None) -> None:
    assert split_name(name) == parts


@pytest.mark.parametrize(("key", "field"), [("", "jpg"), ("a", ""), ("a.b", "jpg"), ("../a", "jpg"), ("/abs", "jpg"), ("a", "x/y"), ("a\nb", "jpg")])
def test_check_member_name_rejects_names_tar_and_webdataset_disagree_on(key: str, field: str) -> None:
    with pytest.raises(ConfigError) as e:
        check_member_name(key, field)
    assert e.value.fix


@settings(max_examples=150, deadline=None)
@given(
    name=st.text(st.characters(min_codepoint=1, max_codepoint=0x7F), min_size=1, max_size=110),
    size=st.one_of(st.integers(0, 1 << 20), st.integers(0, 8**11 + 5)),
)
def test_fast_headers_are_byte_identical_to_tarfile(name: str, size: int) -> None:
    fast = _fast_header(name, size)
    slow = _info(name, size).tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
    if fast is None:
        assert len(name) > 100 or size >= 8**11
    else:
        assert fast == slow
    assert member_header(name, size) == slow


@settings(max_examples=300, deadline=None)
@given(st.text(st.sampled_from("ab./_é"), min_size=1, max_size=16))
def test_split_name_agrees_with_webdataset(name: str) -> None:
    from webdataset.tariterators import base_plus_ext

    # hidden last parts differ on purpose: WebDataset would make "a/b/.c" key "a/b/"
    assume(not name.startswith(".") and "/." not in name)
    key, ext = base_plus_ext(name)
    expected = (key, ext) if key is not None and ext else None
    assert split_name(name) == expected


@settings(max_examples=400, deadline=None)
@given(key=st.text(st.sampled_from("ab./\n"), max_size=8), field=st.text(st.sampled_from("ab./\n"), max_size=6))
def test_check_member_name_accepts_exactly_the_names_that_split_back(key: str, field: str) -> None:
    name = f"{key}.{field}"
    reference = (
        bool(key) and bool(field) and "\n" not in name and not name.startswith("/")
        and ".." not in key.split("/") and split_name(name) == (key, field)
    )
    try:
        check_member_name(key, field)
    except ConfigError:
        assert not reference
    else:
        assert reference
