"""Text for language-model pretraining: documents -> token blocks in shards -> fixed-length windows.

The recipe (what Hugging Face's ``group_texts`` and nanoGPT's ``train.bin`` do, kept
in checksummed shards that every rank shuffles and resumes from)::

    import feedline
    from feedline import text

    docs = text.documents("corpus/")        # .jsonl/.json "text" fields, .txt files, .parquet
    text.write_token_blocks((encode(d) for d in docs), "data/tokens", block=1024, eot=0)

    loader = feedline.Loader("data/tokens", batch_size=12, seed=0, process_group=group)
    for batch in loader:                     # batch["tokens.npy"]: uint16[12, 1025]
        x, y = text.inputs_targets(batch)    # int64[12, 1024] each: y is x shifted by one

- :func:`documents` reads the documents of files and folders, one string each.
- :func:`write_token_blocks` concatenates tokenised documents (``eot`` after each),
  cuts the stream into blocks of ``block + 1`` tokens that overlap by one token, so
  every token but the first is a target exactly once an epoch, and writes them with
  :class:`feedline.DatasetWriter` as one ``tokens.npy`` field: a fixed-size array the
  loader reads straight into the batch (no per-sample Python).
- :func:`inputs_targets` splits a batch into the model's inputs and targets.

The blocks are fixed when written; the Loader shuffles them by ``(seed, epoch)``,
gives each rank a disjoint part and resumes mid-epoch from ``state_dict()``.
A window may span the end of one document and the start of the next (separated by
``eot``), as in GPT pretraining. Every window start of one token file instead
(nanoGPT's random starts): the ``Windows`` recipe in docs/pipeline.md.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from feedline.errors import ConfigError

__all__ = ["documents", "inputs_targets", "write_token_blocks"]

FIELD = "tokens.npy"
_LINES = (".jsonl", ".ndjson")
_WHOLE = (".txt", ".md", ".text")
_BOM = b"\xef\xbb\xbf"


def documents(*paths: str | os.PathLike[str], field: str = "text") -> Iterator[str]:
    """Yield the documents of ``paths`` (files, or folders read recursively in sorted order).

    - ``.jsonl`` / ``.ndjson``: one document per line, the line's object's ``field``
      (or the line itself when it is a JSON string); blank lines skipped.
    - ``.json``: a list of such objects or strings.
    - ``.txt`` / ``.md`` / ``.text``: the whole file is one document.
    - ``.parquet``: the ``field`` column, batch by batch (needs ``pyarrow``).

    Files are UTF-8; a leading byte-order mark is dropped, and the characters are kept
    as they are (a CRLF stays CRLF). In a folder, hidden files and other extensions
    are skipped, with one warning naming how many and a few of them.

    Raises:
        ConfigError: a path that does not exist, a file of another type given by name,
            bytes that are not UTF-8, a line that is not JSON or has no ``field`` (naming the file, the line and
            the fields it has).
    """
    skipped: list[str] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            files = sorted(f for f in path.rglob("*") if f.is_file()
                           and not any(part.startswith(".") for part in f.relative_to(path).parts))
            for f in files:
                if _kind(f) is None:
                    skipped.append(str(f.relative_to(path)))
                    continue
                yield from _read_named(f, field)
        elif path.is_file():
            if _kind(path) is None:
                raise ConfigError(f"documents: {str(path)!r} is not .jsonl, .ndjson, .json, .txt, .md or .parquet",
                                  path=str(path), fix="convert it, or read it yourself and pass the strings on")
            yield from _read_named(path, field)
        else:
            raise ConfigError(f"documents: {str(path)!r} does not exist", path=str(path))
    if skipped:
        warnings.warn(f"documents: skipped {len(skipped)} file(s) of other types: {', '.join(skipped[:3])}"
                      f"{', ...' if len(skipped) > 3 else ''}", RuntimeWarning, stacklevel=2)


def _kind(path: Path) -> str | None:
    ext = path.suffix.lower()
    if ext in _LINES:
        return "lines"
    if ext in _WHOLE:
        return "whole"
    return {".json": "json", ".parquet": "parquet"}.get(ext)


def _read_named(path: Path, field: str) -> Iterator[str]:
    """:func:`_read`, with an OS error (a file removed since the listing, unreadable)
    as a ``ConfigError`` naming the file."""
    try:
        yield from _read(path, field)
    except OSError as e:
        raise ConfigError(f"documents: cannot read {str(path)!r}: {e.strerror or e}", path=str(path)) from None


def _read(path: Path, field: str) -> Iterator[str]:
    kind = _kind(path)
    if kind == "whole":
        yield _decoded(path.read_bytes(), path)
    elif kind == "lines":
        with open(path, "rb") as f:
            for number, raw in enumerate(f, 1):
                line = _decoded(raw, path, number)
                if line.strip():
                    yield _text_of(_json_line(line, path, number), field, path, number)
    elif kind == "json":
        try:
            items = json.loads(_decoded(path.read_bytes(), path))
        except json.JSONDecodeError as e:
            raise ConfigError(f"documents: {str(path)!r} is not JSON ({e.msg}, line {e.lineno} column {e.colno})",
                              path=str(path), fix="a JSON list of objects or strings, or one document per line "
                                                  "(.jsonl)") from None
        if not isinstance(items, list):
            raise ConfigError(f"documents: {str(path)!r} holds a JSON {type(items).__name__}, not a list of documents",
                              path=str(path), fix="give a list of objects or strings, or one document per line (.jsonl)")
        for number, item in enumerate(items, 1):
            yield _text_of(item, field, path, number)
    else:
        yield from _parquet(path, field)


def _decoded(raw: bytes, path: Path, line: int | None = None) -> str:
    """``raw`` as UTF-8 text, exactly (CRLF kept), without a leading byte-order mark.

    Raises:
        ConfigError: bytes that are not UTF-8 (a binary file, a Latin-1 text), naming
            the file, the line and the byte offset.
    """
    if line in (None, 1) and raw.startswith(_BOM):
        raw = raw[len(_BOM):]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        where = f"{path}:{line}" if line is not None else repr(str(path))
        raise ConfigError(f"documents: {where} is not UTF-8 text (byte {e.start}: {raw[e.start:e.start + 4]!r}; "
                          "a binary file, or another encoding)", path=str(path),
                          fix="convert it to UTF-8 (iconv -f latin1 -t utf-8), or leave it out of the corpus") from None


def _json_line(line: str, path: Path, number: int) -> Any:
    try:
        return json.loads(line)
    except json.JSONDecodeError as e:
        raise ConfigError(f"documents: {path}:{number} is not JSON ({e.msg})", path=str(path),
                          fix="one JSON object per line") from None


def _text_of(item: Any, field: str, path: Path, number: int) -> str:
    if isinstance(item, str):
        return item
    if not isinstance(item, dict):
        raise ConfigError(f"documents: {path}, record {number} is a JSON {_json_kind(item)}, not an object or a string",
                          path=str(path), fix=f"one object per record, with the text in {field!r}")
    value = item.get(field)
    if not isinstance(value, str):
        problem = f"its {field!r} is a JSON {_json_kind(value)}" if field in item else \
            f"it has no text field {field!r} (it has {sorted(item)})"
        raise ConfigError(f"documents: {path}, record {number}: {problem}",
                          path=str(path), fix="name the text field: documents(..., field='content')")
    return value


def _json_kind(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number")


def _parquet(path: Path, field: str) -> Iterator[str]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ConfigError(f"documents: reading {str(path)!r} needs pyarrow", path=str(path),
                          fix="pip install pyarrow") from None
    table = pq.ParquetFile(path)
    if field not in table.schema_arrow.names:
        raise ConfigError(f"documents: {str(path)!r} has no column {field!r} (it has {table.schema_arrow.names})",
                          path=str(path), fix="name the text column: documents(..., field='content')")
    for batch in table.iter_batches(columns=[field]):
        yield from (v for v in batch.column(0).to_pylist() if v is not None)


def write_token_blocks(docs: Iterable[Sequence[int] | np.ndarray], out: str | os.PathLike[str], *, block: int,
                       eot: int | None = None, dtype: str = "uint16", shard_size: int | str = "1GiB",
                       progress: bool = False) -> dict[str, int]:
    """Write tokenised documents as blocks of ``block + 1`` tokens, one ``tokens.npy`` sample each.

    The documents' tokens are concatenated in order, with ``eot`` after each document
    when given; block ``k`` holds tokens ``[k * block, k * block + block + 1)`` of that
    stream, so neighbouring blocks share one token and every token but the first is a
    target exactly once (:func:`inputs_targets`). The last tokens that do not fill a
    block are left out and counted.

    Args:
        docs: token ids per document (lists or integer arrays), e.g. ``(encode(d) for d in
            documents("corpus/"))``; read once, in order, without holding them all.
        out: the dataset folder (written by :class:`feedline.DatasetWriter`: replaced only
            once complete).
        block: the model's context length (tokens per input window).
        eot: the end-of-text id appended after each document (None: nothing).
        dtype: ``"uint16"`` (vocabularies up to 65,536) or ``"uint32"``/``"int32"``/``"int64"``.
        shard_size, progress: as :class:`feedline.DatasetWriter`'s.

    Returns:
        ``{"documents", "tokens", "blocks", "dropped_tokens"}``.

    Raises:
        ConfigError: ``block`` below 1, an unknown ``dtype``, or a token id that does not
            fit ``dtype`` (naming the document).
    """
    from feedline.format import DatasetWriter

    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise ConfigError(f"write_token_blocks: block must be a positive int, got {block!r}", field="block")
    if dtype not in ("uint16", "uint32", "int32", "int64"):
        raise ConfigError(f"write_token_blocks: dtype must be uint16, uint32, int32 or int64, got {dtype!r}",
                          field="dtype")
    kind = np.dtype(dtype)
    limits = np.iinfo(kind)
    if eot is not None and not limits.min <= eot <= limits.max:
        raise ConfigError(f"write_token_blocks: eot {eot} does not fit {dtype}", field="eot")
    counts = {"documents": 0, "tokens": 0, "blocks": 0, "dropped_tokens": 0}
    pending: list[np.ndarray] = []
    have = 0
    with DatasetWriter(out, shard_size=shard_size, progress=progress) as writer:
        for number, doc in enumerate(docs):
            ids = _ids(doc, number, kind, limits)
            if eot is not None:
                ids = np.append(ids, np.array(eot, kind))
            counts["documents"] += 1
            counts["tokens"] += len(ids)
            pending.append(ids)
            have += len(ids)
            if have > block:
                stream = np.concatenate(pending)
                n = (len(stream) - 1) // block
                for k in range(n):
                    writer.write({"__key__": f"{counts['blocks']:09d}", "tokens": stream[k * block:(k + 1) * block + 1]})
                    counts["blocks"] += 1
                pending = [stream[n * block:]]
                have = len(pending[0])
    counts["dropped_tokens"] = have - (1 if counts["blocks"] else 0)
    return counts


def _ids(doc: Sequence[int] | np.ndarray, number: int, kind: np.dtype, limits: Any) -> np.ndarray:
    arr = np.asarray(doc)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise ConfigError(f"write_token_blocks: document {number} is not a flat list of token ids "
                          f"(got {arr.dtype} of shape {arr.shape})", fix="pass encode(text) for each document")
    if arr.size and (int(arr.min()) < limits.min or int(arr.max()) > limits.max):
        raise ConfigError(f"write_token_blocks: document {number} has a token id outside {kind} "
                          f"({int(arr.min())}..{int(arr.max())})", field="dtype",
                          fix="pass dtype='uint32' for vocabularies above 65,536")
    return arr.astype(kind, copy=False)


def inputs_targets(batch: Mapping[str, Any] | Any, field: str = FIELD) -> tuple[Any, Any]:
    """``(inputs, targets)``: a batch's blocks as int64 ``[B, block]`` tensors, targets shifted by one.

    ``batch`` is the Loader's dict (its ``field``, ``tokens.npy`` by default) or the
    ``[B, block + 1]`` tensor itself. Embedding layers and ``cross_entropy`` want
    int64, so the uint16 blocks are widened here, on the batch's device."""
    tokens = batch[field] if isinstance(batch, Mapping) else batch
    wide = tokens.long()
    return wide[:, :-1], wide[:, 1:]
