"""Pia nodes whose transport is a relay site (``NodeConfig.socket_factory``): a mesh across two sites."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
from loopback_addresses import loopback_block
from relay_pki import Pki, make_pki

from pianode.mesh.config import NodeConfig
from pianode.mesh.events import DataReceived
from pianode.mesh.node import open_node
from pianode.relay.client import RelayClient
from pianode.relay.hub import RelayHub


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


async def _received(node, count: int) -> list[tuple[int, bytes, bool]]:  # type: ignore[no-untyped-def]
    got = []
    async for event in node.events():
        if isinstance(event, DataReceived):
            got.append((event.source_index, event.data, event.reliable))
            if len(got) == count:
                return got
    return got


@asynccontextmanager
async def _two_sites(pki: Pki) -> AsyncIterator[tuple[RelayClient, RelayClient, NodeConfig, NodeConfig]]:
    """A hub on loopback and two sites of it (a, b), with a 5.18 node configuration on each site's address."""
    async with trio.open_nursery() as nursery:
        hub = RelayHub(pki.credentials("hub"), (loopback_block() + "1", 0))
        await nursery.start(hub.serve)
        a = RelayClient(pki.credentials("site-a"), hub.address)
        b = RelayClient(pki.credentials("site-b"), hub.address)
        wa, wb = await nursery.start(a.run), await nursery.start(b.run)
        key = bytes(range(16))
        ca = NodeConfig(version="5.18", bind=(wa.address, 49152), socket_factory=a.site, seed=1, session_key=key)
        cb = NodeConfig(version="5.18", bind=(wb.address, 49152), socket_factory=b.site, seed=2, session_key=key)
        yield a, b, ca, cb
        nursery.cancel_scope.cancel()


async def test_a_mesh_spans_two_sites_through_the_hub(pki: Pki) -> None:
    with trio.fail_after(30):
        async with _two_sites(pki) as (a, b, ca, cb):
            async with open_node(ca) as host, open_node(cb) as guest:
                assert host.address == ca.bind
                await host.create_mesh()
                index = await guest.join(host.address)
                assert index == 1
                assert await host.wait_connected(1, timeout=5)
                await guest.send(0, b"reliable to host", reliable=True)
                await guest.send(0, b"unreliable to host", reliable=False)
                await host.send(1, b"reliable to guest", reliable=True)
                await host.send(1, b"unreliable to guest", reliable=False)
                assert sorted(await _received(host, 2)) == [(1, b"reliable to host", True), (1, b"unreliable to host", False)]
                assert sorted(await _received(guest, 2)) == [(0, b"reliable to guest", True), (0, b"unreliable to guest", False)]
                assert [s.address for s in host.stations() if s.index == 1] == [cb.bind]
            assert a.site.relayed_out > 0 and b.site.relayed_in > 0


async def test_a_clean_leave_through_the_hub_is_no_drop(pki: Pki) -> None:
    """Both stations sending all along, through the hub (milliseconds of transit, not loopback's
    microseconds): the guest leaves, and neither side counts a drop for the datagrams that were on
    their way when it did; the leave completes at once, as on loopback."""
    with trio.fail_after(30):
        async with _two_sites(pki) as (_, _, ca, cb):
            async with open_node(ca) as host, open_node(cb) as guest:
                await host.create_mesh()
                await guest.join(host.address)
                assert await host.wait_connected(1, timeout=5)

                async def chatter(node) -> None:  # type: ignore[no-untyped-def]
                    while node.session is not None and not node.session.closed:
                        await node.broadcast(b"reliable", reliable=True)
                        await node.broadcast(b"unreliable", reliable=False)
                        await trio.sleep(0.002)

                async with trio.open_nursery() as senders:
                    senders.start_soon(chatter, host)
                    senders.start_soon(chatter, guest)
                    await trio.sleep(0.3)
                    started = trio.current_time()
                    await guest.leave()
                    took = trio.current_time() - started
                    await trio.sleep(0.5)  # what was on its way has arrived
                    senders.cancel_scope.cancel()
                assert [s.index for s in host.stations()] == [0]
                assert took < 0.5, took
                assert host.statistics()["drops"] == {}
