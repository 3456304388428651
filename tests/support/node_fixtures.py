"""Node fixtures shared by the node tests: a group of running nodes with their events collected.

Theory of operation: :class:`NodeMesh` starts each :class:`pianode.mesh.node.Node`
in its own task inside a nursery the caller owns, so a test can stop one node
without a leave (:meth:`NodeMesh.kill` cancels only that node's scope) while
the others keep running.  Every event a node yields is appended to its list,
which :meth:`NodeMesh.of` and :meth:`NodeMesh.data` read back.  Subclasses say
where node *i* binds (real loopback or the simulated network) through
:meth:`NodeMesh.settings`.

:func:`wait_until` polls on Trio time, so it works under the autojump
``MockClock`` as well as in real time; :func:`form_mesh` forms an n-node mesh
and :func:`check_exchange` is the reliable broadcast check both node test
files run (every message arrives once, in order).
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
import trio

from pianode.mesh.config import NodeConfig
from pianode.mesh.events import DataReceived, Event
from pianode.mesh.node import Node, open_node


class NodeMesh:
    """Nodes started in *nursery* from *config*, each with the settings :meth:`settings` gives it."""

    def __init__(self, nursery: trio.Nursery, config: NodeConfig) -> None:
        self.nursery = nursery
        self.config = config
        self.nodes: list[Node] = []
        self.scopes: list[trio.CancelScope] = []
        self.events: list[list[Event]] = []

    def settings(self, i: int) -> dict[str, object]:
        """The NodeConfig fields (bind address and the like) of the *i*-th node started."""
        raise NotImplementedError

    async def start(self, **overrides: object) -> Node:
        i = len(self.nodes)
        cfg = attrs.evolve(self.config, **self.settings(i), **overrides)  # type: ignore[arg-type]
        events: list[Event] = []

        async def run(*, task_status: trio.TaskStatus[tuple[Node, trio.CancelScope]] = trio.TASK_STATUS_IGNORED) -> None:
            with trio.CancelScope() as scope:
                async with open_node(cfg) as node:
                    task_status.started((node, scope))
                    async for event in node.events():
                        events.append(event)

        node, scope = await self.nursery.start(run)
        self.nodes.append(node)
        self.scopes.append(scope)
        self.events.append(events)
        return node

    def kill(self, node: Node) -> None:
        """Stop a node without a leave: its socket closes, it never answers again."""
        self.scopes[self.nodes.index(node)].cancel()

    def of(self, node: Node, kind: type) -> list:
        return [e for e in self.events[self.nodes.index(node)] if isinstance(e, kind)]

    def data(self, node: Node, *, reliable: bool = True) -> dict[int, list[bytes]]:
        out: dict[int, list[bytes]] = {}
        for e in self.of(node, DataReceived):
            if e.reliable == reliable:
                out.setdefault(e.source_index, []).append(e.data)
        return out


def n_connected(node: Node) -> int:
    return sum(1 for s in node.stations() if s.state == "connected")


async def wait_until(predicate: Callable[[], bool], timeout: float) -> None:
    """Poll until *predicate* holds, then give the event collectors time to catch up."""
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.01)
    await trio.sleep(0.05)


async def form_mesh(mesh: NodeMesh, n: int, timeout: float) -> tuple[list[Node], list[int]]:
    """Start *n* nodes; node 0 creates the mesh, the others join it at once.

    Returns the nodes sorted by station index, once each sees n - 1 connected
    peers, and the sorted station indexes the joins returned.
    """
    nodes = [await mesh.start() for _ in range(n)]
    assert await nodes[0].create_mesh() == 0
    indexes: dict[int, int] = {}

    async def join(i: int) -> None:
        indexes[i] = await nodes[i].join(nodes[0].address)

    with trio.fail_after(timeout):
        async with trio.open_nursery() as joins:
            for i in range(1, n):
                joins.start_soon(join, i)
    await wait_until(lambda: all(n_connected(x) == n - 1 for x in nodes), timeout)
    return sorted(nodes, key=lambda x: x.station_index or 0), sorted(indexes.values())


async def check_exchange(
    mesh: NodeMesh,
    nodes: list[Node],
    count: int,
    message: Callable[[int, int], bytes],
    *,
    timeout: float,
    pause: float,
    settle: float,
) -> None:
    """Each node broadcasts *count* reliable ``message(index, k)``; each arrives once and in order.

    *pause* is the sleep between rounds of broadcasts; *settle* is how long to
    wait after the last arrival for a duplicate to show up.
    """
    before = {id(x): mesh.data(x) for x in nodes}
    for k in range(count):
        for x in nodes:
            assert x.station_index is not None
            assert await x.broadcast(message(x.station_index, k)) == len(nodes) - 1
        await trio.sleep(pause)

    def fresh(x: Node) -> dict[int, list[bytes]]:
        old = before[id(x)]
        return {src: v[len(old.get(src, [])) :] for src, v in mesh.data(x).items()}

    await wait_until(lambda: all(sum(map(len, fresh(x).values())) >= count * (len(nodes) - 1) for x in nodes), timeout)
    await trio.sleep(settle)  # duplicates would arrive meanwhile
    for x in nodes:
        got = {src: v for src, v in fresh(x).items() if v}
        assert got == {o.station_index: [message(o.station_index, k) for k in range(count)] for o in nodes if o is not x}
