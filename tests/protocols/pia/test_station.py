"""Station protocol payloads (spec §5.3): round trips for every version, offsets, real 3DS bytes."""

from __future__ import annotations

import functools

import json
import pathlib

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pia_type_strategies import (
    STATION_VERSIONS,
    connection_infos,
    mutated,
    nul_free_tail,
    player_infos,
    station_locations,
    u8,
    u32,
    u64,
)

from protocols.errors import BadValue, DecodeError, EncodeError, UnsupportedVersion
from protocols.pia.station import (
    Ack,
    ConnectionDenied,
    ConnectionRequest,
    ConnectionResponse,
    ConnectionResult,
    DisconnectionRequest,
    DisconnectionResponse,
    Platform,
    StationOpaque,
    decode_station_message,
    profiles_with_station_version,
    trailing_ack_id,
)
from protocols.pia.types import InetAddress, PlayerInfo, StationConnectionInfo, StationLocation
from protocols.pia.versions import VersionProfile, profile_for
from protocols.wire import Reader

FEW = settings(max_examples=10, deadline=None)

protocol_lists = st.lists(st.tuples(u8, u8), max_size=6).map(tuple)


@functools.cache
def requests(p: VersionProfile) -> st.SearchStrategy[ConnectionRequest]:
    v = p.version
    kw: dict[str, st.SearchStrategy[object]] = {"ack_id": u32}
    if v <= (5, 26):
        kw |= {"connection_id": u8, "is_inverse": st.booleans()}
        if v <= (5, 9):
            kw["connection_info"] = connection_infos(p)
        else:
            kw["location"] = station_locations(p)
        if v <= (5, 18):
            kw["version"] = u8
        else:
            kw["protocols"] = protocol_lists
        if v >= (5, 2):
            kw["target_constant_id"] = u64
        if v >= (5, 7):
            kw |= {"target_variable_id": u32, "inverse_connection_id": u8}
    else:
        kw |= {
            "result": u8, "platform": u8, "target_constant_id": u64, "target_variable_id": u32,
            "protocols": protocol_lists, "location": station_locations(p), "token": nul_free_tail(32),
            "network_id": u32, "player_count": u8, "participant_count": u8,
            "players": st.lists(player_infos(p), max_size=4).map(tuple),
        }
    return st.builds(ConnectionRequest, **kw)


def _mask_last_pid(players: tuple[PlayerInfo, ...]) -> tuple[PlayerInfo, ...]:
    # 5.19-5.23 lose the final byte of the PlayerInfo array (the low byte of
    # the last principal id); the decoder restores it as 0.
    if not players:
        return players
    return players[:-1] + (attrs.evolve(players[-1], principal_id=players[-1].principal_id & ~0xFF),)


@functools.cache
def responses(p: VersionProfile) -> st.SearchStrategy[ConnectionResponse]:
    v = p.version
    kw: dict[str, st.SearchStrategy[object]] = {"ack_id": u32, "platform": u8, "token": nul_free_tail(32)}
    if v <= (4, 10):
        return st.builds(ConnectionResponse, version=u8, players=player_infos(p).map(lambda x: (x,)), **kw)
    players = st.lists(player_infos(p), max_size=4).map(tuple)
    kw |= {"network_id": u32, "player_count": u8, "participant_count": u8}
    if v <= (5, 26):
        kw |= {"version": u8, "fragment_id": u8, "player_info_count": u8}
        if v >= (5, 7):
            kw |= {"target_constant_id": u64, "target_variable_id": u32}
        if v >= (5, 19):
            kw["protocol_id"] = u8
        if v >= (5, 24):
            kw["connection_id"] = u8
        if (5, 19) <= v <= (5, 23):
            players = players.map(_mask_last_pid)
    else:
        kw |= {"target_constant_id": u64, "target_variable_id": u32, "protocols": protocol_lists,
               "location": station_locations(p), "player_info_count": u8}
    return st.builds(ConnectionResponse, players=players, **kw)


@functools.cache
def denials(p: VersionProfile) -> st.SearchStrategy[ConnectionDenied]:
    v = p.version
    kw: dict[str, st.SearchStrategy[object]] = {"result": st.integers(1, 255)}
    if v <= (5, 18):
        kw["version"] = u8
        if v >= (5, 7):
            kw |= {"constant_id": u64, "variable_id": u32}
    else:
        kw |= {"constant_id": u64, "variable_id": u32}
        if v <= (5, 26):
            kw |= {"protocol_id": u8, "expected_version": u8}
        if (5, 24) <= v <= (5, 26):
            kw["connection_id"] = u8
    return st.builds(ConnectionDenied, **kw)


@functools.cache
def station_messages(p: VersionProfile) -> st.SearchStrategy[object]:
    return st.one_of(
        requests(p), responses(p), denials(p), st.builds(Ack, u32),
        st.just(DisconnectionRequest()), st.just(DisconnectionResponse()),
        st.builds(StationOpaque, st.sampled_from([6, 7]), st.binary(max_size=20)),
    )


@pytest.mark.parametrize("version", STATION_VERSIONS)
@FEW
@given(data=st.data())
def test_connection_request_round_trip(version: str, data: st.DataObject) -> None:
    p = profile_for(version)
    msg = data.draw(requests(p))
    raw = msg.encode(p)
    assert raw[0] == 1 and int.from_bytes(raw[-4:], "big") == msg.ack_id
    assert decode_station_message(raw, p) == msg


@pytest.mark.parametrize("version", STATION_VERSIONS)
@FEW
@given(data=st.data())
def test_connection_response_round_trip(version: str, data: st.DataObject) -> None:
    p = profile_for(version)
    msg = data.draw(responses(p))
    raw = msg.encode(p)
    assert raw[:2] == b"\x02\x00" and int.from_bytes(raw[-4:], "big") == msg.ack_id
    assert decode_station_message(raw, p) == msg


@pytest.mark.parametrize("version", STATION_VERSIONS)
@FEW
@given(data=st.data())
def test_connection_denied_round_trip(version: str, data: st.DataObject) -> None:
    p = profile_for(version)
    msg = data.draw(denials(p))
    raw = msg.encode(p)
    assert raw[0] == 2 and raw[1] == msg.result
    assert decode_station_message(raw, p) == msg


@pytest.mark.parametrize("version", STATION_VERSIONS)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_mutated_messages_decode_to_a_faithful_value_or_raise(version: str, data: st.DataObject) -> None:
    p = profile_for(version)
    raw = data.draw(mutated(data.draw(station_messages(p)).encode(p)))
    try:
        value = decode_station_message(raw, p)
    except DecodeError:
        return
    assert value.encode(p) == raw


@pytest.mark.parametrize("version", ["3.6", "4.10", "5.6", "5.9", "5.18", "5.19", "5.26", "5.29", "5.45"])
@settings(max_examples=80, deadline=None)
@given(blob=st.binary(max_size=400))
def test_garbage_decodes_to_a_faithful_value_or_raises(version: str, blob: bytes) -> None:
    p = profile_for(version)
    try:
        value = decode_station_message(blob, p)
    except DecodeError:
        return
    assert value.encode(p) == blob


# -- layouts against the spec tables ------------------------------------------------


def _player(p: VersionProfile, pid: int = 0x0102030405060708) -> PlayerInfo:
    return PlayerInfo.from_text("P", p, principal_id=pid)


def test_connection_response_5_18_offsets() -> None:
    p = profile_for("5.18")
    msg = ConnectionResponse(
        ack_id=0xDEADBEEF, platform=Platform.SWITCH, fragment_id=0, target_constant_id=0x1112131415161718,
        target_variable_id=0x21222324, token=b"tok", network_id=0x31323334, player_count=2,
        participant_count=2, player_info_count=2, players=(_player(p),) * 4,
    )
    raw = msg.encode(p)
    assert raw[0:5] == bytes([2, 0, 9, 4, 0])  # type, result, version 9, platform, fragment
    assert raw[0x5:0xD] == bytes.fromhex("1112131415161718")
    assert raw[0xD:0x11] == bytes.fromhex("21222324")
    assert raw[0x11:0x14] == b"tok" and raw[0x14:0x31] == bytes(29)
    assert raw[0x31:0x35] == bytes.fromhex("31323334")
    assert raw[0x35:0x38] == bytes([2, 2, 2])
    assert raw[0x38:0x38 + 195] == _player(p).encode(p)
    assert len(raw) == 0x38 + 4 * 195 + 4 and raw[-4:] == bytes.fromhex("deadbeef")


def test_connection_response_5_19_drops_the_final_player_byte() -> None:
    p = profile_for("5.19")
    msg = ConnectionResponse(ack_id=1, platform=4, token=b"t", players=(_player(p), _player(p, 0x1100)))
    raw = msg.encode(p)
    assert raw[0:6] == bytes([2, 0, 0x14, 0, 4, 0])  # protocol id 0x14, MeshStation version 0
    assert raw[0x12] == ord("t") and raw[0x39:0x39 + 195] == _player(p).encode(p)
    assert len(raw) == 0x39 + 2 * 195 - 1 + 4
    msg = attrs.evolve(msg, version=0, protocol_id=0x14)
    assert decode_station_message(raw, p) == msg
    lossy = attrs.evolve(msg, players=(_player(p), _player(p, 0x11FF)))
    assert decode_station_message(lossy.encode(p), p) == msg


def test_connection_response_5_26_adds_connection_id() -> None:
    p = profile_for("5.26")
    msg = ConnectionResponse(ack_id=1, connection_id=0x42, token=b"t", players=(_player(p),) * 2)
    raw = msg.encode(p)
    assert raw[2:4] == bytes([0x14, 1]) and raw[0x12] == 0x42 and raw[0x13] == ord("t")
    assert raw[0x3A:0x3A + 195] == _player(p).encode(p) and len(raw) == 0x3A + 390 + 4


def test_connection_request_5_29_layout() -> None:
    p = profile_for("5.29")
    loc = StationLocation(public=InetAddress.from_ip("10.0.0.1", 1), constant_id=7)
    msg = ConnectionRequest(
        ack_id=9, platform=4, target_constant_id=0x55, target_variable_id=0x66, protocols=((0x14, 2), (0x18, 2)),
        location=loc, token=b"id", network_id=0x77, player_count=1, participant_count=1, players=(_player(p),),
    )
    raw = msg.encode(p)
    assert raw[0:3] == bytes([1, 0, 4])
    assert raw[3:11] == (0x55).to_bytes(8, "big") and raw[11:15] == (0x66).to_bytes(4, "big")
    assert raw[15:20] == bytes([2, 0x14, 2, 0x18, 2])
    assert raw[20:22] == (40).to_bytes(2, "big") and raw[22:62] == loc.encode(p)
    assert raw[62:64] == b"id" and raw[94:98] == (0x77).to_bytes(4, "big")
    assert raw[98:101] == bytes([1, 1, 1]) and raw[101:296] == _player(p).encode(p)
    assert raw[296:] == (9).to_bytes(4, "big")


def test_connection_request_5_18_layout() -> None:
    p = profile_for("5.18")
    loc = StationLocation(constant_id=3)
    msg = ConnectionRequest(ack_id=5, connection_id=7, is_inverse=True, target_constant_id=0x99,
                            target_variable_id=0x88, inverse_connection_id=6, location=loc)
    raw = msg.encode(p)
    assert raw[:4] == bytes([1, 7, 9, 1])  # version 9 from the profile
    assert raw[4:12] == (0x99).to_bytes(8, "big") and raw[12:16] == (0x88).to_bytes(4, "big") and raw[16] == 6
    assert raw[17:57] == loc.encode(p) and raw[57:] == (5).to_bytes(4, "big")
    assert decode_station_message(raw, p) == attrs.evolve(msg, version=9)


@pytest.mark.parametrize(
    ("version", "size"), [("3.6", 4), ("5.6", 4), ("5.7", 17), ("5.18", 17), ("5.19", 18), ("5.23", 18),
                          ("5.24", 19), ("5.26", 19), ("5.27", 15), ("5.45", 15)]
)
def test_denial_sizes(version: str, size: int) -> None:
    p = profile_for(version)
    raw = ConnectionDenied(ConnectionResult.VERSION_TOO_LOW, version=1 if p.version <= (5, 18) else None).encode(p)
    assert len(raw) == size and raw[:2] == b"\x02\x02"


def test_ack_and_disconnection() -> None:
    p = profile_for("5.29")
    assert Ack(0x01020304).encode(p) == bytes.fromhex("0500000001020304")
    assert DisconnectionRequest().encode(p) == b"\x03"
    assert DisconnectionResponse().encode(p) == b"\x04"
    assert decode_station_message(b"\x03", p) == DisconnectionRequest()
    assert decode_station_message(b"\x04", p) == DisconnectionResponse()
    padded = bytes.fromhex("0500010001020304")  # the 3 bytes are "Padding" (KW Station-Protocol.md): kept
    assert decode_station_message(padded, p) == Ack(0x01020304, padding=b"\0\1")
    assert decode_station_message(padded, p).encode(p) == padded
    with pytest.raises(BadValue):
        decode_station_message(b"\x08", p)
    with pytest.raises(DecodeError):
        decode_station_message(b"", p)


def test_misuse_and_6x() -> None:
    with pytest.raises(EncodeError):
        ConnectionRequest(ack_id=1).encode(profile_for("5.18"))  # no location
    with pytest.raises(EncodeError):
        ConnectionRequest(ack_id=1).encode(profile_for("5.6"))  # no connection info
    with pytest.raises(EncodeError):
        ConnectionResponse(ack_id=1).encode(profile_for("4.10"))  # exactly one PlayerInfo
    with pytest.raises(EncodeError):
        ConnectionDenied(result=0).encode(profile_for("5.18"))
    with pytest.raises(EncodeError):
        Ack(1).encode(profile_for("6.20"))
    with pytest.raises(UnsupportedVersion):
        decode_station_message(bytes(8), profile_for("6.20"))
    with pytest.raises(BadValue):
        decode_station_message(bytes([1, 1, 9, 2]) + bytes(200), profile_for("5.18"))  # is-inverse 2


def test_trailing_ack_id() -> None:
    from protocols.pia.mesh import JoinRefused, JoinRequest, JoinResponse

    assert trailing_ack_id(ConnectionRequest(ack_id=3)) == 3
    assert trailing_ack_id(ConnectionResponse(ack_id=4)) == 4
    assert trailing_ack_id(JoinRequest(5)) == 5
    assert trailing_ack_id(JoinResponse(6, 1, 0, 0, ())) == 6
    for once in (Ack(7), ConnectionDenied(), DisconnectionRequest(), JoinRefused(1)):
        assert trailing_ack_id(once) is None


def test_reader_source_leaves_the_rest() -> None:
    p = profile_for("5.18")
    r = Reader(Ack(7).encode(p) + b"\xEE")
    assert decode_station_message(r, p) == Ack(7)
    assert r.remaining() == 1


# -- real 3DS traffic (Pia 4.x: station protocol version byte 5) ----------------------


def _station_payloads(captures: pathlib.Path) -> list[tuple[str, bool, bytes]]:
    doc = json.loads((captures / "mgba-uds-frames.expected.json").read_text())
    out = []
    for frame in doc["frames"]:
        for m in (frame["pia"] or {}).get("messages", []):
            if m["protocol_type"] == 0x0100:
                out.append((frame["name"], frame["from_host"], bytes.fromhex(m["payload_hex"])))
    return out


def test_station_version_byte_names_the_layout_family() -> None:
    assert [x.name for x in profiles_with_station_version(5)] == ["4.5", "4.6", "4.7", "4.8", "4.9", "4.10"]
    assert [x.name for x in profiles_with_station_version(9)] == ["5.10", "5.11", "5.12", "5.14", "5.17", "5.18"]
    assert {x.name for x in profiles_with_station_version(2)} == {"3.3", "3.4", "3.5", "3.6"}
    assert profiles_with_station_version(0) == ()


def test_real_3ds_station_messages(captures: pathlib.Path) -> None:
    payloads = _station_payloads(captures)
    assert len(payloads) == 7
    # The request's version byte (offset 2) is 5: the 4.5-4.10 layouts, all identical.
    family = profiles_with_station_version(payloads[0][2][2])
    assert {x.name for x in family} == {"4.5", "4.6", "4.7", "4.8", "4.9", "4.10"}
    for other in family:
        for _, _, raw in payloads:
            assert decode_station_message(raw, other).encode(other) == raw
    p = profile_for("4.10")
    decoded = {}
    for name, _, raw in payloads:
        msg = decode_station_message(raw, p)
        assert msg.encode(p) == raw, name
        decoded[name] = msg
    req, inverse = decoded["join 1"], decoded["join 2"]
    assert isinstance(req, ConnectionRequest) and isinstance(inverse, ConnectionRequest)
    assert (req.version, req.is_inverse, req.connection_id) == (5, False, 0x3C)
    assert (inverse.version, inverse.is_inverse, inverse.connection_id) == (5, True, 0x90)
    # The connection ids match the ones each side then uses in its packet headers (60 joiner, 144 host).
    assert req.connection_info is not None and inverse.connection_info is not None
    assert req.connection_info.public.extension_id == 2  # UDS node 2 (joiner)
    assert inverse.connection_info.public.extension_id == 1  # UDS node 1 (host)
    assert decoded["join 3"] == Ack(inverse.ack_id)
    joiner, host = decoded["join 4"], decoded["join 5"]
    assert isinstance(joiner, ConnectionResponse) and isinstance(host, ConnectionResponse)
    assert joiner.ack_id == req.ack_id + 1 and host.ack_id == inverse.ack_id + 1
    assert joiner.platform == host.platform == Platform.CTR
    assert joiner.players[0].name_text == "BBGAME" and joiner.players[0].name_length == 6
    assert host.players[0].name_text == "1" and host.players[0].name_length == 1
    # Both carry the gathering id the host advertises little-endian in its UDS beacon.
    beacon = bytes.fromhex(json.loads((captures / "mgba-uds-frames.expected.json").read_text())["host_beacon_app_data"])
    assert joiner.players[0].gathering_id == host.players[0].gathering_id == int.from_bytes(beacon[4:8], "little")
    # The 3DS game fills the "ASCII" identification token with its UTF-16LE player name.
    assert joiner.token == "BBGAME".encode("utf-16-le").rstrip(b"\0")
    assert host.token == "1".encode("utf-16-le").rstrip(b"\0")
    assert decoded["join 6"] == Ack(host.ack_id)


# -- fields a version cannot carry are refused, never dropped --------------------------

_FIELD_VALUES: dict[str, st.SearchStrategy[object]] = {
    "version": st.one_of(st.none(), u8),
    "protocol_id": st.one_of(st.none(), u8),
    "is_inverse": st.booleans(),
    "connection_info": st.one_of(st.none(), st.just(StationConnectionInfo())),
    "location": st.one_of(st.none(), st.just(StationLocation())),
    "protocols": st.just(((0x14, 2),)),
    "token": st.just(b"t"),
    "players": st.sampled_from([(), (PlayerInfo(),)]),
}


@settings(max_examples=300, deadline=None)
@given(version=st.sampled_from(STATION_VERSIONS), data=st.data())
def test_encode_refuses_or_round_trips(version: str, data: st.DataObject) -> None:
    """Set one field of a valid message to anything: encode refuses it or it survives the round trip."""
    p = profile_for(version)
    msg = data.draw(st.one_of(requests(p), responses(p), denials(p)))
    field = data.draw(st.sampled_from([f.name for f in attrs.fields(type(msg))]))
    values = _FIELD_VALUES.get(field, st.integers(1, 255))
    if isinstance(msg, ConnectionDenied) and field == "protocol_id":
        values = u8
    msg = attrs.evolve(msg, **{field: data.draw(values)})
    try:
        raw = msg.encode(p)
    except EncodeError:
        return
    back = decode_station_message(raw, p)
    # A version byte left to the profile (None) comes back as the profile's number.
    for name in ("version", "protocol_id"):
        if getattr(msg, name, 0) is None and getattr(back, name) is not None:
            back = attrs.evolve(back, **{name: None})
    assert back == msg
