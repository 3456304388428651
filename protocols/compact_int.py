"""Compact integers, strings and arrays (seed 004, "Compact Serialization Format").

Theory of operation
-------------------
An integer that is usually small takes one byte; the few largest byte values
are sentinels that say how many little-endian bytes follow, like MariaDB's
length-encoded integers.

Unsigned (16, 32 and 64 bits):

====================  =====================================
value                 bytes
====================  =====================================
0 .. 0xFC             the value itself
0xFD .. 0xFFFF        ``FD`` + u16 LE
0x10000 .. 0xFFFFFF   ``FE`` + u16 LE + the third byte (32/64-bit only)
anything larger       ``FF`` + the full width, LE (u32 or u64)
====================  =====================================

Signed (16, 32 and 64 bits): the sentinels are the top of the *signed* byte
range, 0x7B-0x7F, so -0x80 .. 0x7A is one byte (two's complement).  A larger
magnitude is written as ``7C`` (positive) or ``7B`` (negative, the bitwise
complement ``~v``) + u16 LE; ``7E``/``7D`` + 3 bytes; ``7F`` + the full width
(i32 or i64, LE).

The seed gives the 32-bit writers and readers and says the scheme "extends to
any fixed-width integer type"; for 16 bits every value fits in the two-byte form,
so ``FE``/``FF`` (``7D``-``7F``) do not occur, and for 64 bits the last form
carries 8 bytes.  Strings and arrays carry their element count as a compact
u16, followed by the elements (a string's elements are its UTF-8 bytes).

The seed's reader accepts any form; ours accepts only the shortest one
(decode → encode gives the same bytes, as every codec under ``protocols/``
does), so a value has one encoding and a tampered length cannot hide in a
longer form.  A truncated input raises :class:`~protocols.errors.ShortData`,
a non-shortest form or a value out of the width's range
:class:`~protocols.errors.BadValue`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import attrs

from protocols.errors import BadValue, EncodeError, ShortData
from protocols.wire import Reader, Writer

__all__ = [
    "I16", "I32", "I64", "U16", "U32", "U64", "CompactInt", "read_array", "read_string", "write_array",
    "write_string",
]  # fmt: skip

T = TypeVar("T")


@attrs.frozen
class CompactInt:
    """One compact integer type: *bits* wide, signed or not."""

    bits: int
    signed: bool

    @property
    def name(self) -> str:
        return f"{'i' if self.signed else 'u'}{self.bits}"

    @property
    def low(self) -> int:
        return -(1 << (self.bits - 1)) if self.signed else 0

    @property
    def high(self) -> int:
        return (1 << (self.bits - 1)) - 1 if self.signed else (1 << self.bits) - 1

    # ------------------------------------------------------------------ encode
    def write(self, w: Writer, value: int) -> None:
        w.bytes(self.encode(value))

    def encode(self, value: int) -> bytes:
        if not isinstance(value, int) or not self.low <= value <= self.high:
            raise EncodeError(f"compact {self.name}: {value!r} is outside {self.low}..{self.high}")
        if self.signed:
            return self._encode_signed(value)
        if value < 0xFD:
            return bytes((value,))
        if value <= 0xFFFF:
            return b"\xfd" + value.to_bytes(2, "little")
        if value <= 0xFFFFFF:
            return b"\xfe" + value.to_bytes(3, "little")
        return b"\xff" + value.to_bytes(self.bits // 8, "little")

    def _encode_signed(self, value: int) -> bytes:
        if -0x80 <= value < 0x7B:
            return (value & 0xFF).to_bytes(1, "little")
        magnitude = ~value if value < 0 else value
        if -0x10000 <= value <= 0xFFFF:
            return (b"\x7b" if value < 0 else b"\x7c") + magnitude.to_bytes(2, "little")
        if -0x1000000 <= value <= 0xFFFFFF:
            return (b"\x7d" if value < 0 else b"\x7e") + magnitude.to_bytes(3, "little")
        return b"\x7f" + value.to_bytes(self.bits // 8, "little", signed=True)

    # ------------------------------------------------------------------ decode
    def decode(self, data: bytes) -> int:
        """The value of exactly *data* (trailing bytes are an error)."""
        r = Reader(data)
        value = self.read(r)
        r.expect_end(f"compact {self.name}")
        return value

    def read(self, r: Reader, what: str | None = None) -> int:
        what = what or f"compact {self.name}"
        lead = r.u8(what)
        value = self._read_signed(r, lead, what) if self.signed else self._read_unsigned(r, lead, what)
        if not self.low <= value <= self.high:
            raise BadValue(f"{what}: {value} is outside {self.low}..{self.high}")
        return value

    def _read_unsigned(self, r: Reader, lead: int, what: str) -> int:
        if lead < 0xFD:
            return lead
        if lead == 0xFD:
            value, smallest = r.u16_le(what), 0xFD
        elif lead == 0xFE and self.bits > 16:
            value, smallest = r.uint(3, what, le=True), 0x10000
        elif lead == 0xFF and self.bits > 16:
            value, smallest = r.uint(self.bits // 8, what, le=True), 0x1000000
        else:
            raise BadValue(f"{what}: sentinel 0x{lead:02X} does not occur in a {self.bits}-bit value")
        if value < smallest:
            raise BadValue(f"{what}: {value} in the 0x{lead:02X} form, which is not the shortest")
        return value

    def _read_signed(self, r: Reader, lead: int, what: str) -> int:
        if lead < 0x7B or lead >= 0x80:
            return lead - 0x100 if lead >= 0x80 else lead
        if lead in (0x7B, 0x7C):
            magnitude = r.u16_le(what)
        elif lead in (0x7D, 0x7E) and self.bits > 16:
            magnitude = r.uint(3, what, le=True)
        elif lead == 0x7F and self.bits > 16:
            value = int.from_bytes(r.bytes(self.bits // 8, what), "little", signed=True)
            if -0x1000000 <= value <= 0xFFFFFF:
                raise BadValue(f"{what}: {value} in the 0x7F form, which is not the shortest")
            return value
        else:
            raise BadValue(f"{what}: sentinel 0x{lead:02X} does not occur in a {self.bits}-bit value")
        value = ~magnitude if lead in (0x7B, 0x7D) else magnitude
        shorter = (-0x80, 0x7A) if lead in (0x7B, 0x7C) else (-0x10000, 0xFFFF)
        if shorter[0] <= value <= shorter[1]:
            raise BadValue(f"{what}: {value} in the 0x{lead:02X} form, which is not the shortest")
        return value


U16 = CompactInt(16, False)
U32 = CompactInt(32, False)
U64 = CompactInt(64, False)
I16 = CompactInt(16, True)
I32 = CompactInt(32, True)
I64 = CompactInt(64, True)


def write_string(w: Writer, text: str) -> None:
    """A compact u16 count of UTF-8 bytes, then the bytes."""
    data = text.encode("utf-8")
    if len(data) > U16.high:
        raise EncodeError(f"string of {len(data)} UTF-8 bytes is longer than a compact u16 count allows")
    U16.write(w, len(data))
    w.bytes(data)


def read_string(r: Reader, what: str = "string") -> str:
    n = U16.read(r, f"{what} length")
    try:
        return r.bytes(n, what).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadValue(f"{what}: not UTF-8 ({exc.reason})") from None


def write_array(w: Writer, items: Sequence[T], write_item: Callable[[Writer, T], None]) -> None:
    """A compact u16 count, then each element."""
    if len(items) > U16.high:
        raise EncodeError(f"array of {len(items)} elements is longer than a compact u16 count allows")
    U16.write(w, len(items))
    for item in items:
        write_item(w, item)


def read_array(r: Reader, read_item: Callable[[Reader], T], what: str = "array") -> tuple[T, ...]:
    n = U16.read(r, f"{what} count")
    if n > r.remaining():  # every element takes at least one byte: refuse a count the input cannot hold
        raise ShortData(f"{what}: {n} elements announced, only {r.remaining()} bytes left")
    return tuple(read_item(r) for _ in range(n))

