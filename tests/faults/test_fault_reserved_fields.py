"""Files whose field name starts with ``__``: such names are a sample's own entries
(``__key__``, ``__url__``), and the reader, the decoders and collate pass them through as
metadata. A clip folder holding a file named ``__key__`` (``pack --key folder``), a
WebDataset-named ``s1.__key__`` or a foreign tar with that member replaced the sample's key
with the file's bytes (the loader's keys became ``<memory at 0x...>``). Pack skips such
files and says why; ``index`` refuses the tar naming shard, key and field.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from feedline.errors import FormatError
from feedline.format import PackWarning, SourceRules, index_tars, pack
from feedline.io import open_dataset


def _keys(root: Path) -> list[object]:
    ds = open_dataset(root)
    return [ds[i]["__key__"] for i in range(len(ds))]


@pytest.mark.parametrize(("rule", "files"), [
    ("folder", {"clip1/__key__": b"zz", "clip1/a.txt": b"a", "clip2/__url__": b"u", "clip2/a.txt": b"b"}),
    ("webdataset", {"clip1.__key__": b"zz", "clip1.txt": b"a", "clip2.__url__": b"u", "clip2.txt": b"b"}),
])
def test_pack_skips_files_that_would_be_a_samples_own_entries(tmp_path: Path, rule: str,
                                                              files: dict[str, bytes]) -> None:
    for name, data in files.items():
        (tmp_path / "src" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "src" / name).write_bytes(data)
    with pytest.warns(PackWarning, match="starts with '__'"):
        pack([tmp_path / "src"], tmp_path / "ds", rules=SourceRules(key=rule))
    assert _keys(tmp_path / "ds") == ["clip1", "clip2"]  # before: b"zz" for clip1
    ds = open_dataset(tmp_path / "ds")
    assert [sorted(ds[i]) for i in range(2)] == [["__key__", "a.txt" if rule == "folder" else "txt"]] * 2


def test_index_refuses_a_tar_member_named_as_a_samples_key(tmp_path: Path) -> None:
    path = tmp_path / "x.tar"
    with tarfile.open(path, "w") as tar:
        for name, data in (("s1.txt", b"a"), ("s1.__key__", b"zz"), ("s2.txt", b"b")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with pytest.raises(FormatError, match="starting with '__'") as err:
        index_tars([path])
    assert (err.value.shard, err.value.key, err.value.field) == ("x.tar", "s1", "__key__")
    assert not (tmp_path / "manifest.json").exists()
