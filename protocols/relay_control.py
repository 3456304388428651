"""The relay's own messages: control and bulk frames on QUIC streams, and the envelope of a relayed datagram.

Theory of operation
-------------------
A relay client and the hub speak over one QUIC connection (``pianode.relay``):

* **Frames** on the control stream (highest priority) and on the bulk stream
  (lowest): each is a compact u32 length, then the body; a body is a compact
  u16 message type, then the message's fields.  Integers are compact (seed 004,
  :mod:`protocols.compact_int`); an IPv4 address is a compact u32; strings and
  arrays carry a compact u16 count.  :class:`FrameDecoder` reassembles frames
  from stream bytes, however the stream cut them.
* **Envelopes** in QUIC DATAGRAM frames (RFC 9221), one relayed UDP datagram
  each: source IPv4 and port, destination IPv4 and port (fixed width, network
  order: the envelope is on every Pia datagram, so it is read without a
  branch per field), then the datagram unchanged.  The hub never decrypts it.

Both directions use the same messages; which side may send which is the
state machines' business (``pianode.relay.hub_state``, ``client_state``).
"""

from __future__ import annotations

import ipaddress
import struct
from enum import IntEnum
from typing import Union

import attrs

from protocols.compact_int import U16, U32, U64, read_array, read_string, write_array, write_string
from protocols.errors import BadValue, EncodeError, ShortData
from protocols.wire import Reader, Writer

__all__ = [
    "PROTOCOL_VERSION", "BulkData", "ControlMessage", "Envelope", "FrameDecoder", "Hello", "Member", "MemberJoined",
    "MemberLeft", "MessageType", "Ping", "Pong", "Refused", "Welcome", "decode_body", "decode_envelope",
    "encode_envelope", "encode_frame", "envelope_sender", "ip_from_int", "ip_to_int", "MAX_ROOM_NAME", "room_name_problem",
]  # fmt: skip

#: Version of these messages, sent in :class:`Hello`; the hub refuses others.
PROTOCOL_VERSION = 1
#: Largest control frame body either side accepts.
MAX_CONTROL_FRAME = 64 * 1024


class MessageType(IntEnum):
    HELLO = 1
    WELCOME = 2
    REFUSED = 3
    MEMBER_JOINED = 4
    MEMBER_LEFT = 5
    PING = 6
    PONG = 7
    BULK = 8


#: Longest room name, in characters.
MAX_ROOM_NAME = 64


def room_name_problem(name: str) -> str | None:
    """Why *name* cannot name a room (it is shown in logs and tables), or None when it can."""
    if not name or len(name) > MAX_ROOM_NAME or not name.isprintable() or name.strip() != name:
        return f"room name must be 1..{MAX_ROOM_NAME} printable characters, without spaces at its ends"
    return None


def ip_to_int(ip: str) -> int:
    return int(ipaddress.IPv4Address(ip))


def ip_from_int(value: int) -> str:
    return str(ipaddress.IPv4Address(value))


def _address(value: str) -> str:
    try:
        return str(ipaddress.IPv4Address(value))
    except ValueError:
        raise EncodeError(f"{value!r} is not an IPv4 address") from None


@attrs.frozen
class Hello:
    """Client → hub, first on the control stream: join *room*, asking for *address* back
    (the one the hub gave before a reconnect; ``0.0.0.0``: any)."""

    room: str
    name: str
    address: str = attrs.field(default="0.0.0.0", converter=_address)
    version: int = PROTOCOL_VERSION


@attrs.frozen
class Member:
    address: str = attrs.field(converter=_address)
    name: str


@attrs.frozen
class Welcome:
    """Hub → client: admitted to *room* with the virtual *address* in ``address/prefix``."""

    room: str
    room_id: int
    address: str = attrs.field(converter=_address)
    prefix: int
    members: tuple[Member, ...] = ()


@attrs.frozen
class Refused:
    """Either side: why the connection is refused (one line); the sender closes it next."""

    reason: str


@attrs.frozen
class MemberJoined:
    member: Member


@attrs.frozen
class MemberLeft:
    address: str = attrs.field(converter=_address)


@attrs.frozen
class Ping:
    token: int


@attrs.frozen
class Pong:
    token: int


@attrs.frozen
class BulkData:
    """A large blob for one member (or ``0.0.0.0``: every member of the room), on the bulk stream.
    From a client *address* is the destination; from the hub, the source."""

    address: str = attrs.field(converter=_address)
    channel: str
    data: bytes


ControlMessage = Union[Hello, Welcome, Refused, MemberJoined, MemberLeft, Ping, Pong, BulkData]


def _write_member(w: Writer, m: Member) -> None:
    U32.write(w, ip_to_int(m.address))
    write_string(w, m.name)


def _read_member(r: Reader) -> Member:
    return Member(ip_from_int(U32.read(r, "member address")), read_string(r, "member name"))


def encode_body(msg: ControlMessage) -> bytes:
    w = Writer()
    if isinstance(msg, Hello):
        U16.write(w, MessageType.HELLO)
        U16.write(w, msg.version)
        write_string(w, msg.room)
        write_string(w, msg.name)
        U32.write(w, ip_to_int(msg.address))
    elif isinstance(msg, Welcome):
        U16.write(w, MessageType.WELCOME)
        write_string(w, msg.room)
        U32.write(w, msg.room_id)
        U32.write(w, ip_to_int(msg.address))
        U16.write(w, msg.prefix)
        write_array(w, msg.members, _write_member)
    elif isinstance(msg, Refused):
        U16.write(w, MessageType.REFUSED)
        write_string(w, msg.reason)
    elif isinstance(msg, MemberJoined):
        U16.write(w, MessageType.MEMBER_JOINED)
        _write_member(w, msg.member)
    elif isinstance(msg, MemberLeft):
        U16.write(w, MessageType.MEMBER_LEFT)
        U32.write(w, ip_to_int(msg.address))
    elif isinstance(msg, (Ping, Pong)):
        U16.write(w, MessageType.PING if isinstance(msg, Ping) else MessageType.PONG)
        U64.write(w, msg.token)
    elif isinstance(msg, BulkData):
        U16.write(w, MessageType.BULK)
        U32.write(w, ip_to_int(msg.address))
        write_string(w, msg.channel)
        U32.write(w, len(msg.data))
        w.bytes(msg.data)
    else:  # pragma: no cover - the Union is closed
        raise EncodeError(f"not a relay message: {msg!r}")
    return w.getvalue()


def decode_body(data: bytes) -> ControlMessage:
    """One frame body → its message (a DecodeError for anything else)."""
    r = Reader(data)
    kind = U16.read(r, "message type")
    msg: ControlMessage
    if kind == MessageType.HELLO:
        version = U16.read(r, "version")
        room, name = read_string(r, "room"), read_string(r, "name")
        msg = Hello(room, name, ip_from_int(U32.read(r, "address")), version)
    elif kind == MessageType.WELCOME:
        room = read_string(r, "room")
        room_id = U32.read(r, "room id")
        address = ip_from_int(U32.read(r, "address"))
        prefix = U16.read(r, "prefix")
        if not 8 <= prefix <= 30:
            raise BadValue(f"welcome: prefix /{prefix} is not 8..30")
        msg = Welcome(room, room_id, address, prefix, read_array(r, _read_member, "members"))
    elif kind == MessageType.REFUSED:
        msg = Refused(read_string(r, "reason"))
    elif kind == MessageType.MEMBER_JOINED:
        msg = MemberJoined(_read_member(r))
    elif kind == MessageType.MEMBER_LEFT:
        msg = MemberLeft(ip_from_int(U32.read(r, "address")))
    elif kind in (MessageType.PING, MessageType.PONG):
        token = U64.read(r, "token")
        msg = Ping(token) if kind == MessageType.PING else Pong(token)
    elif kind == MessageType.BULK:
        address = ip_from_int(U32.read(r, "address"))
        channel = read_string(r, "channel")
        msg = BulkData(address, channel, r.bytes(U32.read(r, "bulk length"), "bulk data"))
    else:
        raise BadValue(f"unknown relay message type {kind}")
    r.expect_end(f"relay message {kind}")
    return msg


def encode_frame(msg: ControlMessage) -> bytes:
    """The message as stream bytes: compact u32 length, body."""
    body = encode_body(msg)
    return U32.encode(len(body)) + body


class FrameDecoder:
    """Reassembles frames from a stream's bytes; :meth:`feed` returns the messages completed."""

    def __init__(self, max_frame: int = MAX_CONTROL_FRAME) -> None:
        self._buffer = bytearray()
        self.max_frame = max_frame

    def feed(self, data: bytes) -> list[ControlMessage]:
        self._buffer += data
        out: list[ControlMessage] = []
        while self._buffer:
            r = Reader(bytes(self._buffer[:5]))
            try:
                size = U32.read(r, "frame length")
            except ShortData:
                break  # the length itself is not complete yet
            if size > self.max_frame:
                raise BadValue(f"relay frame of {size} bytes is over the limit of {self.max_frame}")
            if len(self._buffer) < r.pos + size:
                break
            body = bytes(self._buffer[r.pos : r.pos + size])
            del self._buffer[: r.pos + size]
            out.append(decode_body(body))
        return out

    @property
    def pending(self) -> int:
        return len(self._buffer)


_ENVELOPE = struct.Struct(">4sH4sH")
ENVELOPE_SIZE = _ENVELOPE.size


@attrs.frozen
class Envelope:
    source: tuple[str, int]
    destination: tuple[str, int]
    payload: bytes


def encode_envelope(source: tuple[str, int], destination: tuple[str, int], payload: bytes) -> bytes:
    try:
        head = _ENVELOPE.pack(
            ipaddress.IPv4Address(source[0]).packed, source[1], ipaddress.IPv4Address(destination[0]).packed, destination[1]
        )
    except (ValueError, struct.error) as exc:
        raise EncodeError(f"relay envelope {source} -> {destination}: {exc}") from None
    return head + payload


def envelope_sender(data: bytes) -> bytes:
    """The source IPv4 of an envelope, as its 4 bytes (the site that sent it, at the hub); read
    without decoding (the bytes of a short one)."""
    return bytes(data[:4])


def decode_envelope(data: bytes) -> Envelope:
    if len(data) < ENVELOPE_SIZE:
        raise ShortData(f"relay envelope: {len(data)} bytes, needs at least {ENVELOPE_SIZE}")
    sip, sport, dip, dport = _ENVELOPE.unpack_from(data)
    return Envelope(
        (str(ipaddress.IPv4Address(sip)), sport), (str(ipaddress.IPv4Address(dip)), dport), bytes(data[ENVELOPE_SIZE:])
    )
