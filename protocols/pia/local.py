"""Local protocol payloads (LDN session management, Pia 5.2-5.45; spec/pia.md §5.10).

Theory of operation: the host keeps every station's view of the LDN session in
step with *update session* messages (resent every 100 ms until each station
answers with an *update session ack* carrying the same sequence id), and can
announce *destroy network* or *start host migration*.  Every message starts
with a 12-byte header ``u8 version (1) · u8 type · u16 payload size · 6 zero ·
2 pad``.  Integers are little-endian, except the embedded 8-byte station
addresses (IPv4 InetAddress + u16 extension id), which are big-endian like the
rest of Pia (KW Local-Protocol.md).

Choices where the docs are silent: "payload size" counts the bytes after the
12-byte header and must match them; the 2 pad bytes are zero; 5.3-5.6 use the
5.2 update-session layout (the 5.7 one adds the host service variable id and
constant id); destroy network / start host migration (documented for 5.9) and
the ack (5.9-5.45) are accepted for every 5.x version.
"""

from __future__ import annotations

import enum

import attrs

from protocols.errors import BadValue, EncodeError, UnsupportedVersion
from protocols.pia.types import Source, StationAddress, decode_station_address, read_source, require_only
from protocols.pia.versions import VersionProfile
from protocols.wire import Reader, Writer

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


def _frame(kind: int, body: bytes) -> bytes:
    w = Writer()
    w.u8(LOCAL_VERSION)
    w.u8(kind)
    if len(body) > 0xFFFF:
        raise EncodeError("Local protocol body too large")
    w.u16_le(len(body))
    w.zeros(8)
    w.bytes(body)
    return w.getvalue()


@attrs.frozen
class LocalNode:
    """One slot of an update session: an 8-byte station address and its host-migration ranking (0 = oldest)."""

    address: StationAddress = StationAddress()
    ranking: int = UNUSED_RANKING


def _nodes(value: object) -> tuple[LocalNode, ...]:
    nodes = tuple(value)  # type: ignore[call-overload]
    return nodes + (LocalNode(),) * max(0, LOCAL_NODE_SLOTS - len(nodes))


@attrs.frozen
class UpdateSession:
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

    def encode(self, profile: VersionProfile) -> bytes:
        _check(profile, EncodeError)
        if len(self.nodes) != LOCAL_NODE_SLOTS:
            raise EncodeError(f"an update session lists exactly {LOCAL_NODE_SLOTS} nodes, not {len(self.nodes)}")
        if profile.version < (5, 7):
            require_only(self, {"sequence_id", "network_id", "host_variable_id", "allow_participation", "nodes",
                                "migration_state"}, profile)
        w = Writer()
        w.u32_le(self.sequence_id, "sequence id")
        w.u32_le(self.network_id, "network id")
        w.u32_le(self.host_variable_id, "host variable id")
        if profile.version >= (5, 7):
            w.u32_le(self.host_service_variable_id, "host service variable id")
            w.zeros(4)
            w.u64_le(self.host_constant_id, "host constant id")
        w.u8(self.allow_participation, "allow participation")
        w.zeros(7)
        for node in self.nodes:
            node.address.write(w, profile, 8)
            w.u8(node.ranking, "ranking")
        w.u8(self.migration_state, "migration state")
        return _frame(LocalMessageType.UPDATE_SESSION, w.getvalue())


@attrs.frozen
class UpdateSessionAck:
    """``header · u32 sequence id · u32 0``."""

    sequence_id: int

    def encode(self, profile: VersionProfile) -> bytes:
        _check(profile, EncodeError)
        w = Writer()
        w.u32_le(self.sequence_id, "sequence id")
        w.zeros(4)
        return _frame(LocalMessageType.UPDATE_SESSION_ACK, w.getvalue())


@attrs.frozen
class DestroyNetwork:
    """``header · u32 0``."""


    def encode(self, profile: VersionProfile) -> bytes:
        _check(profile, EncodeError)
        return _frame(LocalMessageType.DESTROY_NETWORK, bytes(4))


@attrs.frozen
class StartHostMigration:
    """``header · u32 0``."""


    def encode(self, profile: VersionProfile) -> bytes:
        _check(profile, EncodeError)
        return _frame(LocalMessageType.START_HOST_MIGRATION, bytes(4))


LocalMessage = UpdateSession | UpdateSessionAck | DestroyNetwork | StartHostMigration


def _decode_update(r: Reader, profile: VersionProfile) -> UpdateSession:
    kw: dict[str, int] = {
        "sequence_id": r.u32_le("sequence id"),
        "network_id": r.u32_le("network id"),
        "host_variable_id": r.u32_le("host variable id"),
    }
    if profile.version >= (5, 7):
        kw["host_service_variable_id"] = r.u32_le("host service variable id")
        r.zeros(4, "update session padding")
        kw["host_constant_id"] = r.u64_le("host constant id")
    kw["allow_participation"] = r.u8("allow participation")
    r.zeros(7, "update session padding")
    nodes = []
    for _ in range(LOCAL_NODE_SLOTS):
        address = decode_station_address(r, profile, 8)
        nodes.append(LocalNode(address, r.u8("ranking")))
    return UpdateSession(nodes=tuple(nodes), migration_state=r.u8("migration state"), **kw)


def decode_local_message(payload: Source, profile: VersionProfile) -> LocalMessage:
    _check(profile, UnsupportedVersion)

    def read(r: Reader) -> LocalMessage:
        version = r.u8("local header version")
        if version != LOCAL_VERSION:
            raise BadValue(f"Local protocol header version must be {LOCAL_VERSION}, not {version}")
        kind = r.u8("local message type")
        size = r.u16_le("local payload size")
        r.zeros(8, "local header padding")
        with r.restrict_to(size, "Local protocol body") as body:
            if kind == LocalMessageType.UPDATE_SESSION:
                return _decode_update(body, profile)
            if kind == LocalMessageType.UPDATE_SESSION_ACK:
                seq = body.u32_le("sequence id")
                body.zeros(4, "ack padding")
                return UpdateSessionAck(seq)
            if kind in (LocalMessageType.DESTROY_NETWORK, LocalMessageType.START_HOST_MIGRATION):
                body.zeros(4, "reserved")
                cls = DestroyNetwork if kind == LocalMessageType.DESTROY_NETWORK else StartHostMigration
                return cls()
            raise BadValue(f"unknown Local message type 0x{kind:02x}")

    return read_source(payload, read, "Local message")
