"""Pia 6.x nodes on real UDP sockets, one mesh per 6.x generation, each node on its own 127.a.b.x.

H-F / M-F with a plaintext footer (6.20 on LAN, 6.30 on LDN) and H-G / M-G with the footer encrypted
in the body (6.32 and 6.41 on LDN): the mesh forms, data flows both ways (reliable and group
packets to the broadcast address), a member leaves, the host stops answering and the lowest
remaining index takes over, and a newcomer joins through the new host.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

from pianode.mesh.config import NodeConfig
from pianode.mesh.events import HostChanged, MeshDestroyed, StationLeft
from pianode.mesh.node import Node

from loopback_addresses import free_port, loopback_block
from node_fixtures import NodeMesh, check_exchange, form_mesh, n_connected, wait_until

KEY = bytes.fromhex("6a6b6c6d6e6f70717273747576777879")
FAST = {"keepalive_interval": 0.2, "rtt_interval": 0.2, "station_timeout": 1.0, "resend_interval": 0.1}
GENERATIONS = [("6.20", "lan"), ("6.30", "ldn"), ("6.32", "ldn"), ("6.41", "ldn")]


class Mesh(NodeMesh):
    def __init__(self, nursery: trio.Nursery, config: NodeConfig, prefix: str) -> None:
        super().__init__(nursery, config)
        self.prefix = prefix

    def settings(self, i: int) -> dict[str, object]:
        return {"bind": (f"{self.prefix}{i + 1}", 0)}


@asynccontextmanager
async def loopback_mesh(version: str, network: str) -> AsyncIterator[Mesh]:
    async with trio.open_nursery() as nursery:
        cfg = NodeConfig(
            version=version, network=network, session_key=KEY,
            group_broadcast=("127.255.255.255", free_port()), **FAST,  # type: ignore[arg-type]
        )  # fmt: skip
        yield Mesh(nursery, cfg, loopback_block())
        nursery.cancel_scope.cancel()


def message(src: int, k: int) -> bytes:
    return b"%d/%d/" % (src, k) + bytes(k % 11)  # lengths that are not multiples of 4


async def exchange(mesh: Mesh, nodes: list[Node], count: int) -> None:
    await check_exchange(mesh, nodes, count, message, timeout=20.0, pause=0.002, settle=0.3)


async def frames(mesh: Mesh, nodes: list[Node], tag: bytes) -> None:
    """Each node broadcasts one unreliable frame (one group packet, receivers in the footer): all arrive."""
    before = {id(x): {k: len(v) for k, v in mesh.data(x, reliable=False).items()} for x in nodes}
    for x in nodes:
        await x.broadcast(tag + bytes([x.station_index or 0]), reliable=False)

    def arrived() -> bool:
        return all(
            sum(len(v) for v in mesh.data(x, reliable=False).values()) - sum(before[id(x)].values()) == len(nodes) - 1
            for x in nodes
        )

    await wait_until(arrived, 5)
    for x in nodes:
        got = mesh.data(x, reliable=False)
        for o in nodes:
            if o is not x:
                assert got[o.station_index][-1] == tag + bytes([o.station_index or 0])


@pytest.mark.parametrize(("version", "network"), GENERATIONS)
async def test_a_6x_mesh_forms_exchanges_loses_a_member_and_migrates(version: str, network: str) -> None:
    async with loopback_mesh(version, network) as mesh:
        nodes, _ = await form_mesh(mesh, 4, 10.0)
        assert [x.station_index for x in nodes] == [0, 1, 2, 3] and {x.host_index for x in nodes} == {0}
        await exchange(mesh, nodes, 10)
        await frames(mesh, nodes, b"frame one ")
        assert sum(x.statistics()["counters"].get("group_packets_sent", 0) for x in nodes) >= 4  # type: ignore[attr-defined]
        # A member leaves.
        with trio.fail_after(3):
            await nodes[3].leave()
        await wait_until(lambda: all(len(x.stations()) == 3 for x in nodes[:3]), 5)
        assert mesh.of(nodes[3], MeshDestroyed) == [MeshDestroyed(reason="left")]
        # The host stops answering: the lowest remaining index takes over.
        mesh.kill(nodes[0])
        rest = nodes[1:3]
        await wait_until(lambda: all(x.host_index == 1 and len(x.stations()) == 2 for x in rest), 6)
        for x in rest:
            assert mesh.of(x, HostChanged) == [HostChanged(old_host_index=0, new_host_index=1)]
            left = [(e.station_index, e.reason) for e in mesh.of(x, StationLeft)]
            assert left[0] == (3, "left") and left[1][0] == 0 and left[1][1].startswith("silent for") and len(left) == 2
        await exchange(mesh, rest, 5)
        # A newcomer joins through the new host and gets the lowest free index.
        newcomer = await mesh.start()
        # (Its network id is the session's, as an LDN station reads it from the advertisement: spec §7.3.)
        network_id = rest[0].session.network_id  # type: ignore[union-attr]
        with trio.fail_after(5):
            assert await newcomer.join(rest[0].address, network_id=network_id) == 0
        members = [*rest, newcomer]
        await wait_until(lambda: all(n_connected(x) == 2 for x in members), 5)
        await exchange(mesh, members, 5)
        await frames(mesh, members, b"frame two ")
        for x in members:
            drops = x.statistics()["drops"]
            assert set(drops) <= {"not_addressed"}, drops  # type: ignore[arg-type]
