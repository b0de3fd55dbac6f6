"""Fuzz a whole dataset folder, the way an outside team would: structured edits of
``manifest.json`` (every key set to a hostile value or removed, shards duplicated,
dropped, swapped, an index named as its own shard, field entries renamed, classes
lists of every wrong kind), index edits re-signed so the manifest still matches them,
shard bit flips, and files swapped for a FIFO, a folder, ``/dev/zero`` or a huge sparse
file. Each case opens the dataset, reads and decodes every sample, then verifies and
inspects it.

What is guaranteed: every outcome is success or a FeedlineError; no other exception,
no hang (each case has 10 s), no allocation beyond a 3 GiB address-space limit, nothing
read outside the dataset folder. The default run does a few hundred cases with a fixed
seed; ``-m slow`` runs thousands.
"""

from __future__ import annotations

import copy
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HOSTILE: list[Any] = [None, True, False, -1, 0, 1, 2**31, 2**63, 2**64, 10**30, 1.5, "", "5", "..", "/etc/passwd",
                      "../x", [], {}, [1], {"a": 1}, "a" * 5000, ".", "sub/../shard-000000.tar", "\u0000",
                      "zz" * 8, "0" * 16, "manifest.json", "ff" * 8, "shard-000000.tar", "shard-000001.tar.idx"]

RUNNER = r'''
import copy, json, os, random, resource, signal, sys, traceback
from pathlib import Path
sys.path.insert(0, sys.argv[4])
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
from feedline.errors import FeedlineError
from feedline.io import open_dataset
from feedline.decode import Decoders
from feedline.format import checksum, inspect, verify
import test_fault_dataset_fuzz as F
import test_fuzz as TF

root, seed, cases = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
rnd = random.Random(seed)
pristine = {p.name: p.read_bytes() for p in root.iterdir()}
manifest = json.loads(pristine["manifest.json"])

def restore():
    for name in list(os.listdir(root)):
        p = root / name
        if name not in pristine or not p.is_file() or p.is_symlink() or p.stat().st_size != len(pristine[name]):
            if p.is_dir() and not p.is_symlink():
                p.rmdir()
            else:
                p.unlink()
    for name, data in pristine.items():
        p = root / name
        if not p.exists() or p.read_bytes() != data:
            p.write_bytes(data)

class Hang(Exception):
    pass

def alarm(*_):
    raise Hang()

signal.signal(signal.SIGALRM, alarm)
failures = []
for n in range(cases):
    what = F.mutate(rnd, root, manifest, pristine, TF)
    stage = "open"
    try:
        signal.alarm(10)
        ds = open_dataset(root, verify=rnd.random() < 0.5)
        stage = "read"
        dec = Decoders()
        for lo in range(0, len(ds), 4):
            for s in ds.read_many(list(range(lo, min(lo + 4, len(ds))))):
                dec.decode_sample({k: v for k, v in s.items() if k != "__key__"}, key=s["__key__"])
        stage = "verify"
        verify(root)
        inspect(root)
        signal.alarm(0)
    except FeedlineError:
        signal.alarm(0)
    except Hang:
        failures.append(f"case {n} ({what}): hang in {stage}")
    except BaseException as e:
        signal.alarm(0)
        tb = traceback.extract_tb(e.__traceback__)[-1]
        failures.append(f"case {n} ({what}): {stage}: {type(e).__name__}: {str(e)[:200]} "
                        f"at {Path(tb.filename).name}:{tb.lineno}")
    restore()
print(json.dumps(failures))
'''


def _mutate_doc(rnd: random.Random, doc: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    r = rnd.random()
    shards = doc.get("shards")
    if r < 0.25:
        key = rnd.choice([*doc, "classes", "extra"])
        if rnd.random() < 0.2:
            doc.pop(key, None)
        else:
            doc[key] = rnd.choice(HOSTILE)
    elif r < 0.55 and isinstance(shards, list) and shards and isinstance(shards[0], dict):
        entry = rnd.choice(shards)
        if isinstance(entry, dict) and entry:
            key = rnd.choice(list(entry))
            if rnd.random() < 0.15:
                entry.pop(key)
            else:
                entry[key] = rnd.choice(HOSTILE)
    elif r < 0.7 and isinstance(shards, list) and len(shards) > 1 and all(isinstance(s, dict) for s in shards):
        op = rnd.choice(["dup", "drop", "swap", "swapidx", "nameidx"])
        i, j = rnd.sample(range(len(shards)), 2)
        if op == "dup":
            shards.append(copy.deepcopy(shards[i]))
        elif op == "drop":
            shards.pop(i)
        elif op == "swap":
            shards[i], shards[j] = shards[j], shards[i]
        elif op == "swapidx":
            shards[i]["index"], shards[j]["index"] = shards[j].get("index"), shards[i].get("index")
        else:
            shards[i]["index"] = shards[i].get("name")
        if rnd.random() < 0.5:  # keep the total consistent so later checks are reached
            doc["num_samples"] = sum(s["num_samples"] for s in shards if isinstance(s.get("num_samples"), int))
    elif r < 0.9 and isinstance(doc.get("fields"), dict) and doc["fields"]:
        name = rnd.choice(list(doc["fields"]))
        entry = doc["fields"][name]
        if rnd.random() < 0.3:
            doc["fields"][rnd.choice(["x.npy", "", "a/b", "jpg.jpg", name + "x"])] = copy.deepcopy(entry)
        elif rnd.random() < 0.2 or not isinstance(entry, dict) or not entry:
            del doc["fields"][name]
        else:
            entry[rnd.choice(list(entry))] = rnd.choice(HOSTILE)
    else:
        doc["classes"] = rnd.choice([["a", "b"], ["a", "a"], [1, 2], "ab", [""], [], [f"c{i}" for i in range(20000)]])
    return doc


def _special(rnd: random.Random, path: Path) -> str:
    kind = rnd.choice(["dir", "fifo", "devzero", "empty", "sparse", "symlink_out"])
    path.unlink()
    if kind == "dir":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "devzero":
        path.symlink_to("/dev/zero")
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "sparse":
        with open(path, "wb") as f:
            f.truncate(4 << 30)
    else:
        path.symlink_to("/etc/passwd")
    return kind


def mutate(rnd: random.Random, root: Path, manifest: dict[str, Any], pristine: dict[str, bytes], tf: Any) -> str:
    """Apply one random mutation to the dataset at ``root``; return what it was."""
    from feedline.format import checksum

    r = rnd.random()
    shards = sorted(n for n in pristine if n.endswith(".tar"))
    if r < 0.35:
        doc = _mutate_doc(rnd, manifest)
        for _ in range(rnd.randint(0, 2)):
            doc = _mutate_doc(rnd, doc)
        (root / "manifest.json").write_text(json.dumps(doc))
        return "manifest"
    if r < 0.6:
        i = rnd.randrange(len(shards))
        idx = root / (shards[i] + ".idx")
        mutation = rnd.choice(tf.INDEX_MUTATIONS)
        data = mutation(rnd, pristine[idx.name])
        idx.write_bytes(data)
        if rnd.random() < 0.8:  # re-sign the manifest entry: the structural checks must hold alone
            doc = copy.deepcopy(manifest)
            entry = next(s for s in doc["shards"] if s["index"] == idx.name)
            entry["index_size"], entry["index_checksum"] = len(data), f"{checksum(data, 'xxh3'):016x}"
            (root / "manifest.json").write_text(json.dumps(doc))
        return f"index {mutation.__name__}"
    if r < 0.85:
        shard = root / rnd.choice(shards)
        mutation = rnd.choice([tf._flip, tf._overwrite])
        shard.write_bytes(mutation(rnd, pristine[shard.name]))
        return f"shard {mutation.__name__}"
    name = rnd.choice(["manifest.json", shards[0], shards[-1] + ".idx"])
    return f"{name} -> {_special(rnd, root / name)}"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A packed dataset of every field kind the decoders know, in several shards."""
    import io

    import numpy as np
    from PIL import Image

    from feedline.format import pack

    root = tmp_path_factory.mktemp("dsfuzz")
    src = root / "src"
    src.mkdir()
    rng = np.random.default_rng(0)
    for i in range(10):
        buf = io.BytesIO()
        np.save(buf, rng.standard_normal((3, 4)).astype(np.float32))
        (src / f"s{i:03d}.npy").write_bytes(buf.getvalue())
        Image.fromarray(rng.integers(0, 255, (16, 20, 3), dtype=np.uint8)).save(src / f"s{i:03d}.jpg")
        Image.fromarray(rng.integers(0, 255, (8, 8), dtype=np.uint8)).save(src / f"s{i:03d}.png")
        (src / f"s{i:03d}.cls").write_text(str(i % 3))
        (src / f"s{i:03d}.json").write_text(json.dumps({"i": i}))
    pack(src, root / "data", shard_size=8 << 10)
    return root / "data"


def _run(corpus: Path, seed: int, cases: int, timeout: int) -> list[str]:
    here = Path(__file__).parent
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join([str(here.parents[1] / "src"), str(here), str(here.parent / "format")])}
    res = subprocess.run([sys.executable, "-c", RUNNER, str(corpus), str(seed), str(cases), str(here)],
                         env=env, capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, res.stderr[-3000:]
    return list(json.loads(res.stdout.strip().splitlines()[-1]))


@pytest.mark.timeout(120)
def test_fuzzed_dataset_folders_give_only_feedline_errors(corpus: Path) -> None:
    assert _run(corpus, seed=1, cases=120, timeout=110) == []


def test_the_untouched_corpus_reads_and_verifies(corpus: Path) -> None:
    import feedline
    from feedline.format import verify

    ds = feedline.open_dataset(corpus, verify=True)
    assert len(ds.read_many(range(len(ds)))) == 10 and verify(corpus) == []


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("seed", range(100, 104))
def test_fuzzed_dataset_folders_many(corpus: Path, seed: int) -> None:
    assert _run(corpus, seed=seed, cases=3000, timeout=1700) == []


