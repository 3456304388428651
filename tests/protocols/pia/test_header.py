"""Pia packet headers H-A..H-G (spec §1.1, §1.2): layouts, version bytes, sniffing, round trips."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pia_type_strategies import u8, u16, u32

from protocols.errors import BadMagic, BadValue, DecodeError, EncodeError, ShortData, UnsupportedVersion
from protocols.pia import (
    DOCUMENTED_VERSIONS,
    HEADER_SIZES,
    HEADER_VERSIONS,
    HeaderFormat,
    PacketHeader,
    VersionProfile,
    decode_header,
    encode_header,
    header_format_for_version,
    profile_for,
    sniff_header_format,
)

N8 = bytes.fromhex("0102030405060708")
T16 = bytes.fromhex("a0a1a2a3a4a5a6a7a8a9aaabacadaeaf")
T8 = T16[:8]

# Hand-assembled from the offset tables in spec §1.1, one distinct value per field.
VECTORS = [
    (
        "5.3",
        # magic, enc 2, conn 0x56, packet id 971, source timer 38401, destination timer 13280 (nDPI frame 1)
        "32ab9864" "02" "56" "03cb" "9601" "33e0",
        PacketHeader(True, 971, 0x56, None, 38401, 13280),
    ),
    (
        "5.9",
        "32ab9864" "01" "2a" "0102" "0304" "0506" + N8.hex() + T16.hex(),
        PacketHeader(False, 0x0102, 0x2A, None, 0x0304, 0x0506, nonce=N8, tag=T16),
    ),
    (
        "5.18",
        # spec §8.2 D9 header
        "32ab9864" "84" "2a" "0001" "0102030405060708" "778afaef4997d7fd9055bb15b24438d4",
        PacketHeader(True, 1, 0x2A, 4, nonce=N8, tag=bytes.fromhex("778afaef4997d7fd9055bb15b24438d4")),
    ),
    (
        "5.12",
        "32ab9864" "03" "07" "fffe" + N8.hex() + T16.hex(),
        PacketHeader(False, 0xFFFE, 7, 3, nonce=N8, tag=T16),
    ),
    (
        "5.23",
        "32ab9864" "85" "2a" "0001" + N8.hex() + T8.hex(),
        PacketHeader(True, 1, 0x2A, 5, nonce=N8, tag=T8),
    ),
    (
        "5.27",
        "32ab9864" "89" "11223344" "55667788" "abcd" "04" + N8.hex() + T8.hex(),
        PacketHeader(
            True,
            0xABCD,
            0,
            9,
            destination_variable_id=0x11223344,
            source_variable_id=0x55667788,
            footer_size=4,
            nonce=N8,
            tag=T8,
        ),
    ),
    (
        "6.16",
        "32ab9864" "0b" "1122" "3344" "abcd" "02" + N8.hex() + T8.hex(),
        PacketHeader(
            False,
            0xABCD,
            0,
            11,
            destination_variable_id=0x1122,
            source_variable_id=0x3344,
            footer_size=2,
            nonce=N8,
            tag=T8,
        ),
    ),
    (
        "6.32",
        "32ab9864" "8f" "53" "1122" "3344" "abcd" "06" + N8.hex() + T8.hex(),
        PacketHeader(
            True,
            0xABCD,
            0,
            15,
            destination_variable_id=0x1122,
            source_variable_id=0x3344,
            footer_size=6,
            padding_size=5,
            packet_flags=3,
            nonce=N8,
            tag=T8,
        ),
    ),
]


@pytest.mark.parametrize(("version", "hexstr", "header"), VECTORS, ids=[v[0] for v in VECTORS])
def test_layout_vectors(version: str, hexstr: str, header: PacketHeader) -> None:
    profile = profile_for(version)
    raw = bytes.fromhex(hexstr)
    trailer = T16 if profile.header_format is HeaderFormat.A else b""
    body = b"\x00" * 8
    decoded, offset = decode_header(raw + body + trailer, profile)
    expected = attrs.evolve(header, tag=trailer) if trailer else header
    assert decoded == expected
    assert offset == len(raw) == HEADER_SIZES[profile.header_format]
    assert encode_header(decoded, profile) == raw


def test_header_sizes_match_spec() -> None:
    assert {f.value: n for f, n in HEADER_SIZES.items()} == {
        "H-A": 12,
        "H-B": 36,
        "H-C": 32,
        "H-D": 24,
        "H-E": 32,
        "H-F": 28,
        "H-G": 29,
    }


def test_version_byte_defaults_to_profile_and_accepts_layout_siblings() -> None:
    p511 = profile_for("5.11")  # header version 3
    h = PacketHeader(True, 1, 9, nonce=N8, tag=T16)
    assert encode_header(h, p511)[4] == 0x83
    # NintendoClients-2020 sent version 4 for every 5.11+ (§10.1.1): same layout, accepted.
    v4 = encode_header(PacketHeader(True, 1, 9, 4, nonce=N8, tag=T16), p511)
    assert v4[4] == 0x84
    assert decode_header(v4, p511)[0].version == 4
    for version, byte in (("6.23", 11), ("6.25", 12), ("6.30", 13), ("6.33", 15), ("6.40", 16)):
        raw = encode_header(PacketHeader(False, 0), profile_for(version))
        assert raw[4] == byte


def test_foreign_version_rejected() -> None:
    raw = bytes.fromhex("32ab9864" "85" "2a" "0001") + N8 + T16  # version 5 is H-D, not H-C
    with pytest.raises(UnsupportedVersion):
        decode_header(raw, profile_for("5.18"))
    with pytest.raises(UnsupportedVersion):
        decode_header(bytes.fromhex("32ab9864" "8b") + bytes(27), profile_for("5.27"))
    with pytest.raises(EncodeError):
        encode_header(PacketHeader(False, 0, version=9), profile_for("5.18"))


@pytest.mark.parametrize("byte4", [0, 3, 0x81, 0x82, 0xFF])
def test_old_encryption_byte_must_be_1_or_2(byte4: int) -> None:
    raw = bytes.fromhex("32ab9864") + bytes([byte4]) + bytes(7 + 16)
    with pytest.raises(BadValue):
        decode_header(raw, profile_for("5.3"))
    with pytest.raises(BadValue):
        decode_header(raw + bytes(24), profile_for("5.9"))


def test_bad_magic_and_short_data() -> None:
    p = profile_for("5.18")
    good = encode_header(PacketHeader(True, 1, 2, nonce=N8, tag=T16), p)
    with pytest.raises(BadMagic):
        decode_header(b"\x32\xab\x98\x65" + good[4:], p)
    for n in range(len(good)):
        with pytest.raises(ShortData):
            decode_header(good[:n], p)
    # H-A needs room for the 16-byte HMAC trailer after the 12-byte header.
    pa = profile_for("5.6")
    raw = encode_header(PacketHeader(False, 0), pa)
    with pytest.raises(ShortData):
        decode_header(raw + bytes(15), pa)
    assert decode_header(raw + bytes(16), pa)[0].tag == bytes(16)


def test_encode_rejects_fields_the_layout_lacks() -> None:
    cases = [
        ("5.3", PacketHeader(False, 0, version=1)),
        ("5.3", PacketHeader(False, 0, nonce=N8)),
        ("5.3", PacketHeader(False, 0, footer_size=2)),
        ("5.9", PacketHeader(False, 0, destination_variable_id=1)),
        ("5.18", PacketHeader(False, 0, source_timer=5)),
        ("5.18", PacketHeader(False, 0, packet_flags=1)),
        ("5.27", PacketHeader(False, 0, connection_id=3)),
        ("6.16", PacketHeader(False, 0, padding_size=1)),
        ("6.32", PacketHeader(False, 0, padding_size=16)),
        ("5.18", PacketHeader(False, 0, nonce=b"short")),
        ("5.23", PacketHeader(False, 0, tag=T16)),  # H-D carries 8 tag bytes
        ("5.3", PacketHeader(False, 0x10000)),
        ("5.3", PacketHeader(False, 0, 256)),
        ("6.16", PacketHeader(False, 0, destination_variable_id=0x10000)),
        ("5.27", PacketHeader(False, 0, footer_size=256)),
    ]
    for version, h in cases:
        with pytest.raises(EncodeError):
            encode_header(h, profile_for(version))


def test_empty_nonce_and_tag_encode_as_zeros() -> None:
    raw = encode_header(PacketHeader(False, 7, 3), profile_for("5.18"))
    assert raw == bytes.fromhex("32ab9864" "04" "03" "0007") + bytes(24)


def test_header_format_for_version() -> None:
    assert header_format_for_version(4) is HeaderFormat.C
    assert header_format_for_version(5) is HeaderFormat.D
    assert header_format_for_version(9) is HeaderFormat.E
    assert header_format_for_version(13) is HeaderFormat.F
    assert header_format_for_version(16) is HeaderFormat.G
    assert header_format_for_version(1) is None
    assert header_format_for_version(10) is None


# -- sniffing ---------------------------------------------------------------


def test_sniff_by_version_byte() -> None:
    for _version, hexstr, _h in VECTORS[2:]:
        raw = bytes.fromhex(hexstr) + bytes(16)
        fmt = sniff_header_format(raw)
        assert fmt is not None
        assert raw[4] & 0x7F in HEADER_VERSIONS[fmt]
    assert sniff_header_format(bytes.fromhex("32ab9864" "8a") + bytes(40)) is None  # version 10: none
    assert sniff_header_format(bytes.fromhex("32ab9865" "84") + bytes(40)) is None
    assert sniff_header_format(b"\x32\xab\x98\x64") is None
    assert sniff_header_format(bytes.fromhex("32ab9864" "84") + bytes(10)) is None  # shorter than H-C


def test_sniff_encrypted_old_layouts_by_length() -> None:
    a = bytes.fromhex("32ab9864" "02") + bytes(7) + bytes(32) + bytes(16)  # 12 + 32 + 16
    b = bytes.fromhex("32ab9864" "02") + bytes(31) + bytes(32)  # 36 + 32
    assert sniff_header_format(a) is HeaderFormat.A
    assert sniff_header_format(b) is HeaderFormat.B
    assert sniff_header_format(a + b"\x00") is None
    assert sniff_header_format(bytes.fromhex("32ab9864" "02") + bytes(23)) is None  # no body block


def test_sniff_plain_old_layouts_by_message_walk() -> None:
    # H-A + one M-A message (20-byte header, 6-byte payload padded to 8) + HMAC trailer.
    ma = bytes.fromhex("00fd0006" "00000000" "00000000" "0100" "0000" "00000000") + b"abcdef\x00\x00"
    a = bytes.fromhex("32ab9864" "01") + bytes(7) + ma + bytes(16)
    assert sniff_header_format(a) is HeaderFormat.A
    # H-B + one M-B message (24-byte header, 4-byte payload), no trailer.
    mb = bytes.fromhex("01" "0004" "0000000000000002" "0000000000000001" "14" "00" "000000") + b"wxyz"
    b = bytes.fromhex("32ab9864" "01") + bytes(31) + mb
    assert sniff_header_format(b) is HeaderFormat.B
    assert sniff_header_format(bytes.fromhex("32ab9864" "01") + bytes(31) + mb[:-1]) is None


# -- properties -------------------------------------------------------------

nibble = st.integers(0, 15)


@st.composite
def header_for(draw: st.DrawFn, profile: VersionProfile) -> PacketHeader:
    fmt = profile.header_format
    enc = draw(st.booleans())
    pid = draw(u16)
    nonce = draw(st.binary(min_size=8, max_size=8))
    if fmt is HeaderFormat.A:
        tag = draw(st.binary(min_size=16, max_size=16))
        return PacketHeader(enc, pid, draw(u8), None, draw(u16), draw(u16), tag=tag)
    if fmt is HeaderFormat.B:
        return PacketHeader(
            enc, pid, draw(u8), None, draw(u16), draw(u16), nonce=nonce, tag=draw(st.binary(min_size=16, max_size=16))
        )
    version = draw(st.sampled_from(sorted(HEADER_VERSIONS[fmt])))
    if fmt in (HeaderFormat.C, HeaderFormat.D):
        n = 16 if fmt is HeaderFormat.C else 8
        return PacketHeader(enc, pid, draw(u8), version, nonce=nonce, tag=draw(st.binary(min_size=n, max_size=n)))
    var = u32 if fmt is HeaderFormat.E else u16
    g = fmt is HeaderFormat.G
    return PacketHeader(
        enc,
        pid,
        0,
        version,
        destination_variable_id=draw(var),
        source_variable_id=draw(var),
        footer_size=draw(u8),
        padding_size=draw(nibble) if g else 0,
        packet_flags=draw(nibble) if g else 0,
        nonce=nonce,
        tag=draw(st.binary(min_size=8, max_size=8)),
    )


@st.composite
def profile_and_header(draw: st.DrawFn) -> tuple[VersionProfile, PacketHeader]:
    profile = profile_for(draw(st.sampled_from(DOCUMENTED_VERSIONS)))
    return profile, draw(header_for(profile))


@settings(max_examples=400, deadline=None)
@given(profile_and_header(), st.binary(max_size=40))
def test_round_trip_every_version(ph: tuple[VersionProfile, PacketHeader], body: bytes) -> None:
    profile, header = ph
    raw = encode_header(header, profile)
    assert len(raw) == HEADER_SIZES[profile.header_format]
    trailer = header.tag if profile.header_format is HeaderFormat.A else b""
    decoded, offset = decode_header(raw + body + trailer, profile)
    assert decoded == header
    assert offset == len(raw)
    assert encode_header(decoded, profile) == raw


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(DOCUMENTED_VERSIONS), st.binary(max_size=80))
def test_garbage_gives_value_or_decode_error(version: tuple[int, int], data: bytes) -> None:
    profile = profile_for(version)
    for candidate in (data, b"\x32\xab\x98\x64" + data):
        try:
            header, offset = decode_header(candidate, profile)
        except DecodeError:
            continue
        assert offset == HEADER_SIZES[profile.header_format]
        assert encode_header(header, profile) == candidate[:offset]
    fmt = sniff_header_format(data)
    assert fmt is None or isinstance(fmt, HeaderFormat)


@settings(max_examples=300, deadline=None)
@given(profile_and_header(), st.lists(st.tuples(st.integers(0, 64), u8), min_size=1, max_size=4))
def test_mutated_gives_value_or_decode_error(
    ph: tuple[VersionProfile, PacketHeader], flips: list[tuple[int, int]]
) -> None:
    profile, header = ph
    raw = bytearray(encode_header(header, profile) + bytes(16))
    for pos, val in flips:
        raw[pos % len(raw)] = val
    try:
        decoded, _ = decode_header(bytes(raw), profile)
    except DecodeError:
        return
    assert isinstance(decoded, PacketHeader)
    sniff_header_format(bytes(raw))
