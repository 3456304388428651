"""Compact integers (seed 004): the seed's byte forms at every boundary, round trips, and the error family."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocols.compact_int import I16, I32, I64, U16, U32, U64, CompactInt, read_array, read_string, write_array, write_string
from protocols.errors import BadValue, DecodeError, EncodeError, ShortData, TrailingData
from protocols.wire import Reader, Writer

# Each row: (type, value, bytes) as the seed's WriteCompactUInt32 / WriteCompactInt32 write them
# (BinaryWriter: little-endian), at both sides of every sentinel boundary.
VECTORS = [
    (U32, 0, "00"),
    (U32, 0xFC, "fc"),
    (U32, 0xFD, "fdfd00"),
    (U32, 0xFFFF, "fdffff"),
    (U32, 0x10000, "fe000001"),
    (U32, 0xFFFFFF, "feffffff"),
    (U32, 0x1000000, "ff00000001"),
    (U32, 0xFFFFFFFF, "ffffffffff"),
    (U16, 0, "00"),
    (U16, 0xFC, "fc"),
    (U16, 0xFD, "fdfd00"),
    (U16, 0xFFFF, "fdffff"),
    (U64, 0xFC, "fc"),
    (U64, 0xFD, "fdfd00"),
    (U64, 0xFFFFFF, "feffffff"),
    (U64, 0x1000000, "ff0000000100000000"),
    (U64, 0xFFFFFFFFFFFFFFFF, "ffffffffffffffffff"),
    (I32, 0, "00"),
    (I32, 0x7A, "7a"),
    (I32, 0x7B, "7c7b00"),
    (I32, -0x80, "80"),
    (I32, -1, "ff"),
    (I32, -0x81, "7b8000"),  # ~(-0x81) = 0x80
    (I32, 0xFFFF, "7cffff"),
    (I32, -0x10000, "7bffff"),
    (I32, 0x10000, "7e000001"),
    (I32, -0x10001, "7d000001"),
    (I32, 0xFFFFFF, "7effffff"),
    (I32, -0x1000000, "7dffffff"),
    (I32, 0x1000000, "7f00000001"),
    (I32, -0x1000001, "7ffffffffe"),
    (I32, 0x7FFFFFFF, "7fffffff7f"),
    (I32, -0x80000000, "7f00000080"),
    (I16, 0x7A, "7a"),
    (I16, 0x7B, "7c7b00"),
    (I16, -0x80, "80"),
    (I16, -0x81, "7b8000"),
    (I16, 0x7FFF, "7cff7f"),
    (I16, -0x8000, "7bff7f"),
    (I64, 0x7A, "7a"),
    (I64, -0x1000000, "7dffffff"),
    (I64, 0x1000000, "7f0000000100000000"),
    (I64, -0x8000000000000000, "7f0000000000000080"),
    (I64, 0x7FFFFFFFFFFFFFFF, "7fffffffffffffff7f"),
]


@pytest.mark.parametrize(("kind", "value", "hexed"), VECTORS, ids=lambda x: x.name if isinstance(x, CompactInt) else str(x))
def test_boundary_values_give_the_seeds_bytes(kind: CompactInt, value: int, hexed: str) -> None:
    assert kind.encode(value).hex() == hexed
    assert kind.decode(bytes.fromhex(hexed)) == value


@pytest.mark.parametrize(("kind", "value", "hexed"), VECTORS, ids=lambda x: x.name if isinstance(x, CompactInt) else str(x))
def test_every_cut_of_a_vector_is_short_data(kind: CompactInt, value: int, hexed: str) -> None:
    data = bytes.fromhex(hexed)
    for cut in range(len(data)):
        with pytest.raises(ShortData):
            kind.decode(data[:cut])
    with pytest.raises(TrailingData):
        kind.decode(data + b"\x00")


KINDS = [U16, U32, U64, I16, I32, I64]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
@given(data=st.data())
def test_random_values_round_trip(kind: CompactInt, data: st.DataObject) -> None:
    value = data.draw(st.integers(kind.low, kind.high))
    encoded = kind.encode(value)
    assert kind.decode(encoded) == value
    assert len(encoded) <= 1 + kind.bits // 8


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
@given(blob=st.binary(max_size=12))
def test_any_bytes_decode_to_a_value_that_reencodes_the_same_or_a_decode_error(kind: CompactInt, blob: bytes) -> None:
    try:
        value = kind.decode(blob)
    except DecodeError:
        return
    assert kind.encode(value) == blob


@pytest.mark.parametrize(
    ("kind", "hexed"),
    [
        (U32, "fd1000"),  # 16 in the two-byte form
        (U32, "fe00ff00"),  # 0xFF00 in the three-byte form
        (U32, "ff00000100"),  # 0x10000 in the four-byte form
        (U16, "fe000001"),  # no three-byte form at 16 bits
        (U16, "ffffffffff"),
        (I32, "7c7a00"),  # 0x7A fits in one byte
        (I32, "7b7f00"),  # ~0x7F = -0x80 fits in one byte
        (I32, "7e000000"),
        (I32, "7f00000100"),
        (I16, "7cffff"),  # 0xFFFF is over i16's range
        (I16, "7d000001"),
    ],
)
def test_longer_forms_and_out_of_range_values_are_bad_values(kind: CompactInt, hexed: str) -> None:
    with pytest.raises(BadValue):
        kind.decode(bytes.fromhex(hexed))


@pytest.mark.parametrize(("kind", "value"), [(U16, 0x10000), (U32, -1), (I16, 0x8000), (I64, 1 << 63), (U64, 1 << 64)])
def test_values_outside_the_width_cannot_be_encoded(kind: CompactInt, value: int) -> None:
    with pytest.raises(EncodeError):
        kind.encode(value)


def test_strings_and_arrays_carry_a_compact_u16_count() -> None:
    w = Writer()
    write_string(w, "héllo")
    write_array(w, [1, 300, 70000], U32.write)
    write_string(w, "x" * 300)
    data = w.getvalue()
    assert data[:7] == b"\x06h\xc3\xa9llo"  # six UTF-8 bytes
    assert data[7:16] == bytes.fromhex("03" "01" "fd2c01" "fe701101")
    assert data[16:19] == bytes.fromhex("fd2c01")
    r = Reader(data)
    assert read_string(r) == "héllo"
    assert read_array(r, U32.read) == (1, 300, 70000)
    assert read_string(r) == "x" * 300
    assert r.at_end()


@pytest.mark.parametrize("hexed", ["05616263", "fd0001", "02ffff"])
def test_short_or_broken_strings_raise_the_decode_error_family(hexed: str) -> None:
    with pytest.raises(DecodeError):
        read_string(Reader(bytes.fromhex(hexed)))


def test_an_array_count_the_input_cannot_hold_is_refused_before_reading() -> None:
    with pytest.raises(ShortData):
        read_array(Reader(bytes.fromhex("fdffff00")), U32.read)
