"""The link registry: every peer of a session, their liveness, timers and the checks on what they send.

Theory of operation
-------------------
:class:`Links` owns the session's peers (one :class:`~pianode.mesh.peer.Peer`
per remote address) and what follows from them:

* **Registry.** New peers, closing one (its replay memory is kept a while,
  so a recorded datagram from a departed station cannot open a new
  connection), lookup by station index, and the *group view*: the members a
  broadcast reaches, their destination bits and the footer of a group
  packet, worked out again only after :meth:`Links.membership_changed`.
* **Timers.** Each peer has one deadline (the earliest of its
  retransmissions, window timers, keep-alive, RTT probe and silence
  timeout) in a heap, and a peer whose output may have changed is
  *touched*.  So a datagram or a timer costs work for the peers it
  concerns, not for the whole mesh.  :meth:`Links.on_timer` runs a due
  peer's timers: silence and failed windows end the link, keep-alives fill
  silence, RTT probes are spaced so a large mesh never probes in bursts.
* **Checks** on an authenticated packet from a known peer: it names the
  peer (connection id or variable id, and a message's constant id), and its
  GCM nonce was not seen before (spec §3.1: the packet id is not
  authenticated, the nonce is).

What a link needs from the rest of the session (a message queued to the
peer, the membership's handling of a lost peer, the RTT clock) comes through
:class:`LinkHost`, which the session implements.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import logging
import math
import random
from collections.abc import Callable
from typing import Protocol, TypeVar

from pianode.mesh import departure, legacy, wire
from pianode.mesh.config import NodeConfig
from pianode.mesh.peer import Peer, PeerState, StationStats
from pianode.mesh.replay import (
    NonceReplayFilter,
    ReceiverBoundReplayFilter,
    SenderBoundReplayFilter,
)
from pianode.mesh.rtt import HeaderTimers
from pianode.mesh.stats import DropReason, Tally
from pianode.mesh.table import MeshTable
from protocols.pia import session6
from protocols.pia.header import PacketHeader
from protocols.pia.message import Message
from protocols.pia.packet_values import Packet
from protocols.pia.versions import MessageFormat, Proto

_log = logging.getLogger("pianode.mesh")

__all__ = ["GroupView", "LinkHost", "Links"]

RETIRED_REPLAY_LIMIT = 256  # departed peers whose replay memory is kept
#: Of them, from one IP: a key holder can open and end connections from every port of its own IP, and
#: its churn must push out only its own IP's memory, never a departed station's elsewhere (whose captured
#: datagrams would then pass against the station that comes back at its address).  A mesh's stations
#: (32 at most, spec §2.5) may share an IP: each keeps its place.
RETIRED_PER_IP = 32
#: First-contact nonces remembered, by source IP: the nonce binds the sender's IP but not its
#: port, so one captured connection request authenticates from every port of that IP.
FIRST_CONTACTS_LIMIT = 4096
#: Of them, from one IP: a key holder's churn (fresh connection requests from its own IP) pushes out
#: only its own IP's, never another's (whose captured request would then open a provisional peer).
#: A legitimate IP makes a first contact per connection it opens: a few, 32 stations at most.
FIRST_CONTACTS_PER_IP = 64
PROVISIONAL_PER_IP = 8  # peers without a station index from one IP
#: A fence reaches this far beyond the nonce values an earlier incarnation was seen to use: its counter is
#: one per node (spec §3.2: "one counter per socket" in NC-2020, pianode's likewise), so what it sent others
#: after its last packet to us, or sent us and we never received, lies above them.  2**24 packets is hours
#: of a busy station's traffic; a new incarnation's random start falls in it about once in 2**23 restarts.
FENCE_MARGIN = 1 << 24
FENCES_PER_ADDRESS = 4  # earlier incarnations fenced off per address
FENCED_ADDRESSES = 1024
#: Our RTT requests to one peer remembered until answered (see Links.ask_rtt): a probe every
#: rtt_interval and, in 6.32+, one per keep-alive interval, well within a station timeout.
RTT_ASKED = 16


_V = TypeVar("_V")


def remember(memory: collections.OrderedDict[tuple[str, int], _V], addr: tuple[str, int], value: _V, limit: int) -> None:
    """Keep *value* for *addr* in *memory*, newest last, within *limit* addresses and
    :data:`RETIRED_PER_IP` of one IP: past its IP's share, the oldest of *addr*'s own IP goes;
    past *limit*, the oldest of all (see :data:`RETIRED_PER_IP`).  Called as peers close: a scan."""
    memory[addr] = value
    memory.move_to_end(addr)
    if len(memory) <= RETIRED_PER_IP:
        return
    same = [a for a in memory if a[0] == addr[0]]
    if len(same) > RETIRED_PER_IP:
        del memory[same[0]]
    elif len(memory) > limit:
        memory.popitem(last=False)


#: (members, destination bitmap, footer) of group packets (spec §1.6).
GroupView = tuple[tuple[Peer, ...], int, tuple[int, ...]]


class LinkHost(Protocol):
    """What the links need from the session that holds them."""

    def enqueue(self, peer: Peer, proto: Proto, port: int, payload: bytes) -> None:
        """Queue one message for *peer*'s next packet."""

    def peer_lost(self, peer: Peer, reason: str, now: float) -> None:
        """*peer* fell silent or its window gave up: the membership decides what follows."""

    def rtt_ticks(self, now: float) -> int:
        """The RTT protocol's clock at *now* (microseconds since the session started)."""


class Links:
    """Every peer of one session; see the module docstring."""

    def __init__(
        self, config: NodeConfig, rng: random.Random, started: float, tally: Tally, host: LinkHost,
        own_variable_id: int = 0,
    ) -> None:
        self.config = config
        self.profile = config.profile
        self._rng = rng
        self._started = started
        self._tally = tally
        self._host = host
        self._has_conn_id = self.profile.has_connection_id
        self._has_keepalive = Proto.KEEP_ALIVE in self.profile.protocol_ids
        #: <= 5.6: a station whose own index is still 253 sends connection id 1 (pianode.mesh.legacy).
        self._conn_ids_any = (0, 1) if legacy.is_legacy(self.profile) else (0,)
        self._legacy = legacy.is_legacy(self.profile)
        #: 6.32+: header nonces name their receiver (pianode.mesh.replay.receiver_bound_nonce); ours is this.
        self._bound_to = own_variable_id if self.profile.message_format is MessageFormat.G else None
        #: 6.16-6.30: header nonces name their sender (pianode.mesh.replay.sender_bound_nonce).
        self._sender_bound = session6.is_pia6(self.profile) and self.profile.message_format is MessageFormat.F
        self._rtt_port = legacy.rtt_port(self.profile)
        self._own_variable_id = own_variable_id
        #: 6.x: no two stations we talk to share a 16-bit variable id (see variable_id_taken).
        self._unique_variable_ids = session6.is_pia6(self.profile)
        #: M-A messages carry source constant id 0 (pianode.mesh.legacy): nothing to check there.
        self._message_ids = self.profile.message_format is not MessageFormat.A
        self._never_joined = config.join_timeout + config.station_timeout
        self._keepalive_interval = config.keepalive_interval
        self.peers: dict[tuple[str, int], Peer] = {}
        #: Peers whose output may have changed since the last flush (a dict: ordered, no duplicates).
        self.touched: dict[Peer, None] = {}
        self._by_index: dict[int, Peer] = {}
        #: Departed peers' replay memory: (filter, kept until, the departed station's variable id).
        self._retired_replay: collections.OrderedDict[tuple[str, int], tuple[NonceReplayFilter, float, int]] = (
            collections.OrderedDict()
        )
        #: Stations that left cleanly, until when what they sent before their leave may still arrive.
        self._left: collections.OrderedDict[tuple[str, int], float] = collections.OrderedDict()
        self._timers: list[tuple[float, int, Peer]] = []
        self._timer_seq = itertools.count()
        self._next_rtt_slot = -math.inf  # see rtt_slot
        #: First-contact nonce values by IP, the IP that made one last at the end (see first_contact).
        self._first_contacts: dict[str, collections.OrderedDict[int, None]] = {}
        self._first_contact_count = 0
        #: Nonce values earlier incarnations of the station at an address used (see forget_retired).
        self._fences: collections.OrderedDict[tuple[str, int], tuple[tuple[int, int], ...]] = collections.OrderedDict()
        #: None = work it out again (see membership_changed, called wherever a peer's membership changes).
        self.group_view: GroupView | None = None

    # ------------------------------------------------------------------ registry
    def new_peer(self, addr: tuple[str, int], *, initiator: bool, now: float) -> Peer:
        peer = Peer(
            address=addr,
            own_conn_id=self._rng.randrange(2, 256),
            initiator=initiator,
            created=now,
            last_heard=now,
            header_timers=HeaderTimers(self._started),
        )
        if self._legacy:
            peer.replay = legacy.PacketIdReplayFilter()
        elif self._bound_to is not None:
            peer.replay = ReceiverBoundReplayFilter(self._bound_to)
        elif self._sender_bound:
            peer.replay = SenderBoundReplayFilter(peer)
        else:
            peer.replay = NonceReplayFilter(floor=True)
        retired = self._retired_replay.pop(addr, None)
        self._left.pop(addr, None)
        if retired is not None and now < retired[1]:
            peer.replay = retired[0]
            if isinstance(peer.replay, SenderBoundReplayFilter):
                peer.replay.owner = peer
        peer.replay.fences = self._fences.get(addr, ())
        peer.mesh_window = wire.new_window(self.profile, self.config, now)
        peer.data_window = wire.new_window(self.profile, self.config, now)
        self.peers[addr] = peer
        self.membership_changed()
        return peer

    def close(self, peer: Peer, *, left: float | None = None) -> None:
        """Forget *peer*; *left*: the time it left cleanly (its leave request), see :meth:`stranger`."""
        peer.state = PeerState.CLOSED
        peer.connected = False
        self.membership_changed()
        peer.pending.clear()
        if self.peers.pop(peer.address, None) is peer:
            # Keep its replay memory: a recorded datagram from a departed
            # station must not open a new connection (bounded).
            # For two station timeouts: a station restarted at the same
            # address starts a new counter, which may be lower.
            until = peer.last_heard + 2 * self.config.station_timeout
            if isinstance(peer.replay, legacy.PacketIdReplayFilter):
                peer.replay.restart()  # a next connection: judged at first contact, its clock anew
            remember(self._retired_replay, peer.address, (peer.replay, until, peer.variable_id), RETIRED_REPLAY_LIMIT)
            if left is not None:
                # A station's leave request can arrive before datagrams it sent earlier (a
                # relay's milliseconds of transit, a reordering link) and its data after
                # it (sent before our ack reached it): one station timeout of grace.
                remember(self._left, peer.address, left + self.config.station_timeout, RETIRED_REPLAY_LIMIT)

    def stranger(
        self, addr: tuple[str, int], header: PacketHeader, nonce_of: Callable[[PacketHeader, str], bytes] | None,
        now: float, *, own: bool,
    ) -> None:
        """An authenticated packet, not a connection request, from an address that is no peer (*own*:
        the node's own address): a drop, unless the station there left cleanly a moment ago and the
        packet is new (not a replay), when it is what was in flight as it left: counted, not a drop."""
        until = None if own else self._left.get(addr)
        if until is None or now >= until or nonce_of is None:
            self._tally.drop(DropReason.OWN_ADDRESS if own else DropReason.NOT_MEMBER)
            return
        retired = self.retired(addr, now)
        if retired is not None and not retired.accept(nonce_of(header, addr[0])):
            self._tally.drop(DropReason.REPLAYED)
            return
        self._tally.counters["after_leave"] += 1

    def retired(self, addr: tuple[str, int], now: float, variable_id: int | None = None) -> NonceReplayFilter | None:
        """The replay memory of a departed peer at *addr*, while it is kept, for a station there
        that names *variable_id* (see :meth:`forget_other_identity`)."""
        self.forget_other_identity(addr, variable_id)
        retired = self._retired_replay.get(addr)
        if retired is None or now >= retired[1]:
            return None
        return retired[0]

    def forget_other_identity(self, addr: tuple[str, int], variable_id: int | None) -> None:
        """A station at *addr* that names *variable_id*, not the variable id of the station that
        departed from there, is a new incarnation (a restart on the same port): its header nonce
        counter starts anew, anywhere (how it is generated is undocumented, spec §10.3; NC-2020
        starts each socket's at a random 64-bit value, spec §9), so the departed station's replay
        memory would refuse half of them for two station timeouts.  It is forgotten, as on a
        restart the host confirms; a recorded datagram of the departed station still names the
        departed identity and is still judged by it.  Unknown ids (None, 0) change nothing."""
        retired = self._retired_replay.get(addr)
        if retired is not None and variable_id and retired[2] and variable_id != retired[2]:
            self.forget_retired(addr)

    def forget_retired(self, addr: tuple[str, int]) -> None:
        """The station at *addr* is a new incarnation (a confirmed restart, or a new identity there): its
        predecessor's replay memory no longer judges it, but the values the predecessor used are fenced
        off for every later peer at *addr*.  Without the fence a datagram the predecessor sent (its leave
        request, its data), replayed with the new identity written into the header (which the tag does
        not cover, spec §3.1; a 6.x nonce names only the IP, §3.2), passed as new whenever the new
        counter started below the old one, and its leave request evicted the new station.  Up to 5.6 the
        replay checks read per-connection packet ids, which every connection starts at 1 (§1.4): the
        connection id, which the HMAC covers, tells incarnations apart there instead."""
        retired = self._retired_replay.pop(addr, None)
        self._left.pop(addr, None)
        span = None if retired is None or self._legacy else retired[0].span()
        if span is not None:
            fences = (*self._fences.pop(addr, ()), (span[0] - FENCE_MARGIN, span[1] + FENCE_MARGIN))
            remember(self._fences, addr, fences[-FENCES_PER_ADDRESS:], FENCED_ADDRESSES)

    def provisional(self, ip: str | None = None) -> int:
        """How many peers (from *ip*, or from anywhere) have no station index yet."""
        return sum(1 for p in self.peers.values() if p.index is None and (ip is None or p.address[0] == ip))

    def first_contact(self, ip: str, value: int) -> bool:
        """Record the nonce (*value*) of a first contact from *ip*; False if one from that IP,
        on any port, carried it before (a replay: counts a drop)."""
        memory = self._first_contacts
        seen = memory.pop(ip, None)
        if seen is None:
            seen = collections.OrderedDict()
        memory[ip] = seen  # the IP heard from last goes last
        if value in seen:
            self._tally.drop(DropReason.REPLAYED)
            return False
        seen[value] = None
        if len(seen) > FIRST_CONTACTS_PER_IP:
            seen.popitem(last=False)  # past its share an IP pushes out its own oldest
        elif self._first_contact_count >= FIRST_CONTACTS_LIMIT:
            # Past the limit, the oldest of the IP heard from longest ago: FIRST_CONTACTS_LIMIT /
            # FIRST_CONTACTS_PER_IP IPs must churn to push out an IP's memory.
            quiet = next(iter(memory))
            memory[quiet].popitem(last=False)
            if not memory[quiet]:
                del memory[quiet]
        else:
            self._first_contact_count += 1
        return True

    def by_index(self, index: int) -> Peer | None:
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

    def members(self) -> tuple[Peer, ...]:
        """Connected peers with a station index: whom a broadcast reaches."""
        view = self.group_view
        if view is None:
            view = self.group_view = self.work_out_group_view()
        return view[0]

    def view(self) -> GroupView:
        view = self.group_view
        if view is None:
            view = self.group_view = self.work_out_group_view()
        return view

    def work_out_group_view(self) -> GroupView:
        members = tuple(p for p in self.peers.values() if p.connected and p.index is not None)
        destination = 0
        for p in members:
            assert p.index is not None
            destination |= 1 << p.index
        # Group packets name their receivers by the low 16 bits of their variable ids (spec §1.6).
        footer = tuple(sorted({p.variable_id & 0xFFFF for p in members}))
        return members, destination, footer

    def membership_changed(self) -> None:
        """A peer connected, closed, or got an index or identity: the group view is stale."""
        self.group_view = None

    def learn(self, peer: Peer, constant_id: int, variable_id: int) -> None:
        peer.constant_id = constant_id
        peer.variable_id = variable_id
        self.membership_changed()

    def variable_id_taken(self, peer: Peer) -> bool:
        """6.x: whether *peer*'s variable id is ours or a member's at another address.

        The 16-bit variable id is how a 6.x footer names a receiver (spec §1.6) and, from 6.32, how a
        header nonce does (pianode.mesh.replay.receiver_bound_nonce): what we sealed for a station that
        names a member's, replayed to the member from our address, would be taken there as ours to it
        (our acks of its data among them, which make the member drop what it sent us and we never got).
        """
        if not self._unique_variable_ids or not peer.variable_id:
            return False
        tag = peer.variable_id & 0xFFFF
        if tag == self._own_variable_id & 0xFFFF:
            return True
        return any(
            p is not peer and p.index is not None and p.variable_id & 0xFFFF == tag and p.state is not PeerState.CLOSED
            for p in self.peers.values()
        )

    def set_index(self, peer: Peer, index: int | None) -> None:
        peer.index = index
        self.membership_changed()

    def set_connected(self, peer: Peer, now: float) -> bool:
        """Mark *peer* connected and start its keep-alive and RTT timers; False if it already was."""
        if peer.connected:
            return False
        peer.state = PeerState.CONNECTED
        peer.connected = True
        peer.connected_at = now
        self.membership_changed()
        peer.next_keepalive = now + self.config.keepalive_interval
        peer.next_rtt = self.rtt_slot(now, now)
        self._tally.counters["connections"] += 1
        return True

    def station_rows(self, table: MeshTable, own_index: int | None) -> list[StationStats]:
        """One row per entry of *table*, with the figures of the link to it."""
        rows = []
        for entry in table.entries():
            is_self = entry.index == own_index
            peer = None if is_self else self.by_index(entry.index)
            rows.append(
                StationStats(
                    index=entry.index,
                    constant_id=entry.constant_id,
                    variable_id=entry.variable_id,
                    address=entry.address,
                    is_host=entry.index == table.host_index,
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

    # ------------------------------------------------------------------ checks
    def addressed_to_us(self, messages: tuple[Message, ...], own_index: int | None, peer: Peer | None = None) -> bool:
        """Whether every message names us among its receivers (or names none); counts a drop if not.

        The destination bits are inside the ciphertext, so they say where the sender meant
        the datagram to go: one it sealed for another station, replayed to us from its
        address, is refused here (the header's ids are not authenticated, spec §3.1).
        A message to a station without an index names none (destination 0, spec §2.5): one
        that ends the link (a disconnection) counts from a member *peer* only if it names us,
        as the member knows our index; else it may be one the peer sent a joiner, replayed to us.
        """
        if own_index is None:
            return True
        member = peer is not None and peer.connected and peer.index is not None
        for message in messages:
            destination = message.destination
            if destination and not destination >> own_index & 1:
                self._tally.drop(DropReason.NOT_ADDRESSED)
                return False
            if member and not destination and wire.ends_link(self.profile, message):
                self._tally.drop(DropReason.NOT_ADDRESSED)
                return False
        return True

    def same_identity(
        self, peer: Peer, connection_id: int, source_variable_id: int | None, constant_id: int | None
    ) -> bool:
        """Whether a connected peer's packet names the peer (header id, and a message's constant id); counts a drop if not."""
        if self._has_conn_id:
            same = connection_id == peer.peer_conn_id or connection_id in self._conn_ids_any
        else:
            same = source_variable_id in (None, peer.variable_id)
        if same and (constant_id is None or not peer.constant_id or constant_id == peer.constant_id):
            return True
        self._tally.drop(DropReason.IDENTITY_MISMATCH)
        return False

    def fresh(self, peer: Peer, value: int, now: float) -> bool:
        """An authentic packet that names *peer*: refuse it if its nonce (*value*,
        see :func:`pianode.mesh.replay.nonce_value`) was seen, else count it as heard.

        Heard, for the station timeout, only when its nonce is the highest yet from the peer (5.7+:
        NonceReplayFilter.advanced).  What a station sent one without an index names no receiver
        (destination 0, spec §2.5): replayed to us after the station vanished, below what it last sent
        us but new to our filter, it kept the station in the mesh for as long as the replays lasted."""
        if not peer.replay.accept_value(value):
            self._tally.drop(DropReason.REPLAYED)
            return False
        if peer.replay.advanced:
            peer.last_heard = now
        peer.packets_received += 1
        self._tally.counters["packets_received"] += 1
        return True

    def accept_header(self, peer: Peer, packet: Packet, nonce: bytes) -> bool:
        """Identity and replay checks on an authenticated packet.

        Identity first: a packet whose header or messages name another
        station than the one at its source address is refused as such.
        Replays are judged on the GCM nonce, which the tag authenticates; the
        packet id is not authenticated (no associated data, spec §3.1), so it
        only feeds the statistics.
        """
        header = packet.header
        if peer.connected:
            if not self.same_identity(peer, header.connection_id, header.source_variable_id, None):
                return False
        if peer.constant_id and self._message_ids:
            for m in packet.messages:
                if m.source_constant_id is not None and m.source_constant_id != peer.constant_id:
                    self._tally.drop(DropReason.IDENTITY_MISMATCH)
                    return False
        elif not self._message_ids and not self._names_no_other_member(peer, packet.messages):
            return False
        if not peer.replay.accept(nonce):
            self._tally.drop(DropReason.REPLAYED)
            return False
        return True

    def _names_no_other_member(self, peer: Peer, messages: tuple[Message, ...]) -> bool:
        """M-A (<= 5.4): whether no message names another member as its source (counts a drop if one does).

        Up to 5.6 the header names the sender only by the connection id it drew for us (2..255, spec
        §1.3), which another member's id for us equals once in 254 pairs, and M-A messages carry source
        constant id 0 in local play; their source station index (spec §2.1), under the HMAC, names the
        sender: a datagram of another member's, replayed from this peer's address, names that member.
        (253, no index yet, and an index no other member holds are taken: a station joining again.)
        """
        for m in messages:
            index = m.source_station_index
            if index is None or index == peer.index or index == 253:
                continue
            other = self.by_index(index)
            if other is not None and other is not peer:
                self._tally.drop(DropReason.IDENTITY_MISMATCH)
                return False
        return True

    # ------------------------------------------------------------------ timers
    def deadline(self, peer: Peer) -> float | None:
        if peer.state is PeerState.CLOSED:
            return None
        d = peer.last_heard + self.config.station_timeout
        if peer.index is None and not peer.initiator:
            d = min(d, peer.created + self._never_joined)
        for p in peer.pending.values():
            if p.next_send < d:
                d = p.next_send
        if peer.connected:
            # A keep-alive is due once next_keepalive has come and the peer has heard nothing from us for
            # an interval (on_timer): while a game's frames flow, the last one sent moves it on.
            keepalive = peer.last_sent + self._keepalive_interval
            if keepalive < peer.next_keepalive:
                keepalive = peer.next_keepalive
            d = min(d, keepalive, peer.next_rtt)
            for w in (peer.mesh_window, peer.data_window):
                if w is not None and not w.idle():
                    t = w.get_timer()
                    if t is not None and t < d:
                        d = t
        return d

    def reschedule(self, peer: Peer, d: float | None = None) -> None:
        """Put *peer*'s deadline (*d*, or worked out now) on the heap if it comes before the one there."""
        if d is None:
            d = self.deadline(peer)
        if d is not None and (peer.scheduled is None or d < peer.scheduled):
            peer.scheduled = d
            heapq.heappush(self._timers, (d, next(self._timer_seq), peer))

    def next_deadline(self) -> float | None:
        heap = self._timers
        while heap and heap[0][2].scheduled != heap[0][0]:
            heapq.heappop(heap)  # stale entry
        return heap[0][0] if heap else None

    def due(self, now: float) -> list[Peer]:
        """The peers whose deadline has come, taken off the heap."""
        heap = self._timers
        due: list[Peer] = []
        while heap and heap[0][0] <= now:
            t, _, peer = heapq.heappop(heap)
            if peer.scheduled == t:
                peer.scheduled = None
                due.append(peer)
        return due

    def on_timer(self, peer: Peer, now: float) -> bool:
        """Run *peer*'s timers that are due; False (the peer put back on the heap) when none is.

        A deadline on the heap was the earliest when it was pushed, and is not moved later as things
        change: an ack that empties a window leaves its retransmission time there, and each frame sent
        moves the keep-alive a frame further on.  In a 32-station session at 60 Hz that made about
        2,000 wake-ups a second of a peer with nothing due, each run through its timers and a drain of
        its queues; such a peer now costs one look at its deadline."""
        if peer.state is PeerState.CLOSED:
            return False
        d = self.deadline(peer)
        if d is not None and d > now:
            self.reschedule(peer, d)
            return False
        if now >= peer.last_heard + self.config.station_timeout:  # same sum as the deadline
            self._host.peer_lost(peer, departure.silent(self.config.station_timeout), now)
            return True
        if peer.index is None and not peer.initiator and now >= peer.created + self._never_joined:
            # It contacted us, and in a join timeout and a station timeout it never got
            # an index: keep-alives alone do not hold a place.
            self._host.peer_lost(peer, departure.never_joined(self._never_joined), now)
            return True
        for w in (peer.mesh_window, peer.data_window):
            if w is not None:
                w.handle_timer(now)
                if w.failed:
                    _log.info("%s:%d: reliable window failed: %s", *peer.address, w.failure)
                    since = w.failed_since if w.failed_since is not None else peer.last_sent
                    self._host.peer_lost(peer, departure.unacknowledged(now - since), now)
                    return True
        if peer.connected and now >= peer.next_keepalive:
            # A keep-alive only fills silence: any packet sent to the peer
            # within the interval (a game's group frames, say) already keeps
            # the link alive at the other end.
            quiet_since = peer.last_sent + self.config.keepalive_interval
            if now >= quiet_since:
                if self._has_keepalive:
                    self._host.enqueue(peer, Proto.KEEP_ALIVE, 0, b"")
                else:  # 6.32+ lists no Keep Alive protocol (spec §5.1): an RTT request fills the silence
                    self.ask_rtt(peer, 1, now)
                peer.next_keepalive = now + self.config.keepalive_interval
            else:
                peer.next_keepalive = quiet_since
        if peer.connected and now >= peer.next_rtt:
            self.ask_rtt(peer, self._rtt_port, now)
            # Each station every rtt_interval, but no more than rtt_probe_rate
            # probes a second from this node in all: RTT traffic stays bounded
            # however many stations the mesh has.
            peer.next_rtt = self.rtt_slot(
                now + max(self.config.rtt_interval, len(self.peers) / self.config.rtt_probe_rate), now
            )
        return True

    def rtt_slot(self, wanted: float, now: float) -> float:
        """The time of a peer's next RTT probe: about *wanted* (not before *now*), or later so that
        this node's probes leave at least 1 / rtt_probe_rate apart.  Without the
        spacing the probes of peers that connected together stay in step: a
        32-station mesh would send 31 x 32 probes (and as many answers) in one
        burst every few seconds, which stalls a real-time session.

        The slots lie on one grid, the multiples of the spacing on the clock, the same for every
        node: the nodes of a process (one clock) probe at the same instants, so their probes, the
        answers and the samples take one wake-up of the process.  Each at an instant of its own,
        the probes of a 32-station session at 60 Hz (8 a second from each node) woke its process
        about 250 times a second between its 60 ticks, and cost about an eighth of its CPU
        (measured: 11.4 against 10.0 µs a delivered frame with no probes at all).  *wanted* goes to
        the nearest instant of the grid (a probe taken a little after its instant asks for the next
        one an interval after that instant, not a spacing later)."""
        spacing = 1.0 / self.config.rtt_probe_rate
        slot = max(math.ceil(wanted / spacing - 0.5), math.ceil(now / spacing)) * spacing
        slot = max(slot, self._next_rtt_slot)
        self._next_rtt_slot = slot + spacing
        return slot

    def ask_rtt(self, peer: Peer, port: int, now: float) -> None:
        """Send *peer* an RTT request (on *port*) and remember it, so that only its answer gives a sample.

        A request already waiting with the same time (two asked in one instant) is not sent twice.
        At most :data:`RTT_ASKED` requests are remembered, none longer than a station timeout: a
        peer that answers none of them is dropped at its station timeout anyway."""
        ticks = self._host.rtt_ticks(now)
        asked = peer.rtt_asked
        if ticks in asked:
            return
        stale = now - self.config.station_timeout
        for old in [t for t, sent in asked.items() if sent < stale]:
            del asked[old]
        if len(asked) >= RTT_ASKED:
            del asked[next(iter(asked))]
        asked[ticks] = now
        self._host.enqueue(peer, Proto.RTT, port, wire.encode_rtt(self.profile, False, ticks))

    def on_rtt(self, peer: Peer, payload: bytes, now: float) -> None:
        """An RTT protocol message from *peer*: answer a request, take a sample from a response.

        A response echoes the time of the request it answers (spec §5.6), which only the requester
        knows the meaning of: one that echoes no request of ours still waiting (an answer to nothing,
        a second answer to one request) is dropped.  Before, any response gave a sample: a member
        that echoed 0 or the present time made the round trip reported for it (``stations()``) the
        session's age or nothing."""
        is_response, ticks = wire.decode_rtt(self.profile, payload)
        if not is_response:
            self._tally.counters["rtt_requests_received"] += 1
            self._host.enqueue(peer, Proto.RTT, self._rtt_port, wire.encode_rtt(self.profile, True, ticks))
            return
        sent = peer.rtt_asked.pop(ticks, None)
        if sent is None or sent > now:
            self._tally.drop(DropReason.UNEXPECTED)
            return
        peer.rtt.on_sample(now - sent, now)
