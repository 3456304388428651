"""The node in Pia 3.3-5.6: the AES-ECB + HMAC-MD5 generation (header H-A, messages M-A / M-B).

Theory of operation
-------------------
The session's parts speak one vocabulary for every version; what differs in
the oldest generation (3DS, Wii U, the first Switch builds) is gathered here,
so the GCM-era code paths stay as they are and each difference can be read
(and checked against the spec) in one place:

* **Which versions run** (:func:`refusal`): every documented 3.3-5.6 version
  whose station and mesh protocols the spec documents, on the network types
  that exist for it.  3.x and 4.x have no LAN mode (no LAN protocol id before
  5.2, spec §5.1) and 32-bit constant ids (§4), so they run on NEX and on
  3DS-style local play (``ldn``); 5.2-5.6 run on NEX, LAN and LDN.
* **Packet protection** (spec §3.1): NEX and LAN packets are AES-128-ECB
  encrypted and carry an HMAC-MD5 trailer keyed with the session key.  Local
  play (``ldn``) is not encrypted up to 5.6 (§3.3), but is signed: real 3DS
  local traffic (``../shared/captures/mgba-uds-frames.jsonl``) carries plain
  packets (encryption byte 1) with an HMAC-MD5 trailer keyed with the game's
  key.  The node signs its plain local packets with the session key it is
  given; LDN discovery (5.2-5.6) hands it the game key, by that evidence.
* **Header** (§1.1, §1.3-§1.5): encryption byte, connection id, packet id,
  source and destination timers.  Connection id 1 and packet id 0 while our
  own station index is still unknown (253), 0 / 0 to a station whose index we
  do not know, else our own connection id (the one our connection request
  announced) and a per-connection packet id from 1.  That is what the real 3DS
  frames and the nDPI capture show (the joiner opens with 1 / 0, the host
  answers 0 / 0, each then switches to its own random id) and what NC-old did.
* **Replay protection**: H-A has no nonce, but its HMAC covers the header,
  so the packet id and the timers are authenticated.  A packet with a packet
  id is judged on that id, read as the nearest to the newest and taken at most
  :data:`MAX_LEAP` ahead of it, and on its source timer, which must fit the
  sender's clock (:class:`PacketIdReplayFilter`): ids come round every 65,536
  packets, so the id alone cannot tell a datagram recorded minutes ago.  A packet with packet id 0 (connection
  set-up, join request) is judged, where a first contact is judged, on its
  HMAC trailer: an identical datagram is refused, a retransmission (new
  source timer, so new trailer) is not.
* **Messages**: M-A carries the sender's station index (253 before it has one,
  spec §2.6) and a 32-bit destination bitmap with flag 0 (§2.3, KW ≤ 5.4; the
  3DS frames send flag 0 with a bitmap).  The source constant id is 0 in local
  play, as in every message of the real 3DS frames, and the principal id on NEX,
  as in the nDPI capture's plain messages (:func:`message_source_id`).
* **RTT** (§5.6): real 4.10 traffic sends RTT requests and responses on port 0
  (the wiki says port 1; NC-old used 0).  Port 0 up to 5.6.
* **Reliable windows** (§5.8): the ``<=5.12`` layout, 32-bit sequence ids
  from 0xFFFFF82F, as the 3DS frames carry on Mesh port 1 and Reliable.
* **Station handshake** (§5.3): requests carry no inverse connection id before
  5.7 (nothing to check), responses up to 4.10 carry one PlayerInfo; the name
  and token are UTF-16 little-endian on 4.x (3DS, as the real frames show) and
  big-endian on 3.x (Wii U, a big-endian console; NC-old).  Platform 3 (Wii U)
  on 3.x, 2 on 4.x (the real 3DS frames' value), 4 (Switch) on 5.x.
"""

from __future__ import annotations

from typing import Any

import attrs

from pianode.mesh.replay import NonceReplayFilter
from protocols.errors import DecodeError
from protocols.pia import station as pstation
from protocols.pia.header import PacketHeader
from protocols.pia.types import PlayerInfo, StationConnectionInfo, StationLocation
from protocols.pia.versions import HeaderFormat, NetworkType, Proto, VersionProfile

__all__ = [
    "PacketIdReplayFilter",
    "is_legacy",
    "make_header",
    "player_info",
    "plain_packets",
    "received_nonce",
    "refusal",
    "replay_nonce",
    "rtt_port",
]

#: Connection id of a station whose own index is still 253 (spec §1.3, §10.1 item 11; real traffic).
UNJOINED_CONNECTION_ID = 1


def is_legacy(profile: VersionProfile) -> bool:
    """Whether *profile* is of the H-A generation (3.3-5.6)."""
    return profile.header_format is HeaderFormat.A


def refusal(profile: VersionProfile, network: NetworkType) -> str | None:
    """Why the node cannot run *profile* on *network* (one line), or None when it can."""
    if not is_legacy(profile):
        return None
    v = profile.version
    if network is NetworkType.LAN and v < (5, 2):
        return (
            f"Pia {profile.name} has no LAN mode (spec §5.1 lists no LAN protocol before 5.2, and its 32-bit"
            " constant ids cannot hold LAN ids, §4): use --network nex or ldn (3DS local play)"
        )
    return None


def default_network(profile: VersionProfile) -> NetworkType:
    """The network a tool runs *profile* on when none is named: LAN where it exists (5.2+), else NEX."""
    return NetworkType.NEX if profile.version < (5, 2) else NetworkType.LAN


def discovery_refusal(profile: VersionProfile, network: NetworkType) -> str | None:
    """Why stations of *profile* cannot find each other on *network* as consoles do (None: they can).

    The node itself runs; only the discovery step lacks a documented rule, so the
    host address and session key must be handed over (as a matchmaking server does).
    LDN 5.2-5.6 discovers: its application data is documented (§7.2) and its packets
    are signed with the game key, as the real 3DS local-play frames are.
    """
    if not is_legacy(profile):
        return None
    if network is NetworkType.LAN:
        return (
            f"Pia {profile.name} LAN discovery cannot give a session key: LanSessionInfo carries the session key"
            " param only from 5.7 (spec §6.3) and no other LAN key source is documented (§3.3)"
        )
    if network is NetworkType.LDN:
        if profile.version < (5, 2):
            return (
                f"Pia {profile.name} local play runs on the 3DS local network, whose beacon (Pia application data)"
                " the spec does not document (§7.2 starts at 5.2)"
            )
    return None


def plain_packets(profile: VersionProfile, network: NetworkType) -> bool:
    """Whether the node sends (and accepts) plain, HMAC-signed packets: local play up to 5.6 (spec §3.3)."""
    return is_legacy(profile) and network is NetworkType.LDN


def message_source_id(network: NetworkType, constant_id: int) -> int:
    """The source constant id of our M-A messages (a 32-bit field, spec §2.1): the principal id on NEX
    (the nDPI Splatoon 2 capture's plain messages carry one), 0 in local play (every message of the real
    3DS frames) and on LAN (its 64-bit ids do not fit)."""
    if network is NetworkType.NEX and constant_id < 1 << 32:
        return constant_id
    return 0


def platform(profile: VersionProfile) -> int:
    """The platform byte of our connection responses (spec §5.3; 2 = 3DS as the real 4.10 frames show)."""
    if profile.version < (4, 0):
        return pstation.Platform.WII_U
    if profile.version < (5, 0):
        return pstation.Platform.CTR
    return pstation.Platform.SWITCH


def rtt_port(profile: VersionProfile) -> int:
    """The RTT protocol's port: 0 up to 5.6 (real 4.10 traffic, NC-old), else 1 (spec §5.6)."""
    return 0 if is_legacy(profile) else 1


def _text(profile: VersionProfile, text: str) -> bytes:
    # 4.x runs on the 3DS, whose frames carry UTF-16LE names; 3.x on the big-endian Wii U.
    return text.encode("utf-16-le" if (4, 0) <= profile.version < (5, 0) else "utf-16-be")[:32]


def player_info(profile: VersionProfile, name: str, network_id: int) -> PlayerInfo:
    """Our one PlayerInfo for a <= 4.10 connection response (spec §5.2: 36 or 40 bytes)."""
    name = name[:16]
    if profile.version >= (4, 0):
        # The real 4.10 frames carry the same value in both stations' PlayerInfo: the session's id.
        return PlayerInfo(_text(profile, name), name_length=len(name), gathering_id=network_id & 0xFFFFFFFF)
    return PlayerInfo(_text(profile, name), name_length=len(name))


def token(profile: VersionProfile, name: str) -> bytes:
    """The identification token of a <= 4.10 connection response: the real 3DS frames carry the player's name."""
    return _text(profile, name[:16])


def connect_request(
    profile: VersionProfile, info: StationConnectionInfo, conn_id: int, inverse: bool, target: int, ack_id: int
) -> bytes:
    """A 3.3-5.6 connection request: no target variable id, no inverse connection id; the target
    constant id from 5.2 (spec §5.3)."""
    fields: dict[str, object] = dict(ack_id=ack_id, connection_id=conn_id, is_inverse=inverse, connection_info=info)
    if profile.version >= (5, 2):
        fields["target_constant_id"] = target
    return pstation.ConnectionRequest(**fields).encode(profile)  # type: ignore[arg-type]


def connect_response(profile: VersionProfile, name: str, network_id: int, ack_id: int) -> bytes:
    """A <= 4.10 accepting connection response: one PlayerInfo, the player's name as the token (spec §5.3,
    as the real 3DS 4.10 frames carry it)."""
    return pstation.ConnectionResponse(
        ack_id=ack_id,
        platform=platform(profile),
        token=token(profile, name),
        players=(player_info(profile, name, network_id),),
    ).encode(profile)


def connection_info(profile: VersionProfile, location: StationLocation) -> StationConnectionInfo:
    """A <= 5.9 StationConnectionInfo: the location as public and private one; in 3DS local play (zero
    ids, 32-bit constant ids) as the real 4.10 frames carry it: URL type 0, an empty private location."""
    ids = location.constant_id or location.variable_id or location.service_variable_id
    if not ids and profile.constant_id_size == 4:
        return StationConnectionInfo(public=attrs.evolve(location, url_type=0), private=StationLocation())
    return StationConnectionInfo(public=location, private=location)


def join_response_extra(profile: VersionProfile, max_stations: int, counter: int) -> dict[str, int]:
    """The join response's fields after the counts (spec §5.4): none up to 3.10; in 4.x the two max counts,
    0 as the real 4.10 frames carry them; from 5.x the three max counts and the update counter."""
    if profile.version >= (5, 0):
        return {"max_active": max_stations, "max_buffer": max_stations, "max_total": max_stations, "update_counter": counter}
    return {}


def answered(pending: dict[int, Any], proto: Proto, kinds: tuple[str, ...] | None = None) -> int:
    """Forget the messages awaiting an ack that an answer has acknowledged; returns how many.

    The real 4.10 frames show a 3DS host that never acks what it answers: the joiner's
    connection request is answered by the inverse request, its connection response by the
    host's, its join request by the join response; none gets a Station-protocol ack.  So
    up to 5.6 such an answer stands for the ack (the node still acks explicitly itself).
    *pending* maps ack ids to :class:`pianode.mesh.peer.Pending`; *kinds* None: every one of *proto*.
    """
    done = [k for k, p in pending.items() if p.proto is proto and (kinds is None or p.kind in kinds)]
    for k in done:
        del pending[k]
    return len(done)


def make_header(profile: VersionProfile, peer: object, own_index: int | None, encrypted: bool, now: float) -> PacketHeader:
    """The H-A header of the next packet to *peer* (a :class:`pianode.mesh.wire.PeerLink`)."""
    timers = peer.header_timers  # type: ignore[attr-defined]
    if own_index is None:
        connection_id, packet_id = UNJOINED_CONNECTION_ID, 0
    elif peer.connected and peer.index is not None:  # type: ignore[attr-defined]
        connection_id, packet_id = peer.own_conn_id, peer.tx_ids.next()  # type: ignore[attr-defined]
    else:
        connection_id, packet_id = 0, 0
    return PacketHeader(
        encrypted=encrypted,
        packet_id=packet_id,
        connection_id=connection_id,
        source_timer=timers.source_timer(now),
        destination_timer=timers.destination_timer(now),
    )


def replay_nonce(header: PacketHeader, own_timer: int | None = None) -> bytes:
    """What the replay checks read of an authenticated H-A packet, in place of a GCM nonce.

    ``01 ‖ packet id (2)`` for a packet with a packet id, followed by its source timer
    and *own_timer* (ours when it arrived, both 2 bytes) where the receiver gives it;
    ``00 ‖ HMAC trailer[:7]`` for one without, ``02 ‖ ...`` where its connection id is
    not 0 (its sender has no station index yet, spec §1.3); see the module docstring.
    """
    if header.packet_id:
        if own_timer is None or header.source_timer is None:
            return b"\x01" + header.packet_id.to_bytes(2, "big")
        return b"\x01" + bytes((
            header.packet_id >> 8, header.packet_id & 0xFF, header.source_timer >> 8 & 0xFF,
            header.source_timer & 0xFF, own_timer >> 8 & 0xFF, own_timer & 0xFF,
        ))
    return (b"\x02" if header.connection_id else b"\x00") + bytes(header.tag[:7]).rjust(7, b"\0")


def received_nonce(header: PacketHeader, peer: Any, now: float) -> bytes:
    """:func:`replay_nonce` of a packet received from *peer* (a :class:`pianode.mesh.peer.Peer`, None:
    a stranger) at *now*: with our own timer for a known peer, whose clock its source timer must fit."""
    return replay_nonce(header, None if peer is None else peer.header_timers.source_timer(now))


UNNUMBERED_KEPT = 256  # trailers of datagrams without a packet id remembered per numbered connection
#: Packet ids remembered below the newest (a bitmap, 256 bytes a peer).
ID_WINDOW = 1 << 11
#: How far past the newest id a packet id is taken.  Ids come round every 65,536 packets (spec
#: §1.4), so a recorded datagram is "ahead" again once its sender has sent 32,768 more; taken, it
#: moved the window so far that the sender's real packets fell behind it and were refused until the
#: sender was dropped as silent.  A jump of at most MAX_LEAP keeps them inside the window.  A real
#: sender loses more packets in a row than this only while it is silent for longer than a station
#: may be (60 frames a second: 17 s; NintendoClients' own rule takes at most 16, spec §1.4).
MAX_LEAP = ID_WINDOW // 2
#: How much later (behind) or earlier (ahead) than its sender's clock as this receiver knows it a
#: packet's source timer may read, in ms (spec §1.5: the sender's session clock in ms, mod 2**16).
#: Behind covers delay and reordering; ahead, a shorter delay than any seen so far.  A replayed
#: datagram carries the timer of its recording: it passes only where the time since falls within
#: this of a multiple of 65.536 s, and its packet id must then also lie just ahead of the newest.
TIMER_BEHIND_MS = 2500
TIMER_AHEAD_MS = 250
#: For this long after the first numbered packet the clock estimate rises to any packet's (the
#: first packets' delay is not the least); after it, by at most 1 ms a packet (clock drift).
TIMER_SETTLE_MS = 2000


def _signed16(value: int) -> int:
    return ((value + 0x8000) & 0xFFFF) - 0x8000


class PacketIdReplayFilter(NonceReplayFilter):
    """The replay filter of an H-A peer: packet ids and source timers (spec §1.4, §1.5).

    Packet ids: a sender's ids to one station count up from 1 and skip 0 on rollover
    (spec §1.4); each id is read as the nearest value to the newest one, and one at
    most :data:`MAX_LEAP` past it or :data:`ID_WINDOW` below it, not seen before, is
    new.  Source timers: the sender's clock in ms, which the HMAC covers too; the
    filter keeps its offset from ours (the largest seen: the least delay) and refuses a
    packet whose timer is off it by more than :data:`TIMER_BEHIND_MS` or
    :data:`TIMER_AHEAD_MS` (a datagram recorded minutes ago, replayed once its packet
    id came round again).

    Packets without a packet id pass until the connection's first numbered one (their
    freshness is judged at first contact, see the module docstring).  After it, the
    sender knows our index and numbers what it sends us (spec §1.3, §1.4): one without a
    packet id is a datagram it sent a station without an index (a joiner), replayed,
    which kept a vanished station alive forever; refused.  Only one whose sender has
    lost its own index (connection id 1: joining again) passes, each once (its trailer
    remembered, :data:`UNNUMBERED_KEPT`), so replays of its first join's datagrams keep
    it for a station timeout each at most.
    """

    __slots__ = ("_high", "_lead", "_seen", "_settle_from", "_unnumbered", "numbered")

    def __init__(self) -> None:
        super().__init__(1)  # (the base class's ring is not used: a bitmap of ID_WINDOW bits)
        self.window = ID_WINDOW
        self._high: int | None = None
        self._seen = 0  # bit k: the id k below the newest was seen
        #: Whether this connection sent a packet with a packet id (reset when its peer closes).
        self.numbered = False
        self._unnumbered: dict[bytes, None] = {}
        self._lead: int | None = None  # the sender's clock minus ours, in ms, as the least delay shows it
        self._settle_from: int | None = None  # our timer at the first numbered packet, until settled

    def span(self) -> tuple[int, int] | None:
        return None if self._high is None else (max(0, self._high - ID_WINDOW + 1), self._high)

    def restart(self) -> None:
        """A next connection from the same address: its handshake is judged at first contact, and
        its sender's clock may have started again."""
        self.numbered = False
        self._lead = None

    def accept(self, nonce: bytes) -> bool:
        if not nonce or nonce[0] != 1:
            if not self.numbered:
                return True
            if not nonce or nonce[0] == 0 or nonce in self._unnumbered:
                return False
            self._unnumbered[nonce] = None
            if len(self._unnumbered) > UNNUMBERED_KEPT:
                del self._unnumbered[next(iter(self._unnumbered))]
            return True
        if len(nonce) == 7:
            if not self.timely(nonce[3] << 8 | nonce[4], nonce[5] << 8 | nonce[6]):
                return False
        elif len(nonce) != 3:
            raise DecodeError("an H-A replay value is 3 or 7 bytes")
        return self.accept_value(nonce[1] << 8 | nonce[2])

    def timely(self, source_timer: int, own_timer: int) -> bool:
        """Whether a packet's *source_timer* fits its sender's clock, read at *own_timer* (ours)."""
        lead = _signed16(source_timer - own_timer)
        if self._lead is None:
            self._lead, self._settle_from = lead, own_timer
            return True
        off = _signed16(lead - self._lead)
        settling = self._settle_from is not None and _signed16(own_timer - self._settle_from) < TIMER_SETTLE_MS
        if off < -TIMER_BEHIND_MS or off > (TIMER_BEHIND_MS if settling else TIMER_AHEAD_MS):
            return False
        if off > 0:
            self._lead = (self._lead + (off if settling else 1) + 0x8000) % 0x10000 - 0x8000
        if not settling:
            self._settle_from = None
        return True

    def accept_value(self, value: int) -> bool:
        self.numbered = True
        value &= 0xFFFF
        if self._high is None:
            self._high, self._seen = value, 1
            return True
        ahead = _signed16(value - self._high)
        if ahead > 0:
            if ahead > MAX_LEAP:
                return False
            self._high += ahead
            self._seen = (self._seen << ahead | 1) & ((1 << ID_WINDOW) - 1)
            return True
        bit = 1 << -ahead
        if -ahead >= ID_WINDOW or self._seen & bit:
            return False
        self._seen |= bit
        return True
