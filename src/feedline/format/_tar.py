"""Tar member headers with controlled offsets, and the WebDataset naming rule.

Shards are plain POSIX (pax) tar files. Headers are built with the stdlib
``tarfile.TarInfo.tobuf`` from fixed metadata (mtime, mode, owner), so the same
input gives the same bytes. Alignment padding is a pax ``comment`` record in
the member's own extended header, sized so that the member's payload starts
on the requested boundary: every tar reader skips it.
"""

from __future__ import annotations

import re
import tarfile

from feedline.errors import ConfigError

BLOCK = 512
END_OF_ARCHIVE = b"\0" * (2 * BLOCK)
FIXED_MTIME = 1577836800  # 2020-01-01T00:00:00Z: fixed so reruns give identical bytes
FIXED_MODE = 0o644
_COMMENT_OVERHEAD = len(" comment=\n")
_PAX_RECORD_MIN = 12  # b"12 comment=\n"


def round_up(n: int, multiple: int) -> int:
    """Smallest multiple of ``multiple`` that is >= ``n`` (``multiple`` > 0)."""
    return -(-n // multiple) * multiple


def split_name(name: str) -> tuple[str, str] | None:
    """``"a/000123.cam0.jpg" -> ("a/000123", "cam0.jpg")``; None if there is no field.

    The WebDataset rule: the key runs to the first dot of the last path part.
    A last part without a dot, starting with a dot or ending with it, or a
    name with a newline, has no field.
    """
    slash = name.rfind("/") + 1
    dot = name.find(".", slash)
    if dot <= slash or dot == len(name) - 1 or "\n" in name:
        return None
    return name[:dot], name[dot + 1 :]


KEY_ESCAPE = "percent"
"""The manifest's ``key_escape`` value when each key's last part is stored escaped (see :func:`escape_key_part`)."""


def escape_key_part(name: str) -> str:
    """A key's last part made safe for the WebDataset rule: ``%`` -> ``%25``, ``.`` -> ``%2E``.

    ``frame.000123`` is stored as ``frame%2E000123``, so the member name
    ``frame%2E000123.jpg`` splits back into the same key and field; the
    reader gives the user their own name again with :func:`source_key`.
    """
    return name.replace("%", "%25").replace(".", "%2E")


def source_key(key: str) -> str:
    """The inverse of :func:`escape_key_part` on a stored key's last part (folders stay as stored).

    ``cats/IMG_2023%2E01%2E05`` -> ``cats/IMG_2023.01.05``; a ``%`` followed by
    anything else than ``2E``/``25`` (never written by :func:`escape_key_part`)
    is kept as it is.
    """
    slash = key.rfind("/") + 1
    last = key[slash:]
    if "%" not in last:
        return key
    return key[:slash] + _ESCAPED.sub(lambda m: "." if m.group(1) == "2E" else "%", last)


_ESCAPED = re.compile(r"%(2E|25)")


def check_member_name(key: str, field: str) -> str:
    """The member name ``key.field``, validated so tar and WebDataset agree on it.

    Raises:
        ConfigError: empty parts, newlines, absolute or ``..`` paths, or a name
            that does not split back into the same key and field.
    """
    name = f"{key}.{field}"
    # split_name(name) == (key, field) exactly when the key's last part is a
    # non-empty name without a dot and the field has no "/" (checked directly:
    # this runs once per packed file).
    last = key[key.rfind("/") + 1 :]
    bad = (
        not last
        or "." in last
        or not field
        or "/" in field
        or "\n" in name
        or "\0" in name
        or name.startswith("/")
        or (".." in key and ".." in key.split("/"))
    )
    if bad:
        raise ConfigError(
            f"cannot store member {name!r}: key {key!r} and field {field!r} do not form a "
            "WebDataset name",
            key=key,
            field=field,
            fix="keys are relative paths without dots in the last part; fields have no '/'",
        )
    return name


def _info(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = FIXED_MTIME
    info.mode = FIXED_MODE
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.type = tarfile.REGTYPE
    return info


def _tobuf(info: tarfile.TarInfo) -> bytes:
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


def _pax_size(buf: bytes) -> int:
    # size field of the leading pax ('x') header block
    return int(buf[124:136].rstrip(b"\0 ").decode("ascii") or "0", 8)


_TEMPLATE = _tobuf(_info("x", 0))
_TEMPLATE_SUM = sum(_TEMPLATE[:148]) + sum(_TEMPLATE[156:]) + 8 * ord(" ") - ord("x") - 11 * ord("0")
_MAX_USTAR_SIZE = 8**11


def _fast_header(name: str, size: int) -> bytes | None:
    """The plain ustar header tarfile would write, built from a template (~20x faster).

    Only for ASCII names of at most 100 bytes and sizes below 8 GiB (no pax
    header needed); None otherwise.
    """
    if len(name) > 100 or size >= _MAX_USTAR_SIZE or not name.isascii():
        return None
    raw = name.encode("ascii")
    octal = b"%011o" % size
    chksum = _TEMPLATE_SUM + sum(raw) + sum(octal)
    return b"".join(
        (
            raw,
            bytes(100 - len(raw)),
            _TEMPLATE[100:124],
            octal,
            _TEMPLATE[135:148],
            b"%06o\0 " % chksum,
            _TEMPLATE[156:],
        )
    )


def member_header(name: str, size: int, pos: int = 0, align: int = 0) -> bytes:
    """Header bytes for a regular-file member whose header starts at ``pos``.

    With ``align`` > 0 the returned header is padded (pax ``comment`` record)
    so that ``pos + len(header)`` is a multiple of ``align``. ``pos`` and
    ``align`` must be multiples of 512.
    """
    buf = _fast_header(name, size)
    if buf is not None and (align <= 0 or (pos + len(buf)) % align == 0):
        return buf
    info = _info(name, size)
    buf = _tobuf(info)
    if align <= 0 or (pos + len(buf)) % align == 0:
        return buf
    info.pax_headers = {"comment": ""}
    with_empty = _tobuf(info)
    other = _pax_size(with_empty) - _PAX_RECORD_MIN  # bytes of the pax records besides ours
    for blocks in range(1, 2 * align // BLOCK + 3):
        total = 2 * BLOCK + blocks * BLOCK
        if (pos + total) % align:
            continue
        # any record length that makes the pax data exactly `blocks` blocks long
        for record in (blocks * BLOCK - other, blocks * BLOCK - other - 1):
            fill = record - len(str(record)) - _COMMENT_OVERHEAD
            if fill < 0:
                continue
            info.pax_headers = {"comment": ("feedline alignment padding " + "." * fill)[:fill]}
            buf = _tobuf(info)
            if len(buf) == total:
                return buf
    raise RuntimeError(f"no pax padding aligns member {name!r} at {pos} to {align}")


def header_upper_bound(name: str, size: int, align: int = 0) -> int:
    """An upper bound of ``len(member_header(name, size, pos, align))`` for any ``pos``."""
    raw = name.encode("utf-8", "surrogateescape")
    bound = BLOCK
    if len(raw) > 100 or not name.isascii() or size >= 8**11:
        bound += BLOCK + round_up(2 * len(raw) + 96, BLOCK)
    if align > 0:
        bound += 3 * BLOCK + align
    return bound


def padding(size: int) -> bytes:
    """Zero bytes that pad a payload of ``size`` bytes to the next 512 boundary."""
    return b"\0" * (-size % BLOCK)
