"""Pia 3.3-5.6 nodes (pianode.mesh.legacy) on real UDP sockets, each on its own loopback address.

One mesh per generation (3.x Wii U, 4.x 3DS, 5.0-5.6 early Switch), on every
network type the generation has: it forms, data flows both ways, a member
leaves, the host leaves and the others migrate to a new host, which takes a
newcomer.  Then a 3-station mesh of every runnable documented version of the
range, and the versions and networks the node refuses, with their one-line reasons.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

from pianode.mesh import legacy
from pianode.mesh.config import NodeConfig, node_refusal
from pianode.mesh.events import HostChanged, StationLeft
from pianode.mesh.node import Node
from protocols.errors import ConfigError
from protocols.pia.versions import DOCUMENTED_VERSIONS, NetworkType, profile_for

from loopback_addresses import loopback_block
from node_fixtures import NodeMesh, check_exchange, form_mesh, n_connected, wait_until

KEY = bytes.fromhex("00112233445566778899aabbccddeeff")
FAST = {"keepalive_interval": 0.2, "rtt_interval": 0.2, "station_timeout": 1.0, "resend_interval": 0.1}
LEGACY = [f"{a}.{b}" for a, b in DOCUMENTED_VERSIONS if (a, b) <= (5, 6)]


class Mesh(NodeMesh):
    def __init__(self, nursery: trio.Nursery, config: NodeConfig, prefix: str) -> None:
        super().__init__(nursery, config)
        self.prefix = prefix

    def settings(self, i: int) -> dict[str, object]:
        return {"bind": (f"{self.prefix}{10 + i}", 0)}


@asynccontextmanager
async def loopback_mesh(version: str, network: str, **config: object) -> AsyncIterator[Mesh]:
    async with trio.open_nursery() as nursery:
        cfg = NodeConfig(version=version, network=network, session_key=KEY, **{**FAST, **config})  # type: ignore[arg-type]
        yield Mesh(nursery, cfg, loopback_block())
        nursery.cancel_scope.cancel()


def message(src: int, k: int) -> bytes:
    return b"%d/%d/" % (src, k) + bytes(k % 11)


async def exchange(mesh: Mesh, nodes: list[Node], count: int) -> None:
    await check_exchange(mesh, nodes, count, message, timeout=20.0, pause=0.002, settle=0.3)


GENERATIONS = [("3.10", "nex"), ("3.3", "ldn"), ("4.10", "ldn"), ("4.6", "nex"), ("5.4", "lan"), ("5.6", "ldn")]


@pytest.mark.parametrize(("version", "network"), GENERATIONS)
async def test_generation_forms_exchanges_leaves_and_migrates(version: str, network: str) -> None:
    async with loopback_mesh(version, network) as mesh:
        nodes, _ = await form_mesh(mesh, 4, 10.0)
        assert [x.station_index for x in nodes] == [0, 1, 2, 3]
        assert {x.host_index for x in nodes} == {0}
        await exchange(mesh, nodes, 15)  # reliable data both ways between every pair
        for x in nodes:
            await x.broadcast(b"unreliable from %d" % (x.station_index or 0), reliable=False)
        await wait_until(lambda: all(len(mesh.data(x, reliable=False)) == 3 for x in nodes), 5)
        # A member leaves.
        with trio.fail_after(3):
            await nodes[3].leave()
        rest = nodes[:3]
        await wait_until(lambda: all(len(x.stations()) == 3 for x in rest), 5)
        for x in rest:
            assert [(e.station_index, e.reason) for e in mesh.of(x, StationLeft)] == [(3, "left")]
        # The host leaves: the others migrate to station 1.
        with trio.fail_after(3):
            await rest[0].leave()
        rest = rest[1:]
        await wait_until(lambda: all(x.host_index == 1 and len(x.stations()) == 2 for x in rest), 5)
        for x in rest:
            assert mesh.of(x, HostChanged) == [HostChanged(old_host_index=0, new_host_index=1)]
        await exchange(mesh, rest, 10)
        # The new host takes a newcomer.
        newcomer = await mesh.start()
        with trio.fail_after(5):
            index = await newcomer.join(rest[0].address)
        members = [*rest, newcomer]
        await wait_until(lambda: all(n_connected(x) == 2 for x in members), 5)
        assert index not in (1, 2) and {x.host_index for x in members} == {1}
        await exchange(mesh, members, 5)
        for x in members:
            assert x.statistics()["drops"].get("bad_tag", 0) == 0


def _runs(version: str) -> list[str]:
    profile = profile_for(version)
    return [n.value for n in (NetworkType.NEX, NetworkType.LAN, NetworkType.LDN) if node_refusal(profile, n) is None]


@pytest.mark.parametrize("version", LEGACY)
async def test_three_stations_form_in_every_runnable_version(version: str) -> None:
    """Every documented 3.3-5.6 version forms a 3-station mesh on each network it runs on."""
    networks = _runs(version)
    assert "nex" in networks and "ldn" in networks
    assert ("lan" in networks) == (profile_for(version).version >= (5, 2))
    for network in networks:
        async with loopback_mesh(version, network) as mesh:
            nodes, _ = await form_mesh(mesh, 3, 10.0)
            await exchange(mesh, nodes, 3)


@pytest.mark.parametrize("version", ["3.3", "3.10", "4.5", "4.10"])
def test_no_lan_before_5_2_says_why(version: str) -> None:
    with pytest.raises(ConfigError) as err:
        NodeConfig(version=version, network="lan")
    text = str(err.value)
    assert "\n" not in text and "no LAN mode" in text and "§5.1" in text


@pytest.mark.parametrize(("version", "network", "section"), [("5.6", "lan", "§6.3"), ("4.10", "ldn", "§7.2")])
def test_discovery_refusals_name_the_missing_rule(version: str, network: str, section: str) -> None:
    why = legacy.discovery_refusal(profile_for(version), NetworkType(network))
    assert why is not None and "\n" not in why and section in why
    assert legacy.discovery_refusal(profile_for("5.7"), NetworkType(network)) is None
    assert legacy.discovery_refusal(profile_for("5.3"), NetworkType.LDN) is None  # the game key signs


async def test_a_tampered_packet_is_dropped_and_counted() -> None:
    """The HMAC-MD5 trailer covers the header: a changed packet id or body fails it (spec §3.1)."""
    async with loopback_mesh("4.10", "ldn") as mesh:
        nodes, _ = await form_mesh(mesh, 2, 10.0)
        packets: list[bytes] = []

        def tap(data: bytes, src: tuple[str, int], dst: tuple[str, int], now: float) -> None:
            packets.append(data)

        nodes[1].session.tap = tap  # type: ignore[union-attr]
        await nodes[1].send(0, b"x", reliable=False)
        await wait_until(lambda: bool(packets), 2)
        bad = bytearray(packets[0])
        bad[7] ^= 1  # the packet id's low byte
        before = nodes[0].statistics()["drops"].get("bad_tag", 0)
        assert nodes[0].session is not None
        nodes[0].session.receive_datagram(bytes(bad), nodes[1].address, trio.current_time())
        assert nodes[0].statistics()["drops"]["bad_tag"] == before + 1
        # The untouched packet, delivered a second time, is a replay.
        nodes[0].session.receive_datagram(packets[0], nodes[1].address, trio.current_time())
        assert nodes[0].statistics()["drops"].get("replayed", 0) >= 1
