"""The Trio node: one nursery, one UDP socket, one driver task around a :class:`MeshSession`.

Usage::

    async with open_node(NodeConfig(version="5.18")) as node:
        await node.create_mesh()                 # or: await node.join(("127.0.0.2", 49152))
        await node.send(1, b"hello", reliable=True)
        async for event in node.events():
            ...

Theory of operation: the driver task drains the socket without a scheduler
round trip per datagram (``pianode.mesh.udp``), feeds every datagram to the sans-IO
session with ``trio.current_time()``, runs the session's timers, sends what the
session queued and forwards its events to a bounded channel.  User calls run
the session method directly (Trio is single-threaded, the session is sync) and
then wake the driver so new output and deadlines are picked up at once.  Time
comes only from Trio, so a whole mesh runs under ``trio.testing.MockClock``.
"""

from __future__ import annotations

import math
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

import trio

from pianode.mesh.config import NodeConfig

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup
from pianode.mesh.events import Event
from pianode.mesh.group_listener import GroupListener
from pianode.mesh.session import MeshSession, StationStats, own_address_refusal
from pianode.mesh.udp import UdpEndpoint, open_udp_endpoint
from protocols.pia.versions import Proto

__all__ = ["JoinError", "Node", "open_node"]


#: Datagrams read from the socket per pass of the driver.
BATCH = 64
#: Full batches read in a row before the reader lets other tasks run.
BATCHES_PER_TURN = 4


class JoinError(Exception):
    """Joining a mesh failed (refused, denied, or no answer in time)."""


class Node:
    """A running Pia node.  Create it with :func:`open_node`."""

    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self._endpoint: UdpEndpoint | None = None
        self.session: MeshSession | None = None
        self._event_send, self._event_receive = trio.open_memory_channel[Event](config.receive_queue)
        #: The driver's cancel scope; it sleeps in it while ``_waiting`` (see :meth:`_drive`).
        self._scope = trio.CancelScope()
        self._waiting = False
        self._event_handler: Callable[[Sequence[Event]], None] | None = None
        self._data_handler: Callable[[int, bytes, bool], None] | None = None
        self._woken = False
        #: The node is reading its socket (its driver's step, or :meth:`receive_nowait`): a
        #: :meth:`receive_nowait` from one of its handlers then reads nothing.
        self._reading = False
        #: The caller reads the socket (:meth:`set_polled`): the driver sleeps off it.
        self._polled = False
        #: How long after a timer is due the driver wakes for it: two of the polling caller's ticks (it
        #: runs the timers due when it reads), else 0.
        self._slack = 0.0
        #: Datagrams the kernel refused in a non-blocking flush; the driver sends them first.
        self._unsent: list[tuple[bytes, tuple[str, int]]] = []
        #: Set while a task sends ``_unsent`` (:meth:`_send_unsent`); others wait for it.
        self._draining: trio.Event | None = None
        self._state_changed = trio.Event()
        self._state_waiters = 0  # tasks in _wait_for: only they need _state_changed set
        self.events_dropped = 0
        self.tap: Callable[[bytes, tuple[str, int], tuple[str, int], float], None] | None = None

    # ------------------------------------------------------------------ lifecycle
    @property
    def address(self) -> tuple[str, int]:
        assert self._endpoint is not None
        return self._endpoint.address

    async def _run(self, *, task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED) -> None:
        group = self.config.group_broadcast
        factory = self.config.socket_factory
        endpoint = await open_udp_endpoint(self.config.bind, broadcast=group is not None, factory=factory)
        self._endpoint = endpoint
        try:
            listener = None if group is None else await GroupListener.for_port(group[1], factory)
            self.session = MeshSession(self.config, endpoint.address, now=trio.current_time())
            self.session.tap = self.tap
            self.session.data_handler = self._data_handler
            task_status.started(endpoint.address)
            if listener is None:
                await self._drive(endpoint, self.session)
            else:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(listener.serve, self)
                    await self._drive(endpoint, self.session)
        finally:
            endpoint.close()
            self._event_send.close()

    def group_feed(self) -> Callable[[bytes, tuple[str, int], float], None] | None:
        """What the :class:`GroupListener` calls with each datagram heard on the
        group port: the session's own entry (None before the node runs)."""
        session = self.session
        return None if session is None else session.receive_group_datagram

    async def after_group_receive(self, now: float) -> None:
        """Send and hand over what group datagrams produced, in the listener's task."""
        await self._flush_here(now)

    async def _flush_here(self, now: float) -> None:
        """Send and hand over what the session queued, in the calling task.

        Cheaper than waking the driver, which costs a cancellation of its
        wait; if the session now has an earlier deadline than the one the
        driver sleeps until, the driver's deadline is moved (see :meth:`_drive`).
        """
        session, endpoint = self.session, self._endpoint
        if session is None or endpoint is None:
            self._wake()
            return
        self._queue_output(endpoint, session, now)
        await self._send_unsent(endpoint)
        self._sooner(session.get_timer())

    async def _send_unsent(self, endpoint: UdpEndpoint) -> None:
        """Send the datagrams the kernel refused, oldest first, waiting for the socket as needed; returns
        once none is left.  Each leaves ``_unsent`` only once it is sent, so what other tasks queue
        meanwhile goes behind it; one task sends them at a time (another waits until it is done)."""
        while self._draining is not None:
            await self._draining.wait()
        if not self._unsent:
            return
        self._draining = done = trio.Event()
        try:
            unsent = self._unsent
            while unsent:
                await endpoint.send(*unsent[0])
                del unsent[0]
        finally:
            self._draining = None
            done.set()

    def _queue_output(self, endpoint: UdpEndpoint, session: MeshSession, now: float) -> None:
        """Send what the session queued as far as the kernel takes it now, behind what it refused before
        (then all of it waits in ``_unsent``), and hand its events over."""
        if self._unsent:
            self._unsent.extend(session.datagrams_to_send(now))  # keep the order
            self._hand_over_events(session)
        else:
            self._hand_over(endpoint, session, now)

    def _flush_nowait(self, now: float) -> None:
        """:meth:`_flush_here` without blocking: what the kernel refuses now
        waits in ``_unsent`` for the driver, which is woken to send it."""
        session, endpoint = self.session, self._endpoint
        if session is None or endpoint is None:
            self._wake()
            return
        self._queue_output(endpoint, session, now)
        if self._unsent:
            self._wake()
        else:
            self._sooner(session.get_timer())

    async def _drive(self, endpoint: UdpEndpoint, session: MeshSession) -> None:
        """The node's task: receive, run the session's timers, send.

        It sleeps in ``wait_readable`` inside a cancel scope whose deadline is
        the session's next timer.  Entering a cancel scope costs about as much
        as the rest of a datagram's handling, so one scope serves until it is
        cancelled: its deadline is only ever moved earlier (:meth:`_sooner`,
        also from other tasks while the driver sleeps), and a timer that moved
        later costs one early wake-up, not a new scope.  Inside the scope the
        wait is the only checkpoint, so neither the deadline nor :meth:`_wake`
        can interrupt the work; whatever needs to yield (datagrams the kernel
        refused, a checkpoint after a long run of full batches or after a
        wake-up) is done outside it, and then a new scope is entered.
        """
        full = 0
        while True:
            with trio.CancelScope() as scope:
                self._scope = scope
                while True:
                    self._reading = True  # (until the wait or the end of the scope)
                    read, now = self._take_in(endpoint, session)
                    if self._unsent:
                        break  # refused earlier: they go first, below
                    self._hand_over(endpoint, session, now)
                    if self._unsent:
                        break
                    if read == BATCH:
                        # The batch stopped at its limit, not at an empty socket: more
                        # are waiting, and asking the socket again costs one system
                        # call, less than a pass through the scheduler.  (After a short
                        # batch the wait below returns at once if more came meanwhile.)
                        full += 1
                        if full < BATCHES_PER_TURN:
                            continue
                        full = 0
                        break  # let other tasks run
                    if self._woken or session.has_output():
                        break  # a user call queued output while we were busy
                    self._waiting = True
                    self._reading = False
                    self._sooner(session.get_timer())
                    if self._polled:
                        await trio.sleep_forever()  # (until the deadline or a wake-up: set_polled)
                    else:
                        await endpoint.wait_readable()
                    self._waiting = False
            # Cancelled by _wake or at the deadline, or left on purpose: work that yields.
            self._waiting = False
            self._reading = False
            self._woken = False
            if self._polled and not self._unsent:
                endpoint.forget_readiness()  # (nothing waits on it now; a wait puts it back)
            if self._unsent:
                await self._send_unsent(endpoint)
            else:
                await trio.lowlevel.checkpoint()

    @staticmethod
    def _take_in(endpoint: UdpEndpoint, session: MeshSession) -> tuple[int, float]:
        """One step of reading, the driver's and :meth:`receive_nowait`'s: a batch from the socket
        (up to ``BATCH``), judged by the session at the time it was read, then the session's timers
        if they are due.  Returns how many datagrams were read, and that time."""
        batch = endpoint.receive_batch(BATCH)
        now = trio.current_time()
        if batch:
            session.receive_datagrams(batch, now)
        timer = session.get_timer()
        if timer is not None and timer <= now:
            session.handle_timer(now)
        return len(batch), now

    async def _send_sealed(self, out: list[tuple[bytes, tuple[str, int]]], now: float) -> None:
        """Send datagrams the session sealed at once.  They moved no timer, so
        they need no flush, only to go behind what the kernel refused earlier."""
        endpoint = self._endpoint
        if self._unsent or endpoint is None:
            self._unsent.extend(out)
            await self._flush_here(now)
        else:
            self._unsent.extend(_send_what_fits(endpoint, out))
            await self._send_unsent(endpoint)
        await trio.lowlevel.checkpoint()

    def _send_sealed_nowait(self, out: list[tuple[bytes, tuple[str, int]]]) -> None:
        """:meth:`_send_sealed` without blocking: what the kernel refuses waits for the driver."""
        endpoint = self._endpoint
        if not self._unsent and endpoint is not None:
            out = _send_what_fits(endpoint, out)
        if out:
            self._unsent.extend(out)
            self._wake()

    def _sooner(self, timer: float | None) -> None:
        """Move the sleeping driver's deadline to *timer* if that is earlier; while polled, to the slack
        after *timer* whether earlier or later (the caller ran the timers due: :meth:`set_polled`)."""
        if not self._waiting:
            return
        if self._polled:
            deadline = math.inf if timer is None else timer + self._slack
            if deadline != self._scope.deadline:
                self._scope.deadline = deadline
        elif timer is not None and timer < self._scope.deadline:
            self._scope.deadline = timer

    def _hand_over(
        self, endpoint: UdpEndpoint, session: MeshSession, now: float
    ) -> None:
        """Send what the session queued as far as the kernel takes it now (``_unsent`` is empty), and
        hand its events over.  What the kernel refused is in ``_unsent`` before the handlers run, so
        what they send goes behind it."""
        self._unsent.extend(_send_what_fits(endpoint, session.datagrams_to_send(now)))
        self._hand_over_events(session)

    def _hand_over_events(self, session: MeshSession) -> None:
        if not session.has_events():
            return
        handler = self._event_handler
        if handler is not None:
            handler(session.take_events())
        else:
            send = self._event_send.send_nowait
            for event in session.take_events():
                try:
                    send(event)
                except trio.WouldBlock:
                    self.events_dropped += 1
        if self._state_waiters:
            self._state_changed.set()
            self._state_changed = trio.Event()

    def _wake(self) -> None:
        """Have the driver run now (a user call queued work it must do)."""
        self._woken = True
        if self._waiting:
            self._scope.cancel()

    def _require_session(self) -> MeshSession:
        if self.session is None:
            raise RuntimeError("node is not running")
        return self.session

    async def _wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        with trio.move_on_after(timeout):
            while not predicate():
                self._state_waiters += 1
                try:
                    await self._state_changed.wait()
                finally:
                    self._state_waiters -= 1
            return True
        return False

    # ------------------------------------------------------------------ public API
    async def create_mesh(self, *, network_id: int | None = None) -> int:
        """Create a mesh with this node as host; returns its station index (0).

        *network_id*: LDN's advertised random u32 or NEX's gathering id (default:
        the network type's rule).
        """
        session = self._require_session()
        session.create(trio.current_time(), network_id=network_id)
        self._wake()
        await trio.lowlevel.checkpoint()
        assert session.index is not None
        return session.index

    async def join(
        self, host: tuple[str, int], *, network_id: int | None = None, host_identity: tuple[int, int] | None = None
    ) -> int:
        """Join the mesh hosted at *host*; returns this node's station index.

        Raises:
            JoinError: the host refused or denied the join, or did not answer
                within ``config.join_timeout``.
        """
        session = self._require_session()
        if tuple(host) == session.local_address:
            raise JoinError(own_address_refusal(host))
        session.join(host, trio.current_time(), network_id=network_id, host_identity=host_identity)
        self._wake()
        await self._wait_for(lambda: session.joined or session.closed, self.config.join_timeout + 1)
        if not session.joined:
            raise JoinError(session.failure or "join timed out")
        assert session.index is not None
        return session.index

    async def wait_connected(self, count: int, timeout: float = 10.0) -> bool:
        """Wait until *count* other stations are joined and connected."""
        session = self._require_session()
        return await self._wait_for(lambda: sum(1 for s in session.stations() if s.state == "connected") >= count, timeout)

    async def send(self, station_index: int, data: bytes, *, reliable: bool = True) -> None:
        """Send *data* to one station (reliable: in order, exactly once).

        Raises:
            KeyError: no connected station has that index, or this node is leaving the mesh.
            pianode.mesh.reliable.SendBufferFull: the station's reliable window is full (back off and retry).
            pianode.mesh.reliable.MessageTooLarge: *data* exceeds the window's message size limit, or,
                unreliable, what one datagram of the node's ``mtu`` carries (``mtu`` - ``wire.UNRELIABLE_ROOM``: it is never split).
        """
        now = trio.current_time()
        ready = self._hand_to_session(station_index, data, reliable, now)
        if ready is not None:
            await self._send_sealed([ready], now)
            return
        await self._flush_here(now)
        await trio.lowlevel.checkpoint()

    def send_nowait(self, station_index: int, data: bytes, *, reliable: bool = True) -> None:
        """:meth:`send` without yielding to other tasks (not a checkpoint).

        For code that cannot await: a data handler (:meth:`set_data_handler`)
        answering the station it heard from, within the node's own task.  What
        the kernel refuses now is sent by the node's task, in order.  Raises
        as :meth:`send` does.
        """
        now = trio.current_time()
        ready = self._hand_to_session(station_index, data, reliable, now)
        if ready is not None:
            self._send_sealed_nowait([ready])
            return
        self._flush_nowait(now)

    def _hand_to_session(
        self, station_index: int, data: bytes, reliable: bool, now: float
    ) -> tuple[bytes, tuple[str, int]] | None:
        """Give *data* to the session: the datagram when it was sealed at once
        (unreliable, nothing queued), None when it was queued for a flush."""
        session = self._require_session()
        if reliable:
            session.send(station_index, bytes(data), reliable=True, now=now)
            return None
        return session.send_unreliable_now(station_index, bytes(data), now)

    def set_protocol_handler(self, proto: Proto, handler: Callable[[int, int, bytes], None] | None) -> None:
        """Deliver messages of *proto* (one the session does not run itself) to ``handler(index, port, payload)``."""
        handlers = self._require_session().protocol_handlers
        if handler is None:
            handlers.pop(proto, None)
        else:
            handlers[proto] = handler

    def send_protocol(self, station_index: int, proto: Proto, port: int, payload: bytes) -> None:
        """Send one message of an application-run sub-protocol to a station (sync; safe from a handler)."""
        self._require_session().send_protocol(station_index, proto, port, bytes(payload))
        self._wake()

    async def broadcast(self, data: bytes, *, reliable: bool = True) -> int:
        """Send *data* to every connected station; returns how many.

        Unreliable broadcasts on 5.27+ go out as one packet with a footer of
        receiver variable ids.  A reliable broadcast is all or nothing: it
        raises ``SendBufferFull`` without queueing if any station's window is full.
        Raises ``MessageTooLarge`` as :meth:`send` does.
        """
        session = self._require_session()
        now = trio.current_time()
        sealed = None if reliable else session.broadcast_unreliable_now(bytes(data), now)
        if sealed is not None:
            await self._send_sealed(sealed[1], now)
            return sealed[0]
        n = session.broadcast(bytes(data), reliable=reliable, now=now)
        await self._flush_here(now)
        await trio.lowlevel.checkpoint()
        return n

    def broadcast_nowait(self, data: bytes, *, reliable: bool = True) -> int:
        """:meth:`broadcast` without yielding to other tasks (not a checkpoint).

        What the kernel takes goes out at once; anything it refuses is sent by
        the node's own task.  For a loop that sends for many stations in one
        go (a frame clock shared by every station of a process).
        """
        session = self._require_session()
        now = trio.current_time()
        sealed = None if reliable else session.broadcast_unreliable_now(bytes(data), now)
        if sealed is not None:
            self._send_sealed_nowait(sealed[1])
            return sealed[0]
        n = session.broadcast(bytes(data), reliable=reliable, now=now)
        self._flush_nowait(now)
        return n

    async def leave(self, timeout: float = 2.0) -> None:
        """Leave the mesh; waits (bounded) until the other stations acknowledged it."""
        session = self._require_session()
        session.leave(trio.current_time())
        self._wake()
        await self._wait_for(lambda: session.closed, timeout)

    def events(self) -> trio.MemoryReceiveChannel[Event]:
        """The node's events (``async for event in node.events()``)."""
        return self._event_receive

    def set_event_handler(self, handler: Callable[[Sequence[Event]], None] | None) -> None:
        """Hand events to ``handler(batch)`` as the node produces them, instead of :meth:`events`.

        The handler runs in the node's own tasks, once per batch (every event
        a burst of datagrams produced, oldest first), so it must neither block
        nor raise.  It saves a channel hand-over and a task wake-up per batch,
        which counts for an application with many stations in one process.
        ``None`` goes back to the channel.
        """
        self._event_handler = handler

    def set_data_handler(self, handler: Callable[[int, bytes, bool], None] | None) -> None:
        """Hand application data to ``handler(source_index, data, reliable)`` as it is decoded.

        Instead of :class:`DataReceived` events: no event object per message,
        which counts at tens of thousands of messages a second (a game's frame
        callback).  Other events are unchanged; data reaches the handler before
        the events of the same burst of datagrams.  The handler runs inside the
        node's receive path, so it must neither block nor raise.  ``None`` goes
        back to events.
        """
        self._data_handler = handler
        if self.session is not None:
            self.session.data_handler = handler

    def stations(self) -> list[StationStats]:
        """One row per station in the mesh table (including this node)."""
        return self._require_session().stations()

    def statistics(self) -> dict[str, object]:
        """Counters, including datagrams dropped by reason."""
        session = self._require_session()
        stats = session.statistics()
        stats["events_dropped"] = self.events_dropped
        if self._endpoint is not None:
            stats["send_errors"] = self._endpoint.send_errors
        return stats

    def receive_nowait(self) -> int:
        """What the driver does when its socket turns readable, done now in the calling task, without
        blocking: read what waits (up to ``BATCHES_PER_TURN`` batches), let the session judge it, run its
        timers if due, and send what it queued as far as the kernel takes it (the rest is the driver's).

        For a loop that runs many stations in one task, as a frame clock does: after sending every
        station's frame it reads every station's socket, and the drivers, asleep in their waits, are not
        woken for what it read (Trio's wait is one-shot and level-triggered: an empty socket has nothing
        to report).  A wake-up costs the scheduler, the wait's re-arming and the driver's own steps,
        about as much as handling a few dozen datagrams.  It reads whether the driver sleeps in its
        wait or waits its turn at a checkpoint (it then finds the socket empty, or what came since).
        Called from one of this node's own handlers, while the node reads, it does nothing.  Returns
        how many datagrams it read.
        """
        session, endpoint = self.session, self._endpoint
        if session is None or endpoint is None or self._reading:
            return 0
        total = 0
        self._reading = True
        try:
            for _ in range(BATCHES_PER_TURN):
                read, now = self._take_in(endpoint, session)
                total += read
                if read < BATCH:
                    break
            else:
                if self._polled:
                    self._wake()  # more wait than one call reads: the driver reads the rest now, not next tick
        finally:
            self._reading = False
        if self._unsent or session.needs_flush():
            self._flush_nowait(now)
        else:
            self._sooner(session.get_timer())  # (what _flush_nowait ends with; what it read may have moved it)
        return total

    def set_polled(self, polled: bool, tick: float = 0.0) -> None:
        """Whether the caller reads this node's socket itself, with :meth:`receive_nowait` at least once
        every *tick* seconds, as a game's frame loop polls Pia once a frame.

        While polled, the driver sleeps off the socket, and the socket is out of Trio's readiness
        polling.  The driver wakes for a user call's work, datagrams the kernel refused, a socket left
        with more than one call reads, and for the session's timers two ticks after they are due: the
        caller's read runs them first as long as it keeps its tick, and the driver if it does not.
        Datagrams that arrive between two reads wait for the next one, timers for the next read: the
        tick bounds the delay.  A frame clock that reads every station after sending every frame saves
        the drivers' wake-ups (for what arrives after its read, and for the timers), and the kernel's
        call to the poller for every datagram each socket receives and sends.  Off again, the driver is
        woken, reads what waits, keeps its timers on time and waits on the socket.
        """
        if tick < 0:
            raise ValueError(f"tick must not be negative, got {tick}")
        slack = 2 * tick if polled else 0.0
        if polled == self._polled and slack == self._slack:
            return
        self._polled = polled
        self._slack = slack
        self._wake()

    @property
    def polled(self) -> bool:
        """Whether the caller reads the socket (:meth:`set_polled`)."""
        return self._polled

    @property
    def station_index(self) -> int | None:
        return self._require_session().index

    @property
    def host_index(self) -> int | None:
        return self._require_session().table.host_index


def _send_what_fits(endpoint: UdpEndpoint, out: list[tuple[bytes, tuple[str, int]]]) -> list[tuple[bytes, tuple[str, int]]]:
    """Send *out* in order as far as the kernel takes it now; returns the rest."""
    sent = endpoint.send_all_nowait(out)
    return out[sent:] if sent < len(out) else []


@asynccontextmanager
async def open_node(
    config: NodeConfig, *, tap: Callable[[bytes, tuple[str, int], tuple[str, int], float], None] | None = None
) -> AsyncIterator[Node]:
    """Run a node for the duration of the ``async with`` block.

    The socket is bound when the block starts (``node.address``); leaving the
    block stops the node (call ``await node.leave()`` first for a graceful exit).
    """
    node = Node(config)
    node.tap = tap
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(node._run)
            try:
                yield node
            finally:
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # The body runs inside the node's nursery; give the caller its own
        # exception back rather than a group of one.
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise


