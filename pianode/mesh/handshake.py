"""The station protocol's handshake (spec §5.3): connecting two stations, acks, disconnects.

Theory of operation
-------------------
A peer goes CONNECTING -> CONNECTED through a connection request and a
response.  Up to 5.26 the answering station first sends an *inverse*
request, which the initiator answers with its response; from 5.27 one
request and one response do.  Requests and responses carry an ack id and
are resent (by the outbox) until acked.

:class:`StationHandshake` holds no per-peer state of its own (that is in the
:class:`~pianode.mesh.peer.Peer`): it reads each station message and moves
the peer on.  Two stations that ask each other at once (each learned of the
other from a different mesh table) are resolved by constant id: the lower
stays the initiator, the other withdraws its request and answers.  A
connection request in another Pia version's format gets a denial it can
read, at most once a second per address (:meth:`StationHandshake.deny_other_version`).

What follows a connection, a refusal or a disconnect is the membership's
business; the handshake reports it through :class:`HandshakeHost`.
"""

from __future__ import annotations

from typing import Protocol

from pianode.mesh import departure, legacy, version_denial, wire
from protocols.pia import session6
from pianode.mesh.config import NodeConfig
from pianode.mesh.links import Links
from pianode.mesh.outbox import Outbox
from pianode.mesh.peer import Peer, Pending, PeerState
from pianode.mesh.stats import DropReason, Tally
from protocols.errors import DecodeError
from protocols.pia.packet_values import Packet
from protocols.pia.versions import Proto

__all__ = ["HandshakeHost", "StationHandshake"]

MAX_DENIED = 64  # addresses remembered for the once-a-second version denial
#: A connected station's restart is believed once its old identity stayed silent this long after a
#: probe while fresh connection requests under the new identity kept coming.
RESTART_CONFIRM = 1.0
RESTART_NONCES = 16  # distinct nonces of restart requests remembered per peer
#: Timer rounding (ms) and the denier's time to answer, beyond the time since we asked (denial_for_us).
DENIAL_SLACK = 0.01


class HandshakeHost(Protocol):
    """What the handshake reports to, and asks of, the session that holds it."""

    def accepts_stations(self) -> bool:
        """Whether a connection request may be answered (in a mesh or joining one, and not leaving)."""

    def station_connected(self, peer: Peer, now: float) -> None:
        """*peer* completed the handshake."""

    def station_refused(self, peer: Peer, reason: str, now: float) -> None:
        """*peer* denied our connection request."""

    def peer_lost(self, peer: Peer, reason: str, now: float) -> None:
        """*peer* refused or ended a connection that had completed."""

    def rtt_ticks(self, now: float) -> int:
        """The RTT protocol's clock at *now* (a restart probe is an RTT request)."""


class StationHandshake:
    """The station protocol of one session; see the module docstring."""

    def __init__(
        self, config: NodeConfig, local: wire.Location, links: Links, outbox: Outbox, tally: Tally, host: HandshakeHost
    ) -> None:
        self.config = config
        self.profile = session6.session_profile(config.profile)  # 6.x: pianode's session management (pia6)
        self.local = local
        self._links = links
        self._outbox = outbox
        self._tally = tally
        self._host = host
        self._has_conn_id = self.profile.has_connection_id
        #: Inverse requests echo our connection id from 5.7 (spec §5.3); before, there is nothing to check.
        self._inverse_id = self.profile.version >= (5, 7)
        #: Up to 5.6 an answer stands for the ack of what it answers (pianode.mesh.legacy.answered).
        self._implicit_acks = legacy.is_legacy(self.profile)
        #: The session's network id, as connection requests and responses carry it (set by :meth:`use_network`).
        self.network_id = 0
        self._denied: dict[tuple[str, int], float] = {}

    def use_network(self, network_id: int) -> None:
        self.network_id = network_id

    # ------------------------------------------------------------------ sending
    def connect(self, addr: tuple[str, int], now: float, identity: tuple[int, int] | None = None) -> Peer:
        """Start a connection to *addr* (or return the live peer there).

        *identity*, the station's (constant id, variable id) where we know them (a LAN
        session's host, a mesh table's member), goes in the request's target fields
        (spec §5.3): a station drops a request that names another.
        """
        peer = self._links.peers.get(addr)
        if peer is not None and peer.state is not PeerState.CLOSED:
            return peer
        if identity is not None:
            self._links.forget_other_identity(addr, identity[1])
        peer = self._links.new_peer(addr, initiator=True, now=now)
        if identity is not None:
            self._links.learn(peer, *identity)
        self._outbox.queue_acked(
            peer, Proto.STATION, 0, lambda ack: self._request(peer, inverse=False, ack_id=ack), now, kind="connect"
        )
        return peer

    def _request(self, peer: Peer, *, inverse: bool, ack_id: int) -> bytes:
        return wire.encode_connect_request(self.profile, self.local, self.network_id, peer, inverse=inverse, ack_id=ack_id)

    def _respond(self, peer: Peer, now: float) -> None:
        peer.sent_response = True
        self._outbox.queue_acked(
            peer, Proto.STATION, 0,
            lambda ack: wire.encode_connect_response(
                self.profile, self.local, self.network_id, peer, 0, ack, self.config.name, self.config.mtu
            ),
            now,
            kind="response",
        )

    def _ack(self, peer: Peer, ack_id: int) -> None:
        self._outbox.enqueue(peer, Proto.STATION, 0, wire.encode_station_ack(self.profile, ack_id))

    def _connected(self, peer: Peer, now: float) -> None:
        if self._links.set_connected(peer, now):
            self._host.station_connected(peer, now)

    # ------------------------------------------------------------------ receiving
    def on_message(self, peer: Peer, msg: wire.StationMessage, now: float) -> None:
        """One station protocol message from *peer*."""
        if isinstance(msg, wire.StationAck):
            pending = peer.pending.pop(msg.ack_id, None)
            if pending is not None:
                self._on_acked(peer, pending, now)
        elif isinstance(msg, wire.ConnectRequest):
            self._on_request(peer, msg, now)
        elif isinstance(msg, wire.ConnectResponse):
            self._on_response(peer, msg, now)
        elif isinstance(msg, wire.Disconnect):
            if not msg.response:
                self._outbox.enqueue(peer, Proto.STATION, 0, wire.encode_disconnect(self.profile, True))
            self._host.peer_lost(peer, departure.LEFT, now)

    def _on_request(self, peer: Peer, msg: wire.ConnectRequest, now: float) -> None:
        self._ack(peer, msg.ack_id)
        if peer.connected:
            # A retransmission whose ack was lost, or a request the station sent another (to an
            # address: destination 0, spec §2.5), replayed from its address: a connected station's
            # ids and connection id change only through a confirmed restart
            # (MeshSession._receive_packet), never here.
            return
        self._links.learn(peer, msg.location.constant_id, msg.location.variable_id)
        if self._links.variable_id_taken(peer):
            # 6.x: a station naming our variable id or a member's (see Links.variable_id_taken) is refused,
            # as the host refuses its join (Membership._on_join_request); it may ask again as another.
            self._tally.drop(DropReason.IDENTITY_MISMATCH)
            deny = wire.encode_connect_deny(self.profile, (peer.constant_id, peer.variable_id), 1)
            self._outbox.enqueue(peer, Proto.STATION, 0, deny)
            return
        if msg.inverse:
            # We initiated; this is the peer's inverse request (<= 5.26).
            if self._inverse_id and msg.inverse_conn_id != peer.own_conn_id:
                self._tally.drop(DropReason.IDENTITY_MISMATCH)
                return
            peer.peer_conn_id = msg.conn_id
            if self._implicit_acks:
                legacy.answered(peer.pending, Proto.STATION, ("connect",))
            if not peer.sent_response:
                self._respond(peer, now)
            return
        if peer.initiator and not peer.connected:
            # Both sides asked at once (each learned of the other from a
            # different mesh table).  The station with the lower constant id
            # stays the initiator; the other withdraws its request and answers.
            if (self.local.constant_id, self.local.address) < (msg.location.constant_id, peer.address):
                self._tally.counters["connect_glare_won"] += 1
                return
            self._tally.counters["connect_glare_yielded"] += 1
            for ack_id in [k for k, p in peer.pending.items() if p.kind == "connect"]:
                del peer.pending[ack_id]
            peer.initiator = False
        peer.peer_conn_id = msg.conn_id
        if not self._host.accepts_stations():
            deny = wire.encode_connect_deny(self.profile, (peer.constant_id, peer.variable_id), 1)
            self._outbox.enqueue(peer, Proto.STATION, 0, deny)
            return
        if self.profile.inverse_handshake:
            if not any(isinstance(p, Pending) and p.proto is Proto.STATION for p in peer.pending.values()):
                self._outbox.queue_acked(
                    peer, Proto.STATION, 0, lambda ack: self._request(peer, inverse=True, ack_id=ack), now,
                    kind="inverse",
                )
        elif not peer.sent_response:
            self._respond(peer, now)
            self._connected(peer, now)

    def _on_response(self, peer: Peer, msg: wire.ConnectResponse, now: float) -> None:
        if peer.connected:
            # A response answers a request, and we send none to a connected station: this is a
            # retransmission (its ack was lost), or one the station sent another, replayed from
            # its address (a denial of a joiner, say: destination 0).  It neither ends the link
            # nor changes the station's ids.
            if msg.result != 0:
                self._tally.drop(DropReason.UNEXPECTED)
            elif msg.ack_id is not None:
                self._ack(peer, msg.ack_id)
            return
        if msg.result != 0:
            if not self.denial_for_us(peer, msg, now):
                self._tally.drop(DropReason.NOT_ADDRESSED)
                return
            if msg.ack_id is not None:
                self._ack(peer, msg.ack_id)
            why = {2: "our Pia version is too low for it", 3: "our Pia version is too high for it"}.get(
                msg.result, f"result {msg.result}"
            )
            self._host.station_refused(peer, why, now)
            self._links.close(peer)
            return
        if msg.ack_id is not None:  # (a response with result 0 always carries one)
            self._ack(peer, msg.ack_id)
        if self._implicit_acks:
            # It answers our request, and, if we initiated, our response (sent before theirs); a
            # non-initiator's own response follows this one, so a resent one of theirs cannot answer it.
            kinds = ("connect", "inverse", "response") if peer.initiator else ("connect", "inverse")
            legacy.answered(peer.pending, Proto.STATION, kinds)
        if msg.location is not None:
            self._links.learn(peer, msg.location.constant_id, msg.location.variable_id)
        peer.got_response = True
        if self.profile.inverse_handshake and not peer.initiator and not peer.sent_response:
            self._respond(peer, now)
        self._connected(peer, now)

    def denial_for_us(self, peer: Peer, msg: wire.ConnectResponse, now: float) -> bool:
        """Whether a denial from *peer*, which has not connected, refuses our connection request.

        A denial goes to a station without an index, so its destination is 0 (spec §2.5): one the
        station sent another, replayed to us from its address, reads the same, and ended our join.
        From 5.7 a denial names the station it refuses (spec §5.3; NintendoClients fills it so, and
        pianode does): one naming neither us nor the denier (what pianode put there before) is
        another's.  Up to 5.6 it names no one, but its header's destination timer, which the HMAC
        covers (§1.3-§1.5), is the denier's estimate of its receiver's clock: the round trip it gives
        is no longer than the time since we asked, unless it estimates another station's clock."""
        if msg.named is not None:
            constant_id, variable_id = msg.named
            return (
                not constant_id and not variable_id
                or (constant_id, variable_id) == (self.local.constant_id, self.local.variable_id & 0xFFFFFFFF)
                or bool(peer.constant_id) and (constant_id, variable_id) == (peer.constant_id, peer.variable_id & 0xFFFFFFFF)
            )
        rtt_ms = peer.header_timers.last_rtt_ms
        return rtt_ms is None or rtt_ms <= (now - peer.created + DENIAL_SLACK) * 1000

    def _on_acked(self, peer: Peer, pending: Pending, now: float) -> None:
        if pending.proto is Proto.STATION and self.profile.version >= (5, 27) and not peer.initiator:
            self._connected(peer, now)

    # ------------------------------------------------------------------ first contact
    def first_request(self, packet: Packet) -> wire.ConnectRequest | None:
        """The (not inverse) connection request a packet opens with, or None."""
        if not packet.messages or not wire.is_connection_request(self.profile, packet.messages[0]):
            return None
        try:
            msg = wire.decode_station(self.profile, packet.messages[0].payload)
        except DecodeError:
            return None
        return msg if isinstance(msg, wire.ConnectRequest) and not msg.inverse else None

    def requester_variable_id(self, packet: Packet) -> int | None:
        """The variable id a first contact's connection request names for its sender (None: not one)."""
        msg = self.first_request(packet)
        return None if msg is None else msg.location.variable_id

    def restarted(self, peer: Peer, packet: Packet) -> bool:
        """A first-contact connection request from a connected peer that names a new identity."""
        if not peer.connected or packet.header.packet_id:
            return False
        msg = self.first_request(packet)
        if msg is None:
            return False
        if self._has_conn_id:
            return msg.conn_id != peer.peer_conn_id
        return msg.location.variable_id != peer.variable_id

    def confirm_restart(self, peer: Peer, value: int, now: float) -> bool:
        """Whether a connection request naming a new identity from connected *peer*'s address
        (its nonce read as *value*) shows that the station there really restarted.

        Such a request may be a datagram the station sent someone else, replayed from its
        address: it authenticates, and the station's one nonce counter makes it look fresh.
        So the old identity is probed (an RTT request) and the restart is believed only if
        it stays silent for :data:`RESTART_CONFIRM` while fresh requests (nonces not seen in
        this exchange) keep coming: a restarted station resends its request, a replayer can
        only repeat what it captured, and a live station answers the probe.
        """
        if value in peer.restart_nonces:
            self._tally.drop(DropReason.REPLAYED)
            return False
        if len(peer.restart_nonces) >= RESTART_NONCES:
            peer.restart_nonces.clear()
        peer.restart_nonces.add(value)
        seen = peer.restart_seen
        if seen is None or peer.last_heard > seen:
            # First sign, or the old identity spoke since the last one: probe it and wait.
            peer.restart_seen = now
            self._links.ask_rtt(peer, legacy.rtt_port(self.profile), now)
            self._tally.counters["restart_probes"] += 1
            self._tally.drop(DropReason.UNCONFIRMED_RESTART)
            return False
        if now - seen < RESTART_CONFIRM:
            self._tally.drop(DropReason.UNCONFIRMED_RESTART)
            return False
        return True

    def deny_other_version(self, data: bytes, addr: tuple[str, int], session_key: bytes | None, now: float) -> bool:
        """A connection request in another Pia version's format: answer it with
        a denial it can read (result 2 "version too low" / 3 "too high",
        spec §5.3), at most once a second per address."""
        own = self.config.profile  # the packet profile (self.profile holds 5.45's message layouts in 6.x)
        other = version_denial.profile_of_datagram(data, own)
        if other is None or session_key is None:
            return False
        last = self._denied.get(addr)
        if last is not None and now - last < 1.0:
            return False
        result = 2 if other.version < own.version else 3
        reply = version_denial.version_denial(
            self.config, self.local, session_key, self.network_id, other, data, addr, result, self._outbox.next_header_nonce
        )
        if reply is None:
            return False  # not an authentic connection request in that format
        self._denied[addr] = now
        if len(self._denied) > MAX_DENIED:
            self._denied.pop(next(iter(self._denied)))
        self._outbox.add_ready(reply, addr)
        self._tally.counters["version_denials"] += 1
        return True
