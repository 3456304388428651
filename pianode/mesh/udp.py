"""UDP endpoint with a draining receive loop, for real and simulated sockets.

Theory of operation: one ``await sock.recvfrom()`` per datagram costs a Trio
scheduler pass (about 7-8 µs here), which caps a node at ~130k datagrams/s.
Instead the endpoint reads with non-blocking receives until the socket would
block, then waits for readability once (perf-limits §5.6, §7); on Linux one
``recvmmsg`` reads up to a batch (:mod:`pianode.mesh.mmsg`: a system call per
batch, not per datagram, and no failing call at the end).  Sends are
non-blocking too and only wait when the kernel buffer is full; a batch of them
(a frame to every station) goes in one ``sendmmsg`` on Linux (the same module).

Two implementations share the interface:

* real sockets (created through ``trio.socket.socket``): a stdlib socket on the
  same file descriptor, set non-blocking, drained with ``recvfrom``;
  ``trio.lowlevel.wait_readable``/``wait_writable`` on the descriptor;
* simulated sockets from :mod:`pianode.sim.netsim` (or any socket object offering
  ``recv_nowait()`` and ``wait_readable()``), used under ``MockClock``.
"""

from __future__ import annotations

import errno
import socket as stdlib_socket
from typing import Any

import trio

from pianode.mesh.config import MAX_DATAGRAM
from pianode.mesh.mmsg import batch_receiver, batch_sender

__all__ = ["MAX_DATAGRAM", "RECEIVE_SIZE", "UdpEndpoint", "open_udp_endpoint"]

#: What one receive reads: a datagram longer than MAX_DATAGRAM arrives cut to one byte more, so
#: the session can tell it (and drop it as ``oversized``) from any datagram it takes.
RECEIVE_SIZE = MAX_DATAGRAM + 1

#: The fewest datagrams :meth:`UdpEndpoint.send_all_nowait` hands to ``sendmmsg``: below that a loop of
#: ``sendto`` costs less.  Measured here (Python 3.11, loopback, 100-byte datagrams, CPU per call): 2
#: datagrams 6.6 µs by ``sendto`` against 8.6 µs by ``sendmmsg``, 4: 12.5 against 13.8, 8: 25.7-27.1 against
#: 27.8-28.9, 10 about even, 12: 36.7 against 35.6, 31: 93.3-94.3 against 86.0-86.6.  ``sendmmsg``'s own
#: Python (the buffer, the addresses, the iovecs, the ctypes call) costs what a few system calls do.
SENDMMSG_FROM = 12


class UdpEndpoint:
    """A bound UDP socket with batch receive and non-blocking send."""

    #: The most datagrams one :meth:`receive_batch` reads (the batch receiver's slots).
    BATCH_LIMIT = 64

    def __init__(self, sock: Any) -> None:
        self._sock = sock
        self._simulated = hasattr(sock, "recv_nowait")
        self._raw: stdlib_socket.socket | None = None
        #: The socket may be in Trio's readiness polling (it waited since :meth:`forget_readiness`).
        self._polled_by_trio = False
        self._batch = None
        self._batch_send = None
        if not self._simulated:
            raw = stdlib_socket.socket(fileno=sock.fileno())
            raw.setblocking(False)
            self._raw = raw
            # Many datagrams a system call where the platform offers it (pianode.mesh.mmsg).
            self._batch = batch_receiver(raw, self.BATCH_LIMIT, RECEIVE_SIZE)
            self._batch_send = batch_sender(raw, self.BATCH_LIMIT, RECEIVE_SIZE)
        self.send_errors = 0
        self.receive_errors = 0

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._sock.getsockname()[:2]
        return (str(host), int(port))

    def receive_batch(self, limit: int = 256) -> list[tuple[bytes, tuple[str, int]]]:
        """Return up to *limit* waiting datagrams without blocking."""
        batch = self._batch
        if batch is not None and limit <= self.BATCH_LIMIT:
            while True:
                try:
                    return batch.receive(limit)  # (fewer than the limit: the socket was empty)
                except OSError:
                    self.receive_errors += 1  # as below: an ICMP error, taken off the socket; read on
        out: list[tuple[bytes, tuple[str, int]]] = []
        if self._raw is not None:
            recv = self._raw.recvfrom
            append = out.append
            while len(out) < limit:
                try:
                    append(recv(RECEIVE_SIZE))  # (data, (host, port)), as it comes
                except BlockingIOError:
                    break
                except OSError:
                    # ICMP errors (port unreachable) surface here on Linux.
                    self.receive_errors += 1
            return out
        while len(out) < limit:
            try:
                data, addr = self._sock.recv_nowait()
            except trio.WouldBlock:
                break
            out.append((data, (str(addr[0]), int(addr[1]))))
        return out

    async def wait_readable(self) -> None:
        if self._raw is not None:
            self._polled_by_trio = True
            await trio.lowlevel.wait_readable(self._raw)
        else:
            await self._sock.wait_readable()

    def forget_readiness(self) -> None:
        """Take the socket out of Trio's readiness polling until the next wait (which puts it back); only
        while no task waits on it.  A socket that stays registered has the kernel call the poller for
        every datagram it receives and every send it completes, waiter or not: the sockets of a frame
        clock that reads them itself (``Node.set_polled``) need not pay that.  (Trio's ``notify_closing``
        is what drops a registration; with no waiter it wakes no one.)"""
        if self._raw is not None and self._polled_by_trio:
            self._polled_by_trio = False
            trio.lowlevel.notify_closing(self._raw)

    async def send(self, data: bytes, addr: tuple[str, int]) -> None:
        if self._raw is None:
            try:
                await self._sock.sendto(data, addr)
            except OSError:
                self.send_errors += 1
            return
        while True:
            try:
                self._raw.sendto(data, addr)
                return
            except BlockingIOError:
                self._polled_by_trio = True
                await trio.lowlevel.wait_writable(self._raw)
            except OSError as exc:
                if exc.errno in (errno.ENOBUFS, errno.EAGAIN):
                    await trio.sleep(0)
                    continue
                self.send_errors += 1
                return

    def send_nowait(self, data: bytes, addr: tuple[str, int]) -> bool:
        """Send if the kernel takes it now; False when it would block (simulated: always queues)."""
        if self._raw is None:
            send = getattr(self._sock, "sendto_nowait", None)
            if send is None:
                return False
            try:
                send(data, addr)
            except OSError:
                self.send_errors += 1
            return True
        try:
            self._raw.sendto(data, addr)
        except BlockingIOError:
            return False
        except OSError:
            self.send_errors += 1
        return True

    def send_all_nowait(self, out: list[tuple[bytes, tuple[str, int]]]) -> int:
        """Send *out* in order as far as the kernel takes it now; returns how many went.

        :meth:`send_nowait` for a batch (a frame to every station): on Linux one
        ``sendmmsg`` for many datagrams (:mod:`pianode.mesh.mmsg`; from
        ``SENDMMSG_FROM`` datagrams on, as fewer cost less by ``sendto``), else one
        loop around ``sendto``, without a method call per datagram.
        """
        raw = self._raw
        if raw is None:
            for i, (data, addr) in enumerate(out):
                if not self.send_nowait(data, addr):
                    return i
            return len(out)
        sent = 0
        batch = self._batch_send
        if batch is not None and len(out) >= SENDMMSG_FROM:
            while len(out) - sent > 1:
                try:
                    went = batch.send(out, sent)
                except OSError:
                    self.send_errors += 1  # the datagram it met is lost (as below); go on with the rest
                    sent += 1
                    continue
                if went is None:
                    break  # not for sendmmsg (an address that is a name): sendto below
                if not went:
                    return sent
                sent += went
            if sent == len(out):
                return sent
        sendto = raw.sendto
        while True:
            try:
                for data, addr in out[sent:] if sent else out:
                    sendto(data, addr)
                    sent += 1
                return sent
            except BlockingIOError:
                return sent
            except OSError:
                self.send_errors += 1  # this one is lost (as send_nowait loses it); go on with the rest
                sent += 1

    def close(self) -> None:
        self._batch = self._batch_send = None
        if self._raw is not None:
            self._raw.detach()  # the trio socket owns the descriptor
            self._raw = None
        self._sock.close()


async def open_udp_endpoint(
    bind: tuple[str, int], *, broadcast: bool = False, reuse: bool = False, rcvbuf: int = 1 << 20,
    factory: trio.abc.SocketFactory | None = None,
) -> UdpEndpoint:
    """Create and bind a UDP socket through ``trio.socket`` (so custom socket factories apply), or
    through *factory* (``NodeConfig.socket_factory``: a relay site's network, for one)."""
    if factory is None:
        sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM)
    else:
        sock = factory.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM, 0)
    options = [(stdlib_socket.SO_RCVBUF, rcvbuf)]
    if broadcast:
        options.append((stdlib_socket.SO_BROADCAST, 1))
    if reuse:
        options.append((stdlib_socket.SO_REUSEADDR, 1))
        if hasattr(stdlib_socket, "SO_REUSEPORT"):
            options.append((stdlib_socket.SO_REUSEPORT, 1))
    for opt, value in options:
        try:
            sock.setsockopt(stdlib_socket.SOL_SOCKET, opt, value)
        except (OSError, NotImplementedError):
            pass  # best effort: simulated networks may not implement every option
    try:
        await sock.bind(bind)
    except BaseException:
        sock.close()
        raise
    return UdpEndpoint(sock)
