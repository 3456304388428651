"""A PRUDP endpoint as a sans-IO object: many connections over one UDP socket.

Theory of operation (spec ../shared/spec/prudp.md §1.1, §6.11):

* A connection is identified by (UDP address, our virtual port, the peer's
  virtual port).  Datagrams are decoded once (several packets may share one),
  then each packet goes to its connection.
* A host *listens* on virtual ports.  It answers a SYN without keeping state: its
  connection signature is an HMAC of the client's address and ports under a
  per-endpoint secret, so the CONNECT that follows can be checked against the
  same value.  A CONNECT creates the host-side :class:`Connection`
  (:meth:`Connection.accept`).  The peer never checks a connection signature
  (spec §1.6), so the host makes it a cookie that a captured CONNECT cannot
  reuse: the HMAC also takes the time (:data:`COOKIE_EPOCH`; it verifies as
  long as a client retransmits its CONNECT, at least two epochs) and the signature of the connection last accepted
  on that (address, ports), live or recently closed.  A CONNECT that would
  supersede a live connection (a client restarted on the same port) must
  verify against a SYN answered *during* that connection, and is checked before
  the live connection is touched: a replayed or forged CONNECT is refused and
  counted, the connection goes on.
* A client takes the highest free port ≤ 15 of its stream type for each peer
  address (spec §1.1), and sends SYN.
* Bad packets (another variant, checksum, signature, session, unknown connection) are
  dropped and counted in :meth:`statistics` under :data:`DROP_REASONS`; they never raise.

Interface (the aioquic shape of ../shared/STYLE.md practice 2):
``receive_datagram(data, addr, now)``, ``datagrams_to_send(now)``,
``get_timer()``, ``handle_timer(now)``, ``next_event()``; user verbs
``listen``, ``connect``, ``send``, ``close``.
"""

from __future__ import annotations

import hashlib
import heapq
import hmac
import itertools
import math
import os
import re
from collections import Counter, deque
from collections.abc import Callable

import attrs

from pianode.prudp.connection import BufferPool, Connection, RandomBytes, State, count_other_variant
from pianode.prudp.events import Address, ConnectionId, Event, Settings
from protocols.errors import AuthenticationError, DecodeError
from protocols.prudp.codec import PacketCodec
from protocols.prudp.identify import datagram_variants, signature_variants
from protocols.prudp.packet import Flag, PacketType, PrudpPacket
from protocols.prudp.signatures import expected_signature
from protocols.prudp.variants import Framing

__all__ = ["COOKIE_EPOCH", "DROP_REASONS", "IDENTIFY_PER_SECOND", "EndpointCore"]

#: Why an endpoint drops a packet: statistics count each as ``dropped_<reason>`` (and a packet of another
#: variant also under ``other_variant:<its variant names>``).  Only ``bad_checksum`` and ``bad_signature``
#: mean another access key: they are counted when no other variant reads the packet.
DROP_REASONS = (
    "other_variant",  # of another PRUDP variant (protocols.prudp.identify)
    "bad_checksum",  # our variant, but its checksum did not verify with our access key
    "bad_signature",  # our variant, but its signature did not verify with our access key
    "malformed",  # not PRUDP of any variant
    "unidentified",  # not PRUDP of our variant and access key; not tried as others (IDENTIFY_PER_SECOND)
    "no_connection",
    "bad_session",
    "bad_aggregate_ack",
    "bad_payload",
    "bad_substream",
    "beyond_window",
    "hold_full",
    "unexpected_handshake",
    "replayed",  # unreliable DATA whose id was seen (or is too old to tell), spec §6.2
    "fragmented_unreliable",  # unreliable DATA with a fragment id other than 0, spec §6.2
    "repeated_in_datagram",  # a copy of a packet earlier in its datagram, or a second SYN/CONNECT in one (§2.1)
    "unread_full",  # DATA for a connection with unread data while the endpoint holds max_unread_bytes unread
)

#: At most this many datagrams a second (and as many at once) that our variant cannot read are tried as
#: every other variant (several decodes each): a flood of junk costs little more than dropping it, and a
#: misconfigured peer, a few packets a second, is still named.  The rest count as ``unidentified``.
IDENTIFY_PER_SECOND = 20

#: Seconds per epoch of the host's connection-signature cookie: a CONNECT verifies with the cookie of its
#: SYN+ACK for as long as a client retransmits it (at least two epochs), then never again (a capture replayed
#: later opens nothing).
COOKIE_EPOCH = 30.0
#: Closed connections whose signature the host remembers (while their cookies verify), so that a CONNECT of
#: the connection before cannot open its port again.
REMEMBERED_CLOSED = 4096


class EndpointCore:
    """Sans-IO PRUDP endpoint: client and host at once."""

    def __init__(self, settings: Settings, *, random_bytes: RandomBytes = os.urandom) -> None:
        self.settings = settings
        self.codec = PacketCodec(settings.variant, settings.access_key)
        self._random = random_bytes
        self._secret = random_bytes(32)
        self._listening: set[int] = set()
        self.connections: dict[ConnectionId, Connection] = {}
        self._events: deque[Event] = deque()
        self._out: list[tuple[bytes, Address]] = []
        self._stats: Counter[str] = Counter()
        #: What all connections buffer on receipt (Settings.max_buffered_bytes; see _evict).
        self._pool = BufferPool(settings.max_buffered_bytes)
        #: Connections something happened to since datagrams_to_send last ran (their output is collected then).
        self._touched: dict[ConnectionId, Connection] = {}
        #: Each connection's next timer, and a heap of them (entries whose time is no longer the connection's are
        #: stale and skipped): get_timer and handle_timer look at due connections only, not at every one.
        self._timer_at: dict[ConnectionId, float] = {}
        self._timers: list[tuple[float, int, ConnectionId]] = []
        self._timer_order = itertools.count()
        self._identify_budget = float(IDENTIFY_PER_SECOND)  # a token bucket, see _may_identify
        self._identify_at = -math.inf
        #: Host side: the local signature of the last connection closed on an id, and when (see _bind).
        self._closed: dict[ConnectionId, tuple[bytes, float]] = {}
        #: Our session id in the last connection on an id (client and host): the next one takes another, so
        #: that a packet replayed from that connection names another session (v0 signs DATA and DISCONNECT
        #: without anything of their connection, spec §2.5).  Bounded like _closed.
        self._last_session: dict[ConnectionId, int] = {}
        rto, retrying = settings.rto, 0.0  # how long a client retransmits its CONNECT (Connection._give_up_after)
        for _ in range(settings.transmissions):
            retrying, rto = retrying + rto, min(rto * settings.backoff, settings.rto_max)
        #: Epochs a cookie verifies in (this one and the ones before): the whole retransmission of a CONNECT.
        self._cookie_epochs = max(2, math.ceil(retrying / COOKIE_EPOCH) + 1)
        #: Set by a driver that holds what connections received until the application reads it: whether a
        #: connection's DATA is to be dropped unacknowledged now (Settings.max_unread_bytes); None takes all.
        self.unread_full: Callable[[ConnectionId], bool] | None = None

    # ---------------------------------------------------------------- verbs
    def listen(self, port: int | None = None, stream_type: int | None = None) -> int:
        """Accept connections on a virtual port; returns the vport byte."""
        st = self.settings.stype if stream_type is None else stream_type
        p = self.settings.variant.server_port if port is None else port
        vp = (st << 4) | p
        self._listening.add(vp)
        return vp

    def _allocate(self, address: Address, stream_type: int) -> int:
        used = {c.local_vport for c in self.connections if c.address == address}
        preferred = self.settings.variant.client_port
        order = [preferred] + [p for p in range(15, -1, -1) if p != preferred]
        for port in order:
            vp = (stream_type << 4) | port
            if vp not in used and vp not in self._listening:
                return vp
        raise RuntimeError(f"no free virtual port of stream type {stream_type} towards {address}")

    def connect(self, address: Address, now: float, *, port: int | None = None, stream_type: int | None = None) -> ConnectionId:
        """Start a client connection; a :class:`Connected` or :class:`ConnectionFailed` event follows."""
        st = self.settings.stype if stream_type is None else stream_type
        remote = (st << 4) | (self.settings.variant.server_port if port is None else port)
        cid = ConnectionId(address, self._allocate(address, st), remote)
        size = self.settings.variant.connection_signature_bytes
        conn = Connection(
            self.settings, self.codec, cid, is_client=True, local_signature=self._random(size), random_bytes=self._random,
            pool=self._pool,
        )
        if conn.local_session == self._last_session.get(cid):
            conn.local_session ^= 0x80  # (the SYN carries session 0: the CONNECT is the first to name it)
        self._note_session(conn)
        self.connections[cid] = conn
        conn.start(now)
        self._collect(conn)
        return cid

    def send(self, cid: ConnectionId, data: bytes, now: float, substream: int = 0) -> None:
        conn = self._get(cid)
        conn.send(data, substream, now)
        self._collect(conn)

    def can_send(self, cid: ConnectionId, size: int) -> bool:
        """Whether connection *cid*'s send queue takes *size* more bytes now (True when it is gone:
        the send then reports why): within its own bound, and within the endpoint's (Settings.max_queued_bytes)
        unless it has nothing queued."""
        conn = self.connections.get(cid)
        if conn is None or conn.state == State.CLOSED:
            return True
        if not conn.can_send(size):
            return False
        if conn.queued_bytes == 0:
            return True
        queued = sum(c.queued_bytes for c in self.connections.values())  # (only when this one has some queued)
        return queued + size <= self.settings.max_queued_bytes

    def stats_note(self, what: str) -> None:
        """Count something the endpoint's driver did to a connection (shown in statistics)."""
        self._stats[what] += 1

    def send_unreliable(self, cid: ConnectionId, data: bytes, now: float) -> None:
        conn = self._get(cid)
        conn.send_unreliable(data, now)
        self._collect(conn)

    def close(self, cid: ConnectionId, now: float) -> None:
        conn = self.connections.get(cid)
        if conn is not None:
            conn.close(now)
            self._collect(conn)

    def abort(self, cid: ConnectionId, now: float) -> None:
        conn = self.connections.get(cid)
        if conn is not None:
            conn.abort(now)
            self._collect(conn)

    def _get(self, cid: ConnectionId) -> Connection:
        conn = self.connections.get(cid)
        if conn is None or conn.state == State.CLOSED:
            raise ConnectionError(f"no open PRUDP connection {cid}")
        return conn

    # -------------------------------------------------------------- inputs
    def receive_datagram(self, data: bytes, address: Address, now: float) -> None:
        try:
            packets = self.codec.decode(data)
        except DecodeError as exc:
            if not self._may_identify(now):
                self._stats["dropped_unidentified"] += 1
                return
            heard = datagram_variants(data, self.codec.access_key, self.settings.variant)
            count_other_variant(self._stats, heard, "bad_checksum" if isinstance(exc, AuthenticationError) else "malformed")
            return
        seen: set[tuple[object, ...]] = set()
        for p in packets:
            # A copy of a packet earlier in the same datagram is no retransmission (that comes in a datagram of its
            # own), and a client opens a connection with one SYN (one CONNECT) per datagram: acking each copy (spec
            # §6.1), or answering each SYN (stateless, signed with the access key alone), would let one spoofed
            # datagram reflect a thousand datagrams toward the address it names.
            key = (p.type, p.flags, p.source, p.destination, p.session_id, p.substream_id, p.sequence_id,
                   -1 if p.fragment_id is None else p.fragment_id, p.payload)  # fmt: skip
            # (the payload too: new-format aggregate acks share their header, spec §6.4)
            if p.type in (PacketType.SYN, PacketType.CONNECT) and not p.flags & Flag.ACK:
                key = (p.type,)
            if key in seen:
                self._stats["dropped_repeated_in_datagram"] += 1
                continue
            seen.add(key)
            self._dispatch(p, address, now)

    def _may_identify(self, now: float) -> bool:
        """Whether a datagram dropped at *now* may be tried as the other variants (:data:`IDENTIFY_PER_SECOND`)."""
        elapsed = max(0.0, now - self._identify_at)
        self._identify_at = max(now, self._identify_at)
        self._identify_budget = min(float(IDENTIFY_PER_SECOND), self._identify_budget + elapsed * IDENTIFY_PER_SECOND)
        if self._identify_budget < 1:
            return False
        self._identify_budget -= 1
        return True

    def _host_signature(self, address: Address, p: PrudpPacket, epoch: int, bind: bytes) -> bytes:
        msg = f"{address[0]}|{address[1]}|{p.source}|{p.destination}|{epoch}|".encode() + bind
        size = self.settings.variant.connection_signature_bytes
        return hmac.new(self._secret, msg, hashlib.sha256).digest()[:size]

    def _bind(self, cid: ConnectionId, now: float) -> bytes:
        """What the host's cookie for *cid* is bound to: the live connection's signature, else that of the one
        closed on *cid* while its cookies still verify, else nothing."""
        conn = self.connections.get(cid)
        if conn is not None and not conn.is_client:  # (a closed one not yet removed is remembered as it goes)
            return conn.local_signature
        closed = self._closed.get(cid)
        if closed is not None and now - closed[1] < self._cookie_epochs * COOKIE_EPOCH:
            return closed[0]
        return b""

    def _remember_closed(self, conn: Connection, now: float) -> None:
        if conn.is_client:
            return
        self._closed.pop(conn.id, None)
        self._closed[conn.id] = (conn.local_signature, now)
        while len(self._closed) > REMEMBERED_CLOSED:
            self._closed.pop(next(iter(self._closed)))

    def _note_session(self, conn: Connection) -> None:
        self._last_session.pop(conn.id, None)
        self._last_session[conn.id] = conn.local_session
        while len(self._last_session) > REMEMBERED_CLOSED:
            self._last_session.pop(next(iter(self._last_session)))

    def _verified_cookie(self, address: Address, p: PrudpPacket, now: float, bind: bytes) -> bytes | None:
        """The cookie *p* (a CONNECT) is signed with, of this epoch or the few before; None when it is none."""
        epoch = math.floor(now / COOKIE_EPOCH)
        for e in range(epoch, epoch - self._cookie_epochs, -1):
            cookie = self._host_signature(address, p, e, bind)
            if p.signature == expected_signature(p, self.settings.variant, self.settings.access_key, peer_signature=cookie):
                return cookie
        return None

    def _refuse(self, why: str) -> None:
        self._stats["refused_connect"] += 1
        self._stats[f"refused: {why}"] += 1

    def _dispatch(self, p: PrudpPacket, address: Address, now: float) -> None:
        cid = ConnectionId(address, p.destination, p.source)
        conn = self.connections.get(cid)
        if conn is not None and conn.state != State.CLOSED:
            if not conn.is_client and self._is_new_client(conn, p):
                # The peer restarted on the same virtual port: a fresh SYN or a CONNECT
                # with another signature/session supersedes the old connection, once it verifies
                # against a SYN answered during this connection (a replayed or forged one does not).
                if p.type != PacketType.CONNECT:
                    self._answer_syn(p, address, now)
                    return
                cookie = self._verified_cookie(address, p, now, conn.local_signature)
                if cookie is None:
                    self._refuse("a CONNECT for a live connection did not verify (replayed or forged)")
                    return
                conn.abort(now, "superseded by a new CONNECT from the same port")
                self._collect(conn)
                self._stats.update(conn.stats)
                self._remember_closed(conn, now)
                del self.connections[cid]
                self._accept(cid, p, cookie, now)
                return
            if (
                self.unread_full is not None
                and p.type == PacketType.DATA
                and not (p.flags & Flag.ACK or p.flags & Flag.MULTI_ACK and self.settings.variant.framing == Framing.V1)
                and self.unread_full(cid)
            ):
                # Unacknowledged, it comes again once the application reads (the bound holds back, loses nothing).
                self._stats["dropped_unread_full"] += 1
                return
            conn.receive_packet(p, now)
            self._collect(conn)
            if self._pool.used > self._pool.limit:
                self._evict(now)
            return
        if p.destination not in self._listening or p.flags & Flag.ACK:
            self._stats["dropped_no_connection"] += 1
            return
        if p.type == PacketType.SYN:
            self._answer_syn(p, address, now)
        elif p.type == PacketType.CONNECT:
            cookie = self._verified_cookie(address, p, now, self._bind(cid, now))
            if cookie is None:
                self._refuse("CONNECT signature does not verify (another access key, an old or replayed CONNECT)")
                return
            self._accept(cid, p, cookie, now)
        else:
            self._stats["dropped_no_connection"] += 1

    def _evict(self, now: float) -> None:
        """In-order data took the connections' buffers past max_buffered_bytes: end the connection that buffers
        the most (a peer holding partial messages it never ends) until they fit again.  An early packet never
        gets here: it is dropped unacked when it does not fit (Connection._on_request)."""
        while self._pool.used > self._pool.limit:
            worst = max(self.connections.values(), key=lambda c: c.buffered, default=None)
            if worst is None or not worst.buffered:
                return
            worst.abort(now, "the host's receive buffers are full (max_buffered_bytes) and it buffered the most")
            self._stats["aborted: buffer bound"] += 1
            self._collect(worst)

    def _accept(self, cid: ConnectionId, p: PrudpPacket, cookie: bytes, now: float) -> None:
        if len(self.connections) >= self.settings.max_connections:
            self._refuse("the host holds max_connections connections")
            return
        same_source = sum(1 for c in self.connections.values() if c.id.address[0] == cid.address[0])
        if same_source >= self.settings.max_connections_per_source:
            self._refuse("too many connections from one source")
            return
        try:
            conn = Connection.accept(self.settings, self.codec, cid, p, cookie, now, random_bytes=self._random,
                                     avoid_session=self._last_session.get(cid), pool=self._pool)  # fmt: skip
        except DecodeError as exc:
            # one counter per kind of refusal: numbers the peer chose (a length) would make one per value
            self._refuse(re.sub(r"\d+", "N", str(exc)))
            return
        self._note_session(conn)
        self._closed.pop(cid, None)
        self.connections[cid] = conn
        self._collect(conn)

    @staticmethod
    def _is_new_client(conn: Connection, p: PrudpPacket) -> bool:
        if p.flags & Flag.ACK:
            return False
        if p.type == PacketType.SYN:
            return True
        return p.type == PacketType.CONNECT and (
            p.connection_signature != conn.remote_signature or p.session_id != conn.remote_session
        )

    def _answer_syn(self, p: PrudpPacket, address: Address, now: float) -> None:
        v = self.settings.variant
        if p.signature != expected_signature(p, v, self.settings.access_key):
            count_other_variant(self._stats, signature_variants(p, v, self.settings.access_key), "bad_signature")
            return
        cid = ConnectionId(address, p.destination, p.source)
        cookie = self._host_signature(address, p, math.floor(now / COOKIE_EPOCH), self._bind(cid, now))
        ack = PrudpPacket(
            source=p.destination,
            destination=p.source,
            type=PacketType.SYN,
            flags=Flag.ACK | Flag.HAS_SIZE,
            connection_signature=cookie,
        )
        if v.framing == Framing.V1:
            theirs = p.supported_functions or 0
            minor = min(theirs & 0xFF, self.settings.minor)
            functions = (theirs >> 8) & self.settings.supported_functions
            ack = attrs.evolve(
                ack,
                supported_functions=minor | (functions << 8),
                max_substream=min(p.max_substream or 0, self.settings.max_substream),
            )
        ack = attrs.evolve(ack, signature=expected_signature(ack, v, self.settings.access_key))
        self._out.append((self.codec.encode(ack), address))
        self._stats["syn_answered"] += 1

    # ------------------------------------------------------------- outputs
    def _collect(self, conn: Connection) -> None:
        """Take *conn*'s events, and note that something happened to it: its output is collected and its timer
        rescheduled (only such connections are looked at, so a datagram costs the same whatever the count)."""
        self._drain(conn)
        self._touched[conn.id] = conn
        t = conn.get_timer()
        if t is None:
            self._timer_at.pop(conn.id, None)
        elif self._timer_at.get(conn.id) != t:
            self._timer_at[conn.id] = t
            heapq.heappush(self._timers, (t, next(self._timer_order), conn.id))

    def _drain(self, conn: Connection) -> None:
        while conn.events:
            self._events.append(conn.events.popleft())

    def next_event(self) -> Event | None:
        return self._events.popleft() if self._events else None

    def datagrams_to_send(self, now: float) -> list[tuple[bytes, Address]]:
        out, self._out = self._out, []
        touched, self._touched = self._touched, {}
        for cid, conn in touched.items():
            if self.connections.get(cid) is not conn:
                continue  # (superseded or removed meanwhile)
            out.extend((d, cid.address) for d in conn.datagrams_to_send())
            self._drain(conn)
            if conn.state == State.CLOSED and not conn.events:
                self._stats.update(conn.stats)
                self._remember_closed(conn, now)
                del self.connections[cid]
                self._timer_at.pop(cid, None)
        return out

    def get_timer(self) -> float | None:
        timers = self._timers
        while timers:
            t, _, cid = timers[0]
            if self._timer_at.get(cid) == t and cid in self.connections:
                return t
            heapq.heappop(timers)  # stale: the connection rescheduled or went
        return None

    def handle_timer(self, now: float) -> None:
        due: dict[ConnectionId, None] = {}
        while self._timers and self._timers[0][0] <= now:
            t, _, cid = heapq.heappop(self._timers)
            if self._timer_at.get(cid) == t:
                del self._timer_at[cid]
                due[cid] = None
        for cid in due:
            conn = self.connections.get(cid)
            if conn is None:
                continue
            t = conn.get_timer()
            if t is not None and t <= now:
                conn.handle_timer(now)
            self._collect(conn)

    def statistics(self) -> dict[str, int]:
        """Endpoint counters plus the sum of every live connection's counters."""
        total = Counter(self._stats)
        for c in self.connections.values():
            total.update(c.stats)
        return dict(total)
