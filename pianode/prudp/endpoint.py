"""The Trio driver of a PRUDP endpoint: one socket task around :class:`EndpointCore`.

One task owns the socket and the sans-IO core (../shared/STYLE.md practice 9):
it sends what the core has queued, waits for a datagram until the core's next
timer, feeds the datagram or the timer, and dispatches the core's events to
connection handles.  User calls from other tasks change the core directly (Trio
never preempts between awaits) and then wake the driver so it flushes at once.
Time comes only from Trio, so everything runs under ``MockClock``; the socket is
made by ``trio.socket.socket``, so the fake network of the tests works too.

Usage::

    async with trio.open_nursery() as nursery:
        host = PrudpEndpoint(Settings("nintendo-v1", access_key="..."))
        addr = await nursery.start(host.run, ("127.0.0.1", 0))
        host.listen()
        conn = await host.accept()
        data = await conn.receive()
"""

from __future__ import annotations

import logging
import math
import os
from collections import deque

import trio

from pianode.prudp.connection import RandomBytes
from pianode.prudp.core import EndpointCore
from pianode.prudp.events import (
    Address,
    Connected,
    ConnectionFailed,
    ConnectionId,
    Disconnected,
    MessageReceived,
    Settings,
)

__all__ = ["PrudpConnection", "PrudpEndpoint"]

MAX_DATAGRAM = 65536
_log = logging.getLogger("pianode.prudp")
SEND_QUEUE_POLL = 0.01  # seconds between looks at a full send queue


class PrudpConnection:
    """A handle on one connection of a :class:`PrudpEndpoint`."""

    def __init__(self, endpoint: PrudpEndpoint, cid: ConnectionId) -> None:
        self._endpoint = endpoint
        self.id = cid
        self._messages: deque[MessageReceived] = deque()
        self._unread = 0  # bytes of _messages (the endpoint's unread_bytes is their sum over handles)
        self._lot = trio.lowlevel.ParkingLot()
        self.connected = False
        self.closed_reason: str | None = None

    def _changed(self) -> None:
        self._lot.unpark_all()

    def __del__(self) -> None:
        # A handle let go of with messages unread (a closed connection nobody drained) holds them no more.
        self._endpoint.unread_bytes -= self._unread

    async def send(self, data: bytes, substream: int = 0) -> None:
        """Queue a message (reliable, ordered); returns once it is handed to the endpoint.

        When the connection's send queue is full (Settings.send_queue_bytes), it waits
        for the peer to take what is queued: back-pressure, not unbounded memory.
        """
        await trio.lowlevel.checkpoint()
        while self.closed_reason is None and not self._endpoint.core.can_send(self.id, len(data)):
            await trio.sleep(SEND_QUEUE_POLL)
        if self.closed_reason is not None:
            raise trio.ClosedResourceError(f"PRUDP connection closed: {self.closed_reason}")
        try:
            self._endpoint.core.send(self.id, data, trio.current_time(), substream)
        except ConnectionError as exc:
            raise trio.ClosedResourceError(str(exc)) from None
        self._endpoint._wakeup()

    @property
    def unread_bytes(self) -> int:
        """Bytes received and not yet read (Settings.receive_queue_bytes bounds them)."""
        return self._unread

    async def send_unreliable(self, data: bytes) -> None:
        """Send one unreliable DATA packet: not ordered, not retransmitted, never split (spec §6.2)."""
        await trio.lowlevel.checkpoint()
        if self.closed_reason is not None:
            raise trio.ClosedResourceError(f"PRUDP connection closed: {self.closed_reason}")
        try:
            self._endpoint.core.send_unreliable(self.id, data, trio.current_time())
        except ConnectionError as exc:
            raise trio.ClosedResourceError(str(exc)) from None
        self._endpoint._wakeup()

    async def receive(self) -> bytes:
        """The next message; raises :class:`trio.EndOfChannel` once the connection is closed and drained."""
        return (await self.receive_message()).data

    async def receive_message(self) -> MessageReceived:
        """The next message with its substream and whether it came reliably (as :meth:`receive`)."""
        while not self._messages:
            if self.closed_reason is not None:
                raise trio.EndOfChannel(self.closed_reason)
            await self._lot.park()
        message = self._messages.popleft()
        self._unread -= len(message.data)
        self._endpoint.unread_bytes -= len(message.data)
        return message

    async def close(self) -> None:
        """Graceful close: waits until the peer acknowledged our DISCONNECT (or retransmission gave up)."""
        if self.closed_reason is None:
            self._endpoint.core.close(self.id, trio.current_time())
            self._endpoint._wakeup()
        while self.closed_reason is None:
            await self._lot.park()

    def abort(self) -> None:
        self._endpoint.core.abort(self.id, trio.current_time())
        self._endpoint._wakeup()

    async def wait_closed(self) -> str:
        while self.closed_reason is None:
            await self._lot.park()
        return self.closed_reason


class PrudpEndpoint:
    """A PRUDP endpoint on one UDP socket: connects out and accepts in."""

    def __init__(self, settings: Settings, *, random_bytes: RandomBytes = os.urandom, accept_backlog: int = 64) -> None:
        self.core = EndpointCore(settings, random_bytes=random_bytes)
        #: Bytes every connection received and the application has not read (Settings.max_unread_bytes).
        self.unread_bytes = 0
        self.core.unread_full = self._unread_full
        self._bounds_logged = False
        self._handles: dict[ConnectionId, PrudpConnection] = {}
        self._accept_send, self._accept_recv = trio.open_memory_channel[PrudpConnection](accept_backlog)
        self._sock: trio.socket.SocketType | None = None
        self._recv_scope: trio.CancelScope | None = None
        self._wake = False
        self._ready = trio.Event()
        self.address: Address | None = None

    # -------------------------------------------------------------- lifetime
    async def run(
        self, bind: Address = ("127.0.0.1", 0), *, task_status: trio.TaskStatus[Address] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Bind, report the bound address through *task_status*, then drive the endpoint forever."""
        sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM)
        with sock:
            await sock.bind(bind)
            self._sock = sock
            self.address = sock.getsockname()
            self._ready.set()
            task_status.started(self.address)
            try:
                await self._loop(sock)
            finally:
                self._accept_send.close()  # accept() now raises EndOfChannel
                for handle in self._handles.values():
                    if handle.closed_reason is None:
                        handle.closed_reason = "endpoint stopped"
                        handle._changed()

    def _wakeup(self) -> None:
        self._wake = True
        if self._recv_scope is not None:
            self._recv_scope.cancel()

    async def _loop(self, sock: trio.socket.SocketType) -> None:
        while True:
            self._wake = False
            now = trio.current_time()
            for data, addr in self.core.datagrams_to_send(now):
                try:
                    await sock.sendto(data, addr)
                except OSError:
                    self.core._stats["send_errors"] += 1
            self._dispatch()
            if self._wake:
                continue
            timer = self.core.get_timer()
            with trio.CancelScope(deadline=math.inf if timer is None else timer) as scope:
                self._recv_scope = scope
                try:
                    data, addr = await sock.recvfrom(MAX_DATAGRAM)
                except OSError:
                    self.core._stats["receive_errors"] += 1
                else:
                    self.core.receive_datagram(data, (addr[0], addr[1]), trio.current_time())
            self._recv_scope = None
            now = trio.current_time()
            timer = self.core.get_timer()
            if timer is not None and timer <= now:
                self.core.handle_timer(now)

    def _handle(self, cid: ConnectionId) -> PrudpConnection:
        handle = self._handles.get(cid)
        if handle is None:
            handle = self._handles[cid] = PrudpConnection(self, cid)
        return handle

    def _dispatch(self) -> None:
        while (event := self.core.next_event()) is not None:
            handle = self._handle(event.connection)
            if isinstance(event, Connected):
                handle.connected = True
                if not event.is_client:
                    try:
                        self._accept_send.send_nowait(handle)
                    except trio.WouldBlock:
                        self.core.abort(event.connection, trio.current_time())
            elif isinstance(event, MessageReceived):
                unread = handle.unread_bytes
                if unread + len(event.data) > self.core.settings.receive_queue_bytes:
                    # The application is not reading: end the connection rather than hold it all.
                    self.core.abort(event.connection, trio.current_time())
                    self.core.stats_note("aborted: receive queue full")
                    self._bound_hit(f"received data nobody read past receive_queue_bytes from {event.connection}")
                    continue
                handle._messages.append(event)
                handle._unread += len(event.data)
                self.unread_bytes += len(event.data)
            elif isinstance(event, (Disconnected, ConnectionFailed)):
                if "max_message_size" in event.reason or "max_buffered_bytes" in event.reason:
                    self._bound_hit(f"{event.connection}: {event.reason}")
                handle.closed_reason = event.reason
                del self._handles[event.connection]
            handle._changed()

    def _unread_full(self, cid: ConnectionId) -> bool:
        """Whether connection *cid*'s DATA is to wait (the core drops it unacknowledged): the endpoint holds
        max_unread_bytes unread and this connection's application has something left to read."""
        if self.unread_bytes < self.core.settings.max_unread_bytes:
            return False
        handle = self._handles.get(cid)
        return handle is not None and handle._unread > 0

    def _bound_hit(self, what: str) -> None:
        """A connection ended at one of the memory bounds: said once per endpoint (-v), counted always."""
        if not self._bounds_logged:
            self._bounds_logged = True
            _log.info("ending PRUDP connections at their memory bounds (Settings), first: %s", what)

    # ------------------------------------------------------------ user verbs
    def listen(self, port: int | None = None, stream_type: int | None = None) -> int:
        return self.core.listen(port, stream_type)

    async def accept(self) -> PrudpConnection:
        return await self._accept_recv.receive()

    async def connect(self, address: Address, *, port: int | None = None, stream_type: int | None = None) -> PrudpConnection:
        """Open a client connection; raises ``ConnectionRefusedError`` with the reason if the handshake fails."""
        await self._ready.wait()
        cid = self.core.connect(address, trio.current_time(), port=port, stream_type=stream_type)
        handle = self._handle(cid)
        self._wakeup()
        while not handle.connected and handle.closed_reason is None:
            await handle._lot.park()
        if not handle.connected:
            raise ConnectionRefusedError(f"PRUDP connection to {address[0]}:{address[1]} failed: {handle.closed_reason}")
        return handle

    def statistics(self) -> dict[str, int]:
        return self.core.statistics()
