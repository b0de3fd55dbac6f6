"""Unlucky timing: two writers in one dataset folder, and source files that change
between pack's listing and its read (deleted, replaced by a FIFO or a folder,
grown), or that are not files at all (a list file naming a FIFO or ``/dev/zero``).

Before: two ``feedline pack`` runs into one ``--out`` removed each other's temp
shards and renamed their shards over each other's; one exited 0 with a manifest
whose checksums were the other's shards' (2 of 4 runs; ``verify`` exit 1). A
FIFO in a source's place blocked pack forever; ``/dev/zero`` was read until
memory ran out.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import feedline
from feedline.errors import FormatError, ReadError, WriteError
from feedline.format import index_tars, pack
from feedline.format._lock import DATASET_LOCK
from feedline.format._pack import STREAM_AT

ROOT = Path(__file__).resolve().parents[2]
_HOLDER = """
import sys
from pathlib import Path
from feedline.format._lock import hold_dataset
fd = hold_dataset(Path(sys.argv[1]))
print("held", flush=True)
sys.stdin.read()  # hold until the test closes our stdin (or kills us)
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT / "src")}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "feedline", *args], env=_env(),
                          capture_output=True, text=True, timeout=100)


def _source(folder: Path, n: int = 6, size: int = 3000) -> Path:
    folder.mkdir(parents=True)
    for i in range(n):
        (folder / f"k{i}.bin").write_bytes(bytes([i]) * size)
    return folder


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """Another process holding the write lock of ``tmp_path / "out"``."""
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(out)], env=_env(), text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    try:
        yield proc, out
    finally:
        proc.kill()
        proc.wait()


def test_a_second_pack_or_index_into_a_folder_being_written_is_refused(
        tmp_path: Path, holder: tuple[subprocess.Popen[str], Path]) -> None:
    proc, out = holder
    src = _source(tmp_path / "src")
    with pytest.raises(WriteError, match=f"another feedline pack or index \\(pid {proc.pid}\\) is writing into") as e:
        pack(src, out)
    assert e.value.place["path"] == str(out) and e.value.fix
    done = tmp_path / "done"
    pack(src, done)
    with pytest.raises(WriteError, match=f"pid {proc.pid}"):
        index_tars(sorted(done.glob("*.tar")), out)
    r = _cli("pack", str(src), "--out", str(out))  # a runtime condition: exit 1, one line, no traceback
    assert r.returncode == 1 and "another feedline pack or index" in r.stderr and "Traceback" not in r.stderr
    assert not (out / "manifest.json").exists()


def test_the_lock_of_a_killed_writer_is_free(tmp_path: Path, holder: tuple[subprocess.Popen[str], Path]) -> None:
    proc, out = holder
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert (out / DATASET_LOCK).exists()  # the file stays; its lock went with the process
    pack(_source(tmp_path / "src"), out)
    assert len(feedline.open_dataset(out)) == 6
    assert not (out / DATASET_LOCK).exists()  # a writer that ends removes it: the folder holds the dataset only


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_two_packs_at_once_into_one_folder_leave_one_whole_dataset(tmp_path: Path) -> None:
    a, b = (_source(tmp_path / name, n=200, size=20_000) for name in ("a", "b"))
    out = tmp_path / "out"
    runs = [subprocess.Popen([sys.executable, "-m", "feedline", "pack", str(s), "--out", str(out),
                              "--shard-size", "300KB", "-q"], env=_env(), text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE) for s in (a, b)]
    results = [(p.wait(timeout=50), p.communicate()[1]) for p in runs]
    assert any(code == 0 for code, _ in results), results
    for code, err in results:
        assert code == 0 or (code == 1 and "another feedline pack or index" in err), (code, err)
    assert _cli("verify", str(out)).returncode == 0
    ds = feedline.open_dataset(out, verify=True)
    assert len({ds[i]["bin"].tobytes()[:1] for i in range(len(ds))}) == 200  # one source's samples, whole


def test_a_list_file_naming_a_fifo_a_device_or_a_folder_skips_them(tmp_path: Path) -> None:
    src = _source(tmp_path / "src")
    os.mkfifo(src / "fifo.bin")
    os.symlink("/dev/zero", src / "zero.bin")
    (src / "dir.bin").mkdir()
    listing = tmp_path / "list.txt"
    listing.write_text("src/k0.bin\nsrc/fifo.bin\nsrc/zero.bin\nsrc/dir.bin\n")
    notes: list[str] = []
    manifest = pack([listing], tmp_path / "out", warn=notes.append)  # before: blocked forever on the FIFO
    assert manifest.num_samples == 1
    assert any("src/fifo.bin (not a regular file)" in n and "src/zero.bin (not a regular file)" in n
               and "src/dir.bin (not a regular file)" in n for n in notes), notes


def _change_after_listing(src: Path, out: Path, change: object) -> None:
    """Pack ``src`` one file at a time (workers=1 reads each sample when it is written);
    ``change(path of k3.bin)`` runs after the first sample is written."""
    done: list[int] = []

    def progress(_: object) -> None:
        if not done:
            done.append(1)
            change(src / "k3.bin")  # type: ignore[operator]

    pack(src, out, progress=progress)


def _to_fifo(p: Path) -> None:
    p.unlink()
    os.mkfifo(p)


def _to_folder(p: Path) -> None:
    p.unlink()
    p.mkdir()


def _grow_past_streaming(p: Path) -> None:
    with open(p, "ab") as f:
        f.truncate(STREAM_AT + 1)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("big", [False, True], ids=["read-whole", "streamed"])
@pytest.mark.parametrize(("change", "says"), [
    (Path.unlink, "No such file"),
    (_to_fifo, "not a regular file"),
    (_to_folder, "is a folder"),
    (_grow_past_streaming, "grew|changed size"),
])
def test_a_source_changed_after_listing_is_a_read_error_naming_it(
        tmp_path: Path, big: bool, change: object, says: str) -> None:
    src = _source(tmp_path / "src")
    if big:
        (src / "k3.bin").write_bytes(b"x" * (STREAM_AT + 10))
        if change is _grow_past_streaming:
            change = _append
    with pytest.raises(ReadError, match=says) as e:
        _change_after_listing(src, tmp_path / "out", change)
    assert e.value.place["key"] == "k3" and e.value.place["field"] == "bin"
    assert e.value.place["path"] == str(src / "k3.bin")
    assert e.value.fix is not None and "changed after pack listed it" in e.value.fix
    assert not (tmp_path / "out" / "manifest.json").exists()


def _append(p: Path) -> None:
    with open(p, "ab") as f:
        f.write(b"more")


def test_a_small_source_rewritten_after_listing_packs_its_new_bytes(tmp_path: Path) -> None:
    src = _source(tmp_path / "src")
    _change_after_listing(src, tmp_path / "out", lambda p: p.write_bytes(b"new" * 500))
    ds = feedline.open_dataset(tmp_path / "out", verify=True)
    assert ds[3]["bin"].tobytes() == b"new" * 500


def _tars_dataset(tmp_path: Path) -> Path:
    out = tmp_path / "ds"
    pack(_source(tmp_path / "src", n=40, size=2000), out, shard_size=20_000)
    return out


def test_a_worker_copy_opens_while_the_same_tars_are_re_indexed(tmp_path: Path) -> None:
    """A process worker reopens the dataset; `feedline index` of its own tars (a format
    upgrade, a second look) removes the manifest while it rewrites the indexes. Before: the
    worker failed with "no manifest" (WorkerError mid-epoch)."""
    out = _tars_dataset(tmp_path)
    ds = feedline.open_dataset(out, verify=True)
    want = [ds[i]["bin"].tobytes() for i in range(len(ds))]
    state = pickle.dumps(ds)  # what a process worker receives
    (out / "manifest.json").unlink()  # the window inside a re-index
    copy = pickle.loads(state)
    assert [copy[i]["bin"].tobytes() for i in range(len(copy))] == want
    index_tars(sorted(out.glob("*.tar")), out)  # the re-index done: same indexes, a new manifest file
    copy = pickle.loads(state)
    assert [copy[i]["bin"].tobytes() for i in range(len(copy))] == want


@pytest.mark.parametrize("manifest_too", [True, False], ids=["re-indexed", "index-damaged"])
def test_a_worker_copy_refuses_indexes_rewritten_since_it_was_opened(tmp_path: Path, manifest_too: bool) -> None:
    out = _tars_dataset(tmp_path)
    state = pickle.dumps(feedline.open_dataset(out))
    idx = sorted(out.glob("*.idx"))[0]
    data = bytearray(idx.read_bytes())
    data[-1] ^= 0xFF  # other index bytes over the same tar (a re-index into another format)
    idx.write_bytes(bytes(data))
    if manifest_too:
        (out / "manifest.json").unlink()  # mid re-index: the manifest comes last
        with pytest.raises(FormatError, match=r"changed on disk.*manifest and indexes were rewritten"):
            len(pickle.loads(state))
    else:  # the manifest is the one the original read: the index itself is damaged
        with pytest.raises(FormatError, match="index") as e:
            len(pickle.loads(state))
        assert "changed on disk" not in str(e.value) and e.value.place.get("shard") == idx.name[:-4]


def test_opening_a_folder_a_pack_is_writing_says_so(tmp_path: Path,
                                                    holder: tuple[subprocess.Popen[str], Path]) -> None:
    proc, out = holder
    (out / "shard-000000.tar").write_bytes(b"\0" * 1024)
    with pytest.raises(FormatError, match=f"no manifest: a feedline pack or index \\(pid {proc.pid}\\) is writing"):
        feedline.open_dataset(out)
    proc.kill()
    proc.wait()
    with pytest.raises(FormatError, match="holds no complete feedline dataset"):  # nobody writing: the usual fix
        feedline.open_dataset(out)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_process_workers_read_every_epoch_while_the_tars_are_re_indexed_again_and_again(tmp_path: Path) -> None:
    out = _tars_dataset(tmp_path)
    stop, runs = threading.Event(), [0]

    def reindex() -> None:
        while not stop.is_set():
            index_tars(sorted(out.glob("*.tar")), out)
            runs[0] += 1

    with feedline.Loader(feedline.open_dataset(out, verify=True), batch_size=4, workers=2,
                         worker_type="process", shm_dir=str(tmp_path)) as loader:
        thread = threading.Thread(target=reindex)
        thread.start()
        try:
            for epoch in range(4):
                loader.set_epoch(epoch)
                got = sorted(bytes(b[:1]) for batch in loader for b in batch["bin"])
                assert got == sorted(bytes([i]) for i in range(40))
        finally:
            stop.set()
            thread.join()
    assert runs[0] > 0
