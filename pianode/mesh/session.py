"""The sans-IO Pia mesh session: the coordinator of one node's parts.

Theory of operation
-------------------
A :class:`MeshSession` is everything one node knows, with no I/O and no clock:
the driver (``pianode.mesh.node``) feeds it datagrams and the current time, and asks
it for datagrams to send and for its next timer deadline (the aioquic shape,
STYLE.md practice 2)::

    session.receive_datagram(data, addr, now)
    session.handle_timer(now)
    for data, addr in session.datagrams_to_send(now): ...
    session.get_timer() -> float | None
    session.next_event() -> Event | None

The session itself only routes; each concern is a part that owns its state:

* :class:`~pianode.mesh.links.Links`: the peers (one per remote address),
  their timers, liveness, RTT, and the identity and replay checks;
* :class:`~pianode.mesh.outbox.Outbox`: queues, retransmissions, packets,
  group packets, the header nonce counter and the send fast paths;
* :class:`~pianode.mesh.handshake.StationHandshake`: the station protocol
  (CONNECTING -> CONNECTED, spec §5.3);
* :class:`~pianode.mesh.membership.Membership`: the mesh table, joins,
  updates, leaving and host migration (spec §5.4);
* :class:`~pianode.mesh.stats.Tally`: counters and drops by reason.

A datagram goes: :meth:`MeshSession.receive_datagram` decodes it with the
codec (``protocols.pia.packet``; a station's stream of unreliable data
through its opener), has the links check identity and replay, and hands
each message to :meth:`MeshSession._dispatch`, which routes it by protocol:
station messages to the handshake, mesh messages (through the peer's mesh
window) to the membership, RTT to the links, data (through the peer's data
window) to the application as events or to its data handler.  A datagram
that does not decode, authenticate or pass a check is dropped and counted
by reason, never raised.  Sending is the outbox's; the session implements
the small protocols through which the parts reach each other
(:class:`~pianode.mesh.links.LinkHost`, ...).
"""

from __future__ import annotations

import collections
import logging
import random
from collections.abc import Callable, Sequence

from pianode.mesh import departure, legacy, stream, wire
from pianode.mesh.config import NodeConfig
from pianode.mesh.events import DataReceived, Event
from pianode.mesh.handshake import StationHandshake
from pianode.mesh.links import PROVISIONAL_PER_IP, Links
from pianode.mesh.membership import Membership
from pianode.mesh.outbox import Datagram, Outbox
from pianode.mesh.peer import Peer, PeerState, StationStats
from pianode.mesh.replay import nonce_value
from pianode.mesh.stats import COUNTERS, DropReason, Tally
from pianode.mesh.table import MeshTable
from protocols.errors import AuthenticationError, DecodeError
from protocols.pia.header import PacketHeader
from protocols.pia.message import Message
from protocols.pia.packet import PacketCodec
from protocols.pia.packet_values import LoneMessage, Packet
from protocols.pia.versions import MessageFormat, Proto

__all__ = ["COUNTERS", "DropReason", "MeshSession", "Peer", "PeerState", "StationStats", "own_address_refusal"]


MAX_PROVISIONAL_PEERS = 64  # unknown addresses we talk to before they are members
EVENT_QUEUE_LIMIT = 65536
HELD_LIMIT = 1024  # data messages held per peer until its station index is known
HELD_BYTES = 256 * 1024  # and their bytes

_log = logging.getLogger("pianode.mesh")


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
        self.profile = profile = config.profile
        self.local_address = local_address
        self.rng = rng or random.Random(config.seed)
        self.started = now
        self.location = wire.local_identity(config, local_address, self.rng)
        self.constant_id = self.location.constant_id
        self._footer_id = self.location.variable_id & 0xFFFF  # how group packets name this station (spec §1.6)
        source_id = self.constant_id if profile.message_format in wire.SOURCE_ID_FORMATS else None
        if legacy.is_legacy(profile) and source_id is None:
            source_id = legacy.message_source_id(config.network, self.constant_id)  # M-A
        self._tally = tally = Tally()
        self.counters = tally.counters
        self.drops = tally.drops
        self.links = Links(config, self.rng, now, tally, self, self.location.variable_id)
        self.outbox = Outbox(
            config, local_address, self.location.variable_id, source_id, self.rng, self.links, tally, self
        )
        self.handshake = StationHandshake(config, self.location, self.links, self.outbox, tally, self)
        self.membership = Membership(config, self.location, self.links, self.outbox, self.handshake, tally, self)
        # Read for every datagram: the links' own dicts, not copies.
        self.peers = self.links.peers
        self._touched = self.links.touched
        self.protocol_ids = self.outbox.protocol_ids
        self._proto_by_id: dict[int, Proto] = {pid: proto for proto, pid in self.protocol_ids.items()}
        self._unreliable_id = self.protocol_ids[Proto.UNRELIABLE]
        self.session_key: bytes | None = config.session_key
        self.network_id = 0
        self.codec: PacketCodec | None = None
        self._nonce_builder: Callable[[PacketHeader, str], bytes] | None = None
        self._group_offset = wire.footer_size_offset(profile)
        self._legacy = legacy.is_legacy(profile)
        self._plain = legacy.plain_packets(profile, config.network)
        self._codec_key = 0
        self._decode_lone: Callable[[bytes, str], Packet | LoneMessage] | None = None
        self._open_in_batches = False  # the codec's AEAD opens a batch in one call (pianode.mesh.stream._open_together)
        self._events: collections.deque[Event] = collections.deque()
        #: Handlers for sub-protocols the application runs itself (LDN's Local protocol, spec §5.10):
        #: called with (source station index, protocol port, payload) for each message from a member.
        self.protocol_handlers: dict[Proto, Callable[[int, int, bytes], None]] = {}
        #: When set, application data goes to ``data_handler(source index, data,
        #: reliable)`` as it is decoded, instead of DataReceived events (a game's
        #: frame callback; no event object per message).  It must not raise.
        self.data_handler: Callable[[int, bytes, bool], None] | None = None

    # ------------------------------------------------------------------ the parts' state, read here
    index = property(lambda self: self.membership.index, doc="This station's index (None: not in a mesh).")
    table = property(lambda self: self.membership.table, doc="The mesh table (the membership's).")
    joined = property(lambda self: self.membership.joined)
    closed = property(lambda self: self.membership.closed)
    leaving = property(lambda self: self.membership.leaving)
    failure = property(lambda self: self.membership.failure, doc="Why the join failed, if it did.")
    variable_id = property(lambda self: self.outbox.variable_id, doc="The variable id sealed into our packets.")
    message_source_id = property(
        lambda self: self.outbox.message_source_id, doc="Our constant id as messages carry it (M-B..M-E), else None."
    )

    @property
    def tap(self) -> Callable[[bytes, tuple[str, int], tuple[str, int], float], None] | None:
        """Called with every datagram we send: (data, src, dst, now).  For --record."""
        return self.outbox.tap

    @tap.setter
    def tap(self, tap: Callable[[bytes, tuple[str, int], tuple[str, int], float], None] | None) -> None:
        self.outbox.tap = tap

    def is_host(self) -> bool:
        return self.membership.is_host()

    def next_header_nonce(self) -> bytes:
        return self.outbox.next_header_nonce()

    # ------------------------------------------------------------------ setup
    def _setup_crypto(self, session_key: bytes, network_id: int) -> None:
        self.session_key = session_key
        self.network_id = network_id
        self.handshake.use_network(network_id)
        self.codec, self._nonce_builder = wire.packet_codec(self.config, self.profile, session_key, network_id)
        self.outbox.codec = self.codec
        self._decode_lone = self.codec.lone_decoder()
        self._open_in_batches = self.codec.opens_in_batches
        self._codec_key = wire.codec_key(self.profile.version, self.config.network, session_key, network_id, self.config.aead_backend)

    def create(self, now: float, *, network_id: int | None = None) -> None:
        """Create a mesh with this node as host and station index 0.

        *network_id* overrides the network type's rule (LDN: the random u32 the
        host advertises; NEX: the gathering id).
        """
        if self.membership.busy():
            raise RuntimeError("this node already created or joined a mesh")
        key = self.session_key or self.rng.randbytes(16)
        if network_id is None:
            network_id = wire.network_id_for_host(self.config, self.local_address, self.rng)
        self._setup_crypto(key, network_id)
        self.membership.create(now)

    def join(
        self, host: tuple[str, int], now: float, *, network_id: int | None = None, host_identity: tuple[int, int] | None = None
    ) -> None:
        """Start joining the mesh hosted at *host* (needs the session key in the config); *host_identity*
        is the host's (constant id, variable id) where discovery gave them."""
        if self.membership.busy():
            raise RuntimeError("this node already created or joined a mesh")
        if self.config.session_key is None or tuple(host) == self.local_address:
            raise ValueError(own_address_refusal(host) if self.config.session_key else "joining needs the mesh's session key")
        if network_id is None:
            network_id = wire.network_id_for_host(self.config, host, self.rng)
        self._setup_crypto(self.config.session_key, network_id)
        self.membership.join(host, now, host_identity)

    def leave(self, now: float) -> None:
        """Leave the mesh gracefully (the host's departure triggers migration)."""
        self.membership.leave(now)

    # ------------------------------------------------------------------ user data
    def _connected_peer(self, index: int, *, data: bool = True) -> Peer:
        peer, leaving = self.links.by_index(index), data and self.membership.leaving  # (protocols still speak)
        if peer is None or not peer.connected or leaving:
            raise KeyError(_unreachable(index, leaving))
        return peer

    def send(self, index: int, data: bytes, *, reliable: bool, now: float) -> None:
        self.outbox.send_data(self._connected_peer(index), data, reliable, now)

    def send_unreliable_now(self, index: int, data: bytes, now: float) -> Datagram | None:
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
        peer = self._connected_peer(index)
        outbox = self.outbox
        if peer.outbox or not outbox.idle():
            outbox.send_data(peer, data, False, now)
            return None
        self.counters["unreliable_sent"] += 1
        return outbox.seal_unreliable(peer, data, now)

    def broadcast_unreliable_now(self, data: bytes, now: float) -> tuple[int, list[Datagram]] | None:
        """:meth:`broadcast` of unreliable *data*, for a caller that sends the result at once (the node).

        Where the broadcast is a packet per station (a version without a
        footer, or a single station) and no output is queued, each station's
        packet is sealed now as :meth:`send_unreliable_now` seals it; returns
        ``(stations, datagrams)``.  Otherwise it does nothing and returns None:
        call :meth:`broadcast`.
        """
        return (0, []) if self.membership.leaving else self.outbox.broadcast_unreliable_now(data, now)

    def send_protocol(self, index: int, proto: Proto, port: int, payload: bytes) -> None:
        """Queue one message of an application-run sub-protocol (no retransmission: the protocol does its own)."""
        self.outbox.enqueue(self._connected_peer(index, data=False), proto, port, payload)

    def broadcast(self, data: bytes, *, reliable: bool, now: float) -> int:
        return 0 if self.membership.leaving else self.outbox.broadcast(data, reliable=reliable, now=now)

    # ------------------------------------------------------------------ queries
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
        """One row per station of the mesh table, with the link's figures."""
        return self.links.station_rows(self.table, self.index)

    def decode_context(self) -> dict[str, object]:
        """Session-file fields `pianode decode` needs besides version, network and key."""
        addresses = [self.local_address, *[e.address for e in self.table.entries()], *self.peers]
        return wire.decode_context(self.config, self.network_id, addresses)

    def statistics(self) -> dict[str, object]:
        return {"station_index": self.index, "host_index": self.table.host_index, "stations": len(self.table),
                **self._tally.report()}  # fmt: skip

    # ------------------------------------------------------------------ timers and output
    def get_timer(self) -> float | None:
        if self.membership.closed:
            return None
        t = self.links.next_deadline()
        for extra in self.membership.deadlines():
            if extra is not None and (t is None or extra < t):
                t = extra
        return t

    def handle_timer(self, now: float) -> None:
        if self.membership.closed or not self.membership.handle_timer(now):
            return
        links = self.links
        for peer in links.due(now):
            if links.on_timer(peer, now):
                self._touched[peer] = None

    def has_output(self) -> bool:
        """Whether :meth:`datagrams_to_send` has something to send right now."""
        return self.outbox.has_output()

    def needs_flush(self) -> bool:
        """Whether a flush (:meth:`datagrams_to_send`, then the events) has anything to do now: output
        queued, events waiting, or a leave that may complete (:meth:`Membership.after_flush`).  After a
        read that queued nothing (a frame clock's read of every station, most ticks) it has none."""
        return self.outbox.has_output() or bool(self._events) or self.membership.leaving

    def datagrams_to_send(self, now: float) -> list[Datagram]:
        out = self.outbox.datagrams_to_send(now)
        if self.codec is not None:
            self.membership.after_flush(now)
        return out

    # ------------------------------------------------------------------ what the parts ask of the session
    def enqueue(self, peer: Peer, proto: Proto, port: int, payload: bytes) -> None:
        self.outbox.enqueue(peer, proto, port, payload)

    def peer_lost(self, peer: Peer, reason: str, now: float) -> None:
        self.membership.peer_lost(peer, reason, now)

    def station_index(self) -> int | None:
        return self.membership.index

    def rtt_ticks(self, now: float) -> int:
        return int(round((now - self.started) * 1_000_000)) & 0xFFFFFFFFFFFFFFFF

    def accepts_stations(self) -> bool:
        return self.membership.accepts_stations()

    def station_connected(self, peer: Peer, now: float) -> None:
        self.membership.on_connected(peer, now)

    def station_refused(self, peer: Peer, reason: str, now: float) -> None:
        self.membership.on_refused(peer, reason, now)

    def emit(self, event: Event) -> None:
        if len(self._events) >= EVENT_QUEUE_LIMIT:
            self._tally.drop(DropReason.QUEUE_FULL)
            return
        self._events.append(event)

    def deliver(self, peer: Peer, data: bytes, *, reliable: bool) -> None:
        if peer.index is None:
            # Data from a newcomer can overtake the update mesh that names it:
            # hold a bounded amount until its index is known.
            if len(peer.held) >= HELD_LIMIT or peer.held_bytes + len(data) > HELD_BYTES:
                self._tally.drop(DropReason.QUEUE_FULL)
            else:
                peer.held.append((data, reliable))
                peer.held_bytes += len(data)
            return
        self.counters["reliable_delivered" if reliable else "unreliable_delivered"] += 1
        if self.data_handler is not None:
            self.data_handler(peer.index, data, reliable)
        else:
            self.emit(DataReceived(peer.index, data, reliable))

    # ------------------------------------------------------------------ input
    def receive_datagrams(self, batch: Sequence[tuple[bytes, tuple[str, int]]], now: float) -> None:
        """:meth:`receive_datagram` for each of *batch* in order (what the driver read in one go);
        a connected peer's stream of frames takes :func:`pianode.mesh.stream.receive_batch`'s shorter way."""
        stream.receive_batch(self, batch, now)

    def receive_datagram(self, data: bytes, addr: tuple[str, int], now: float) -> None:
        codec = self.codec
        if codec is None or self.membership.closed:
            # After leaving, or before creating/joining a mesh: nothing to talk to.
            self._tally.drop(DropReason.CLOSED if self.membership.closed else DropReason.NOT_MEMBER)
            return
        peer = self.peers.get(addr)
        offset = self._group_offset
        footer = offset is not None and len(data) > offset and data[offset] != 0
        if footer and peer is not None:
            self._receive_group(peer, data, addr, now)
            return
        opener = None
        if peer is not None and peer.opener is not None and peer.connected:
            # The peer's stream of unreliable data to us (a game's frames): the codec's opener compares
            # the constant bytes instead of reading the fields (receive_decoded delivers its payload).
            made_for, opener = peer.opener
            if made_for != (codec, peer.index, peer.peer_conn_id, peer.variable_id, peer.constant_id):
                opener = None
        try:
            if footer:
                # A packet with a footer from an unknown address (dropped below
                # unless it is a connection request): decoded through the same cache.
                assert self._nonce_builder is not None
                got: bytes | LoneMessage | Packet = wire.shared_decode(
                    codec, self._codec_key, data, addr[0], self._nonce_builder, self._unreliable_id
                ).packet
            else:
                got = None if opener is None else opener(data)  # type: ignore[assignment]
                if got is None:
                    assert self._decode_lone is not None
                    got = self._decode_lone(data, addr[0])
        except AuthenticationError:
            self._tally.drop(DropReason.BAD_TAG)
            return
        except DecodeError:
            if peer is None and self.handshake.deny_other_version(data, addr, self.session_key, now):
                self._tally.drop(DropReason.OTHER_VERSION)
            else:
                self._tally.drop(DropReason.MALFORMED)
            return
        self.receive_decoded(peer, got, data, addr, now)

    def receive_decoded(self, peer: Peer | None, got: bytes | LoneMessage | Packet, data: bytes, addr: tuple[str, int], now: float) -> None:
        """:meth:`receive_datagram` for *data* once decoded (``codec.last_nonce`` set): what the peer's opener
        gave (its stream's payload, or another message) or ``codec.decode_lone`` or the group decode did."""
        codec = self.codec
        assert codec is not None
        if type(got) is bytes:
            # The opener's: _receive_lone's steps for unreliable data but those its constant bytes took.
            assert peer is not None and peer.index is not None
            if not peer.replay.accept_value(int.from_bytes(codec.last_nonce[-7:], "big")):
                self._tally.drop(DropReason.REPLAYED)
                return
            peer.last_heard = now if peer.replay.advanced else peer.last_heard  # (see Links.fresh)
            peer.packets_received += 1
            counters = self.counters
            counters["packets_received"] += 1
            counters["unreliable_delivered"] += 1  # deliver, inline
            handler = self.data_handler
            if handler is not None:
                handler(peer.index, got, False)
            elif len(self._events) < EVENT_QUEUE_LIMIT:
                self._events.append(DataReceived(peer.index, got, False))
            else:
                self._tally.drop(DropReason.QUEUE_FULL)
            return
        if type(got) is LoneMessage:
            if peer is not None and peer.connected and got.packet_id:
                self._receive_lone(peer, got, now)
                return
            got = codec.packet_of(got)
        assert isinstance(got, Packet)
        self._receive_packet(codec, peer, got, addr, now, data)

    def _receive_packet(
        self, codec: PacketCodec, peer: Peer | None, packet: Packet, addr: tuple[str, int], now: float,
        packet_bytes: bytes = b"",
    ) -> None:
        """A decoded packet that is not a connected peer's lone message: first contact, handshake, bundles."""
        header = packet.header
        if self._legacy:
            # <= 5.6: the HMAC (checked by the codec) covers the header; the replay checks read it.
            codec.last_nonce = legacy.received_nonce(header, peer, now)
        if header.encrypted is self._plain:
            # The codec accepts plaintext 5.7+ packets (captures have them); a
            # node with a session key never does: they carry no tag.  Local play
            # up to 5.6 is plain and HMAC-signed (spec §3.3): there an encrypted one is out of place.
            self._tally.drop(DropReason.UNENCRYPTED)
            return
        links = self.links
        if not links.addressed_to_us(packet.messages, self.membership.index, peer):
            return
        if peer is None:
            own = addr == self.local_address  # never a peer; a stranger may only ask to connect
            if own or not packet.messages or not wire.is_connection_request(self.profile, packet.messages[0]):
                links.stranger(addr, header, self._nonce_builder, now, own=own)  # (dropped, or after a leave)
                return
            if header.version != self.profile.header_version and self.profile.header_version is not None:
                # Another version of the same header layout (5.11-5.17 / 5.18-5.21, 6.16-6.23 / 6.25-6.26 / 6.29-6.30
                # differ only in the version byte, spec §0.3): a version mismatch, answered where the request
                # reads in that version's format; otherwise (NintendoClients e8f85f5 sends 5.18's 4 with 5.11's
                # messages, spec §10.1 item 1) still a mismatch, not bytes out of this version's layout.
                self.handshake.deny_other_version(packet_bytes, addr, self.session_key, now)
                self._tally.drop(DropReason.OTHER_VERSION)
                return
            if links.provisional() >= MAX_PROVISIONAL_PEERS or links.provisional(addr[0]) >= PROVISIONAL_PER_IP:
                self._tally.drop(DropReason.QUEUE_FULL)
                return
        elif not header.packet_id and self.handshake.restarted(peer, packet):
            # A connection request naming a new identity (connection id or variable id):
            # the station at this address started afresh, or this is a datagram it sent
            # someone else, replayed.  Only a confirmed restart forgets the old one.
            if not self.handshake.confirm_restart(peer, nonce_value(codec.last_nonce), now):
                return  # (counted by confirm_restart)
            self.counters["restarts"] += 1
            self.membership.peer_lost(peer, departure.RESTARTED, now)
            peer = None
            links.forget_retired(addr)
        elif not links.accept_header(peer, packet, codec.last_nonce):  # (footer packets: _receive_group)
            return
        if peer is None:
            assert self._nonce_builder is not None
            nonce = self._nonce_builder(header, addr[0])
            if not links.first_contact(addr[0], nonce_value(nonce)):
                return  # the same request from another port of its IP (counted)
            retired = links.retired(addr, now, self.handshake.requester_variable_id(packet))
            if retired is not None and not retired.accept(nonce):
                self._tally.drop(DropReason.REPLAYED)
                return
            peer = links.new_peer(addr, initiator=False, now=now)
            if retired is None:
                peer.replay.accept(nonce)
        peer.last_heard = now if peer.replay.advanced else peer.last_heard  # (see Links.fresh)
        if header.source_timer is not None and header.destination_timer is not None:
            sample = peer.header_timers.on_receive(header.source_timer, header.destination_timer, now)
            if sample is not None:
                peer.rtt.on_sample(sample, now)
        peer.packets_received += 1
        self.counters["packets_received"] += 1
        membership = self.membership
        for message in packet.messages:
            self._dispatch(peer, message.protocol_type, message.protocol_port, message.payload, now)
            if peer.state is PeerState.CLOSED or membership.closed:
                break
        if not peer.connected:
            self._touched[peer] = None  # handshake state changed

    def _receive_lone(self, peer: Peer, lone: LoneMessage, now: float) -> None:
        """A packet of one message from a connected peer, as ``codec.decode_lone`` read it.

        The checks and steps of :meth:`receive_datagram` for a connected peer
        (identity, replay, dispatch), on the named tuple's fields: no header,
        message or packet value is built.  Unreliable data, a game's frames,
        is delivered inline.
        """
        links = self.links
        if not links.same_identity(peer, lone.connection_id, lone.source_variable_id, lone.source_constant_id):
            return
        destination = lone.destination
        if destination:
            own = self.membership.index
            if own is not None and not destination >> own & 1:
                # Sealed for another station (a datagram the peer sent it, replayed to us).
                self._tally.drop(DropReason.NOT_ADDRESSED)
                return
        codec = self.codec
        assert codec is not None
        if not links.fresh(peer, nonce_value(codec.last_nonce), now):
            return
        # (No header timers: only H-B headers carry them, and their M-B messages
        # never come as a LoneMessage; tests/protocols/pia/test_codec_fast_path.py.)
        if lone.protocol_type == self._unreliable_id:
            self.deliver(peer, lone.payload, reliable=False)  # a game's frame: no dispatch
            if peer.index is not None:
                made_for = (codec, peer.index, peer.peer_conn_id, peer.variable_id, peer.constant_id)
                if peer.opener is None or peer.opener[0] != made_for:
                    peer.opener = (made_for, codec.lone_opener(lone, peer.address[0]))
            return
        self._dispatch(peer, lone.protocol_type, lone.protocol_port, lone.payload, now)
        if not peer.connected:
            self._touched[peer] = None  # handshake state changed

    def receive_group_datagram(self, data: bytes, addr: tuple[str, int], now: float) -> None:
        """A datagram heard on the group port (spec §1.6; see :mod:`pianode.mesh.group_listener`).

        A known peer's group packet takes the shortest path; anything else is
        judged as :meth:`receive_datagram` judges it.  A session that has left
        stops listening: others' group packets are not counted as its drops.
        """
        if self.membership.closed or stream.oversized(self, data):
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
        decoded once for all of them (:func:`pianode.mesh.wire.shared_decode`).
        Checks: addressed to us, sent by the peer's identity, not a replay.
        Unreliable data, what games send this way every frame, is delivered
        inline; anything else goes through :meth:`_dispatch`.
        """
        assert self.codec is not None and self._nonce_builder is not None
        try:
            group = wire.shared_decode(
                self.codec, self._codec_key, data, addr[0], self._nonce_builder, self._unreliable_id
            )
        except AuthenticationError:
            self._tally.drop(DropReason.BAD_TAG)
            return
        except DecodeError:
            self._tally.drop(DropReason.MALFORMED)
            return
        packet = group.packet
        header = packet.header
        if not header.encrypted:
            self._tally.drop(DropReason.UNENCRYPTED)
            return
        if self._footer_id not in group.receivers:
            self._tally.drop(DropReason.NOT_ADDRESSED)
            return
        if header.source_variable_id != peer.variable_id:
            self._tally.drop(DropReason.IDENTITY_MISMATCH)
            return
        if not self.links.fresh(peer, group.nonce_value, now):
            return
        counters = self.counters
        index = peer.index
        own = self.membership.index
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
        membership, counters = self.membership, self.counters
        own = membership.index
        for message in messages:
            destination = message.destination
            if destination and own is not None and not destination >> own & 1:
                counters["group_messages_for_others"] += 1
                continue
            self._dispatch(peer, message.protocol_type, message.protocol_port, message.payload, now)
            if peer.state is PeerState.CLOSED or membership.closed:
                break

    def _oversized(self, peer: Peer, count: int) -> None:
        """Reliable messages from *peer* over ``max_message_size`` were dropped: count them, say so once."""
        if not self.drops[DropReason.OVERSIZED.value]:
            _log.info("dropping reliable messages from %s over %d bytes", peer.address, self.config.max_message_size)
        self.drops[DropReason.OVERSIZED.value] += count

    def _dispatch(self, peer: Peer, protocol_type: int, port: int, payload: bytes, now: float) -> None:
        """One message (its protocol type, port and payload) from *peer*, routed to the part that reads it."""
        try:
            proto = self._proto_by_id.get(protocol_type)
            if proto is Proto.UNRELIABLE:
                # The common case first (a game's frames).
                if peer.connected:
                    self.deliver(peer, payload, reliable=False)
                else:
                    self._tally.drop(DropReason.UNEXPECTED)
            elif proto is Proto.STATION:
                self.handshake.on_message(peer, wire.decode_station(self.handshake.profile, payload), now)
            elif not peer.connected or _unacknowledgeable(self, peer, proto, port, payload):
                self._tally.drop(DropReason.UNEXPECTED)
            elif proto is Proto.MESH:
                if port == 1:
                    assert peer.mesh_window is not None
                    self._touched[peer] = None  # an ack is due
                    for segment in peer.mesh_window.receive_message(payload, now):
                        self.membership.on_message(peer, wire.decode_mesh(self.membership.profile, segment), now)
                else:
                    self.membership.on_message(peer, wire.decode_mesh(self.membership.profile, payload), now)
            elif proto is Proto.KEEP_ALIVE:
                self.counters["keepalives_received"] += 1
            elif proto is Proto.RTT:
                self.links.on_rtt(peer, payload, now)
            elif proto is Proto.RELIABLE:
                _reliable_data(self, peer, payload, now)
            elif proto in self.protocol_handlers and peer.index is not None:
                self.protocol_handlers[proto](peer.index, port, payload)
            else:
                self._tally.drop(DropReason.UNEXPECTED)
        except DecodeError:
            self._tally.drop(DropReason.MALFORMED)


def _reliable_data(session: MeshSession, peer: Peer, payload: bytes, now: float) -> None:
    """A message of the Reliable protocol from connected *peer*: what its data window makes whole is
    delivered, and the peer is touched unless the window is left idle.  A window that is not idle owes an
    ack, holds data the ack made room for, or has segments out: drained (and the peer's deadline moved)
    with the next send.  An ack that leaves it idle owes nothing; its retransmission time, left on the
    heap, costs one look when it comes (Links.on_timer)."""
    window = peer.data_window
    assert window is not None
    oversized = window.oversized
    try:
        for segment in window.receive_message(payload, now):
            session.deliver(peer, segment, reliable=True)
    finally:
        if not window.idle():
            session._touched[peer] = None
    if window.oversized != oversized:
        session._oversized(peer, window.oversized - oversized)


def _unacknowledgeable(session: MeshSession, peer: Peer, proto: Proto | None, port: int, payload: bytes) -> bool:
    """Whether a message from connected *peer* is a reliable window's segment with data that we must not
    take (and so not acknowledge): 5.7-6.30 takes window data (the Reliable protocol's, the mesh protocol's
    port 1) only from a station with an index.

    Our ack of what a station without one sent would name no receiver (destination 0, spec §2.5), and
    nothing else under the tag names it (§3.1, §3.2): a key holder that connected without joining sent
    us reliable data, and our acks, replayed to a member from our address, acknowledged there the
    member's own segments to us, which we never received and it then dropped for good.  A station's data
    sent before it has its index here is resent by its window once it has.  (6.32+: the header nonce
    names the receiver, receiver_bound_nonce; <= 5.6: pianode.mesh.legacy's rules.)  The host we join is
    heard before we learn its index when its join response is lost and its update mesh is not (spec §5.4:
    the update follows the response): refused, the join waited on the update's resends, and under loss
    the host dropped us for the update unacknowledged.  We chose that station ourselves; a replay of our
    ack to it finds no member's window to us open yet.
    """
    if peer.index is not None or session._legacy or session.profile.message_format is MessageFormat.G:
        return False
    if peer.address == session.membership.join_host:
        return False
    if proto is Proto.RELIABLE:
        window = peer.data_window
    elif proto is Proto.MESH and port == 1:
        window = peer.mesh_window
    else:
        return False
    return window is not None and window.carries_data(payload)


def _unreachable(index: int, leaving: bool) -> str:
    """Why application data for station *index* is refused: a leaving station sends none (it would
    reach stations that already let it go, and keep its leave from completing)."""
    return "this station is leaving the mesh: it sends no more data" if leaving else f"no connected station with index {index}"


def own_address_refusal(host: tuple[str, int]) -> str:
    """Why a node does not join *host*, its own address: one line."""
    return f"{host[0]}:{host[1]} is this node's own address: join the address of the mesh's host"
