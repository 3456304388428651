"""The sub-protocol dispatcher: real 3DS messages and synthetic 5.18/5.29 ones."""

from __future__ import annotations

import json
import pathlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.errors import DecodeError
from protocols.pia.keepalive import KeepAlive
from protocols.pia.local import UpdateSessionAck
from protocols.pia.mesh import JoinRequest, JoinResponse, UpdateMesh
from protocols.pia.reliable import LegacyWindowHeader, Segment, encode_segment
from protocols.pia.rtt import RttMessage
from protocols.pia.station import Ack, ConnectionRequest, ConnectionResponse
from protocols.pia.subprotocols import WindowedMesh, decode_payload
from protocols.pia.types import StationLocation
from protocols.pia.versions import Proto, profile_for


def test_real_3ds_join_dispatch(captures: pathlib.Path) -> None:
    p = profile_for("4.10")
    doc = json.loads((captures / "mgba-uds-frames.expected.json").read_text())
    kinds: dict[str, list[str]] = {}
    for frame in doc["frames"]:
        for m in (frame["pia"] or {}).get("messages", []):
            name = p.protocol_name(m["protocol_type"])
            assert name is not None
            value = decode_payload(Proto(name), m["protocol_port"], bytes.fromhex(m["payload_hex"]), p)
            kinds.setdefault(name, []).append(type(value).__name__)
    assert sorted(kinds["station"]) == sorted(
        ["ConnectionRequest"] * 2 + ["ConnectionResponse"] * 2 + ["Ack"] * 3
    )
    assert kinds["mesh"] == ["JoinRequest", "JoinResponse", "WindowedMesh", "WindowedMesh"]
    assert kinds["rtt"] == ["RttMessage"] * 4
    assert set(kinds["sync-clock"]) == {"NoneType"}  # no codec here
    assert set(kinds["reliable"]) == {"NoneType"}  # game data


def test_real_3ds_update_mesh_through_the_window(captures: pathlib.Path) -> None:
    p = profile_for("4.10")
    doc = json.loads((captures / "mgba-uds-frames.expected.json").read_text())
    windows = [
        bytes.fromhex(m["payload_hex"])
        for f in doc["frames"]
        for m in (f["pia"] or {}).get("messages", [])
        if m["protocol_type"] == 0x0200 and m["protocol_port"] == 1
    ]
    first, ack_only = (decode_payload(Proto.MESH, 1, w, p) for w in windows)
    assert isinstance(first, WindowedMesh) and isinstance(first.message, UpdateMesh)
    assert first.message.station_count == 2
    assert isinstance(ack_only, WindowedMesh) and ack_only.message is None and ack_only.segment.payload == b""


@pytest.mark.parametrize("version", ["5.18", "5.29"])
def test_node_profiles_dispatch(version: str) -> None:
    p = profile_for(version)
    loc = StationLocation(constant_id=1)
    cases = [
        (Proto.STATION, 0, Ack(7)),
        (Proto.STATION, 0, ConnectionRequest(ack_id=1, location=loc, version=p.station_version)
         if p.version <= (5, 18) else ConnectionRequest(ack_id=1, location=loc)),
        (Proto.MESH, 0, JoinRequest(3)),
        (Proto.RTT, 1, RttMessage(99)),
        (Proto.KEEP_ALIVE, 0, KeepAlive()),
        (Proto.LOCAL, 0, UpdateSessionAck(4)),
    ]
    for proto, port, msg in cases:
        assert decode_payload(proto, port, msg.encode(p), p) == msg
    assert decode_payload(Proto.UNRELIABLE, 1, b"game data", p) is None
    assert decode_payload(Proto.STATION, 1, b"\x05", p) is None


def test_mesh_port_1_with_a_legacy_window() -> None:
    p = profile_for("5.10")
    inner = JoinResponse(1, 1, 0, 0, ())
    seg = Segment(LegacyWindowHeader(flags=3, sequence_id=0xFFFFF82F, ack_id=0xFFFFF82F), inner.encode(p))
    value = decode_payload(Proto.MESH, 1, encode_segment(seg, p), p)
    assert value == WindowedMesh(seg, inner)


@pytest.mark.parametrize("version", ["4.10", "5.18", "5.29"])
@settings(max_examples=60, deadline=None)
@given(proto=st.sampled_from([Proto.STATION, Proto.MESH, Proto.RTT, Proto.KEEP_ALIVE, Proto.LOCAL]),
       port=st.integers(0, 1), blob=st.binary(max_size=200))
def test_garbage_gives_a_value_none_or_decode_error(version: str, proto: Proto, port: int, blob: bytes) -> None:
    p = profile_for(version)
    try:
        decode_payload(proto, port, blob, p)
    except DecodeError:
        pass


def test_connection_response_types_for_both_profiles() -> None:
    for version in ("5.18", "5.29"):
        p = profile_for(version)
        msg = ConnectionResponse(ack_id=2, location=StationLocation() if p.version > (5, 26) else None,
                                 version=p.station_version if p.version <= (5, 26) else None)
        assert decode_payload(Proto.STATION, 0, msg.encode(p), p) == msg
