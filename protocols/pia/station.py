"""Station protocol ("MeshStation" from 5.19) payloads: connection handshake, disconnection, acks.

Theory of operation: the first payload byte is the message type (1 connection
request, 2 connection response, 3/4 disconnection request/response, 5 ack,
6/7 relay connection request/response).  A connection response whose result
byte (offset 1) is 0 is an acceptance, anything else a denial.  Messages that
must be acknowledged end in a u32 ack id (``ack_id``); the peer answers with an
:class:`Ack` carrying it.  Each class holds the union of the fields of every
version; ``encode(profile)`` writes the layout of that version and
:func:`decode_station_message` reads it back.

Layouts: spec/pia.md §5.3.  Choices for undocumented versions:

* Connection response (accepted), 5.20-5.25: 5.20-5.23 share station protocol
  version 0 with 5.19 and use its layout (including the dropped final byte of
  the PlayerInfo array, see below); 5.24-5.25 share version 1 with 5.26 and use
  its layout (extra u8 connection id at 0x12).
* 5.19-5.23 accepted responses omit the last byte of the last PlayerInfo (a
  Nintendo bug; KW).  That byte is the low byte of the last principal id: the
  encoder drops it like Nintendo's code does, and the decoder restores it as 0.
* The number of PlayerInfo slots in a response comes from the payload length
  (2 or 4 in practice, NC-2020 always sends 4); the "number of player infos"
  byte is kept as sent.

Real 3DS traffic (captures/mgba-uds-frames, version byte 5 = Pia 4.5-4.10)
matches the 3.3-4.10 layouts: a 62-byte request (two 27-byte locations), an
80-byte response (token, one 40-byte PlayerInfo) with platform byte 2 — a
platform id the docs do not list (3 Wii U, 4 Switch), so 2 is taken to be 3DS.
"""

from __future__ import annotations

import enum

import attrs

from protocols.errors import BadValue, EncodeError, UnsupportedVersion
from protocols.pia.mesh import JoinRequest, JoinResponse
from protocols.pia.types import (
    PlayerInfo,
    Source,
    StationConnectionInfo,
    StationLocation,
    decode_player_info,
    decode_station_connection_info,
    decode_station_location,
    player_info_size,
    read_source,
    require_only,
)
from protocols.pia.versions import DOCUMENTED_VERSIONS, Proto, VersionProfile, profile_for
from protocols.wire import Reader, Writer, reserved_field

__all__ = [
    "Ack",
    "ConnectionDenied",
    "ConnectionRequest",
    "ConnectionResponse",
    "ConnectionResult",
    "DisconnectionRequest",
    "DisconnectionResponse",
    "Platform",
    "StationMessage",
    "StationMessageType",
    "StationOpaque",
    "decode_station_message",
    "profiles_with_station_version",
    "trailing_ack_id",
]

V4_10 = (4, 10)
V5_6 = (5, 6)
V5_7 = (5, 7)
V5_9 = (5, 9)
V5_18 = (5, 18)
V5_23 = (5, 23)
V5_26 = (5, 26)
V5_45 = (5, 45)


class StationMessageType(enum.IntEnum):
    CONNECTION_REQUEST = 1
    CONNECTION_RESPONSE = 2
    DISCONNECTION_REQUEST = 3
    DISCONNECTION_RESPONSE = 4
    ACK = 5
    RELAY_CONNECTION_REQUEST = 6
    RELAY_CONNECTION_RESPONSE = 7


class ConnectionResult(enum.IntEnum):
    ACCEPTED = 0
    DENIED = 1
    VERSION_TOO_LOW = 2  # PW: "incompatible version"
    VERSION_TOO_HIGH = 3  # KW


class Platform(enum.IntEnum):
    CTR = 2  # 3DS: seen in real 3DS traffic, not in the docs
    WII_U = 3
    SWITCH = 4


Protocols = tuple[tuple[int, int], ...]


def _protocols(value: object) -> Protocols:
    return tuple((int(p), int(v)) for p, v in value)  # type: ignore[attr-defined]


def _rstrip_nul(data: bytes | str) -> bytes:
    if isinstance(data, str):
        data = data.encode("ascii")
    return bytes(data).rstrip(b"\0")


def _check_station(profile: VersionProfile) -> None:
    if profile.version > V5_45:
        raise EncodeError(f"Pia {profile.name} has no station protocol (merged into the 6.x session protocol)")


def _write_protocols(w: Writer, protocols: Protocols) -> None:
    w.u8(len(protocols), "protocol count")
    for pid, ver in protocols:
        w.u8(pid, "protocol id")
        w.u8(ver, "protocol version")


def _read_protocols(r: Reader) -> Protocols:
    n = r.u8("protocol count")
    return tuple((r.u8("protocol id"), r.u8("protocol version")) for _ in range(n))


def _read_bool(r: Reader, what: str) -> bool:
    b = r.u8(what)
    if b > 1:
        raise BadValue(f"{what} must be 0 or 1, not {b}")
    return bool(b)


def _version(value: int | None, profile: VersionProfile) -> int:
    if value is not None:
        return value
    if profile.station_version is None:
        raise EncodeError(f"Pia {profile.name} has no station protocol version")
    return profile.station_version


# ---------------------------------------------------------------------------
# Connection request (type 1)


@attrs.frozen
class ConnectionRequest:
    """Connection request; fields per version (others keep their defaults):

    * <= 5.18: connection_id, version, is_inverse, connection_info (<= 5.9) or
      location (5.10+); from 5.2 target_constant_id; from 5.7
      target_variable_id and inverse_connection_id.
    * 5.19-5.26: protocols, connection_id, is_inverse, target ids,
      inverse_connection_id, location.
    * 5.27-5.45: result (0), platform, target ids, protocols, location, token,
      network_id, player_count, participant_count, players.
    """

    ack_id: int
    connection_id: int = 0
    is_inverse: bool = False
    #: Station protocol version byte (<= 5.18); None = the profile's.
    version: int | None = None
    target_constant_id: int = 0
    target_variable_id: int = 0
    inverse_connection_id: int = 0
    connection_info: StationConnectionInfo | None = None
    location: StationLocation | None = None
    protocols: Protocols = attrs.field(default=(), converter=_protocols)
    result: int = 0
    platform: int = 0
    token: bytes = attrs.field(default=b"", converter=_rstrip_nul)
    network_id: int = 0
    player_count: int = 0
    participant_count: int = 0
    players: tuple[PlayerInfo, ...] = attrs.field(default=(), converter=tuple)

    def _write_location(self, w: Writer, profile: VersionProfile) -> None:
        if profile.version <= V5_9:
            if self.connection_info is None:
                raise EncodeError(f"a Pia {profile.name} connection request needs connection_info")
            self.connection_info.write(w, profile)
        else:
            if self.location is None:
                raise EncodeError(f"a Pia {profile.name} connection request needs a location")
            self.location.write(w, profile)

    def encode(self, profile: VersionProfile) -> bytes:
        _check_station(profile)
        require_only(self, _request_fields(profile), profile)
        v = profile.version
        w = Writer()
        w.u8(StationMessageType.CONNECTION_REQUEST)
        if v <= V5_18:
            w.u8(self.connection_id, "connection id")
            w.u8(_version(self.version, profile), "version")
            w.u8(int(self.is_inverse))
            if v >= (5, 2):
                w.u64(self.target_constant_id, "target constant id")
            if v >= V5_7:
                w.u32(self.target_variable_id, "target variable id")
                w.u8(self.inverse_connection_id, "inverse connection id")
            self._write_location(w, profile)
        elif v <= V5_26:
            _write_protocols(w, self.protocols)
            w.u8(self.connection_id, "connection id")
            w.u8(int(self.is_inverse))
            w.u64(self.target_constant_id, "target constant id")
            w.u32(self.target_variable_id, "target variable id")
            w.u8(self.inverse_connection_id, "inverse connection id")
            self._write_location(w, profile)
        else:
            w.u8(self.result, "result")
            w.u8(self.platform, "platform")
            _write_target_block(w, self, profile, "connection request")
            w.fixed(self.token, 32, "identification token")
            w.u32(self.network_id, "network id")
            w.u8(self.player_count, "player count")
            w.u8(self.participant_count, "participant count")
            w.u8(len(self.players), "player info count")
            for p in self.players:
                p.write(w, profile)
        w.u32(self.ack_id, "ack id")
        return w.getvalue()


def _request_fields(profile: VersionProfile) -> set[str]:
    v = profile.version
    if v <= V5_26:
        used = {"ack_id", "connection_id", "is_inverse"}
        used |= {"version"} if v <= V5_18 else {"protocols", "target_constant_id", "target_variable_id"}
        if v >= (5, 2):
            used.add("target_constant_id")
        if v >= V5_7:
            used |= {"target_variable_id", "inverse_connection_id"}
        return used | ({"connection_info"} if v <= V5_9 else {"location"})
    return {
        "ack_id", "result", "platform", "target_constant_id", "target_variable_id", "protocols", "location", "token",
        "network_id", "player_count", "participant_count", "players",
    }


def _write_target_block(w: Writer, msg: ConnectionRequest | ConnectionResponse, profile: VersionProfile, what: str) -> None:
    """5.27-5.45 requests and responses: target ids · protocol list · u16 size · StationLocation (spec §5.3)."""
    w.u64(msg.target_constant_id, "target constant id")
    w.u32(msg.target_variable_id, "target variable id")
    _write_protocols(w, msg.protocols)
    if msg.location is None:
        raise EncodeError(f"a Pia {profile.name} {what} needs a location")
    loc = msg.location.encode(profile)
    w.u16(len(loc))
    w.bytes(loc)


def _read_target_block(r: Reader, profile: VersionProfile) -> dict[str, object]:
    """The mirror of :func:`_write_target_block`."""
    kw: dict[str, object] = {
        "target_constant_id": r.u64("target constant id"),
        "target_variable_id": r.u32("target variable id"),
        "protocols": _read_protocols(r),
    }
    with r.restrict_to(r.u16("location size"), "StationLocation") as sub:
        kw["location"] = decode_station_location(sub, profile)
    return kw


def _read_location_block(r: Reader, profile: VersionProfile) -> dict[str, object]:
    if profile.version <= V5_9:
        return {"connection_info": decode_station_connection_info(r, profile)}
    return {"location": decode_station_location(r, profile)}


def _decode_request(r: Reader, profile: VersionProfile) -> ConnectionRequest:
    v = profile.version
    r.u8("message type")
    kw: dict[str, object] = {}
    if v <= V5_18:
        kw["connection_id"] = r.u8("connection id")
        kw["version"] = r.u8("version")
        kw["is_inverse"] = _read_bool(r, "is inverse")
        if v >= (5, 2):
            kw["target_constant_id"] = r.u64("target constant id")
        if v >= V5_7:
            kw["target_variable_id"] = r.u32("target variable id")
            kw["inverse_connection_id"] = r.u8("inverse connection id")
        kw.update(_read_location_block(r, profile))
    elif v <= V5_26:
        kw["protocols"] = _read_protocols(r)
        kw["connection_id"] = r.u8("connection id")
        kw["is_inverse"] = _read_bool(r, "is inverse")
        kw["target_constant_id"] = r.u64("target constant id")
        kw["target_variable_id"] = r.u32("target variable id")
        kw["inverse_connection_id"] = r.u8("inverse connection id")
        kw.update(_read_location_block(r, profile))
    else:
        kw["result"] = r.u8("result")
        kw["platform"] = r.u8("platform")
        kw.update(_read_target_block(r, profile))
        kw["token"] = r.bytes(32, "identification token")
        kw["network_id"] = r.u32("network id")
        kw["player_count"] = r.u8("player count")
        kw["participant_count"] = r.u8("participant count")
        n = r.u8("player info count")
        kw["players"] = tuple(decode_player_info(r, profile) for _ in range(n))
    return ConnectionRequest(ack_id=r.u32("ack id"), **kw)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# Connection response, accepted (type 2, result 0)


@attrs.frozen
class ConnectionResponse:
    """Accepting connection response; fields per version (others keep defaults):

    * <= 4.10: version, platform, token, players (exactly one).
    * 5.2-5.18: version, platform, fragment_id, token, network_id,
      player_count, participant_count, player_info_count, players; from 5.7
      target_constant_id and target_variable_id.
    * 5.19-5.26: as 5.18 but protocol_id + version (the station protocol id
      and version) at 0x2/0x3; 5.24-5.26 add connection_id (0x12).
    * 5.27-5.45: platform, target ids, protocols, location, token, network_id,
      counts, players (no version, no fragment id).
    """

    ack_id: int
    version: int | None = None
    #: 5.19-5.26: the station protocol id echoed at offset 2; None = the profile's.
    protocol_id: int | None = None
    platform: int = 0
    fragment_id: int = 0
    target_constant_id: int = 0
    target_variable_id: int = 0
    connection_id: int = 0
    protocols: Protocols = attrs.field(default=(), converter=_protocols)
    location: StationLocation | None = None
    token: bytes = attrs.field(default=b"", converter=_rstrip_nul)
    network_id: int = 0
    player_count: int = 0
    participant_count: int = 0
    player_info_count: int = 0
    players: tuple[PlayerInfo, ...] = attrs.field(default=(), converter=tuple)

    def encode(self, profile: VersionProfile) -> bytes:
        _check_station(profile)
        require_only(self, _response_fields(profile), profile)
        v = profile.version
        w = Writer()
        w.u8(StationMessageType.CONNECTION_RESPONSE)
        w.u8(ConnectionResult.ACCEPTED)
        if v <= V4_10:
            if len(self.players) != 1:
                raise EncodeError(f"a Pia {profile.name} connection response carries exactly one PlayerInfo")
            w.u8(_version(self.version, profile), "version")
            w.u8(self.platform, "platform")
            w.fixed(self.token, 32, "identification token")
            self.players[0].write(w, profile)
            w.u32(self.ack_id, "ack id")
            return w.getvalue()
        if v <= V5_26:
            if v > V5_18:
                pid = profile.protocol_id(Proto.STATION) if self.protocol_id is None else self.protocol_id
                w.u8(pid, "station protocol id")
            w.u8(_version(self.version, profile), "version")
            w.u8(self.platform, "platform")
            w.u8(self.fragment_id, "fragment id")
            if v >= V5_7:
                w.u64(self.target_constant_id, "target constant id")
                w.u32(self.target_variable_id, "target variable id")
            if v > V5_23:
                w.u8(self.connection_id, "connection id")
        else:
            w.u8(self.platform, "platform")
            _write_target_block(w, self, profile, "connection response")
        w.fixed(self.token, 32, "identification token")
        w.u32(self.network_id, "network id")
        w.u8(self.player_count, "player count")
        w.u8(self.participant_count, "participant count")
        w.u8(self.player_info_count, "player info count")
        players = Writer()
        for p in self.players:
            p.write(players, profile)
        data = players.getvalue()
        if _drops_last_byte(profile) and data:
            data = data[:-1]  # as Nintendo's 5.19 does: the low byte of the last principal id is lost
        w.bytes(data)
        w.u32(self.ack_id, "ack id")
        return w.getvalue()


def _response_fields(profile: VersionProfile) -> set[str]:
    v = profile.version
    if v <= V4_10:
        return {"ack_id", "version", "platform", "token", "players"}
    used = {"ack_id", "platform", "token", "network_id", "player_count", "participant_count", "player_info_count",
            "players"}
    if v >= V5_7:
        used |= {"target_constant_id", "target_variable_id"}
    if v > V5_26:
        return used | {"protocols", "location"}
    used |= {"version", "fragment_id"}
    if v > V5_18:
        used.add("protocol_id")
    if v > V5_23:
        used.add("connection_id")
    return used


def _drops_last_byte(profile: VersionProfile) -> bool:
    # KW: 5.19 loses the final byte of its PlayerInfo array; 5.20-5.23 share
    # its station protocol version and layout, so they are assumed to as well.
    return (5, 19) <= profile.version <= V5_23


def _decode_response(r: Reader, profile: VersionProfile) -> ConnectionResponse:
    v = profile.version
    r.skip(2)  # type, result (0)
    kw: dict[str, object] = {}
    if v <= V4_10:
        kw["version"] = r.u8("version")
        kw["platform"] = r.u8("platform")
        kw["token"] = r.bytes(32, "identification token")
        kw["players"] = (decode_player_info(r, profile),)
        return ConnectionResponse(ack_id=r.u32("ack id"), **kw)  # type: ignore[arg-type]
    if v <= V5_26:
        if v > V5_18:
            kw["protocol_id"] = r.u8("station protocol id")
        kw["version"] = r.u8("version")
        kw["platform"] = r.u8("platform")
        kw["fragment_id"] = r.u8("fragment id")
        if v >= V5_7:
            kw["target_constant_id"] = r.u64("target constant id")
            kw["target_variable_id"] = r.u32("target variable id")
        if v > V5_23:
            kw["connection_id"] = r.u8("connection id")
    else:
        kw["platform"] = r.u8("platform")
        kw.update(_read_target_block(r, profile))
    kw["token"] = r.bytes(32, "identification token")
    kw["network_id"] = r.u32("network id")
    kw["player_count"] = r.u8("player count")
    kw["participant_count"] = r.u8("participant count")
    kw["player_info_count"] = r.u8("player info count")
    size = player_info_size(profile)
    avail = r.remaining() - 4  # the ack id follows the PlayerInfo array
    drop = _drops_last_byte(profile) and avail > 0
    total = avail + drop
    if avail < 0 or total % size:
        raise BadValue(f"{max(avail, 0)} bytes of PlayerInfo are not a whole number of {size}-byte entries")
    raw = r.bytes(avail, "PlayerInfo array") + (b"\0" if drop else b"")
    kw["players"] = tuple(decode_player_info(raw[i : i + size], profile) for i in range(0, total, size))
    return ConnectionResponse(ack_id=r.u32("ack id"), **kw)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# Connection response, denying (type 2, result != 0)


@attrs.frozen
class ConnectionDenied:
    """Denying connection response; fields per version (others keep defaults):

    * <= 5.18: result, version; from 5.7 constant_id and variable_id.
    * 5.19-5.26: result, protocol_id (the protocol with the unexpected
      version), expected_version, constant_id, variable_id; 5.24-5.26 add
      connection_id.
    * 5.27-5.45: result, constant_id, variable_id.

    ``reserved`` keeps the bytes KW Station-Protocol.md gives as "always 0"
    (0x3 up to 5.6; 0x3-0x4 in 5.7-5.18; 0x4-0x5 in 5.19-5.26; 0x2 from 5.27),
    whatever a console put there; the node sends zeros.
    """

    result: int = ConnectionResult.DENIED
    version: int | None = None
    protocol_id: int = 0
    expected_version: int = 0
    constant_id: int = 0
    variable_id: int = 0
    connection_id: int = 0
    reserved: bytes = reserved_field()

    def encode(self, profile: VersionProfile) -> bytes:
        _check_station(profile)
        if self.result == ConnectionResult.ACCEPTED:
            raise EncodeError("a denial cannot carry result 0 (accepted)")
        v = profile.version
        used = {"result", "reserved"}
        if v <= V5_18:
            used.add("version")
        if v >= V5_7:
            used |= {"constant_id", "variable_id"}
        if V5_18 < v <= V5_26:
            used |= {"protocol_id", "expected_version"} | ({"connection_id"} if v > V5_23 else set())
        require_only(self, used, profile)
        w = Writer()
        w.u8(StationMessageType.CONNECTION_RESPONSE)
        w.u8(self.result, "result")
        if v <= V5_18:
            w.u8(_version(self.version, profile), "version")
            w.reserved(self.reserved, 2 if v >= V5_7 else 1, "denial reserved bytes")
            if v >= V5_7:
                w.u64(self.constant_id, "constant id")
                w.u32(self.variable_id, "variable id")
        elif v <= V5_26:
            w.u8(self.protocol_id, "protocol id")
            w.u8(self.expected_version, "expected version")
            w.reserved(self.reserved, 2, "denial reserved bytes")
            w.u64(self.constant_id, "constant id")
            w.u32(self.variable_id, "variable id")
            if v > V5_23:
                w.u8(self.connection_id, "connection id")
        else:
            w.reserved(self.reserved, 1, "denial reserved bytes")
            w.u64(self.constant_id, "constant id")
            w.u32(self.variable_id, "variable id")
        return w.getvalue()


def _decode_denied(r: Reader, profile: VersionProfile) -> ConnectionDenied:
    v = profile.version
    r.u8("message type")
    kw: dict[str, int] = {"result": r.u8("result")}
    reserved = b""
    if v <= V5_18:
        kw["version"] = r.u8("version")
        reserved = r.reserved(2 if v >= V5_7 else 1, "denial reserved bytes")
        if v >= V5_7:
            kw["constant_id"] = r.u64("constant id")
            kw["variable_id"] = r.u32("variable id")
    elif v <= V5_26:
        kw["protocol_id"] = r.u8("protocol id")
        kw["expected_version"] = r.u8("expected version")
        reserved = r.reserved(2, "denial reserved bytes")
        kw["constant_id"] = r.u64("constant id")
        kw["variable_id"] = r.u32("variable id")
        if v > V5_23:
            kw["connection_id"] = r.u8("connection id")
    else:
        reserved = r.reserved(1, "denial reserved bytes")
        kw["constant_id"] = r.u64("constant id")
        kw["variable_id"] = r.u32("variable id")
    return ConnectionDenied(**kw, reserved=reserved)


# ---------------------------------------------------------------------------
# Disconnection, ack, relay (opaque)


@attrs.frozen
class DisconnectionRequest:
    def encode(self, profile: VersionProfile) -> bytes:
        _check_station(profile)
        return bytes([StationMessageType.DISCONNECTION_REQUEST])


@attrs.frozen
class DisconnectionResponse:
    def encode(self, profile: VersionProfile) -> bytes:
        _check_station(profile)
        return bytes([StationMessageType.DISCONNECTION_RESPONSE])


@attrs.frozen
class Ack:
    """``u8 5 · 3 padding bytes · u32 ack id`` (all versions; ``padding`` keeps what was sent, KW Station-Protocol.md)."""

    ack_id: int
    padding: bytes = reserved_field()

    def encode(self, profile: VersionProfile) -> bytes:
        _check_station(profile)
        w = Writer()
        w.u8(StationMessageType.ACK)
        w.reserved(self.padding, 3, "ack padding")
        w.u32(self.ack_id, "ack id")
        return w.getvalue()


@attrs.frozen
class StationOpaque:
    """Relay connection request/response (types 6/7): layout undocumented, kept as bytes."""

    message_type: int
    body: bytes = attrs.field(default=b"", converter=bytes, repr=bytes.hex)

    def encode(self, profile: VersionProfile) -> bytes:
        _check_station(profile)
        w = Writer()
        w.u8(self.message_type, "message type")
        w.bytes(self.body)
        return w.getvalue()


StationMessage = (
    ConnectionRequest
    | ConnectionResponse
    | ConnectionDenied
    | DisconnectionRequest
    | DisconnectionResponse
    | Ack
    | StationOpaque
)


def decode_station_message(payload: Source, profile: VersionProfile) -> StationMessage:
    """Decode one station protocol payload (port 0) of *profile*'s version."""
    if profile.version > V5_45:
        raise UnsupportedVersion(f"Pia {profile.name} has no station protocol")

    def read(r: Reader) -> StationMessage:
        start = r.pos
        kind = r.u8("message type")
        r.pos = start
        if kind == StationMessageType.CONNECTION_REQUEST:
            return _decode_request(r, profile)
        if kind == StationMessageType.CONNECTION_RESPONSE:
            r.skip(1)
            result = r.u8("result")
            r.pos = start
            if result == ConnectionResult.ACCEPTED:
                return _decode_response(r, profile)
            return _decode_denied(r, profile)
        r.skip(1)
        if kind == StationMessageType.DISCONNECTION_REQUEST:
            return DisconnectionRequest()
        if kind == StationMessageType.DISCONNECTION_RESPONSE:
            return DisconnectionResponse()
        if kind == StationMessageType.ACK:
            padding = r.reserved(3, "ack padding")
            return Ack(r.u32("ack id"), padding)
        if kind in (StationMessageType.RELAY_CONNECTION_REQUEST, StationMessageType.RELAY_CONNECTION_RESPONSE):
            return StationOpaque(kind, r.rest())
        raise BadValue(f"unknown station message type {kind}")

    return read_source(payload, read, "station message")


def profiles_with_station_version(version_byte: int) -> tuple[VersionProfile, ...]:
    """Documented <= 5.18 profiles whose connection messages carry *version_byte* at offset 2.

    Up to 5.18 a connection request or response names its station protocol
    version (2: 3.3-3.6, 3: 3.7-3.10, 5: 4.5-4.10, 7: 5.2-5.6, 8: 5.7-5.9,
    9: 5.10-5.18; spec §5.1), which is how a capture decoder can tell which
    layout family it is looking at.  Versions 0-2 of the 5.19+ MeshStation
    protocol travel elsewhere (in the protocol list) and are not matched here.
    """
    out = []
    for v in DOCUMENTED_VERSIONS:
        if v > V5_18:
            break
        prof = profile_for(v)
        if prof.station_version == version_byte:
            out.append(prof)
    return tuple(out)


def trailing_ack_id(message: object) -> int | None:
    """The ack id a message asks the peer to acknowledge, or None if it is sent once.

    Station connection requests and accepting responses, and the mesh join
    request and join response fragments, end in a u32 ack id; the receiver
    answers each with an :class:`Ack` carrying it and the sender resends every
    500 ms until then (spec §5.3, §5.4).  Acks, denials, disconnection and
    refusal messages are sent once.
    """
    if isinstance(message, ConnectionRequest | ConnectionResponse | JoinRequest | JoinResponse):
        return message.ack_id
    return None
