"""The relay hub: admits sites by certificate, places them in rooms and forwards their datagrams.

Theory of operation: one UDP socket (:class:`~pianode.relay.udp_driver.QuicDriver`)
carries every site's QUIC connection.  A datagram is routed by its destination
connection id; an Initial with an unknown one opens a new
:class:`~pianode.relay.quic.RelayConnection`.  Each connection's events go to
:class:`~pianode.relay.hub_state.HubState`: a site admitted by its certificate
sends Hello and gets its room and address; its envelopes are forwarded to the
members the state names, as DATAGRAM frames, at once.  Refusals and departures
are logged in one line each through *log* (printable: peers choose some of
the words).

A connection is *half-open* from its first Initial until its peer's
certificate passed: it costs the hub a TLS handshake and state while anyone
who can send a UDP datagram can open one.  At most
``MAX_HANDSHAKES_PER_ADDRESS`` are half-open per peer IP and
``MAX_HANDSHAKES`` in all; an Initial beyond is dropped (counted as
``handshakes over limit``; QUIC's client sends it again) and a half-open
connection that does not finish its handshake within the idle timeout is
refused.  Only the latest ``MAX_REFUSALS_KEPT`` refusals are kept.

An admitted site has ``HELLO_TIMEOUT`` to send Hello; one that does not (it
may ping all it likes) is refused with ``no Hello within N s``, counted as
``no Hello in time``: without, it held its connection for good.  From its
Hello on, its deadline is its certificate's expiry: then it is refused
(``certificate expired``), as a new connection with that certificate would be.
"""

from __future__ import annotations

import datetime
import itertools
from collections import Counter, deque
from collections.abc import Callable

import trio
from aioquic.buffer import Buffer, BufferReadError
from aioquic.quic.packet import QuicPacketType, pull_quic_header

from pianode.relay.certificates import Credentials
from pianode.relay.hub_state import HubState
from pianode.relay.limits import BulkLedger
from pianode.relay.quic import EventKind, RelayConnection, RelayEvent, configuration
from pianode.relay.udp_driver import QuicDriver
from protocols.relay_control import BulkData, Hello, Ping, Pong, Refused, encode_frame
from protocols.text import printable

__all__ = ["HELLO_TIMEOUT", "MAX_HANDSHAKES", "MAX_HANDSHAKES_PER_ADDRESS", "MAX_REFUSALS_KEPT", "RelayHub"]

#: Half-open connections (handshake not done, certificate not checked) the hub holds in all...
MAX_HANDSHAKES = 512
#: ...and per peer IP (sites behind one NAT, or every station of a ``pianode mesh --relay``, share one).
MAX_HANDSHAKES_PER_ADDRESS = 64
#: Refusals kept in ``RelayHub.refusals`` (each is also logged when it happens).
MAX_REFUSALS_KEPT = 256
#: Seconds an admitted site has to send Hello.  A site's Hello waits for the hub's certificate and
#: then leaves with the last flight of its handshake (quic.py holds it), so it reaches the hub
#: right after admission, later only by that flight's retransmissions: 5 s covers several of those
#: at any round trip a site keeps real time over, and is the idle timeout, the same bound a
#: handshake gets (a path silent that long is given up anyway).
HELLO_TIMEOUT = 5.0
_HELLO_DEADLINE = "hello"
#: A site's certificate is checked at the handshake; the deadline after Hello ends its connection when
#: the certificate expires (connections live for days: a site pings to keep its own).
_EXPIRY_DEADLINE = "certificate expiry"
#: Bulk bytes the hub holds for forwarding, in all and per sender (its certificate name): a frame
#: counts once however many members it goes to, until the last of them took it.  Each member's queue
#: is also capped (quic.MAX_BULK_BACKLOG).  A sender gets at most a quarter of the hub's, so one or
#: three cannot starve the others; 64 MB is four frames of the largest, or one member's backlog.
MAX_HUB_BULK = 256 * 1024 * 1024
MAX_SENDER_BULK = 64 * 1024 * 1024


class RelayHub:
    def __init__(
        self,
        credentials: Credentials,
        listen: tuple[str, int],
        *,
        state: HubState | None = None,
        log: Callable[[str], None] = lambda line: None,
    ) -> None:
        self.credentials = credentials
        self.listen = listen
        self.state = state or HubState()
        self.log = lambda line: log(printable(line))
        self._config = configuration(credentials, is_client=False)
        self._by_cid: dict[bytes, RelayConnection] = {}
        self._ids: dict[RelayConnection, int] = {}
        self._conns: dict[int, RelayConnection] = {}
        self._peers: dict[int, tuple[str, int]] = {}
        self._next_id = itertools.count(1)
        self.driver: QuicDriver | None = None
        self.refusals: deque[str] = deque(maxlen=MAX_REFUSALS_KEPT)
        self._half_open: dict[RelayConnection, str] = {}  # connection -> its peer's IP
        self._half_open_by_ip: Counter[str] = Counter()
        self.bulk = BulkLedger(MAX_HUB_BULK, MAX_SENDER_BULK)

    @property
    def address(self) -> tuple[str, int]:
        assert self.driver is not None
        return self.driver.address

    async def serve(self, *, task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED) -> None:
        self.driver = QuicDriver(self.listen)
        try:
            task_status.started(self.driver.address)
            await self.driver.run(lambda: list(self._conns.values()), self._route, self._on_timer)
        finally:
            self.driver.close()

    # ------------------------------------------------------------------ datagrams
    def _route(self, data: bytes, addr: tuple[str, int], now: float) -> RelayConnection | None:
        try:
            header = pull_quic_header(Buffer(data=data), host_cid_length=self._config.connection_id_length)
        except (ValueError, BufferReadError):
            self.state.drops["not QUIC"] += 1
            return None
        conn = self._by_cid.get(header.destination_cid)
        if conn is None:
            if header.packet_type != QuicPacketType.INITIAL or len(data) < 1200:
                self.state.drops["unknown connection"] += 1
                return None
            if len(self._half_open) >= MAX_HANDSHAKES or self._half_open_by_ip[addr[0]] >= MAX_HANDSHAKES_PER_ADDRESS:
                self.state.drops["handshakes over limit"] += 1
                return None
            conn = RelayConnection(
                self._config, self.credentials.ca, original_destination_connection_id=header.destination_cid
            )
            cid = next(self._next_id)
            self._ids[conn] = cid
            self._conns[cid] = conn
            self._peers[cid] = addr
            self._by_cid[header.destination_cid] = conn
            self._by_cid[conn.quic.host_cid] = conn
            self._half_open[conn] = addr[0]
            self._half_open_by_ip[addr[0]] += 1
        elif not self.state.charge(self._ids[conn], now):
            return None  # the site is over its budget: dropped before it costs a decryption
        self._handle(conn, conn.receive_datagram(data, addr, now), now)
        return conn

    def _on_timer(self, conn: RelayConnection, now: float) -> None:
        self._handle(conn, conn.handle_timer(now), now)

    def _handle(self, conn: RelayConnection, events: list[RelayEvent], now: float) -> None:
        cid = self._ids.get(conn)
        if cid is None:
            return
        peer = f"{self._peers[cid][0]}:{self._peers[cid][1]}"
        for ev in events:
            if ev.kind is EventKind.DATAGRAM:
                data = ev.value
                assert isinstance(data, bytes)
                for target in self.state.forward(cid, data, now):
                    other = self._conns.get(target)
                    if other is not None and other.send_datagram(data):
                        self._flush(other)
            elif ev.kind is EventKind.CONTROL:
                self._control(cid, conn, ev.value, now)
            elif ev.kind is EventKind.BULK:
                if isinstance(ev.value, BulkData):
                    self._bulk(cid, ev.value)
            elif ev.kind is EventKind.ADMITTED:
                self._handshake_done(conn)
                refusal = self.state.admit(cid, str(ev.value), peer)
                if refusal is not None:
                    self.refusals.append(f"{peer}: {refusal}")
                    self.log(f"refused: {peer}: {refusal}")
                    conn.close(refusal, refused=True)
                    self._flush(conn)
                    continue
                conn.set_deadline(now + HELLO_TIMEOUT, _HELLO_DEADLINE)
            elif ev.kind is EventKind.DEADLINE and ev.value == _HELLO_DEADLINE:
                self.state.drops["no Hello in time"] += 1
                conn.close(f"no Hello within {HELLO_TIMEOUT:g} s", refused=True)
            elif ev.kind is EventKind.DEADLINE and ev.value == _EXPIRY_DEADLINE and conn.peer_certificate is not None:
                self.state.count_drop(cid, "certificate expired")
                reason = f"client certificate expired on {conn.peer_certificate.not_valid_after_utc:%Y-%m-%d %H:%M} UTC"
                self.log(f"refused: {peer}: {reason}")
                conn.close(reason, refused=True)
            elif ev.kind is EventKind.CID_ISSUED:
                self._by_cid[ev.value] = conn  # type: ignore[index]
            elif ev.kind is EventKind.CID_RETIRED:
                self._by_cid.pop(ev.value, None)  # type: ignore[arg-type]
            elif ev.kind is EventKind.CLOSED:
                self._closed(cid, conn, str(ev.value), peer)

    def _bulk(self, cid: int, msg: BulkData) -> None:
        """Queue a site's bulk frame for its members, one frame for all of them (see MAX_HUB_BULK)."""
        targets = self.state.bulk(cid, msg)
        if not targets:
            return
        frame = self.bulk.frame(self.state.clients[cid].name, encode_frame(targets[0][1]))
        if isinstance(frame, str):
            self.state.count_drop(cid, frame)
            return
        for target, _ in targets:
            other = self._conns.get(target)
            if other is None:
                continue
            refused = other.queue_bulk(frame)
            if refused is not None:
                self.state.count_drop(cid, refused)
            self._flush(other)
        frame.release()

    def _control(self, cid: int, conn: RelayConnection, msg: object, now: float) -> None:
        if isinstance(msg, Ping):
            conn.send_control(Pong(msg.token))
        elif isinstance(msg, Hello):
            conn.set_deadline(None)
            if conn.peer_certificate is not None:
                left = conn.peer_certificate.not_valid_after_utc - datetime.datetime.now(datetime.timezone.utc)
                conn.set_deadline(now + max(0.0, left.total_seconds()), _EXPIRY_DEADLINE)
            for target, out in self.state.hello(cid, msg, now):
                other = self._conns.get(target)
                if other is None:
                    continue
                other.send_control(out)  # type: ignore[arg-type]
                if isinstance(out, Refused):
                    other.close(out.reason, refused=True)
                self._flush(other)
            record = self.state.clients.get(cid)
            if record is not None and record.address is not None:
                self.log(f"joined: {record.name} from {record.peer} as {record.address} in room {msg.room}")
            for target, reason in self.state.to_close:
                other = self._conns.get(target)
                if other is not None:
                    other.close(reason, refused=False)
                    self._flush(other)
            self.state.to_close.clear()
        else:
            conn.close(f"unexpected {type(msg).__name__} from a site", refused=False)

    def _handshake_done(self, conn: RelayConnection) -> None:
        ip = self._half_open.pop(conn, None)
        if ip is not None:
            self._half_open_by_ip[ip] -= 1
            if not self._half_open_by_ip[ip]:
                del self._half_open_by_ip[ip]

    def _closed(self, cid: int, conn: RelayConnection, reason: str, peer: str) -> None:
        self._handshake_done(conn)
        record = self.state.clients.get(cid)
        if not conn.admitted:
            line = f"{peer}: {reason}"
            self.refusals.append(line)
            self.log(f"refused: {line}")
        elif record is not None:
            self.log(f"left: {record.name} ({record.address or 'no room'}) from {peer}: {reason}")
        for target, out in self.state.leave(cid):
            other = self._conns.get(target)
            if other is not None:
                other.send_control(out)  # type: ignore[arg-type]
                self._flush(other)
        conn.drop_queued_bulk(partial=True)  # what it never took is no longer held for it
        self._conns.pop(cid, None)
        self._ids.pop(conn, None)
        self._peers.pop(cid, None)
        for key in [k for k, v in self._by_cid.items() if v is conn]:
            del self._by_cid[key]

    def _flush(self, conn: RelayConnection) -> None:
        if self.driver is not None:
            self.driver.mark(conn)  # sent at the end of this batch, with whatever else it gets
