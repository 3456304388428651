"""Mesh protocol payloads (spec §5.4): round trips for every version, layouts, fragments, real 3DS bytes."""

from __future__ import annotations

import functools

import json
import pathlib

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pia_type_strategies import STATION_VERSIONS, mesh_station_infos, mutated, station_addresses, u8, u32

from protocols.errors import BadValue, ConfigError, DecodeError, EncodeError, UnsupportedVersion
from protocols.pia.mesh import (
    DestroyMesh,
    DestroyResponse,
    JoinRefused,
    JoinRequest,
    JoinResponse,
    LeaveRequest,
    LeaveResponse,
    MeshMessageType,
    MeshOpaque,
    UpdateMesh,
    decode_mesh_message,
    join_response_overhead,
    split_join_response,
    split_update_mesh,
)
from protocols.pia.types import InetAddress, MeshStationInfo, StationAddress, StationConnectionInfo, StationLocation
from protocols.pia.versions import VersionProfile, profile_for

FEW = settings(max_examples=8, deadline=None)

OPAQUE_TYPES = [0x21, 0x22, 0x23, 0x24, 0x25, 0x40, 0x41, 0x42, 0x44, 0x48, 0x49, 0x4A, 0x80, 0x81]


@functools.cache
def join_requests(p: VersionProfile) -> st.SearchStrategy[JoinRequest]:
    if p.version <= (5, 10):
        return st.builds(JoinRequest, u32, u8, station_addresses(p))
    return st.builds(JoinRequest, u32, u8)


@functools.cache
def join_responses(p: VersionProfile) -> st.SearchStrategy[JoinResponse]:
    kw: dict[str, st.SearchStrategy[object]] = {}
    if p.version >= (4, 0):
        kw |= {"max_active": u8, "max_buffer": u8}
    if p.version >= (5, 0):
        kw |= {"max_total": u8, "update_counter": u32}
    return st.builds(
        JoinResponse, ack_id=u32, station_count=u8, host_index=u8, joiner_index=u8,
        stations=st.lists(mesh_station_infos(p), max_size=2).map(tuple),
        fragment_count=u8, fragment_index=u8, base_index=u8, **kw,
    )


@functools.cache
def updates(p: VersionProfile) -> st.SearchStrategy[UpdateMesh]:
    return st.builds(
        UpdateMesh, u8, u8, u32, st.lists(mesh_station_infos(p), max_size=2).map(tuple), u8, u8, u8,
    )


@functools.cache
def mesh_messages(p: VersionProfile) -> st.SearchStrategy[object]:
    addr8 = station_addresses(p, 8)
    return st.one_of(
        join_requests(p), join_responses(p), updates(p), st.builds(JoinRefused, u8),
        st.builds(LeaveRequest, u8, addr8), st.builds(LeaveResponse, u8, addr8), st.builds(DestroyMesh, u8, addr8),
        st.builds(DestroyResponse, u8), st.builds(MeshOpaque, st.sampled_from(OPAQUE_TYPES), st.binary(max_size=16)),
    )


@pytest.mark.parametrize("version", STATION_VERSIONS)
@FEW
@given(data=st.data())
def test_every_mesh_message_round_trips(version: str, data: st.DataObject) -> None:
    p = profile_for(version)
    for strategy in (join_requests(p), join_responses(p), updates(p)):
        msg = data.draw(strategy)
        assert decode_mesh_message(msg.encode(p), p) == msg
    msg = data.draw(mesh_messages(p))
    assert decode_mesh_message(msg.encode(p), p) == msg


@pytest.mark.parametrize("version", STATION_VERSIONS)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_mutated_messages_decode_to_a_faithful_value_or_raise(version: str, data: st.DataObject) -> None:
    p = profile_for(version)
    raw = data.draw(mutated(data.draw(mesh_messages(p)).encode(p)))
    try:
        value = decode_mesh_message(raw, p)
    except DecodeError:
        return
    assert value.encode(p) == raw


@pytest.mark.parametrize("version", ["3.6", "4.10", "5.9", "5.10", "5.18", "5.26", "5.29", "5.31", "5.45"])
@settings(max_examples=80, deadline=None)
@given(blob=st.binary(max_size=300))
def test_garbage_decodes_to_a_faithful_value_or_raises(version: str, blob: bytes) -> None:
    p = profile_for(version)
    try:
        value = decode_mesh_message(blob, p)
    except DecodeError:
        return
    assert value.encode(p) == blob


# -- layouts -------------------------------------------------------------------------


@pytest.mark.parametrize(("version", "size"), [("3.6", 16), ("4.10", 16), ("5.2", 14), ("5.10", 14),
                                               ("5.11", 6), ("5.18", 6), ("5.29", 6), ("5.45", 6)])
def test_join_request_sizes(version: str, size: int) -> None:
    p = profile_for(version)
    raw = JoinRequest(0xA1A2A3A4).encode(p)
    assert len(raw) == size
    assert raw[:2] == bytes([1, 253]) and raw[-4:] == bytes.fromhex("a1a2a3a4")


def test_join_response_5_18_layout() -> None:
    p = profile_for("5.18")
    info = MeshStationInfo(StationLocation(constant_id=1), 0)
    msg = JoinResponse(ack_id=0x0BADF00D, station_count=2, host_index=0, joiner_index=1, stations=(info, info),
                       max_active=8, max_buffer=4, max_total=12, update_counter=0x01020304)
    raw = msg.encode(p)
    assert raw[:8] == bytes([2, 2, 0, 1, 1, 0, 2, 0])
    assert raw[8:16] == bytes([8, 4, 12, 0, 1, 2, 3, 4])
    assert raw[16:80] == info.encode(p) and raw[80:144] == info.encode(p)
    assert raw[144:] == bytes.fromhex("0badf00d")
    assert join_response_overhead(p) == 20


def test_join_response_3x_and_4x_heads() -> None:
    loc = StationConnectionInfo()
    for version, head in (("3.10", 8), ("4.10", 12)):
        p = profile_for(version)
        raw = JoinResponse(1, 1, 0, 0, (MeshStationInfo(loc, 0),), max_active=0).encode(p)
        assert len(raw) == head + 56 + 4
        assert join_response_overhead(p) == head + 4


def test_join_refused_layout() -> None:
    p = profile_for("5.29")
    assert JoinRefused(2).encode(p) == bytes([2, 0, 0xFF, 0xFF, 2])
    assert decode_mesh_message(bytes([2, 0, 0xFF, 0xFF, 7]), p) == JoinRefused(7)
    with pytest.raises(BadValue):
        decode_mesh_message(bytes([2, 0, 0xFF, 0xFE, 7]), p)


def test_update_mesh_5_29_layout() -> None:
    p = profile_for("5.29")
    info = MeshStationInfo(StationLocation(), 3)
    raw = UpdateMesh(3, 0, 0x11223344, (info,), 1, 0, 0).encode(p)
    assert raw[:12] == bytes([0x20, 3, 0, 0, 0x11, 0x22, 0x33, 0x44, 1, 0, 1, 0])
    assert len(raw) == 12 + 68


def test_leave_destroy_layouts() -> None:
    p = profile_for("5.18")
    addr = StationAddress(InetAddress.from_ip("1.2.3.4", 5), 6)
    assert LeaveRequest(3, addr).encode(p) == bytes([4, 3, 0, 0, 1, 2, 3, 4, 0, 5, 0, 6])
    assert LeaveResponse(3, addr).encode(p)[0] == 8
    assert DestroyMesh(3, addr).encode(p)[0] == 0x10
    assert DestroyResponse(9).encode(p) == bytes([0x11, 9])
    assert decode_mesh_message(bytes([0x24, 1, 2]), p) == MeshOpaque(MeshMessageType.CONNECTION_FAILURE_NOTICE, b"\1\2")
    with pytest.raises(BadValue):
        decode_mesh_message(b"\x03", p)


def test_mesh_does_not_exist_in_6x() -> None:
    with pytest.raises(UnsupportedVersion):
        decode_mesh_message(b"\x11\x00", profile_for("6.16"))
    with pytest.raises(EncodeError):
        DestroyResponse(1).encode(profile_for("6.16"))


# -- fragmentation ----------------------------------------------------------------------


@pytest.mark.parametrize("version", ["4.10", "5.9", "5.18", "5.29", "5.45"])
@settings(max_examples=20, deadline=None)
@given(count=st.integers(0, 32), budget=st.integers(200, 1400))
def test_split_join_response_fits_budget_and_reassembles(version: str, count: int, budget: int) -> None:
    p = profile_for(version)
    loc = StationConnectionInfo() if p.version <= (5, 9) else StationLocation()
    stations = tuple(MeshStationInfo(loc, i) for i in range(count))
    whole = JoinResponse(ack_id=5, station_count=count + 1, host_index=0, joiner_index=count, stations=stations)
    parts = split_join_response(whole, p, budget)
    assert all(len(part.encode(p)) <= budget for part in parts)
    assert [part.fragment_index for part in parts] == list(range(len(parts)))
    assert {part.fragment_count for part in parts} == {len(parts)}
    rebuilt: list[MeshStationInfo] = []
    for part in parts:
        assert part.base_index == len(rebuilt)
        rebuilt.extend(decode_mesh_message(part.encode(p), p).stations)
    assert tuple(rebuilt) == stations


def test_split_update_mesh_and_tiny_budget() -> None:
    p = profile_for("5.18")
    stations = tuple(MeshStationInfo(StationLocation(), i) for i in range(5))
    parts = split_update_mesh(UpdateMesh(5, 0, 1, stations), p, 12 + 2 * 64)
    assert [len(x.stations) for x in parts] == [2, 2, 1] and [x.base_index for x in parts] == [0, 2, 4]
    with pytest.raises(ConfigError):
        split_update_mesh(UpdateMesh(5, 0, 1, stations), p, 70)


# -- real 3DS traffic (Pia 4.x) -------------------------------------------------------------


def _mesh_payloads(captures: pathlib.Path) -> list[tuple[str, int, bytes]]:
    doc = json.loads((captures / "mgba-uds-frames.expected.json").read_text())
    return [
        (frame["name"], m["protocol_port"], bytes.fromhex(m["payload_hex"]))
        for frame in doc["frames"]
        for m in (frame["pia"] or {}).get("messages", [])
        if m["protocol_type"] == 0x0200
    ]


def test_real_3ds_mesh_messages(captures: pathlib.Path) -> None:
    p = profile_for("4.10")  # station protocol version byte 5 in the same join
    msgs = {(name, port): raw for name, port, raw in _mesh_payloads(captures)}
    assert len(msgs) == 4
    req = decode_mesh_message(msgs["join 7", 0], p)
    assert req.encode(p) == msgs["join 7", 0]
    assert isinstance(req, JoinRequest) and req.station_index == 253 and req.address.extension_id == 2

    resp = decode_mesh_message(msgs["join 8", 0], p)
    assert resp.encode(p) == msgs["join 8", 0]
    assert isinstance(resp, JoinResponse)
    assert (resp.station_count, resp.host_index, resp.joiner_index) == (2, 0, 1)
    assert (resp.fragment_count, resp.fragment_index, resp.base_index) == (1, 0, 0)
    assert [s.index for s in resp.stations] == [0, 1]
    assert [s.location.public.extension_id for s in resp.stations] == [1, 2]  # UDS host node 1, joiner node 2
    # The host numbers its ack ids across protocols: its station connection
    # response (join 5) carried the previous one.
    doc = json.loads((captures / "mgba-uds-frames.expected.json").read_text())
    host_station = next(f for f in doc["frames"] if f["name"] == "join 5")["pia"]["messages"][0]["payload_hex"]
    assert resp.ack_id == int(host_station[-8:], 16) + 1

    # Port 1: a <=5.12 sliding-window header (24 bytes, owned by reliable.py) then update mesh.
    window = msgs["join 12", 1]
    assert int.from_bytes(window[2:4], "big") == len(window) - 24
    update = decode_mesh_message(window[24:], p)
    assert update.encode(p) == window[24:]
    assert isinstance(update, UpdateMesh)
    assert (update.station_count, update.host_index, update.update_counter) == (2, 0, 1)
    assert update.stations == resp.stations


@settings(max_examples=200, deadline=None)
@given(version=st.sampled_from(STATION_VERSIONS), data=st.data())
def test_encode_refuses_or_round_trips(version: str, data: st.DataObject) -> None:
    """Set one field of a valid join message to anything: encode refuses it or it survives the round trip."""
    p = profile_for(version)
    msg = data.draw(st.one_of(join_requests(p), join_responses(p)))
    field = data.draw(st.sampled_from([f.name for f in attrs.fields(type(msg)) if f.name != "stations"]))
    if field == "address":
        value: object = StationAddress(InetAddress(), 1)
    elif field == "extra":
        value = data.draw(st.binary(min_size=1, max_size=16))
    else:
        value = data.draw(st.integers(1, 255))
    msg = attrs.evolve(msg, **{field: value})
    try:
        raw = msg.encode(p)
    except EncodeError:
        # Only 4.x has room for an extension id; max_* and the counter need 4.x/5.x; the short form
        # is a <= 5.10 request's with no StationAddress (the drawn ones have one).
        assert (field == "address" and p.version > (4, 10)) or field.startswith("max_") or field == "update_counter" \
            or field == "short"
        return
    assert decode_mesh_message(raw, p) == msg


def test_a_join_request_with_bytes_beyond_its_layout_keeps_its_fields_and_its_last_u32_is_the_ack_id() -> None:
    """NintendoClients e8f85f5 sends the <= 5.10 join request at 5.11+ too: a 2-byte pad and a StationAddress
    (6 bytes) after the station index, then the ack id its resender appends last.  The documented fields are
    all there, so it decodes, and the ack id is the last u32 (acking bytes 2-5 instead never stops its resends)."""
    p = profile_for("5.18")
    documented = JoinRequest(0x01020304).encode(p)
    assert documented == bytes([1, 253]) + bytes.fromhex("01020304")
    extra = b"\x00\x00" + bytes([10, 0, 0, 5]) + (49152).to_bytes(2, "big")
    theirs = bytes([1, 253]) + extra + bytes.fromhex("01020304")
    msg = decode_mesh_message(theirs, p)
    assert msg == JoinRequest(0x01020304, extra=extra)
    assert msg.encode(p) == theirs


@pytest.mark.parametrize("version", ["3.10", "4.10", "5.6", "5.9", "5.10"])
def test_a_join_request_without_its_station_address_up_to_5_10_keeps_its_ack_id(version: str) -> None:
    """The other half of NintendoClients e8f85f5's inverted version test (spec §10.1 item 6): at 5.10 and
    below it sends the 5.11+ form, ``u8 1 · u8 253 · u32 ack id``.  Its fields but the StationAddress
    (the sender's, which the packet gives) are there: it decodes, marked short, and encodes back."""
    p = profile_for(version)
    theirs = bytes([1, 253]) + bytes.fromhex("01020304")
    msg = decode_mesh_message(theirs, p)
    assert msg == JoinRequest(0x01020304, short=True)
    assert msg.encode(p) == theirs
    # The documented form still decodes as it did, address and all.
    documented = JoinRequest(0x05060708).encode(p)
    assert len(documented) > 6 and decode_mesh_message(documented, p) == JoinRequest(0x05060708)
