"""A hub and sites joined by a function call instead of a socket: sans-IO relay tests with a clock of their own.

Theory of operation: :class:`Wire` holds a :class:`~pianode.relay.hub.RelayHub`
that never opens its socket and any number of :class:`WireSite` s, each a
client :class:`~pianode.relay.quic.RelayConnection` with a made-up loopback
address.  :meth:`Wire.pump` carries every datagram either side has to send to
the other, and runs due timers, until nothing moves (bounded in rounds), so a
test can play a hostile site byte by byte without waiting on real time.
"""

from __future__ import annotations

import os

from pianode.relay.certificates import Credentials
from pianode.relay.hub import RelayHub
from pianode.relay.quic import EventKind, RelayConnection, RelayEvent, configuration
from protocols.relay_control import Hello

HUB = ("127.0.0.1", 4433)


class WireSite:
    def __init__(self, wire: Wire, credentials: Credentials, addr: tuple[str, int]) -> None:
        self.addr = addr
        self.conn = RelayConnection(configuration(credentials, is_client=True), credentials.ca)
        self.events: list[RelayEvent] = []
        self.conn.connect(HUB, wire.now)

    def control(self) -> list[object]:
        return [e.value for e in self.events if e.kind is EventKind.CONTROL]

    def datagrams(self) -> list[bytes]:
        return [e.value for e in self.events if e.kind is EventKind.DATAGRAM]  # type: ignore[misc]


class Wire:
    def __init__(self, credentials: Credentials, **hub_args: object) -> None:
        self.hub = RelayHub(credentials, HUB, **hub_args)  # type: ignore[arg-type]
        self.now = 0.0
        self.sites: dict[tuple[str, int], WireSite] = {}
        self.marked: dict[int, RelayConnection] = {}
        self.hub.driver = self  # type: ignore[assignment]  # the hub marks what it has to send

    def mark(self, conn: RelayConnection) -> None:
        self.marked[id(conn)] = conn

    def site(
        self, credentials: Credentials, ip: str = "127.0.0.2", room: str | None = "lan", address: str = "0.0.0.0"
    ) -> WireSite:
        """A site that says Hello for *room* (asking for *address*) as soon as it is admitted."""
        addr = (ip, 40000 + len(self.sites))
        site = self.sites[addr] = WireSite(self, credentials, addr)
        if room is not None:
            site.conn.send_control(Hello(room, "", address))
        self.pump()
        return site

    def raw(self, data: bytes, addr: tuple[str, int]) -> None:
        """One datagram from *addr* (no site behind it) to the hub."""
        conn = self.hub._route(data, addr, self.now)
        if conn is not None:
            self.mark(conn)

    def pump(self, duration: float = 0.2, rounds: int = 2000) -> None:
        """Carry datagrams both ways and run timers, jumping the clock to the next timer when
        nothing moves, until *duration* seconds passed (or *rounds* rounds)."""
        until = self.now + duration
        for _ in range(rounds):
            if not self._exchange():
                conns = [s.conn for s in self.sites.values()] + list(self.hub._conns.values())
                timers = [t for c in conns if (t := c.get_timer()) is not None]
                nxt = min(timers, default=until)
                if nxt > until:
                    self.now = until
                    return
                self.now = max(self.now, nxt)

    def _exchange(self) -> bool:
        moved = False
        for site in list(self.sites.values()):
            timer = site.conn.get_timer()
            if timer is not None and timer <= self.now:
                site.events += site.conn.handle_timer(self.now)
            for data, _ in site.conn.datagrams_to_send(self.now):
                self.raw(data, site.addr)
                moved = True
        for conn in list(self.hub._conns.values()):
            timer = conn.get_timer()
            if timer is not None and timer <= self.now:
                self.hub._on_timer(conn, self.now)
                self.mark(conn)
        marked, self.marked = list(self.marked.values()), {}
        for conn in {id(c): c for c in [*self.hub._conns.values(), *marked]}.values():
            for data, addr in conn.datagrams_to_send(self.now):
                site = self.sites.get(addr)
                if site is not None:
                    site.events += site.conn.receive_datagram(data, HUB, self.now)
                    moved = True
        return moved


def initial(dcid: bytes | None = None) -> bytes:
    """A QUIC v1 Initial the hub cannot decrypt (random payload), padded to 1200 bytes as a real one is."""
    dcid = dcid or os.urandom(8)
    return bytes([0xC3]) + (1).to_bytes(4, "big") + bytes([len(dcid)]) + dcid + bytes([8]) + os.urandom(8) + b"\x00" + (
        0x4000 | 1200
    ).to_bytes(2, "big") + os.urandom(1200)
