"""Cursor codec: a bounds-checked :class:`Reader` and its :class:`Writer` mirror.

Every read past the end raises :class:`~protocols.errors.ShortData`, never
``IndexError`` or ``struct.error``, so codecs built on the reader keep the
"a value or a DecodeError" promise without try/except of their own.
Big-endian is the default (Pia and most Nintendo formats); pass ``le=True`` or
use the ``*_le`` methods for the little-endian exceptions.

Reserved bytes (padding, "always 0", unknown) are read with :meth:`Reader.reserved`
and kept in the value in a :func:`reserved_field`, so a decoder accepts whatever a
console put there and :meth:`Writer.reserved` gives the same bytes back.  The kept
form drops trailing zero bytes: all-zero padding is ``b""``, the default a value
built by hand has, and what the node sends.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import attrs

from protocols.errors import BadValue, EncodeError, ShortData, TrailingData

__all__ = ["KEPT_AS_SENT", "Reader", "Writer", "reserved_field"]

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_U16LE = struct.Struct("<H")
_U32LE = struct.Struct("<I")
_U64LE = struct.Struct("<Q")


def _kept(data: bytes | bytearray | memoryview) -> bytes:
    """The kept form of reserved bytes: as sent, without trailing zeros (all zero → b"")."""
    return bytes(data).rstrip(b"\0")


def _kept_repr(data: bytes) -> str:
    return repr(data.hex())


#: attrs metadata key of fields that only keep what a peer sent for a byte-exact round trip (reserved
#: bytes, a declared size, trailing bytes): a listing may leave such a field out while it has its default.
KEPT_AS_SENT = "kept_as_sent"


def reserved_field(**kw: Any) -> Any:
    """An attrs field for reserved bytes kept for a byte-exact round trip (default ``b""``: all zero).

    The codec writes it with :meth:`Writer.reserved`, which pads it with zeros to
    the reserved size; the node's logic never reads it.
    """
    return attrs.field(default=b"", converter=_kept, repr=_kept_repr, metadata={KEPT_AS_SENT: True}, **kw)


class Reader:
    """Read fixed-width fields from a bytes-like object, checking bounds."""

    __slots__ = ("_data", "_end", "pos")

    def __init__(self, data: bytes | bytearray | memoryview, pos: int = 0, end: int | None = None) -> None:
        self._data = bytes(data)
        self.pos = pos
        self._end = len(self._data) if end is None else end

    # -- state ---------------------------------------------------------
    def remaining(self) -> int:
        return self._end - self.pos

    def at_end(self) -> bool:
        return self.pos >= self._end

    def expect_end(self, what: str = "structure") -> None:
        if self.pos != self._end:
            raise TrailingData(f"{self._end - self.pos} unexpected trailing bytes after {what}")

    def _need(self, n: int, what: str) -> int:
        pos = self.pos
        if n < 0 or pos + n > self._end:
            raise ShortData(f"{what}: needs {n} bytes at offset {pos}, only {self._end - pos} left")
        self.pos = pos + n
        return pos

    @contextmanager
    def restrict_to(self, n: int, what: str = "block") -> Iterator[Reader]:
        """Yield a reader over the next *n* bytes that must be consumed exactly."""
        start = self._need(n, what)
        sub = Reader(self._data, start, start + n)
        yield sub
        sub.expect_end(what)

    # -- fields --------------------------------------------------------
    def u8(self, what: str = "u8") -> int:
        return self._data[self._need(1, what)]

    def u16(self, what: str = "u16") -> int:
        return _U16.unpack_from(self._data, self._need(2, what))[0]  # type: ignore[no-any-return]

    def u24(self, what: str = "u24") -> int:
        p = self._need(3, what)
        return int.from_bytes(self._data[p : p + 3], "big")

    def u32(self, what: str = "u32") -> int:
        return _U32.unpack_from(self._data, self._need(4, what))[0]  # type: ignore[no-any-return]

    def u64(self, what: str = "u64") -> int:
        return _U64.unpack_from(self._data, self._need(8, what))[0]  # type: ignore[no-any-return]

    def u16_le(self, what: str = "u16") -> int:
        return _U16LE.unpack_from(self._data, self._need(2, what))[0]  # type: ignore[no-any-return]

    def u32_le(self, what: str = "u32") -> int:
        return _U32LE.unpack_from(self._data, self._need(4, what))[0]  # type: ignore[no-any-return]

    def u64_le(self, what: str = "u64") -> int:
        return _U64LE.unpack_from(self._data, self._need(8, what))[0]  # type: ignore[no-any-return]

    def uint(self, size: int, what: str = "uint", *, le: bool = False) -> int:
        p = self._need(size, what)
        return int.from_bytes(self._data[p : p + size], "little" if le else "big")

    def bytes(self, n: int, what: str = "bytes") -> bytes:
        p = self._need(n, what)
        return self._data[p : p + n]

    def rest(self) -> bytes:
        p = self.pos
        self.pos = self._end
        return self._data[p : self._end]

    def skip(self, n: int, what: str = "padding") -> None:
        self._need(n, what)

    def zeros(self, n: int, what: str = "reserved") -> None:
        """Skip *n* bytes that must be zero."""
        raw = self.bytes(n, what)
        if raw.count(0) != n:
            raise BadValue(f"{what}: expected {n} zero bytes, got {raw.hex()}")

    def reserved(self, n: int, what: str = "reserved") -> bytes:
        """Read *n* reserved bytes, any value, in the kept form of :func:`reserved_field`."""
        return _kept(self.bytes(n, what))

    def align(self, boundary: int, base: int = 0) -> None:
        """Skip padding up to the next multiple of *boundary* counted from *base*."""
        pad = (-(self.pos - base)) % boundary
        if pad:
            self._need(min(pad, self._end - self.pos), "alignment")


class Writer:
    """Build bytes field by field; the mirror of :class:`Reader`."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    def __len__(self) -> int:
        return len(self._buf)

    def getvalue(self) -> bytes:
        return bytes(self._buf)

    def _check(self, value: int, bits: int, what: str) -> int:
        if not 0 <= value < (1 << bits):
            raise EncodeError(f"{what}={value!r} does not fit in {bits} bits")
        return value

    def u8(self, v: int, what: str = "u8") -> None:
        self._buf.append(self._check(v, 8, what))

    def u16(self, v: int, what: str = "u16") -> None:
        self._buf += _U16.pack(self._check(v, 16, what))

    def u24(self, v: int, what: str = "u24") -> None:
        self._buf += self._check(v, 24, what).to_bytes(3, "big")

    def u32(self, v: int, what: str = "u32") -> None:
        self._buf += _U32.pack(self._check(v, 32, what))

    def u64(self, v: int, what: str = "u64") -> None:
        self._buf += _U64.pack(self._check(v, 64, what))

    def u16_le(self, v: int, what: str = "u16") -> None:
        self._buf += _U16LE.pack(self._check(v, 16, what))

    def u32_le(self, v: int, what: str = "u32") -> None:
        self._buf += _U32LE.pack(self._check(v, 32, what))

    def u64_le(self, v: int, what: str = "u64") -> None:
        self._buf += _U64LE.pack(self._check(v, 64, what))

    def uint(self, v: int, size: int, what: str = "uint", *, le: bool = False) -> None:
        self._buf += self._check(v, size * 8, what).to_bytes(size, "little" if le else "big")

    def bytes(self, data: bytes | bytearray | memoryview) -> None:
        self._buf += data

    def fixed(self, data: bytes, size: int, what: str = "field") -> None:
        """Write *data* zero-padded to exactly *size* bytes."""
        if len(data) > size:
            raise EncodeError(f"{what}: {len(data)} bytes do not fit in {size}")
        self._buf += data
        self._buf += bytes(size - len(data))

    def zeros(self, n: int) -> None:
        self._buf += bytes(n)

    def reserved(self, kept: bytes, n: int, what: str = "reserved") -> None:
        """Write *n* reserved bytes: those a :func:`reserved_field` kept, then zeros."""
        self.fixed(kept, n, what)

    def align(self, boundary: int, base: int = 0, fill: int = 0) -> None:
        pad = (-(len(self._buf) - base)) % boundary
        self._buf += bytes([fill]) * pad
