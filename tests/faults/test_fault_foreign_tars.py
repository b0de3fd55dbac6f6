"""`feedline index` of tars made by other tools, with the tar features they use.

Adopted, each sample read back equal to what ``tarfile`` extracts: GNU long names,
pax long names, a pax global header, ustar name prefixes, folder entries, ``./``
prefixes, names that are not UTF-8, NFC/NFD and case twins, empty members.
Refused, naming shard, key and field and saying what the member is: hard links,
symbolic links, FIFOs, devices, sparse files (before: "is not a regular file" with
no key, field or kind; a hard link is what `tar` writes for a file linked twice).
"""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

import feedline
from feedline.errors import FormatError
from feedline.format import index_tars

Fill = Callable[[tarfile.TarFile], None]


def _add(tar: tarfile.TarFile, name: str, data: bytes = b"x", **attrs: object) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    for k, v in attrs.items():
        setattr(info, k, v)
    tar.addfile(info, io.BytesIO(data) if info.isreg() else None)


def _tar(path: Path, fmt: int, fill: Fill) -> Path:
    path.parent.mkdir(parents=True)
    with tarfile.open(path, "w", format=fmt, encoding="utf-8", errors="surrogateescape") as tar:
        fill(tar)
    return path


_LONG = "d/" + "x" * 150 + "/"
ADOPTED: dict[str, tuple[int, Fill]] = {
    "gnu-longname": (tarfile.GNU_FORMAT, lambda t: (_add(t, _LONG + "s1.bin", b"a"), _add(t, _LONG + "s2.bin", b"b"))),
    "pax-longname": (tarfile.PAX_FORMAT, lambda t: _add(t, "y" * 200 + "/s1.bin", b"a")),
    "pax-global": (tarfile.PAX_FORMAT, lambda t: _add(t, "s1.bin", b"a")),
    "ustar-prefix": (tarfile.USTAR_FORMAT, lambda t: _add(t, "p" * 90 + "/" + "q" * 60 + "/s1.bin", b"a")),
    "folder-entries": (tarfile.PAX_FORMAT, lambda t: (_add(t, "d", b"", type=tarfile.DIRTYPE),
                                                      _add(t, "d/s1.bin", b"a"))),
    "dot-slash": (tarfile.PAX_FORMAT, lambda t: (_add(t, "./s1.bin", b"a"), _add(t, "./s2.bin", b"b"))),
    "not-utf8-pax": (tarfile.PAX_FORMAT, lambda t: _add(t, "s\udcff1.bin", b"a")),
    "not-utf8-gnu": (tarfile.GNU_FORMAT, lambda t: _add(t, "s\udcff1.bin", b"a")),
    "nfc-nfd-twins": (tarfile.PAX_FORMAT, lambda t: (_add(t, "caf\u00e9.bin", b"nfc"), _add(t, "cafe\u0301.bin", b"nfd"))),
    "case-twins": (tarfile.PAX_FORMAT, lambda t: (_add(t, "A.bin", b"A"), _add(t, "a.bin", b"a"))),
    "empty-member": (tarfile.PAX_FORMAT, lambda t: (_add(t, "s1.bin", b""), _add(t, "s2.bin", b"b"))),
    "tab-in-name": (tarfile.PAX_FORMAT, lambda t: _add(t, "s\t1.bin", b"a")),
}


@pytest.mark.parametrize("case", list(ADOPTED))
def test_foreign_tar_features_are_adopted_as_tarfile_reads_them(tmp_path: Path, case: str) -> None:
    fmt, fill = ADOPTED[case]
    path = _tar(tmp_path / "ds" / "a.tar", fmt, fill)
    if case == "pax-global":  # a global header ahead of the members
        data = path.read_bytes()
        with tarfile.open(path, "w", format=tarfile.PAX_FORMAT, pax_headers={"comment": "global"}) as tar:
            _add(tar, "s1.bin", b"a")
        assert path.read_bytes() != data
    with tarfile.open(path, encoding="utf-8", errors="surrogateescape") as tar:
        want = [(m.name.rsplit(".", 1)[0], tar.extractfile(m).read())  # type: ignore[union-attr]
                for m in tar if m.isreg()]
    index_tars([path])
    ds = feedline.open_dataset(path.parent, verify=True)
    assert [(ds[i]["__key__"], ds[i]["bin"].tobytes()) for i in range(len(ds))] == want


def _sparse_tar(path: Path) -> None:
    src = path.parent / "src"
    src.mkdir(parents=True)
    with open(src / "s1.bin", "wb") as f:
        f.truncate(1 << 20)
        f.seek(500_000)
        f.write(b"x")
    path.parent.mkdir(exist_ok=True)
    subprocess.run(["tar", "--sparse", "--format=gnu", "-cf", str(path), "-C", str(src), "s1.bin"], check=True)


REFUSED: dict[str, tuple[Callable[[Path], None], str]] = {
    "hard-link": (lambda p: _tar(p, tarfile.PAX_FORMAT, lambda t: (
        _add(t, "s1.bin", b"a"), _add(t, "s2.bin", b"", type=tarfile.LNKTYPE, linkname="s1.bin"))),
        "a hard link to 's1.bin'"),
    "symlink": (lambda p: _tar(p, tarfile.PAX_FORMAT, lambda t: (
        _add(t, "s1.bin", b"a"), _add(t, "s2.bin", b"", type=tarfile.SYMTYPE, linkname="/etc/passwd"))),
        "a symbolic link to '/etc/passwd'"),
    "fifo": (lambda p: _tar(p, tarfile.PAX_FORMAT, lambda t: (
        _add(t, "s1.bin", b"a"), _add(t, "s2.bin", b"", type=tarfile.FIFOTYPE))), "a FIFO"),
    "device": (lambda p: _tar(p, tarfile.PAX_FORMAT, lambda t: (
        _add(t, "s1.bin", b"a"), _add(t, "s2.bin", b"", type=tarfile.CHRTYPE, devmajor=1, devminor=5))),
        "a character device"),
    "gnu-sparse": (_sparse_tar, "a sparse file"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_members_that_are_not_plain_files_are_refused_naming_key_field_and_kind(tmp_path: Path, case: str) -> None:
    make, says = REFUSED[case]
    if case == "gnu-sparse" and shutil.which("tar") is None:
        pytest.skip("needs GNU tar")
    path = tmp_path / "ds" / "a.tar"
    make(path)
    with pytest.raises(FormatError, match=says) as e:
        index_tars([path])
    key = "s1" if case == "gnu-sparse" else "s2"
    assert e.value.place == {"shard": "a.tar", "key": key, "field": "bin"}
    assert not (path.parent / "manifest.json").exists()
