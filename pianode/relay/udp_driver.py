"""The real UDP socket under relay connections, and the Trio loop that drives them.

Theory of operation: one non-blocking stdlib socket (never ``trio.socket``, so
a site's virtual network, installed as the run's socket factory, cannot
capture the relay's own traffic).  :meth:`QuicDriver.run` waits until the
socket is readable or the earliest QUIC timer is due, drains the socket,
hands each datagram to its connection (the owner's ``route``), runs due
timers, and sends what every touched connection has to send, each datagram to
the address QUIC gives with it.  A send from another task (a Pia datagram
from a node) :meth:`mark` s its connection and wakes the loop, which sends
everything marked in the meantime together.
"""

from __future__ import annotations

import errno
import math
import socket
from collections.abc import Callable, Iterable

import trio

from pianode.relay.quic import RelayConnection

__all__ = ["QuicDriver"]


class QuicDriver:
    def __init__(self, bind: tuple[str, int]) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 21)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 21)
        except OSError:
            pass
        try:
            sock.bind(bind)
        except BaseException:
            sock.close()
            raise
        sock.setblocking(False)
        self.sock = sock
        self._scope: trio.CancelScope | None = None
        self._dirty: dict[int, RelayConnection] = {}
        self.send_errors = 0

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.sock.getsockname()[:2]
        return (str(host), int(port))

    def flush(self, conn: RelayConnection, now: float | None = None) -> None:
        """Send what *conn* has to send now; move the loop's wake-up earlier if its timer did."""
        now = trio.current_time() if now is None else now
        for data, addr in conn.datagrams_to_send(now):
            try:
                self.sock.sendto(data, addr)
            except BlockingIOError:
                self.send_errors += 1  # QUIC's loss recovery resends what mattered
            except OSError as exc:
                if exc.errno not in (errno.ENOBUFS, errno.ECONNREFUSED, errno.ENETUNREACH, errno.EHOSTUNREACH):
                    raise
                self.send_errors += 1
        timer = conn.get_timer()
        if timer is not None and self._scope is not None and timer < self._scope.deadline:
            self._scope.deadline = timer

    def mark(self, conn: RelayConnection) -> None:
        """*conn* has something to send: the loop sends it as soon as the running task yields.

        Everything marked meanwhile goes out together, so the datagrams of one burst (a
        broadcast to every station, a frame of every node) share QUIC packets: one packet and
        one encryption for several Pia datagrams, at every hop."""
        self._dirty[id(conn)] = conn
        if self._scope is not None:
            self._scope.cancel()

    async def run(
        self,
        connections: Callable[[], Iterable[RelayConnection]],
        route: Callable[[bytes, tuple[str, int], float], RelayConnection | None],
        on_timer: Callable[[RelayConnection, float], None],
    ) -> None:
        """Until cancelled: *route* handles a datagram (returns the connection it touched),
        *on_timer* runs a due connection's timer."""
        try:
            while True:
                deadline = min((t for c in connections() if (t := c.get_timer()) is not None), default=math.inf)
                with trio.CancelScope(deadline=deadline) as scope:
                    self._scope = scope
                    await trio.lowlevel.wait_readable(self.sock)
                self._scope = None
                now = trio.current_time()
                touched: dict[int, RelayConnection] = {}
                for _ in range(32):
                    try:
                        data, addr = self.sock.recvfrom(65536)
                    except BlockingIOError:
                        break
                    except OSError:
                        continue  # ICMP errors surface here on Linux
                    conn = route(data, (str(addr[0]), int(addr[1])), now)
                    if conn is not None:
                        touched[id(conn)] = conn
                for conn in list(connections()):
                    timer = conn.get_timer()
                    if timer is not None and timer <= now:
                        on_timer(conn, now)
                        touched[id(conn)] = conn
                touched.update(self._dirty)
                self._dirty.clear()
                for conn in touched.values():
                    self.flush(conn, now)
        finally:
            self._scope = None

    def close(self) -> None:
        self.sock.close()
