"""Pia LDN application data (spec §7.2): layouts per version, D6/D7/D12 accessors, garbage."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pia_type_strategies import u32

from protocols.errors import BadValue, ConfigError, DecodeError, EncodeError
from protocols.pia.ldn import (
    LdnApplicationData,
    LdnSystemProperty,
    decode_application_data,
    default_header_size,
)
from protocols.pia.versions import profile_for

SMM2 = bytes.fromhex("667c18475889faab61f93ef1da180971")


@pytest.mark.parametrize(
    ("version", "size", "sys_v"),
    [("5.2", 20, 1), ("5.7", 20, 1), ("5.9", 24, 2), ("5.10", 24, 3), ("5.18", 24, 5), ("5.26", 16, 8), ("5.45", 16, 8)],
)
def test_5x_layouts(version: str, size: int, sys_v: int) -> None:
    prof = profile_for(version)
    param = None if size == 20 else 0x12345678
    app = LdnApplicationData.build(prof, network_id=0x11223344, session_param=param, password_crc=0xA1B2C3D4,
                                   game_data=b"GAME")  # fmt: skip
    wire = app.encode(prof)
    assert len(wire) == size + 4 and wire[size:] == b"GAME"
    assert wire[0:4] == bytes.fromhex("44332211")  # network id little-endian (spec §7.2, §11)
    assert wire[4:8] == bytes.fromhex("d4c3b2a1") and wire[8] == sys_v
    if size == 20:
        assert wire[9:20] == bytes(11)
    else:
        assert wire[9] == size and wire[10:12] == bytes(2)
        assert wire[0xC:0x10] == bytes.fromhex("78563412")  # session param at 0xC, LE
        assert wire[0x10:size] == bytes(size - 0x10)
    back = LdnApplicationData.decode(wire, prof)
    assert back == app and back.network_id_bytes == wire[0:4]
    assert decode_application_data(wire, prof) == app


def test_d6_session_key_from_application_data() -> None:
    """Spec §8.2 D6: session param 0x12345678, SMM2 game key (5.9+ rule confirmed in §11)."""
    app = LdnApplicationData.build(profile_for("5.18"), network_id=1, session_param=0x12345678)
    assert app.session_key(SMM2).hex() == "f3aca7d4fba7f5b713f86ccace702c47"
    with pytest.raises(ConfigError):
        LdnApplicationData.build(profile_for("5.7"), network_id=1).session_key(SMM2)


def test_d7_nonce_crc_input() -> None:
    """Spec §8.2 D7: CRC-32(network id as transmitted ‖ MAC) = 0x23525077."""
    app = LdnApplicationData.build(profile_for("5.29"), network_id=0x11223344, session_param=1)
    assert zlib.crc32(app.network_id_bytes + bytes.fromhex("020000000001")) == 0x23525077


def test_header_size_byte_decides_layout() -> None:
    # A 5.26-style (16-byte) header is read as such even under a 5.18 profile, and vice versa.
    short = LdnApplicationData(7, 0, 8, 9, b"x", 16)
    assert LdnApplicationData.decode(short.encode(), profile_for("5.18")) == short
    long = LdnApplicationData(7, 0, 5, 9, b"x", 24)
    assert LdnApplicationData.decode(long.encode(), profile_for("5.29")) == long
    with pytest.raises(BadValue):
        LdnApplicationData.decode(bytes(9) + b"\x14" + bytes(20), profile_for("5.18"))
    # Gaps use the nearest documented layout below.
    assert default_header_size(profile_for("5.8")) == 20
    assert default_header_size(profile_for("5.23")) == 24


def test_padding_kept_byte_exact() -> None:
    wire = bytearray(LdnApplicationData.build(profile_for("5.18"), network_id=1, session_param=2).encode())
    wire[0x12] = 0x99  # reserved byte
    app = LdnApplicationData.decode(bytes(wire), profile_for("5.18"))
    assert app.padding is not None and app.encode() == bytes(wire)


def test_6x_system_property() -> None:
    prof = profile_for("6.30")
    name = "Pia".encode("utf-16-le")
    prop = LdnSystemProperty(21, 3, b"p" * 16, True, 2, len(name), 2, name.ljust(64, b"\0"), b"game")
    wire = prop.encode(prof)
    assert len(wire) == 0x5C + 4 and wire[0:2] == b"\x00\x5c" and wire[2] == 21 and wire[3:5] == b"\x00\x03"
    assert wire[0x15] == 1 and wire[0x16] == 2 and wire[0x17:0x1B] == (6).to_bytes(4, "big") and wire[0x1B] == 2
    assert wire[0x5C:] == b"game"
    back = decode_application_data(wire, prof)
    assert back == prop and isinstance(back, LdnSystemProperty) and back.player_name == "Pia"


def test_d12_6x_network_id_and_key() -> None:
    ssid = bytes(range(16))
    assert LdnSystemProperty.network_id_for(ssid) == 0xF5A6AA3A
    assert LdnSystemProperty.session_key(SMM2, ssid).hex() == "c4fd49cc9971756176ee8c68c3043d7f"


def test_family_and_size_errors() -> None:
    with pytest.raises(ConfigError):
        LdnApplicationData.decode(bytes(24), profile_for("6.30"))
    with pytest.raises(ConfigError):
        LdnApplicationData.build(profile_for("5.18"), network_id=1)  # 5.9+ needs a session param
    with pytest.raises(EncodeError):
        LdnApplicationData(1, 0, 0, 5, bytes(400), 16).encode()
    with pytest.raises(BadValue):
        LdnApplicationData.decode(bytes(385), profile_for("5.18"))


@settings(max_examples=100, deadline=None)
@given(u32, u32, st.integers(0, 255), u32, st.sampled_from([16, 24]), st.binary(max_size=300),
       st.binary(min_size=10, max_size=10))  # fmt: skip
def test_5x_round_trip_property(nid: int, crc: int, sys_v: int, param: int, size: int, game: bytes, pad: bytes) -> None:
    app = LdnApplicationData(nid, crc, sys_v, param, game, size, pad[: 2 if size == 16 else 10])
    wire = app.encode()
    back = LdnApplicationData.decode(wire, profile_for("5.18"))
    assert back.encode() == wire
    assert (back.network_id, back.session_param, back.game_data) == (nid, param, game)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400), st.sampled_from(["5.3", "5.7", "5.9", "5.18", "5.29", "6.16", "6.30"]))
def test_garbage_value_or_decode_error(data: bytes, version: str) -> None:
    prof = profile_for(version)
    try:
        value = decode_application_data(data, prof)
    except DecodeError:
        return
    assert value.encode(prof) == data
