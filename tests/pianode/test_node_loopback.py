"""Nodes on real UDP sockets, each bound to its own 127.0.0.x: the node paths end to end.

Formation and data (reliable and unreliable), a member's leave, a host killed
without a leave (migration after the station timeout) followed by a newcomer
joining through the new host, a silent member timed out, a join into a full
mesh, and 10% loss plus duplication and reordering injected in the socket layer
(``pianode.faults.FaultInjectingSocketFactory``).  Timeouts are shortened so
the file runs in a few seconds of real time; every wait is bounded.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import attrs
import pytest
import trio

from pianode.config import NodeConfig
from pianode.events import DataReceived, Event, HostChanged, MeshDestroyed, StationLeft
from pianode.faults import FaultInjectingSocketFactory, LinkFaults
from pianode.node import JoinError, Node, open_node

KEY = bytes.fromhex("0f1e2d3c4b5a69788796a5b4c3d2e1f0")
FAST = {"keepalive_interval": 0.2, "rtt_interval": 0.2, "station_timeout": 1.0, "resend_interval": 0.1}


class Mesh:
    """Nodes on loopback, node i bound to 127.0.0.(base + i) on a free port, events collected."""

    def __init__(self, nursery: trio.Nursery, config: NodeConfig, base: int) -> None:
        self.nursery = nursery
        self.config = config
        self.base = base
        self.nodes: list[Node] = []
        self.scopes: list[trio.CancelScope] = []
        self.events: list[list[Event]] = []

    async def start(self, **overrides: object) -> Node:
        i = len(self.nodes)
        cfg = attrs.evolve(self.config, bind=(f"127.0.0.{self.base + i}", 0), **overrides)  # type: ignore[arg-type]
        events: list[Event] = []

        async def run(*, task_status: trio.TaskStatus[tuple[Node, trio.CancelScope]] = trio.TASK_STATUS_IGNORED) -> None:
            with trio.CancelScope() as scope:
                async with open_node(cfg) as node:
                    task_status.started((node, scope))
                    async for event in node.events():
                        events.append(event)

        node, scope = await self.nursery.start(run)
        assert node.address[0] == f"127.0.0.{self.base + i}" and node.address[1] != 0
        self.nodes.append(node)
        self.scopes.append(scope)
        self.events.append(events)
        return node

    def kill(self, node: Node) -> None:
        """Stop a node with no leave: its socket closes and it never answers again."""
        self.scopes[self.nodes.index(node)].cancel()

    def of(self, node: Node, kind: type) -> list:
        return [e for e in self.events[self.nodes.index(node)] if isinstance(e, kind)]

    def data(self, node: Node, *, reliable: bool = True) -> dict[int, list[bytes]]:
        out: dict[int, list[bytes]] = {}
        for e in self.of(node, DataReceived):
            if e.reliable == reliable:
                out.setdefault(e.source_index, []).append(e.data)
        return out


@asynccontextmanager
async def loopback_mesh(base: int, version: str = "5.18", **config: object) -> AsyncIterator[Mesh]:
    async with trio.open_nursery() as nursery:
        cfg = NodeConfig(version=version, session_key=KEY, **{**FAST, **config})  # type: ignore[arg-type]
        yield Mesh(nursery, cfg, base)
        nursery.cancel_scope.cancel()


def n_connected(node: Node) -> int:
    return sum(1 for s in node.stations() if s.state == "connected")


async def wait_until(predicate: Callable[[], bool], timeout: float) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.01)
    await trio.sleep(0.05)  # let the event collectors catch up


async def form(mesh: Mesh, n: int, timeout: float = 10.0) -> list[Node]:
    nodes = [await mesh.start() for _ in range(n)]
    assert await nodes[0].create_mesh() == 0
    with trio.fail_after(timeout):
        async with trio.open_nursery() as joins:
            for x in nodes[1:]:
                joins.start_soon(x.join, nodes[0].address)
    await wait_until(lambda: all(n_connected(x) == n - 1 for x in nodes), timeout)
    return sorted(nodes, key=lambda x: x.station_index or 0)


def message(src: int, k: int) -> bytes:
    return b"%d/%d/" % (src, k) + bytes(k % 13)


async def exchange(mesh: Mesh, nodes: list[Node], count: int, timeout: float = 20.0) -> None:
    """Each node broadcasts *count* numbered reliable messages; each arrives once and in order."""
    before = {id(x): mesh.data(x) for x in nodes}
    for k in range(count):
        for x in nodes:
            assert x.station_index is not None
            assert await x.broadcast(message(x.station_index, k)) == len(nodes) - 1
        await trio.sleep(0.002)

    def fresh(x: Node) -> dict[int, list[bytes]]:
        old = before[id(x)]
        return {src: v[len(old.get(src, [])) :] for src, v in mesh.data(x).items()}

    await wait_until(lambda: all(sum(map(len, fresh(x).values())) >= count * (len(nodes) - 1) for x in nodes), timeout)
    await trio.sleep(0.3)  # duplicates would arrive meanwhile
    for x in nodes:
        got = {src: v for src, v in fresh(x).items() if v}
        assert got == {o.station_index: [message(o.station_index, k) for k in range(count)] for o in nodes if o is not x}


@pytest.mark.parametrize("version", ["5.18", "5.29"])
async def test_four_nodes_form_and_exchange_data(version: str) -> None:
    base = 21 if version == "5.18" else 31
    async with loopback_mesh(base, version) as mesh:
        nodes = await form(mesh, 4)
        assert [x.station_index for x in nodes] == [0, 1, 2, 3]
        assert {x.host_index for x in nodes} == {0}
        rows = [[(s.index, s.constant_id, s.address, s.is_host) for s in x.stations()] for x in nodes]
        assert all(r == rows[0] for r in rows)
        assert sorted(s[2][0] for s in rows[0]) == [f"127.0.0.{base + i}" for i in range(4)]
        await exchange(mesh, nodes, 25)
        for x in nodes:
            await x.broadcast(b"fire and forget " + bytes([x.station_index or 0]), reliable=False)
        await wait_until(lambda: all(len(mesh.data(x, reliable=False)) == 3 for x in nodes), 5)
        for x in nodes:
            assert mesh.data(x, reliable=False) == {
                o.station_index: [b"fire and forget " + bytes([o.station_index or 0])] for o in nodes if o is not x
            }
        await trio.sleep(0.5)  # a few RTT probes
        for x in nodes:
            for s in x.stations():
                if not s.is_self:
                    assert s.rtt is not None and 0 < s.rtt < 0.05
            assert x.statistics()["drops"] == {}


async def test_member_leaves_and_silent_member_times_out() -> None:
    async with loopback_mesh(41) as mesh:
        nodes = await form(mesh, 4)
        with trio.fail_after(3):
            await nodes[3].leave()
        await wait_until(lambda: all(len(x.stations()) == 3 for x in nodes[:3]), 5)
        assert mesh.of(nodes[3], MeshDestroyed) == [MeshDestroyed(reason="left")]
        for x in nodes[:3]:
            assert [(e.station_index, e.reason) for e in mesh.of(x, StationLeft)] == [(3, "left")]
        # Now a member just stops: the keep-alive timeout removes it.
        killed_at = trio.current_time()
        mesh.kill(nodes[2])
        rest = nodes[:2]
        await wait_until(lambda: all(len(x.stations()) == 2 for x in rest), 5)
        assert 0.7 <= trio.current_time() - killed_at <= 2.5
        for x in rest:
            assert [e.station_index for e in mesh.of(x, StationLeft)] == [3, 2]
            assert x.host_index == 0
        await exchange(mesh, rest, 10)


@pytest.mark.parametrize("version", ["5.18", "5.29"])
async def test_killed_host_migrates_and_newcomer_joins_new_host(version: str) -> None:
    base = 51 if version == "5.18" else 61
    async with loopback_mesh(base, version) as mesh:
        nodes = await form(mesh, 4)
        await exchange(mesh, nodes, 5)
        killed_at = trio.current_time()
        mesh.kill(nodes[0])
        rest = nodes[1:]
        await wait_until(lambda: all(x.host_index == 1 and len(x.stations()) == 3 for x in rest), 6)
        assert 0.7 <= trio.current_time() - killed_at <= 3.0
        assert [x.station_index for x in rest] == [1, 2, 3]
        for x in rest:
            assert mesh.of(x, HostChanged) == [HostChanged(old_host_index=0, new_host_index=1)]
        await exchange(mesh, rest, 10)
        newcomer = await mesh.start()
        with trio.fail_after(5):
            assert await newcomer.join(rest[0].address) == 0
        members = [*rest, newcomer]
        await wait_until(lambda: all(n_connected(x) == 3 for x in members), 5)
        assert {x.host_index for x in members} == {1}
        await exchange(mesh, members, 10)


async def test_host_leave_migrates_on_loopback() -> None:
    async with loopback_mesh(71, "5.29") as mesh:
        nodes = await form(mesh, 3)
        with trio.fail_after(3):
            await nodes[0].leave()
        rest = nodes[1:]
        await wait_until(lambda: all(x.host_index == 1 and len(x.stations()) == 2 for x in rest), 3)
        for x in rest:
            assert mesh.of(x, HostChanged) == [HostChanged(old_host_index=0, new_host_index=1)]
            assert [(e.station_index, e.reason) for e in mesh.of(x, StationLeft)] == [(0, "left")]
        await exchange(mesh, rest, 10)


async def test_join_denied_when_full_on_loopback() -> None:
    async with loopback_mesh(81, max_stations=2) as mesh:
        nodes = await form(mesh, 2)
        late = await mesh.start()
        with trio.fail_after(5):
            with pytest.raises(JoinError, match="full"):
                await late.join(nodes[0].address)
        assert all(len(x.stations()) == 2 for x in nodes)


@pytest.mark.parametrize("version", ["5.18", "5.29"])
async def test_loss_duplication_and_reordering_in_the_socket_layer(version: str) -> None:
    faults = LinkFaults(loss=0.1, duplicate=0.1, reorder=0.1, seed=23)
    base = 91 if version == "5.18" else 101
    async with FaultInjectingSocketFactory(faults) as factory:
        factory.install()
        async with loopback_mesh(base, version) as mesh:
            nodes = await form(mesh, 4, timeout=15)
            assert [x.station_index for x in nodes] == [0, 1, 2, 3]
            assert {x.host_index for x in nodes} == {0}
            await exchange(mesh, nodes, 40, timeout=30)
            stats = factory.statistics()
            assert stats.lost > 0 and stats.duplicated > 0 and stats.reordered > 0
            assert sum(s.lost for x in nodes for s in x.stations()) > 0  # data retransmitted
            assert sum(x.statistics()["drops"].get("replayed", 0) for x in nodes) > 0  # type: ignore[attr-defined]
