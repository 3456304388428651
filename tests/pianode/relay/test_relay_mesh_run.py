"""RelayMeshRun (pianode/relay/mesh_run.py): every station a site of its own, all traffic through one hub."""

from __future__ import annotations

import pytest
import trio
from loopback_addresses import loopback_block
from relay_pki import Pki, make_pki

from pianode.mesh.config import NodeConfig
from pianode.relay.hub import RelayHub
from pianode.relay.mesh_run import RelayMeshRun


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


async def test_a_run_through_a_given_hub_crosses_it_for_every_datagram(pki: Pki) -> None:
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            hub = RelayHub(pki.credentials("hub"), (loopback_block() + "1", 0))
            await nursery.start(hub.serve)
            run = RelayMeshRun(NodeConfig(version="5.29", seed=3), nodes=4, duration=1.0, rate=60, messages=5,
                               group_fanout="broadcast", hub=hub.address, credentials=pki.credentials("site-a"),
                               room="test-room")  # fmt: skip
            result = await run.run()
            nursery.cancel_scope.cancel()
    assert result.ok, result.problems
    summary = result.summary()
    assert sorted(row["address"].split(":")[0] for row in summary["stations"]) == [f"10.77.0.{i}" for i in (1, 2, 3, 4)]
    assert summary["frames"]["delivered"] == summary["frames"]["expected"] > 0
    room = hub.state.rooms["test-room"]
    # Every frame went out as one group packet to the room's broadcast address, fanned out by the hub.
    assert room.counters["broadcasts"] > 0 and room.counters["datagrams"] >= summary["frames"]["delivered"]
    assert [site.site.relayed_out > 0 for site in run.sites] == [True] * 4


async def test_a_run_without_a_hub_starts_its_own() -> None:
    with trio.fail_after(60):
        result = await RelayMeshRun(NodeConfig(version="5.18", seed=4), nodes=3, duration=0.5, messages=5).run()
    assert result.ok, result.problems
    assert result.reliable_delivered == 3 * 2 * 5 and result.formation.endswith("through a relay hub")


def test_a_hub_needs_its_credentials(pki: Pki) -> None:
    with pytest.raises(ValueError, match="credentials"):
        RelayMeshRun(NodeConfig(version="5.18"), nodes=2, hub=("127.0.0.1", 9))


async def test_a_run_with_a_local_address_connects_from_it_and_its_own_hub_listens_there() -> None:
    """``pianode mesh --relay --bind IP``: station i's connection goes out from IP + i, the run's hub listens on IP."""
    block = loopback_block()
    with trio.fail_after(60):
        run = RelayMeshRun(NodeConfig(version="5.18", seed=5), nodes=3, duration=0.2, messages=2, local=block + "5")
        result = await run.run()
    assert result.ok, result.problems
    assert run.hub_address is not None and run.hub_address[0] == block + "5"
    assert [site.local_address[0] for site in run.sites if site.local_address] == [block + "5", block + "6", block + "7"]
    assert sorted(row["address"].split(":")[0] for row in result.summary()["stations"]) == [
        "10.77.0.1", "10.77.0.2", "10.77.0.3"]  # fmt: skip
