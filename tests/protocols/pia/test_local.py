"""Local protocol payloads (spec §5.10): header, update session (5.2 and 5.7+ layouts), ack, destroy, migration."""

from __future__ import annotations

import functools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pia_type_strategies import STATION_VERSIONS, inet, u8, u16, u32, u64

from protocols.errors import BadValue, DecodeError, EncodeError, ShortData, UnsupportedVersion
from protocols.pia.local import (
    DestroyNetwork,
    LocalNode,
    StartHostMigration,
    UpdateSession,
    UpdateSessionAck,
    decode_local_message,
)
from protocols.pia.types import InetAddress, StationAddress
from protocols.pia.versions import VersionProfile, profile_for

LOCAL_VERSIONS = [v for v in STATION_VERSIONS if profile_for(v).version >= (5, 2)]

nodes = st.builds(LocalNode, st.builds(StationAddress, inet(), u16), u8)


@functools.cache
def local_messages(p: VersionProfile) -> st.SearchStrategy[object]:
    kw: dict[str, st.SearchStrategy[object]] = {}
    if p.version >= (5, 7):
        kw = {"host_service_variable_id": u32, "host_constant_id": u64}
    update = st.builds(
        UpdateSession, sequence_id=u32, network_id=u32, host_variable_id=u32, allow_participation=u8,
        nodes=st.lists(nodes, min_size=8, max_size=8).map(tuple), migration_state=u8, **kw,
    )
    return st.one_of(update, st.builds(UpdateSessionAck, u32), st.just(DestroyNetwork()), st.just(StartHostMigration()))


@pytest.mark.parametrize("version", LOCAL_VERSIONS)
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_local_round_trip(version: str, data: st.DataObject) -> None:
    p = profile_for(version)
    msg = data.draw(local_messages(p))
    raw = msg.encode(p)
    assert raw[0] == 1 and int.from_bytes(raw[2:4], "little") == len(raw) - 12 and raw[4:12] == bytes(8)
    assert decode_local_message(raw, p) == msg


@pytest.mark.parametrize("version", ["5.2", "5.6", "5.9", "5.18", "5.29", "5.45"])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_mutated_and_garbage(version: str, data: st.DataObject) -> None:
    p = profile_for(version)
    raw = bytearray(data.draw(local_messages(p)).encode(p))
    i = data.draw(st.integers(0, len(raw) - 1))
    raw[i] ^= data.draw(st.integers(1, 255))
    blob = data.draw(st.one_of(st.just(bytes(raw)), st.binary(max_size=120)))
    try:
        value = decode_local_message(blob, p)
    except DecodeError:
        return
    assert value.encode(p) == blob


def test_update_session_5_18_layout() -> None:
    p = profile_for("5.18")
    node = LocalNode(StationAddress(InetAddress.from_ip("192.168.0.2", 0x1234)), 0)
    msg = UpdateSession(
        sequence_id=0x01020304, network_id=0x11121314, host_variable_id=0x21222324,
        host_service_variable_id=0x31323334, host_constant_id=0x4142434445464748, allow_participation=1,
        nodes=(node,), migration_state=2,
    )
    raw = msg.encode(p)
    body = raw[12:]
    assert raw[:4] == bytes([1, 0x11]) + len(body).to_bytes(2, "little")
    assert body[0:4] == bytes([4, 3, 2, 1])  # little-endian
    assert body[4:8] == bytes([0x14, 0x13, 0x12, 0x11]) and body[8:12] == bytes([0x24, 0x23, 0x22, 0x21])
    assert body[12:16] == bytes([0x34, 0x33, 0x32, 0x31]) and body[16:20] == bytes(4)
    assert body[20:28] == bytes.fromhex("4847464544434241")
    assert body[28] == 1 and body[29:36] == bytes(7)
    nodes_at = 36
    # Addresses stay big-endian: IPv4, port, u16 extension, then the ranking.
    assert body[nodes_at : nodes_at + 9] == bytes([192, 168, 0, 2, 0x12, 0x34, 0, 0, 0])
    assert body[nodes_at + 9 : nodes_at + 18] == bytes(8) + b"\xff"  # unused slot: zero address, ranking 255
    assert body[nodes_at + 0x48] == 2 and len(body) == nodes_at + 0x49  # migration state at 0x48 of the node table


def test_update_session_5_2_layout_is_shorter() -> None:
    p = profile_for("5.2")
    raw = UpdateSession(1, 2, 3).encode(p)
    assert len(raw) == 12 + 12 + 8 + 73
    assert decode_local_message(raw, p) == UpdateSession(1, 2, 3)


def test_ack_destroy_migration_layouts() -> None:
    p = profile_for("5.9")
    assert UpdateSessionAck(0x0A0B0C0D).encode(p) == bytes([1, 0x21, 8, 0]) + bytes(8) + bytes([0xD, 0xC, 0xB, 0xA]) + bytes(4)
    assert DestroyNetwork().encode(p) == bytes([1, 0x12, 4, 0]) + bytes(12)
    assert StartHostMigration().encode(p) == bytes([1, 0x13, 4, 0]) + bytes(12)


def test_local_errors() -> None:
    p = profile_for("5.18")
    good = UpdateSessionAck(5).encode(p)
    with pytest.raises(BadValue):
        decode_local_message(b"\x02" + good[1:], p)  # header version
    with pytest.raises(BadValue):
        decode_local_message(good[:1] + b"\x30" + good[2:], p)  # unknown type
    with pytest.raises(ShortData):
        decode_local_message(good[:-1], p)
    # Bytes after the layout are kept (the header's payload size is not enforced: KW never says what it counts).
    assert decode_local_message(good + b"\0", p).trailing == b"\0"
    assert decode_local_message(good + b"\0", p).encode(p) == good + b"\0"
    with pytest.raises(EncodeError):
        UpdateSession(1, 2, 3, nodes=(LocalNode(),) * 9).encode(p)
    with pytest.raises(UnsupportedVersion):
        decode_local_message(good, profile_for("4.10"))
    with pytest.raises(EncodeError):
        DestroyNetwork().encode(profile_for("6.16"))
