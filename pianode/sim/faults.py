"""Deterministic per-packet fault injection for UDP: loss, duplication, reordering,
delay, truncation and bit corruption, on simulated and on real sockets.

Theory of operation
-------------------
Every datagram handed to ``sendto`` gets a *fate*: lost, or delivered as one or two
copies, each with its own delay and possibly truncated or with one bit flipped.  The
fate is a pure function (:func:`decide_fate`) of

    (seed, source IP, destination IP, destination port, datagram bytes, occurrence)

hashed with BLAKE2b.  Nothing depends on a shared random stream or on a per-link
packet counter, because Trio deliberately randomises the order of tasks that are
ready in the same tick: with a shared stream, which packet draws which number
changes from run to run (STYLE.md B4, trap 2).  With a keyed hash, the same traffic
gets the same faults whatever the interleaving, so runs under
``trio.testing.MockClock`` give the same multiset of deliveries every time.

*occurrence* counts earlier sends of the very same bytes on the same link (seen
within the last one to two ``repeat_window``).  It exists so that a
byte-identical retransmission (a PRUDP resend, a repeated keep-alive, the three
copies of a LAN browse reply) is not condemned to share the fate of the first
copy; it is still independent of scheduling, since swapping two identical
datagrams changes nothing.  The source *port* is left out of the key
because automatically assigned ports depend on bind order.

Delays are served by one :class:`DelayLine` task (a heap ordered by due time)
running in a nursery the factory owns; it reads time only through Trio, so
``MockClock(autojump_threshold=0)`` jumps straight to the next due packet.
Reordering is extra delay (``reorder_delay``) given to some packets, so later
packets overtake them.

This module holds the pieces shared by :class:`pianode.sim.netsim.SimulatedNetwork`
and :class:`FaultInjectingSocketFactory`, which wraps *real* Trio sockets on the
public ``trio.socket.set_custom_socket_factory`` hook (issue 6, "Fault
injection"; used by ``pianode mesh --loss --dup --reorder --delay --corrupt
--seed``).  Per-link overrides (:meth:`FaultingSocketFactory.partition`,
:meth:`~FaultingSocketFactory.isolate`, ...) take IP addresses, one per node.

Receive contract: sockets from both factories offer, besides the usual
``recvfrom``, a sync ``recv_nowait(bufsize=65535) -> (data, (ip, port))`` raising
``trio.WouldBlock`` and an ``async wait_readable()``; see :mod:`pianode.sim.netsim`.
"""

from __future__ import annotations

import errno
import hashlib
import heapq
import itertools
import math
import socket as _stdlib_socket
import struct
import sys
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Any

import attrs
import trio

if sys.version_info < (3, 11):  # pragma: no cover - trio pulls the backport in
    from exceptiongroup import BaseExceptionGroup

if TYPE_CHECKING:
    from typing_extensions import Buffer, Self

__all__ = [
    "CLEAN",
    "DelayLine",
    "FaultInjectingSocketFactory",
    "FaultInjector",
    "FaultStatistics",
    "FaultingSocketFactory",
    "FaultySocket",
    "LinkFaults",
    "PacketCopy",
    "PacketFate",
    "decide_fate",
]

# Largest UDP payload over IPv4 (65535 - 20 byte IP header - 8 byte UDP header).
MAX_DATAGRAM = 65507


def _probability(_instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{attribute.name} must be a probability in [0, 1], got {value!r}")


def _seconds(_instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not (value >= 0.0 and math.isfinite(value)):
        raise ValueError(f"{attribute.name} must be a finite number of seconds >= 0, got {value!r}")


@attrs.frozen
class LinkFaults:
    """What can go wrong on a link, decided independently per datagram.

    Args:
        loss: probability that a datagram is dropped.
        duplicate: probability that a delivered datagram arrives twice.
        reorder: probability that a copy is held back ``reorder_delay`` seconds
            longer, so datagrams sent after it overtake it.
        delay: fixed one-way latency in seconds added to every copy.
        jitter: extra latency, uniform in ``[0, jitter)`` seconds, per copy.
        truncate: probability that a datagram is cut short (to a uniform length
            in ``[0, len - 1]``).
        corrupt: probability that one bit of the datagram is flipped.
        seed: key of the per-packet hash; same seed and traffic, same faults.
        reorder_delay: hold-back time of a reordered copy, in seconds.
    """

    loss: float = attrs.field(default=0.0, validator=_probability)
    duplicate: float = attrs.field(default=0.0, validator=_probability)
    reorder: float = attrs.field(default=0.0, validator=_probability)
    delay: float = attrs.field(default=0.0, validator=_seconds)
    jitter: float = attrs.field(default=0.0, validator=_seconds)
    truncate: float = attrs.field(default=0.0, validator=_probability)
    corrupt: float = attrs.field(default=0.0, validator=_probability)
    seed: int = 0
    reorder_delay: float = attrs.field(default=0.05, validator=_seconds)

    @property
    def is_clean(self) -> bool:
        """True when no datagram can be touched (the fast path skips hashing)."""
        return not (
            self.loss or self.duplicate or self.reorder or self.delay or self.jitter or self.truncate or self.corrupt
        )


CLEAN = LinkFaults()
# A cut link: what partition() and isolate() install.
_CUT = LinkFaults(loss=1.0)


@attrs.frozen
class PacketCopy:
    """One copy of a datagram to deliver ``delay`` seconds after it was sent."""

    data: bytes = attrs.field(repr=lambda b: b.hex())
    delay: float
    reordered: bool = False


@attrs.frozen
class PacketFate:
    """The outcome of :func:`decide_fate`: no copies means the datagram is lost."""

    copies: tuple[PacketCopy, ...]
    truncated: bool = False
    corrupted: bool = False

    @property
    def lost(self) -> bool:
        return not self.copies

    @property
    def duplicated(self) -> bool:
        return len(self.copies) > 1


# Indexes of the 32-bit words of the 64-byte digest, one per independent decision.
_W_LOSS, _W_DUP, _W_REORDER, _W_JITTER, _W_TRUNC, _W_TRUNC_LEN, _W_CORRUPT, _W_BIT = range(8)
_W_DUP_REORDER, _W_DUP_JITTER = 8, 9
_SCALE = 1.0 / 4294967296.0
_SIXTEEN_WORDS = struct.Struct("<16I")


def _link_digest(seed: int, src_ip: str, dst_ip: str, dst_port: int, data: bytes) -> bytes:
    """64-byte BLAKE2b of (seed, link, bytes); its first 16 bytes identify repeats."""
    h = hashlib.blake2b(person=b"pianode-link")
    h.update(f"{seed}|{src_ip}|{dst_ip}|{dst_port}|".encode())
    h.update(data)
    return h.digest()


def _words(link_digest: bytes, occurrence: int) -> tuple[float, ...]:
    """Sixteen independent uniforms in [0, 1) for one send of one datagram.

    The first send uses the link digest itself (one hash per datagram on the
    common path); the n-th identical resend re-hashes it with n.
    """
    if occurrence:
        link_digest = hashlib.blake2b(link_digest[:16] + occurrence.to_bytes(8, "little")).digest()
    return tuple(w * _SCALE for w in _SIXTEEN_WORDS.unpack(link_digest))


def decide_fate(
    faults: LinkFaults,
    src_ip: str,
    dst_ip: str,
    dst_port: int,
    data: bytes,
    occurrence: int = 0,
) -> PacketFate:
    """Decide what happens to one datagram: a pure function of its arguments.

    Order of decisions: loss, then truncation, then corruption (the mangled bytes
    are what every copy carries, as when a frame is damaged before a switch
    duplicates it), then duplication, then per copy jitter and reordering.
    """
    if faults.is_clean:
        return PacketFate(copies=(PacketCopy(data, 0.0),))
    return _decide(faults, data, _words(_link_digest(faults.seed, src_ip, dst_ip, dst_port, data), occurrence))


def _decide(faults: LinkFaults, data: bytes, u: tuple[float, ...]) -> PacketFate:
    if u[_W_LOSS] < faults.loss:
        return PacketFate(copies=())
    truncated = corrupted = False
    if data and u[_W_TRUNC] < faults.truncate:
        data = data[: int(u[_W_TRUNC_LEN] * len(data))]
        truncated = True
    if data and u[_W_CORRUPT] < faults.corrupt:
        bit = int(u[_W_BIT] * len(data) * 8)
        mangled = bytearray(data)
        mangled[bit >> 3] ^= 1 << (bit & 7)
        data = bytes(mangled)
        corrupted = True
    copies = [_copy(faults, data, u[_W_REORDER], u[_W_JITTER])]
    if u[_W_DUP] < faults.duplicate:
        copies.append(_copy(faults, data, u[_W_DUP_REORDER], u[_W_DUP_JITTER]))
    return PacketFate(copies=tuple(copies), truncated=truncated, corrupted=corrupted)


def _copy(faults: LinkFaults, data: bytes, u_reorder: float, u_jitter: float) -> PacketCopy:
    reordered = u_reorder < faults.reorder
    delay = faults.delay + u_jitter * faults.jitter + (faults.reorder_delay if reordered else 0.0)
    return PacketCopy(data, delay, reordered)


@attrs.frozen
class FaultStatistics:
    """Counters by reason; a snapshot from ``statistics()``.

    ``sent`` counts datagrams handed to ``sendto`` (one per broadcast receiver on
    the simulated network); ``delivered`` counts copies put in a receive queue (on
    real sockets: handed to the kernel).  ``duplicated`` and ``reordered`` count
    extra and held-back copies.  ``no_listener`` and ``queue_full`` exist only on
    the simulated network, ``send_failed`` only on real sockets (a delayed copy
    the kernel refused, or whose socket was closed meanwhile).
    """

    sent: int = 0
    delivered: int = 0
    lost: int = 0
    duplicated: int = 0
    reordered: int = 0
    delayed: int = 0
    truncated: int = 0
    corrupted: int = 0
    no_listener: int = 0
    queue_full: int = 0
    send_failed: int = 0

    def as_dict(self) -> dict[str, int]:
        return attrs.asdict(self)


_COUNTERS = tuple(f.name for f in attrs.fields(FaultStatistics))


class FaultInjector:
    """Per-link fault settings plus the bookkeeping around :func:`decide_fate`.

    Links are keyed by IP address.  Lookup order for a datagram from ``s`` to
    ``d``: an override for ``(s, d)``, then for ``(s, any)``, then ``(any, d)``,
    then the default.
    """

    def __init__(self, faults: LinkFaults = CLEAN, *, repeat_window: float = 5.0, max_tracked: int = 100_000) -> None:
        if not repeat_window > 0.0:
            raise ValueError(f"repeat_window must be > 0 seconds, got {repeat_window!r}")
        self.default = faults
        self.counters: dict[str, int] = dict.fromkeys(_COUNTERS, 0)
        self._links: dict[tuple[str | None, str | None], LinkFaults] = {}
        # Repeat tracking in two generations of repeat_window seconds each (the
        # generation is floor(now / window), a function of time only, so it is
        # as reproducible as the send times).  Keys are the first 8 bytes of the
        # link digest; values, how many times those bytes were sent so far.
        self._window = repeat_window
        self._max_tracked = max_tracked
        self._generation = 0
        self._current: dict[int, int] = {}
        self._previous: dict[int, int] = {}

    ##### Per-link overrides

    def set_link(self, src: str | None, dst: str | None, faults: LinkFaults | None) -> None:
        """Override the faults from ``src`` to ``dst`` (``None`` = any); ``None`` clears."""
        if faults is None:
            self._links.pop((src, dst), None)
        else:
            self._links[(src, dst)] = faults

    def link(self, src: str, dst: str) -> LinkFaults:
        """The faults that apply from ``src`` to ``dst``."""
        if self._links:
            for key in ((src, dst), (src, None), (None, dst)):
                found = self._links.get(key)
                if found is not None:
                    return found
        return self.default

    ##### Deciding

    def fate(self, src_ip: str, dst_ip: str, dst_port: int, data: bytes) -> PacketFate:
        """Decide and count the fate of one datagram (``sent`` is counted here)."""
        counters = self.counters
        counters["sent"] += 1
        faults = self.link(src_ip, dst_ip)
        if faults.is_clean:
            return PacketFate(copies=(PacketCopy(data, 0.0),))
        if faults.loss >= 1.0:  # a cut link: no need to hash
            counters["lost"] += 1
            return PacketFate(copies=())
        digest = _link_digest(faults.seed, src_ip, dst_ip, dst_port, data)
        fate = _decide(faults, data, _words(digest, self._occurrence(digest[:16])))
        if fate.lost:
            counters["lost"] += 1
            return fate
        counters["truncated"] += fate.truncated
        counters["corrupted"] += fate.corrupted
        counters["duplicated"] += len(fate.copies) - 1
        for c in fate.copies:
            counters["reordered"] += c.reordered
            counters["delayed"] += c.delay > 0.0
        return fate

    def _occurrence(self, key: bytes) -> int:
        """How many times these bytes went over this link recently (0 = first).

        "Recently" is the current or previous ``repeat_window`` generation, so
        a datagram repeated at least every window keeps counting up; memory
        holds at most ``2 * max_tracked`` entries.  Past that cap new datagrams
        are not tracked (they count as first sends), which keeps a flood cheap
        but is the one case where a repeat's fate can depend on task order.
        """
        generation = int(trio.current_time() // self._window)
        if generation != self._generation:
            self._previous = self._current if generation == self._generation + 1 else {}
            self._current = {}
            self._generation = generation
        k = int.from_bytes(key[:8], "little")
        n = self._current.get(k)
        if n is None:
            n = self._previous.get(k, 0)
            if len(self._current) >= self._max_tracked:
                return n
        self._current[k] = n + 1
        return n

    def statistics(self) -> FaultStatistics:
        return FaultStatistics(**self.counters)


##### The delay line: one task, a heap of due copies


class DelayLine:
    """Runs callbacks at virtual or real due times, from one task.

    ``schedule`` pushes onto a heap; the task sleeps in a cancel scope whose
    deadline is the earliest due time, and pushing something earlier simply moves
    that deadline.  Time comes only from Trio, so MockClock autojumps work.  One
    task instead of one sleeping task per delayed datagram keeps a 60 Hz,
    32-station session cheap.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self._order = itertools.count()
        self._scope: trio.CancelScope | None = None
        self.running = False

    def __len__(self) -> int:
        return len(self._heap)

    def schedule(self, due: float, fn: Callable[..., None], *args: Any) -> None:
        if not self.running:
            raise RuntimeError(
                "delayed or reordered delivery needs the factory's delay task: "
                "use `async with factory:` or `await nursery.start(factory.run)` first"
            )
        heapq.heappush(self._heap, (due, next(self._order), fn, args))
        if self._scope is not None and due < self._scope.deadline:
            self._scope.deadline = due

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        if self.running:
            raise RuntimeError("this delay line is already running")
        self.running = True
        heap = self._heap
        try:
            task_status.started()
            while True:
                now = trio.current_time()
                while heap and heap[0][0] <= now:
                    _, _, fn, args = heapq.heappop(heap)
                    fn(*args)
                with trio.CancelScope(deadline=heap[0][0] if heap else math.inf) as scope:
                    self._scope = scope
                    await trio.sleep_forever()
                self._scope = None
        finally:
            # Copies still in flight when the network shuts down are simply gone.
            self.running = False
            self._scope = None
            heap.clear()


##### The shared factory base: faults, per-link overrides, lifetime


class FaultingSocketFactory(trio.abc.SocketFactory):
    """Base of the simulated network and the real-socket fault wrapper.

    Lifetime: delays need the delay task.  Either ``async with factory:`` (the
    factory owns a nursery for it) or ``await nursery.start(factory.run)``.
    Without it, links with no delay, jitter or reordering still work.
    """

    def __init__(self, faults: LinkFaults = CLEAN, *, repeat_window: float = 5.0) -> None:
        self.injector = FaultInjector(faults, repeat_window=repeat_window)
        self._delay_line = DelayLine()
        self._nursery_manager: AbstractAsyncContextManager[trio.Nursery] | None = None
        self._nursery: trio.Nursery | None = None

    @property
    def faults(self) -> LinkFaults:
        """The default faults of every link without an override."""
        return self.injector.default

    @faults.setter
    def faults(self, value: LinkFaults) -> None:
        self.injector.default = value

    def install(self) -> trio.abc.SocketFactory | None:
        """Make ``trio.socket.socket`` create sockets here, for the current ``trio.run``.

        Returns the factory that was installed before.  Must be called inside
        ``trio.run`` (the hook is a RunVar, so it never leaks into another run).
        """
        return trio.socket.set_custom_socket_factory(self)

    def statistics(self) -> FaultStatistics:
        """Counters by reason (a frozen snapshot)."""
        return self.injector.statistics()

    ##### Per-link overrides (IP addresses; ``None`` means any)

    def set_link_faults(
        self, src: str | None, dst: str | None, faults: LinkFaults | None, *, both_ways: bool = False
    ) -> None:
        """Override the faults from ``src`` to ``dst``; ``faults=None`` removes the override."""
        self.injector.set_link(src, dst, faults)
        if both_ways:
            self.injector.set_link(dst, src, faults)

    def partition(self, a: str, b: str) -> None:
        """Cut the link between ``a`` and ``b`` in both directions."""
        self.set_link_faults(a, b, _CUT, both_ways=True)

    def heal(self, a: str, b: str) -> None:
        """Undo :meth:`partition` (and any other override) between ``a`` and ``b``."""
        self.set_link_faults(a, b, None, both_ways=True)

    def isolate(self, ip: str) -> None:
        """Drop everything from and to ``ip``: a killed or unplugged node."""
        self.injector.set_link(ip, None, _CUT)
        self.injector.set_link(None, ip, _CUT)

    def restore(self, ip: str) -> None:
        """Undo :meth:`isolate`."""
        self.injector.set_link(ip, None, None)
        self.injector.set_link(None, ip, None)

    ##### Lifetime of the delay task

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve delayed copies until cancelled (for ``await nursery.start(factory.run)``)."""
        await self._delay_line.run(task_status=task_status)

    async def __aenter__(self) -> Self:
        manager = trio.open_nursery()
        nursery = await manager.__aenter__()
        self._nursery_manager, self._nursery = manager, nursery
        try:
            await nursery.start(self._delay_line.run)
        except BaseException as exc:  # pragma: no cover - start() of a trivial task
            await manager.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    async def __aexit__(
        self, etype: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        manager, nursery = self._nursery_manager, self._nursery
        assert manager is not None and nursery is not None, "__aexit__ without __aenter__"
        self._nursery_manager = self._nursery = None
        nursery.cancel_scope.cancel()
        try:
            # Never suppresses: only our own cancel() hits the nursery's scope,
            # and the body has finished by then.
            await manager.__aexit__(etype, exc, tb)
        except BaseExceptionGroup as group:
            # The nursery wraps the body's own exception in a group; hand the
            # caller the original instead (the delay task itself never fails).
            if exc is not None and len(group.exceptions) == 1 and group.exceptions[0] is exc:
                return
            raise

    def _deliver_later(self, delay: float, fn: Callable[..., None], *args: Any) -> None:
        self._delay_line.schedule(trio.current_time() + delay, fn, *args)


##### Faults on real sockets


def _split_sendto_args(args: tuple[Any, ...]) -> tuple[int, Any]:
    if len(args) == 1:
        return 0, args[0]
    if len(args) == 2:
        return int(args[0]), args[1]
    raise TypeError(f"sendto() takes 2 or 3 arguments ({len(args) + 1} given)")


class FaultySocket(trio.socket.SocketType):
    """A real Trio UDP socket whose ``sendto`` (and ``send``) go through the faults.

    Receiving is untouched; besides the Trio socket API it offers the drain
    contract ``recv_nowait`` / ``wait_readable`` (see :mod:`pianode.sim.netsim`).
    """

    def __init__(self, factory: FaultInjectingSocketFactory, stdlib_sock: _stdlib_socket.socket) -> None:
        super().__init__()
        self._factory = factory
        self._stdlib = stdlib_sock
        self._inner = trio.socket.from_stdlib_socket(stdlib_sock)
        self._bound_ip = "0.0.0.0"

    ##### Sending, with faults

    async def sendto(self, data: Buffer, *args: Any) -> int:
        flags, address = _split_sendto_args(args)
        payload = bytes(data)
        await self._transmit(payload, flags, address, connected=False)
        return len(payload)

    async def send(self, data: Buffer, flags: int = 0) -> int:
        payload = bytes(data)
        await self._transmit(payload, flags, self._inner.getpeername(), connected=True)
        return len(payload)

    def sendto_nowait(self, data: Buffer, address: Any) -> int:
        """Send through the faults without waiting or a checkpoint.

        A full kernel send buffer drops the copy and counts it as
        ``send_failed`` (UDP may drop it anyway) instead of waiting; other
        errors (``EACCES`` for a broadcast without ``SO_BROADCAST``...) raise.
        """
        payload = bytes(data)
        factory = self._factory
        fate = factory.injector.fate(self._bound_ip, str(address[0]), int(address[1]), payload)
        sent_now = False
        for c in fate.copies:
            if c.delay > 0.0:
                factory._deliver_later(c.delay, self._send_later, c.data, 0, address)
            else:
                sent_now = True
                try:
                    self._stdlib.sendto(c.data, address)
                except BlockingIOError:
                    factory.injector.counters["send_failed"] += 1
                else:
                    factory.injector.counters["delivered"] += 1
        if not sent_now:
            self._check_broadcast_permission(address)
        return len(payload)

    def _check_broadcast_permission(self, address: Any) -> None:
        """Raise what the kernel would have for a broadcast without ``SO_BROADCAST``.

        Needed when the faults dropped or delayed every copy, so the kernel never
        saw the send; a lost datagram must not hide a programming error.  Only
        ``255.255.255.255`` and ``x.x.x.255`` are recognised (the usual /24 and /8
        broadcast addresses).
        """
        host = str(address[0])
        if (
            host == "255.255.255.255" or host.endswith(".255") or host == "<broadcast>"
        ) and not self._stdlib.getsockopt(_stdlib_socket.SOL_SOCKET, _stdlib_socket.SO_BROADCAST):
            raise PermissionError(errno.EACCES, "Permission denied (broadcast needs SO_BROADCAST)")

    async def _transmit(self, payload: bytes, flags: int, address: Any, *, connected: bool) -> None:
        # Like Trio's own sockets: a cancelled send sends (and decides) nothing.
        await trio.lowlevel.checkpoint_if_cancelled()
        factory = self._factory
        counters = factory.injector.counters
        fate = factory.injector.fate(self._bound_ip, str(address[0]), int(address[1]), payload)
        scheduled = False
        for c in fate.copies:
            if c.delay > 0.0:
                factory._deliver_later(c.delay, self._send_later, c.data, flags, address)
            else:
                if connected:
                    await self._inner.send(c.data, flags)
                else:
                    await self._inner.sendto(c.data, flags, address)
                scheduled = True
                counters["delivered"] += 1
        if not scheduled:
            self._check_broadcast_permission(address)
            # A lost or delayed datagram is still a schedule point, as sendto is.
            await trio.lowlevel.cancel_shielded_checkpoint()

    def _send_later(self, data: bytes, flags: int, address: Any) -> None:
        counters = self._factory.injector.counters
        try:
            # A closed socket raises EBADF here: counted, like a kernel refusal.
            self._stdlib.sendto(data, flags, address)
        except OSError:
            counters["send_failed"] += 1
        else:
            counters["delivered"] += 1

    ##### The drain contract

    def recv_nowait(self, bufsize: int = 65535) -> tuple[bytes, Any]:
        """One datagram if one is queued, else ``trio.WouldBlock``; never waits."""
        try:
            return self._stdlib.recvfrom(bufsize)
        except BlockingIOError:
            raise trio.WouldBlock from None

    async def wait_readable(self) -> None:
        """Wait until a datagram is queued (``recv_nowait`` will then succeed).

        Raises ``OSError(EBADF)`` on a closed socket and ``trio.ClosedResourceError``
        when the socket is closed while waiting, like the simulated socket.
        """
        if self._stdlib.fileno() < 0:
            raise OSError(errno.EBADF, "socket is closed")
        await trio.lowlevel.wait_readable(self._stdlib)

    ##### Everything else is the real socket

    async def bind(self, address: Any) -> None:
        await self._inner.bind(address)
        self._bound_ip = str(self._inner.getsockname()[0])

    def recv(self, buflen: int, flags: int = 0, /) -> Any:
        return self._inner.recv(buflen, flags)

    def recv_into(self, buffer: Buffer, nbytes: int = 0, flags: int = 0) -> Any:
        return self._inner.recv_into(buffer, nbytes, flags)

    def recvfrom(self, bufsize: int, flags: int = 0, /) -> Any:
        return self._inner.recvfrom(bufsize, flags)

    def recvfrom_into(self, buffer: Buffer, nbytes: int = 0, flags: int = 0, /) -> Any:
        return self._inner.recvfrom_into(buffer, nbytes, flags)

    def getsockname(self) -> Any:
        return self._inner.getsockname()

    def getpeername(self) -> Any:
        return self._inner.getpeername()

    def getsockopt(self, level: int, optname: int, buflen: int | None = None) -> Any:
        if buflen is None:
            return self._inner.getsockopt(level, optname)
        return self._inner.getsockopt(level, optname, buflen)

    def setsockopt(self, level: int, optname: int, value: Any, optlen: int | None = None) -> None:
        if optlen is None:
            self._inner.setsockopt(level, optname, value)
        else:
            self._inner.setsockopt(level, optname, value, optlen)

    async def connect(self, address: Any) -> None:
        await self._inner.connect(address)

    def fileno(self) -> int:
        return self._inner.fileno()

    def is_readable(self) -> bool:
        return self._inner.is_readable()

    async def wait_writable(self) -> None:
        await self._inner.wait_writable()

    def shutdown(self, flag: int) -> None:
        self._inner.shutdown(flag)

    def close(self) -> None:
        self._inner.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def family(self) -> _stdlib_socket.AddressFamily:
        return self._inner.family

    @property
    def type(self) -> _stdlib_socket.SocketKind:
        return self._inner.type

    @property
    def proto(self) -> int:
        return self._inner.proto

    @property
    def did_shutdown_SHUT_WR(self) -> bool:  # noqa: N802 - Trio's name
        return self._inner.did_shutdown_SHUT_WR

    def __repr__(self) -> str:
        return f"<FaultySocket {self._inner!r}>"


class FaultInjectingSocketFactory(FaultingSocketFactory):
    """Real Trio sockets, with :class:`LinkFaults` applied to every UDP send.

    Installed through the public ``trio.socket.set_custom_socket_factory`` hook
    (:meth:`install`).  Non-UDP sockets are returned as plain Trio sockets.
    Faults are applied on the sending side only, so a datagram crossing two
    faulty nodes is judged once.

    Example::

        async with FaultInjectingSocketFactory(LinkFaults(loss=0.1, seed=7)) as factory:
            factory.install()
            ...  # every trio.socket.socket(AF_INET, SOCK_DGRAM) now drops ~10 %
    """

    def socket(
        self,
        family: _stdlib_socket.AddressFamily | int = _stdlib_socket.AF_INET,
        type: _stdlib_socket.SocketKind | int = _stdlib_socket.SOCK_STREAM,  # noqa: A002 - Trio's signature
        proto: int = 0,
    ) -> trio.socket.SocketType:
        # The factory *is* trio.socket.socket while installed, so it builds the
        # stdlib socket itself and hands it to Trio (the public converter).
        stdlib_sock = _stdlib_socket.socket(family, type, proto)
        if stdlib_sock.type != _stdlib_socket.SOCK_DGRAM:
            return trio.socket.from_stdlib_socket(stdlib_sock)
        return FaultySocket(self, stdlib_sock)
