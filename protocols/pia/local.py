"""Local protocol payloads (LDN session management, Pia 5.2-5.45; spec/pia.md §5.10).

Theory of operation: the host keeps every station's view of the LDN session in
step with *update session* messages (resent every 100 ms until each station
answers with an *update session ack* carrying the same sequence id), and can
announce *destroy network* or *start host migration*.  Every message starts
with a 12-byte header ``u8 version (1) · u8 type · u16 payload size · 6 zero ·
2 pad``.  Integers are little-endian, except the embedded 8-byte station
addresses (IPv4 InetAddress + u16 extension id), which are big-endian like the
rest of Pia (KW Local-Protocol.md).

Choices where the docs are silent: the wiki never says what "payload size"
counts (every byte after the header, or only the 73-byte update-session
payload), so the decoder reads each type by its layout whatever the size says,
refusing only a body too short for that layout; the size is kept in
``declared_size`` (``None`` when it counts the bytes after the header, what the
encoder writes for a value built by hand).  The header's "always 0" and
"padding" bytes, the messages' padding and "always 0" u32s, and any bytes
after a layout are accepted and kept (``header_reserved``, ``padding``,
``id_padding``, ``reserved``, ``trailing``) so that encoding gives the same
bytes back; the node sends zeros and nothing after the layout.  The version
byte stays strict: another value would announce another header layout.
5.3-5.6 use the 5.2 update-session layout (the 5.7 one adds the host service
variable id and constant id); destroy network / start host migration
(documented for 5.9) and the ack (5.9-5.45) are accepted for every 5.x version.
"""

from __future__ import annotations

import enum
from typing import ClassVar

import attrs

from protocols.errors import BadValue, EncodeError, UnsupportedVersion
from protocols.pia.types import Source, StationAddress, decode_station_address, read_source, require_only
from protocols.pia.versions import VersionProfile
from protocols.wire import KEPT_AS_SENT, Reader, Writer, reserved_field

__all__ = [
    "LOCAL_HEADER_SIZE",
    "LOCAL_NODE_SLOTS",
    "DestroyNetwork",
    "LocalMessage",
    "LocalMessageType",
    "LocalNode",
    "StartHostMigration",
    "UpdateSession",
    "UpdateSessionAck",
    "decode_local_message",
]

LOCAL_HEADER_SIZE = 12
LOCAL_VERSION = 1
#: Update session always lists 8 node slots; unused ones have ranking 255.
LOCAL_NODE_SLOTS = 8
UNUSED_RANKING = 255


class LocalMessageType(enum.IntEnum):
    UPDATE_SESSION = 0x11
    DESTROY_NETWORK = 0x12
    START_HOST_MIGRATION = 0x13
    UPDATE_SESSION_ACK = 0x21


def _check(profile: VersionProfile, exc: type[Exception]) -> None:
    if not (5, 2) <= profile.version <= (5, 45):
        raise exc(f"Pia {profile.name} has no Local protocol (5.2-5.45)")


@attrs.frozen
class _Framed:
    """The header and trailer fields every Local message keeps as sent (keyword-only, after the message's own)."""

    #: The header's u16 payload size when it differs from the bytes after the header (None: it counts them).
    declared_size: int | None = attrs.field(default=None, kw_only=True, metadata={KEPT_AS_SENT: True})
    #: Header bytes 4-11: 6 "always 0" and 2 "padding" (KW Local-Protocol.md).
    header_reserved: bytes = reserved_field(kw_only=True)
    #: Bytes after the message type's layout.
    trailing: bytes = attrs.field(
        default=b"", kw_only=True, converter=bytes, repr=lambda b: repr(b.hex()), metadata={KEPT_AS_SENT: True}
    )

    def _frame(self, kind: int, body: bytes) -> bytes:
        body += self.trailing
        size = len(body) if self.declared_size is None else self.declared_size
        w = Writer()
        w.u8(LOCAL_VERSION)
        w.u8(kind)
        w.u16_le(size, "local payload size")
        w.reserved(self.header_reserved, 8, "local header reserved bytes")
        w.bytes(body)
        return w.getvalue()


_FRAMED = {"declared_size", "header_reserved", "trailing"}


@attrs.frozen
class LocalNode:
    """One slot of an update session: an 8-byte station address and its host-migration ranking (0 = oldest)."""

    address: StationAddress = StationAddress()
    ranking: int = UNUSED_RANKING


def _nodes(value: object) -> tuple[LocalNode, ...]:
    nodes = tuple(value)  # type: ignore[call-overload]
    return nodes + (LocalNode(),) * max(0, LOCAL_NODE_SLOTS - len(nodes))


@attrs.frozen
class UpdateSession(_Framed):
    """Host → all: the session's node table (``nodes`` is padded to 8 unused slots)."""

    sequence_id: int
    network_id: int
    host_variable_id: int
    allow_participation: int = 1
    nodes: tuple[LocalNode, ...] = attrs.field(default=(), converter=_nodes)
    migration_state: int = 0
    #: 5.7+ only.
    host_service_variable_id: int = 0
    host_constant_id: int = 0
    #: 5.7+ only: the 4 padding bytes after the host service variable id.
    id_padding: bytes = reserved_field()
    #: The 7 padding bytes after allow participation.
    padding: bytes = reserved_field()

    def encode(self, profile: VersionProfile) -> bytes:
        _check(profile, EncodeError)
        if len(self.nodes) != LOCAL_NODE_SLOTS:
            raise EncodeError(f"an update session lists exactly {LOCAL_NODE_SLOTS} nodes, not {len(self.nodes)}")
        if profile.version < (5, 7):
            require_only(self, {"sequence_id", "network_id", "host_variable_id", "allow_participation", "nodes",
                                "migration_state", "padding"} | _FRAMED, profile)
        w = Writer()
        w.u32_le(self.sequence_id, "sequence id")
        w.u32_le(self.network_id, "network id")
        w.u32_le(self.host_variable_id, "host variable id")
        if profile.version >= (5, 7):
            w.u32_le(self.host_service_variable_id, "host service variable id")
            w.reserved(self.id_padding, 4, "update session padding")
            w.u64_le(self.host_constant_id, "host constant id")
        w.u8(self.allow_participation, "allow participation")
        w.reserved(self.padding, 7, "update session padding")
        for node in self.nodes:
            node.address.write(w, profile, 8)
            w.u8(node.ranking, "ranking")
        w.u8(self.migration_state, "migration state")
        return self._frame(LocalMessageType.UPDATE_SESSION, w.getvalue())


@attrs.frozen
class UpdateSessionAck(_Framed):
    """``header · u32 sequence id · u32 "always 0"`` (kept in ``reserved``)."""

    sequence_id: int
    reserved: bytes = reserved_field()

    def encode(self, profile: VersionProfile) -> bytes:
        _check(profile, EncodeError)
        w = Writer()
        w.u32_le(self.sequence_id, "sequence id")
        w.reserved(self.reserved, 4, "ack reserved bytes")
        return self._frame(LocalMessageType.UPDATE_SESSION_ACK, w.getvalue())


@attrs.frozen
class _Notice(_Framed):
    """``header · u32 "always 0"`` (kept in ``reserved``)."""

    reserved: bytes = reserved_field()
    KIND: ClassVar[LocalMessageType]

    def encode(self, profile: VersionProfile) -> bytes:
        _check(profile, EncodeError)
        w = Writer()
        w.reserved(self.reserved, 4, "reserved")
        return self._frame(self.KIND, w.getvalue())


@attrs.frozen
class DestroyNetwork(_Notice):
    """``header · u32 "always 0"`` (kept in ``reserved``)."""

    KIND = LocalMessageType.DESTROY_NETWORK


@attrs.frozen
class StartHostMigration(_Notice):
    """``header · u32 "always 0"`` (kept in ``reserved``)."""

    KIND = LocalMessageType.START_HOST_MIGRATION


LocalMessage = UpdateSession | UpdateSessionAck | DestroyNetwork | StartHostMigration


def _decode_update(r: Reader, profile: VersionProfile) -> UpdateSession:
    kw: dict[str, int] = {
        "sequence_id": r.u32_le("sequence id"),
        "network_id": r.u32_le("network id"),
        "host_variable_id": r.u32_le("host variable id"),
    }
    id_padding = b""
    if profile.version >= (5, 7):
        kw["host_service_variable_id"] = r.u32_le("host service variable id")
        id_padding = r.reserved(4, "update session padding")
        kw["host_constant_id"] = r.u64_le("host constant id")
    kw["allow_participation"] = r.u8("allow participation")
    padding = r.reserved(7, "update session padding")
    nodes = []
    for _ in range(LOCAL_NODE_SLOTS):
        address = decode_station_address(r, profile, 8)
        nodes.append(LocalNode(address, r.u8("ranking")))
    return UpdateSession(nodes=tuple(nodes), migration_state=r.u8("migration state"), id_padding=id_padding,
                         padding=padding, **kw)


def decode_local_message(payload: Source, profile: VersionProfile) -> LocalMessage:
    _check(profile, UnsupportedVersion)

    def read(r: Reader) -> LocalMessage:
        version = r.u8("local header version")
        # Kept strict: "Version number (1)" (KW Local-Protocol.md); another value would announce another layout.
        if version != LOCAL_VERSION:
            raise BadValue(f"Local protocol header version must be {LOCAL_VERSION}, not {version}")
        kind = r.u8("local message type")
        size = r.u16_le("local payload size")
        header_reserved = r.reserved(8, "local header reserved bytes")
        # The layout decides where the message ends; the declared size is kept, not enforced.
        body = Reader(r.rest())
        declared_size = None if size == body.remaining() else size
        msg: LocalMessage
        if kind == LocalMessageType.UPDATE_SESSION:
            msg = _decode_update(body, profile)
        elif kind == LocalMessageType.UPDATE_SESSION_ACK:
            seq = body.u32_le("sequence id")
            msg = UpdateSessionAck(seq, body.reserved(4, "ack reserved bytes"))
        elif kind in (LocalMessageType.DESTROY_NETWORK, LocalMessageType.START_HOST_MIGRATION):
            cls = DestroyNetwork if kind == LocalMessageType.DESTROY_NETWORK else StartHostMigration
            msg = cls(body.reserved(4, "reserved"))
        else:
            raise BadValue(f"unknown Local message type 0x{kind:02x}")
        return attrs.evolve(msg, declared_size=declared_size, header_reserved=header_reserved, trailing=body.rest())

    return read_source(payload, read, "Local message")
