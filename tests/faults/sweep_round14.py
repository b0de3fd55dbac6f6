"""Round 14 of the seeded sweep (issue 13): round 13's new APIs given hostile input, sources
that change between pack's listing and its read, a dataset changed under a running loader,
tighter resources, and ``feedline diagnose`` running scripts that do not behave.
``hostile_sweep.py`` adds these cases to its own (groups ``text``, ``pad``, ``lengths``,
``under-pack``, ``live``, ``squeeze``, ``diag-hostile``); each ends as the others do: a
clear error naming the thing, or a right result, and nothing left behind.

* ``text``: ``feedline.text.documents`` over binary files, a byte-order mark, CRLF, a
  200 MB line, invalid UTF-8, an empty corpus, JSON(L) records that are not objects or lack
  the text field; ``write_token_blocks`` with nothing to write, strings instead of ids, a
  generator that fails; a corpus read back block by block.
* ``pad``: ``PadCollate`` given mixed dtypes and ranks, empty items, a 0-d or text value in
  a padded field, a field missing from (or added to) one sample, a negative pad length; in
  a Loader with process workers too.
* ``lengths``: ``Loader(lengths=...)`` negative, NaN, wrong count, all equal, huge, bools,
  a generator, a state from other lengths; ``ds.labels()`` / ``ds.sizes()`` of fields that
  are not labels.
* ``under-pack``: a source deleted, truncated, grown, replaced (same size, rename over, a
  FIFO, a folder, a socket, a device, a link out of the tree) after the listing and before
  its read; a folder made unreadable then; names differing only by case; a 4 KiB path.
* ``live``: a shard truncated, replaced by rename or deleted mid-epoch (thread and process
  workers), the manifest rewritten by a concurrent pack into another layout.
* ``squeeze``: one CPU (affinity), /dev/shm nearly full, 50 loaders alive at once, a Loader
  inside another's dataset, 64 descriptors with the text API.
* ``diag-hostile``: ``feedline diagnose`` over scripts that fork without exec, call
  ``setsid``, close fds 0-2, ``chdir``, ``sys.exit("msg")``, install SIGINT/SIGTERM
  handlers, use ``multiprocessing.Pool``, exec another program at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import sweep_round12 as r12

CaseFn = Callable[[Path], str]
ROOT = Path(__file__).resolve().parents[2]
FAULTS = Path(__file__).resolve().parent

# ----------------------------------------------------------------------------- text

_TEXT_CORPORA: dict[str, Callable[[Path], Any]] = {}


def _corpus(name: str) -> Callable[[Callable[[Path], Any]], Callable[[Path], Any]]:
    def add(fn: Callable[[Path], Any]) -> Callable[[Path], Any]:
        _TEXT_CORPORA[name] = fn
        return fn

    return add


# Each corpus writes its files under ``d`` and returns the documents expected, or a tuple of
# names one of which a clear error must name.

@_corpus("binary-txt")
def _binary_txt(d: Path) -> Any:
    (d / "photo.txt").write_bytes(bytes(range(256)) * 40)
    return ("photo.txt",)


@_corpus("invalid-utf8-jsonl")
def _bad_utf8_jsonl(d: Path) -> Any:
    (d / "a.jsonl").write_bytes(b'{"text": "fine"}\n{"text": "caf\xe9 latin-1"}\n')
    return ("a.jsonl:2", "a.jsonl, line 2")


@_corpus("invalid-utf8-json")
def _bad_utf8_json(d: Path) -> Any:
    (d / "a.json").write_bytes(b'["ok", "\xff\xfe"]')
    return ("a.json",)


@_corpus("bom-txt")
def _bom_txt(d: Path) -> Any:
    (d / "a.txt").write_bytes(b"\xef\xbb\xbfhello world")
    return ["hello world"]


@_corpus("bom-jsonl")
def _bom_jsonl(d: Path) -> Any:
    (d / "a.jsonl").write_bytes(b'\xef\xbb\xbf{"text": "one"}\n{"text": "two"}\n')
    return ["one", "two"]


@_corpus("bom-json")
def _bom_json(d: Path) -> Any:
    (d / "a.json").write_bytes(b'\xef\xbb\xbf[{"text": "one"}, "two"]')
    return ["one", "two"]


@_corpus("crlf-jsonl")
def _crlf_jsonl(d: Path) -> Any:
    (d / "a.jsonl").write_bytes(b'{"text": "one"}\r\n\r\n{"text": "two\\r\\n"}\r\n')
    return ["one", "two\r\n"]


@_corpus("crlf-txt")
def _crlf_txt(d: Path) -> Any:
    (d / "a.txt").write_bytes(b"line one\r\nline two\r\n")
    return ["line one\r\nline two\r\n"]  # the file's characters, not rewritten


@_corpus("huge-line-txt")
def _huge_txt(d: Path) -> Any:
    with open(d / "big.txt", "wb") as f:
        for _ in range(200):
            f.write(b"x" * (1 << 20))
    return [200 << 20]  # a length: the document is not compared whole


@_corpus("huge-line-jsonl")
def _huge_jsonl(d: Path) -> Any:
    with open(d / "big.jsonl", "wb") as f:
        f.write(b'{"text": "')
        for _ in range(200):
            f.write(b"y" * (1 << 20))
        f.write(b'"}\n{"text": "after"}\n')
    return [200 << 20, 5]


@_corpus("empty-folder")
def _empty(d: Path) -> Any:
    return []


@_corpus("only-other-types")
def _others(d: Path) -> Any:
    (d / "a.csv").write_text("text\nhello\n")
    (d / ".hidden.txt").write_text("secret")
    return []


@_corpus("empty-files")
def _empty_files(d: Path) -> Any:
    (d / "a.txt").write_bytes(b"")
    (d / "b.jsonl").write_bytes(b"")
    (d / "c.json").write_bytes(b"[]")
    return [""]


@_corpus("jsonl-non-objects")
def _non_objects(d: Path) -> Any:
    (d / "a.jsonl").write_text('{"text": "ok"}\n[1, 2]\n')
    return ("a.jsonl", "record 2")


@_corpus("jsonl-null-line")
def _null_line(d: Path) -> Any:
    (d / "a.jsonl").write_text('{"text": "ok"}\nnull\n')
    return ("a.jsonl", "record 2")


@_corpus("jsonl-number-line")
def _number_line(d: Path) -> Any:
    (d / "a.jsonl").write_text('5\n')
    return ("a.jsonl", "record 1")


@_corpus("jsonl-missing-key")
def _missing_key(d: Path) -> Any:
    (d / "a.jsonl").write_text('{"text": "ok"}\n{"content": "other"}\n')
    return ("a.jsonl", "record 2")


@_corpus("jsonl-text-not-string")
def _text_number(d: Path) -> Any:
    (d / "a.jsonl").write_text('{"text": 5}\n')
    return ("a.jsonl", "record 1")


@_corpus("jsonl-not-json")
def _not_json(d: Path) -> Any:
    (d / "a.jsonl").write_text('{"text": "ok"}\n{text: unquoted}\n')
    return ("a.jsonl:2",)


@_corpus("json-not-json")
def _json_not_json(d: Path) -> Any:
    (d / "a.json").write_text('[{"text": "ok"},')
    return ("a.json",)


@_corpus("json-object")
def _json_object(d: Path) -> Any:
    (d / "a.json").write_text('{"text": "one document"}')
    return ("a.json",)


@_corpus("link-loop-folder")
def _loop(d: Path) -> Any:
    (d / "a.txt").write_text("one")
    (d / "sub").mkdir()
    (d / "sub" / "back").symlink_to("..")
    return ["one"]


@_corpus("dangling-link")
def _dangling(d: Path) -> Any:
    (d / "a.txt").write_text("one")
    (d / "b.txt").symlink_to(d / "gone.txt")
    return ["one"]


@_corpus("fifo-named-txt")
def _fifo(d: Path) -> Any:
    (d / "a.txt").write_text("one")
    os.mkfifo(d / "pipe.txt")
    return ["one"]


def text_case(h: ModuleType, kind: str) -> CaseFn:
    def run(tmp: Path) -> str:
        from feedline import text

        d = tmp / "corpus"
        d.mkdir()
        want = _TEXT_CORPORA[kind](d)
        with h.deadline(120), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            how, got = h.expect_clear(lambda: list(text.documents(d)), *(want if isinstance(want, tuple) else ()))
        if isinstance(want, tuple):
            if how != "error":
                raise h.Failure(f"read as {len(got)} documents, expected an error naming {want}")
            return got
        if how != "ok":
            raise h.Failure(f"expected {len(want)} documents, got {got}")
        if want and isinstance(want[0], int):
            if [len(g) for g in got] != want:
                raise h.Failure(f"document lengths {[len(g) for g in got]}, expected {want}")
        elif got != want:
            raise h.Failure(f"documents {[g[:40] for g in got]!r}, expected {want!r}")
        return f"{len(got)} documents, right"

    return run


def _blocks(out: Path) -> list[np.ndarray]:
    import io

    import feedline

    ds = feedline.open_dataset(out)
    return [np.load(io.BytesIO(bytes(ds[i]["tokens.npy"]))) for i in range(len(ds))]


def token_blocks_case(h: ModuleType, kind: str) -> CaseFn:
    """``write_token_blocks``: an error naming the argument or document, or blocks that are
    the token stream exactly; a failing generator leaves no dataset."""

    def run(tmp: Path) -> str:
        from feedline import text

        out = tmp / "tokens"
        docs: Any
        if kind == "no-documents":
            docs = []
        elif kind == "too-few-tokens":
            docs = [[1, 2], [3]]
        elif kind == "strings-not-ids":
            docs = ["hello", "world"]
        elif kind == "negative-ids":
            docs = [[1, -1]]
        elif kind == "float-ids":
            docs = [[1.5, 2.0]]
        elif kind == "nested-ids":
            docs = [[[1, 2], [3, 4]]]
        elif kind == "generator-fails":
            def gen() -> Any:
                for i in range(500):
                    yield list(range(i % 50 + 1))
                raise RuntimeError("tokenizer died")
            docs = gen()
        elif kind == "out-is-a-file":
            out.write_bytes(b"keep me")
            docs = [[1, 2, 3, 4]]
        elif kind == "roundtrip-bom-crlf":
            d = tmp / "c"
            d.mkdir()
            (d / "a.jsonl").write_bytes(b'\xef\xbb\xbf{"text": "ab"}\r\n{"text": "cde"}\r\n')
            (d / "b.txt").write_bytes(b"fg\r\nh")
            docs = [[ord(c) for c in s] for s in text.documents(d)]
        else:
            raise ValueError(kind)
        with h.deadline(120):
            if kind == "generator-fails":
                try:
                    text.write_token_blocks(docs, out, block=8, eot=0)
                except RuntimeError as e:
                    if out.exists() and any(out.iterdir()):
                        raise h.Failure(f"a failed write left {sorted(p.name for p in out.iterdir())}") from e
                    return "the generator's error, no dataset left"
                raise h.Failure("the generator's error was swallowed")
            how, got = h.expect_clear(lambda: text.write_token_blocks(docs, out, block=4, eot=0),
                                      "document", "block", "tokens", str(out))
        if kind == "out-is-a-file":
            if out.read_bytes() != b"keep me":
                raise h.Failure("the file named as out was overwritten")
            if how != "error":
                raise h.Failure("wrote into a path that is a file")
            return got
        if kind in ("strings-not-ids", "negative-ids", "float-ids", "nested-ids"):
            if how != "error":
                raise h.Failure(f"wrote {got}")
            return got
        if how == "error":
            if kind == "roundtrip-bom-crlf":
                raise h.Failure(got)
            return got
        stream = [t for d in docs for t in (*d, 0)]
        blocks = _blocks(out)
        want = [stream[k * 4:k * 4 + 5] for k in range((len(stream) - 1) // 4)]
        if [b.tolist() for b in blocks] != want:
            raise h.Failure(f"blocks {[b.tolist() for b in blocks][:3]} are not the stream {stream[:12]}")
        if kind == "roundtrip-bom-crlf" and stream[:3] != [ord("a"), ord("b"), 0]:
            raise h.Failure(f"the stream starts {stream[:4]} (a byte-order mark read as text?)")
        return f"{got['blocks']} blocks, the stream exactly ({got})"

    return run


# ----------------------------------------------------------------------------- pad

def _pad_samples(kind: str) -> tuple[list[dict[str, Any]], dict[str, Any], tuple[str, ...]]:
    """Samples, PadCollate kwargs, and the names a clear error must hold (empty: must work)."""
    f32, i16 = np.float32, np.int16
    if kind == "mixed-dtypes":
        return [{"x": np.arange(3, dtype=i16)}, {"x": np.array([0.5, 1.5], f32)}], {"pad": {"x": None}}, ()
    if kind == "mixed-dtypes-int-big":
        return [{"x": np.arange(2, dtype=np.uint8)}, {"x": np.array([70000], np.int64)}], {"pad": {"x": None}}, ()
    if kind == "mixed-ranks":
        return [{"x": np.zeros((3, 2), f32)}, {"x": np.zeros(4, f32)}], {"pad": {"x": None}}, ("'x'",)
    if kind == "zero-length-one":
        return [{"x": np.zeros(0, f32)}, {"x": np.ones(3, f32)}], {"pad": {"x": None}, "mask": True}, ()
    if kind == "zero-length-all":
        return [{"x": np.zeros((0, 2), f32)}, {"x": np.zeros((0, 2), f32)}], {"pad": {"x": None}}, ()
    if kind == "scalar-in-padded":
        return [{"x": np.ones(3, f32)}, {"x": np.float32(2)}], {"pad": {"x": None}}, ("'x'",)
    if kind == "text-in-padded":
        return [{"x": np.ones(3, f32)}, {"x": "abc"}], {"pad": {"x": None}}, ("'x'",)
    if kind == "none-in-padded":
        return [{"x": np.ones(3, f32)}, {"x": None}], {"pad": {"x": None}}, ("'x'",)
    if kind == "field-missing-in-one":
        return [{"x": np.ones(3, f32), "y": 1}, {"x": np.ones(2, f32)}], {"pad": {"x": None}}, ("'y'",)
    if kind == "field-added-in-one":
        return [{"x": np.ones(3, f32)}, {"x": np.ones(2, f32), "y": 1}], {"pad": {"x": None}}, ("'y'",)
    if kind == "padded-field-missing":
        return [{"x": np.ones(3, f32)}, {"z": np.ones(2, f32)}], {"pad": {"x": None}}, ("'x'", "'z'")
    if kind == "negative-pad-length":
        return [{"x": np.ones(3, f32)}], {"pad": {"x": -2}}, ("'x'", "pad")
    if kind == "pad-length-not-int":
        return [{"x": np.ones(3, f32)}], {"pad": {"x": "8"}}, ("'x'", "pad")
    if kind == "unpadded-ragged":
        return [{"x": np.ones(3, f32)}, {"x": np.ones(2, f32)}], {}, ("'x'",)
    if kind == "axis-out-of-range":
        return [{"x": np.ones(3, f32)}, {"x": np.ones(2, f32)}], {"pad": {"x": None}, "axis": 2}, ("'x'", "axis")
    if kind == "cut-to-length":
        return [{"x": np.arange(5, dtype=f32)}, {"x": np.arange(2, dtype=f32)}], {"pad": {"x": 3}, "mask": True}, ()
    raise ValueError(kind)


def _pad_check(samples: list[dict[str, Any]], kw: dict[str, Any], out: dict[str, Any]) -> str | None:
    """What is wrong with ``out`` (None: right): every real value kept, exactly."""
    x = out["x"].numpy()
    length = kw["pad"]["x"]
    for k, s in enumerate(samples):
        real = np.asarray(s["x"])[: length if length is not None else None]
        got = x[k, : len(real)]
        if not np.array_equal(got, real.astype(x.dtype)) or not np.array_equal(got.astype(real.dtype), real):
            return f"sample {k}: {got.tolist()} is not {real.tolist()} (dtype {x.dtype})"
        if int(out["x_lengths"][k]) != len(real):
            return f"sample {k}: length {int(out['x_lengths'][k])}, not {len(real)}"
    return None


def pad_case(h: ModuleType, kind: str) -> CaseFn:
    def run(tmp: Path) -> str:
        from feedline.errors import FeedlineError
        from feedline.padding import PadCollate

        samples, kw, names = _pad_samples(kind)
        try:
            out = PadCollate(**kw)(samples)
        except (ValueError, TypeError, FeedlineError) as e:
            if not names:
                raise h.Failure(f"{type(e).__name__}: {e}") from e
            if not any(n in str(e) for n in names):
                raise h.Failure(f"{type(e).__name__} names none of {names}: {e}") from e
            return f"{type(e).__name__}: {str(e)[:150]}"
        except Exception as e:
            raise h.Failure(f"raw {type(e).__name__}: {e}") from e
        if names:
            raise h.Failure(f"collated to {sorted(out)}, expected an error naming {names}")
        wrong = _pad_check(samples, kw, out)
        if wrong:
            raise h.Failure(wrong)
        return f"padded to {tuple(out['x'].shape)} {out['x'].dtype}, every value kept"

    return run


PAD_LOADER = """
class Ragged:
    def __init__(self, missing):
        self.missing = missing
    def __len__(self):
        return 24
    def __getitem__(self, i):
        s = {"x": np.arange(i % 5 + 1, dtype=np.float32), "y": i}
        if i == self.missing:
            del s["y"]
        return s

def main():
    from feedline.padding import PadCollate
    sys.modules["__main__"].Ragged = Ragged
    with feedline.Loader(Ragged(int(sys.argv[2])), batch_size=4, workers=2, worker_type=sys.argv[1], shuffle=False,
                         collate=PadCollate({"x": None}), shm_dir=sys.argv[3]) as loader:
        got = []
        for b in loader:
            for k in range(len(b["y"])):
                n = int(b["x_lengths"][k])
                assert b["x"][k, :n].tolist() == list(range(n)), (k, b["x"][k])
                got.append(int(b["y"][k]))
    report(keys=got)
"""


def pad_loader_case(h: ModuleType, worker_type: str, missing: int) -> CaseFn:
    """PadCollate in a Loader: a sample without a field is an error naming the field (and
    the batch), from process workers too; without one, every sample padded right."""

    def run(tmp: Path) -> str:
        res = r12.child(h, PAD_LOADER, worker_type, str(missing), str(tmp))
        kind, got = r12.verdict(h, res, "'y'")
        r12._no_arenas(h, tmp)
        if kind == "ok":
            if missing >= 0:
                raise h.Failure(f"sample {missing} lacks 'y', yet the epoch ran: {got['keys']}")
            if got["keys"] != list(range(24)):
                raise h.Failure(f"keys {got['keys']}")
            return "24 samples, padded right"
        if missing < 0:
            raise h.Failure(got)
        return got

    return run


# ----------------------------------------------------------------------------- lengths

_LENGTHS: dict[str, Callable[[int], Any]] = {
    "negative": lambda n: [5] * (n - 1) + [-1],
    "nan": lambda n: [1.0] * (n - 1) + [float("nan")],
    "floats-whole": lambda n: [float(i) for i in range(n)],
    "too-few": lambda n: list(range(n - 1)),
    "too-many": lambda n: list(range(n + 1)),
    "all-equal": lambda n: [7] * n,
    "all-zero": lambda n: [0] * n,
    "huge": lambda n: [2**62 - i for i in range(n)],
    "past-int64": lambda n: [2**64 - 1] + [1] * (n - 1),
    "uint64-past-int64": lambda n: np.array([2**63 + 5] + [1] * (n - 1), np.uint64),
    "bools": lambda n: [True, False] * (n // 2),
    "generator": lambda n: (i for i in range(n)),
    "nested": lambda n: [[i] for i in range(n)],
    "strings": lambda n: [str(i) for i in range(n)],
    "dict": lambda n: {i: i for i in range(n)},
    "tensor": lambda n: __import__("torch").arange(n),
}


def lengths_case(h: ModuleType, kind: str, world: int = 1) -> CaseFn:
    """A clear error naming ``lengths``, or an epoch (per rank) delivering every sample once."""

    def run(tmp: Path) -> str:
        import feedline

        sys.path.insert(0, str(FAULTS))
        from faults_helpers import Numbers

        n = 40
        lengths = _LENGTHS[kind](n)
        seen: list[int] = []

        def epoch() -> list[int]:
            for rank in range(world):
                with feedline.Loader(Numbers(n), batch_size=4, workers=1, seed=3, lengths=lengths, drop_last=False,
                                     world_size=world, rank=rank) as loader:
                    seen.extend(int(v) for b in loader for v in b["y"].tolist())
            return seen

        with h.deadline(60):
            how, got = h.expect_clear(epoch, "lengths")
        if how == "error":
            return got
        if sorted(set(got)) != list(range(n)) or len(got) - n >= world * 4:  # drop_last=False wraps to fill
            raise h.Failure(f"the epoch delivered {len(got)} samples, {len(set(got))} distinct (of {n})")
        return f"every sample once ({world} rank(s))"

    return run


def lengths_state_case(h: ModuleType, other: str) -> CaseFn:
    """A state taken with one ``lengths`` loaded into a loader with other lengths (or none,
    or another order): a ``StateError``, never a resume in another order."""

    def run(tmp: Path) -> str:
        import feedline

        sys.path.insert(0, str(FAULTS))
        from faults_helpers import Numbers

        n = 40
        a = list(range(n))
        b = {"reversed": a[::-1], "none": None, "same-values-other-list": list(a),
             "one-changed": [*a[:-1], 999]}[other]
        with h.deadline(60):
            with feedline.Loader(Numbers(n), batch_size=4, workers=1, seed=3, lengths=a) as first:
                it = iter(first)
                done = [int(v) for _ in range(3) for v in next(it)["y"].tolist()]
                saved = first.state_dict()
                rest_a = [int(v) for bt in it for v in bt["y"].tolist()]
            second = feedline.Loader(Numbers(n), batch_size=4, workers=1, seed=3, lengths=b)
            with second:
                how, got = h.expect_clear(lambda: second.load_state_dict(saved), "lengths", "shuffle")
                if how == "error":
                    if other == "same-values-other-list":
                        raise h.Failure(f"the same lengths refused: {got}")
                    return got
                rest = [int(v) for bt in second for v in bt["y"].tolist()]
        if other != "same-values-other-list":
            raise h.Failure(f"resumed under other lengths: {rest[:8]}")
        if done + rest != done + rest_a or sorted(done + rest) != a:
            raise h.Failure(f"resumed with {rest[:8]}, expected {rest_a[:8]}")
        return "resumed exactly"

    return run


def labels_sizes_case(h: ModuleType, call: str) -> CaseFn:
    """``ds.labels(f)`` / ``ds.sizes(f)`` of fields that are not labels or not fields: a
    ``ConfigError`` naming the field, or the right values."""

    def run(tmp: Path) -> str:
        import feedline

        src = tmp / "src"
        for c in ("cat", "dog"):
            (src / c).mkdir(parents=True)
            for i in range(3):
                (src / c / f"{c}{i}.jpg").write_bytes(b"b" * (10 + i))
                (src / c / f"{c}{i}.txt").write_text("t" * (i + 1))
        (src / "cat" / "cat9.jpg").write_bytes(b"only-jpg")
        res = h.cli("pack", str(src), "--out", str(tmp / "ds"), "-q", "--labels", "from-folder")
        h.cli_clean(res, codes=(0,))
        ds = feedline.open_dataset(tmp / "ds")
        what, arg = call.split(":", 1)
        value: Any = {"none": None, "int": 5, "bytes": b"jpg"}.get(arg, arg)
        how, got = h.expect_clear(lambda: getattr(ds, what)(value), str(value), "field")
        keys = [ds[i]["__key__"] for i in range(len(ds))]
        if how == "error":
            if (what, arg) in (("labels", "cls"), ("sizes", "jpg")):
                raise h.Failure(f"{call} refused: {got}")
            return got
        if what == "labels" and arg == "cls":
            want = [0 if k.startswith("cat") else 1 for k in keys]
            if got.tolist() != want:
                raise h.Failure(f"labels {got.tolist()}, expected {want}")
            return "right labels"
        if what == "sizes" and arg in ds.fields:  # the stored bytes (a label's are its text)
            want = [len(ds[i][arg]) if arg in ds[i] else -1 for i in range(len(ds))]
            if got.tolist() != want:
                raise h.Failure(f"sizes {got.tolist()}, expected {want}")
            return "right sizes"
        raise h.Failure(f"{call} returned {np.asarray(got).tolist()[:8]} for a field that is not one")

    return run


# ----------------------------------------------------------------------------- under-pack

UNDER_PACK = """
import errno, shutil, socket, stat
import feedline.format._pack as P
from feedline.format import pack

def main():
    src, out, kind, victim, outside = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
    real = P.collect

    def collect(*a, **kw):
        found = real(*a, **kw)
        change(os.path.join(src, victim), kind, outside)
        return found

    P.collect = collect
    manifest = pack([src], out, durable=False, warn=lambda line: None)
    report(samples=manifest.num_samples)

def change(p, kind, outside):
    if kind == "delete":
        os.unlink(p)
    elif kind == "truncate-0":
        os.truncate(p, 0)
    elif kind == "truncate-half":
        os.truncate(p, os.path.getsize(p) // 2)
    elif kind == "grow":
        with open(p, "ab") as f:
            f.write(b"GROWN" * 100)
    elif kind == "grow-past-stream":
        with open(p, "ab") as f:
            f.write(b"G" * (P.STREAM_AT + 1024))
    elif kind in ("same-size", "same-size-old-mtime"):
        st = os.stat(p)
        data = open(p, "rb").read()
        with open(p, "r+b") as f:
            f.write(bytes(255 - b for b in data))
        if kind == "same-size-old-mtime":
            os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    elif kind == "rename-over":
        tmp = p + ".new"
        with open(tmp, "wb") as f:
            f.write(b"RENAMED-" + os.urandom(50))
        os.rename(tmp, p)
    elif kind == "fifo":
        os.unlink(p); os.mkfifo(p)
    elif kind == "folder":
        os.unlink(p); os.mkdir(p)
    elif kind == "socket":
        os.unlink(p)
        s = socket.socket(socket.AF_UNIX); s.bind(p); s.close()
    elif kind == "device":
        os.unlink(p); os.mknod(p, 0o644 | stat.S_IFCHR, os.makedev(1, 5))
    elif kind == "link-out":
        os.unlink(p); os.symlink(outside, p)
    elif kind == "folder-unreadable":
        os.chmod(os.path.dirname(p), 0)
    elif kind == "file-unreadable":
        os.chmod(p, 0)
    else:
        raise ValueError(kind)
"""


def under_pack_case(h: ModuleType, kind: str, big: bool = False) -> CaseFn:
    """A source changed after pack listed it and before it read it: pack fails naming the
    file (exit 3 with its error), or packs bytes that were that file's at some point (the
    new ones for a change it reads), never another file's (a link out of the tree) and
    never a mix; the others are packed exactly."""

    def run(tmp: Path) -> str:
        src = tmp / "src"
        (src / "sub").mkdir(parents=True)
        size = (5 << 20) if big else 3000
        truth = {}
        for i in range(6):
            data = f"{i:03d}-".encode() + os.urandom(size + i)
            name = f"sub/s{i}.bin" if i % 2 else f"s{i}.bin"
            (src / name).write_bytes(data)
            truth[name] = data
        outside = tmp / "secret.bin"
        outside.write_bytes(b"SECRET-OUTSIDE-THE-TREE")
        victim = "sub/s3.bin"
        prefix = None
        if kind in ("folder-unreadable", "file-unreadable"):
            if not h.can_drop_caps():
                raise h.Skip("needs setpriv as root to make a folder unreadable")
            prefix = h.NO_DAC
        if kind == "device" and os.geteuid() != 0:
            raise h.Skip("mknod needs root")
        res = r12.child(h, UNDER_PACK, str(src), str(tmp / "out"), kind, victim, str(outside), prefix=prefix)
        h._chmod_back(src)
        how, got = r12.verdict(h, res, "s3.bin", "/sub/" if kind == "folder-unreadable" else "s3.bin")
        if how == "error":
            if (tmp / "out" / "manifest.json").exists():
                raise h.Failure(f"failed ({got}) but a manifest was written")
            return got
        import feedline

        ds = feedline.open_dataset(tmp / "out", verify=True)
        packed = {ds[i]["__key__"]: bytes(ds[i]["bin"]) for i in range(len(ds))}
        now = (src / victim).read_bytes() if (src / victim).is_file() else None
        for name, data in truth.items():
            key = name[:-4]
            if name == victim:
                if key in packed and packed[key] not in (data, now):
                    raise h.Failure(f"{victim} packed as {packed[key][:24]!r}: neither its old nor new bytes")
                if key in packed and b"SECRET" in packed[key]:
                    raise h.Failure("a link out of the tree, made after the listing, was followed")
                if key not in packed and kind not in ("delete", "fifo", "folder", "socket", "device", "link-out"):
                    raise h.Failure(f"{victim} left out without an error")
            elif packed.get(key) != data:
                raise h.Failure(f"{name}: packed {packed.get(key, b'')[:16]!r}")
        if kind in ("same-size", "same-size-old-mtime", "rename-over", "grow", "truncate-half") \
                and packed.get(victim[:-4]) != now:
            raise h.Failure(f"{victim}: the bytes listed, not those read ({kind})")
        return f"{len(packed)} packed, {victim} {'as now' if packed.get(victim[:-4]) == now else 'left out'}"

    return run


def case_names_case(h: ModuleType, how: str) -> CaseFn:
    """Names differing only by case: distinct files stay distinct samples or fields (or
    the pack fails naming them); no payload is lost or replaced by another's."""

    def run(tmp: Path) -> str:
        src = tmp / "src"
        src.mkdir()
        names = {"keys": ["Photo.bin", "photo.bin", "PHOTO.bin"],
                 "fields": ["a.JPG", "a.jpg", "a.Jpg"],
                 "folders": ["Cat/x.jpg", "cat/x.jpg"],
                 "ext-only": ["b.BIN", "b.bin"]}[how]
        truth = {}
        for n in names:
            (src / n).parent.mkdir(parents=True, exist_ok=True)
            data = n.encode() + os.urandom(40)
            (src / n).write_bytes(data)
            truth[n] = data
        args = ["--labels", "from-folder"] if how == "folders" else []
        res = h.cli("pack", str(src), "--out", str(tmp / "out"), "-q", *args)
        verdict = h.cli_clean(res, codes=(0, 1, 2), names=tuple(n.split("/")[-1] for n in names))
        if res.returncode:
            return verdict
        got = h.payloads(tmp / "out")
        missing = [n for n, d in truth.items() if d not in got]
        if missing:
            raise h.Failure(f"lost without an error: {missing} ({verdict})")
        return f"{len(got)} payloads, each a file's"

    return run


def long_path_case(h: ModuleType, depth: int) -> CaseFn:
    """A source whose path is past PATH_MAX (4096 bytes): packed exactly, or skipped and
    named; the rest packed."""

    def run(tmp: Path) -> str:
        src = tmp / "src"
        src.mkdir()
        (src / "short.bin").write_bytes(b"short")
        base = os.open(src, os.O_RDONLY)
        try:
            for _ in range(depth):
                os.mkdir("p" * 250, dir_fd=base)
                nxt = os.open("p" * 250, os.O_RDONLY, dir_fd=base)
                os.close(base)
                base = nxt
            fd = os.open("deep.bin", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=base)
            os.write(fd, b"deep-bytes")
            os.close(fd)
        finally:
            os.close(base)
        res = h.cli("pack", str(src), "--out", str(tmp / "out"), "-q")
        verdict = h.cli_clean(res, codes=(0, 1, 2), names=("deep.bin", "pppp"))
        if res.returncode:
            return verdict
        got = h.payloads(tmp / "out")
        if b"short" not in got:
            raise h.Failure("the short file was lost")
        if b"deep-bytes" not in got and "deep" not in res.stderr.decode(errors="replace"):
            raise h.Failure("the deep file left out without a word")
        return f"{len(got)} payloads: {verdict}"

    return run


# ----------------------------------------------------------------------------- live

LIVE = """
def main():
    ds_dir, worker_type, shm, flag, verify = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5] == "1"
    out = []
    try:
        ds = feedline.open_dataset(ds_dir, verify=verify)
        with feedline.Loader(ds, batch_size=8, workers=2, worker_type=worker_type, shuffle=True, shm_dir=shm,
                             drop_last=False, seed=5) as loader:
            for i, b in enumerate(loader):
                out += [(str(k), bytes(np.asarray(v)).decode()) for k, v in zip(b["__key__"], b["bin"])]
                if i == 3:
                    open(flag, "w").close()
                    while os.path.exists(flag):  # the sweep changes the folder now
                        time.sleep(0.02)
    except FeedlineError as e:
        report(pairs=out, error=type(e).__name__ + ": " + " ".join(str(e).split())[:300])
        return
    report(pairs=out, error=None)
"""


def live_case(h: ModuleType, worker_type: str, how: str, verify: bool = False) -> CaseFn:
    """The dataset a running Loader reads, changed after its 4th batch: every sample
    delivered is its own old bytes, or the pass ends in an error naming a shard; never
    another's bytes, never a silent short epoch."""

    def run(tmp: Path) -> str:
        r12._pack_numbers(h, tmp / "a", tmp / "ds", 300, None, "A", "16KiB")
        shards = sorted((tmp / "ds").glob("*.tar"))
        return r12.read_while_changed(h, LIVE, [str(tmp / "ds"), worker_type, str(tmp), "1" if verify else "0"],
                                      tmp / "go", lambda: _change_live(h, tmp, shards, how))

    return run


def _change_live(h: ModuleType, tmp: Path, shards: list[Path], how: str) -> None:
    if how == "truncate-all":
        for s in shards:
            os.truncate(s, os.path.getsize(s) // 3)
    elif how == "delete-all":
        for s in shards:
            s.unlink()
    elif how == "rename-over-all":  # same names and sizes, other bytes (B for A)
        r12._pack_numbers(h, tmp / "b", tmp / "other", 300, None, "B", "16KiB")
        for s in shards:
            os.rename(tmp / "other" / s.name, s)
    elif how == "overwrite-in-place":  # the bytes of every shard rewritten where they are
        r12._pack_numbers(h, tmp / "b", tmp / "other", 300, None, "B", "16KiB")
        for s in shards:
            with open(s, "r+b") as f:
                f.write((tmp / "other" / s.name).read_bytes())
    elif how == "repack-other-layout":  # a concurrent pack of other content, other shard sizes
        src = tmp / "b"
        src.mkdir()
        for i in range(500):
            (src / f"s{i:05d}.bin").write_bytes(f"B{i:05d}".encode().ljust(100 + (i * 53) % 900, b"."))
        res = h.cli("pack", str(src), "--out", str(tmp / "ds"), "-q", "--shard-size", "40KiB")
        h.cli_clean(res, codes=(0,))
    else:
        raise ValueError(how)


# ----------------------------------------------------------------------------- squeeze

ONE_CORE = """
def main():
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    from faults_helpers import Numbers
    got = []
    for wt in ("thread", "process"):
        with feedline.Loader(Numbers(200), batch_size=8, workers=4, worker_type=wt, shuffle=True, seed=1,
                             shm_dir=sys.argv[1]) as loader:
            got.append(sorted(int(v) for b in loader for v in b["y"].tolist()))
    report(ok=all(g == list(range(200)) for g in got), cores=len(os.sched_getaffinity(0)), after=usage(sys.argv[1]))
"""

MANY_LOADERS = """
def main():
    from faults_helpers import Numbers
    wt = sys.argv[2]
    before = usage(sys.argv[1])
    loaders = [feedline.Loader(Numbers(32), batch_size=4, workers=1, worker_type=wt, seed=i, shm_dir=sys.argv[1])
               for i in range(50)]
    its = [iter(l) for l in loaders]
    firsts = [next(it) for it in its]  # 50 started at once
    bad = [i for i, b in enumerate(firsts) if len(b["y"]) != 4]
    rest = [sorted([int(v) for v in f["y"].tolist()] + [int(v) for b in it for v in b["y"].tolist()]) for f, it in zip(firsts, its)]
    del firsts, its
    for l in loaders:
        l.close()
    del loaders
    gc.collect()
    time.sleep(0.5)
    after = usage(sys.argv[1])
    report(bad=bad, whole=all(r == list(range(32)) for r in rest), before=before, after=after)
"""

NESTED = """
class Outer:
    def __init__(self, wt):
        self.wt = wt
    def __len__(self):
        return 8
    def __getitem__(self, i):
        from faults_helpers import Numbers
        with feedline.Loader(Numbers(8), batch_size=4, workers=1, worker_type=self.wt, seed=i) as inner:
            total = sum(int(v) for b in inner for v in b["y"].tolist())
        return {"i": i, "total": total}

def main():
    sys.modules["__main__"].Outer = Outer
    inner_wt, outer_wt = sys.argv[2], sys.argv[3]
    with feedline.Loader(Outer(inner_wt), batch_size=2, workers=2, worker_type=outer_wt, shuffle=False,
                         shm_dir=sys.argv[1]) as loader:
        got = [(int(i), int(t)) for b in loader for i, t in zip(b["i"].tolist(), b["total"].tolist())]
    report(got=got, after=usage(sys.argv[1]))
"""

NOFILE_TEXT = """
def main():
    from feedline import text
    d = sys.argv[2]
    docs = [[ord(c) % 200 for c in s] for s in text.documents(d)]
    counts = text.write_token_blocks(docs, sys.argv[3], block=16, eot=0, shard_size="2KiB")
    ds = feedline.open_dataset(sys.argv[3])
    with feedline.Loader(ds, batch_size=4, workers=2, worker_type=sys.argv[4], shuffle=False,
                         drop_last=False, shm_dir=sys.argv[1]) as loader:
        rows = [r.tolist() for b in loader for r in b["tokens.npy"]]
    stream = [t for d in docs for t in (*d, 0)]
    want = [stream[k * 16:k * 16 + 17] for k in range((len(stream) - 1) // 16)]
    report(right=rows == want, blocks=counts["blocks"], shards=len([n for n in os.listdir(sys.argv[3]) if n.endswith(".tar")]))
"""


def squeeze_case(h: ModuleType, what: str, *args: str) -> CaseFn:
    def run(tmp: Path) -> str:
        import resource

        shm = tmp / "shm"
        shm.mkdir()
        limits = None
        body = {"one-core": ONE_CORE, "many": MANY_LOADERS, "nested": NESTED, "nofile-text": NOFILE_TEXT}[what]
        extra = list(args)
        if what == "nofile-text":
            corpus = tmp / "corpus"
            corpus.mkdir()
            for i in range(300):
                (corpus / f"d{i:03d}.txt").write_text(f"document {i} " * (i % 7 + 1))
            extra = [str(corpus), str(tmp / "tokens"), *args]
            limits = {resource.RLIMIT_NOFILE: 64}
        res = r12.child(h, body, str(shm), *extra, timeout=240, limits=limits)
        kind, got = r12.verdict(h, res, "RLIMIT_NOFILE", "open files", "ulimit", "daemonic", "worker_type")
        r12._no_arenas(h, shm)
        if kind == "error":
            if what in ("one-core", "many", "nofile-text"):
                raise h.Failure(got)
            return got
        if what == "one-core":
            if not got["ok"] or got["cores"] != 1:
                raise h.Failure(f"{got}")
            return "both worker kinds, one core: every sample once"
        if what == "many":
            if got["bad"] or not got["whole"]:
                raise h.Failure(f"{got}")
            grew = {k: got["after"][k] - got["before"][k] for k in ("fds", "tasks", "children")}
            if any(v > 2 for v in grew.values()):
                raise h.Failure(f"50 loaders closed, yet left {grew}")
            return f"50 loaders, each its epoch; after close {grew}"
        if what == "nested":
            want = [[i, sum(range(8))] for i in range(8)]
            if got["got"] != want:
                raise h.Failure(f"{got['got']}")
            return "nested loaders, right totals"
        if not got["right"]:
            raise h.Failure(f"token blocks read back wrong under 64 descriptors: {got}")
        return f"{got['blocks']} blocks in {got['shards']} shards, right, with 64 descriptors"

    return run


def shm_nearly_full_case(h: ModuleType, worker_type: str, free_kib: int) -> CaseFn:
    """``shm_dir`` a tmpfs filled by someone else up to ``free_kib`` KiB: the epoch, or a
    ``ResourceError`` naming the folder; the other file there untouched, no arena left."""

    def run(tmp: Path) -> str:
        if os.geteuid() != 0:
            raise h.Skip("mounting a tmpfs needs root")
        mnt = tmp / "shm"
        mnt.mkdir()
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mnt)],
                          capture_output=True).returncode != 0:
            raise h.Skip("cannot mount a tmpfs here")
        try:
            free = shutil.disk_usage(mnt).free
            (mnt / "other").write_bytes(b"o" * (free - free_kib * 1024))
            body = """
def main():
    from faults_helpers import Numbers
    with feedline.Loader(Numbers(96), batch_size=16, workers=2, worker_type=sys.argv[2], shuffle=False,
                         shm_dir=sys.argv[1]) as loader:
        got = [int(v) for b in loader for v in b["y"].tolist()]
    report(keys=got)
"""
            res = r12.child(h, body, str(mnt), worker_type)
            kind, got = r12.verdict(h, res, "shm", "shared memory", str(mnt))
            r12._no_arenas(h, mnt)
            if (mnt / "other").stat().st_size != free - free_kib * 1024:
                raise h.Failure("the other file in the folder changed")
        finally:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
        if kind == "ok":
            if got["keys"] != list(range(96)):
                raise h.Failure(f"an epoch of {len(got['keys'])} samples")
            return "the epoch, right"
        return got

    return run


# ----------------------------------------------------------------------------- diag-hostile

TRAIN = f"""
import os, sys, time
sys.path[:0] = [{str(ROOT / 'src')!r}, {str(FAULTS)!r}]
import feedline
from faults_helpers import Numbers

def train(steps=24, label=""):
    loader = feedline.Loader(Numbers(4 * steps), batch_size=4, workers=1, seed=0)
    n = 0
    for b in loader:
        time.sleep(0.004)
        n += 1
    loader.close()
    if label != "blind":
        print("TRAINED", label, n, flush=True)
    return n
"""

_DIAG: dict[str, tuple[str, int]] = {  # script body after TRAIN, expected exit status
    "fork-child-exits-hard": ("""
train()
pid = os.fork()
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
""", 0),
    "fork-child-sys-exit": ("""
train()
pid = os.fork()
if pid == 0:
    sys.exit(0)  # runs the inherited atexit hooks in the child
os.waitpid(pid, 0)
train(label="again")
""", 0),
    "fork-child-trains": ("""
pid = os.fork()
if pid == 0:
    train(label="child")
    os._exit(0)
train()
os.waitpid(pid, 0)
""", 0),
    "setsid": ("os.setsid()\ntrain()\n", 0),
    "close-fds-0-2": ("""
train()
for fd in (0, 1, 2):
    os.close(fd)
train(label="blind")
""", 0),
    "chdir": ("import tempfile\nos.chdir(tempfile.gettempdir())\ntrain()\nos.chdir('/')\n", 0),
    "sys-exit-message": ("train()\nsys.exit('stopping: the loss went NaN')\n", 1),
    "sys-exit-none": ("train()\nsys.exit(None)\n", 0),
    "sys-exit-big": ("train()\nsys.exit(300)\n", 300 & 0xFF),
    "os-exit-5": ("train()\nsys.stdout.flush()\nos._exit(5)\n", 5),
    "own-signal-handlers": ("""
import signal
seen = []
signal.signal(signal.SIGINT, lambda *a: seen.append("int"))
signal.signal(signal.SIGTERM, lambda *a: seen.append("term"))
train()
os.kill(os.getpid(), signal.SIGTERM)
os.kill(os.getpid(), signal.SIGINT)
time.sleep(0.1)
print("HANDLED", seen, flush=True)
sys.exit(0 if seen == ["term", "int"] else 9)
""", 0),
    "sigterm-ignored": ("import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntrain()\n", 0),
    "pool-fork": ("""
import multiprocessing as mp
def sq(x):
    return x * x
train()
with mp.get_context("fork").Pool(3) as pool:
    assert sum(pool.map(sq, range(100))) == 328350
train(label="after-pool")
""", 0),
    "pool-spawn": ("""
import multiprocessing as mp
def sq(x):
    return x * x
if __name__ == "__main__":
    train()
    with mp.get_context("spawn").Pool(2) as pool:
        assert sum(pool.map(sq, range(100))) == 328350
""", 0),
    "exec-at-end": ("train()\nsys.stdout.flush()\nos.execv('/bin/sh', ['sh', '-c', 'echo EXECED; exit 4'])\n", 4),
    "exec-into-training": ("# LAUNCH: a launcher that execs the training program (TRAIN, then train())\n"
                           "os.execv(sys.executable, [sys.executable, '-c', "
                           "open(__file__).read().split('# ' + 'LAUNCH')[0] + 'train()'])\n", 0),
    "exec-fails-caught": ("train()\ntry:\n    os.execv('/nonexistent/program', ['x'])\nexcept OSError:\n"
                          "    pass\ntrain(48, label='after')\n", 0),
    "exec-python-at-end": ("train()\nsys.stdout.flush()\n"
                           "os.execv(sys.executable, [sys.executable, '-c', 'print(\"EXECED\")'])\n", 0),
}


def diag_case(h: ModuleType, kind: str) -> CaseFn:
    """``feedline diagnose`` over a script that does something odd: its exit status
    passed on (1 for ``sys.exit("msg")``, the message on stderr), a JSON report that
    counts the training steps that ran, no hang, no process of the run left behind."""

    def run(tmp: Path) -> str:
        body, code = _DIAG[kind]
        script = tmp / "train.py"
        script.write_text(TRAIN + body)
        report = tmp / "r.json"
        res = h.cli("diagnose", "--quiet", "--json", str(report), "--", sys.executable, str(script),
                    timeout=180, cwd=tmp)
        out = res.stdout.decode(errors="replace")
        err = res.stderr.decode(errors="replace")
        if "Traceback" in err:
            raise h.Failure(f"traceback (exit {res.returncode}): {err[-800:]}")
        if res.returncode != code:
            raise h.Failure(f"exit {res.returncode}, expected {code}: {out[-300:]} {err[-500:]}")
        if kind == "sys-exit-message" and "the loss went NaN" not in err:
            raise h.Failure(f"the script's exit message is lost: {err[-300:]}")
        if kind.endswith("-at-end") and "EXECED" not in out:
            raise h.Failure("the program exec'd never ran")
        if not report.exists():
            raise h.Failure(f"no report written (exit {res.returncode}): {err[-400:]}")
        doc = json.loads(report.read_text())
        if not doc.get("steps") or doc["steps"] < (44 if kind == "exec-fails-caught" else 20):
            raise h.Failure(f"the report counts {doc.get('steps')} steps of 24+: {err[-300:]}")
        left = _left_behind(str(script))
        if left:
            raise h.Failure(f"processes of the run left: {left}")
        return f"exit {res.returncode}, {doc['steps']} steps reported"

    return run


def _left_behind(script: str) -> list[str]:
    time.sleep(0.2)
    left = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if script in cmd:
            left.append(f"{pid}: {cmd[:80]}")
            try:
                os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass
    return left


def diag_sigterm_case(h: ModuleType) -> CaseFn:
    """SIGTERM to ``feedline diagnose`` while the script's own SIGTERM handler stops its
    loop cleanly: the script's exit status, its steps reported, nothing left running."""

    def run(tmp: Path) -> str:
        script = tmp / "train.py"
        script.write_text(TRAIN + """
import signal
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
loader = feedline.Loader(Numbers(100000), batch_size=4, workers=1, seed=0)
n = 0
for b in loader:
    time.sleep(0.004)
    n += 1
    if n == 30:
        print("READY", flush=True)
    if stop:
        break
loader.close()
print("STOPPED", n, flush=True)
sys.exit(0)
""")
        report = tmp / "r.json"
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        proc = subprocess.Popen([sys.executable, "-m", "feedline", "diagnose", "--quiet", "--json", str(report), "--",
                                 sys.executable, str(script)], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
        try:
            assert proc.stdout is not None
            t0 = time.monotonic()
            while time.monotonic() - t0 < 120:
                line = proc.stdout.readline()
                if not line or b"READY" in line:
                    break
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise h.Failure("hang: diagnose did not end after SIGTERM") from None
        if b"Traceback" in err:
            raise h.Failure(f"traceback: {err[-600:]!r}")
        if b"STOPPED" not in out:
            raise h.Failure(f"the script's handler did not run (exit {proc.returncode}): {err[-300:]!r}")
        if proc.returncode != 0:
            raise h.Failure(f"exit {proc.returncode}, the script exited 0")
        doc = json.loads(report.read_text()) if report.exists() else {}
        if not doc.get("steps") or doc["steps"] < 25:
            raise h.Failure(f"report steps {doc.get('steps')}")
        left = _left_behind(str(script))
        if left:
            raise h.Failure(f"processes of the run left: {left}")
        return f"exit 0, {doc['steps']} steps reported"

    return run


def cases(h: ModuleType) -> list[tuple[str, str, CaseFn]]:
    out: list[tuple[str, str, CaseFn]] = []
    for kind in _TEXT_CORPORA:
        out.append(("text", f"documents-{kind}", text_case(h, kind)))
    for kind in ("no-documents", "too-few-tokens", "strings-not-ids", "negative-ids", "float-ids", "nested-ids",
                 "generator-fails", "out-is-a-file", "roundtrip-bom-crlf"):
        out.append(("text", f"token-blocks-{kind}", token_blocks_case(h, kind)))
    for kind in ("mixed-dtypes", "mixed-dtypes-int-big", "mixed-ranks", "zero-length-one", "zero-length-all",
                 "scalar-in-padded", "text-in-padded", "none-in-padded", "field-missing-in-one", "field-added-in-one",
                 "padded-field-missing", "negative-pad-length", "pad-length-not-int", "unpadded-ragged",
                 "axis-out-of-range", "cut-to-length"):
        out.append(("pad", kind, pad_case(h, kind)))
    for wt in ("thread", "process"):
        out.append(("pad", f"loader-{wt}-field-missing", pad_loader_case(h, wt, 9)))
    out.append(("pad", "loader-process-right", pad_loader_case(h, "process", -1)))
    for kind in _LENGTHS:
        out.append(("lengths", kind, lengths_case(h, kind)))
    out.append(("lengths", "all-equal-2-ranks", lengths_case(h, "all-equal", 2)))
    out.append(("lengths", "huge-3-ranks", lengths_case(h, "huge", 3)))
    for other in ("reversed", "none", "same-values-other-list", "one-changed"):
        out.append(("lengths", f"state-from-{other}", lengths_state_case(h, other)))
    for call in ("labels:cls", "labels:jpg", "labels:txt", "labels:__key__", "labels:nope", "labels:none",
                 "labels:int", "sizes:jpg", "sizes:txt", "sizes:cls", "sizes:__key__", "sizes:none", "sizes:bytes"):
        out.append(("lengths", f"ds-{call.replace(':', '-')}", labels_sizes_case(h, call)))
    for kind in ("delete", "truncate-0", "truncate-half", "grow", "grow-past-stream", "same-size",
                 "same-size-old-mtime", "rename-over", "fifo", "folder", "socket", "device", "link-out",
                 "folder-unreadable", "file-unreadable"):
        out.append(("under-pack", kind, under_pack_case(h, kind)))
    for kind in ("delete", "truncate-half", "grow", "same-size", "link-out"):
        out.append(("under-pack", f"big-{kind}", under_pack_case(h, kind, big=True)))
    for how in ("keys", "fields", "folders", "ext-only"):
        out.append(("under-pack", f"case-only-{how}", case_names_case(h, how)))
    out.append(("under-pack", "path-4k", long_path_case(h, 17)))
    for wt in ("thread", "process"):
        for how in ("truncate-all", "delete-all", "rename-over-all", "repack-other-layout"):
            out.append(("live", f"{how}-{wt}", live_case(h, wt, how)))
    out.append(("live", "overwrite-in-place-thread-verify", live_case(h, "thread", "overwrite-in-place", True)))
    out.append(("live", "overwrite-in-place-process-verify", live_case(h, "process", "overwrite-in-place", True)))
    out.append(("squeeze", "one-core", squeeze_case(h, "one-core")))
    for wt in ("thread", "process"):
        out.append(("squeeze", f"50-loaders-{wt}", squeeze_case(h, "many", wt)))
        out.append(("squeeze", f"nofile-64-text-{wt}", squeeze_case(h, "nofile-text", wt)))
        out.append(("squeeze", f"shm-nearly-full-{wt}", shm_nearly_full_case(h, wt, 256)))
    for inner, outer in (("thread", "thread"), ("thread", "process"), ("process", "thread"), ("process", "process"),
                         ("auto", "process")):
        out.append(("squeeze", f"nested-{inner}-in-{outer}", squeeze_case(h, "nested", inner, outer)))
    for kind in _DIAG:
        out.append(("diag-hostile", kind, diag_case(h, kind)))
    out.append(("diag-hostile", "sigterm-to-diagnose-script-handles-it", diag_sigterm_case(h)))
    return out
