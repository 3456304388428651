"""The relay under faults: a site that drops comes back into its room; a mesh survives a hub restart."""

from __future__ import annotations

import pytest
import trio
from loopback_addresses import free_port, loopback_block
from relay_pki import Pki, make_pki

from pianode.mesh.config import NodeConfig
from pianode.mesh.events import DataReceived, StationLeft
from pianode.mesh.node import Node, open_node
from pianode.relay.client import RelayClient
from pianode.relay.hub import RelayHub

KEY = bytes(range(16))


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


class Tally:
    def __init__(self) -> None:
        self.data: list[bytes] = []
        self.left: list[int] = []

    async def watch(self, node: Node) -> None:
        async for event in node.events():
            if isinstance(event, DataReceived):
                self.data.append(event.data)
            elif isinstance(event, StationLeft):
                self.left.append(event.index)


async def _exchange(host: Node, guest: Node, th: Tally, tg: Tally, tag: str) -> None:
    """Reliable and unreliable both ways, until each side has the reliable message and one unreliable."""
    await guest.send(0, f"{tag} reliable to host".encode(), reliable=True)
    await host.send(1, f"{tag} reliable to guest".encode(), reliable=True)
    with trio.fail_after(10):
        while not (
            f"{tag} reliable to host".encode() in th.data and f"{tag} reliable to guest".encode() in tg.data
            and f"{tag} unreliable to host".encode() in th.data and f"{tag} unreliable to guest".encode() in tg.data
        ):
            await guest.send(0, f"{tag} unreliable to host".encode(), reliable=False)
            await host.send(1, f"{tag} unreliable to guest".encode(), reliable=False)
            await trio.sleep(0.05)


async def _mesh(nursery: trio.Nursery, a: RelayClient, b: RelayClient) -> tuple[Node, Node, Tally, Tally]:
    assert a.address is not None and b.address is not None
    common = {"version": "5.18", "session_key": KEY, "station_timeout": 10.0}
    host_cm = open_node(NodeConfig(bind=(a.address, 49152), socket_factory=a.site, seed=1, **common))
    guest_cm = open_node(NodeConfig(bind=(b.address, 49152), socket_factory=b.site, seed=2, **common))
    host = await nursery_enter(nursery, host_cm)
    guest = await nursery_enter(nursery, guest_cm)
    await host.create_mesh()
    await guest.join(host.address)
    th, tg = Tally(), Tally()
    nursery.start_soon(th.watch, host)
    nursery.start_soon(tg.watch, guest)
    return host, guest, th, tg


async def nursery_enter(nursery: trio.Nursery, cm):  # type: ignore[no-untyped-def]
    """Run an async context manager in a task of *nursery*; returns what it yields."""
    send, receive = trio.open_memory_channel(1)

    async def hold() -> None:
        async with cm as value:
            await send.send(value)
            await trio.sleep_forever()

    nursery.start_soon(hold)
    return await receive.receive()


async def test_a_site_that_drops_comes_back_into_its_room_with_its_address(pki: Pki) -> None:
    lines: list[str] = []
    with trio.fail_after(40):
        async with trio.open_nursery() as nursery:
            hub = RelayHub(pki.credentials("hub"), (loopback_block() + "1", 0), log=lines.append)
            await nursery.start(hub.serve)
            a = RelayClient(pki.credentials("site-a"), hub.address)
            b = RelayClient(pki.credentials("site-b"), hub.address)
            await nursery.start(a.run)
            await nursery.start(b.run)
            host, guest, th, tg = await _mesh(nursery, a, b)
            await _exchange(host, guest, th, tg, "before")
            address = b.address
            b.drop()
            with trio.fail_after(10):
                while b.connections < 2 or b.conn is None or b.welcome is None or not b.conn.admitted:
                    await trio.sleep(0.05)
            await _exchange(host, guest, th, tg, "after")
            assert b.address == address
            assert sorted(c.address for c in hub.state.clients.values()) == ["10.77.0.1", "10.77.0.2"]
            assert sorted(hub.state.rooms["lan"].members) == ["10.77.0.1", "10.77.0.2"]
            assert th.left == [] and tg.left == []
            nursery.cancel_scope.cancel()
    assert any("joined: site-b" in line for line in lines[2:]), lines  # joined twice: once more after the drop


async def test_meshes_survive_a_hub_restart(pki: Pki) -> None:
    listen = (loopback_block() + "1", free_port())
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            hub_scope = trio.CancelScope()

            async def run_hub(scope: trio.CancelScope, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
                with scope:
                    await RelayHub(pki.credentials("hub"), listen).serve(task_status=task_status)

            await nursery.start(run_hub, hub_scope)
            a = RelayClient(pki.credentials("site-a"), listen)
            b = RelayClient(pki.credentials("site-b"), listen)
            await nursery.start(a.run)
            await nursery.start(b.run)
            host, guest, th, tg = await _mesh(nursery, a, b)
            await _exchange(host, guest, th, tg, "before")
            hub_scope.cancel()  # the hub goes away, with every room
            await trio.sleep(0.5)
            await nursery.start(run_hub, trio.CancelScope())  # and comes back on the same address
            with trio.fail_after(15):
                while a.connections < 2 or b.connections < 2 or a.conn is None or b.conn is None or not (
                    a.conn.admitted and b.conn.admitted and a.welcome and b.welcome
                ):
                    await trio.sleep(0.05)
            await _exchange(host, guest, th, tg, "after")
            assert (a.address, b.address) == ("10.77.0.1", "10.77.0.2")
            assert th.left == [] and tg.left == []  # the mesh never lost a station
            assert [s.state for s in host.stations() if not s.is_self] == ["connected"]
            nursery.cancel_scope.cancel()
