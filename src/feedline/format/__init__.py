"""feedline.format: the shard format. Write (pack) and open (validate, locate).

A dataset is a folder with plain POSIX tar shards (``tar`` and WebDataset read
them unchanged), a binary index beside each shard (every member's sample,
field, payload offset, size and checksum, and since format version 2 each
field's schema: :class:`FieldSchema`, raw / npy / label / var; since version 3
the values of small raw / npy fields as columns) and a JSON
``manifest.json`` written last. No pickle anywhere. Imports stdlib, numpy and
xxhash only.

    >>> from feedline.format import pack, read_manifest, load_index
    >>> manifest = pack(["photos/"], "data/", align=4096)      # doctest: +SKIP
    >>> index = load_index("data/", manifest.shards[0])        # doctest: +SKIP
    >>> index.sample_extent(0)                                 # doctest: +SKIP

Data that is not files in folders (HDF5, Parquet, SQL, a Dataset object) is
written from Python with :class:`DatasetWriter` / :func:`pack_samples`.
"""

from feedline.format._adopt import index_tar, index_tars
from feedline.format._checksum import ALGOS, checksum, checksum_function, hexdigest
from feedline.format._index import (
    FORMAT_VERSION,
    HEADER_DTYPE,
    MEMBER_DTYPE,
    READABLE_VERSIONS,
    ShardIndex,
    encode_index,
)
from feedline.format._manifest import (
    DEFAULT_ALIGN,
    MANIFEST_NAME,
    Manifest,
    ShardInfo,
    check_index_count,
    field_stats,
    index_from_bytes,
    load_index,
    parse_manifest,
    read_manifest,
    write_manifest,
)
from feedline.format._pack import PackProgress, PackWarning, pack
from feedline.format._samples import DatasetWriter, encode_value, merge_parts, pack_samples
from feedline.format._schema import FieldSchema
from feedline.format._sources import SourceRules
from feedline.format._tar import split_name
from feedline.format._verify import Problem, inspect, unlisted_files, verify, verify_shard
from feedline.format._writer import FilePayload, ShardWriter

__all__ = [
    "ALGOS",
    "DEFAULT_ALIGN",
    "FORMAT_VERSION",
    "HEADER_DTYPE",
    "MANIFEST_NAME",
    "MEMBER_DTYPE",
    "READABLE_VERSIONS",
    "DatasetWriter",
    "FieldSchema",
    "FilePayload",
    "Manifest",
    "PackProgress",
    "PackWarning",
    "Problem",
    "ShardIndex",
    "ShardInfo",
    "ShardWriter",
    "SourceRules",
    "check_index_count",
    "checksum",
    "checksum_function",
    "encode_index",
    "encode_value",
    "field_stats",
    "hexdigest",
    "index_from_bytes",
    "index_tar",
    "index_tars",
    "inspect",
    "load_index",
    "merge_parts",
    "pack",
    "pack_samples",
    "parse_manifest",
    "read_manifest",
    "split_name",
    "unlisted_files",
    "verify",
    "verify_shard",
    "write_manifest",
]
