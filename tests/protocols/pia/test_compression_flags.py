"""Pia 6.32+ compression flags against the public documentation: message flag 0x20 is not zlib, packet flag 1 is Zstandard.

Each test builds its bytes from a documented layout and names the page it comes from
(kinnay/NintendoClientsWiki, "KW", is the newer of the two wikis and wins where they differ).
"""

from __future__ import annotations

import pytest

from protocols.errors import DecodeError, UnsupportedVersion
from protocols.pia import Message, Packet, PacketCodec, PacketHeader, profile_for
from protocols.pia.message import decode_messages, encode_messages, inflate_payload

SRC_IP = "192.168.1.10"
KEY = bytes(range(16))


def counter_builder(header: PacketHeader, source: str) -> bytes:
    vid = header.source_variable_id or 0
    return bytes([header.connection_id & 0xFF, vid & 0xFF, 0, 0]) + header.nonce


# -- message flags 6.32+ --------------------------------------------------------------


@pytest.mark.parametrize("version", ["6.32", "6.34", "6.40", "7.0", "7.2"])
def test_message_flag_0x20_is_not_zlib_from_6_32(version: str) -> None:
    """KW Pia-Protocol.md, "Message flags", 6.32 - 7.0: only 0x20 and 0x40 are listed, both
    "Unknown"; compression moved to the packet flags (ZSTD, bit 1).  A payload whose message
    carries 0x20 is therefore not a zlib stream and must be shown as it is."""
    p = profile_for(version)
    assert p.zlib_flag is None
    m = Message(5, 0, b"game data", 0x20)
    assert inflate_payload(m, p) == b"game data"


def test_message_flag_zlib_up_to_6_30() -> None:
    """KW Pia-Protocol.md: 0x10 = zlib in 5.14 - 5.26, 0x20 in 5.27 - 5.45 and 6.16 - 6.30."""
    assert profile_for("5.14").zlib_flag == 0x10
    assert profile_for("5.26").zlib_flag == 0x10
    assert profile_for("5.27").zlib_flag == 0x20
    assert profile_for("6.30").zlib_flag == 0x20
    assert profile_for("5.12").zlib_flag is None


# -- packet flags 6.32+ ---------------------------------------------------------------


def _zstd_flagged(encrypted: bool) -> tuple[PacketCodec, bytes]:
    p = profile_for("6.32")
    codec = PacketCodec(p, KEY, counter_builder)
    header = PacketHeader(
        encrypted, 3, destination_variable_id=0x22, source_variable_id=0x33, packet_flags=1, nonce=bytes(8)
    )
    # A body that happens to parse as an M-G message: the codec must not take it for one,
    # because with packet flag 1 the plaintext is a Zstandard frame, not messages.
    return codec, codec.encode(Packet(header, (Message(5, 0, b"abc", 0),)), SRC_IP)


@pytest.mark.parametrize("encrypted", [True, False])
def test_zstd_packet_flag_is_not_read_as_messages(encrypted: bool) -> None:
    """KW Pia-Protocol.md, "Packet Flags" (6.32 - 7.2 header, byte 5 low nibble):
    1 = payload compressed with ZSTD.  Its messages cannot be read without inflating it,
    so decoding reports that instead of misreading the compressed bytes."""
    codec, raw = _zstd_flagged(encrypted)
    with pytest.raises(UnsupportedVersion, match="(?i)zstandard|zstd"):
        codec.decode(raw, SRC_IP)
    report = codec.inspect(raw, SRC_IP)
    assert report.messages is None
    assert isinstance(report.error, DecodeError)
    assert report.header is not None and report.header.packet_flags == 1
    if encrypted:
        assert report.authenticated is True


def test_other_packet_flags_still_decode() -> None:
    """KW Pia-Protocol.md, "Packet Flags": 2 and 4 only skip checks; the payload is unchanged."""
    p = profile_for("6.40")
    codec = PacketCodec(p, KEY, counter_builder)
    header = PacketHeader(True, 3, destination_variable_id=1, source_variable_id=2, packet_flags=6, nonce=bytes(8))
    raw = codec.encode(Packet(header, (Message(5, 0, b"abc", 0),)), SRC_IP)
    got = codec.decode(raw, SRC_IP)
    assert [m.payload for m in got.messages] == [b"abc"]


# -- unaligned 6.x messages keep working (captures, spec §11) ---------------------------


def test_round_trip_6_16_unaligned() -> None:
    p = profile_for("6.16")
    msgs = (Message(0x68, 1, b"abc", 0, 0), Message(0x68, 1, b"de", 0, 0))
    raw = encode_messages(msgs, p)
    assert len(raw) == 1 + 1 + 2 + 4 + 8 + 3 + 1 + 2 + 2
    assert decode_messages(raw, p)[1].payload == b"de"
