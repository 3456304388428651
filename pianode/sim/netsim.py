"""pianode's in-memory UDP network, on Trio's public socket-factory hook.

Theory of operation
-------------------
:class:`SimulatedNetwork` is a ``trio.abc.SocketFactory``.  After
``net.install()`` (inside ``trio.run``), every
``trio.socket.socket(AF_INET, SOCK_DGRAM)`` in that run is a
:class:`SimulatedSocket`: a datagram sent with ``sendto`` is handed straight to the
receive queue of the socket bound to the destination, in the same task, unless
:class:`~pianode.sim.faults.LinkFaults` say it is lost, mangled, duplicated or late.
Nothing is ever in flight outside Trio's view, so
``trio.testing.MockClock(autojump_threshold=0)`` is always safe and a
32-station, 10-second keep-alive mesh runs in about a wall second (STYLE.md B4).
Only the public hook is used; nothing here imports ``trio.testing._fake_net``.

Addressing follows Linux loopback, checked on this project's machine:

* Any IPv4 address can be bound; give each simulated node its own
  ``127.0.0.N``.  Port 0 picks a free port from ``auto_ports``.
* A unicast datagram goes to the socket bound to exactly ``(ip, port)``, else to
  one bound to ``(0.0.0.0, port)``; among several sharing a port with
  ``SO_REUSEADDR``, the most recently bound wins (one receiver, as on Linux).
* Binding a port that overlaps an existing binding raises ``EADDRINUSE`` unless
  both sockets set ``SO_REUSEADDR`` (or both ``SO_REUSEPORT``).
* Broadcast: ``255.255.255.255`` and the broadcast address of every network in
  ``broadcast_networks`` (default ``127.0.0.0/8`` → ``127.255.255.255``).  Sending
  there needs ``SO_BROADCAST`` (else ``PermissionError``/``EACCES``, as Linux
  does) and reaches every socket on that port bound to ``0.0.0.0`` or to the
  broadcast address itself.  Linux does *not* deliver broadcasts to a socket
  bound to a unicast address such as ``127.0.0.2``; pass
  ``broadcast_to_subnet_binds=True`` to get that shim (every socket bound to an
  address inside the network receives it too).
* The source address a receiver sees is the sender's bound IP, or
  ``default_source_ip`` (``127.0.0.1``) when the sender is bound to ``0.0.0.0``
  or unbound; an unbound sender is bound to ``0.0.0.0:<auto>`` on first send.
* Each socket's receive queue is bounded like a kernel buffer: a datagram costs
  ``len + 768`` bytes against ``SO_RCVBUF`` (doubled on set, as Linux does; the
  default 212992 holds about 250 small datagrams, the figure measured on real
  loopback).  A datagram that does not fit is dropped and counted
  (``queue_full``, and the socket's own ``statistics().dropped``).

Faults are decided per datagram *and receiver* by the sender's side (see
:mod:`pianode.sim.faults`); delayed copies are delivered by the network's delay task,
so use ``async with SimulatedNetwork(...) as net:`` (or
``await nursery.start(net.run)``) whenever a link has delay, jitter or reorder.

The drain contract (for the node's receive loop)
------------------------------------------------
Besides the Trio socket API (``recvfrom``, ``recvfrom_into``, ``recv``,
``recv_into``, ``sendto``, ``bind``, ``getsockname``, ``setsockopt``,
``getsockopt``, ``close``, context manager), every :class:`SimulatedSocket`, and
every :class:`~pianode.sim.faults.FaultySocket` from the real-socket fault wrapper,
offers::

    sock.recv_nowait(bufsize=65535) -> (data: bytes, (ip: str, port: int))
        # sync, never a checkpoint; raises trio.WouldBlock when the queue is
        # empty, OSError(EBADF) once the socket is closed.
    await sock.wait_readable()
        # returns when recv_nowait would succeed; a checkpoint; raises
        # trio.ClosedResourceError if the socket is closed while waiting.

So a node drains with::

    while True:
        await sock.wait_readable()          # a checkpoint even when data is queued
        for _ in range(BATCH):              # bounded batch, so other tasks run
            try:
                data, addr = sock.recv_nowait()
            except trio.WouldBlock:
                break
            handle(data, addr)

and may send without a checkpoint per datagram with::

    sock.sendto_nowait(data, (ip, port)) -> int
        # sync; the simulated network always accepts (faults still apply); on
        # real sockets a full kernel send buffer drops the datagram and counts
        # it as send_failed (UDP may drop anyway) instead of waiting.

``fileno()`` returns -1 (there is no kernel object), so code that needs a file
descriptor must test for ``recv_nowait`` first.
"""

from __future__ import annotations

import errno
import functools
import ipaddress
import os
import socket as _stdlib_socket
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import attrs
import trio

from pianode.sim.faults import (
    CLEAN,
    MAX_DATAGRAM,
    FaultingSocketFactory,
    LinkFaults,
    _split_sendto_args,
)

if TYPE_CHECKING:
    from typing_extensions import Buffer, Self

__all__ = [
    "ANY",
    "DATAGRAM_OVERHEAD",
    "DEFAULT_RECEIVE_BUFFER",
    "SimulatedNetwork",
    "SimulatedSocket",
    "SocketStatistics",
]

Address = tuple[str, int]

ANY = "0.0.0.0"
LIMITED_BROADCAST = "255.255.255.255"
# Linux's net.core.rmem_default and rmem_max on a stock kernel.
DEFAULT_RECEIVE_BUFFER = 212992
# Bytes a queued datagram costs beyond its payload (about the skb truesize of a
# small loopback datagram: 256 x 100-byte datagrams fill 212992 bytes on Linux).
DATAGRAM_OVERHEAD = 768
# Smallest SO_RCVBUF Linux accepts (value read back after setting 1).
_MIN_RECEIVE_BUFFER = 2304
# Socket-type flags Linux lets callers OR into the type argument.
_TYPE_FLAGS = getattr(_stdlib_socket, "SOCK_NONBLOCK", 0) | getattr(_stdlib_socket, "SOCK_CLOEXEC", 0)
_SO_REUSEPORT = getattr(_stdlib_socket, "SO_REUSEPORT", -1)
_STORED_OPTIONS = {
    _stdlib_socket.SO_REUSEADDR,
    _SO_REUSEPORT,
    _stdlib_socket.SO_BROADCAST,
    _stdlib_socket.SO_RCVBUF,
    _stdlib_socket.SO_SNDBUF,
}


def _oserror(code: int, detail: str) -> OSError:
    return OSError(code, f"{os.strerror(code)} ({detail})")


def _parse_address(address: object) -> Address:
    """A numeric ``(ip, port)`` from what a caller passed, like the stdlib checks it."""
    if not (isinstance(address, tuple) and len(address) == 2):
        raise TypeError(f"AF_INET address must be a tuple (host, port), not {address!r}")
    host, port = address
    if not isinstance(port, int):
        raise TypeError(f"port must be an int, not {port!r}")
    if not 0 <= port <= 65535:
        raise OverflowError("port must be 0-65535.")
    if not isinstance(host, str):
        raise TypeError(f"host must be a str, not {host!r}")
    if host == "":
        return ANY, port
    if host == "<broadcast>":
        return LIMITED_BROADCAST, port
    if host == "localhost":
        return "127.0.0.1", port
    return _numeric_ipv4(host), port


@functools.lru_cache(maxsize=4096)
def _numeric_ipv4(host: str) -> str:
    """The canonical dotted form of a numeric IPv4 address (cached: every send asks)."""
    try:
        return str(ipaddress.IPv4Address(host))
    except ValueError:  # AddressValueError is one
        raise _oserror(errno.EINVAL, f"the simulated network takes numeric IPv4 addresses only, not {host!r}") from None


def _option_int(value: object) -> int:
    if isinstance(value, int):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return int.from_bytes(bytes(value)[:4], "little", signed=True)
    raise TypeError(f"socket option value must be an int or bytes, not {value!r}")


@attrs.frozen
class SocketStatistics:
    """A snapshot of one simulated socket's receive queue."""

    queued: int
    queued_bytes: int
    dropped: int
    receive_buffer: int


class SimulatedNetwork(FaultingSocketFactory):
    """An in-memory IPv4 UDP network with broadcast, bounded queues and faults.

    Args:
        faults: default :class:`~pianode.sim.faults.LinkFaults` of every link.
        broadcast_networks: networks whose broadcast address fans out (CIDR strings).
        broadcast_to_subnet_binds: also deliver a subnet broadcast to sockets bound
            to a unicast address inside that subnet (not Linux behaviour; a shim).
        receive_buffer: default ``SO_RCVBUF`` of each socket, in bytes.
        max_receive_buffer: the largest ``SO_RCVBUF`` a socket may set (before
            Linux's doubling), like ``net.core.rmem_max``.
        default_source_ip: the source a wildcard-bound sender appears to have.
        auto_ports: inclusive range that port 0 picks from, in order.
        repeat_window: see :class:`~pianode.sim.faults.FaultInjector`.
    """

    def __init__(
        self,
        faults: LinkFaults = CLEAN,
        *,
        broadcast_networks: Iterable[str] = ("127.0.0.0/8",),
        broadcast_to_subnet_binds: bool = False,
        receive_buffer: int = DEFAULT_RECEIVE_BUFFER,
        max_receive_buffer: int = DEFAULT_RECEIVE_BUFFER,
        default_source_ip: str = "127.0.0.1",
        auto_ports: tuple[int, int] = (50000, 65535),
        repeat_window: float = 5.0,
    ) -> None:
        super().__init__(faults, repeat_window=repeat_window)
        networks = [ipaddress.IPv4Network(n) for n in broadcast_networks]
        # broadcast address -> its network (None for 255.255.255.255: every socket)
        self._broadcast: dict[str, ipaddress.IPv4Network | None] = {str(n.broadcast_address): n for n in networks}
        self._broadcast[LIMITED_BROADCAST] = None
        self.broadcast_to_subnet_binds = broadcast_to_subnet_binds
        self.receive_buffer = receive_buffer
        self.max_receive_buffer = max_receive_buffer
        self.default_source_ip = _parse_address((default_source_ip, 0))[0]
        if not 0 < auto_ports[0] <= auto_ports[1] <= 65535:
            raise ValueError(f"bad auto_ports range {auto_ports!r}")
        self._auto_ports = auto_ports
        self._next_auto = auto_ports[0]
        # port -> sockets bound to it, in bind order
        self._ports: dict[int, list[SimulatedSocket]] = {}

    @property
    def broadcast_addresses(self) -> frozenset[str]:
        """Destination addresses that fan out to every listener on the port."""
        return frozenset(self._broadcast)

    def is_broadcast(self, ip: str) -> bool:
        return ip in self._broadcast

    def socket(
        self,
        family: _stdlib_socket.AddressFamily | int = _stdlib_socket.AF_INET,
        type: _stdlib_socket.SocketKind | int = _stdlib_socket.SOCK_STREAM,  # noqa: A002 - Trio's signature
        proto: int = 0,
    ) -> SimulatedSocket:
        if family != _stdlib_socket.AF_INET:
            raise _oserror(errno.EAFNOSUPPORT, "the simulated network is IPv4 (AF_INET) only")
        if type & ~_TYPE_FLAGS != _stdlib_socket.SOCK_DGRAM:
            raise _oserror(errno.EPROTONOSUPPORT, "the simulated network carries UDP (SOCK_DGRAM) only")
        if proto not in (0, _stdlib_socket.IPPROTO_UDP):
            raise _oserror(errno.EPROTONOSUPPORT, f"protocol {proto} on a datagram socket")
        return SimulatedSocket(self, proto)

    def bound(self) -> list[Address]:
        """Every bound ``(ip, port)``, in port and bind order (for tests and tools)."""
        return [s._address for port in sorted(self._ports) for s in self._ports[port] if s._address]

    ##### Binding

    def _bind(self, sock: SimulatedSocket, ip: str, port: int) -> Address:
        if port == 0:
            port = self._free_port()
        else:
            for other in self._ports.get(port, ()):
                assert other._address is not None
                other_ip = other._address[0]
                if other_ip != ip and ANY not in (ip, other_ip):
                    continue
                if (sock.reuse_addr and other.reuse_addr) or (sock.reuse_port and other.reuse_port):
                    continue
                raise _oserror(errno.EADDRINUSE, f"{ip}:{port} is already bound")
        self._ports.setdefault(port, []).append(sock)
        return ip, port

    def _free_port(self) -> int:
        low, high = self._auto_ports
        for _ in range(high - low + 1):
            port = self._next_auto
            self._next_auto = low if port >= high else port + 1
            if port not in self._ports:
                return port
        raise _oserror(errno.EADDRINUSE, f"no free port left in {low}-{high}")

    def _unbind(self, sock: SimulatedSocket) -> None:
        assert sock._address is not None
        port = sock._address[1]
        group = self._ports[port]
        group.remove(sock)
        if not group:
            del self._ports[port]

    ##### Routing

    def _unicast_receiver(self, ip: str, port: int) -> SimulatedSocket | None:
        group = self._ports.get(port)
        if not group:
            return None
        wildcard = None
        for sock in reversed(group):  # most recently bound first
            bound_ip = sock._address[0]  # type: ignore[index]
            if bound_ip == ip:
                return sock
            if wildcard is None and bound_ip == ANY:
                wildcard = sock
        return wildcard

    def _broadcast_receivers(self, ip: str, port: int) -> list[SimulatedSocket]:
        network = self._broadcast[ip]
        shim = self.broadcast_to_subnet_binds
        receivers = []
        for sock in self._ports.get(port, ()):
            bound_ip = sock._address[0]  # type: ignore[index]
            # Linux: wildcard and broadcast-address binds only; the shim adds
            # unicast binds inside the broadcast's network.
            if bound_ip in (ANY, ip) or (shim and (network is None or ipaddress.IPv4Address(bound_ip) in network)):
                receivers.append(sock)
        return receivers

    def _route(self, sender: SimulatedSocket, data: bytes, ip: str, port: int) -> None:
        """Decide faults and deliver (or schedule) every copy of one sent datagram."""
        assert sender._address is not None
        src_ip = sender._address[0]
        if src_ip == ANY:
            src_ip = self.default_source_ip
        source = (src_ip, sender._address[1])
        if ip == ANY:  # Linux treats 0.0.0.0 as "this host"
            ip = self.default_source_ip
        if ip in self._broadcast:
            receivers = self._broadcast_receivers(ip, port)
            if not receivers:
                self.injector.counters["sent"] += 1
                self.injector.counters["no_listener"] += 1
                return
            for receiver in receivers:
                # Faults are judged per receiver (its own bound IP when it has one,
                # so an isolated node misses broadcasts too).
                bound_ip = receiver._address[0]  # type: ignore[index]
                self._transmit(source, bound_ip if bound_ip != ANY else ip, port, data, receiver)
        else:
            self._transmit(source, ip, port, data, None)

    def _transmit(self, source: Address, dst_ip: str, port: int, data: bytes, receiver: SimulatedSocket | None) -> None:
        fate = self.injector.fate(source[0], dst_ip, port, data)
        for c in fate.copies:
            if c.delay > 0.0:
                self._deliver_later(c.delay, self._deliver, c.data, source, dst_ip, port, receiver)
            else:
                self._deliver(c.data, source, dst_ip, port, receiver)

    def _deliver(self, data: bytes, source: Address, dst_ip: str, port: int, receiver: SimulatedSocket | None) -> None:
        counters = self.injector.counters
        if receiver is None:
            # Unicast is resolved on arrival: a socket bound while the datagram
            # was in flight gets it, one closed meanwhile does not.
            receiver = self._unicast_receiver(dst_ip, port)
        if receiver is None or receiver._closed:
            counters["no_listener"] += 1
        elif receiver._enqueue(data, source):
            counters["delivered"] += 1
        else:
            counters["queue_full"] += 1


class SimulatedSocket(trio.socket.SocketType):
    """A UDP socket on a :class:`SimulatedNetwork`; create it with ``trio.socket.socket``."""

    def __init__(self, network: SimulatedNetwork, proto: int = 0) -> None:
        super().__init__()
        self._net = network
        self._proto = proto
        self._address: Address | None = None
        self._closed = False
        self._queue: deque[tuple[bytes, Address]] = deque()
        self._queued_bytes = 0
        self._dropped = 0
        self._options: dict[int, int] = {_stdlib_socket.SO_RCVBUF: network.receive_buffer}
        self._readers = trio.lowlevel.ParkingLot()

    ##### Options

    @property
    def reuse_addr(self) -> bool:
        return bool(self._options.get(_stdlib_socket.SO_REUSEADDR))

    @property
    def reuse_port(self) -> bool:
        return bool(self._options.get(_SO_REUSEPORT))

    @property
    def broadcast(self) -> bool:
        return bool(self._options.get(_stdlib_socket.SO_BROADCAST))

    def setsockopt(self, level: int, optname: int, value: Any, optlen: int | None = None) -> None:
        self._check_open()
        if level != _stdlib_socket.SOL_SOCKET or optname not in _STORED_OPTIONS:
            raise _oserror(errno.ENOPROTOOPT, f"the simulated network does not implement option {level}/{optname}")
        number = _option_int(value)
        if optname == _stdlib_socket.SO_RCVBUF:
            # Linux doubles the request (for bookkeeping overhead) within limits.
            number = max(_MIN_RECEIVE_BUFFER, 2 * min(max(number, 0), self._net.max_receive_buffer))
        self._options[optname] = number

    def getsockopt(self, level: int, optname: int, buflen: int | None = None) -> Any:
        self._check_open()
        if level != _stdlib_socket.SOL_SOCKET:
            raise _oserror(errno.ENOPROTOOPT, f"the simulated network does not implement option {level}/{optname}")
        if optname == _stdlib_socket.SO_TYPE:
            number = int(_stdlib_socket.SOCK_DGRAM)
        elif optname == _stdlib_socket.SO_ERROR:
            number = 0
        elif optname in _STORED_OPTIONS:
            number = self._options.get(optname, 0)
        else:
            raise _oserror(errno.ENOPROTOOPT, f"the simulated network does not implement option {level}/{optname}")
        return number if buflen is None else number.to_bytes(4, "little", signed=True)[:buflen]

    ##### Binding and names

    async def bind(self, address: Any) -> None:
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_open()
        ip, port = _parse_address(address)
        if self._address is not None:
            raise _oserror(errno.EINVAL, "socket is already bound")
        self._address = self._net._bind(self, ip, port)
        await trio.lowlevel.cancel_shielded_checkpoint()

    def getsockname(self) -> Address:
        self._check_open()
        return self._address if self._address is not None else (ANY, 0)

    def getpeername(self) -> Address:
        raise _oserror(errno.ENOTCONN, "simulated sockets are never connected")

    async def connect(self, address: Any) -> None:
        raise _oserror(errno.EOPNOTSUPP, "the simulated network has no connect(); use sendto")

    def fileno(self) -> int:
        """-1: a simulated socket has no file descriptor (use ``wait_readable``)."""
        return -1

    ##### Sending

    async def sendto(self, data: Buffer, *args: Any) -> int:
        flags, address = _split_sendto_args(args)
        await trio.lowlevel.checkpoint_if_cancelled()
        sent = self._send(data, flags, address)
        await trio.lowlevel.cancel_shielded_checkpoint()
        return sent

    def sendto_nowait(self, data: Buffer, address: Any) -> int:
        """``sendto`` without the checkpoints: the simulated network never blocks."""
        return self._send(data, 0, address)

    def _send(self, data: Buffer, flags: int, address: Any) -> int:
        self._check_open()
        if flags:
            raise _oserror(errno.EOPNOTSUPP, f"sendto flags {flags:#x} are not simulated")
        ip, port = _parse_address(address)
        payload = bytes(data)
        if len(payload) > MAX_DATAGRAM:
            raise _oserror(errno.EMSGSIZE, f"{len(payload)}-byte datagram exceeds {MAX_DATAGRAM}")
        if port == 0:
            raise _oserror(errno.EINVAL, "cannot send to port 0")
        if self._net.is_broadcast(ip) and not self.broadcast:
            raise PermissionError(errno.EACCES, "sending to a broadcast address needs SO_BROADCAST")
        if self._address is None:  # implicit bind, as the kernel does on first send
            self._address = self._net._bind(self, ANY, 0)
        self._net._route(self, payload, ip, port)
        return len(payload)

    ##### Receiving

    def _enqueue(self, data: bytes, source: Address) -> bool:
        cost = len(data) + DATAGRAM_OVERHEAD
        if self._queue and self._queued_bytes + cost > self._options[_stdlib_socket.SO_RCVBUF]:
            self._dropped += 1
            return False
        self._queue.append((data, source))
        self._queued_bytes += cost
        self._readers.unpark_all()
        return True

    def recv_nowait(self, bufsize: int = 65535) -> tuple[bytes, Address]:
        """Pop one datagram (cut to ``bufsize``) or raise ``trio.WouldBlock``; never waits."""
        if self._closed:
            raise _oserror(errno.EBADF, "socket is closed")
        if not self._queue:
            raise trio.WouldBlock
        data, source = self._queue.popleft()
        self._queued_bytes -= len(data) + DATAGRAM_OVERHEAD
        return data[:bufsize], source

    async def wait_readable(self) -> None:
        """Return once a datagram is queued; a checkpoint either way."""
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_open()
        if self._queue:
            await trio.lowlevel.cancel_shielded_checkpoint()
            return
        while not self._queue:
            await self._readers.park()
            if self._closed:
                raise trio.ClosedResourceError("socket was closed while waiting")

    def is_readable(self) -> bool:
        return bool(self._queue)

    async def recvfrom(self, bufsize: int, flags: int = 0, /) -> tuple[bytes, Address]:
        if flags:
            raise _oserror(errno.EOPNOTSUPP, f"recvfrom flags {flags:#x} are not simulated")
        await self.wait_readable()
        return self.recv_nowait(bufsize)

    async def recv(self, bufsize: int, flags: int = 0, /) -> bytes:
        return (await self.recvfrom(bufsize, flags))[0]

    async def recvfrom_into(self, buffer: Buffer, nbytes: int = 0, flags: int = 0, /) -> tuple[int, Address]:
        view = memoryview(buffer).cast("B")
        if nbytes < 0:
            raise ValueError("negative buffersize in recvfrom_into")
        if nbytes == 0 or nbytes > len(view):
            nbytes = len(view)
        data, source = await self.recvfrom(nbytes, flags)
        view[: len(data)] = data
        return len(data), source

    async def recv_into(self, buffer: Buffer, nbytes: int = 0, flags: int = 0) -> int:
        return (await self.recvfrom_into(buffer, nbytes, flags))[0]

    def statistics(self) -> SocketStatistics:
        return SocketStatistics(
            queued=len(self._queue),
            queued_bytes=self._queued_bytes,
            dropped=self._dropped,
            receive_buffer=self._options[_stdlib_socket.SO_RCVBUF],
        )

    ##### Lifetime

    def _check_open(self) -> None:
        if self._closed:
            raise _oserror(errno.EBADF, "socket is closed")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._address is not None:
            self._net._unbind(self)
        self._queue.clear()
        self._queued_bytes = 0
        self._readers.unpark_all()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def family(self) -> _stdlib_socket.AddressFamily:
        return _stdlib_socket.AF_INET

    @property
    def type(self) -> _stdlib_socket.SocketKind:
        return _stdlib_socket.SOCK_DGRAM

    @property
    def proto(self) -> int:
        return self._proto

    @property
    def did_shutdown_SHUT_WR(self) -> bool:  # noqa: N802 - Trio's name
        return False

    def __repr__(self) -> str:
        state = "closed" if self._closed else (f"{self._address[0]}:{self._address[1]}" if self._address else "unbound")
        return f"<SimulatedSocket {state}>"
