"""Group packets sent once to the loopback broadcast address (spec §1.6), heard on a shared port.

Real sockets on loopback: every node binds its own 127.a.b.x address and, with
``group_broadcast``, listens on ``0.0.0.0:<group port>`` through the run's
shared :class:`pianode.mesh.group_listener.GroupListener`.  An independent socket on
the same port plays a station in another process: it must see each group
packet exactly once, addressed to the broadcast address.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio
from loopback_addresses import free_port, loopback_block
from node_fixtures import NodeMesh, form_mesh, wait_until

from pianode.mesh.config import NodeConfig
from pianode.mesh.events import DataReceived
from pianode.sim.mesh_run import MeshRun
from pianode.mesh.node import Node

BROADCAST = "127.255.255.255"


class Mesh(NodeMesh):
    def __init__(self, nursery: trio.Nursery, config: NodeConfig) -> None:
        super().__init__(nursery, config)
        self.prefix = loopback_block()

    def settings(self, i: int) -> dict[str, object]:
        return {"bind": (f"{self.prefix}{10 + i}", 0)}


def _other_process_socket(port: int) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.setblocking(False)
    return s


def _drain(s: socket.socket) -> list[tuple[bytes, tuple[str, int]]]:
    out = []
    while True:
        try:
            out.append(s.recvfrom(2048))
        except BlockingIOError:
            return out


def _group_sent(node: object) -> int:
    return int(node.statistics()["counters"].get("group_packets_sent", 0))  # type: ignore[attr-defined]


def _unreliable(mesh: NodeMesh, node: object) -> list[bytes]:
    return [e.data for e in mesh.of(node, DataReceived) if not e.reliable]  # type: ignore[arg-type]


@asynccontextmanager
async def _group_mesh(n: int, port: int | None = None) -> AsyncIterator[tuple[NodeMesh, list[Node]]]:
    """*n* nodes in group-broadcast mode on *port* (a free one if None), formed; stopped on exit."""
    port = free_port() if port is None else port
    config = NodeConfig(version="5.29", session_key=bytes(range(16)), group_broadcast=(BROADCAST, port))
    async with trio.open_nursery() as nursery:
        mesh = Mesh(nursery, config)
        nodes, _ = await form_mesh(mesh, n, timeout=10)
        yield mesh, nodes
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def _formed_with_an_outsider(n: int = 4) -> AsyncIterator[tuple[NodeMesh, list[Node], socket.socket]]:
    """:func:`_group_mesh`, and a socket of another process on the group port."""
    port = free_port()
    other = _other_process_socket(port)
    try:
        async with _group_mesh(n, port) as (mesh, nodes):
            _drain(other)
            yield mesh, nodes, other
    finally:
        other.close()


async def test_one_broadcast_per_group_packet_reaches_every_station() -> None:
    async with _formed_with_an_outsider() as (mesh, nodes, other):
        sender = nodes[1]
        sent_before = _group_sent(sender)
        payloads = [b"frame %d" % k for k in range(20)]
        for p in payloads:
            assert await sender.broadcast(p, reliable=False) == 3
            await trio.sleep(0.005)
        await wait_until(lambda: all(len(_unreliable(mesh, x)) >= 20 for x in nodes if x is not sender), 5)
        for x in nodes:
            if x is not sender:
                assert _unreliable(mesh, x) == payloads
        # Its own broadcasts come back to the shared socket and are skipped, not dropped as a stranger's.
        assert sender.statistics()["drops"].get("not_member", 0) == 0  # type: ignore[union-attr]
        heard = [(d, a) for d, a in _drain(other) if a == sender.address]
        # One datagram per group packet on the wire, not one per station.
        assert len(heard) == _group_sent(sender) - sent_before == 20
        assert sum(x.statistics()["drops"].get("not_addressed", 0) for x in nodes) == 0  # type: ignore[union-attr]


async def test_listener_survives_the_node_whose_task_ran_it() -> None:
    async with _group_mesh(3) as (mesh, nodes):
        # Stop every node in turn but the last two, starting with the first
        # started (its task ran the shared receive loop).
        first = mesh.nodes[0]
        mesh.kill(first)
        rest = [x for x in nodes if x is not first]
        await trio.sleep(0.05)
        await rest[0].broadcast(b"after handover", reliable=False)
        await wait_until(lambda: b"after handover" in _unreliable(mesh, rest[1]), 5)


async def test_group_port_is_released_when_the_last_node_stops() -> None:
    port = free_port()
    async with _group_mesh(2, port):
        pass
    # Without SO_REUSEADDR a bind succeeds only if no socket holds the port any more.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("0.0.0.0", port))


async def test_mesh_run_with_broadcast_fanout_delivers_every_frame() -> None:
    config = NodeConfig(version="5.29", seed=7)
    run = MeshRun(config, nodes=6, base_address=loopback_block() + "20", duration=0.5, rate=30, group_fanout="broadcast")
    result = await run.run()
    assert not result.problems, result.problems  # (on time or LATE: a timing matter, not checked here)
    assert result.frames_expected == result.frames_delivered == 6 * 5 * 15
    # Each frame went out once per station, not once per receiver.
    sent = sum(_group_sent(n) for n in run.all_nodes)
    assert sent >= 6 * 15


async def test_a_node_that_left_stops_listening() -> None:
    async with _group_mesh(4) as (mesh, nodes):
        gone, rest = nodes[3], nodes[:3]  # three remain: their broadcasts are still group packets
        await gone.leave()
        await wait_until(lambda: all(len(x.stations()) == 3 for x in rest), 10)
        sent = _group_sent(rest[0])
        for k in range(10):
            await rest[0].broadcast(b"after leave %d" % k, reliable=False)
            await trio.sleep(0.005)
        await wait_until(lambda: len([d for d in _unreliable(mesh, rest[1]) if d.startswith(b"after")]) == 10, 5)
        assert _group_sent(rest[0]) - sent == 10
        assert gone.statistics()["drops"].get("closed", 0) == 0  # type: ignore[union-attr]


async def test_reliable_broadcast_is_one_datagram_on_the_wire() -> None:
    """Reliable broadcasts ride on group packets too: one datagram each (each
    station's segment under its destination bit), every message delivered once
    and in order, acks back to the sender alone."""
    async with _formed_with_an_outsider() as (mesh, nodes, other):
        sender = nodes[2]
        sent_before = _group_sent(sender)
        payloads = [b"reliable %d" % k for k in range(15)]
        for p in payloads:
            assert await sender.broadcast(p) == 3
        await wait_until(
            lambda: all(len(mesh.data(x).get(sender.station_index, [])) == 15 for x in nodes if x is not sender), 5  # type: ignore[arg-type]
        )
        for x in nodes:
            if x is not sender:
                assert mesh.data(x) == {sender.station_index: payloads}
                counters = x.statistics()["counters"]
                assert counters["group_messages_for_others"] >= 15 * 2  # type: ignore[index]
        heard = [d for d, a in _drain(other) if a == sender.address]
        assert len(heard) == _group_sent(sender) - sent_before == 15
        # The acks came back: past the first retransmission timeout nothing was sent again.
        await trio.sleep(1.0)
        assert [s.lost for s in sender.stations()] == [0, 0, 0, 0]
