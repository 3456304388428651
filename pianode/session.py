"""The sans-IO Pia mesh session: station handshake, mesh membership, keep-alive, RTT and data.

Theory of operation
-------------------
A :class:`MeshSession` is everything one node knows, with no I/O and no clock:
the driver (``pianode.node``) feeds it datagrams and the current time, and asks
it for datagrams to send and for its next timer deadline (the aioquic shape,
STYLE.md practice 2)::

    session.receive_datagram(data, addr, now)
    session.handle_timer(now)
    for data, addr in session.datagrams_to_send(now): ...
    session.get_timer() -> float | None
    session.next_event() -> Event | None

Layers, bottom up:

* **Packets** (``protocols.pia.packet``): every datagram is one Pia packet
  sealed with the session key; the nonce follows the network type
  (``protocols.pia.nonce``).  A datagram that does not decode or authenticate
  is dropped and counted by reason, never raised.
* **Peers** (:class:`Peer`): one per remote address.  A peer goes
  CONNECTING -> CONNECTED through the Station protocol handshake (with the
  inverse request up to 5.26, the single request from 5.27; spec §5.3).
  Station and mesh messages that carry an ack id are retransmitted with
  backoff until the peer acks them.
* **Mesh** (:class:`pianode.mesh_table.MeshTable`): the host assigns station
  indexes, answers join requests with (fragmented) join responses and sends
  update-mesh messages; the newcomer connects to every listed member.
  Host migration is the deterministic rule in ``pianode.mesh_table``.
* **Data**: unreliable messages are fire-and-forget; reliable ones go through
  a per-peer sliding window (``pianode.reliable``), in order, exactly once.
* **Liveness**: keep-alives at ``keepalive_interval``; a peer silent for
  ``station_timeout`` is removed (and, if it was the host, the mesh migrates).
"""

from __future__ import annotations

import collections
import enum
import heapq
import itertools
import math
import random
from collections.abc import Callable, Iterable

import attrs

from pianode import mesh_wire as mw
from pianode.config import NodeConfig
from pianode.events import (
    DataReceived,
    Event,
    HostChanged,
    MeshDestroyed,
    MeshJoined,
    StationJoined,
    StationLeft,
)
from pianode.mesh_table import MeshFull, MeshTable, StationEntry
from pianode.packet_ids import PacketIdCounter
from pianode.replay import NonceReplayFilter, nonce_value
from pianode.reliable import ReliableWindow, SendBufferFull, WindowFailed
from pianode.rtt import HeaderTimers, RttEstimator
from protocols.errors import AuthenticationError, DecodeError
from protocols.pia.header import PacketHeader
from protocols.pia.message import Message
from protocols.pia.packet import LoneMessage, Packet, PacketCodec
from protocols.pia.versions import Proto

__all__ = ["DropReason", "MeshSession", "Peer", "PeerState", "StationStats"]

INVALID_INDEX = 253  # spec §2.6: not yet in a mesh
MAX_PROVISIONAL_PEERS = 64  # unknown addresses we talk to before they are members
EVENT_QUEUE_LIMIT = 65536
HELD_LIMIT = 1024  # data messages held per peer until its station index is known
RETIRED_REPLAY_LIMIT = 256  # departed peers whose replay memory is kept
HEAL_INTERVAL = 3.0  # seconds between checks for table members we have no link to
#: Every counter a session keeps (``statistics()['counters']`` lists the non-zero ones).
COUNTERS = (
    "connect_glare_won",
    "connect_glare_yielded",
    "connections",
    "group_messages_for_others",
    "group_packets_sent",
    "joins_denied",
    "keepalives_received",
    "packets_received",
    "packets_sent",
    "reconnects",
    "rejoins",
    "reliable_delivered",
    "reliable_sent",
    "restarts",
    "retransmissions",
    "rtt_requests_received",
    "unreliable_delivered",
    "unreliable_sent",
    "version_denials",
    "window_full",
)
MAX_PENDING = 64  # acked station/mesh messages awaiting their ack, per peer


class PeerState(enum.Enum):
    CONNECTING = "connecting"
    CONNECTED = "connected"
    CLOSED = "closed"


class DropReason(str, enum.Enum):
    MALFORMED = "malformed"
    BAD_TAG = "bad_tag"
    REPLAYED = "replayed"
    NOT_MEMBER = "not_member"
    IDENTITY_MISMATCH = "identity_mismatch"
    UNEXPECTED = "unexpected"
    QUEUE_FULL = "queue_full"
    UNENCRYPTED = "unencrypted"
    NOT_ADDRESSED = "not_addressed"
    CLOSED = "closed"
    NOT_HOST = "not_host"
    OTHER_VERSION = "other_version"


@attrs.frozen
class StationStats:
    """One row of ``node.stations()``."""

    index: int | None
    constant_id: int
    variable_id: int
    address: tuple[str, int]
    is_host: bool
    is_self: bool
    state: str
    rtt: float | None
    rtt_variance: float | None
    packets_sent: int
    packets_received: int
    lost: int


@attrs.define
class _Pending:
    """A message carrying an ack id, resent until the peer acks it."""

    proto: Proto
    port: int
    payload: bytes
    next_send: float
    interval: float
    tries: int = 0
    kind: str = ""


@attrs.define(eq=False)
class Peer:
    address: tuple[str, int]
    own_conn_id: int
    initiator: bool
    created: float
    state: PeerState = PeerState.CONNECTING
    constant_id: int = 0
    variable_id: int = 0
    peer_conn_id: int = 0
    index: int | None = None
    announced: bool = False
    got_response: bool = False
    sent_response: bool = False
    tx_ids: PacketIdCounter = attrs.field(factory=PacketIdCounter)
    replay: NonceReplayFilter = attrs.field(factory=NonceReplayFilter)
    outbox: list[Message] = attrs.field(factory=list)
    pending: dict[int, _Pending] = attrs.field(factory=dict)
    mesh_window: ReliableWindow | None = None
    data_window: ReliableWindow | None = None
    rtt: RttEstimator = attrs.field(factory=RttEstimator)
    header_timers: HeaderTimers = attrs.field(factory=lambda: HeaderTimers(0.0))
    last_heard: float = 0.0
    last_sent: float = -1e9
    next_keepalive: float = 0.0
    next_rtt: float = 0.0
    packets_sent: int = 0
    packets_received: int = 0
    join_fragments: dict[int, mw.JoinResponse] = attrs.field(factory=dict)
    update_fragments: dict[int, mw.UpdateMesh] = attrs.field(factory=dict)
    held: list[tuple[bytes, bool]] = attrs.field(factory=list)
    #: Time of this peer's live entry in the session's timer heap (None: none).
    scheduled: float | None = None
    #: ``state is CONNECTED``, kept as a plain flag: it is read several times per datagram.
    connected: bool = False
    #: ``(what it was made for, seal or None)``: the codec's sealer of this peer's
    #: unreliable packets (see :meth:`MeshSession.send_unreliable_now`).
    sealer: tuple[tuple[object, ...], Callable[[int, bytes, bytes], bytes] | None] | None = None
    #: ``(what it was made for, open or None)``: the codec's opener of this peer's
    #: unreliable packets to us (see :meth:`MeshSession.receive_datagram`).
    opener: tuple[tuple[object, ...], Callable[[bytes], object] | None] | None = None


class MeshSession:
    """Everything one Pia node knows; see the module docstring."""

    def __init__(
        self,
        config: NodeConfig,
        local_address: tuple[str, int],
        *,
        now: float,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        self.profile = config.profile
        self.local_address = local_address
        self.rng = rng or random.Random(config.seed)
        self.started = now
        ident = mw.local_identity(config, local_address, self.rng)
        self.constant_id = ident.constant_id
        self.variable_id = ident.variable_id
        self._footer_id = self.variable_id & 0xFFFF  # how group packets name this station (spec §1.6)
        self.location = ident
        self.index: int | None = None
        # Per-packet lookups, resolved once.
        self.protocol_ids: dict[Proto, int] = dict(self.profile.protocol_ids)
        self._proto_by_id: dict[int, Proto] = {pid: proto for proto, pid in self.protocol_ids.items()}
        self._unreliable_id = self.protocol_ids[Proto.UNRELIABLE]
        self._has_conn_id = self.profile.has_connection_id
        self._by_index: dict[int, Peer] = {}
        self.message_source_id = (
            self.constant_id if self.profile.message_format in mw._SOURCE_ID_FORMATS else None
        )
        self.table = MeshTable(max_stations=config.max_stations)
        self.peers: dict[tuple[str, int], Peer] = {}
        self.session_key: bytes | None = config.session_key
        self.codec: PacketCodec | None = None
        self._nonce_builder: Callable[[PacketHeader, str], bytes] | None = None
        self.network_id = 0
        # Random start well below 2**56, so the 7 bytes replay checks read never wrap.
        self._nonce_counter = self.rng.getrandbits(48)
        self._ack_counter = self.rng.randrange(1, 1 << 32)
        self._events: collections.deque[Event] = collections.deque()
        self._ready: list[tuple[bytes, tuple[str, int]]] = []
        self._touched: dict[Peer, None] = {}
        self._group_outbox: list[Message] = []
        #: (members, destination bitmap, footer) of group packets; None = work it out
        #: again (see _membership_changed, called wherever a peer's membership changes).
        self._group_view: tuple[tuple[Peer, ...], int, tuple[int, ...]] | None = None
        self._next_rtt_slot = -math.inf  # see _rtt_slot
        #: Group mode (5.27+ footer, one broadcast per group packet): a reliable
        #: broadcast goes out as one group packet too (see broadcast).
        self._group_mode = config.group_broadcast is not None and self.profile.footer == "plain"
        self._bitmap_flag = self.profile.bitmap_flag
        self._group_ids = PacketIdCounter()
        self._group_offset = mw.footer_size_offset(self.profile)
        self._codec_key = 0
        self._decode_lone: Callable[[bytes, str], Packet | LoneMessage] | None = None
        self._timers: list[tuple[float, int, Peer]] = []
        self._timer_seq = itertools.count()
        self.drops: collections.Counter[str] = collections.Counter()
        # A plain dict (exact dicts have the interpreter's fast item path; a
        # Counter does not): some of these are bumped for every datagram.
        self.counters: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self._join_host: tuple[str, int] | None = None
        self._early_update: tuple[list[StationEntry], int, int] | None = None
        #: Indexes this (non-host) station saw leave since the last update it applied.
        self._departed: set[int] = set()
        self._next_heal: float | None = None
        self._denied: dict[tuple[str, int], float] = {}
        self._retired_replay: collections.OrderedDict[tuple[str, int], tuple[NonceReplayFilter, float]] = (
            collections.OrderedDict()
        )
        self._join_deadline: float | None = None
        self.joined = False
        self.closed = False
        self.leaving = False
        self._leave_deadline: float | None = None
        self.failure: str | None = None
        #: Handlers for sub-protocols the application runs itself (LDN's Local protocol, spec §5.10):
        #: called with (source station index, protocol port, payload) for each message from a member.
        self.protocol_handlers: dict[Proto, Callable[[int, int, bytes], None]] = {}
        #: When set, application data goes to ``data_handler(source index, data,
        #: reliable)`` as it is decoded, instead of DataReceived events (a game's
        #: frame callback; no event object per message).  It must not raise.
        self.data_handler: Callable[[int, bytes, bool], None] | None = None
        #: Called with every datagram we send: (data, src, dst, now).  For --record.
        self.tap: Callable[[bytes, tuple[str, int], tuple[str, int], float], None] | None = None

    # ------------------------------------------------------------------ setup
    def _setup_crypto(self, session_key: bytes, network_id: int) -> None:
        self.session_key = session_key
        self.network_id = network_id
        self.codec, self._nonce_builder = mw.packet_codec(self.config, self.profile, session_key, network_id)
        self._decode_lone = self.codec.lone_decoder()
        self._codec_key = mw.codec_key(self.profile.version, self.config.network, session_key, network_id, self.config.aead_backend)

    def create(self, now: float, *, network_id: int | None = None) -> None:
        """Create a mesh with this node as host and station index 0.

        *network_id* overrides the network type's rule (LDN: the random u32 the
        host advertises; NEX: the gathering id).
        """
        if self.joined or self._join_host is not None:
            raise RuntimeError("this node already created or joined a mesh")
        key = self.session_key or self.rng.randbytes(16)
        if network_id is None:
            network_id = mw.network_id_for_host(self.config, self.local_address, self.rng)
        self._setup_crypto(key, network_id)
        entry = self.table.add(self.constant_id, self.variable_id, self.local_address)
        self.index = entry.index
        self.table.host_index = entry.index
        self.table.update_counter = 1
        self.joined = True
        self._next_heal = now + HEAL_INTERVAL
        self._emit(MeshJoined(station_index=entry.index, host_index=entry.index))

    def join(self, host: tuple[str, int], now: float, *, network_id: int | None = None) -> None:
        """Start joining the mesh hosted at *host* (needs the session key in the config)."""
        if self.joined or self._join_host is not None:
            raise RuntimeError("this node already created or joined a mesh")
        if self.config.session_key is None:
            raise ValueError("joining needs the mesh's session key")
        if network_id is None:
            network_id = mw.network_id_for_host(self.config, host, self.rng)
        self._setup_crypto(self.config.session_key, network_id)
        self._join_host = host
        self._join_deadline = now + self.config.join_timeout
        self._connect(host, now)

    def leave(self, now: float) -> None:
        """Leave the mesh gracefully (the host's departure triggers migration)."""
        if self.closed or self.leaving:
            return
        self.leaving = True
        self._leave_deadline = now + min(2.0, self.config.station_timeout)
        if self.index is None:
            self._close("left", now)
            return
        payload = mw.encode_leave(self.profile, self.index, self.location)
        members = self._members()
        for peer in members:
            assert peer.mesh_window is not None
            self._window_send(peer, peer.mesh_window, payload, now)
            self._touch(peer)
        if not members:
            self._close("left", now)

    # ------------------------------------------------------------------ user data
    def send(self, index: int, data: bytes, *, reliable: bool, now: float) -> None:
        peer = self._peer_by_index(index)
        if peer is None or not peer.connected:
            raise KeyError(f"no connected station with index {index}")
        self._send_data(peer, data, reliable, now)

    def send_unreliable_now(self, index: int, data: bytes, now: float) -> tuple[bytes, tuple[str, int]] | None:
        """:meth:`send` of unreliable *data*, for a caller that sends the result at once (the node).

        With no output queued anywhere, the message would leave as a packet of
        its own at the next :meth:`datagrams_to_send`; it is sealed now and
        returned as ``(datagram, address)``, without the queue, the flush and
        the timer bookkeeping (an unreliable message moves no deadline).
        Otherwise it is queued as :meth:`send` queues it, behind the output it
        must not overtake, and None is returned.  The packets go through the
        peer's sealer (``PacketCodec.lone_sealer``), made at the first send and
        again whenever what it packs (the codec, the peer's index and ids, our
        own ids) has changed.
        """
        peer = self._peer_by_index(index)
        if peer is None or not peer.connected:
            raise KeyError(f"no connected station with index {index}")
        if self._touched or self._ready or self._group_outbox or peer.outbox or self.codec is None:
            self._send_data(peer, data, False, now)
            return None
        self.counters["unreliable_sent"] += 1
        return self._seal_unreliable(peer, data, now)

    def broadcast_unreliable_now(self, data: bytes, now: float) -> tuple[int, list[tuple[bytes, tuple[str, int]]]] | None:
        """:meth:`broadcast` of unreliable *data*, for a caller that sends the result at once (the node).

        Where the broadcast is a packet per station (a version without a
        footer, or a single station) and no output is queued, each station's
        packet is sealed now as :meth:`send_unreliable_now` seals it; returns
        ``(stations, datagrams)``.  Otherwise it does nothing and returns None:
        call :meth:`broadcast`.
        """
        if self._touched or self._ready or self._group_outbox or self.codec is None:
            return None
        members = self._members()
        if len(members) > 1 and self.profile.footer == "plain":
            return None  # one group packet for all of them (see broadcast)
        self.counters["unreliable_sent"] += len(members)
        return len(members), [self._seal_unreliable(peer, data, now) for peer in members]

    def _seal_unreliable(self, peer: Peer, data: bytes, now: float) -> tuple[bytes, tuple[str, int]]:
        """The next packet to *peer*, of one unreliable message, through the peer's sealer."""
        codec = self.codec
        assert codec is not None
        # The packets differ only in id, header nonce and payload while these hold.
        made_for = (codec, peer.index, peer.variable_id, peer.own_conn_id, self.variable_id, self.message_source_id)
        sealer = peer.sealer
        if sealer is not None and sealer[0] == made_for:
            seal = sealer[1]
            if seal is not None:
                return self._sent(peer, seal(peer.tx_ids.next(), self.next_header_nonce(), data), now)
            return self._packet(peer, (self._message(peer, Proto.UNRELIABLE, 0, data),), now)
        message = self._message(peer, Proto.UNRELIABLE, 0, data)
        header = self._header(peer, now)
        peer.sealer = (made_for, codec.lone_sealer(header, message, self.local_address[0]))
        return self._sent(peer, codec.encode(Packet(header, (message,)), self.local_address[0]), now)

    def send_protocol(self, index: int, proto: Proto, port: int, payload: bytes) -> None:
        """Queue one message of an application-run sub-protocol (no retransmission: the protocol does its own)."""
        peer = self._peer_by_index(index)
        if peer is None or not peer.connected:
            raise KeyError(f"no connected station with index {index}")
        self._enqueue(peer, proto, port, payload)

    def broadcast(self, data: bytes, *, reliable: bool, now: float) -> int:
        members = self._members()
        if not reliable and self.profile.footer == "plain" and len(members) > 1:
            # One packet for everyone, its footer naming the receivers' variable
            # ids (spec §1.6): sealed once, then handed to each member.
            assert self._group_view is not None
            self._group_outbox.append(Message(self._unreliable_id, 0, data, self._bitmap_flag, self._group_view[1]))
            self.counters["unreliable_sent"] += len(members)
            return len(members)
        if reliable and not all(p.data_window is None or p.data_window.can_send(len(data)) for p in members):
            # All or nothing: a full window anywhere refuses the whole broadcast.
            raise SendBufferFull(f"a station's reliable send buffer cannot take {len(data)} more bytes")
        if reliable and self._group_mode and len(members) > 1:
            # Each station's segment (its own sequence) in one broadcast group
            # packet, addressed by the message's destination bit (spec §1.6,
            # §2.5); acks and retransmissions go to each station as usual.
            for peer in members:
                window = peer.data_window
                assert window is not None
                window.send(data, now)
                for segment in window.messages_to_send(now):
                    self._group_outbox.append(self._message(peer, Proto.RELIABLE, 0, segment))
                self._touched[peer] = None  # its retransmission timer is scheduled with the flush
            self.counters["reliable_sent"] += len(members)
            return len(members)
        for peer in members:
            self._send_data(peer, data, reliable, now)
        return len(members)

    def _send_data(self, peer: Peer, data: bytes, reliable: bool, now: float) -> None:
        if reliable:
            assert peer.data_window is not None
            peer.data_window.send(data, now)
            self._touch(peer)
            self.counters["reliable_sent"] += 1
        else:
            self._enqueue(peer, Proto.UNRELIABLE, 0, data)
            self.counters["unreliable_sent"] += 1

    # ------------------------------------------------------------------ queries
    def is_host(self) -> bool:
        return self.index is not None and self.table.host_index == self.index

    def next_event(self) -> Event | None:
        return self._events.popleft() if self._events else None

    def has_events(self) -> bool:
        return bool(self._events)

    def take_events(self) -> collections.deque[Event]:
        """Every queued event at once, oldest first (the session starts a new queue)."""
        events = self._events
        self._events = collections.deque()
        return events

    def stations(self) -> list[StationStats]:
        rows = []
        for entry in self.table.entries():
            is_self = entry.index == self.index
            peer = None if is_self else self._peer_by_index(entry.index)
            rows.append(
                StationStats(
                    index=entry.index,
                    constant_id=entry.constant_id,
                    variable_id=entry.variable_id,
                    address=entry.address,
                    is_host=entry.index == self.table.host_index,
                    is_self=is_self,
                    state="self" if is_self else (peer.state.value if peer else "unknown"),
                    rtt=peer.rtt.smoothed if peer else None,
                    rtt_variance=peer.rtt.variance if peer else None,
                    packets_sent=peer.packets_sent if peer else 0,
                    packets_received=peer.packets_received if peer else 0,
                    lost=(peer.data_window.statistics().retransmitted if peer and peer.data_window else 0),
                )
            )
        return rows

    # ------------------------------------------------------------------ timers
    # Each peer has one deadline (the earliest of its retransmissions, window
    # timers, keep-alive, RTT probe and silence timeout) kept in a heap, and a
    # peer whose output may have changed is "touched".  So a datagram or a
    # timer costs work for the peers it concerns, not for the whole mesh.
    def get_timer(self) -> float | None:
        if self.closed:
            return None
        heap = self._timers
        while heap and heap[0][2].scheduled != heap[0][0]:
            heapq.heappop(heap)  # stale entry
        t = heap[0][0] if heap else None
        for extra in (self._join_deadline, self._leave_deadline, self._next_heal):
            if extra is not None and (t is None or extra < t):
                t = extra
        return t

    def has_output(self) -> bool:
        """Whether :meth:`datagrams_to_send` has something to send right now."""
        return bool(self._touched or self._group_outbox or self._ready)

    def _touch(self, peer: Peer) -> None:
        self._touched[peer] = None

    def _peer_deadline(self, peer: Peer) -> float | None:
        if peer.state is PeerState.CLOSED:
            return None
        d = peer.last_heard + self.config.station_timeout
        for p in peer.pending.values():
            if p.next_send < d:
                d = p.next_send
        if peer.connected:
            d = min(d, peer.next_keepalive, peer.next_rtt)
            for w in (peer.mesh_window, peer.data_window):
                if w is not None and not w.idle():
                    t = w.get_timer()
                    if t is not None and t < d:
                        d = t
        return d

    def _reschedule(self, peer: Peer) -> None:
        d = self._peer_deadline(peer)
        if d is not None and (peer.scheduled is None or d < peer.scheduled):
            peer.scheduled = d
            heapq.heappush(self._timers, (d, next(self._timer_seq), peer))

    def handle_timer(self, now: float) -> None:
        if self.closed:
            return
        if self._join_deadline is not None and now >= self._join_deadline and not self.joined:
            self._fail_join("no answer from the host within the join timeout", now)
            return
        if self._leave_deadline is not None and now >= self._leave_deadline:
            self._close("left", now)
            return
        if self._next_heal is not None and now >= self._next_heal:
            self._heal(now)
        heap = self._timers
        due: list[Peer] = []
        while heap and heap[0][0] <= now:
            t, _, peer = heapq.heappop(heap)
            if peer.scheduled == t:
                peer.scheduled = None
                due.append(peer)
        for peer in due:
            self._peer_timer(peer, now)
            self._touch(peer)

    def _heal(self, now: float) -> None:
        """Reconnect to table members we have no link to (a lost handshake, a
        window that gave up).  The higher index initiates, so two stations
        never both ask; simultaneous asks are resolved anyway (glare rule)."""
        self._next_heal = now + HEAL_INTERVAL if self.joined and not self.leaving else None
        if self._next_heal is None or self.index is None:
            return
        for e in self.table.entries():
            if e.index >= self.index or e.address == self.local_address:
                continue
            peer = self.peers.get(e.address)
            if peer is None or peer.state is PeerState.CLOSED:
                self.counters["reconnects"] += 1
                self._connect(e.address, now)

    def _peer_timer(self, peer: Peer, now: float) -> None:
        if peer.state is PeerState.CLOSED:
            return
        if now >= peer.last_heard + self.config.station_timeout:  # same sum as the deadline
            self._peer_lost(peer, "timeout", now)
            return
        for w in (peer.mesh_window, peer.data_window):
            if w is not None:
                w.handle_timer(now)
                if w.failed:
                    self._peer_lost(peer, "timeout", now)
                    return
        if peer.connected and now >= peer.next_keepalive:
            # A keep-alive only fills silence: any packet sent to the peer
            # within the interval (a game's group frames, say) already keeps
            # the link alive at the other end.
            quiet_since = peer.last_sent + self.config.keepalive_interval
            if now >= quiet_since:
                self._enqueue(peer, Proto.KEEP_ALIVE, 0, b"")
                peer.next_keepalive = now + self.config.keepalive_interval
            else:
                peer.next_keepalive = quiet_since
        if peer.connected and now >= peer.next_rtt:
            self._enqueue(peer, Proto.RTT, 1, mw.encode_rtt(self.profile, False, self._ticks(now)))
            # Each station every rtt_interval, but no more than rtt_probe_rate
            # probes a second from this node in all: RTT traffic stays bounded
            # however many stations the mesh has.
            peer.next_rtt = self._rtt_slot(
                now + max(self.config.rtt_interval, len(self.peers) / self.config.rtt_probe_rate)
            )

    def _rtt_slot(self, wanted: float) -> float:
        """The time of a peer's next RTT probe: *wanted*, or later so that this
        node's probes leave at least 1 / rtt_probe_rate apart.  Without the
        spacing the probes of peers that connected together stay in step: a
        32-station mesh would send 31 x 32 probes (and as many answers) in one
        burst every few seconds, which stalls a real-time session."""
        slot = max(wanted, self._next_rtt_slot)
        self._next_rtt_slot = slot + 1.0 / self.config.rtt_probe_rate
        return slot

    def _enqueue(self, peer: Peer, proto: Proto, port: int, payload: bytes) -> None:
        peer.outbox.append(self._message(peer, proto, port, payload))
        self._touched[peer] = None

    def _ticks(self, now: float) -> int:
        return int(round((now - self.started) * 1_000_000)) & 0xFFFFFFFFFFFFFFFF

    # ------------------------------------------------------------------ output
    def datagrams_to_send(self, now: float) -> list[tuple[bytes, tuple[str, int]]]:
        out, self._ready = self._ready, []
        if self.codec is None:
            return out
        if self._group_outbox:
            out.extend(self._flush_group(now))
        while self._touched:
            touched, self._touched = self._touched, {}
            for peer in touched:
                if peer.state is PeerState.CLOSED:
                    continue
                out.extend(self._drain_peer(peer, now))
                self._reschedule(peer)
        if self.leaving and not any(
            p.pending
            or (p.mesh_window is not None and not p.mesh_window.idle())
            or (p.data_window is not None and not p.data_window.idle())
            for p in self.peers.values()
            if p.state is not PeerState.CLOSED
        ):
            self._close("left", now)
        return out

    def _drain_peer(self, peer: Peer, now: float) -> list[tuple[bytes, tuple[str, int]]]:
        # Handshake messages go first in the bundle: the receiver must see the
        # connection response before data that needs the connection.
        due: list[Message] = []
        for ack_id, p in list(peer.pending.items()) if peer.pending else ():
            if now >= p.next_send:
                p.tries += 1
                if p.tries > 1:
                    self.counters["retransmissions"] += 1
                if p.tries > mw.MAX_TRIES:
                    del peer.pending[ack_id]
                    self._peer_lost(peer, "timeout", now)
                    return []
                due.append(self._message(peer, p.proto, p.port, p.payload))
                p.next_send = now + p.interval
                p.interval = min(p.interval * 1.5, 2.0)
        if due:
            peer.outbox[:0] = due
        if peer.connected:
            # Data before mesh messages: a leave must not overtake the data sent before it.
            for proto, port, w in ((Proto.RELIABLE, 0, peer.data_window), (Proto.MESH, 1, peer.mesh_window)):
                if w is None or w.idle():
                    continue
                for segment in w.messages_to_send(now):
                    peer.outbox.append(self._message(peer, proto, port, segment))
        if peer.outbox:
            return self._flush(peer, now)
        return []

    def _flush(self, peer: Peer, now: float) -> list[tuple[bytes, tuple[str, int]]]:
        messages, peer.outbox = peer.outbox, []
        # One message is one packet whatever its size; only several need bundling.
        bundles = (messages,) if len(messages) == 1 else mw.bundle(self.profile, messages, self.config.mtu)
        return [self._packet(peer, tuple(bundle), now) for bundle in bundles]

    def _packet(self, peer: Peer, messages: tuple[Message, ...], now: float) -> tuple[bytes, tuple[str, int]]:
        """Seal *messages* into the next packet to *peer* and count it as sent."""
        assert self.codec is not None
        return self._sent(peer, self.codec.encode(Packet(self._header(peer, now), messages), self.local_address[0]), now)

    def _sent(self, peer: Peer, data: bytes, now: float) -> tuple[bytes, tuple[str, int]]:
        """Count *data*, the next packet to *peer*, as sent."""
        peer.packets_sent += 1
        peer.last_sent = now
        self.counters["packets_sent"] += 1
        if self.tap is not None:
            self.tap(data, self.local_address, peer.address, now)
        return data, peer.address

    def _flush_group(self, now: float) -> list[tuple[bytes, tuple[str, int]]]:
        assert self.codec is not None
        messages, self._group_outbox = self._group_outbox, []
        members = self._members()
        if not members:
            return []
        assert self._group_view is not None
        footer = self._group_view[2]
        group = self.config.group_broadcast
        # A frame's one message needs no bundling; several are split to fit the MTU.
        bundles = (messages,) if len(messages) == 1 else mw.bundle(self.profile, messages, self.config.mtu - 2 * len(footer))
        out = []
        for bundle in bundles:
            header = mw.group_header(self.profile, self, self._group_ids.next(), self.next_header_nonce())
            data = self.codec.encode(Packet(header, tuple(bundle), footer), self.local_address[0])
            self.counters["group_packets_sent"] += 1
            if group is not None:
                # One broadcast reaches every station (they all listen on the port).
                out.append((data, group))
                if self.tap is not None:
                    self.tap(data, self.local_address, group, now)
            for peer in members:
                if group is None:
                    out.append((data, peer.address))
                    if self.tap is not None:
                        self.tap(data, self.local_address, peer.address, now)
                peer.packets_sent += 1
                peer.last_sent = now
            self.counters["packets_sent"] += len(members)
        return out

    def next_header_nonce(self) -> bytes:
        """The next 8-byte header nonce: one counter per node, never reused under the key."""
        self._nonce_counter = (self._nonce_counter + 1) & 0xFFFFFFFFFFFFFFFF
        return self._nonce_counter.to_bytes(8, "big")

    def _header(self, peer: Peer, now: float) -> PacketHeader:
        return mw.make_header(self.profile, peer, self, self.next_header_nonce(), now)

    def _message(self, peer: Peer, proto: Proto, port: int, payload: bytes) -> Message:
        return mw.make_message(self.profile, self, peer, proto, port, payload)

    def _next_ack_id(self) -> int:
        self._ack_counter = (self._ack_counter + 1) & 0xFFFFFFFF or 1
        return self._ack_counter

    def _queue_acked(
        self, peer: Peer, proto: Proto, port: int, build: Callable[[int], bytes], now: float, kind: str = ""
    ) -> int:
        if len(peer.pending) >= MAX_PENDING:
            self._drop(DropReason.QUEUE_FULL)
            return 0
        ack_id = self._next_ack_id()
        peer.pending[ack_id] = _Pending(proto, port, build(ack_id), now, self.config.resend_interval, kind=kind)
        self._touch(peer)
        return ack_id

    # ------------------------------------------------------------------ input
    def receive_datagram(self, data: bytes, addr: tuple[str, int], now: float) -> None:
        if self.closed or self.codec is None:
            # After leaving, or before creating/joining a mesh: nothing to talk to.
            self._drop(DropReason.CLOSED if self.closed else DropReason.NOT_MEMBER)
            return
        peer = self.peers.get(addr)
        group: mw.GroupPacket | None = None
        offset = self._group_offset
        footer = offset is not None and len(data) > offset and data[offset] != 0
        if footer and peer is not None:
            self._receive_group(peer, data, addr, now)
            return
        opener = None
        if peer is not None and peer.opener is not None and peer.connected:
            # The peer's stream of unreliable data to us (a game's frames): the
            # codec's opener compares the constant bytes instead of reading the
            # fields; what it finds the stream's is delivered below, inline.
            made_for, opener = peer.opener
            if made_for != (self.codec, peer.index, peer.peer_conn_id, peer.variable_id, peer.constant_id):
                opener = None
        try:
            if footer:
                # A packet with a footer from an unknown address (dropped below
                # unless it is a connection request): decoded through the same cache.
                assert self._nonce_builder is not None
                group = mw.shared_decode(
                    self.codec, self._codec_key, data, addr[0], self._nonce_builder, self._unreliable_id
                )
                packet = group.packet
            else:
                got = None if opener is None else opener(data)
                if got is None:
                    got = self._decode_lone(data, addr[0])
                if type(got) is bytes:
                    packet = None  # the peer's unreliable data: below
                elif type(got) is not tuple:
                    packet = got  # type: ignore[assignment]
                elif peer is not None and peer.connected and got[0][1]:
                    self._receive_lone(peer, got, now)  # type: ignore[arg-type]
                    return
                else:
                    packet = self.codec.packet_of(got)  # type: ignore[arg-type]
        except AuthenticationError:
            self._drop(DropReason.BAD_TAG)
            return
        except DecodeError:
            if peer is None and self._deny_other_version(data, addr, now):
                self._drop(DropReason.OTHER_VERSION)
            else:
                self._drop(DropReason.MALFORMED)
            return
        if packet is None:
            # The opener's: _receive_lone's steps for unreliable data but those its
            # constant bytes (the peer's identity) and made_for took.
            assert peer is not None
            if not peer.replay.accept_value(int.from_bytes(self.codec.last_nonce[-7:], "big")):  # type: ignore[union-attr]
                self._drop(DropReason.REPLAYED)
                return
            peer.last_heard = now
            peer.packets_received += 1
            counters = self.counters
            counters["packets_received"] += 1
            counters["unreliable_delivered"] += 1  # _deliver, inline
            handler = self.data_handler
            if handler is not None:
                handler(peer.index, got, False)  # type: ignore[arg-type]
            elif len(self._events) < EVENT_QUEUE_LIMIT:
                self._events.append(DataReceived(peer.index, got, False))  # type: ignore[arg-type]
            else:
                self._drop(DropReason.QUEUE_FULL)
            return
        header = packet.header
        if not header.encrypted:
            # The codec accepts plaintext 5.7+ packets (captures have them); a
            # node with a session key never does: they carry no tag.
            self._drop(DropReason.UNENCRYPTED)
            return
        if peer is None:
            # Only a connection request may come from an unknown address.
            if not packet.messages or not mw.is_connection_request(self.profile, packet.messages[0]):
                self._drop(DropReason.NOT_MEMBER)
                return
            if sum(1 for p in self.peers.values() if p.index is None) >= MAX_PROVISIONAL_PEERS:
                self._drop(DropReason.QUEUE_FULL)
                return
        elif not header.packet_id and self._restarted(peer, packet):
            # The station at this address started afresh (a new connection id
            # or variable id in a new connection request): forget the old one.
            self.counters["restarts"] += 1
            self._peer_lost(peer, "restarted", now)
            peer = None
            self._retired_replay.pop(addr, None)
        elif not self._accept_header(peer, packet, self.codec.last_nonce):  # (footer packets: _receive_group)
            return
        if peer is None:
            nonce = self._nonce_of(header, addr[0])
            retired = self._retired_replay.get(addr)
            if retired is not None and now >= retired[1]:
                retired = None
            if retired is not None and not retired[0].accept(nonce):
                self._drop(DropReason.REPLAYED)
                return
            peer = self._new_peer(addr, initiator=False, now=now)
            if retired is None:
                peer.replay.accept(nonce)
        peer.last_heard = now
        if header.source_timer is not None and header.destination_timer is not None:
            sample = peer.header_timers.on_receive(header.source_timer, header.destination_timer, now)
            if sample is not None:
                peer.rtt.on_sample(sample, now)
        peer.packets_received += 1
        self.counters["packets_received"] += 1
        for message in packet.messages:
            self._dispatch(peer, message.protocol_type, message.protocol_port, message.payload, now)
            if peer.state is PeerState.CLOSED or self.closed:
                break
        if not peer.connected:
            self._touched[peer] = None  # handshake state changed

    def _receive_lone(self, peer: Peer, lone: LoneMessage, now: float) -> None:
        """A packet of one message from a connected peer, as ``codec.decode_lone`` read it.

        The checks and steps of :meth:`receive_datagram` for a connected peer
        (identity, replay, dispatch), on the tuple's fields: no header,
        message or packet value is built.  Unreliable data, a game's frames,
        is delivered inline.
        """
        header = lone[0]  # PacketHeader's fields, in order (protocols.pia.packet.LoneMessage)
        if not self._same_identity(peer, header[2], header[7], lone[6]):
            return
        if not self._fresh(peer, nonce_value(self.codec.last_nonce), now):  # type: ignore[union-attr]
            return
        # (No header timers: only H-B headers carry them, and their M-B messages
        # never come as a LoneMessage; tests/protocols/pia/test_codec_fast_path.py.)
        if lone[1] == self._unreliable_id:
            self._deliver(peer, lone[3], reliable=False)  # a game's frame: no dispatch
            if peer.index is not None:
                made_for = (self.codec, peer.index, peer.peer_conn_id, peer.variable_id, peer.constant_id)
                if peer.opener is None or peer.opener[0] != made_for:
                    peer.opener = (made_for, self.codec.lone_opener(lone, peer.address[0]))  # type: ignore[union-attr]
            return
        self._dispatch(peer, lone[1], lone[2], lone[3], now)
        if not peer.connected:
            self._touched[peer] = None  # handshake state changed

    def receive_group_datagram(self, data: bytes, addr: tuple[str, int], now: float) -> None:
        """A datagram heard on the group port (spec §1.6; see :mod:`pianode.group_listener`).

        A known peer's group packet takes the shortest path; anything else is
        judged as :meth:`receive_datagram` judges it.  A session that has left
        stops listening: others' group packets are not counted as its drops.
        """
        if self.closed:
            return
        peer = self.peers.get(addr)
        offset = self._group_offset
        if peer is not None and offset is not None and len(data) > offset and data[offset]:
            self._receive_group(peer, data, addr, now)
        else:
            self.receive_datagram(data, addr, now)

    def _receive_group(self, peer: Peer, data: bytes, addr: tuple[str, int], now: float) -> None:
        """A packet with a footer (5.27+, for several stations) from a known peer.

        It went to several stations, likely several of this process: it is
        decoded once for all of them (:func:`pianode.mesh_wire.shared_decode`).
        Checks: addressed to us, sent by the peer's identity, not a replay.
        Unreliable data, what games send this way every frame, is delivered
        inline; anything else goes through :meth:`_dispatch`.
        """
        assert self.codec is not None and self._nonce_builder is not None
        try:
            group = mw.shared_decode(
                self.codec, self._codec_key, data, addr[0], self._nonce_builder, self._unreliable_id
            )
        except AuthenticationError:
            self._drop(DropReason.BAD_TAG)
            return
        except DecodeError:
            self._drop(DropReason.MALFORMED)
            return
        packet = group.packet
        header = packet.header
        if not header.encrypted:
            self._drop(DropReason.UNENCRYPTED)
            return
        if self._footer_id not in group.receivers:
            self._drop(DropReason.NOT_ADDRESSED)
            return
        if header.source_variable_id != peer.variable_id:
            self._drop(DropReason.IDENTITY_MISMATCH)
            return
        if not self._fresh(peer, group.nonce_value, now):
            return
        counters = self.counters
        index = peer.index
        own = self.index
        messages: tuple[Message, ...] | None = None
        if index is not None and peer.connected and own is not None and group.common_destination >> own & 1:
            # Every unreliable message (a game's frame) is for us: straight to the
            # application, then the other messages (those addressed to us).
            payloads = group.unreliable
            handler = self.data_handler
            if handler is not None:
                counters["unreliable_delivered"] += len(payloads)
                for payload in payloads:
                    handler(index, payload, False)
                messages = group.others
            elif len(self._events) + len(payloads) <= EVENT_QUEUE_LIMIT:
                counters["unreliable_delivered"] += len(payloads)
                events = self._events
                for payload in payloads:
                    events.append(DataReceived(index, payload, False))
                messages = group.others
        if messages is None:
            messages = packet.messages  # message by message
        if messages:
            self._group_messages(peer, messages, now)
        if not peer.connected:
            self._touched[peer] = None  # handshake state changed

    def _group_messages(self, peer: Peer, messages: tuple[Message, ...], now: float) -> None:
        """The messages of a group packet, one by one: those addressed to others
        are skipped (a reliable broadcast carries one segment per station, each
        under its station's destination bit)."""
        own, counters = self.index, self.counters
        for message in messages:
            destination = message.destination
            if destination and own is not None and not destination >> own & 1:
                counters["group_messages_for_others"] += 1
                continue
            self._dispatch(peer, message.protocol_type, message.protocol_port, message.payload, now)
            if peer.state is PeerState.CLOSED or self.closed:
                break

    def _restarted(self, peer: Peer, packet: Packet) -> bool:
        """A first-contact connection request from a connected peer that names a new identity."""
        if not peer.connected or not packet.messages or packet.header.packet_id:
            return False
        first = packet.messages[0]
        if not mw.is_connection_request(self.profile, first):
            return False
        try:
            msg = mw.decode_station(self.profile, first.payload)
        except DecodeError:
            return False
        if not isinstance(msg, mw.ConnectRequest) or msg.inverse:
            return False
        if self._has_conn_id:
            return msg.conn_id != peer.peer_conn_id
        return msg.location.variable_id != peer.variable_id

    def _accept_header(self, peer: Peer, packet: Packet, nonce: bytes) -> bool:
        """Identity and replay checks on an authenticated packet.

        Identity first: a packet whose header or messages name another
        station than the one at its source address is refused as such.
        Replays are judged on the GCM nonce, which the tag authenticates; the
        packet id is not authenticated (no associated data, spec §3.1), so it
        only feeds the statistics.
        """
        header = packet.header
        if peer.connected:
            if not self._same_identity(peer, header.connection_id, header.source_variable_id, None):
                return False
        if peer.constant_id:
            for m in packet.messages:
                if m.source_constant_id is not None and m.source_constant_id != peer.constant_id:
                    self._drop(DropReason.IDENTITY_MISMATCH)
                    return False
        if not peer.replay.accept(nonce):
            self._drop(DropReason.REPLAYED)
            return False
        return True

    def _fresh(self, peer: Peer, value: int, now: float) -> bool:
        """An authentic packet that names *peer*: refuse it if its nonce (*value*,
        see :func:`pianode.replay.nonce_value`) was seen, else count it as heard."""
        if not peer.replay.accept_value(value):
            self._drop(DropReason.REPLAYED)
            return False
        peer.last_heard = now
        peer.packets_received += 1
        self.counters["packets_received"] += 1
        return True

    def _same_identity(
        self, peer: Peer, connection_id: int, source_variable_id: int | None, constant_id: int | None
    ) -> bool:
        """Whether a connected peer's packet names the peer (header id, and a message's constant id); counts a drop if not."""
        if self._has_conn_id:
            same = connection_id in (0, peer.peer_conn_id)
        else:
            same = source_variable_id in (None, peer.variable_id)
        if same and (constant_id is None or not peer.constant_id or constant_id == peer.constant_id):
            return True
        self._drop(DropReason.IDENTITY_MISMATCH)
        return False

    def _deny_other_version(self, data: bytes, addr: tuple[str, int], now: float) -> bool:
        """A connection request in another Pia version's format: answer it with
        a denial it can read (result 2 "version too low" / 3 "too high",
        spec §5.3), at most once a second per address."""
        other = mw.profile_of_datagram(data, self.profile)
        if other is None or self.session_key is None:
            return False
        last = self._denied.get(addr)
        if last is not None and now - last < 1.0:
            return False
        reply = mw.version_denial(self, other, data, addr, 2 if other.version < self.profile.version else 3)
        if reply is None:
            return False  # not an authentic connection request in that format
        self._denied[addr] = now
        if len(self._denied) > MAX_PROVISIONAL_PEERS:
            self._denied.pop(next(iter(self._denied)))
        self._ready.append((reply, addr))
        self.counters["version_denials"] += 1
        return True

    def _nonce_of(self, header: PacketHeader, source: str) -> bytes:
        assert self._nonce_builder is not None
        return self._nonce_builder(header, source)

    def _window_send(self, peer: Peer, window: ReliableWindow, payload: bytes, now: float) -> bool:
        """Queue on a reliable window; a full or failed window counts, never raises into the receive path."""
        try:
            window.send(payload, now)
        except (SendBufferFull, WindowFailed):
            self.counters["window_full"] += 1
            return False
        return True

    def _drop(self, reason: DropReason) -> None:
        self.drops[reason.value] += 1

    def _dispatch(self, peer: Peer, protocol_type: int, port: int, payload: bytes, now: float) -> None:
        """One message (its protocol type, port and payload) from *peer*."""
        try:
            proto = self._proto_by_id.get(protocol_type)
            if proto is Proto.UNRELIABLE:
                # The common case first (a game's frames).
                if peer.connected:
                    self._deliver(peer, payload, reliable=False)
                else:
                    self._drop(DropReason.UNEXPECTED)
            elif proto is Proto.STATION:
                self._on_station(peer, mw.decode_station(self.profile, payload), now)
            elif not peer.connected:
                self._drop(DropReason.UNEXPECTED)
            elif proto is Proto.MESH:
                if port == 1:
                    assert peer.mesh_window is not None
                    self._touched[peer] = None  # an ack is due
                    for segment in peer.mesh_window.receive_message(payload, now):
                        self._on_mesh(peer, mw.decode_mesh(self.profile, segment), now)
                else:
                    self._on_mesh(peer, mw.decode_mesh(self.profile, payload), now)
            elif proto is Proto.KEEP_ALIVE:
                self.counters["keepalives_received"] += 1
            elif proto is Proto.RTT:
                self._on_rtt(peer, payload, now)
            elif proto is Proto.RELIABLE:
                assert peer.data_window is not None
                self._touched[peer] = None  # an ack is due
                for segment in peer.data_window.receive_message(payload, now):
                    self._deliver(peer, segment, reliable=True)
            elif proto in self.protocol_handlers and peer.index is not None:
                self.protocol_handlers[proto](peer.index, port, payload)
            else:
                self._drop(DropReason.UNEXPECTED)
        except DecodeError:
            self._drop(DropReason.MALFORMED)

    def _deliver(self, peer: Peer, data: bytes, *, reliable: bool) -> None:
        if peer.index is None:
            # Data from a newcomer can overtake the update mesh that names it:
            # hold a bounded amount until its index is known.
            if len(peer.held) >= HELD_LIMIT:
                self._drop(DropReason.QUEUE_FULL)
            else:
                peer.held.append((data, reliable))
            return
        self.counters["reliable_delivered" if reliable else "unreliable_delivered"] += 1
        if self.data_handler is not None:
            self.data_handler(peer.index, data, reliable)
        else:
            self._emit(DataReceived(peer.index, data, reliable))

    def _emit(self, event: Event) -> None:
        if len(self._events) >= EVENT_QUEUE_LIMIT:
            self._drop(DropReason.QUEUE_FULL)
            return
        self._events.append(event)

    # ------------------------------------------------------------------ station protocol
    def _new_peer(self, addr: tuple[str, int], *, initiator: bool, now: float) -> Peer:
        peer = Peer(
            address=addr,
            own_conn_id=self.rng.randrange(2, 256),
            initiator=initiator,
            created=now,
            last_heard=now,
            header_timers=HeaderTimers(self.started),
        )
        retired = self._retired_replay.pop(addr, None)
        if retired is not None and now < retired[1]:
            peer.replay = retired[0]
        peer.mesh_window = mw.new_window(self.profile, self.config, now)
        peer.data_window = mw.new_window(self.profile, self.config, now)
        self.peers[addr] = peer
        self._membership_changed()
        return peer

    def _connect(self, addr: tuple[str, int], now: float) -> Peer:
        peer = self.peers.get(addr)
        if peer is not None and peer.state is not PeerState.CLOSED:
            return peer
        peer = self._new_peer(addr, initiator=True, now=now)
        self._queue_acked(
            peer,
            Proto.STATION,
            0,
            lambda ack: mw.encode_connect_request(self.profile, self, peer, inverse=False, ack_id=ack),
            now,
            kind="connect",
        )
        return peer

    def _ack(self, peer: Peer, ack_id: int) -> None:
        self._enqueue(peer, Proto.STATION, 0, mw.encode_station_ack(self.profile, ack_id))

    def _on_station(self, peer: Peer, msg: mw.StationMessage, now: float) -> None:
        if isinstance(msg, mw.StationAck):
            pending = peer.pending.pop(msg.ack_id, None)
            if pending is not None:
                self._on_acked(peer, pending, now)
            return
        if isinstance(msg, mw.ConnectRequest):
            self._ack(peer, msg.ack_id)
            self._learn(peer, msg.location)
            if msg.inverse:
                # We initiated; this is the peer's inverse request (<= 5.26).
                if msg.inverse_conn_id != peer.own_conn_id:
                    self._drop(DropReason.IDENTITY_MISMATCH)
                    return
                peer.peer_conn_id = msg.conn_id
                if not peer.sent_response:
                    peer.sent_response = True
                    self._queue_acked(peer, Proto.STATION, 0, lambda ack: mw.encode_connect_response(self.profile, self, peer, 0, ack), now)
                return
            if peer.initiator and not peer.connected:
                # Both sides asked at once (each learned of the other from a
                # different mesh table).  The station with the lower constant id
                # stays the initiator; the other withdraws its request and answers.
                if (self.constant_id, self.local_address) < (msg.location.constant_id, peer.address):
                    self.counters["connect_glare_won"] += 1
                    return
                self.counters["connect_glare_yielded"] += 1
                for ack_id in [k for k, p in peer.pending.items() if p.kind == "connect"]:
                    del peer.pending[ack_id]
                peer.initiator = False
            if peer.connected:
                return  # a retransmission whose ack was lost: acked above
            peer.peer_conn_id = msg.conn_id
            if self.leaving or self.index is None and not self._join_host:
                refuse = 1
            else:
                refuse = 0
            if refuse:
                self._enqueue(peer, Proto.STATION, 0, mw.encode_connect_deny(self.profile, self, peer, refuse))
                return
            if self.profile.inverse_handshake:
                if not any(isinstance(p, _Pending) and p.proto is Proto.STATION for p in peer.pending.values()):
                    self._queue_acked(
                        peer, Proto.STATION, 0,
                        lambda ack: mw.encode_connect_request(self.profile, self, peer, inverse=True, ack_id=ack), now,
                    )
            elif not peer.sent_response:
                peer.sent_response = True
                self._queue_acked(peer, Proto.STATION, 0, lambda ack: mw.encode_connect_response(self.profile, self, peer, 0, ack), now)
                self._set_connected(peer, now)
            return
        if isinstance(msg, mw.ConnectResponse):
            if msg.result != 0:
                self._ack_if(peer, msg.ack_id)
                if peer.connected:
                    self._peer_lost(peer, "refused", now)
                    return
                if peer.address == self._join_host and not self.joined:
                    why = {2: "our Pia version is too low for it", 3: "our Pia version is too high for it"}.get(
                        msg.result, f"result {msg.result}"
                    )
                    self._fail_join(f"the host refused the connection: {why}", now)
                self._close_peer(peer)
                return
            self._ack(peer, msg.ack_id)
            if msg.location is not None:
                self._learn(peer, msg.location)
            peer.got_response = True
            if self.profile.inverse_handshake and not peer.initiator and not peer.sent_response:
                peer.sent_response = True
                self._queue_acked(peer, Proto.STATION, 0, lambda ack: mw.encode_connect_response(self.profile, self, peer, 0, ack), now)
            self._set_connected(peer, now)
            return
        if isinstance(msg, mw.Disconnect):
            if not msg.response:
                self._enqueue(peer, Proto.STATION, 0, mw.encode_disconnect(self.profile, True))
            self._peer_lost(peer, "left", now)

    def _ack_if(self, peer: Peer, ack_id: int | None) -> None:
        if ack_id is not None:
            self._ack(peer, ack_id)

    def _learn(self, peer: Peer, location: mw.Location) -> None:
        peer.constant_id = location.constant_id
        peer.variable_id = location.variable_id
        self._membership_changed()

    def _set_connected(self, peer: Peer, now: float) -> None:
        if peer.connected:
            return
        peer.state = PeerState.CONNECTED
        peer.connected = True
        self._membership_changed()
        peer.next_keepalive = now + self.config.keepalive_interval
        peer.next_rtt = self._rtt_slot(now)
        self.counters["connections"] += 1
        if peer.address == self._join_host and not self.joined:
            self._queue_acked(peer, Proto.MESH, 0, lambda ack: mw.encode_join_request(self.profile, self, ack), now)
        entry = self.table.by_address(peer.address)
        if entry is not None and entry.index != self.index:
            peer.index = entry.index
            self._membership_changed()
            self._announce(peer)
        elif entry is None and self.is_host() and peer.mesh_window is not None:
            # A station we have no entry for: a joiner (it will ask), or one
            # our predecessor admitted just before leaving, which learns from
            # our table that it must join again.
            for payload in mw.encode_update_mesh(self.profile, self, self.config.mtu):
                self._window_send(peer, peer.mesh_window, payload, now)

    def _announce(self, peer: Peer) -> None:
        if peer.announced or peer.index is None or not peer.connected:
            return
        peer.announced = True
        self._emit(StationJoined(station_index=peer.index, constant_id=peer.constant_id, address=peer.address))
        held, peer.held = peer.held, []
        for data, reliable in held:
            self._deliver(peer, data, reliable=reliable)

    def _on_acked(self, peer: Peer, pending: _Pending, now: float) -> None:
        if pending.proto is Proto.STATION and self.profile.version >= (5, 27) and not peer.initiator:
            self._set_connected(peer, now)

    def _close_peer(self, peer: Peer) -> None:
        peer.state = PeerState.CLOSED
        peer.connected = False
        self._membership_changed()
        peer.pending.clear()
        if self.peers.pop(peer.address, None) is peer:
            # Keep its replay memory: a recorded datagram from a departed
            # station must not open a new connection (bounded).
            # For two station timeouts: a station restarted at the same
            # address starts a new counter, which may be lower.
            self._retired_replay[peer.address] = (peer.replay, peer.last_heard + 2 * self.config.station_timeout)
            self._retired_replay.move_to_end(peer.address)
            if len(self._retired_replay) > RETIRED_REPLAY_LIMIT:
                self._retired_replay.popitem(last=False)

    # ------------------------------------------------------------------ mesh protocol
    def _on_mesh(self, peer: Peer, msg: mw.MeshMessage, now: float) -> None:
        if isinstance(msg, mw.JoinRequest):
            self._ack(peer, msg.ack_id)
            self._on_join_request(peer, now)
        elif isinstance(msg, mw.JoinResponse):
            self._ack(peer, msg.ack_id)
            self._on_join_response(peer, msg, now)
        elif isinstance(msg, mw.JoinDenied):
            if not self.joined:
                self._fail_join(f"join denied: {msg.reason_text}", now)
        elif isinstance(msg, mw.UpdateMesh):
            self._on_update_mesh(peer, msg, now)
        elif isinstance(msg, mw.LeaveRequest):
            # Stay in contact until our ack of the leave has gone out: close
            # after the window flushed it (the peer's station timeout ends it otherwise).
            self._peer_lost(peer, "left", now, linger=True)
        else:
            self._drop(DropReason.UNEXPECTED)

    def _on_join_request(self, peer: Peer, now: float) -> None:
        if not self.is_host():
            self._enqueue(peer, Proto.MESH, 0, mw.encode_join_deny(self.profile, mw.DENY_NOT_HOST))
            return
        entry = self.table.by_address(peer.address)
        if entry is not None and any(p.kind == "join-response" for p in peer.pending.values()):
            return  # a retransmitted request: our response is still on its way
        if entry is None:
            try:
                entry = self.table.add(peer.constant_id, peer.variable_id, peer.address)
            except MeshFull:
                self.counters["joins_denied"] += 1
                self._enqueue(peer, Proto.MESH, 0, mw.encode_join_deny(self.profile, mw.DENY_MESH_FULL))
                return
            self.table.update_counter += 1
        peer.index = entry.index
        self._membership_changed()
        for build in mw.encode_join_response(self.profile, self, entry.index, self.config.mtu):
            self._queue_acked(peer, Proto.MESH, 0, build, now, kind="join-response")
        self._send_update_mesh(now, exclude={peer.address})
        self._announce(peer)

    def _send_update_mesh(self, now: float, exclude: Iterable[tuple[str, int]] = ()) -> None:
        skip = set(exclude)
        payloads = mw.encode_update_mesh(self.profile, self, self.config.mtu)
        # Connected stations without an index hear it too: one the previous
        # host admitted just before leaving learns that it must join again.
        for member in [p for p in self.peers.values() if p.connected]:
            if member.address in skip:
                continue
            assert member.mesh_window is not None
            for payload in payloads:
                self._window_send(member, member.mesh_window, payload, now)
            self._touch(member)

    def _apply_table(
        self, entries: list[StationEntry], host_index: int, counter: int, now: float, *, connect_new: bool = False
    ) -> None:
        old_host = self.table.host_index
        old = {e.index: e for e in self.table.entries()}
        self.table.replace_all(entries, host_index, counter)
        if old_host is not None and host_index != old_host and self.joined:
            self._emit(HostChanged(old_host_index=old_host, new_host_index=host_index))
        for idx, e in old.items():
            if idx not in self.table and idx != self.index:
                peer = self.peers.get(e.address)
                if peer is not None:
                    self._peer_lost(peer, "removed", now)
        for e in self.table.entries():
            if e.address == self.local_address:
                continue
            peer = self.peers.get(e.address)
            if peer is None:
                if not connect_new:
                    continue  # the newcomer connects to us
                # The newcomer connects to every member (spec §5.4 join sequence).
                peer = self._connect(e.address, now)
            peer.index = e.index
            if not peer.constant_id:
                peer.constant_id, peer.variable_id = e.constant_id, e.variable_id
            self._membership_changed()
            self._announce(peer)

    def _on_join_response(self, peer: Peer, msg: mw.JoinResponse, now: float) -> None:
        if self.joined or peer.address != self._join_host:
            return
        if not mw.valid_table(msg.entries, None, self.config.max_stations, msg.fragment_count) or not (
            msg.joiner_index < self.config.max_stations and msg.host_index < self.config.max_stations
        ):
            self._drop(DropReason.MALFORMED)
            return
        peer.join_fragments[msg.fragment_index] = msg
        if len(peer.join_fragments) < msg.fragment_count:
            return
        entries: list[StationEntry] = []
        for frag in peer.join_fragments.values():
            entries.extend(frag.entries)
        peer.join_fragments.clear()
        self.index = msg.joiner_index
        self.joined = True
        self._join_deadline = None
        self._next_heal = now + HEAL_INTERVAL
        self._emit(MeshJoined(station_index=msg.joiner_index, host_index=msg.host_index))
        self._apply_table(entries, msg.host_index, msg.update_counter, now, connect_new=True)
        early, self._early_update = self._early_update, None
        if early is not None and early[2] > self.table.update_counter:
            self._apply_table(early[0], early[1], early[2], now, connect_new=True)

    def _on_update_mesh(self, peer: Peer, msg: mw.UpdateMesh, now: float) -> None:
        # Only the station an update names as host may send it, and only if it
        # is our host or a station with an index in our table; before our
        # join completes, only the join host.
        if self.joined:
            allowed = peer.index is not None and msg.host_index == peer.index
        else:
            allowed = peer.address == self._join_host
        if not allowed:
            self._drop(DropReason.NOT_HOST)
            return
        if not mw.valid_table(msg.entries, msg.host_index, self.config.max_stations, msg.fragment_count):
            self._drop(DropReason.MALFORMED)
            return
        # Fragments of one update share its counter; collect until complete.
        key = msg.update_counter
        frags = peer.update_fragments
        if any(f.update_counter != key for f in frags.values()):
            frags.clear()
        frags[msg.fragment_index] = msg
        if len(frags) < msg.fragment_count:
            return
        got = list(frags.values())
        frags.clear()
        if key < self.table.update_counter and msg.host_index == self.table.host_index:
            return  # older than what we have (an equal counter from the host still wins: a new host's
            # first update can tie with the last one its predecessor sent to some stations only)
        entries = [e for f in got for e in f.entries]
        if not self.joined:
            # The host's update can overtake our (retransmitted) join response:
            # keep the newest and apply it once we are in.
            if self._early_update is None or key > self._early_update[2]:
                self._early_update = (entries, msg.host_index, key)
            return
        self._departed.clear()
        if self.index is not None and all(e.index != self.index or e.address != self.local_address for e in entries):
            # The host's table does not list us (we were admitted by a host
            # that left before telling the others): join again through it.
            self._rejoin(peer, now)
            return
        self._apply_table(entries, msg.host_index, key, now)

    # ------------------------------------------------------------------ rtt
    def _on_rtt(self, peer: Peer, payload: bytes, now: float) -> None:
        is_response, ticks = mw.decode_rtt(self.profile, payload)
        if not is_response:
            self.counters["rtt_requests_received"] += 1
            self._enqueue(peer, Proto.RTT, 1, mw.encode_rtt(self.profile, True, ticks))
            return
        sent = self.started + ticks / 1_000_000
        if sent <= now:
            peer.rtt.on_sample(now - sent, now)

    # ------------------------------------------------------------------ departures
    def _members(self) -> tuple[Peer, ...]:
        """Connected peers with a station index: whom a broadcast reaches."""
        view = self._group_view
        if view is None:
            view = self._group_view = self._work_out_group_view()
        return view[0]

    def _work_out_group_view(self) -> tuple[tuple[Peer, ...], int, tuple[int, ...]]:
        members = tuple(p for p in self.peers.values() if p.connected and p.index is not None)
        destination = 0
        for p in members:
            destination |= 1 << p.index  # type: ignore[operator]
        # Group packets name their receivers by the low 16 bits of their variable ids (spec §1.6).
        footer = tuple(sorted({p.variable_id & 0xFFFF for p in members}))
        return members, destination, footer

    def _membership_changed(self) -> None:
        """A peer connected, closed, or got an index or identity: the group view is stale."""
        self._group_view = None

    def _peer_by_index(self, index: int) -> Peer | None:
        # A remembered answer is used only while it still holds.
        p = self._by_index.get(index)
        if p is not None and p.index == index and p.state is not PeerState.CLOSED and self.peers.get(p.address) is p:
            return p
        for p in self.peers.values():
            if p.index == index and p.state is not PeerState.CLOSED:
                self._by_index[index] = p
                return p
        self._by_index.pop(index, None)
        return None

    def _peer_lost(self, peer: Peer, reason: str, now: float, *, linger: bool = False) -> None:
        if peer.state is PeerState.CLOSED:
            return
        if linger and self.codec is not None:
            # Send what we owe it (the ack of its leave) before forgetting it.
            self._ready.extend(self._drain_peer(peer, now))
        index = peer.index
        was_joining_host = peer.address == self._join_host and not self.joined
        self._close_peer(peer)
        if was_joining_host:
            self._fail_join("lost the host while joining", now)
            return
        if index is None or self.index is None:
            return
        if peer.announced:
            self._emit(StationLeft(station_index=index, constant_id=peer.constant_id, reason=reason))
        if index not in self.table:
            return
        lost_host = index == self.table.host_index
        if not lost_host and not self.is_host():
            # The host owns the table: it removes the station and sends an
            # update.  Remember it is gone, so it is never elected host.
            self._departed.add(index)
            return
        self.table.remove(index)
        if lost_host:
            new_host = self._elect(now)
            if new_host is None:
                return
            old = index
            self.table.host_index = new_host
            self._emit(HostChanged(old_host_index=old, new_host_index=new_host))
            if new_host == self.index:
                self.table.update_counter += 1
                self._send_update_mesh(now)
        elif self.is_host():
            self.table.update_counter += 1
            self._send_update_mesh(now)

    def _rejoin(self, host: Peer, now: float) -> None:
        self.counters["rejoins"] += 1
        self.joined = False
        self.index = None
        self._join_host = host.address
        self._join_deadline = now + self.config.join_timeout
        self._next_heal = None
        self._queue_acked(host, Proto.MESH, 0, lambda ack: mw.encode_join_request(self.profile, self, ack), now)

    def _elect(self, now: float) -> int | None:
        """The migration rule, over the stations not known to have left.

        A non-host keeps departed stations in its table until the host's next
        update (the host owns the table); they must not be elected.
        """
        return self.table.elect_host(self._departed)

    def _fail_join(self, reason: str, now: float) -> None:
        self.failure = reason
        self._join_deadline = None
        self._close("join-failed", now)

    def _close(self, reason: str, now: float) -> None:
        if self.closed:
            return
        self.closed = True
        self._leave_deadline = None
        for peer in list(self.peers.values()):
            self._close_peer(peer)
        self._emit(MeshDestroyed(reason=reason if self.failure is None else f"{reason}: {self.failure}"))

    def decode_context(self) -> dict[str, object]:
        """Session-file fields `pianode decode` needs besides version, network and key."""
        return mw.decode_context(self.config, self)

    def statistics(self) -> dict[str, object]:
        return {
            "station_index": self.index,
            "host_index": self.table.host_index,
            "stations": len(self.table),
            "counters": {k: v for k, v in self.counters.items() if v},
            "drops": dict(self.drops),
        }

