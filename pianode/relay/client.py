"""A site's side of the relay: the connection to the hub, and the virtual network its nodes use.

Theory of operation
-------------------
:class:`RelayClient` keeps one QUIC connection to the hub: it checks the hub's
certificate, sends Hello for its room, and learns its virtual address from
Welcome.  It pings the hub on the control stream; when the hub falls silent
(its connection died, the hub restarted, the site's link dropped) it connects
again and asks for the same address, so the meshes above carry on with the
addresses they know.  A refusal (a certificate, a full room) is final and ends
:meth:`RelayClient.run` with :class:`RelayRefused`.

:class:`RelaySite` is the site's network: a
:class:`~pianode.sim.netsim.SimulatedNetwork` (the same socket semantics as
Linux: binds, SO_REUSEADDR, broadcast to wildcard binds) whose one host is the
virtual address, and whose wire is the relay.  Installed as a node's
``NodeConfig.socket_factory`` or as the run's socket factory, every UDP socket
of a node, of LAN discovery or of LDN is one of its sockets:

* a datagram to the virtual address itself stays on the site;
* a datagram to another address goes to the hub in an envelope (a QUIC DATAGRAM frame);
* a broadcast (``255.255.255.255`` or the room's broadcast address) reaches the
  site's own listeners and goes to the hub, which fans it out to the room;
* what the hub relays is delivered to the socket bound to its destination, or
  to every listener on the port for a broadcast, with the sender's virtual
  address as its source.
"""

from __future__ import annotations

import ipaddress
import itertools
import logging
from collections.abc import Callable

import trio

from pianode.relay.certificates import Credentials
from pianode.relay.quic import EventKind, RelayConnection, RelayEvent, configuration
from pianode.relay.udp_driver import QuicDriver
from pianode.sim.netsim import SimulatedNetwork, SimulatedSocket
from protocols.errors import DecodeError, EncodeError
from protocols.relay_control import (
    BulkData, Hello, Member, MemberJoined, MemberLeft, Ping, Pong, Refused, Welcome, decode_envelope, encode_envelope,
)  # fmt: skip

__all__ = ["RelayClient", "RelayRefused", "RelaySite"]

log = logging.getLogger("pianode.relay")

#: Seconds between pings to the hub, and of silence after which the connection is given up.
PING_INTERVAL = 0.25
SILENCE_LIMIT = 1.5


class RelayRefused(Exception):
    """The hub refused this site, or this site refused the hub; ``str()`` is the one-line reason."""


class RelaySite(SimulatedNetwork):
    """The site's virtual network; see the module docstring."""

    def __init__(self, client: RelayClient) -> None:
        super().__init__(broadcast_networks=(), default_source_ip="0.0.0.0", auto_ports=(49152, 65535))
        self.client = client
        self.relayed_out = 0
        self.relayed_in = 0
        self.unroutable = 0
        #: The room's broadcast address, once the hub welcomed the site.
        self.broadcast_address: str | None = None

    def attach(self, welcome: Welcome) -> None:
        network = ipaddress.IPv4Network(f"{welcome.address}/{welcome.prefix}", strict=False)
        self._broadcast = {str(network.broadcast_address): network, "255.255.255.255": None}
        self.default_source_ip = welcome.address
        self.broadcast_address = str(network.broadcast_address)

    def _route(self, sender: SimulatedSocket, data: bytes, ip: str, port: int) -> None:
        address = self.client.address
        if ip in ("0.0.0.0", address) or ip.startswith("127.") or address is None:
            super()._route(sender, data, ip, port)
            return
        assert sender._address is not None
        src = (address, sender._address[1])
        if ip in self._broadcast:
            super()._route(sender, data, ip, port)  # the site's own listeners hear it too
        if self.client.send_envelope(src, (ip, port), data):
            self.relayed_out += 1
        else:
            self.unroutable += 1

    def deliver(self, envelope: bytes) -> None:
        """A datagram the hub relayed to this site."""
        try:
            env = decode_envelope(envelope)
        except DecodeError:
            self.unroutable += 1
            return
        self.relayed_in += 1
        ip, port = env.destination
        if ip in self._broadcast:
            for receiver in self._broadcast_receivers(ip, port):
                self._deliver(env.payload, env.source, ip, port, receiver)
        else:
            self._deliver(env.payload, env.source, ip, port, None)


class RelayClient:
    """One site's connection to a hub, kept up until cancelled; see the module docstring."""

    def __init__(
        self,
        credentials: Credentials,
        hub: tuple[str, int],
        *,
        room: str = "lan",
        bind: tuple[str, int] = ("0.0.0.0", 0),
        reconnect: bool = True,
        on_bulk: Callable[[BulkData], None] | None = None,
        log_line: Callable[[str], None] = log.info,
    ) -> None:
        self.credentials = credentials
        self.hub = hub
        self.room = room
        self.bind = bind
        self.reconnect = reconnect
        self.on_bulk = on_bulk
        self.log_line = log_line
        self._config = configuration(credentials, is_client=True)
        self.site = RelaySite(self)
        self.conn: RelayConnection | None = None
        self.driver: QuicDriver | None = None
        self.address: str | None = None
        #: The real address the connection to the hub goes out from (its socket's), once connected.
        self.local_address: tuple[str, int] | None = None
        self.welcome: Welcome | None = None
        self.members: dict[str, Member] = {}
        self.connections = 0
        self.hub_rtt: float | None = None
        self.pongs: dict[int, float] = {}
        self._tokens = itertools.count(1)
        self._ping_sent: dict[int, float] = {}
        self._heard = 0.0
        self._welcomed = trio.Event()
        self._closed: trio.Event = trio.Event()
        self.on_pong: Callable[[int, float], None] | None = None
        self._abandoned: RelayConnection | None = None

    # ------------------------------------------------------------------ public
    async def run(self, *, task_status: trio.TaskStatus[Welcome] = trio.TASK_STATUS_IGNORED) -> None:
        """Connect, and reconnect after losing the hub, until cancelled; ``started`` with the first Welcome.

        Raises:
            RelayRefused: either side refused the other (final).
        """
        started = False
        backoff = 0.1
        while True:
            reason = await self._one_connection(task_status if not started else None)
            started = started or self.welcome is not None
            if reason.startswith("refused"):
                raise RelayRefused(reason)
            if not self.reconnect or not started:
                raise RelayRefused(f"relay {self.hub[0]}:{self.hub[1]}: {reason}")
            self.log_line(f"relay connection lost ({reason}); reconnecting")
            await trio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    def send_envelope(self, source: tuple[str, int], destination: tuple[str, int], payload: bytes) -> bool:
        conn, driver = self.conn, self.driver
        if conn is None or driver is None or self.address is None:
            return False
        try:
            envelope = encode_envelope(source, destination, payload)
        except EncodeError:
            return False
        if not conn.send_datagram(envelope):
            return False
        driver.mark(conn)
        return True

    def send_bulk(self, destination: str, channel: str, data: bytes) -> bool:
        """A blob for one member (or ``0.0.0.0``: the whole room), on the lowest-priority stream;
        False when the connection's bulk backlog is full (try again later)."""
        conn, driver = self.conn, self.driver
        if conn is None or driver is None:
            raise RuntimeError("not connected to the hub")
        queued = conn.send_bulk(BulkData(destination, channel, data))
        driver.flush(conn)
        return queued

    def ping(self) -> int:
        """Send a control ping now; returns its token (the pong is timed in ``pongs``)."""
        conn, driver = self.conn, self.driver
        if conn is None or driver is None:
            raise RuntimeError("not connected to the hub")
        token = next(self._tokens)
        self._ping_sent[token] = trio.current_time()
        conn.send_control(Ping(token))
        driver.flush(conn)
        return token

    async def wait_connected(self) -> None:
        await self._welcomed.wait()

    def drop(self) -> None:
        """Abandon the connection without a word to the hub, as a lost link or a new network
        does; :meth:`run` connects again and the site takes its address back."""
        conn = self.conn
        if conn is not None:
            self._abandoned = conn
            conn.closed_reason = conn.closed_reason or "dropped"
            self._closed.set()

    # ------------------------------------------------------------------ one connection
    async def _one_connection(self, task_status: trio.TaskStatus[Welcome] | None) -> str:
        self.driver = driver = QuicDriver(self.bind)
        self.local_address = driver.address
        conn = RelayConnection(self._config, self.credentials.ca)
        self.conn = conn
        self.connections += 1
        self._closed = trio.Event()
        now = trio.current_time()
        self._heard = now
        conn.connect(self.hub, now)
        conn.send_control(Hello(self.room, "", self.address or "0.0.0.0"))  # sent once the hub's certificate passed
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(driver.run, lambda: [conn], self._route, self._on_timer)
                nursery.start_soon(self._pinger, conn, driver)
                driver.flush(conn)
                if task_status is not None:
                    with trio.fail_after(10):
                        await _first_of(self._welcomed, self._closed)
                    if self._welcomed.is_set():
                        assert self.welcome is not None
                        task_status.started(self.welcome)
                await self._closed.wait()
                nursery.cancel_scope.cancel()
        except trio.TooSlowError:
            conn.closed_reason = conn.closed_reason or "no answer from the hub within 10 s"
        finally:
            if conn.closed_reason is None and self._abandoned is not conn:  # cancelled: tell the hub now
                conn.close("site leaving", refused=False)
                driver.flush(conn)
            self.conn = None
            self._welcomed = trio.Event() if self._welcomed.is_set() else self._welcomed
            driver.close()
        return conn.closed_reason or "closed"

    async def _pinger(self, conn: RelayConnection, driver: QuicDriver) -> None:
        while True:
            await trio.sleep(PING_INTERVAL)
            now = trio.current_time()
            if now - self._heard > SILENCE_LIMIT + (3.0 if not conn.admitted else 0.0):
                conn.closed_reason = conn.closed_reason or f"hub silent for {now - self._heard:.1f} s"
                self._closed.set()
                return
            if conn.admitted:
                token = next(self._tokens)
                self._ping_sent[token] = now
                conn.send_control(Ping(token))
                driver.flush(conn)

    def _route(self, data: bytes, addr: tuple[str, int], now: float) -> RelayConnection | None:
        conn = self.conn
        if conn is None:
            return None
        self._handle(conn, conn.receive_datagram(data, addr, now), now)
        return conn

    def _on_timer(self, conn: RelayConnection, now: float) -> None:
        self._handle(conn, conn.handle_timer(now), now)

    def _handle(self, conn: RelayConnection, events: list[RelayEvent], now: float) -> None:
        for ev in events:
            if ev.kind is EventKind.DATAGRAM:
                self._heard = now
                self.site.deliver(ev.value)  # type: ignore[arg-type]
            elif ev.kind is EventKind.CONTROL:
                self._heard = now
                self._control(conn, ev.value, now)
            elif ev.kind is EventKind.BULK:
                self._heard = now
                if self.on_bulk is not None and isinstance(ev.value, BulkData):
                    self.on_bulk(ev.value)
            elif ev.kind is EventKind.ADMITTED:
                self._heard = now
            elif ev.kind is EventKind.CLOSED:
                self._closed.set()

    def _control(self, conn: RelayConnection, msg: object, now: float) -> None:
        if isinstance(msg, Pong):
            sent = self._ping_sent.pop(msg.token, None)
            if sent is not None:
                self.hub_rtt = now - sent
                self.pongs[msg.token] = now - sent
                if self.on_pong is not None:
                    self.on_pong(msg.token, now - sent)
        elif isinstance(msg, Welcome):
            if self.address is not None and msg.address != self.address:
                conn.close(f"hub gave {msg.address}, not this site's {self.address}", refused=False)
                return
            self.welcome, self.address = msg, msg.address
            self.members = {m.address: m for m in msg.members}
            self.site.attach(msg)
            self.log_line(f"relay: in room {msg.room} as {msg.address}/{msg.prefix}, {len(msg.members)} other site(s)")
            self._welcomed.set()
        elif isinstance(msg, MemberJoined):
            self.members[msg.member.address] = msg.member
        elif isinstance(msg, MemberLeft):
            self.members.pop(msg.address, None)
        elif isinstance(msg, Refused):
            conn.close(msg.reason, refused=False)
            conn.closed_reason = f"refused by the hub: {msg.reason}"
            self._closed.set()



async def _first_of(*events: trio.Event) -> None:
    async with trio.open_nursery() as nursery:
        async def wait(event: trio.Event) -> None:
            await event.wait()
            nursery.cancel_scope.cancel()

        for event in events:
            nursery.start_soon(wait, event)
