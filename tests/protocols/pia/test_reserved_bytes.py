"""Padding, reserved and "always 0" bytes: any value is accepted, kept in the value and written back.

For every place the wikis call padding, reserved or "always 0" (KW Local-Protocol.md, Mesh-Protocol.md,
Station-Protocol.md, LAN-Protocol.md, RTT-Protocol.md; spec/pia.md §5.2-§5.10, §6.5), a message encoded by
the node (zeros there) gets other bytes at that spot: it must decode, hold those bytes in the named field,
encode back to the same bytes, and differ from the node's value in that field only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.errors import ShortData
from protocols.pia import lan_messages, local, mesh, rtt, station, types
from protocols.pia.types import (
    InetAddress,
    MeshStationInfo,
    PlayerInfo,
    StationAddress,
    StationConnectionInfo,
    StationLocation,
)
from protocols.pia.versions import VersionProfile, profile_for

Decoder = Callable[[bytes, VersionProfile], Any]

LOC = StationLocation(public=InetAddress.from_ip("10.0.0.2", 49152), constant_id=7, variable_id=9)
OLD_LOC = StationLocation(public=InetAddress.from_ip("10.0.0.2", 49152), constant_id=7, variable_id=9,
                          service_variable_id=3)


def _info(version: str) -> MeshStationInfo:
    if profile_for(version).version <= (5, 9):
        return MeshStationInfo(StationConnectionInfo(OLD_LOC, OLD_LOC), 3)
    return MeshStationInfo(LOC, 3, join_order=2 if profile_for(version).version >= (5, 31) else 0)


def _player(version: str) -> PlayerInfo:
    return PlayerInfo.from_text("Mii", profile_for(version), language=1)


#: (case id, version, value the node sends, decoder, field, offset of the reserved bytes, their count)
CASES: list[tuple[str, str, Any, Decoder, str, int, int]] = [
    *[(f"lan-{type(m).__name__}", "5.18", m, lan_messages.decode_lan_message, "padding", 1, 11) for m in (
        lan_messages.HostRequest(5), lan_messages.HostMessage(5, LOC), lan_messages.SessionRequest(5),
        lan_messages.SessionMessage(1, 2, 0, 1, b"ab"), lan_messages.KeepAlive())],
    ("lan-HostMessage-5.9", "5.9", lan_messages.HostMessage(5, StationConnectionInfo(OLD_LOC, OLD_LOC)),
     lan_messages.decode_lan_message, "padding", 1, 11),
    *[(f"join-request-{v}", v, mesh.JoinRequest(9, address=StationAddress(InetAddress.from_ip("10.0.0.2", 5))),
       mesh.decode_mesh_message, "padding", 2, 2) for v in ("4.10", "5.9", "5.10")],
    ("join-response-4.10", "4.10", mesh.JoinResponse(9, 2, 0, 1, (_info("4.10"),), max_active=4, max_buffer=4),
     mesh.decode_mesh_message, "padding", 10, 2),
    *[(f"join-response-{v}", v, mesh.JoinResponse(9, 2, 0, 1, (_info(v),), max_active=4, max_total=8,
                                                  update_counter=3),
       mesh.decode_mesh_message, "padding", 11, 1) for v in ("5.9", "5.18", "5.45")],
    *[(f"{cls.__name__}-{v}", v, cls(2, StationAddress(InetAddress.from_ip("10.0.0.2", 5))),
       mesh.decode_mesh_message, "padding", 2, 2)
      for cls in (mesh.LeaveRequest, mesh.LeaveResponse, mesh.DestroyMesh) for v in ("4.10", "5.18")],
    *[(f"update-mesh-{v}", v, mesh.UpdateMesh(2, 0, 5, (_info(v),)), mesh.decode_mesh_message, "reserved", 3, 1)
      for v in ("5.9", "5.18", "5.29")],
    *[(f"ack-{v}", v, station.Ack(0x01020304), station.decode_station_message, "padding", 1, 3)
      for v in ("4.10", "5.18", "5.45")],
    ("denied-5.3", "5.3", station.ConnectionDenied(1, version=7), station.decode_station_message, "reserved", 3, 1),
    ("denied-5.9", "5.9", station.ConnectionDenied(1, version=8, constant_id=5, variable_id=6),
     station.decode_station_message, "reserved", 3, 2),
    ("denied-5.23", "5.23", station.ConnectionDenied(2, protocol_id=0x14, expected_version=1, constant_id=5,
                                                     variable_id=6), station.decode_station_message, "reserved", 4, 2),
    ("denied-5.26", "5.26", station.ConnectionDenied(2, protocol_id=0x14, expected_version=1, constant_id=5,
                                                     variable_id=6, connection_id=3),
     station.decode_station_message, "reserved", 4, 2),
    ("denied-5.45", "5.45", station.ConnectionDenied(3, constant_id=5, variable_id=6), station.decode_station_message,
     "reserved", 2, 1),
    *[(f"rtt-{v}", v, rtt.RttMessage(0x1122334455667788, resp), rtt.decode_rtt, "reserved", 4, 4)
      for v in ("4.10", "5.45") for resp in (False, True)],
    *[(f"player-info-{v}", v, _player(v), types.decode_player_info, "padding", off, 2)
      for v, off in (("3.10", 34), ("4.10", 38))],
    *[(f"station-info-{v}", v, _info(v), types.decode_mesh_station_info, "padding", off, n)
      for v, off, n in (("4.10", 55, 1), ("5.9", 71, 1), ("5.10", 63, 1), ("5.18", 63, 1), ("5.26", 63, 1),
                        ("5.29", 65, 3), ("5.31", 67, 1), ("5.45", 67, 1))],
    *[(f"station-info-fill-{v}", v, _info(v), types.decode_mesh_station_info, "location_fill", size, slot - size)
      for v, size, slot in (("5.10", 38, 62), ("5.18", 40, 62), ("5.29", 40, 64), ("5.45", 40, 64))],
    *[(f"local-header-{type(m).__name__}-{v}", v, m, local.decode_local_message, "header_reserved", 4, 8)
      for v in ("5.2", "5.9", "5.45")
      for m in (local.UpdateSession(1, 2, 3), local.UpdateSessionAck(4), local.DestroyNetwork(),
                local.StartHostMigration())],
    ("local-update-5.2", "5.2", local.UpdateSession(1, 2, 3), local.decode_local_message, "padding", 12 + 13, 7),
    *[(f"local-update-{v}", v, local.UpdateSession(1, 2, 3, host_service_variable_id=4, host_constant_id=5),
       local.decode_local_message, field, 12 + off, n)
      for v in ("5.7", "5.45") for field, off, n in (("id_padding", 16, 4), ("padding", 29, 7))],
    *[(f"local-ack-{v}", v, local.UpdateSessionAck(4), local.decode_local_message, "reserved", 16, 4)
      for v in ("5.9", "5.45")],
    *[(f"local-{cls.__name__}-{v}", v, cls(), local.decode_local_message, "reserved", 12, 4)
      for cls in (local.DestroyNetwork, local.StartHostMigration) for v in ("5.9", "5.45")],
]


def _encode(value: Any, p: VersionProfile) -> bytes:
    if hasattr(value, "encode"):
        return value.encode(p)  # type: ignore[no-any-return]
    return lan_messages.encode_lan_message(value, p)


def _check(version: str, value: Any, decode: Decoder, field: str, offset: int, count: int, fill: bytes) -> None:
    p = profile_for(version)
    sent = _encode(value, p)
    assert sent[offset : offset + count] == bytes(count), "the node sends zeros there"
    assert decode(sent, p) == value
    raw = sent[:offset] + fill + sent[offset + count :]
    got = decode(raw, p)
    assert _encode(got, p) == raw
    assert getattr(got, field) == fill.rstrip(b"\0")
    assert attrs.evolve(got, **{field: b""}) == value


@pytest.mark.parametrize(("version", "value", "decode", "field", "offset", "count"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_non_zero_reserved_bytes_are_kept(version: str, value: Any, decode: Decoder, field: str, offset: int,
                                          count: int) -> None:
    _check(version, value, decode, field, offset, count, bytes(range(0xA1, 0xA1 + count)))


@pytest.mark.parametrize(("version", "value", "decode", "field", "offset", "count"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_any_reserved_bytes_round_trip(version: str, value: Any, decode: Decoder, field: str, offset: int,
                                       count: int, data: st.DataObject) -> None:
    _check(version, value, decode, field, offset, count, data.draw(st.binary(min_size=count, max_size=count)))


def test_kept_reserved_bytes_show_in_repr() -> None:
    got = station.decode_station_message(bytes.fromhex("05010203") + bytes(4), profile_for("5.18"))
    assert "padding='010203'" in repr(got)
    assert "padding=''" in repr(station.Ack(0))


def test_reserved_bytes_that_do_not_fit_are_an_encode_error() -> None:
    from protocols.errors import EncodeError

    with pytest.raises(EncodeError):
        station.Ack(1, padding=b"1234").encode(profile_for("5.18"))


# ---------------------------------------------------------------------------- Local protocol payload size


@pytest.mark.parametrize("version", ["5.2", "5.9", "5.18", "5.45"])
@pytest.mark.parametrize("kind", ["update", "ack", "destroy", "migration"])
@pytest.mark.parametrize("declared", [0, 73, 0x1234, 0xFFFF])
def test_local_declared_size_is_kept_not_checked(version: str, kind: str, declared: int) -> None:
    """KW Local-Protocol.md never says what the header's payload size counts: the layout decides."""
    p = profile_for(version)
    value = {"update": local.UpdateSession(1, 2, 3), "ack": local.UpdateSessionAck(4),
             "destroy": local.DestroyNetwork(), "migration": local.StartHostMigration()}[kind]
    sent = value.encode(p)
    raw = sent[:2] + declared.to_bytes(2, "little") + sent[4:]
    got = local.decode_local_message(raw, p)
    assert got.encode(p) == raw
    expected = None if declared == len(sent) - 12 else declared
    assert got.declared_size == expected
    assert attrs.evolve(got, declared_size=None) == value


@pytest.mark.parametrize("version", ["5.2", "5.45"])
def test_local_body_too_short_for_its_layout_is_refused(version: str) -> None:
    p = profile_for(version)
    for value in (local.UpdateSession(1, 2, 3), local.UpdateSessionAck(4), local.DestroyNetwork()):
        raw = value.encode(p)
        with pytest.raises(ShortData):
            local.decode_local_message(raw[:-1], p)


@pytest.mark.parametrize("version", ["5.2", "5.45"])
@settings(max_examples=20, deadline=None)
@given(extra=st.binary(min_size=1, max_size=16), declared=st.none() | st.integers(0, 0xFFFF))
def test_local_bytes_after_the_layout_are_kept(version: str, extra: bytes, declared: int | None) -> None:
    p = profile_for(version)
    value = local.UpdateSessionAck(4, declared_size=declared)
    raw = value.encode(p) + extra
    if declared is None:  # the encoder counted the 8-byte body; the sender counted the extra bytes too
        raw = raw[:2] + (len(raw) - 12).to_bytes(2, "little") + raw[4:]
    got = local.decode_local_message(raw, p)
    assert got.trailing == extra and got.sequence_id == 4
    assert got.encode(p) == raw


def test_local_encoder_computes_the_size_when_built_by_hand() -> None:
    p = profile_for("5.45")
    raw = local.UpdateSessionAck(4, trailing=b"xy").encode(p)
    assert int.from_bytes(raw[2:4], "little") == len(raw) - 12 == 10
    assert local.UpdateSessionAck(4, declared_size=73).encode(p)[2:4] == (73).to_bytes(2, "little")
