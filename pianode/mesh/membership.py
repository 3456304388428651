"""Mesh membership (spec §5.4): creating and joining a mesh, the table, updates, leaving and host migration.

Theory of operation
-------------------
:class:`Membership` owns the shared mesh table (:class:`~pianode.mesh.table.MeshTable`)
and this station's place in it: its station index, whether it has joined,
is leaving or has closed, and why a join failed.

* **Create.** The creator is host and station index 0.
* **Join.** The joiner connects to the host (the station handshake), sends
  a join request, and gets a join response (in fragments) with its index and
  the table.  The host sends every member an update mesh with a higher
  counter, and the members connect to the newcomer, which waits for them
  (spec §5.4).  An update that overtakes the join response is kept and
  applied once the station is in.
* **Updates.** Only the station an update names as host may send it, and
  only a member (or, before the join completes, the join host).
* **Leave.** A leave request goes to every member through the mesh window;
  the session closes once everything owed has been sent.
* **Migration.** pianode's rule (Nintendo's migration messages are
  undocumented): when the host leaves or falls silent, every remaining
  station removes it and the remaining station with the lowest index becomes
  host; the new host sends an update with a higher counter.  A non-host
  remembers stations it saw leave until the host's next update, so they are
  never elected.
* **Healing.** Every few seconds a member reconnects to table members it
  has no link to; the higher index asks.

It reaches the peers through the links, sends through the outbox and
connects through the handshake; events and held data go out through
:class:`MembershipHost`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Protocol

from pianode.mesh import departure, legacy, wire
from protocols.pia import session6
from pianode.mesh.config import NodeConfig
from pianode.mesh.events import Event, HostChanged, MeshDestroyed, MeshJoined, StationJoined, StationLeft
from pianode.mesh.handshake import StationHandshake
from pianode.mesh.links import Links
from pianode.mesh.outbox import Outbox
from pianode.mesh.peer import Peer, PeerState
from pianode.mesh.stats import DropReason, Tally
from pianode.mesh.table import MeshFull, MeshTable, StationEntry
from protocols.pia.versions import Proto

__all__ = ["Membership", "MembershipHost"]

_log = logging.getLogger("pianode.mesh")

HEAL_INTERVAL = 3.0  # seconds between checks for table members we have no link to
JOIN_ANSWER_INTERVAL = 2.0  # a member's re-sent join request is answered at most this often
JOIN_FRAGMENTS_KEPT = 64  # join response fragments kept per host until their response is complete


class MembershipHost(Protocol):
    """What the membership hands to the session that holds it."""

    def emit(self, event: Event) -> None:
        """Queue an event for the application."""

    def deliver(self, peer: Peer, data: bytes, *, reliable: bool) -> None:
        """Hand data from *peer* to the application (held data, once the peer is announced)."""


class Membership:
    """This station's place in the mesh; see the module docstring."""

    def __init__(
        self,
        config: NodeConfig,
        local: wire.Location,
        links: Links,
        outbox: Outbox,
        handshake: StationHandshake,
        tally: Tally,
        host: MembershipHost,
    ) -> None:
        self.config = config
        self.profile = session6.session_profile(config.profile)  # 6.x: pianode's session management (pia6)
        #: 6.x: no two members share a variable id (see _on_join_request).
        self._unique_variable_ids = session6.is_pia6(config.profile)
        self.local = local
        self.local_address = local.address
        self._links = links
        self._outbox = outbox
        self._handshake = handshake
        self._tally = tally
        self._host = host
        self.table = MeshTable(max_stations=config.max_stations)
        self.index: int | None = None
        self.joined = False
        self.closed = False
        self.leaving = False
        self.failure: str | None = None
        self.join_host: tuple[str, int] | None = None
        self._join_deadline: float | None = None
        self._leave_deadline: float | None = None
        self._next_heal: float | None = None
        self._early_update: tuple[list[StationEntry], int, int] | None = None
        #: The joiner index of the last join response that did not list us (None: none); see _on_join_response.
        self._unlisted: int | None = None
        #: Before 5.0 the join response carries no update counter (spec §5.4): the counter of the
        #: last update that listed us, below which an update that does not is stale, not a reason
        #: to join again (None: none yet).  Only read where the join response has no counter.
        self._counterless_join = self.profile.version < (5, 0)
        self._listed_counter: int | None = None
        self._update_newcomer = self.profile.version <= (5, 6)
        #: An update from the station the migration rule would elect, sent before we saw our host
        #: go: (its index, entries, counter), applied if we do elect it (see peer_lost).
        self._successor_update: tuple[int, list[StationEntry], int] | None = None
        #: Indexes this (non-host) station saw leave since the last update it applied.
        self._departed: set[int] = set()

    def is_host(self) -> bool:
        return self.index is not None and self.table.host_index == self.index

    def busy(self) -> bool:
        """Whether this station created or joined (or is joining) a mesh."""
        return self.joined or self.join_host is not None

    def accepts_stations(self) -> bool:
        return not (self.leaving or self.index is None and not self.join_host)

    # ------------------------------------------------------------------ lifecycle
    def create(self, now: float) -> None:
        entry = self.table.add(self.local.constant_id, self.local.variable_id, self.local_address)
        self.index = entry.index
        self.table.host_index = entry.index
        # Up to 5.6 the first joiner's update carries 1, as in the real 4.10 frames (pianode.mesh.legacy).
        self.table.update_counter = 0 if self._update_newcomer else 1
        self.joined = True
        self._next_heal = now + HEAL_INTERVAL
        self._host.emit(MeshJoined(station_index=entry.index, host_index=entry.index))

    def join(self, host: tuple[str, int], now: float, identity: tuple[int, int] | None = None) -> None:
        self.join_host = host
        self._join_deadline = now + self.config.join_timeout
        self._handshake.connect(host, now, identity)

    def leave(self, now: float) -> None:
        if self.closed or self.leaving:
            return
        self.leaving = True
        self._leave_deadline = now + min(2.0, self.config.station_timeout)
        if self.index is None:
            self.close("left", now)
            return
        payload = wire.encode_leave(self.profile, self.index, self.local)
        members = self._links.members()
        for peer in members:
            assert peer.mesh_window is not None
            self._outbox.window_send(peer, peer.mesh_window, payload, now)
            self._links.touched[peer] = None
        if not members:
            self.close("left", now)

    def after_flush(self, now: float) -> None:
        """A leaving station closes once nothing is owed to any peer any more."""
        if self.leaving and not any(
            p.pending
            or (p.mesh_window is not None and not p.mesh_window.idle())
            or (p.data_window is not None and not p.data_window.idle())
            for p in self._links.peers.values()
            if p.state is not PeerState.CLOSED
        ):
            self.close("left", now)

    def deadlines(self) -> tuple[float | None, float | None, float | None]:
        """The membership's timers: join timeout, leave timeout, next heal."""
        return self._join_deadline, self._leave_deadline, self._next_heal

    def handle_timer(self, now: float) -> bool:
        """Run the membership's due timers; False when the session ended (join timeout, leave done)."""
        if self._join_deadline is not None and now >= self._join_deadline and not self.joined:
            unlisted = self._unlisted
            step = self._unanswered_step()
            if unlisted is not None and step == "join request unanswered":
                step = f"the host's join responses do not list us (the last at index {unlisted})"
            self.fail_join(step, now)
            return False
        if self._leave_deadline is not None and now >= self._leave_deadline:
            self.close("left", now)
            return False
        if self._next_heal is not None and now >= self._next_heal:
            self._heal(now)
        return True

    def _heal(self, now: float) -> None:
        """Reconnect to table members we have no link to (a lost handshake, a
        window that gave up).  The higher index initiates, so two stations
        never both ask; simultaneous asks are resolved anyway (glare rule)."""
        self._next_heal = now + HEAL_INTERVAL if self.joined and not self.leaving else None
        if self._next_heal is None or self.index is None:
            return
        if self.is_host():
            self._tell_listless(now)
        for e in self.table.entries():
            if e.index >= self.index or e.address == self.local_address:
                continue
            peer = self._links.peers.get(e.address)
            if peer is None or peer.state is PeerState.CLOSED:
                self._tally.counters["reconnects"] += 1
                # Naming the member (spec §5.3 target ids): a station refuses a request naming another.
                self._handshake.connect(e.address, now, (e.constant_id, e.variable_id))

    def _tell_listless(self, now: float) -> None:
        """Send the table, once, to connected stations without a place that did not ask to join
        within a heal interval of connecting: a station our predecessor admitted just before
        leaving learns from it that it must join again (``_take_update``)."""
        payloads: list[bytes] | None = None
        for peer in self._links.peers.values():
            if (
                not peer.connected
                or peer.index is not None
                or peer.told_table
                or peer.mesh_window is None
                or now - peer.connected_at < HEAL_INTERVAL
                or any(p.kind == "join-response" for p in peer.pending.values())
            ):
                continue
            peer.told_table = True
            if payloads is None:
                payloads = wire.encode_update_mesh(self.profile, self.table, self.config.mtu)
            for payload in payloads:
                self._outbox.window_send(peer, peer.mesh_window, payload, now)
            self._links.touched[peer] = None

    def _unanswered_step(self) -> str:
        """The step of our join that the host left unanswered, in words: what a failed join says."""
        host = self._links.peers.get(self.join_host) if self.join_host is not None else None
        if host is None or host.state is PeerState.CLOSED or not (host.got_response or host.connected):
            return "no answer to the connection request"
        if not host.connected:
            return "handshake incomplete: the host answered the connection request but did not complete it"
        return "join request unanswered"

    def fail_join(self, reason: str, now: float) -> None:
        self.failure = reason
        self._join_deadline = None
        self.close("join-failed", now)

    def close(self, reason: str, now: float) -> None:
        if self.closed:
            return
        self.closed = True
        self._leave_deadline = None
        for peer in list(self._links.peers.values()):
            self._links.close(peer)
        self._host.emit(MeshDestroyed(reason=reason if self.failure is None else f"{reason}: {self.failure}"))

    # ------------------------------------------------------------------ from the handshake
    def on_connected(self, peer: Peer, now: float) -> None:
        """*peer* completed the handshake: join through it, or give it its index."""
        if peer.address == self.join_host and not self.joined:
            self._outbox.queue_acked(peer, Proto.MESH, 0, self._join_request, now, kind="join")
        entry = self.table.by_address(peer.address)
        if entry is not None and entry.index != self.index:
            self._links.set_index(peer, entry.index)
            self.announce(peer)
        # A connected station the host has no entry for hears nothing of the mesh yet: it is a
        # joiner, whose join request comes next.  The real 3DS host in the mgba frames
        # (../shared/captures/mgba-uds-frames.jsonl, frames 13-14) sends its update mesh only
        # after the join response, and a station that has not joined (spec §2.6: index 253)
        # is not a member.  One that never asks is told the table at the next heal.

    def on_refused(self, peer: Peer, reason: str, now: float) -> None:
        if peer.address == self.join_host and not self.joined:
            self.fail_join(f"the host refused the connection: {reason}", now)

    def _join_request(self, ack_id: int) -> bytes:
        return wire.encode_join_request(self.profile, self.local_address, ack_id)

    def _host_changed(self, old: int, new: int) -> None:
        _log.info("station %s: the host moved from station %d to %d", self.index, old, new)
        self._host.emit(HostChanged(old_host_index=old, new_host_index=new))

    def announce(self, peer: Peer) -> None:
        if peer.announced or peer.index is None or not peer.connected:
            return
        peer.announced = True
        # -v: every membership change, logged where it happens (a run's formation included).
        _log.info("station %s: station %d joined from %s:%d", self.index, peer.index, *peer.address)
        self._host.emit(StationJoined(station_index=peer.index, constant_id=peer.constant_id, address=peer.address))
        held, peer.held, peer.held_bytes = peer.held, [], 0
        for data, reliable in held:
            self._host.deliver(peer, data, reliable=reliable)

    # ------------------------------------------------------------------ mesh protocol
    def on_message(self, peer: Peer, msg: wire.MeshMessage, now: float) -> None:
        """One mesh protocol message from *peer*."""
        if isinstance(msg, wire.JoinRequest):
            if msg.trailing:
                # Liberal where it costs nothing: the request's fields are all there.
                self._tally.counters["trailing_bytes"] += 1
                _log.info("%s:%d: join request with %d bytes beyond its documented layout: taken", *peer.address, msg.trailing)
            if msg.short:
                self._tally.counters["short_join_requests"] += 1
                _log.info("%s:%d: join request without the StationAddress of its documented layout: taken", *peer.address)
            self._ack(peer, msg.ack_id)
            self._on_join_request(peer, now)
        elif isinstance(msg, wire.JoinResponse):
            self._ack(peer, msg.ack_id)
            self._on_join_response(peer, msg, now)
        elif isinstance(msg, wire.JoinDenied):
            # Only the host we asked answers our join (spec §5.4: the join request goes to the host).
            # Before, a denial from any connected station ended a join: a member that connected to a
            # station joining (or joining again, _rejoin) stopped it with one message.
            if self.joined or peer.address != self.join_host:
                self._tally.drop(DropReason.NOT_HOST)
            else:
                self.fail_join(f"join denied: {msg.reason_text}", now)
        elif isinstance(msg, wire.UpdateMesh):
            self._on_update_mesh(peer, msg, now)
        elif isinstance(msg, wire.LeaveRequest):
            # Stay in contact until our ack of the leave has gone out: close
            # after the window flushed it (the peer's station timeout ends it otherwise).
            self.peer_lost(peer, departure.LEFT, now, linger=True)
        else:
            self._tally.drop(DropReason.UNEXPECTED)

    def _ack(self, peer: Peer, ack_id: int) -> None:
        self._outbox.enqueue(peer, Proto.STATION, 0, wire.encode_station_ack(self.profile, ack_id))

    def _on_join_request(self, peer: Peer, now: float) -> None:
        if not self.is_host():
            self._outbox.enqueue(peer, Proto.MESH, 0, wire.encode_join_deny(self.profile, wire.DENY_NOT_HOST))
            return
        entry = self.table.by_address(peer.address)
        if entry is not None:
            # A re-sent request (its ack or our response was lost), or a member asking again:
            # the join response alone, at most every JOIN_ANSWER_INTERVAL, and nothing to the
            # others (their tables already hold it), so repeats cannot be amplified.
            if any(p.kind == "join-response" for p in peer.pending.values()) or now - peer.join_answered < JOIN_ANSWER_INTERVAL:
                self._tally.counters["join_requests_repeated"] += 1
                return
            self._answer_join(peer, entry.index, now)
            return
        if self._unique_variable_ids and any(
            e.variable_id & 0xFFFF == peer.variable_id & 0xFFFF for e in self.table.entries()
        ):
            # 6.x: the variable id (16 bits) is how a group packet's footer names a receiver (spec §1.6) and,
            # from 6.32, how a header nonce names its receiver (pianode.mesh.replay.receiver_bound_nonce): two
            # members with one variable id could each take what the mesh seals for the other (a datagram the
            # host sent one, replayed to the other from the host's address).  The joiner is refused, saying
            # why; a station draws its variable id at random, so a new attempt (a new session) draws another.
            self._tally.counters["joins_denied"] += 1
            self._outbox.enqueue(peer, Proto.MESH, 0, wire.encode_join_deny(self.profile, wire.DENY_VARIABLE_ID_IN_USE))
            return
        try:
            entry = self.table.add(peer.constant_id, peer.variable_id, peer.address)
        except MeshFull:
            self._tally.counters["joins_denied"] += 1
            self._outbox.enqueue(peer, Proto.MESH, 0, wire.encode_join_deny(self.profile, wire.DENY_MESH_FULL))
            return
        self.table.update_counter += 1
        self._answer_join(peer, entry.index, now)
        # Everyone, the joiner too, after its join response (the acked join response leaves
        # ahead of window segments in the same drain): the real 3DS host does the same
        # (mgba frames 13-14).
        self._send_update_mesh(now)

    def _answer_join(self, peer: Peer, index: int, now: float) -> None:
        self._links.set_index(peer, index)
        peer.join_answered = now
        for build in wire.encode_join_response(self.profile, self.table, index, self.config.max_stations, self.config.mtu):
            self._outbox.queue_acked(peer, Proto.MESH, 0, build, now, kind="join-response")
        self.announce(peer)

    def _send_update_mesh(self, now: float, exclude: Iterable[tuple[str, int]] = ()) -> None:
        skip = set(exclude)
        payloads = wire.encode_update_mesh(self.profile, self.table, self.config.mtu)
        # Members only: a connected station without a place is told at the next heal.
        for member in [p for p in self._links.peers.values() if p.connected and p.index is not None]:
            if member.address in skip:
                continue
            assert member.mesh_window is not None
            for payload in payloads:
                self._outbox.window_send(member, member.mesh_window, payload, now)
            self._links.touched[member] = None

    def _apply_table(
        self, entries: list[StationEntry], host_index: int, counter: int, now: float, *, newcomer: bool = False
    ) -> None:
        """Take the host's table (*newcomer*: from our join response).  The members connect to a station
        new in the host's update; the newcomer connects to no one and waits for them.  Spec §5.4 join
        sequence, and the wiki's "Joining a mesh" step 6: after the update "the other consoles now try to
        establish a connection with your console"; NintendoClients-2020's joiner waits for exactly that."""
        old_host = self.table.host_index
        old = {e.index: e for e in self.table.entries()}
        self.table.replace_all(entries, host_index, counter)
        if old_host is not None and host_index != old_host and self.joined:
            self._host_changed(old_host, host_index)
        peers = self._links.peers
        for idx, e in old.items():
            if idx not in self.table and idx != self.index:
                peer = peers.get(e.address)
                if peer is not None:
                    self.peer_lost(peer, departure.REMOVED, now)
        for e in self.table.entries():
            if e.address == self.local_address:
                continue
            peer = peers.get(e.address)
            if peer is None:
                known = old.get(e.index)
                if newcomer or (known is not None and known.address == e.address):
                    continue  # the members connect to a newcomer; a lost link is healed (_heal)
                peer = self._handshake.connect(e.address, now, (e.constant_id, e.variable_id))
            peer.index = e.index
            if not peer.constant_id:
                peer.constant_id, peer.variable_id = e.constant_id, e.variable_id
            self._links.membership_changed()
            self.announce(peer)

    def _on_join_response(self, peer: Peer, msg: wire.JoinResponse, now: float) -> None:
        if self.joined or peer.address != self.join_host:
            return
        if self._update_newcomer:
            legacy.answered(peer.pending, Proto.MESH, ("join",))  # up to 5.6 the response is the ack
        if not wire.valid_table(msg.entries, None, self.config.max_stations, msg.fragment_count) or not (
            msg.joiner_index < self.config.max_stations and msg.host_index < self.config.max_stations
        ):
            self._tally.drop(DropReason.MALFORMED)
            return
        # Fragments of one response share its joiner index, counter and count; the fragments of a response
        # the host sent another joiner (replayed to us: destination 0 names no one, spec §2.5) never
        # mix with ours, nor push them out (each of ours is acked and not sent again).
        key = (msg.joiner_index, msg.update_counter, msg.fragment_count)
        frags = peer.join_fragments
        frags[(*key, msg.fragment_index)] = msg
        got = [f for k, f in frags.items() if k[:3] == key]
        if len(got) < msg.fragment_count:
            if len(frags) > JOIN_FRAGMENTS_KEPT:
                del frags[next(iter(frags))]
            return
        for k in [k for k in frags if k[:3] == key]:
            del frags[k]
        entries = [e for f in got for e in f.entries]
        if not any(e.index == msg.joiner_index and e.constant_id == self.local.constant_id for e in entries):
            # Nothing in it can be trusted to connect to: a host that admits us lists us.  It is a response
            # the host sent another joiner, replayed to us (dropped: ours may still come), or a host that
            # never lists us, which the join timeout ends saying so (handle_timer).
            self._unlisted = msg.joiner_index
            self._tally.drop(DropReason.NOT_ADDRESSED)
            return
        self.index = msg.joiner_index
        self.joined = True
        self._join_deadline = None
        self._next_heal = now + HEAL_INTERVAL
        self._host.emit(MeshJoined(station_index=msg.joiner_index, host_index=msg.host_index))
        early, self._early_update = self._early_update, None
        counter = msg.update_counter
        if self._counterless_join and early is not None:
            # No counter in the response (before 5.0).  An update that came before it and lists us
            # was sent after it (the response was lost and resent): newer, applied after it.  One
            # that does not list us was sent before the host admitted us: older, dropped.
            if any(e.index == msg.joiner_index and e.address == self.local_address for e in early[0]):
                counter = early[2] - 1
            else:
                counter, early = early[2], None
        self._apply_table(entries, msg.host_index, counter, now, newcomer=True)
        if early is not None and early[2] > self.table.update_counter:
            self._apply_table(early[0], early[1], early[2], now, newcomer=True)

    def _on_update_mesh(self, peer: Peer, msg: wire.UpdateMesh, now: float) -> None:
        # Only our host may send an update, naming itself host; before our join
        # completes, only the join host.  The station the migration rule would
        # elect if our host went may send one too (it saw the host go before we
        # did): that one is kept until we see the host go and elect it ourselves,
        # so a member cannot make itself host while the host is there.
        # What this cannot stop without leaving the documented protocol: an update carries nothing but
        # the shared key to prove it (spec §5.4), so the host itself may send different stations different
        # tables (a split mesh), and the successor's held update is taken as the new host's table once the
        # host goes; a station believes its host, as every Pia station does.
        successor = False
        if self.joined:
            allowed = peer.index is not None and msg.host_index == peer.index
            if allowed and peer.index != self.table.host_index:
                allowed = successor = peer.index == self._successor()
        else:
            allowed = peer.address == self.join_host
        if not allowed:
            self._tally.drop(DropReason.NOT_HOST)
            return
        if not wire.valid_table(msg.entries, msg.host_index, self.config.max_stations, msg.fragment_count):
            self._tally.drop(DropReason.MALFORMED)
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
        if successor:
            assert peer.index is not None
            self._successor_update = (peer.index, entries, key)
            self._tally.counters["successor_updates_held"] += 1
            return
        self._take_update(peer, entries, key, now)

    def _take_update(self, host: Peer, entries: list[StationEntry], counter: int, now: float) -> None:
        """Apply an update from *host*, or join again through it if its table does not list us."""
        assert host.index is not None
        self._departed.clear()
        self._successor_update = None
        if self.index is not None and all(e.index != self.index or e.address != self.local_address for e in entries):
            if self._counterless_join and (self._listed_counter is None or counter <= self._listed_counter):
                # An update the host queued before it admitted us, overtaken by the join response
                # (no counter in it to tell them apart): stale.
                self._tally.counters["stale_updates"] += 1
                return
            # The host's table does not list us (we were admitted by a host
            # that left before telling the others): join again through it.
            self._rejoin(host, now)
            return
        if self.index is not None:
            self._listed_counter = counter
        self._apply_table(entries, host.index, counter, now)

    # ------------------------------------------------------------------ departures
    def peer_lost(self, peer: Peer, reason: str, now: float, *, linger: bool = False) -> None:
        if peer.state is PeerState.CLOSED:
            return
        if linger:
            # Send what we owe it (the ack of its leave) before forgetting it.
            self._outbox.drain_now(peer, now)
        index = peer.index
        was_joining_host = peer.address == self.join_host and not self.joined
        step = self._unanswered_step() if was_joining_host else ""
        self._links.close(peer, left=now if reason == departure.LEFT else None)
        if was_joining_host:
            self.fail_join(f"{step} (link ended: {reason})", now)
            return
        if index is None or self.index is None:
            return
        if peer.announced:
            self._tally.departures[reason] += 1
            _log.info("station %s: station %d (%s:%d) left: %s", self.index, index, *peer.address, reason)
            self._host.emit(StationLeft(station_index=index, constant_id=peer.constant_id, reason=reason))
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
            # The migration rule, over the stations not known to have left.
            new_host = self.table.elect_host(self._departed)
            if new_host is None:
                return
            self.table.host_index = new_host
            self._host_changed(index, new_host)
            if new_host == self.index:
                self.table.update_counter += 1
                self._send_update_mesh(now)
            held, self._successor_update = self._successor_update, None
            successor = self._links.by_index(new_host)
            if held is not None and held[0] == new_host and held[2] >= self.table.update_counter and successor is not None:
                # The new host's update came before we saw the old one go: take it now.
                self._take_update(successor, held[1], held[2], now)
        elif self.is_host():
            self.table.update_counter += 1
            self._send_update_mesh(now)

    def _successor(self) -> int | None:
        """The station the migration rule elects if our host goes now."""
        host = self.table.host_index
        if host is None:
            return None
        return self.table.elect_host(self._departed | {host})

    def _rejoin(self, host: Peer, now: float) -> None:
        self._tally.counters["rejoins"] += 1
        self.joined = False
        self.index = None
        self.join_host = host.address
        self._join_deadline = now + self.config.join_timeout
        self._next_heal = None
        self._unlisted = None
        self._outbox.queue_acked(host, Proto.MESH, 0, self._join_request, now, kind="join")
