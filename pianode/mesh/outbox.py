"""The outbox: what a session sends, turned into sealed datagrams.

Theory of operation
-------------------
:class:`Outbox` owns everything between "a message for a peer" and "a
datagram for an address":

* each peer's queue of messages for its next packet, the station/mesh
  messages awaiting their ack (resent with backoff, spec §5.3), and the
  reliable windows' segments, drained into packets by
  :meth:`Outbox.datagrams_to_send` for the peers the links marked touched;
* bundling several messages into packets that fit the MTU, the header of
  each packet (:func:`pianode.mesh.wire.make_header`), the node's one
  header-nonce counter (never reused under the key) and the ack ids;
* group packets (5.27+): one packet for several stations with the
  receivers in the footer (spec §1.6), sent once to the group address or
  to each member;
* the fast paths of unreliable data: with nothing queued, a message is
  sealed at once through the peer's sealer (``PacketCodec.lone_sealer``),
  which packs only the packet id, nonce and payload.

What it needs from the rest of the session (the membership's handling of a
peer that never acks) comes through :class:`OutboxHost`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import attrs

from pianode.mesh import departure, legacy, stream, wire
from protocols.pia import session6
from pianode.mesh.config import NodeConfig
from pianode.mesh.links import Links
from pianode.mesh.packet_ids import NONCE_MASK, PacketIdCounter
from pianode.mesh.peer import Peer, Pending, PeerState
from pianode.mesh.replay import receiver_bound_nonce, sender_bound_nonce
from pianode.mesh.reliable import MessageTooLarge, ReliableWindow, SendBufferFull, WindowFailed
from pianode.mesh.stats import DropReason, Tally
from protocols.pia.header import PacketHeader
from protocols.pia.message import Message
from protocols.pia.packet import PacketCodec
from protocols.pia.packet_fast import StreamSealer
from protocols.pia.packet_values import Packet
from protocols.pia.versions import MessageFormat, Proto

__all__ = ["Datagram", "Outbox", "OutboxHost"]

MAX_PENDING = 64  # acked station/mesh messages awaiting their ack, per peer

#: A datagram and the address it goes to.
Datagram = tuple[bytes, tuple[str, int]]


class OutboxHost(Protocol):
    """What the outbox needs from the session that holds it."""

    def peer_lost(self, peer: Peer, reason: str, now: float) -> None:
        """*peer* never acked a message: the membership decides what follows."""

    def station_index(self) -> int | None:
        """This station's index (None: not in a mesh yet); M-A messages and H-A headers carry it."""


class Outbox:
    """Everything one session sends; see the module docstring."""

    def __init__(
        self,
        config: NodeConfig,
        local_address: tuple[str, int],
        variable_id: int,
        message_source_id: int | None,
        rng: random.Random,
        links: Links,
        tally: Tally,
        host: OutboxHost,
    ) -> None:
        self.config = config
        self.profile = profile = config.profile
        self.local_address = local_address
        self._source_ip = local_address[0]
        #: The ids this station seals into every packet: its variable id (H-E+ headers, group
        #: packets) and its constant id as the messages' source (M-B..M-E; None for the others).
        self.variable_id = variable_id
        self.message_source_id = message_source_id
        self._links = links
        self._tally = tally
        self._counters = tally.counters
        self._host = host
        self.protocol_ids: dict[Proto, int] = session6.protocol_ids(profile)
        self._unreliable_id = self.protocol_ids[Proto.UNRELIABLE]
        self._bitmap_flag = profile.bitmap_flag
        #: <= 5.6 (pianode.mesh.legacy): H-A headers, M-A messages carrying our station index.
        self._legacy = legacy.is_legacy(profile)
        self._encrypted = not legacy.plain_packets(profile, config.network)
        self._source_index = profile.message_format is MessageFormat.A
        #: Group mode (5.27+ footer, one broadcast per group packet): a reliable
        #: broadcast goes out as one group packet too (see broadcast).
        #: It needs each message's destination bits, which M-G (6.32+) no longer has.
        self._group_mode = config.group_broadcast is not None and profile.footer == "plain"
        #: Unreliable broadcasts go out as one group packet wherever a footer exists (plain to 6.30,
        #: encrypted with the body from 6.32: spec §1.6); M-G messages carry no destination (spec §2.1).
        self._group_unreliable = profile.footer != "none"
        self._group_destination = profile.message_format is not MessageFormat.G
        self._group_ids = PacketIdCounter()
        #: The longest unreliable message a datagram of ``mtu`` bytes carries (see fit_unreliable).
        self.max_unreliable = config.mtu - wire.UNRELIABLE_ROOM
        # Random start well below 2**56, so the 7 bytes replay checks read never wrap.
        self._nonce_counter = rng.getrandbits(48)
        #: 6.32+: each header nonce names its receiver (pianode.mesh.replay.receiver_bound_nonce), the
        #: counter in 40 bits, started below 2**39 so that it does not wrap either.
        self._bind_receiver = profile.message_format is MessageFormat.G
        #: 6.16-6.30: each header nonce names us, its sender (pianode.mesh.replay.sender_bound_nonce), alike.
        self._bind_sender = session6.is_pia6(profile) and profile.message_format is MessageFormat.F
        if self._bind_receiver or self._bind_sender:
            self._nonce_counter >>= 9
        self._ack_counter = rng.randrange(1, 1 << 32)
        self.codec: PacketCodec | None = None
        self._ready: list[Datagram] = []
        self._group_outbox: list[Message] = []
        #: Called with every datagram we send: (data, src, dst, now).  For --record.
        self.tap: Callable[[bytes, tuple[str, int], tuple[str, int], float], None] | None = None

    # ------------------------------------------------------------------ state
    def has_output(self) -> bool:
        """Whether :meth:`datagrams_to_send` has something to send right now."""
        return bool(self._links.touched or self._group_outbox or self._ready)

    def idle(self) -> bool:
        """Nothing queued anywhere: a message may be sealed at once without overtaking any."""
        return not (self._links.touched or self._ready or self._group_outbox) and self.codec is not None

    def add_ready(self, data: bytes, addr: tuple[str, int]) -> None:
        """A datagram sealed elsewhere (a denial in another version's format), sent with the next batch."""
        self._ready.append((data, addr))

    # ------------------------------------------------------------------ messages
    def message(self, peer: Peer, proto: Proto, port: int, payload: bytes) -> Message:
        message = wire.make_message(self.profile, self.protocol_ids, self.message_source_id, peer, proto, port, payload)
        if self._source_index:
            # M-A (<= 5.4): the sender's station index, 253 before it has one (spec §2.1, §2.6), and
            # the source id of pianode.mesh.legacy.message_source_id.
            index = self._host.station_index()
            return attrs.evolve(
                message, source_station_index=253 if index is None else index, source_constant_id=self.message_source_id
            )
        return message

    def enqueue(self, peer: Peer, proto: Proto, port: int, payload: bytes) -> None:
        peer.outbox.append(self.message(peer, proto, port, payload))
        self._links.touched[peer] = None

    def next_header_nonce(self, receiver_variable_id: int = 0) -> bytes:
        """The next 8-byte header nonce: one counter per node, never reused under the key (6.32+: for
        the station of *receiver_variable_id*, 0 for a group or an unknown one; see :meth:`_hn`)."""
        self._nonce_counter = (self._nonce_counter + 1) & NONCE_MASK
        return self._hn(receiver_variable_id, self._nonce_counter)

    def _hn(self, receiver_variable_id: int, counter: int) -> bytes:
        """The header nonce of *counter*: the counter itself, or in 6.x the counter and the receiver (6.32+)
        or the sender (6.16-6.30)."""
        if self._bind_receiver:
            return receiver_bound_nonce(receiver_variable_id, counter)
        if self._bind_sender:
            return sender_bound_nonce(self.variable_id, counter)
        return counter.to_bytes(8, "big")

    def _next_ack_id(self) -> int:
        self._ack_counter = (self._ack_counter + 1) & 0xFFFFFFFF or 1
        return self._ack_counter

    def queue_acked(
        self, peer: Peer, proto: Proto, port: int, build: Callable[[int], bytes], now: float, kind: str = ""
    ) -> int:
        """Queue a message that carries an ack id (built by *build*), resent until the peer acks it."""
        if len(peer.pending) >= MAX_PENDING:
            self._tally.drop(DropReason.QUEUE_FULL)
            return 0
        ack_id = self._next_ack_id()
        peer.pending[ack_id] = Pending(proto, port, build(ack_id), now, self.config.resend_interval, kind=kind)
        self._links.touched[peer] = None
        return ack_id

    def window_send(self, peer: Peer, window: ReliableWindow, payload: bytes, now: float) -> bool:
        """Queue on a reliable window; a full or failed window counts, never raises into the receive path."""
        try:
            window.send(payload, now)
        except (SendBufferFull, WindowFailed):
            self._counters["window_full"] += 1
            return False
        return True

    # ------------------------------------------------------------------ user data
    def fit_unreliable(self, data: bytes) -> None:
        """Refuse unreliable *data* that one datagram of the node's ``mtu`` cannot carry.

        Unreliable data is never split (spec §5.8), and a console's Pia receive buffer is 1472
        bytes (spec §1.8): a longer datagram would be lost at every receiver (a node takes
        ``MAX_DATAGRAM`` and counts the rest as ``oversized``), so the sender is told instead.
        """
        if len(data) > self.max_unreliable:
            raise MessageTooLarge(
                f"unreliable message of {len(data)} bytes: one datagram of the node's mtu ({self.config.mtu} bytes) "
                f"carries at most {self.max_unreliable}; send it reliably (the window splits it)"
            )

    def send_data(self, peer: Peer, data: bytes, reliable: bool, now: float) -> None:
        if reliable:
            assert peer.data_window is not None
            peer.data_window.send(data, now)
            self._links.touched[peer] = None
            self._counters["reliable_sent"] += 1
        else:
            self.fit_unreliable(data)
            self.enqueue(peer, Proto.UNRELIABLE, 0, data)
            self._counters["unreliable_sent"] += 1

    def broadcast(self, data: bytes, *, reliable: bool, now: float) -> int:
        if not reliable:
            self.fit_unreliable(data)
        links = self._links
        members = links.members()
        if (
            not reliable
            and self._group_unreliable
            and len(members) > 1
            and len(data) <= self.max_unreliable - 2 * len(links.view()[2])  # else a packet each (fits)
        ):
            # One packet for everyone, its footer naming the receivers' variable
            # ids (spec §1.6): sealed once, then handed to each member.
            if self._group_destination:
                message = Message(self._unreliable_id, 0, data, self._bitmap_flag, links.view()[1])
            else:
                message = Message(self._unreliable_id, 0, data)
            self._group_outbox.append(message)
            self._counters["unreliable_sent"] += len(members)
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
                    self._group_outbox.append(self.message(peer, Proto.RELIABLE, 0, segment))
                links.touched[peer] = None  # its retransmission timer is scheduled with the flush
            self._counters["reliable_sent"] += len(members)
            return len(members)
        for peer in members:
            self.send_data(peer, data, reliable, now)
        return len(members)

    def broadcast_unreliable_now(self, data: bytes, now: float) -> tuple[int, list[Datagram]] | None:
        """See :meth:`pianode.mesh.session.MeshSession.broadcast_unreliable_now`."""
        self.fit_unreliable(data)
        if not self.idle():
            return None
        members = self._links.members()
        if len(members) > 1 and self._group_unreliable:
            return None  # one group packet for all of them (see broadcast)
        self._counters["unreliable_sent"] += len(members)
        return len(members), self.seal_unreliable_each(members, data, now)

    def seal_unreliable(self, peer: Peer, data: bytes, now: float) -> Datagram:
        """The next packet to *peer*, of one unreliable message, through the peer's sealer."""
        self.fit_unreliable(data)
        return self.seal_unreliable_each((peer,), data, now)[0]

    def seal_unreliable_each(self, peers: Sequence[Peer], data: bytes, now: float) -> list[Datagram]:
        """The next packet to each of *peers*, of one unreliable message (*data*), through each peer's sealer.

        A game's frame to every station: per packet only the packet id, the
        header nonce and the seal differ; the counting and the tap are done
        once for the batch.  A peer whose sealer is missing or stale (made for
        another codec or other ids) gets a new one, made from the packet the
        general codec seals.
        """
        inline = stream.seal_frames(self, peers, data, now)
        if inline is not None:
            return inline
        codec = self.codec
        assert codec is not None
        own_vid, own_source = self.variable_id, self.message_source_id
        counter = self._nonce_counter
        bind = self._bind_receiver
        # 6.16-6.30: our own variable id in every header nonce (the receiver's from 6.32).
        bound_id = own_vid if self._bind_sender else None
        out: list[Any] = []
        append = out.append
        staged: list[tuple[int, StreamSealer, int, bytes, tuple[bytes, bytes]]] = []
        for peer in peers:
            # The packets differ only in id, header nonce and payload while these hold.
            made_for = (codec, peer.index, peer.variable_id, peer.own_conn_id, own_vid, own_source)
            sealer = peer.sealer
            if sealer is not None and sealer[0] == made_for and sealer[1] is not None:
                counter = (counter + 1) & NONCE_MASK
                seal = sealer[1]
                # self._hn(peer.variable_id, counter), inline: this loop runs once per station a frame
                if bind:
                    hn = receiver_bound_nonce(peer.variable_id, counter)
                elif bound_id is not None:
                    hn = sender_bound_nonce(bound_id, counter)
                else:
                    hn = counter.to_bytes(8, "big")
                if seal.seal_many is None:
                    append((seal(peer.tx_ids.next(), hn, data), peer.address))
                else:
                    # Sealed below with the others in one AEAD call; its place in *out* is kept.
                    pid = peer.tx_ids.next()
                    prepared = seal.prepare(pid, hn, data)
                    if prepared is None:
                        append((seal(pid, hn, data), peer.address))
                    else:
                        staged.append((len(out), seal, pid, hn, prepared))
                        append(peer.address)
            else:
                self._nonce_counter = counter
                if sealer is not None and sealer[0] == made_for:  # the codec has no sealer for this shape
                    append(self._packet_unsent(peer, (self.message(peer, Proto.UNRELIABLE, 0, data),), now))
                else:
                    message = self.message(peer, Proto.UNRELIABLE, 0, data)
                    header = self._header(peer, now)
                    peer.sealer = (made_for, codec.lone_sealer(header, message, self._source_ip))
                    append((codec.encode(Packet(header, (message,)), self._source_ip), peer.address))
                counter = self._nonce_counter
            peer.packets_sent += 1
            peer.last_sent = now
        self._nonce_counter = counter
        if staged:
            _seal_staged(out, staged, len(data))
        self._counters["packets_sent"] += len(out)
        tap = self.tap
        if tap is not None:
            for datagram, address in out:
                tap(datagram, self.local_address, address, now)
        return out

    # ------------------------------------------------------------------ datagrams
    def datagrams_to_send(self, now: float) -> list[Datagram]:
        out, self._ready = self._ready, []
        if self.codec is None:
            return out
        if self._group_outbox:
            out.extend(self._flush_group(now))
        links = self._links
        touched = links.touched
        while touched:
            batch = list(touched)
            touched.clear()
            for peer in batch:
                if peer.state is PeerState.CLOSED:
                    continue
                out.extend(self.drain(peer, now))
                links.reschedule(peer)
        return out

    def drain(self, peer: Peer, now: float) -> list[Datagram]:
        """Everything due to *peer* now, as packets: acked messages due again, queued messages, window segments."""
        # Handshake messages go first in the bundle: the receiver must see the
        # connection response before data that needs the connection.
        due: list[Message] = []
        for ack_id, p in list(peer.pending.items()) if peer.pending else ():
            if now >= p.next_send:
                p.tries += 1
                if p.tries > 1:
                    self._counters["retransmissions"] += 1
                if p.tries > wire.MAX_TRIES:
                    del peer.pending[ack_id]
                    self._host.peer_lost(peer, departure.unacknowledged_message(p.kind or p.proto.value, wire.MAX_TRIES), now)
                    return []
                due.append(self.message(peer, p.proto, p.port, p.payload))
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
                    peer.outbox.append(self.message(peer, proto, port, segment))
        if peer.outbox:
            return self._flush(peer, now)
        return []

    def drain_now(self, peer: Peer, now: float) -> None:
        """Send what is owed to *peer* with the next batch (before the session forgets it)."""
        if self.codec is not None:
            self._ready.extend(self.drain(peer, now))

    def _flush(self, peer: Peer, now: float) -> list[Datagram]:
        messages, peer.outbox = peer.outbox, []
        if len(messages) == 1:
            # A packet of one message (an ack, a segment, an RTT message), by the peer's stream plan.
            sealed = stream.seal_lone(self, peer, messages[0], now)
            if sealed is not None:
                return [self._sent(peer, sealed, now)]
        # One message is one packet whatever its size; only several need bundling.
        bundles = (messages,) if len(messages) == 1 else wire.bundle(self.profile, messages, self.config.mtu)
        return [self._packet(peer, tuple(bundle), now) for bundle in bundles]

    def _header(self, peer: Peer, now: float) -> PacketHeader:
        if self._legacy:
            return legacy.make_header(self.profile, peer, self._host.station_index(), self._encrypted, now)
        return wire.make_header(self.profile, peer, self.variable_id, self.next_header_nonce(peer.variable_id), now)

    def _packet(self, peer: Peer, messages: tuple[Message, ...], now: float) -> Datagram:
        """Seal *messages* into the next packet to *peer* and count it as sent."""
        return self._sent(peer, self._packet_unsent(peer, messages, now)[0], now)

    def _packet_unsent(self, peer: Peer, messages: tuple[Message, ...], now: float) -> Datagram:
        """Seal *messages* into the next packet to *peer* (not counted yet)."""
        assert self.codec is not None
        return self.codec.encode(Packet(self._header(peer, now), messages), self._source_ip), peer.address

    def _sent(self, peer: Peer, data: bytes, now: float) -> Datagram:
        """Count *data*, the next packet to *peer*, as sent."""
        peer.packets_sent += 1
        peer.last_sent = now
        self._counters["packets_sent"] += 1
        if self.tap is not None:
            self.tap(data, self.local_address, peer.address, now)
        return data, peer.address

    def _flush_group(self, now: float) -> list[Datagram]:
        assert self.codec is not None
        messages, self._group_outbox = self._group_outbox, []
        members, _, footer = self._links.view()
        if not members:
            return []
        group = self.config.group_broadcast
        # A frame's one message needs no bundling; several are split to fit the MTU.
        bundles = (messages,) if len(messages) == 1 else wire.bundle(self.profile, messages, self.config.mtu - 2 * len(footer))
        out = []
        for bundle in bundles:
            header = wire.group_header(self.profile, self.variable_id, self._group_ids.next(), self.next_header_nonce())
            data = self.codec.encode(Packet(header, tuple(bundle), footer), self._source_ip)
            self._counters["group_packets_sent"] += 1
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
            self._counters["packets_sent"] += len(members)
        return out


def _seal_staged(out: list[Any], staged: list[tuple[int, StreamSealer, int, bytes, tuple[bytes, bytes]]], size: int) -> None:
    """Seal the packets :meth:`Outbox.seal_unreliable_each` staged, in one AEAD call, into their places in *out*.

    Every staged sealer was made for the same codec, so one key seals them all
    (``StreamSealer.seal_many``); each place holds the peer's address until then.
    """
    seal_many = staged[0][1].seal_many
    assert seal_many is not None
    sealed = seal_many([p[4][0] for p in staged], [p[4][1] for p in staged])
    for (i, seal, packet_id, hn, _), box in zip(staged, sealed, strict=True):
        out[i] = (seal.assemble(packet_id, hn, size, box), out[i])
