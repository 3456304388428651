"""The node's view of the wire: builds and reads the messages :mod:`pianode.mesh.session` exchanges.

The session speaks in a handful of small values (a connection request, a join
response, an update mesh, ...).  This module maps them onto the version-exact
codecs in :mod:`protocols.pia` for the configured profile, derives the node's
identities for its network type, builds packet headers, bundles messages into
datagrams and makes the per-peer reliable windows.  Keeping the mapping here
keeps the session a pure state machine over a stable vocabulary.
"""

from __future__ import annotations

import collections
import ipaddress
import random
import threading
import zlib
from collections.abc import Callable, Iterable, Mapping
from typing import Iterator, Protocol

import attrs

from pianode.mesh import legacy
from protocols.pia import session6
from pianode.mesh.config import NodeConfig
from pianode.mesh.packet_ids import PacketIdCounter
from pianode.mesh.reliable import ReliableWindow, WindowConfig
from pianode.mesh.replay import nonce_value
from pianode.mesh.rtt import HeaderTimers
from pianode.mesh.table import MeshTable, StationEntry
from protocols.errors import BadValue, DecodeError
from protocols.pia import keys
from protocols.pia import mesh as pmesh
from protocols.pia import station as pstation
from protocols.pia.header import PacketHeader
from protocols.pia.message import Message
from protocols.pia.nonce import nonce_builder
from protocols.pia.packet import PacketCodec
from protocols.pia.packet_values import Packet
from protocols.pia.types import InetAddress, MeshStationInfo, PlayerInfo, StationConnectionInfo, StationLocation
from protocols.pia.versions import HeaderFormat, MessageFormat, NetworkType, Proto, VersionProfile

__all__ = [
    "MAX_TRIES",
    "ConnectRequest",
    "ConnectResponse",
    "Disconnect",
    "JoinDenied",
    "JoinRequest",
    "JoinResponse",
    "LeaveRequest",
    "Location",
    "PeerLink",
    "StationAck",
    "UpdateMesh",
]

#: Sends of an acked station/mesh message before the peer counts as lost.
MAX_TRIES = 12
DENY_MESH_FULL = 1
DENY_NOT_HOST = 2
#: 6.x (pianode's own meshes): the joiner's variable id is a member's (undocumented reasons are free, spec §5.4).
DENY_VARIABLE_ID_IN_USE = 3
_DENY_TEXT = {DENY_MESH_FULL: "mesh full", DENY_NOT_HOST: "not the host", DENY_VARIABLE_ID_IN_USE: "variable id in use"}



class PeerLink(Protocol):
    """What headers and messages read of a peer (:class:`pianode.mesh.peer.Peer`)."""

    index: int | None
    connected: bool
    own_conn_id: int
    peer_conn_id: int
    constant_id: int
    variable_id: int
    tx_ids: PacketIdCounter
    header_timers: HeaderTimers


# ---------------------------------------------------------------------- identities


@attrs.frozen
class Location:
    address: tuple[str, int]
    constant_id: int
    variable_id: int
    service_variable_id: int = 0


def mac_for(ip: str) -> bytes:
    """The synthetic MAC of a simulated LDN station: 02:00 (locally administered) + its IPv4."""
    return b"\x02\x00" + ipaddress.IPv4Address(ip).packed


class _MacTable(Mapping[str, bytes]):
    """Every IPv4 source has the synthetic MAC :func:`mac_for` gives it."""

    def __getitem__(self, ip: str) -> bytes:
        try:
            return mac_for(ip)
        except ValueError:
            raise KeyError(ip) from None

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def local_identity(config: NodeConfig, address: tuple[str, int], rng: random.Random) -> Location:
    ip, port = address
    profile = config.profile
    var_bits = 16 if profile.variable_id_size == 2 else 32
    variable_id = rng.randrange(2, 1 << var_bits)
    if config.network is NetworkType.LDN and profile.constant_id_size == 4:
        # 3DS local play (<= 4.10): the real frames carry zero ids in every StationLocation (the
        # local network names stations by node id); the address stays, as the simulation routes by it.
        return Location(address, 0, 0, 0)
    if config.network is NetworkType.LDN:
        mac = mac_for(ip)
        return Location(address, keys.ldn_constant_id(mac), variable_id, keys.ldn_service_variable_id(mac))
    if config.network is NetworkType.NEX:
        pid = rng.randrange(1, 1 << 32)
        return Location(address, pid, variable_id, rng.randrange(1, 1 << 32))
    return Location(address, keys.lan_constant_id(ip, port), variable_id, keys.lan_service_variable_id(ip, port))


def network_id_for_host(config: NodeConfig, host: tuple[str, int], rng: random.Random) -> int:
    """The session's network id as every member derives it (spec §4)."""
    if config.network is NetworkType.LAN:
        return keys.lan_network_id(host[0], host[1])
    if config.network is NetworkType.NEX:
        return config.gathering_id if config.gathering_id is not None else 0x1D2F3A4B
    # LDN: the host's random u32 published in the advertisement; the launcher
    # passes it to joiners.  Without one, derive a stable value from the host.
    return zlib.crc32(ipaddress.IPv4Address(host[0]).packed + host[1].to_bytes(2, "big"))


# Codecs by settings: the sessions of one thread in one mesh (32 stations of
# `pianode mesh`) share one codec, its AEAD context and its nonce builder's
# cache, which then stay warm in the CPU's caches.  A codec keeps no state
# between calls that a session relies on but ``last_nonce``, which the
# session reads right after its own decode (so the cache is per thread).
_CODECS = threading.local()
_CODECS_LIMIT = 16


def packet_codec(
    config: NodeConfig, profile: VersionProfile, key: bytes, network_id: int
) -> tuple[PacketCodec, Callable[[PacketHeader, str], bytes]]:
    """The session's packet codec and the nonce builder it uses (replay checks need the nonce)."""
    codecs: dict[tuple[object, ...], tuple[PacketCodec, Callable[[PacketHeader, str], bytes]]] | None
    codecs = getattr(_CODECS, "by_settings", None)
    if codecs is None:
        codecs = _CODECS.by_settings = {}
    settings = (profile.version, config.network, key, network_id, config.aead_backend)
    shared = codecs.get(settings)
    if shared is None:
        shared = _new_packet_codec(config, profile, key, network_id)
        if len(codecs) >= _CODECS_LIMIT:
            del codecs[next(iter(codecs))]
        codecs[settings] = shared
    return shared


def _new_packet_codec(
    config: NodeConfig, profile: VersionProfile, key: bytes, network_id: int
) -> tuple[PacketCodec, Callable[[PacketHeader, str], bytes]]:
    net = config.network
    if legacy.is_legacy(profile):
        # <= 5.6: AES-ECB + HMAC-MD5 keyed with the session key, no nonce (spec §3.1); the
        # replay checks read the header instead (pianode.mesh.legacy.replay_nonce).
        return PacketCodec(profile, key, None, backend=config.aead_backend), _legacy_nonce
    if net is NetworkType.NEX:
        builder = nonce_builder(profile, net, gathering_id=network_id)
    elif net is NetworkType.LDN:
        builder = nonce_builder(profile, net, network_id=network_id, macs=_MacTable())
    elif net is NetworkType.NPLN:
        # 6.16-6.30: the network id handed over by matchmaking is the nonce prefix (spec §3.2).
        builder = nonce_builder(profile, net, network_id=network_id & 0xFFFFFFFF)
    else:
        builder = nonce_builder(profile, net)
    return PacketCodec(profile, key, builder, backend=config.aead_backend), builder


def _legacy_nonce(header: PacketHeader, source: str) -> bytes:
    return legacy.replay_nonce(header)


def decode_context(config: NodeConfig, network_id: int, addresses: Iterable[tuple[str, int]]) -> dict[str, object]:
    """The extra `pianode decode` session-file fields this network type needs (*addresses*: every station's)."""
    net = config.network
    if net is NetworkType.NEX:
        return {"gathering_id": network_id}
    if net is NetworkType.NPLN:
        return {"network_id": network_id & 0xFFFFFFFF}
    if net is NetworkType.LDN and session6.is_pia6(config.profile):
        return {"network_id": network_id}
    if net is NetworkType.LDN:
        macs = {}
        for addr in addresses:
            macs[addr[0]] = ":".join(f"{b:02x}" for b in mac_for(addr[0]))
        return {"network_id": network_id, "macs": macs}
    return {}


# ---------------------------------------------------------------------- packets


def make_header(profile: VersionProfile, peer: PeerLink, own_variable_id: int, hn: bytes, now: float) -> PacketHeader:
    # A packet to a station with a station index carries our connection id and a packet id
    # of 1 and up; one sent to an address (a station not yet in our mesh table: index 253,
    # spec §2.6) carries connection id 0 and packet id 0 (spec §1.3), which NintendoClients
    # checks ("unexpected connection id").
    connected = peer.connected and peer.index is not None
    packet_id = peer.tx_ids.next() if connected else 0
    hf = profile.header_format
    if hf is HeaderFormat.B:
        # 5.7-5.10 carry RTT timers in every header (spec §1.5).
        timers = peer.header_timers
        return PacketHeader(
            encrypted=True,
            packet_id=packet_id,
            connection_id=peer.own_conn_id if connected else 0,
            source_timer=timers.source_timer(now),
            destination_timer=timers.destination_timer(now),
            nonce=hn,
        )
    # Positional arguments (the field order of PacketHeader): the per-packet path.
    if hf is HeaderFormat.C or hf is HeaderFormat.D:
        return PacketHeader(
            True, packet_id, peer.own_conn_id if connected else 0, profile.header_version, None, None, None, None, 0, 0, 0, hn
        )
    return PacketHeader(
        True, packet_id, 0, profile.header_version, None, None, peer.variable_id, own_variable_id, 0, 0, 0, hn
    )


def group_header(profile: VersionProfile, own_variable_id: int, packet_id: int, hn: bytes) -> PacketHeader:
    """Header of a packet for several stations: no single destination, receivers in the footer."""
    return PacketHeader(
        encrypted=True,
        packet_id=packet_id,
        version=profile.header_version,
        destination_variable_id=0,
        source_variable_id=own_variable_id,
        nonce=hn,
    )


def footer_size_offset(profile: VersionProfile) -> int | None:
    """Offset of the header's footer-size byte (spec §1.1), or None without a footer."""
    return {HeaderFormat.E: 0xF, HeaderFormat.F: 0xB, HeaderFormat.G: 0xC}.get(profile.header_format)


# Decoded group packets, shared by the nodes of one process: the same bytes from
# the same source under the same key always decode to the same value, so the
# stations a packet was fanned out to need not each decrypt it.  An entry is
# dropped once as many stations as its footer names have taken it; the cap
# only bounds entries some addressee never receives (lost datagrams).
_SHARED: collections.OrderedDict[tuple[int, str, bytes], _Shared] = collections.OrderedDict()
_SHARED_LIMIT = 64


@attrs.frozen
class GroupPacket:
    """A decoded packet with a footer, with what every addressee checks: its GCM
    nonce (replay filter) and its receivers' variable ids as a set."""

    packet: Packet
    nonce: bytes
    receivers: frozenset[int]
    #: The nonce as the replay filter reads it (pianode.mesh.replay.nonce_value), worked out once.
    nonce_value: int = 0
    #: The payloads of its unreliable data messages (a game's frame), in order.
    unreliable: tuple[bytes, ...] = ()
    #: The station indexes (bits) every unreliable message is addressed to (destination 0 = all).
    common_destination: int = -1
    #: Its other messages (reliable segments, acks, ...), in order, each for its destination.
    others: tuple[Message, ...] = ()


_CODEC_KEYS: dict[tuple[object, ...], int] = {}


def codec_key(*settings: object) -> int:
    """A small number standing for a codec's settings (version, network, key, ...) in :func:`shared_decode`'s cache."""
    return _CODEC_KEYS.setdefault(settings, len(_CODEC_KEYS) + 1)


class _Shared:
    """A decoded group packet and how many of its addressees have yet to take it."""

    __slots__ = ("group", "remaining")

    def __init__(self, group: GroupPacket, remaining: int) -> None:
        self.group = group
        self.remaining = remaining


class _Last:
    """The last packet decoded, which the group listener hands to every station of
    the process in a row: the same bytes object is recognised without a lookup."""

    __slots__ = ("codec_key", "data", "group", "source")

    def __init__(self) -> None:
        self.data: bytes | None = None
        self.codec_key = 0
        self.source = ""
        self.group: GroupPacket | None = None


_LAST = _Last()


def shared_decode(
    codec: PacketCodec,
    codec_key: int,
    data: bytes,
    source: str,
    nonce_of: Callable[[PacketHeader, str], bytes],
    unreliable_id: int = -1,
) -> GroupPacket:
    """Decode a group packet once for every station of the process it reaches.

    *codec_key* stands for the codec's settings (:func:`codec_key`; it fixes
    *unreliable_id*, the profile's Unreliable protocol id).
    """
    last = _LAST
    if data is last.data and codec_key == last.codec_key and source == last.source and last.group is not None:
        return last.group
    key = (codec_key, source, data)
    entry = _SHARED.get(key)
    if entry is None:
        packet = codec.decode(data, source)
        nonce = nonce_of(packet.header, source) if packet.header.encrypted else b""
        frames = tuple(m for m in packet.messages if m.protocol_type == unreliable_id)
        common = -1
        for m in frames:
            if m.destination:
                common &= m.destination
        others = tuple(m for m in packet.messages if m.protocol_type != unreliable_id)
        group = GroupPacket(
            packet, nonce, frozenset(packet.footer), nonce_value(nonce), tuple(m.payload for m in frames), common, others
        )
        remaining = len(packet.footer) - 1
        if remaining > 0:
            if len(_SHARED) >= _SHARED_LIMIT:
                _SHARED.popitem(last=False)
            _SHARED[key] = _Shared(group, remaining)
            last.data, last.codec_key, last.source, last.group = data, codec_key, source, group
        return group
    entry.remaining -= 1
    if entry.remaining <= 0:
        del _SHARED[key]
    return entry.group


SOURCE_ID_FORMATS = frozenset({MessageFormat.B, MessageFormat.C, MessageFormat.D, MessageFormat.E})


def make_message(
    profile: VersionProfile,
    protocol_ids: Mapping[Proto, int],
    source_id: int | None,
    peer: PeerLink,
    proto: Proto,
    port: int,
    payload: bytes,
) -> Message:
    """A message of *proto* to *peer* (*source_id*: our constant id where the message format carries it)."""
    ptype = protocol_ids[proto]
    if profile.message_format is MessageFormat.G:
        # M-G carries no destination: the header's destination variable id addresses the packet (spec §2.1).
        return Message(ptype, port, payload, 0, 0, None)
    if peer.index is not None:
        flags, destination = profile.bitmap_flag, 1 << peer.index
    else:
        flags, destination = 0, 0
    return Message(ptype, port, payload, flags, destination, source_id)


_MESSAGE_OVERHEAD = 28  # the largest per-message header of a 5.x format plus alignment
_PACKET_OVERHEAD = 32 + 16 + 32  # header, padding to 16, footer margin
#: What a packet of one unicast message needs beside its payload, at most: 75 bytes in 5.7-5.10
#: (H-C header with its tag, an M-C message header, alignment to 4, 0xFF padding to 16), 71 in
#: 5.11-5.19, 63 from 5.26, 51 in 3.x/4.x (measured over every payload length mod 16); a group
#: packet's footer adds 2 bytes a receiver.  An unreliable message is never split (spec §5.8: its
#: payload is the raw game data), so one longer than ``mtu - UNRELIABLE_ROOM`` is refused.
UNRELIABLE_ROOM = 80


def bundle(profile: VersionProfile, messages: list[Message], mtu: int) -> list[list[Message]]:
    """Split messages into packets that fit *mtu* bytes."""
    budget = mtu - _PACKET_OVERHEAD
    out: list[list[Message]] = []
    current: list[Message] = []
    size = 0
    for m in messages:
        need = len(m.payload) + _MESSAGE_OVERHEAD
        if current and size + need > budget:
            out.append(current)
            current, size = [], 0
        current.append(m)
        size += need
    if current:
        out.append(current)
    return out


def is_connection_request(profile: VersionProfile, message: Message) -> bool:
    return (
        message.protocol_type == session6.protocol_ids(profile).get(Proto.STATION)
        and message.payload[:1] == b"\x01"
    )


def ends_link(profile: VersionProfile, message: Message) -> bool:
    """Whether *message* is a disconnection request or response (spec §5.3: types 3, 4)."""
    return (
        message.protocol_type == session6.protocol_ids(profile).get(Proto.STATION)
        and message.payload[:1] in (b"\x03", b"\x04")
    )


# ---------------------------------------------------------------------- station protocol


@attrs.frozen
class ConnectRequest:
    conn_id: int
    inverse: bool
    inverse_conn_id: int
    location: Location
    ack_id: int


@attrs.frozen
class ConnectResponse:
    result: int
    ack_id: int | None
    location: Location | None = None
    #: A denial's (constant id, variable id) from 5.7 (spec §5.3): the station it refuses (None: no ids).
    named: tuple[int, int] | None = None


@attrs.frozen
class StationAck:
    ack_id: int


@attrs.frozen
class Disconnect:
    response: bool


StationMessage = ConnectRequest | ConnectResponse | StationAck | Disconnect


def _station_location(profile: VersionProfile, loc: Location) -> StationLocation:
    ip, port = loc.address
    inet = InetAddress.from_ip(ip, port)
    ids = dict(constant_id=loc.constant_id, variable_id=loc.variable_id, service_variable_id=loc.service_variable_id)
    # NAT location 0: a local station's location, as the real 3DS frames carry it
    # (../shared/captures/mgba-uds-frames.jsonl) and as NintendoClients reads it (it takes
    # the private address only when the NAT location is 0; spec §5.2 names 2 "public").
    if profile.version <= (5, 9):
        # URL type 3 = "udp" (a local station, no NEX stream); spec §5.2.
        return StationLocation(public=inet, url_type=3, nat_location=0, **ids)
    return StationLocation(public=inet, private=inet, nat_location=0, private_available=1, **ids)


def _from_station_location(loc: StationLocation | StationConnectionInfo | None) -> Location:
    if isinstance(loc, StationConnectionInfo):
        loc = loc.public
    if loc is None:
        raise BadValue("connection request without a location")
    # The public address, or the private one where the public is empty (a host that lists
    # local locations only, as NintendoClients' and the real frames' do).
    inet = loc.public
    if (inet.ip is None or inet.ip.is_unspecified) and loc.private.ip is not None and not loc.private.ip.is_unspecified:
        inet = loc.private
    ip = inet.ip
    return Location(
        (str(ip) if ip is not None else "0.0.0.0", inet.port),
        loc.constant_id,
        loc.variable_id,
        loc.service_variable_id,
    )


def _location_fields(profile: VersionProfile, loc: Location) -> dict[str, object]:
    sl = _station_location(profile, loc)
    if profile.version <= (5, 9):
        return {"connection_info": legacy.connection_info(profile, sl)}
    return {"location": sl}


def _protocol_list(profile: VersionProfile) -> tuple[tuple[int, int], ...]:
    if profile.version < (5, 19):
        return ()
    items = [(profile.protocol_id(Proto.STATION), profile.station_version or 0)]
    if profile.mesh_version is not None:
        items.append((profile.protocol_id(Proto.MESH), profile.mesh_version))
    return tuple(items)


def encode_connect_request(
    profile: VersionProfile, local: Location, network_id: int, peer: PeerLink, *, inverse: bool, ack_id: int
) -> bytes:
    if profile.version < (5, 7):
        info = _location_fields(profile, local)["connection_info"]
        return legacy.connect_request(profile, info, peer.own_conn_id, inverse, peer.constant_id, ack_id)  # type: ignore[arg-type]
    fields: dict[str, object] = dict(
        ack_id=ack_id,
        target_constant_id=peer.constant_id,
        target_variable_id=peer.variable_id,
        **_location_fields(profile, local),
    )
    if profile.version < (5, 27):
        fields.update(
            connection_id=peer.own_conn_id,
            is_inverse=inverse,
            inverse_connection_id=peer.peer_conn_id if inverse else 0,
            protocols=_protocol_list(profile),
        )
    else:
        fields.update(
            platform=pstation.Platform.SWITCH if hasattr(pstation, "Platform") else 4,
            protocols=_protocol_list(profile),
            network_id=network_id & 0xFFFFFFFF,
            player_count=1,
            participant_count=1,
        )
    return pstation.ConnectionRequest(**fields).encode(profile)  # type: ignore[arg-type]


#: A connection response's players: fragment 0 holds four PlayerInfo slots, the unused ones zero-filled
#: (spec §5.3 "PlayerInfo × 2 or 4"; NintendoClients sends and expects exactly this, and fails on none).
#: Where four do not fit the MTU, two, then our one player alone (still fragment 0: it holds all players).
#: "Number of player infos" counts the slots that describe a player, not the slots: the documented layout
#: sizes the array apart from that count (2 or 4), and NintendoClients-2020, written with that
#: documentation, writes len(players) there and refuses a response whose count differs from the
#: number of players ("Number of players is different from number of player infos").
PLAYER_SLOTS = (4, 2, 1)
_PLAYER_INFO_SIZE = 195  # 5.7+ (spec §5.2; 187 before)
_RESPONSE_ROOM = 200  # the response's other fields, the message header and the packet's, with margin
_EMPTY_PLAYER = PlayerInfo(name_encoding=0, account_encoding=0)


def encode_connect_response(
    profile: VersionProfile,
    local: Location,
    network_id: int,
    peer: PeerLink,
    result: int,
    ack_id: int,
    name: str = "",
    mtu: int = 1364,
) -> bytes:
    """An accepting connection response that names our one player (*name*), in as many slots as *mtu* allows."""
    if profile.version <= (4, 10):
        return legacy.connect_response(profile, name, network_id, ack_id)
    slots = next((n for n in PLAYER_SLOTS if n * _PLAYER_INFO_SIZE + _RESPONSE_ROOM <= mtu), 1)
    fields: dict[str, object] = dict(
        ack_id=ack_id,
        player_count=1,
        participant_count=1,
        player_info_count=1,
        players=(PlayerInfo.from_text(name, profile), *[_EMPTY_PLAYER] * (slots - 1)),
    )
    if profile.version >= (5, 7):
        fields.update(target_constant_id=peer.constant_id, target_variable_id=peer.variable_id)
    if profile.version >= (5, 24) and profile.version <= (5, 26):
        fields.update(connection_id=peer.own_conn_id)
    if profile.version >= (5, 27):
        fields.update(
            protocols=_protocol_list(profile),
            location=_station_location(profile, local),
            network_id=network_id & 0xFFFFFFFF,
            platform=4,
        )
    else:
        fields.update(platform=legacy.platform(profile), network_id=network_id & 0xFFFFFFFF)
    return pstation.ConnectionResponse(**fields).encode(profile)  # type: ignore[arg-type]


def encode_connect_deny(profile: VersionProfile, requester: tuple[int, int], result: int) -> bytes:
    """A denial of the connection request of the station with ids *requester* (constant id, variable id).

    From 5.7 it names that station, as NintendoClients fills it (spec §5.3): a station that reads a
    denial naming another takes it for one sent to another station, replayed (see
    :meth:`pianode.mesh.handshake.StationHandshake.denial_for_us`)."""
    if profile.version < (5, 7):  # u8 2 · u8 result · u8 version · u8 0: no ids (spec §5.3)
        return pstation.ConnectionDenied(result=result).encode(profile)
    return pstation.ConnectionDenied(
        result=result, constant_id=requester[0], variable_id=requester[1] & 0xFFFFFFFF
    ).encode(profile)


def encode_station_ack(profile: VersionProfile, ack_id: int) -> bytes:
    return pstation.Ack(ack_id).encode(profile)


def encode_disconnect(profile: VersionProfile, response: bool) -> bytes:
    cls = pstation.DisconnectionResponse if response else pstation.DisconnectionRequest
    return cls().encode(profile)


def decode_station(profile: VersionProfile, payload: bytes) -> StationMessage:
    msg = pstation.decode_station_message(payload, profile)
    if isinstance(msg, pstation.Ack):
        return StationAck(msg.ack_id)
    if isinstance(msg, pstation.ConnectionRequest):
        loc = msg.location if msg.location is not None else msg.connection_info
        return ConnectRequest(
            conn_id=msg.connection_id,
            inverse=bool(msg.is_inverse),
            inverse_conn_id=msg.inverse_connection_id,
            location=_from_station_location(loc),
            ack_id=msg.ack_id,
        )
    if isinstance(msg, pstation.ConnectionResponse):
        loc = getattr(msg, "location", None)
        return ConnectResponse(0, msg.ack_id, _from_station_location(loc) if loc is not None else None)
    if isinstance(msg, pstation.ConnectionDenied):
        named = (msg.constant_id, msg.variable_id) if profile.version >= (5, 7) else None
        return ConnectResponse(int(msg.result) or 1, None, named=named)
    if isinstance(msg, pstation.DisconnectionRequest):
        return Disconnect(False)
    if isinstance(msg, pstation.DisconnectionResponse):
        return Disconnect(True)
    raise BadValue(f"unexpected station message {type(msg).__name__}")


# ---------------------------------------------------------------------- mesh protocol


@attrs.frozen
class JoinRequest:
    ack_id: int
    #: How many bytes the request had beyond its documented layout, before its ack id (processed anyway,
    #: and counted as trailing_bytes).
    trailing: int = 0
    #: <= 5.10: it came without its pad and StationAddress (the 5.11+ form; processed anyway, counted
    #: as short_join_requests).
    short: bool = False


@attrs.frozen
class JoinResponse:
    host_index: int
    joiner_index: int
    fragment_count: int
    fragment_index: int
    update_counter: int
    entries: tuple[StationEntry, ...]
    ack_id: int


@attrs.frozen
class JoinDenied:
    reason: int

    @property
    def reason_text(self) -> str:
        return _DENY_TEXT.get(self.reason, f"reason {self.reason}")


@attrs.frozen
class UpdateMesh:
    host_index: int
    update_counter: int
    fragment_count: int
    fragment_index: int
    entries: tuple[StationEntry, ...]


@attrs.frozen
class LeaveRequest:
    index: int


MeshMessage = JoinRequest | JoinResponse | JoinDenied | UpdateMesh | LeaveRequest


def _infos(profile: VersionProfile, entries: list[StationEntry]) -> list[MeshStationInfo]:
    out = []
    for e in entries:
        loc = Location(e.address, e.constant_id, e.variable_id, _service_id(e))
        sl = _station_location(profile, loc)
        location: StationLocation | StationConnectionInfo = (
            legacy.connection_info(profile, sl) if profile.version <= (5, 9) else sl
        )
        join_order = e.join_order & 0xFFFF if (5, 29) < profile.version <= (5, 45) else 0
        out.append(MeshStationInfo(location=location, index=e.index, join_order=join_order))
    return out


def _service_id(e: StationEntry) -> int:
    if not (e.constant_id or e.variable_id):
        return 0  # 3DS local play: zero ids throughout (pianode.mesh.legacy)
    try:
        return keys.lan_service_variable_id(e.address[0], e.address[1])
    except (ValueError, DecodeError):
        return 0


def _entries(infos: tuple[MeshStationInfo, ...] | list[MeshStationInfo]) -> tuple[StationEntry, ...]:
    out = []
    for i, info in enumerate(infos):
        loc = _from_station_location(info.location)
        out.append(StationEntry(info.index, loc.constant_id, loc.variable_id, loc.address, info.join_order or i))
    return tuple(out)


def _fragments(profile: VersionProfile, entries: list[StationEntry], mtu: int) -> list[list[StationEntry]]:
    per = max(1, (mtu - 160) // _info_size(profile))
    return [entries[i : i + per] for i in range(0, len(entries), per)] or [[]]


def _info_size(profile: VersionProfile) -> int:
    from protocols.pia.types import mesh_station_info_size

    return mesh_station_info_size(profile)


def valid_table(
    entries: tuple[StationEntry, ...] | list[StationEntry], host_index: int | None, max_stations: int, fragments: int
) -> bool:
    """A mesh table from the wire names at most *max_stations* distinct indexes below it (and its host)."""
    if fragments > max_stations or len(entries) > max_stations:
        return False
    seen = set()
    for e in entries:
        if not 0 <= e.index < max_stations or e.index in seen:
            return False
        seen.add(e.index)
    return host_index is None or 0 <= host_index < max_stations


def encode_join_request(profile: VersionProfile, local_address: tuple[str, int], ack_id: int) -> bytes:
    return pmesh.JoinRequest(ack_id=ack_id, **_join_request_address(profile, local_address)).encode(profile)


def _join_request_address(profile: VersionProfile, local_address: tuple[str, int]) -> dict[str, object]:
    if profile.version <= (5, 10):
        from protocols.pia.types import StationAddress

        ip, port = local_address
        return {"address": StationAddress(InetAddress.from_ip(ip, port))}
    return {}


def encode_join_deny(profile: VersionProfile, reason: int) -> bytes:
    return pmesh.JoinRefused(reason=reason).encode(profile)


def encode_join_response(
    profile: VersionProfile, table: MeshTable, joiner_index: int, max_stations: int, mtu: int
) -> list[Callable[[int], bytes]]:
    """Builders (of the ack id) of the join response's fragments for the station given *joiner_index*."""
    entries = table.entries()
    frags = _fragments(profile, entries, mtu)
    host = table.host_index or 0
    counter = table.update_counter
    builds: list[Callable[[int], bytes]] = []
    extra = legacy.join_response_extra(profile, max_stations, counter)
    base = 0
    for i, frag in enumerate(frags):
        infos = tuple(_infos(profile, frag))

        def build(ack_id: int, i: int = i, infos: tuple[MeshStationInfo, ...] = infos, base: int = base) -> bytes:
            return pmesh.JoinResponse(
                station_count=len(entries),
                host_index=host,
                joiner_index=joiner_index,
                fragment_count=len(frags),
                fragment_index=i,
                base_index=base,
                stations=infos,
                ack_id=ack_id,
                **extra,
            ).encode(profile)

        builds.append(build)
        base += len(frag)
    return builds


def encode_update_mesh(profile: VersionProfile, table: MeshTable, mtu: int) -> list[bytes]:
    entries = table.entries()
    frags = _fragments(profile, entries, mtu)
    out = []
    base = 0
    for i, frag in enumerate(frags):
        out.append(
            pmesh.UpdateMesh(
                station_count=len(entries),
                host_index=table.host_index or 0,
                update_counter=table.update_counter,
                fragment_count=len(frags),
                fragment_index=i,
                base_index=base,
                stations=tuple(_infos(profile, frag)),
            ).encode(profile)
        )
        base += len(frag)
    return out


def encode_leave(profile: VersionProfile, index: int, location: Location) -> bytes:
    from protocols.pia.types import StationAddress

    ip, port = location.address
    return pmesh.LeaveRequest(station_index=index, address=StationAddress(InetAddress.from_ip(ip, port))).encode(profile)


def decode_mesh(profile: VersionProfile, payload: bytes) -> MeshMessage:
    msg = pmesh.decode_mesh_message(payload, profile)
    if isinstance(msg, pmesh.JoinRequest):
        return JoinRequest(msg.ack_id, len(msg.extra), msg.short)
    if isinstance(msg, pmesh.JoinResponse):
        return JoinResponse(
            host_index=msg.host_index,
            joiner_index=msg.joiner_index,
            fragment_count=max(1, msg.fragment_count),
            fragment_index=msg.fragment_index,
            update_counter=msg.update_counter,
            entries=_entries(msg.stations),
            ack_id=msg.ack_id,
        )
    if isinstance(msg, pmesh.JoinRefused):
        return JoinDenied(msg.reason)
    if isinstance(msg, pmesh.UpdateMesh):
        return UpdateMesh(
            host_index=msg.host_index,
            update_counter=msg.update_counter,
            fragment_count=max(1, msg.fragment_count),
            fragment_index=msg.fragment_index,
            entries=_entries(msg.stations),
        )
    if isinstance(msg, pmesh.LeaveRequest):
        return LeaveRequest(msg.station_index)
    raise BadValue(f"unexpected mesh message {type(msg).__name__}")


# ---------------------------------------------------------------------- rtt, windows


def encode_rtt(profile: VersionProfile, response: bool, ticks: int) -> bytes:
    from protocols.pia import rtt as prtt

    return prtt.RttMessage(is_response=response, time=ticks).encode(profile)


def decode_rtt(profile: VersionProfile, payload: bytes) -> tuple[bool, int]:
    from protocols.pia import rtt as prtt

    msg = prtt.decode_rtt(payload, profile)
    return bool(msg.is_response), int(msg.time)


def new_window(profile: VersionProfile, config: NodeConfig, now: float) -> ReliableWindow:
    """A reliable window in the version's 16-bit layout (5.17-5.19 form before 5.29)."""
    from protocols.pia.reliable import WindowLayout, layout_for

    layout = layout_for(profile)
    if legacy.is_legacy(profile):
        layout = WindowLayout.V5_12  # 32-bit ids from 0xFFFFF82F, as real 4.10 traffic carries (spec §5.8)
    elif layout not in (WindowLayout.V5_17, WindowLayout.V5_29, WindowLayout.V7_0):
        layout = WindowLayout.V5_17
    return ReliableWindow(
        WindowConfig(
            layout=layout,
            max_payload=max(256, config.mtu - 160),
            initial_rto=config.resend_interval,
            give_up_after=config.station_timeout * 3,
            max_message_size=config.max_message_size,
        )
    )
