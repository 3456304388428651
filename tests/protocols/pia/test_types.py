"""Pia common types (spec §5.2): round trips per version, sizes and offsets, garbage."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pia_type_strategies import (
    STATION_VERSIONS,
    any_locations,
    any_players,
    V6_VERSIONS,
    connection_infos,
    inet,
    mesh_station_infos,
    player_infos,
    station_addresses,
    station_locations,
)

from protocols.errors import BadValue, ConfigError, DecodeError, EncodeError, ShortData, TrailingData
from protocols.pia.types import (
    InetAddress,
    MeshStationInfo,
    PlayerInfo,
    SessionPlayerInfo,
    SessionStationAddress,
    StationAddress,
    StationConnectionInfo,
    StationLocation,
    decode_inet_address,
    decode_mesh_station_info,
    decode_player_info,
    decode_session_player_info,
    decode_session_station_address,
    decode_station_address,
    decode_station_connection_info,
    decode_station_location,
    mesh_station_info_size,
    player_info_size,
)
from protocols.pia.versions import profile_for
from protocols.wire import Reader

FEW = settings(max_examples=8, deadline=None)
SOME = settings(max_examples=40, deadline=None)

CONNECTION_INFO_VERSIONS = [v for v in STATION_VERSIONS if profile_for(v).version <= (5, 9)]


# -- InetAddress / StationAddress ---------------------------------------------


@SOME
@given(inet((0, 4, 16)))
def test_inet_address_round_trip_every_size(addr: InetAddress) -> None:
    data = addr.encode()
    assert len(data) == addr.size == 2 + len(addr.address)
    assert decode_inet_address(data, addr.size) == addr


def test_inet_address_layout() -> None:
    addr = InetAddress.from_ip("192.168.178.215", 49154)
    assert addr.encode(profile_for("5.10")) == bytes([192, 168, 178, 215, 0xC0, 0x02])
    assert str(addr.ip) == "192.168.178.215"
    v6 = InetAddress.from_ip("2001:db8::1", 7)
    assert v6.encode() == bytes.fromhex("20010db8000000000000000000000001") + b"\x00\x07"
    assert InetAddress(b"", 9).encode() == b"\x00\x09"
    assert InetAddress(b"", 9).ip is None


def test_inet_address_rejects_bad_sizes() -> None:
    with pytest.raises(EncodeError):
        InetAddress(b"", 1).encode(profile_for("5.9"))  # <= 5.10 is IPv4-only
    with pytest.raises(EncodeError):
        InetAddress(b"abc", 1).encode()
    with pytest.raises(BadValue):
        decode_inet_address(bytes(7), 7)
    with pytest.raises(ShortData):
        decode_inet_address(bytes(5), 6)
    with pytest.raises(TrailingData):
        decode_inet_address(bytes(7), 6)


@pytest.mark.parametrize(
    ("version", "size"), [("3.6", 8), ("4.10", 8), ("5.2", 6), ("5.10", 6), ("6.16", 18), ("6.30", 18)]
)
def test_station_address_fixed_sizes(version: str, size: int) -> None:
    p = profile_for(version)
    addr = StationAddress(InetAddress(bytes(16 if size == 18 else 4), 5), 7 if size == 8 else 0)
    data = addr.encode(p)
    assert len(data) == size
    assert decode_station_address(data, p) == addr


@pytest.mark.parametrize("version", ["4.10", "5.9", "5.18", "5.29"])
@FEW
@given(data=st.data())
def test_station_address_eight_byte_form(version: str, data: st.DataObject) -> None:
    p = profile_for(version)
    addr = data.draw(station_addresses(p, 8))
    raw = addr.encode(p, 8)
    assert len(raw) == 8 and raw[6:8] == addr.extension_id.to_bytes(2, "big")
    assert decode_station_address(raw, p, 8) == addr


def test_station_address_5_11_needs_its_size() -> None:
    p = profile_for("5.18")
    with pytest.raises(ConfigError):
        decode_station_address(bytes(6), p)
    assert decode_station_address(bytes(18), p, 18) == StationAddress(InetAddress(bytes(16), 0))
    with pytest.raises(EncodeError):
        StationAddress(InetAddress(), 3).encode(p, 6)  # no room for an extension id


# -- StationLocation -------------------------------------------------------------


@pytest.mark.parametrize("version", STATION_VERSIONS + V6_VERSIONS)
@FEW
@given(data=st.data())
def test_station_location_round_trip(version: str, data: st.DataObject) -> None:
    p = profile_for(version)
    loc = data.draw(station_locations(p))
    raw = loc.encode(p)
    assert decode_station_location(raw, p) == loc
    # Reading from a Reader leaves what follows.
    r = Reader(raw + b"\xAA")
    assert decode_station_location(r, p) == loc
    assert r.remaining() == 1


@pytest.mark.parametrize(
    ("version", "public", "private", "size"),
    [
        ("3.3", 4, 4, 27),
        ("4.10", 4, 4, 27),
        ("5.2", 4, 4, 35),
        ("5.9", 4, 4, 35),
        ("5.10", 4, 4, 38),
        ("5.11", 4, 4, 40),
        ("5.18", 4, 4, 40),
        ("5.29", 4, 4, 40),
        ("5.29", 0, 0, 32),
        ("5.29", 16, 16, 64),
        ("5.45", 16, 4, 52),
        ("6.16", 16, 16, 30),
    ],
)
def test_station_location_sizes_match_spec_table(version: str, public: int, private: int, size: int) -> None:
    p = profile_for(version)
    kw = {} if p.version <= (5, 9) or p.version > (5, 45) else {"private": InetAddress(bytes(private), 0)}
    loc = StationLocation(public=InetAddress(bytes(public), 0), **kw)
    assert len(loc.encode(p)) == size


def test_station_location_5_18_field_offsets() -> None:
    p = profile_for("5.18")
    loc = StationLocation(
        public=InetAddress.from_ip("1.2.3.4", 0x1111),
        private=InetAddress.from_ip("10.0.0.2", 0x2222),
        relay=InetAddress.from_ip("5.6.7.8", 0x3333),
        constant_id=0x0102030405060708,
        variable_id=0xAABBCCDD,
        service_variable_id=0x11223344,
        nat_filtering=1,
        nat_mapping=2,
        nat_type=3,
        nat_location=2,
        probe_init=1,
        private_available=1,
    )
    raw = loc.encode(p)
    assert raw[0:2] == b"\x06\x06"  # both address sizes
    assert raw[2:8] == bytes([1, 2, 3, 4, 0x11, 0x11])
    assert raw[8:14] == bytes([10, 0, 0, 2, 0x22, 0x22])
    assert raw[14:20] == bytes([5, 6, 7, 8, 0x33, 0x33])
    assert raw[20:28] == bytes(range(1, 9))
    assert raw[28:32] == bytes.fromhex("aabbccdd")
    assert raw[32:36] == bytes.fromhex("11223344")
    assert raw[36] == 0x39  # 0x03 filtering=1, 0x0C mapping=2, 0xF0 type=3
    assert raw[37:40] == bytes([2, 1, 1])


def test_station_location_4_10_field_offsets() -> None:
    p = profile_for("4.10")
    loc = StationLocation(
        public=InetAddress.from_ip("1.2.3.4", 5), extension_id=2, constant_id=0x11223344, variable_id=6,
        service_variable_id=7, url_type=1, stream_id=2, stream_type=3, nat_mapping=4, nat_filtering=5,
        nat_location=6, probe_init=7,
    )
    raw = loc.encode(p)
    assert raw == bytes([1, 2, 3, 4, 0, 5, 0, 2, 0x11, 0x22, 0x33, 0x44, 0, 0, 0, 6, 0, 0, 0, 7, 1, 2, 3, 4, 5, 6, 7])


def test_station_location_6x_layout() -> None:
    p = profile_for("6.20")
    loc = StationLocation(public=InetAddress(bytes(range(16)), 0x1234), constant_id=9, variable_id=0xBEEF,
                          nat_filtering=2, nat_mapping=1, nat_type=1)
    raw = loc.encode(p)
    assert raw[0] == 18 and raw[1:17] == bytes(range(16)) and raw[17:19] == b"\x12\x34"
    assert raw[19:27] == (9).to_bytes(8, "big") and raw[27:29] == b"\xbe\xef"
    assert raw[29] == 0x16  # is-IPv6 0x10, mapping 0x04, filtering 0x02
    with pytest.raises(BadValue):
        decode_station_location(b"\x06" + raw[1:], p)


def test_station_location_nat_fields_must_fit_their_bits() -> None:
    with pytest.raises(EncodeError):
        StationLocation(nat_mapping=4).encode(profile_for("5.18"))
    with pytest.raises(EncodeError):
        StationLocation(nat_type=16).encode(profile_for("5.29"))


@pytest.mark.parametrize("version", CONNECTION_INFO_VERSIONS)
@FEW
@given(data=st.data())
def test_station_connection_info_round_trip(version: str, data: st.DataObject) -> None:
    p = profile_for(version)
    info = data.draw(connection_infos(p))
    raw = info.encode(p)
    assert len(raw) == (54 if p.version <= (4, 10) else 70)
    assert decode_station_connection_info(raw, p) == info


def test_station_connection_info_only_up_to_5_9() -> None:
    with pytest.raises(EncodeError):
        StationConnectionInfo().encode(profile_for("5.10"))
    with pytest.raises(DecodeError):
        decode_station_connection_info(bytes(70), profile_for("5.10"))


# -- PlayerInfo -------------------------------------------------------------------


@pytest.mark.parametrize("version", STATION_VERSIONS)
@FEW
@given(data=st.data())
def test_player_info_round_trip(version: str, data: st.DataObject) -> None:
    p = profile_for(version)
    info = data.draw(player_infos(p))
    raw = info.encode(p)
    assert len(raw) == player_info_size(p)
    assert decode_player_info(raw, p) == info


@pytest.mark.parametrize(
    ("version", "size"), [("3.3", 36), ("3.10", 36), ("4.5", 40), ("4.10", 40), ("5.2", 187), ("5.6", 187),
                          ("5.7", 195), ("5.18", 195), ("5.26", 195), ("5.27", 195), ("5.45", 195)]
)
def test_player_info_sizes_match_spec_table(version: str, size: int) -> None:
    p = profile_for(version)
    assert player_info_size(p) == size
    assert len(PlayerInfo().encode(p)) == size


def test_player_info_5_18_offsets() -> None:
    p = profile_for("5.18")
    info = PlayerInfo.from_text("Pia", p, encoding=1, account_name="acct", language=3, principal_id=0x1122334455667788)
    info = PlayerInfo(info.name, 1, 0, 3, 0, info.account_name, 1, b"K" * 64, 0x1122334455667788)
    raw = info.encode(p)
    assert raw[0:3] == b"Pia" and raw[3:80] == bytes(77)
    assert raw[0x50] == 1  # name encoding
    assert raw[0x51:0x55] == b"acct"
    assert raw[0x79] == 1  # account encoding
    assert raw[0x7A] == 3  # language
    assert raw[0x7B:0xBB] == b"K" * 64
    assert raw[0xBB:0xC3] == bytes.fromhex("1122334455667788")


def test_player_info_5_29_swaps_encoding_and_string() -> None:
    p = profile_for("5.29")
    info = PlayerInfo.from_text("Ab", p, account_name="Cd", language=9)
    raw = info.encode(p)
    assert raw[0] == 2 and raw[1:5] == "Ab".encode("utf-16-be")
    assert raw[0x51] == 2 and raw[0x52:0x56] == "Cd".encode("utf-16-be")
    assert raw[0x7A] == 9
    back = decode_player_info(raw, p)
    assert back.name_text == "Ab" and back.account_name_text == "Cd"


def test_player_info_4x_layout_and_text() -> None:
    p = profile_for("4.10")
    info = PlayerInfo.from_text("BBGAME", p, gathering_id=0x8C4ED336)
    raw = info.encode(p)
    assert raw[:12] == "BBGAME".encode("utf-16-be")
    assert raw[0x20] == 6 and raw[0x21] == 0
    assert raw[0x22:0x26] == bytes.fromhex("8c4ed336") and raw[0x26:0x28] == b"\0\0"
    assert decode_player_info(raw, p).name_text == "BBGAME"
    padded = raw[:-1] + b"\x01"  # the 2 "Padding" bytes (KW Station-Protocol.md) are kept as sent
    assert decode_player_info(padded, p) == attrs.evolve(info, padding=b"\0\1")
    assert decode_player_info(padded, p).encode(p) == padded


def test_player_info_name_too_long() -> None:
    with pytest.raises(EncodeError):
        PlayerInfo(b"x" * 33).encode(profile_for("4.10"))


# -- Mesh StationInfo ------------------------------------------------------------------


@pytest.mark.parametrize("version", STATION_VERSIONS)
@FEW
@given(data=st.data())
def test_mesh_station_info_round_trip(version: str, data: st.DataObject) -> None:
    p = profile_for(version)
    info = data.draw(mesh_station_infos(p))
    raw = info.encode(p)
    assert len(raw) == mesh_station_info_size(p)
    assert decode_mesh_station_info(raw, p) == info


@pytest.mark.parametrize(
    ("version", "size"), [("3.6", 56), ("4.10", 56), ("5.2", 72), ("5.9", 72), ("5.10", 64), ("5.18", 64),
                          ("5.26", 64), ("5.27", 68), ("5.29", 68), ("5.31", 68), ("5.45", 68)]
)
def test_mesh_station_info_sizes_match_spec_table(version: str, size: int) -> None:
    p = profile_for(version)
    assert mesh_station_info_size(p) == size


def test_mesh_station_info_5_18_and_5_31_offsets() -> None:
    loc = StationLocation(constant_id=5)
    raw = MeshStationInfo(loc, 3).encode(profile_for("5.18"))
    assert raw[:40] == loc.encode(profile_for("5.18")) and raw[40:62] == bytes(22)
    assert raw[62] == 3 and raw[63] == 0
    raw = MeshStationInfo(loc, 3, 0x0102).encode(profile_for("5.31"))
    assert raw[40:64] == bytes(24) and raw[64] == 3 and raw[65:67] == b"\x01\x02" and raw[67] == 0
    raw = MeshStationInfo(loc, 3).encode(profile_for("5.29"))
    assert raw[64] == 3 and raw[65:] == bytes(3)


def test_mesh_station_info_rejects_oversized_location_keeps_dirty_fill() -> None:
    p = profile_for("5.18")
    big = StationLocation(public=InetAddress(bytes(16), 0), private=InetAddress(bytes(16), 0))
    with pytest.raises(EncodeError):
        MeshStationInfo(big, 1).encode(p)  # 64 bytes do not fit the 62-byte slot
    raw = bytearray(MeshStationInfo(StationLocation(), 1).encode(p))
    raw[50] = 1  # the location (40 bytes) is followed by its zero fill: other bytes there are kept
    assert decode_mesh_station_info(bytes(raw), p).location_fill == bytes(10) + b"\1"
    assert decode_mesh_station_info(bytes(raw), p).encode(p) == bytes(raw)
    with pytest.raises(EncodeError):
        MeshStationInfo(StationConnectionInfo(), 1).encode(p)


# -- garbage ----------------------------------------------------------------------------

DECODERS = [decode_station_location, decode_player_info, decode_mesh_station_info]


@pytest.mark.parametrize("version", ["3.6", "4.10", "5.6", "5.9", "5.10", "5.18", "5.26", "5.29", "5.45"])
@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=260), st.sampled_from(DECODERS))
def test_garbage_decodes_to_a_value_that_re_encodes_or_raises_decode_error(version, blob, decoder) -> None:
    p = profile_for(version)
    try:
        value = decoder(blob, p)
    except DecodeError:
        return
    assert value.encode(p) == blob


# -- 6.x Session protocol pieces -------------------------------------------------------


@SOME
@given(inet((4, 16)), st.binary(min_size=16, max_size=16), st.binary(max_size=40), st.integers(0, 255))
def test_session_types_round_trip(addr: InetAddress, pid: bytes, name: bytes, enc: int) -> None:
    tagged = SessionStationAddress(addr)
    raw = tagged.encode()
    assert raw[0] == (0 if len(addr.address) == 4 else 1) and len(raw) == 1 + addr.size
    assert decode_session_station_address(raw) == tagged
    info = SessionPlayerInfo(pid, name, enc)
    raw = info.encode()
    assert raw[:16] == pid and raw[16:20] == len(name).to_bytes(4, "big") and raw[20] == enc and raw[21:] == name
    assert decode_session_player_info(raw) == info


def test_session_types_errors_and_6x_player_info() -> None:
    with pytest.raises(BadValue):
        decode_session_station_address(b"\x02" + bytes(6))
    with pytest.raises(ShortData):
        decode_session_player_info(bytes(16) + b"\x00\x00\x00\x05\x01abc")
    with pytest.raises(EncodeError):
        SessionStationAddress(InetAddress(b"", 0)).encode()
    assert SessionPlayerInfo(bytes(16), "Zoë".encode(), 1).name_text == "Zoë"
    with pytest.raises(DecodeError):
        decode_player_info(bytes(195), profile_for("6.20"))
    with pytest.raises(EncodeError):
        PlayerInfo().encode(profile_for("6.20"))


# -- fields a version cannot carry are refused, never dropped ---------------------------

ALL_VERSIONS = STATION_VERSIONS + V6_VERSIONS


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(ALL_VERSIONS), any_locations, any_players, st.integers(0, 0xFFFF))
def test_encode_refuses_or_round_trips(version: str, loc: StationLocation, player: PlayerInfo, order: int) -> None:
    p = profile_for(version)
    cases = [(loc, decode_station_location)]
    if p.version <= (5, 45):
        cases.append((player, decode_player_info))
        if p.version >= (5, 10):
            cases.append((MeshStationInfo(loc, 1, order), decode_mesh_station_info))
    for value, decode in cases:
        try:
            raw = value.encode(p)
        except EncodeError:
            continue
        assert decode(raw, p) == value


def test_unused_fields_are_refused() -> None:
    with pytest.raises(EncodeError, match="private"):
        StationLocation(private=InetAddress(b"", 0)).encode(profile_for("5.9"))
    with pytest.raises(EncodeError, match="principal_id"):
        PlayerInfo(principal_id=1).encode(profile_for("5.6"))
    with pytest.raises(EncodeError, match="join_order"):
        MeshStationInfo(StationLocation(), 1, 5).encode(profile_for("5.29"))
