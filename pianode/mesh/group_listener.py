"""The socket through which stations hear a session's group broadcasts.

From 5.27 a packet for several stations carries their variable ids in a footer
(spec §1.6), and consoles send it once to the network broadcast address.  With
``NodeConfig.group_broadcast`` a node does the same: it sends such a
packet once, to a broadcast address and the session's group port, instead of
once per station; every station listens on ``0.0.0.0:<group port>`` with
SO_REUSEADDR, so the kernel hands each listening socket a copy (loopback:
127.255.255.255 reaches every socket bound to 0.0.0.0 on that port).

Theory of operation: the nodes of one Trio run that use the same group port
share one :class:`GroupListener` (looked up in a run-local registry).  It feeds
what its socket receives to the session of every node registered with it,
skipping a node's own broadcasts, then lets each node send and hand over what
that produced.  One shared socket rather than one per node: with 32 stations
in one process (``pianode mesh -n 32``) the kernel would otherwise copy every
broadcast to 32 sockets, and the process would read the same bytes 32 times
and wake 32 tasks for them.  The bytes still travel through a real broadcast
on a real socket, and nodes in other processes have their own listener.

The receive loop runs in the task of one registered node at a time; when that
node stops, another registered node's task takes over, and the last node to
leave closes the socket.  The loop drains the socket like :mod:`pianode.mesh.udp`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import trio

from pianode.mesh.udp import UdpEndpoint, open_udp_endpoint

__all__ = ["GroupListener", "GroupMember"]


class GroupMember(Protocol):
    """What the listener needs of a node registered with it (:class:`pianode.mesh.node.Node`)."""

    @property
    def address(self) -> tuple[str, int]: ...

    def group_feed(self) -> Callable[[bytes, tuple[str, int], float], None] | None: ...

    async def after_group_receive(self, now: float) -> None: ...


#: Datagrams read per pass: two frames of a 32-station session.
BATCH = 64

_LISTENERS: trio.lowlevel.RunVar[dict[tuple[int, int], GroupListener]] = trio.lowlevel.RunVar("pianode_group_listeners")


class GroupListener:
    """One socket on ``0.0.0.0:port`` serving the nodes registered with it."""

    def __init__(self, endpoint: UdpEndpoint, port: int, key: tuple[int, int] | None = None) -> None:
        self._endpoint = endpoint
        self.port = port
        self._key = (port, id(None)) if key is None else key
        self._nodes: dict[tuple[str, int], GroupMember] = {}
        self._running = False
        self._handover = trio.Event()
        self.received = 0

    @classmethod
    async def for_port(cls, port: int, factory: trio.abc.SocketFactory | None = None) -> GroupListener:
        """The run's listener on *port* (of *factory*'s network), opened (``0.0.0.0:port``,
        SO_REUSEADDR) by its first user."""
        try:
            listeners = _LISTENERS.get()
        except LookupError:
            listeners = {}
            _LISTENERS.set(listeners)
        key = (port, id(factory))
        listener = listeners.get(key)
        if listener is None:
            listener = cls(await open_udp_endpoint(("0.0.0.0", port), reuse=True, factory=factory), port, key)
            listeners[key] = listener
        return listener

    async def serve(self, node: GroupMember) -> None:
        """Deliver group datagrams to *node* until cancelled (run in the node's task tree)."""
        self._nodes[node.address] = node
        try:
            while True:
                if not self._running:
                    self._running = True
                    try:
                        await self._receive_loop()
                    finally:
                        self._running = False
                        self._handover.set()
                        self._handover = trio.Event()
                else:
                    await self._handover.wait()
        finally:
            if self._nodes.get(node.address) is node:
                del self._nodes[node.address]
            if not self._nodes:
                self._endpoint.close()
                listeners = _LISTENERS.get()
                if listeners.get(self._key) is self:
                    del listeners[self._key]

    async def _receive_loop(self) -> None:
        endpoint = self._endpoint
        while True:
            # A bounded batch: behind a backlog, each pass ends with a checkpoint
            # so the other tasks (a frame clock, the nodes' drivers) are not held
            # up for a whole backlog at once.
            batch = endpoint.receive_batch(BATCH)
            if not batch:
                await endpoint.wait_readable()
                continue
            self.received += len(batch)
            now = trio.current_time()
            nodes = list(self._nodes.items())
            feeds = [(address, feed) for address, node in nodes if (feed := node.group_feed()) is not None]
            for data, source in batch:
                for address, feed in feeds:
                    if address != source:  # a station's own broadcast comes back too
                        feed(data, source, now)
            for _, node in nodes:
                await node.after_group_receive(now)
            await trio.lowlevel.checkpoint()
