"""Mesh protocol payloads: join, leave, destroy, update mesh (Pia 3.x-5.45).

Theory of operation: the first payload byte is the message type.  Join
request/response, leave and destroy travel on port 0 (the join response is
acked with a Station-protocol :class:`~protocols.pia.station.Ack` carrying its
trailing ack id); update mesh travels on port 1 inside a reliable sliding
window (that header is not handled here: pass the window's payload).  A join
response or update too large for one payload is split into fragments, each
carrying a run of :class:`~protocols.pia.types.MeshStationInfo` entries from
``base_index`` on (:func:`split_join_response`, :func:`split_update_mesh`).
Host-migration messages (0x40-0x4A) and the notices (kickout 0x21, connection
failure 0x24, ...) have no documented layout and decode to :class:`MeshOpaque`.

Layouts: spec/pia.md §5.4.  Choices and real-traffic findings:

* Join response: the 4.8-4.10 layout (4 extra bytes: max active, max buffer,
  u16 pad) is used for all of 4.x; real 3DS traffic with station protocol
  version 5 (4.5-4.10) carries those 4 bytes (all zero there).  5.2-5.17 are
  undocumented and use the 5.18 layout (as NC-2020 assumed).
* Leave request/response and destroy request carry the 8-byte StationAddress
  (InetAddress + u16 extension id), the only form documented for them, in
  every version.
* Join refusal is told apart from success by its size (5 bytes; a success has
  at least 12).
* Padding and "always 0" bytes (join request u16, join response u16 / u8,
  leave/destroy u16, update mesh byte 3; KW Mesh-Protocol.md) take any value
  and are kept in ``padding`` / ``reserved`` for a byte-exact round trip; the
  node sends zeros.  The refusal's ``00 FF FF`` is kept strict: it is what
  tells a refusal from a 5-byte fragment.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

import attrs

from protocols.errors import BadValue, ConfigError, EncodeError, UnsupportedVersion
from protocols.pia.types import (
    MeshStationInfo,
    Source,
    StationAddress,
    decode_mesh_station_info,
    decode_station_address,
    mesh_station_info_size,
    read_source,
    require_only,
)
from protocols.pia.versions import VersionProfile
from protocols.wire import Reader, Writer, reserved_field

__all__ = [
    "HOST_STATION_INDEX",
    "UNASSIGNED_STATION_INDEX",
    "DestroyMesh",
    "DestroyResponse",
    "JoinRefused",
    "JoinRequest",
    "JoinResponse",
    "LeaveRequest",
    "LeaveResponse",
    "MeshMessage",
    "MeshMessageType",
    "MeshOpaque",
    "UpdateMesh",
    "decode_mesh_message",
    "join_response_overhead",
    "split_join_response",
    "split_update_mesh",
]

#: Station index of a station that has not joined yet (spec §5.4 join request).
UNASSIGNED_STATION_INDEX = 253
#: Destination station index meaning "the host" (spec §5.4).
HOST_STATION_INDEX = 254

V3_10 = (3, 10)
V4_10 = (4, 10)
V5_10 = (5, 10)
V5_45 = (5, 45)


class MeshMessageType(enum.IntEnum):
    JOIN_REQUEST = 0x01
    JOIN_RESPONSE = 0x02
    LEAVE_REQUEST = 0x04
    LEAVE_RESPONSE = 0x08
    DESTROY_MESH = 0x10
    DESTROY_RESPONSE = 0x11
    UPDATE_MESH = 0x20
    KICKOUT_NOTICE = 0x21
    DUMMY = 0x22
    DUMMY_ACK = 0x23
    CONNECTION_FAILURE_NOTICE = 0x24
    INCONSISTENT_NOTICE = 0x25
    GREETING = 0x40
    MIGRATION_FINISH = 0x41
    GREETING_RESPONSE = 0x42
    MIGRATION_START = 0x44
    MIGRATION_RESPONSE = 0x48
    MULTI_MIGRATION_START = 0x49
    MULTI_MIGRATION_RANK_DECISION = 0x4A
    CONNECTION_REPORT = 0x80
    RELAY_ROUTE_DIRECTIONS = 0x81


def _check_mesh(profile: VersionProfile) -> None:
    if profile.version > V5_45:
        raise EncodeError(f"Pia {profile.name} has no mesh protocol (merged into the 6.x session protocol)")


def _stations(value: Sequence[MeshStationInfo]) -> tuple[MeshStationInfo, ...]:
    return tuple(value)


# ---------------------------------------------------------------------------
# Join request


@attrs.frozen
class JoinRequest:
    """``u8 1 · u8 253 · [u16 padding · StationAddress] (<= 5.10) · u32 ack id``."""

    ack_id: int
    station_index: int = UNASSIGNED_STATION_INDEX
    #: <= 5.10 only: the joiner's StationAddress (8 bytes <= 4.10, 6 in 5.2-5.10).
    address: StationAddress = StationAddress()
    #: Bytes the documented layout does not have, between its fields and the ack id.  Kept, not
    #: refused: NintendoClients e8f85f5 sends the <= 5.10 request (a 2-byte pad and a StationAddress
    #: after the station index) at 5.11+ too, and a node that drops that request cannot admit it.
    #: The ack id is the request's last u32 whatever comes before it: a message that asks for an
    #: ack ends with its ack id in every documented layout (spec §5.3, §5.4), and NintendoClients
    #: appends it last to every message it resends.
    extra: bytes = b""
    #: <= 5.10 only: the request came in the 5.11+ form, with no pad and no StationAddress.
    #: NintendoClients e8f85f5 sends that form at 5.10 and below (its version test is inverted, spec
    #: §10.1 item 6); the address is the sender's, which the packet gives anyway, so it is taken.
    short: bool = attrs.field(default=False, converter=bool)
    #: <= 5.10 only: the u16 "Padding (always 0)" after the station index, as sent.
    padding: bytes = reserved_field()

    def encode(self, profile: VersionProfile) -> bytes:
        _check_mesh(profile)
        used = {"ack_id", "station_index", "extra"}
        if profile.version <= V5_10:
            used |= {"address", "short", "padding"}
        require_only(self, used, profile)
        if self.short and (self.extra or self.padding or self.address != StationAddress()):
            raise EncodeError("a join request in the 5.11+ form (short) carries no StationAddress, padding or extra bytes")
        w = Writer()
        w.u8(MeshMessageType.JOIN_REQUEST)
        w.u8(self.station_index, "station index")
        if profile.version <= V5_10 and not self.short:
            w.reserved(self.padding, 2, "join request padding")
            self.address.write(w, profile)
        w.bytes(self.extra)
        w.u32(self.ack_id, "ack id")
        return w.getvalue()


def _decode_join_request(r: Reader, profile: VersionProfile) -> JoinRequest:
    r.skip(1)
    index = r.u8("station index")
    address = StationAddress()
    padding = b""
    if profile.version <= V5_10 and r.remaining() == 4:  # the 5.11+ form: only the ack id is left
        return JoinRequest(r.u32("ack id"), index, short=True)
    if profile.version <= V5_10:
        padding = r.reserved(2, "join request padding")
        address = decode_station_address(r, profile)
    extra = r.bytes(max(r.remaining() - 4, 0), "join request extra bytes")
    return JoinRequest(r.u32("ack id"), index, address, extra, padding=padding)


# ---------------------------------------------------------------------------
# Join response (success / refused)


def _join_extra(profile: VersionProfile) -> int:
    """Bytes between the 8-byte common head and the StationInfo entries."""
    if profile.version <= V3_10:
        return 0
    if profile.version <= V4_10:
        return 4
    return 8


def join_response_overhead(profile: VersionProfile) -> int:
    """Size of a join response without its StationInfo entries (head + ack id)."""
    return 8 + _join_extra(profile) + 4


@attrs.frozen
class JoinResponse:
    """Successful join response (one fragment).

    ``max_active``/``max_buffer`` exist from 4.x, ``max_total`` and
    ``update_counter`` from 5.x (spec §5.4).  Whether host/joiner "index" are
    station indexes or list positions is not documented (spec §10.1 item 14);
    they are carried as sent.
    """

    ack_id: int
    station_count: int
    host_index: int
    joiner_index: int
    stations: tuple[MeshStationInfo, ...] = attrs.field(converter=_stations)
    fragment_count: int = 1
    fragment_index: int = 0
    base_index: int = 0
    max_active: int = 0
    max_buffer: int = 0
    max_total: int = 0
    update_counter: int = 0
    #: 4.x+: the u16 (4.x) or u8 (5.x) "Padding" after the max station counts, as sent.
    padding: bytes = reserved_field()

    def encode(self, profile: VersionProfile) -> bytes:
        _check_mesh(profile)
        extra = _join_extra(profile)
        used = {"ack_id", "station_count", "host_index", "joiner_index", "stations", "fragment_count",
                "fragment_index", "base_index"}
        if extra:
            used |= {"max_active", "max_buffer", "padding"} | ({"max_total", "update_counter"} if extra == 8 else set())
        require_only(self, used, profile)
        w = Writer()
        w.u8(MeshMessageType.JOIN_RESPONSE)
        w.u8(self.station_count, "station count")
        w.u8(self.host_index, "host index")
        w.u8(self.joiner_index, "joiner index")
        w.u8(self.fragment_count, "fragment count")
        w.u8(self.fragment_index, "fragment index")
        w.u8(len(self.stations), "entries in fragment")
        w.u8(self.base_index, "base index")
        if extra:
            w.u8(self.max_active, "max active stations")
            w.u8(self.max_buffer, "max buffer stations")
            if extra == 4:
                w.reserved(self.padding, 2, "join response padding")
            else:
                w.u8(self.max_total, "max total stations")
                w.reserved(self.padding, 1, "join response padding")
                w.u32(self.update_counter, "update counter")
        for info in self.stations:
            info.write(w, profile)
        w.u32(self.ack_id, "ack id")
        return w.getvalue()


@attrs.frozen
class JoinRefused:
    """``u8 2 · u8 0 · u8 0xFF · u8 0xFF · u8 reason`` (reason codes undocumented)."""

    reason: int

    def encode(self, profile: VersionProfile) -> bytes:
        _check_mesh(profile)
        w = Writer()
        w.bytes(bytes([MeshMessageType.JOIN_RESPONSE, 0, 0xFF, 0xFF]))
        w.u8(self.reason, "reason")
        return w.getvalue()


def _decode_join_response(r: Reader, profile: VersionProfile) -> JoinResponse | JoinRefused:
    if r.remaining() == 5:
        head = r.bytes(4)
        # Kept strict: "Always 0 / 0xFF / 0xFF" (KW Mesh-Protocol.md) are not padding but the marker
        # that tells a refusal from a success, whose bytes 1-3 are station count, host and joiner index.
        if head != bytes([MeshMessageType.JOIN_RESPONSE, 0, 0xFF, 0xFF]):
            raise BadValue(f"5-byte join response is not a refusal: {head.hex()}")
        return JoinRefused(r.u8("reason"))
    r.skip(1)
    station_count, host, joiner, frag_count, frag_index, n, base = (r.u8("join response field") for _ in range(7))
    kw: dict[str, int] = {}
    padding = b""
    extra = _join_extra(profile)
    if extra:
        kw["max_active"] = r.u8("max active stations")
        kw["max_buffer"] = r.u8("max buffer stations")
        if extra == 4:
            padding = r.reserved(2, "join response padding")
        else:
            kw["max_total"] = r.u8("max total stations")
            padding = r.reserved(1, "join response padding")
            kw["update_counter"] = r.u32("update counter")
    stations = tuple(decode_mesh_station_info(r, profile) for _ in range(n))
    return JoinResponse(
        r.u32("ack id"), station_count, host, joiner, stations,
        fragment_count=frag_count, fragment_index=frag_index, base_index=base, padding=padding, **kw,
    )


# ---------------------------------------------------------------------------
# Leave / destroy


def _encode_station_ref(msg: LeaveRequest | LeaveResponse | DestroyMesh, kind: int, profile: VersionProfile) -> bytes:
    _check_mesh(profile)
    w = Writer()
    w.u8(kind)
    w.u8(msg.station_index, "station index")
    w.reserved(msg.padding, 2, "padding")
    msg.address.write(w, profile, 8)
    return w.getvalue()


def _read_station_ref(r: Reader, profile: VersionProfile) -> tuple[int, StationAddress, bytes]:
    r.skip(1)
    index = r.u8("station index")
    padding = r.reserved(2, "padding")
    return index, decode_station_address(r, profile, 8), padding


@attrs.frozen
class LeaveRequest:
    """``u8 0x04 · u8 station index · u16 padding · StationAddress (8)``."""

    station_index: int
    address: StationAddress = StationAddress()
    padding: bytes = reserved_field()

    def encode(self, profile: VersionProfile) -> bytes:
        return _encode_station_ref(self, MeshMessageType.LEAVE_REQUEST, profile)


@attrs.frozen
class LeaveResponse:
    """``u8 0x08 · u8 station index · u16 padding · StationAddress (8)``."""

    station_index: int
    address: StationAddress = StationAddress()
    padding: bytes = reserved_field()

    def encode(self, profile: VersionProfile) -> bytes:
        return _encode_station_ref(self, MeshMessageType.LEAVE_RESPONSE, profile)


@attrs.frozen
class DestroyMesh:
    """Destroy request: ``u8 0x10 · u8 station index · u16 padding · StationAddress (8)``."""

    station_index: int
    address: StationAddress = StationAddress()
    padding: bytes = reserved_field()

    def encode(self, profile: VersionProfile) -> bytes:
        return _encode_station_ref(self, MeshMessageType.DESTROY_MESH, profile)


@attrs.frozen
class DestroyResponse:
    """``u8 0x11 · u8 station index``."""

    station_index: int

    def encode(self, profile: VersionProfile) -> bytes:
        _check_mesh(profile)
        return bytes([MeshMessageType.DESTROY_RESPONSE]) + _u8(self.station_index)


def _u8(value: int) -> bytes:
    w = Writer()
    w.u8(value, "station index")
    return w.getvalue()


# ---------------------------------------------------------------------------
# Update mesh (reliable port; the sliding window header is stripped already)

UPDATE_MESH_HEAD = 12


@attrs.frozen
class UpdateMesh:
    """``u8 0x20 · #stations · host index · u8 reserved · u32 update counter · #fragments ·
    fragment index · #entries · base index · StationInfo entries`` (no ack id)."""

    station_count: int
    host_index: int
    update_counter: int
    stations: tuple[MeshStationInfo, ...] = attrs.field(converter=_stations)
    fragment_count: int = 1
    fragment_index: int = 0
    base_index: int = 0
    #: Byte 3, "Always 0" (KW Mesh-Protocol.md), as sent.
    reserved: bytes = reserved_field()

    def encode(self, profile: VersionProfile) -> bytes:
        _check_mesh(profile)
        w = Writer()
        w.u8(MeshMessageType.UPDATE_MESH)
        w.u8(self.station_count, "station count")
        w.u8(self.host_index, "host index")
        w.reserved(self.reserved, 1, "update mesh reserved byte")
        w.u32(self.update_counter, "update counter")
        w.u8(self.fragment_count, "fragment count")
        w.u8(self.fragment_index, "fragment index")
        w.u8(len(self.stations), "entries in fragment")
        w.u8(self.base_index, "base index")
        for info in self.stations:
            info.write(w, profile)
        return w.getvalue()


def _decode_update(r: Reader, profile: VersionProfile) -> UpdateMesh:
    r.skip(1)
    count = r.u8("station count")
    host = r.u8("host index")
    reserved = r.reserved(1, "update mesh reserved byte")
    counter = r.u32("update counter")
    frag_count, frag_index, n, base = (r.u8("update mesh field") for _ in range(4))
    stations = tuple(decode_mesh_station_info(r, profile) for _ in range(n))
    return UpdateMesh(count, host, counter, stations, frag_count, frag_index, base, reserved)


# ---------------------------------------------------------------------------
# Undocumented types


@attrs.frozen
class MeshOpaque:
    """A mesh message whose layout is undocumented (notices, host migration, ...)."""

    message_type: int
    body: bytes = attrs.field(default=b"", converter=bytes, repr=bytes.hex)

    def encode(self, profile: VersionProfile) -> bytes:
        _check_mesh(profile)
        w = Writer()
        w.u8(self.message_type, "message type")
        w.bytes(self.body)
        return w.getvalue()


MeshMessage = (
    JoinRequest
    | JoinResponse
    | JoinRefused
    | LeaveRequest
    | LeaveResponse
    | DestroyMesh
    | DestroyResponse
    | UpdateMesh
    | MeshOpaque
)

_OPAQUE = frozenset(MeshMessageType) - {
    MeshMessageType.JOIN_REQUEST,
    MeshMessageType.JOIN_RESPONSE,
    MeshMessageType.LEAVE_REQUEST,
    MeshMessageType.LEAVE_RESPONSE,
    MeshMessageType.DESTROY_MESH,
    MeshMessageType.DESTROY_RESPONSE,
    MeshMessageType.UPDATE_MESH,
}


def decode_mesh_message(payload: Source, profile: VersionProfile) -> MeshMessage:
    """Decode one mesh payload (for port 1: the sliding window's payload)."""
    if profile.version > V5_45:
        raise UnsupportedVersion(f"Pia {profile.name} has no mesh protocol")

    def read(r: Reader) -> MeshMessage:
        start = r.pos
        kind = r.u8("message type")
        r.pos = start
        if kind == MeshMessageType.JOIN_REQUEST:
            return _decode_join_request(r, profile)
        if kind == MeshMessageType.JOIN_RESPONSE:
            return _decode_join_response(r, profile)
        if kind in (MeshMessageType.LEAVE_REQUEST, MeshMessageType.LEAVE_RESPONSE, MeshMessageType.DESTROY_MESH):
            index, address, padding = _read_station_ref(r, profile)
            cls = {
                MeshMessageType.LEAVE_REQUEST: LeaveRequest,
                MeshMessageType.LEAVE_RESPONSE: LeaveResponse,
                MeshMessageType.DESTROY_MESH: DestroyMesh,
            }[MeshMessageType(kind)]
            return cls(index, address, padding)
        if kind == MeshMessageType.DESTROY_RESPONSE:
            r.skip(1)
            return DestroyResponse(r.u8("station index"))
        if kind == MeshMessageType.UPDATE_MESH:
            return _decode_update(r, profile)
        if kind in _OPAQUE:
            r.skip(1)
            return MeshOpaque(kind, r.rest())
        raise BadValue(f"unknown mesh message type 0x{kind:02x}")

    return read_source(payload, read, "mesh message")


# ---------------------------------------------------------------------------
# Fragmentation


def _chunks(
    stations: Sequence[MeshStationInfo], profile: VersionProfile, budget: int, overhead: int
) -> list[tuple[int, tuple[MeshStationInfo, ...]]]:
    per = mesh_station_info_size(profile)
    room = (budget - overhead) // per
    if room < 1:
        raise ConfigError(f"a {budget}-byte payload budget cannot hold one {per}-byte StationInfo")
    if not stations:
        return [(0, ())]
    out = [(i, tuple(stations[i : i + room])) for i in range(0, len(stations), room)]
    if len(out) > 255 or out[-1][0] > 255:
        raise EncodeError(f"{len(stations)} stations need more fragments than a u8 can count")
    return out


def split_join_response(response: JoinResponse, profile: VersionProfile, budget: int) -> list[JoinResponse]:
    """Split *response* (all stations, fragment fields ignored) into fragments of at most *budget* bytes.

    Every fragment keeps ``response.ack_id``; give each its own ack id
    (``attrs.evolve(fragment, ack_id=...)``) before sending, since each one is
    acknowledged separately.
    """
    chunks = _chunks(response.stations, profile, budget, join_response_overhead(profile))
    return [
        attrs.evolve(response, stations=part, fragment_count=len(chunks), fragment_index=i, base_index=base)
        for i, (base, part) in enumerate(chunks)
    ]


def split_update_mesh(update: UpdateMesh, profile: VersionProfile, budget: int) -> list[UpdateMesh]:
    """Split an update mesh into fragments of at most *budget* bytes (payload of the sliding window)."""
    chunks = _chunks(update.stations, profile, budget, UPDATE_MESH_HEAD)
    return [
        attrs.evolve(update, stations=part, fragment_count=len(chunks), fragment_index=i, base_index=base)
        for i, (base, part) in enumerate(chunks)
    ]
