"""Round 14 of hostile inputs (issue 13): round 13's new APIs given hostile input, sources
changed between pack's listing and its read, a dataset changed under a running loader,
tight resources, and diagnose over scripts that do not behave (``sweep_round14.py``, run
by ``hostile_sweep.py``). A quick test for each failure the round found and closed."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch  # noqa: F401 - imported at collection: PadCollate's batches are torch's
from faults_helpers import Numbers

import feedline
import feedline.format._pack as pack_module
from feedline import text
from feedline.errors import ConfigError, ReadError
from feedline.format import pack
from feedline.padding import PadCollate

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(30)
def test_documents_name_bytes_that_are_not_utf8_and_read_a_bom_and_crlf_as_written(tmp_path: Path) -> None:
    """Before: a binary ``.txt`` or a Latin-1 line was a raw ``UnicodeDecodeError``; a
    byte-order mark stayed in the first document (``.txt``) or made its line "not JSON"
    (``.jsonl``, ``.json``: a raw ``JSONDecodeError``); CRLF in a ``.txt`` became LF."""
    (tmp_path / "photo.txt").write_bytes(bytes(range(256)))
    with pytest.raises(ConfigError, match=r"photo\.txt' is not UTF-8 text \(byte 128") as err:
        list(text.documents(tmp_path / "photo.txt"))
    assert err.value.path == str(tmp_path / "photo.txt")
    (tmp_path / "a.jsonl").write_bytes(b'{"text": "fine"}\n{"text": "caf\xe9"}\n')
    with pytest.raises(ConfigError, match=r"a\.jsonl:2 is not UTF-8"):
        list(text.documents(tmp_path / "a.jsonl"))
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.jsonl").write_bytes(b'\xef\xbb\xbf{"text": "one"}\r\n{"text": "two"}\r\n')
    (corpus / "b.json").write_bytes(b'\xef\xbb\xbf["three"]')
    (corpus / "c.txt").write_bytes(b"\xef\xbb\xbffour\r\nfive\r\n")
    assert list(text.documents(corpus)) == ["one", "two", "three", "four\r\nfive\r\n"]
    (corpus / "d.json").write_text('[{"text": "x"},')
    with pytest.raises(ConfigError, match=r"d\.json' is not JSON"):
        list(text.documents(corpus))


@pytest.mark.timeout(30)
def test_records_that_are_not_objects_or_hold_no_text_are_named_as_such(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text('{"text": "ok"}\n[1, 2]\n')
    with pytest.raises(ConfigError, match=r"a\.jsonl, record 2 is a JSON array, not an object or a string"):
        list(text.documents(tmp_path / "a.jsonl"))
    (tmp_path / "b.jsonl").write_text('{"text": 5}\n')
    with pytest.raises(ConfigError, match=r"b\.jsonl, record 1: its 'text' is a JSON number"):
        list(text.documents(tmp_path / "b.jsonl"))


@pytest.mark.timeout(30)
def test_pad_collate_keeps_every_value_of_mixed_dtypes_and_names_a_field_some_samples_lack() -> None:
    """Before: the padded array took the first sample's dtype (0.5 became 0 in int16,
    70000 wrapped in uint8); a field only some samples had was a raw ``KeyError`` or
    silently dropped from the batch; a single value or text in a padded field was a raw
    ``IndexError``; a negative pad length a numpy error naming no field."""
    out = PadCollate({"x": None})([{"x": np.arange(3, dtype=np.int16)}, {"x": np.array([0.5, 70000.5], np.float32)}])
    assert out["x"].dtype.is_floating_point and out["x"][1, :2].tolist() == [0.5, 70000.5]
    assert out["x"][0].tolist() == [0, 1, 2] and out["x_lengths"].tolist() == [3, 2]
    with pytest.raises(ValueError, match=r"sample 1 of the batch lacks \['y'\]"):
        PadCollate({"x": None})([{"x": np.ones(2), "y": 1}, {"x": np.ones(3)}])
    with pytest.raises(ValueError, match=r"sample 1 of the batch has \['y'\] that sample 0 lacks"):
        PadCollate({"x": None})([{"x": np.ones(2)}, {"x": np.ones(3), "y": 1}])
    with pytest.raises(ValueError, match=r"field 'x': pad_stack: sample 1 is a single value"):
        PadCollate({"x": None})([{"x": np.ones(2)}, {"x": np.float32(1)}])
    with pytest.raises(ValueError, match=r"field 'x': pad_stack: sample 0 is not numbers"):
        PadCollate({"x": None})([{"x": "text"}, {"x": np.ones(3)}])
    with pytest.raises(ValueError, match=r"pad\['x'\] must be None .* got -2"):
        PadCollate({"x": -2})


@pytest.mark.timeout(60)
def test_pack_refuses_a_link_put_where_a_listed_file_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: a file replaced by a symbolic link to a file outside the tree after pack
    listed it (the walk refuses such links) was followed, and the outside file packed."""
    src = tmp_path / "src"
    src.mkdir()
    for i in range(3):
        (src / f"s{i}.bin").write_bytes(os.urandom(100))
    (src / "big.bin").write_bytes(os.urandom(pack_module.STREAM_AT + 10))  # streamed, not read whole
    (tmp_path / "secret.bin").write_bytes(b"SECRET")
    real = pack_module.collect

    def listed_then_swapped(*args: Any, **kwargs: Any) -> Any:
        found = real(*args, **kwargs)
        for name in ("s1.bin", "big.bin"):
            (src / name).unlink()
            (src / name).symlink_to(tmp_path / "secret.bin")
        return found

    monkeypatch.setattr(pack_module, "collect", listed_then_swapped)
    with pytest.raises(ReadError, match="is a symbolic link now, where a file was listed") as err:
        pack([src], tmp_path / "out", durable=False)
    assert err.value.path in (str(src / "s1.bin"), str(src / "big.bin"))
    assert not (tmp_path / "out" / "manifest.json").exists()
    monkeypatch.setattr(pack_module, "collect", real)  # a link there at listing time: inside the tree, packed
    (src / "big.bin").unlink()
    (src / "s1.bin").unlink()
    (src / "s1.bin").symlink_to("s0.bin")
    assert pack([src], tmp_path / "out", durable=False).num_samples == 3


def _start_process_workers(conn: Any) -> None:
    try:
        with feedline.Loader(Numbers(8), batch_size=4, workers=1, worker_type="process") as loader:
            next(iter(loader))
    except BaseException as e:  # reported to the test, which fails on anything but a ConfigError
        conn.send(f"{type(e).__name__}: {e}")
    else:
        conn.send("started")


@pytest.mark.timeout(60)
def test_process_workers_inside_a_daemonic_process_are_a_config_error() -> None:
    """Before: a Loader with process workers made inside another Loader's process worker
    (or a Pool worker) failed with ``AssertionError: daemonic processes are not allowed
    to have children``."""
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_start_process_workers, args=(child,), daemon=True)
    proc.start()
    assert parent.poll(50), "no answer from the daemonic process"
    got = parent.recv()
    proc.join(10)
    assert got.startswith("ConfigError: cannot start process workers inside"), got
    assert 'worker_type="thread"' in got


SCRIPT = f"""
import os, sys, time
sys.path[:0] = [{str(ROOT / 'src')!r}, {str(Path(__file__).parent)!r}]
import feedline
from faults_helpers import Numbers
loader = feedline.Loader(Numbers(96), batch_size=4, workers=1, seed=0)
for b in loader:
    time.sleep(0.004)
loader.close()
sys.stdout.flush()
if sys.argv[1] == "exit":
    os._exit(5)
os.execv("/bin/sh", ["sh", "-c", "exit 4"])
"""


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("how", ["exit", "exec"])
def test_diagnose_keeps_every_step_before_os_exit_or_exec(tmp_path: Path, how: str) -> None:
    """Before: a script ending with ``os._exit(5)`` or exec'ing another program left only
    its last partial report (15 of 24 steps); an exec'd Python program then replaced it
    with a report of no steps. (Several seconds a run: a torch import per process.)"""
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    report = tmp_path / "r.json"
    res = subprocess.run([sys.executable, "-m", "feedline", "diagnose", "--quiet", "--json", str(report), "--",
                          sys.executable, str(script), how], env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
                         capture_output=True, text=True, timeout=200)
    assert res.returncode == (5 if how == "exit" else 4), res.stderr[-2000:]
    doc = json.loads(report.read_text())
    assert doc["steps"] >= 22 and not doc["host"].get("partial"), (doc["steps"], doc["host"])


@pytest.mark.timeout(60)
def test_a_labels_table_whose_every_label_is_empty_packs_a_dataset_that_opens(tmp_path: Path) -> None:
    """Found by the whole sweep (``labels-21``): a table whose only labels are ``""`` was
    taken as a table without labels, yet its ``""`` became a class named ``""``; pack wrote
    the manifest, and opening it failed: "manifest 'classes' must be a list of distinct
    non-empty names"."""
    from feedline.format import SourceRules

    src = tmp_path / "src"
    src.mkdir()
    for i in range(2):
        (src / f"img{i}.jpg").write_bytes(b"img" + os.urandom(20))
    table = tmp_path / "labels.jsonl"
    table.write_text('{"file_name": "img0.jpg", "label": ""}\n{"file_name": "img1.jpg", "label": " "}\n')
    manifest = pack([src], tmp_path / "out", durable=False, rules=SourceRules(labels=str(table)))
    assert manifest.classes is None
    ds = feedline.open_dataset(tmp_path / "out")
    assert len(ds) == 2 and "cls" not in ds.fields
