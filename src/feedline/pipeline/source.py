"""Adapt what the user passes to :class:`feedline.Loader` to one small interface.

Two kinds of dataset are accepted:

* a feedline ``PackedDataset`` (anything with ``read_many`` and ``locate``):
  samples are read in batches through its read planner and decoded by field
  extension;
* any map-style dataset (``len`` and ``__getitem__``, e.g. a
  ``torch.utils.data.Dataset``): samples are used as returned; a ``Subset`` of a
  packed dataset (``random_split``) is read as packed (:func:`packed_subset`). A
  dataset with ``__getitems__`` (torch's batched fetch, which DataLoader calls:
  HF datasets, ``Subset``, users' own) is asked for a batch's samples in one call;
  a ``TensorDataset`` is read by rows (:mod:`feedline.pipeline.tensor_rows`).

A source is picklable when its dataset is (process workers reopen it).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from feedline.errors import ArgumentError
from feedline.pipeline import tensor_rows


@dataclass(slots=True)
class Item:
    """One fetched sample, or the exception that fetching it raised."""

    index: int
    key: str
    shard: str | None
    value: Any = None
    error: BaseException | None = None


def is_packed(dataset: Any) -> bool:
    """True for a feedline PackedDataset (batched reads + shard/key location)."""
    return callable(getattr(dataset, "read_many", None)) and callable(
        getattr(dataset, "locate", None)
    )


def packed_subset(dataset: Any) -> Any:
    """A ``torch.utils.data.Subset`` (``random_split``'s result) of a packed dataset as a
    ``feedline.io.PackedSubset``, read and decoded as packed; anything else as it is."""
    if not any(c.__name__ == "Subset" for c in type(dataset).__mro__):
        return dataset  # checked by name: neither torch nor feedline.io is imported here
    from feedline.io._subset import as_packed_subset

    return as_packed_subset(dataset)


def _is_iterable_dataset(dataset: Any) -> bool:
    """A ``torch.utils.data.IterableDataset`` (checked without importing torch), or any
    object that iterates but cannot be indexed."""
    names = {c.__name__ for c in type(dataset).__mro__}
    return "IterableDataset" in names or (
        hasattr(dataset, "__iter__") and not hasattr(dataset, "__getitem__"))


class Source:
    """Fetch samples by index from a packed or map-style dataset.

    Args:
        dataset: a PackedDataset or a map-style dataset.

    Raises:
        ArgumentError: ``dataset`` has neither ``read_many`` nor ``len`` + ``__getitem__``.
    """

    def __init__(self, dataset: Any) -> None:
        if not is_packed(dataset) and _is_iterable_dataset(dataset):
            raise ArgumentError(
                f"dataset {type(dataset).__name__} is a stream (an IterableDataset or a "
                "generator: no indexing), and Loader orders, shards across ranks and resumes "
                "by sample index", field="dataset",
                fix="keep your DataLoader over the stream and add the copy-stream prefetch "
                "with feedline.wrap(DataLoader(dataset, ...)); or write the stream into shards "
                "once (feedline pack) and give Loader the folder")
        if not is_packed(dataset) and not (
            hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")
        ):
            raise ArgumentError(
                "dataset must be a feedline PackedDataset, a path to one, or a map-style "
                f"dataset (len + __getitem__), got {type(dataset).__name__}", field="dataset"
            )
        self.dataset = dataset
        self.packed = is_packed(dataset)
        self._columns: tuple[tuple[Any, ...], Any] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_columns": None}  # the tensors travel once, in the dataset

    def __len__(self) -> int:
        return len(self.dataset)

    @property
    def fingerprint(self) -> str:
        """A stable id of the dataset, stored in loader state and checked on load."""
        fp = getattr(self.dataset, "fingerprint", None)
        if fp is not None:
            return str(fp)
        return f"{type(self.dataset).__qualname__}:{len(self.dataset)}"

    def locate(self, index: int) -> tuple[str | None, str]:
        """(shard, key) of sample ``index``; map-style datasets have no shard."""
        if self.packed:
            shard, key = self.dataset.locate(index)
            return str(shard), str(key)
        return None, str(index)

    def fetch(self, indices: Sequence[int]) -> list[Item]:
        """Read ``indices``; a failing sample yields an Item with ``error`` set.

        Packed samples are memoryviews valid until the next ``fetch`` on this
        thread: decode or copy them first.
        """
        if not self.packed:
            return self._fetch_batched(indices) or self._fetch_each(indices)
        try:
            samples = self.dataset.read_many(list(indices))
        except Exception:
            # Isolate the failing sample(s) by reading one at a time.
            return [self._fetch_one(i) for i in indices]
        # the shard is looked up only when an error needs to name it (see shard_of)
        return [Item(i, str(s["__key__"]) if "__key__" in s else str(i), None, s)
                for i, s in zip(indices, samples, strict=True)]

    @property
    def fields(self) -> list[str]:
        """The field names a packed dataset declares (its manifest); empty for map-style ones."""
        names = getattr(self.dataset, "fields", None) if self.packed else None
        return [str(n) for n in names] if isinstance(names, (list, tuple)) else []

    @property
    def columnar(self) -> bool:
        """True when fixed-size fields can be read straight into host rows (:meth:`read_columns`)
        and single fields read into host memory (:meth:`read_fields`)."""
        if not self.packed or not all(callable(getattr(self.dataset, name, None))
                                      for name in ("read_fields_into", "read_fields")):
            return False
        backend = getattr(self.dataset, "backend", None)
        return getattr(backend, "name", None) != "gds"  # gds reads into device memory

    def read_columns(self, indices: Sequence[int], out: dict[str, Any]) -> list[str]:
        """Read field ``f`` of each sample into row ``i`` of ``out[f]``; the samples' keys.

        See ``PackedDataset.read_fields_into``; raises as it does (a sample that does not
        fit its row, a read or checksum error).
        """
        return list(self.dataset.read_fields_into(list(indices), out))

    def read_fields(self, indices: Sequence[int], fields: Sequence[str]
                    ) -> tuple[list[str], dict[str, list[Any]]]:
        """The samples' keys and, per field, one byte view per sample (``None`` where it is
        missing): only ``fields`` are read (see ``PackedDataset.read_fields``); raises as
        it does."""
        return self.dataset.read_fields(indices, fields)

    @property
    def can_gather(self) -> bool:
        """True when integer label fields can be gathered from the index (:meth:`gather`)."""
        return self.packed and callable(getattr(self.dataset, "gather_labels", None))

    @property
    def column_fields(self) -> Mapping[str, Any]:
        """Fields the index holds as columns beyond labels (schema ``column``: small raw /
        npy values), name -> schema entry; empty when the dataset cannot gather them."""
        schema = getattr(self.dataset, "schema", None) if self.packed else None
        if not isinstance(schema, Mapping) or not callable(getattr(self.dataset, "gather_columns", None)):
            return {}
        return {name: fs for name, fs in schema.items() if getattr(fs, "column", False)}

    @property
    def label_fields(self) -> frozenset[str]:
        """Fields the dataset's schema holds as integer label columns (kind ``label``: an
        integer in every sample, whatever the field's name: ``cls``, ``label``,
        ``class.txt``...); empty for a dataset without a schema."""
        schema = getattr(self.dataset, "schema", None) if self.packed else None
        if not isinstance(schema, Mapping):
            return frozenset()
        return frozenset(name for name, fs in schema.items() if getattr(fs, "kind", None) == "label")

    @property
    def reads_npy(self) -> bool:
        """True when ``read_columns`` reads ``.npy`` payloads too (datasets with a schema)."""
        return self.columnar and getattr(self.dataset, "schema", None) is not None

    def release_buffers(self) -> None:
        """Let the dataset drop its cached read buffers (see
        ``PackedDataset.release_buffers``); nothing for datasets without them."""
        release = getattr(self.dataset, "release_buffers", None)
        if self.packed and callable(release):
            release()

    def gather(self, indices: Sequence[int], out: dict[str, Any]) -> None:
        """Label or column ``f`` of sample ``indices[i]`` into ``out[f][i]`` (see
        ``PackedDataset.gather_columns``; ``gather_labels`` for a dataset without it)."""
        gather = getattr(self.dataset, "gather_columns", None)
        (gather if callable(gather) else self.dataset.gather_labels)(indices, out)

    def item(self, index: int, key: str) -> Item:
        """An :class:`Item` naming sample ``index`` (for errors raised after its stages)."""
        return Item(index, key, None)

    def shard_of(self, item: Item) -> str | None:
        """The shard of ``item`` (looked up lazily for packed samples)."""
        if item.shard is None and self.packed:
            try:
                return self.locate(item.index)[0]
            except Exception:  # the error being reported matters more than its shard
                return None
        return item.shard

    def file_of(self, item: Item) -> str | None:
        """The file a map-style dataset reads sample ``item`` from, when it keeps the list
        the torchvision way (``samples``/``imgs``: ``(path, class)`` per index, as
        ``ImageFolder`` has; or ``files``), also through a ``Subset`` of one: named in
        errors, where the index alone does not say which photo is broken. None for packed datasets (their key names the sample)."""
        if self.packed:
            return None
        dataset, index = self.dataset, item.index
        try:
            while hasattr(dataset, "indices") and hasattr(dataset, "dataset"):  # random_split's Subset
                dataset, index = dataset.dataset, int(dataset.indices[index])
        except Exception:  # an odd container: the error being reported matters more
            return None
        for name in ("samples", "imgs", "files"):
            table = getattr(dataset, name, None)
            if not isinstance(table, Sequence) or isinstance(table, (str, bytes)):
                continue
            try:
                entry = table[index] if 0 <= index < len(table) else None
            except Exception:  # an odd container: the error being reported matters more
                return None
            first = entry[0] if isinstance(entry, (tuple, list)) and entry else entry
            if isinstance(first, (str, os.PathLike)):
                return os.fspath(first)
        return None

    def _fetch_batched(self, indices: Sequence[int]) -> list[Item] | None:
        """A map-style dataset's ``__getitems__(indices)`` (a list of samples, as torch's
        DataLoader asks for it), or ``None`` when it has none or it fails (the samples are
        then fetched one at a time, which names the failing index)."""
        getitems = getattr(self.dataset, "__getitems__", None)
        if not callable(getitems) or not indices:
            return None
        try:
            samples = getitems(list(indices))
            if not isinstance(samples, (list, tuple)) or len(samples) != len(indices):
                return None  # torch hands any other value to collate_fn; one at a time here
            return [Item(i, str(i), None, s) for i, s in zip(indices, samples, strict=True)]
        except Exception:  # whatever it raised is raised again, with its index, one at a time
            return None

    def tensor_columns(self) -> tuple[tuple[Any, ...], Any] | None:
        """The tensors of a ``TensorDataset`` (through ``Subset`` s of one) that batches can
        take by rows, found once per process (:func:`.tensor_rows.columns`); else None."""
        if self.packed:
            return None
        if self._columns is None:
            self._columns = tensor_rows.columns(self.dataset) or ((), None)
        return self._columns if self._columns[0] else None

    def take_rows(self, indices: Sequence[int], out: Mapping[int, Any]) -> list[str]:
        """Rows ``indices`` of tensor ``i`` into ``out[i]``; the samples' keys (see
        :func:`.tensor_rows.take`).

        Raises:
            LookupError: the dataset is no tensor dataset; IndexError: an index outside it.
        """
        found = self.tensor_columns()
        if found is None:
            raise LookupError(f"{type(self.dataset).__name__} is no TensorDataset")
        tensor_rows.take(found, indices, out)
        return [str(i) for i in indices]

    def _fetch_each(self, indices: Sequence[int]) -> list[Item]:
        """A map-style dataset's ``dataset[i]`` for each index, in one loop (no shard to
        locate: 0.8 us a sample less than :meth:`_fetch_one`, which a dataset of 16-byte
        records returning 4 numbers in 3 us felt)."""
        get, items = self.dataset.__getitem__, []
        for i in indices:
            try:
                items.append(Item(i, str(i), None, get(i)))
            except Exception as exc:
                items.append(Item(i, str(i), None, error=exc))
        return items

    def _fetch_one(self, index: int) -> Item:
        try:
            shard, key = self.locate(index)
        except Exception as exc:
            return Item(index, str(index), None, error=exc)
        try:
            return Item(index, key, shard, self.dataset[index])
        except Exception as exc:
            return Item(index, key, shard, error=exc)
