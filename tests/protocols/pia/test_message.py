"""Pia messages M-A..M-G (spec §2): fixed layouts, delta encoding, alignment, 0xFF tail, zlib."""

from __future__ import annotations

import zlib

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.errors import BadValue, DecodeError, EncodeError, ShortData, UnsupportedVersion
from protocols.pia import (
    DOCUMENTED_VERSIONS,
    Message,
    MessageFormat,
    VersionProfile,
    decode_messages,
    deflate_payload,
    encode_messages,
    full_presence,
    inflate_payload,
    profile_for,
)

SRC = 0xC0A8010A0000C000

# spec §8.2 D9: one M-E message (mask 0x1F), then the 0xFF padding to 16 bytes.
D9_PLAIN = bytes.fromhex("1f010009680000000000000000000002c0a8010a0000c00068656c6c6f20706961000000") + b"\xff" * 12
D9_MESSAGE = Message(0x68, 0, b"hello pia", 0x01, 2, SRC, presence=0x1F)


def test_d9_plaintext_both_directions() -> None:
    p = profile_for("5.18")
    assert decode_messages(D9_PLAIN, p) == (D9_MESSAGE,)
    assert encode_messages([D9_MESSAGE], p) == D9_PLAIN[:-12]
    # presence None on the first message means "every field" (§2.2 safe sender policy).
    assert encode_messages([attrs.evolve(D9_MESSAGE, presence=None)], p) == D9_PLAIN[:-12]


# Hand-assembled from the field tables of spec §2.1.
FIXED = [
    (
        "5.3",
        # M-A: flags 0, station 253, size 8, destination 0, source id 0, protocol 0x0100, port 0, reserved 0
        "00" "fd" "0008" "00000000" "00000000" "0100" "0000" "00000000" "05000000c14e4a1c",
        Message(0x0100, 0, bytes.fromhex("05000000c14e4a1c"), 0, 0, 0, 253, 0),
    ),
    (
        "5.6",
        # M-B: flags 1, size 5, destination 2, source id, type 0x14, port 3, zero x3, payload + 3 pad
        "01" "0005" "0000000000000002" "c0a8010a0000c000" "14" "03" "000000" "6162636465" "000000",
        Message(0x14, 3, b"abcde", 1, 2, SRC),
    ),
    (
        "5.11",
        # M-C: flags, version 1, size 5, type, port, destination, source id, payload + 1 pad
        "01" "01" "0005" "14" "03" "0000000000000002" "c0a8010a0000c000" "6162636465" "00",
        Message(0x14, 3, b"abcde", 1, 2, SRC),
    ),
    (
        "5.14",
        # M-D: flags, version 2, size 5, type, u24 port, destination, source id, payload + 3 pad
        "01" "02" "0005" "14" "010203" "0000000000000002" "c0a8010a0000c000" "6162636465" "000000",
        Message(0x14, 0x010203, b"abcde", 1, 2, SRC),
    ),
]


@pytest.mark.parametrize(("version", "hexstr", "message"), FIXED, ids=[f[0] for f in FIXED])
def test_fixed_layouts(version: str, hexstr: str, message: Message) -> None:
    p = profile_for(version)
    raw = bytes.fromhex(hexstr)
    assert decode_messages(raw, p) == (message,)
    assert encode_messages([message], p) == raw
    assert decode_messages(raw + raw, p) == (message, message)
    assert decode_messages(raw + b"\xff" * 16, p) == (message,)


@pytest.mark.parametrize(("version", "byte"), [("5.11", 2), ("5.11", 0), ("5.14", 1), ("5.14", 3)])
def test_message_version_byte_checked(version: str, byte: int) -> None:
    p = profile_for(version)
    raw = bytearray(bytes.fromhex(dict((f[0], f[1]) for f in FIXED)[version]))
    raw[1] = byte
    with pytest.raises(UnsupportedVersion):
        decode_messages(bytes(raw), p)


def test_m_b_reserved_bytes_kept_for_byte_exact_reencode() -> None:
    p = profile_for("5.9")
    raw = bytes.fromhex("00" "0000" + "00" * 16 + "58" "01" "0a0b0c")
    (m,) = decode_messages(raw, p)
    assert m.reserved == 0x0A0B0C
    assert encode_messages([m], p) == raw


# -- delta formats ----------------------------------------------------------

# Three M-E messages (5.18): the first carries everything, the second inherits
# everything (mask 0x00, §11), the third changes only the payload size (mask 0x02).
M_E = (
    "1f" "01" "0004" "7c000005" "0000000000000004" "c0a8010a0000c000" "61626364"
    "00" "65666768" "000000"
    "02" "0001" "69"
)


def test_delta_inheritance_m_e() -> None:
    p = profile_for("5.18")
    raw = bytes.fromhex(M_E)
    msgs = decode_messages(raw, p)
    base = Message(0x7C, 5, b"abcd", 1, 4, SRC, presence=0x1F)
    assert msgs == (base, attrs.evolve(base, payload=b"efgh", presence=0), attrs.evolve(base, payload=b"i", presence=2))
    assert encode_messages(msgs, p) == raw
    # Presence None: first message in full, later ones only what changed.
    assert encode_messages([attrs.evolve(m, presence=None) for m in msgs], p) == raw


def test_first_message_starts_from_zero_state() -> None:
    p = profile_for("5.27")
    # mask 0x02 only: flags/protocol/destination start at 0 (§2.2, NC-2020).
    assert decode_messages(bytes.fromhex("02" "0002" "abcd"), p) == (Message(0, 0, b"\xab\xcd", presence=2),)
    assert decode_messages(bytes.fromhex("00"), p) == (Message(0, 0, b"", presence=0),)


def test_stray_mask_bits_accepted_without_fields() -> None:
    # M-F has no source-id field: 0x10 carries nothing, nor do 0x20..0x80 (§2.2, §10.1.18).
    p = profile_for("5.27")
    raw = bytes.fromhex("ff" "01" "0003" "68000000" "0000000000000002" "616263" "00")
    (m,) = decode_messages(raw, p)
    assert m == Message(0x68, 0, b"abc", 1, 2, None, presence=0xFF)
    assert encode_messages([m], p) == raw
    # NC-2020's mask 0x7F in M-E: the 0x1F fields, nothing for 0x20/0x40.
    p18 = profile_for("5.18")
    raw18 = bytes.fromhex("7f" "00" "0000" "14000000" "0000000000000000" "0000000000000001")
    assert decode_messages(raw18, p18) == (Message(0x14, 0, b"", 0, 0, 1, presence=0x7F),)


def test_m_g_layout_unaligned() -> None:
    p = profile_for("6.32")
    # mask 0x1F: flags 0x20, size 3, type 5, port 1, protocol byte 0x99, payload; then mask 0x00 (inherit all).
    raw = bytes.fromhex("1f" "20" "0003" "05" "01" "99" "616263" "00" "646566")
    first = Message(5, 1, b"abc", 0x20, 0, None, None, 0, 0x99, presence=0x1F)
    assert decode_messages(raw, p) == (first, attrs.evolve(first, payload=b"def", presence=0))
    assert encode_messages(decode_messages(raw, p), p) == raw


def test_alignment_only_up_to_5_45() -> None:
    msgs = [Message(0x68, 1, b"abcde", 1, 0), Message(0x68, 1, b"xy", 1, 0)]
    aligned = encode_messages(msgs, profile_for("5.45"))
    packed = encode_messages(msgs, profile_for("6.16"))
    # 5.45: 16-byte header + 5 -> 21, padded to 24; then mask 0x02 + size + 2 -> 5, padded to 8.
    assert aligned == bytes.fromhex(
        "0f" "01" "0005" "68000001" "0000000000000000" "6162636465" "000000" "02" "0002" "7879" "000000"
    )
    assert packed == bytes.fromhex("0f" "01" "0005" "68000001" "0000000000000000" "6162636465" "02" "0002" "7879")
    assert [m.payload for m in decode_messages(aligned, profile_for("5.45"))] == [b"abcde", b"xy"]
    assert [m.payload for m in decode_messages(packed, profile_for("6.16"))] == [b"abcde", b"xy"]


def test_ff_tail_stops_but_other_tails_do_not() -> None:
    p = profile_for("5.18")
    body = D9_PLAIN[:-12]
    for pad in range(1, 16):
        assert decode_messages(body + b"\xff" * pad, p) == (D9_MESSAGE,)
    with pytest.raises(ShortData):
        decode_messages(body + b"\xff" * 11 + b"\xfe", p)
    with pytest.raises(ShortData):
        decode_messages(body[:-4], p)  # payload cut short
    assert decode_messages(b"", p) == ()
    assert decode_messages(b"\xff" * 16, p) == ()


def test_truncated_messages_are_short_data() -> None:
    header_sizes = {MessageFormat.A: 20, MessageFormat.B: 24, MessageFormat.C: 22, MessageFormat.D: 24}
    for version, hexstr, message in FIXED:
        raw = bytes.fromhex(hexstr)
        p = profile_for(version)
        unpadded = header_sizes[p.message_format] + len(message.payload)
        for n in range(1, len(raw)):
            if n >= unpadded:
                # Cutting into the alignment pad after the last payload is tolerated.
                assert decode_messages(raw[:n], p) == (message,)
            else:
                with pytest.raises(ShortData):
                    decode_messages(raw[:n], p)


# -- encoder checks ---------------------------------------------------------


def test_encoder_rejects_what_the_format_cannot_carry() -> None:
    bad = [
        ("5.3", Message(0x100, 0, b"", source_constant_id=0)),  # M-A needs a station index
        ("5.3", Message(0x100, 0, b"", source_station_index=0)),  # ... and a source id
        ("5.3", Message(0x10000, 0, b"", source_constant_id=0, source_station_index=0)),
        ("5.6", Message(0x14, 0, b"", source_constant_id=0, source_station_index=1)),
        ("5.6", Message(0x14, 0x100, b"", source_constant_id=0)),
        ("5.11", Message(0x14, 0, b"", source_constant_id=0, reserved=1)),
        ("5.14", Message(0x14, 0x1000000, b"", source_constant_id=0)),
        ("5.14", Message(0x14, 0, b"", source_constant_id=0, presence=0x1F)),
        ("5.18", Message(0x14, 0, b"")),  # M-E needs a source id
        ("5.27", Message(0x14, 0, b"", source_constant_id=1)),  # M-F has none
        ("5.27", Message(0x14, 0, b"", extra=1)),
        ("6.32", Message(0x14, 0, b"", destination=1)),  # M-G has no destination
        ("6.32", Message(0x14, 0x100, b"")),
        ("5.27", Message(0x14, 0, b"x" * 0x10000)),
        ("5.27", Message(0x14, 0, b"", flags=0x100)),
        ("5.27", Message(0x14, 0, b"", presence=0x100)),
    ]
    for version, m in bad:
        with pytest.raises(EncodeError):
            encode_messages([m], profile_for(version))


def test_encoder_rejects_presence_that_hides_a_change() -> None:
    p = profile_for("5.27")
    first = Message(0x68, 0, b"ab", 1, 2, presence=0x0F)
    for second in (
        Message(0x68, 0, b"abc", 1, 2, presence=0x00),  # size changed
        Message(0x69, 0, b"ab", 1, 2, presence=0x02),  # protocol changed
        Message(0x68, 0, b"ab", 0, 2, presence=0x0E),  # flags changed
        Message(0x68, 0, b"ab", 1, 3, presence=0x07),  # destination changed
    ):
        with pytest.raises(EncodeError):
            encode_messages([first, second], p)
    with pytest.raises(EncodeError):
        encode_messages([Message(0x68, 0, b"ab", presence=0x00)], p)  # size 2 vs inherited 0
    assert encode_messages([first, attrs.evolve(first, presence=0x0F)], p) == encode_messages([first, first], p)


def test_full_presence() -> None:
    assert full_presence(profile_for("5.18")) == 0x1F
    assert full_presence(profile_for("5.27")) == 0x0F
    assert full_presence(profile_for("6.32")) == 0x1F
    assert full_presence(profile_for("5.14")) is None


# -- zlib -------------------------------------------------------------------


def test_inflate_uses_the_version_flag() -> None:
    data = b"pia " * 50
    packed = deflate_payload(data)
    assert zlib.decompress(packed) == data
    for version, flag in (("5.14", 0x10), ("5.18", 0x10), ("5.27", 0x20), ("6.16", 0x20)):
        p = profile_for(version)
        assert inflate_payload(Message(0x7C, 0, packed, flags=flag), p) == data
        assert inflate_payload(Message(0x7C, 0, packed, flags=0x01), p) == packed
    # No zlib flag before 5.14 (§2.3): 0x10 means nothing there.
    assert inflate_payload(Message(0x14, 0, packed, flags=0x10), profile_for("5.11")) == packed


def test_inflate_errors_are_decode_errors() -> None:
    p = profile_for("5.27")
    packed = deflate_payload(b"x" * 4000)
    for bad in (b"not zlib", packed[:-3], packed + b"extra", b""):
        with pytest.raises(BadValue):
            inflate_payload(Message(0x7C, 0, bad, flags=0x20), p)
    with pytest.raises(BadValue):
        inflate_payload(Message(0x7C, 0, packed, flags=0x20), p, max_size=1000)
    assert inflate_payload(Message(0x7C, 0, packed, flags=0x20), p, max_size=4000) == b"x" * 4000


# -- properties -------------------------------------------------------------

FLAGS = st.integers(0, 0xFE)  # a message of all 0xFF bytes would read as the 0xFF tail
PAYLOAD = st.binary(max_size=40)


@st.composite
def message_for(draw: st.DrawFn, profile: VersionProfile) -> Message:
    fmt = profile.message_format
    flags = draw(FLAGS)
    payload = draw(PAYLOAD)
    u64 = st.integers(0, 2**64 - 1)
    if fmt is MessageFormat.A:
        return Message(
            draw(st.integers(0, 0xFFFF)),
            draw(st.integers(0, 0xFFFF)),
            payload,
            flags,
            draw(st.integers(0, 2**32 - 1)),
            draw(st.integers(0, 2**32 - 1)),
            draw(st.integers(0, 255)),
            draw(st.integers(0, 2**32 - 1)),
        )
    ptype = draw(st.integers(0, 0xFF))
    if fmt is MessageFormat.G:
        return Message(ptype, draw(st.integers(0, 0xFF)), payload, flags, extra=draw(st.integers(0, 0xFF)))
    port = draw(st.integers(0, 0xFF if fmt in (MessageFormat.B, MessageFormat.C) else 0xFFFFFF))
    src = draw(u64) if fmt is not MessageFormat.F else None
    reserved = draw(st.integers(0, 0xFFFFFF)) if fmt is MessageFormat.B else 0
    return Message(ptype, port, payload, flags, draw(u64), src, None, reserved)


@st.composite
def messages_for_version(draw: st.DrawFn) -> tuple[VersionProfile, list[Message]]:
    profile = profile_for(draw(st.sampled_from(DOCUMENTED_VERSIONS)))
    first = draw(message_for(profile))
    msgs = [first]
    for _ in range(draw(st.integers(0, 4))):
        # Often repeat fields so the delta encoder has something to inherit.
        m = draw(message_for(profile))
        if draw(st.booleans()):
            m = attrs.evolve(msgs[-1], payload=m.payload)
        msgs.append(m)
    return profile, msgs


def _strip(m: Message) -> Message:
    return attrs.evolve(m, presence=None)


@settings(max_examples=300, deadline=None)
@given(messages_for_version(), st.integers(0, 0xFF), st.integers(0, 15))
def test_round_trip_every_version(pm: tuple[VersionProfile, list[Message]], extra_bits: int, ff: int) -> None:
    profile, msgs = pm
    raw = encode_messages(msgs, profile)
    if profile.align_messages:
        assert len(raw) % 4 == 0
    decoded = decode_messages(raw + b"\xff" * ff, profile)
    assert [_strip(m) for m in decoded] == msgs
    assert encode_messages(decoded, profile) == raw
    full = full_presence(profile)
    if full is None:
        assert all(m.presence is None for m in decoded)
        return
    assert decoded[0].presence == full
    # Any superset of the needed mask (extra fields, stray bits) round-trips exactly.
    wider = [attrs.evolve(m, presence=m.presence | extra_bits) for m in decoded]
    raw2 = encode_messages(wider, profile)
    assert decode_messages(raw2, profile) == tuple(wider)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(DOCUMENTED_VERSIONS), st.binary(max_size=120))
def test_garbage_gives_value_or_decode_error(version: tuple[int, int], data: bytes) -> None:
    profile = profile_for(version)
    try:
        msgs = decode_messages(data, profile)
    except DecodeError:
        return
    assert all(isinstance(m, Message) for m in msgs)
    for m in msgs:
        try:
            inflate_payload(m, profile)
        except DecodeError:
            pass


@settings(max_examples=300, deadline=None)
@given(messages_for_version(), st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), min_size=1, max_size=4))
def test_mutated_gives_value_or_decode_error(
    pm: tuple[VersionProfile, list[Message]], flips: list[tuple[int, int]]
) -> None:
    profile, msgs = pm
    raw = bytearray(encode_messages(msgs, profile))
    if not raw:
        return
    for pos, val in flips:
        raw[pos % len(raw)] = val
    try:
        decode_messages(bytes(raw), profile)
    except DecodeError:
        pass
