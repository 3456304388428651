"""LAN protocol messages inside Pia packets (protocol 0x44, spec §6.5): host and session requests, the session
info in fragments, keep-alive.

Every message starts ``u8 type · 11 bytes "Padding (always 0)"`` (KW LAN-Protocol.md): the decoder takes any
bytes there and keeps them in ``padding`` (empty = all zero, what the node sends).
"""

from __future__ import annotations

import enum
from typing import Union

import attrs

from protocols.errors import (
    BadValue,
    ConfigError,
    EncodeError,
)
from protocols.pia.types import (
    StationConnectionInfo,
    StationLocation,
    decode_station_connection_info,
    decode_station_location,
)
from protocols.pia.versions import VersionProfile
from protocols.wire import Reader, Writer, reserved_field

from protocols.pia.lan import SESSION_FRAGMENT_SIZE

__all__ = [
    "HostMessage",
    "HostRequest",
    "KeepAlive",
    "LanMessage",
    "LanMessageType",
    "SessionMessage",
    "SessionReassembler",
    "SessionRequest",
    "decode_lan_message",
    "encode_lan_message",
    "fragment_session_info",
]


class LanMessageType(enum.IntEnum):
    HOST_REQUEST = 3
    HOST = 4
    SESSION_REQUEST = 5
    SESSION = 6
    KEEP_ALIVE = 7


@attrs.frozen
class HostRequest:
    network_id: int
    padding: bytes = reserved_field()


@attrs.frozen
class HostMessage:
    """Host reply: network id and the host's location.

    ≤5.9: a StationConnectionInfo (70 bytes); 5.10+: a StationLocation (spec §5.2, §6.5).
    """

    network_id: int
    location: StationConnectionInfo | StationLocation
    padding: bytes = reserved_field()


@attrs.frozen
class SessionRequest:
    network_id: int
    padding: bytes = reserved_field()


@attrs.frozen
class SessionMessage:
    """One fragment of a serialized LanSessionInfo."""

    tag: int
    sequence_id: int
    fragment_index: int
    fragment_count: int
    data: bytes = attrs.field(repr=False)
    padding: bytes = reserved_field()


@attrs.frozen
class KeepAlive:
    padding: bytes = reserved_field()


LanMessage = Union[HostRequest, HostMessage, SessionRequest, SessionMessage, KeepAlive]


_TYPES: dict[type, LanMessageType] = {
    HostRequest: LanMessageType.HOST_REQUEST,
    HostMessage: LanMessageType.HOST,
    SessionRequest: LanMessageType.SESSION_REQUEST,
    SessionMessage: LanMessageType.SESSION,
    KeepAlive: LanMessageType.KEEP_ALIVE,
}


def encode_lan_message(msg: LanMessage, profile: VersionProfile) -> bytes:
    """Payload of a LAN protocol message: u8 type · 11 padding bytes · body."""
    kind = _TYPES.get(type(msg))
    if kind is None:
        raise EncodeError(f"not a LAN message: {msg!r}")
    w = Writer()
    w.u8(kind)
    w.reserved(msg.padding, 11, "LAN message padding")
    if isinstance(msg, (HostRequest, SessionRequest)):
        w.u32(msg.network_id, "network_id")
    elif isinstance(msg, HostMessage):
        w.u32(msg.network_id, "network_id")
        want = StationConnectionInfo if profile.version <= (5, 9) else StationLocation
        if not isinstance(msg.location, want):
            raise EncodeError(f"Pia {profile.name} host messages carry a {want.__name__}")
        msg.location.write(w, profile)
    elif isinstance(msg, SessionMessage):
        w.u32(msg.tag, "tag")
        w.u16(msg.sequence_id, "sequence_id")
        w.u8(msg.fragment_index, "fragment_index")
        w.u8(msg.fragment_count, "fragment_count")
        w.u32(len(msg.data))
        w.bytes(msg.data)
    return w.getvalue()


def decode_lan_message(payload: bytes, profile: VersionProfile) -> LanMessage:
    r = Reader(payload)
    t = r.u8("LAN message type")
    padding = r.reserved(11, "LAN message padding")
    msg: LanMessage
    if t == LanMessageType.HOST_REQUEST:
        msg = HostRequest(r.u32(), padding)
    elif t == LanMessageType.HOST:
        nid = r.u32()
        location: StationConnectionInfo | StationLocation
        if profile.version <= (5, 9):
            location = decode_station_connection_info(r, profile)
        else:
            location = decode_station_location(r, profile)
        msg = HostMessage(nid, location, padding)
    elif t == LanMessageType.SESSION_REQUEST:
        msg = SessionRequest(r.u32(), padding)
    elif t == LanMessageType.SESSION:
        tag, seq, idx, count, size = r.u32(), r.u16(), r.u8(), r.u8(), r.u32()
        if count == 0 or idx >= count:
            raise BadValue(f"session fragment {idx} of {count}")
        msg = SessionMessage(tag, seq, idx, count, r.bytes(size, "session fragment"), padding)
    elif t == LanMessageType.KEEP_ALIVE:
        msg = KeepAlive(padding)
    else:
        raise BadValue(f"unknown LAN message type {t}")
    r.expect_end("LAN message")
    return msg


def fragment_session_info(
    data: bytes, *, tag: int, sequence_id: int, fragment_size: int = SESSION_FRAGMENT_SIZE
) -> tuple[SessionMessage, ...]:
    """Split a serialized LanSessionInfo into session messages of at most *fragment_size* bytes."""
    if fragment_size <= 0:
        raise ConfigError("fragment size must be positive")
    chunks = [data[i : i + fragment_size] for i in range(0, len(data), fragment_size)] or [b""]
    if len(chunks) > 255:
        raise EncodeError(f"{len(chunks)} fragments do not fit a u8 count")
    return tuple(SessionMessage(tag, sequence_id, i, len(chunks), c) for i, c in enumerate(chunks))


class SessionReassembler:
    """Collect session-message fragments per (sender, tag, sequence id); bounded.

    :meth:`add` returns the joined bytes when the last missing fragment
    arrives.  At most ``max_pending`` incomplete messages are kept; the oldest
    is forgotten first.
    """

    def __init__(self, max_pending: int = 16) -> None:
        self._pending: dict[tuple[object, int, int], tuple[int, dict[int, bytes]]] = {}
        self._max = max_pending

    def add(self, sender: object, msg: SessionMessage) -> bytes | None:
        if msg.fragment_count == 1:
            return msg.data
        key = (sender, msg.tag, msg.sequence_id)
        count, frags = self._pending.get(key, (msg.fragment_count, {}))
        if count != msg.fragment_count:
            # A sender that changes the count mid-message: start over with the new count.
            count, frags = msg.fragment_count, {}
        frags[msg.fragment_index] = msg.data
        self._pending[key] = (count, frags)
        if len(frags) == count:
            del self._pending[key]
            return b"".join(frags[i] for i in range(count))
        while len(self._pending) > self._max:
            del self._pending[next(iter(self._pending))]
        return None
