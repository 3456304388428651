"""The simulated LDN network against forged frames: a leave notice, a station table or a host not the network's.

Host and stations run on pianode.sim.netsim under the autojump MockClock; the forger is a socket of its own on
another loopback address that sends frames of the discovery channel.
"""

from __future__ import annotations

import collections
import random

import attrs
import trio
import trio.testing

from pianode.ldn import network as ldn
from pianode.mesh.config import NodeConfig
from pianode.sim.netsim import SimulatedNetwork
from protocols.ldn_link import AdvertFrame, LdnParticipant, LeaveNotice, encode_frame
from protocols.pia.keys import parse_game_key
from protocols.pia.versions import profile_for

GAME_KEY = parse_game_key("667c18475889faab61f93ef1da180971")
FORGER = "127.0.0.66"


async def _send(frame: object, to: tuple[str, int], port: int = 0) -> None:
    with trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM) as sock:
        sock.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_BROADCAST, 1)
        await sock.bind((FORGER, port))
        await sock.sendto(encode_frame(frame), to)  # type: ignore[arg-type]


def _forged_table(adv: ldn.Advertisement) -> ldn.Advertisement:
    """The same network (SSID) with every participant's MAC changed and a stranger added."""
    fake = [attrs.evolve(p, mac=bytes.fromhex("02deadbeef00")) for p in adv.participants]
    stranger = LdnParticipant(adv.participants[0].ip[:-1] + "9", bytes.fromhex("02deadbeef09"), "stranger")
    return attrs.evolve(adv, participants=(*fake, stranger))


async def test_a_leave_notice_from_another_address_does_not_evict_a_station(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Before, the host freed any station's address on a leave notice from anyone; now only from the station's
    own socket address (the forged one is counted), and a station that really leaves still frees its slot."""
    async with SimulatedNetwork() as net:
        net.install()
        cfg = ldn.LdnHostConfig(node=NodeConfig(version="5.18", network="ldn", seed=3), game_key=GAME_KEY)
        async with ldn.open_ldn_host(cfg) as host:
            found = (await ldn.scan(0.5, first=True))[0]
            async with ldn.open_ldn_station(found, NodeConfig(version="5.18", seed=4), GAME_KEY, name="one") as one:
                for _ in range(3):
                    await _send(LeaveNotice(one.ip), host.control_address)
                await trio.sleep(0.3)
                assert one.ip in [p.ip for p in host.state.participants]
                assert host.drops["leave_from_another_address"] == 3
            await trio.sleep(0.5)
            assert [p.ip for p in host.state.participants] == [host.state.host.ip]


async def test_a_station_table_forged_from_another_address_is_not_learnt(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Adverts of the station's own network (same SSID) sent by someone other than its host, naming other MACs
    for the participants: before, the station took them (its MAC table, hence its nonces, split from the host's);
    now it learns only its host's adverts."""
    async with SimulatedNetwork() as net:
        net.install()
        cfg = ldn.LdnHostConfig(node=NodeConfig(version="5.29", network="ldn", seed=3), game_key=GAME_KEY)
        async with ldn.open_ldn_host(cfg) as host:
            found = (await ldn.scan(0.5, first=True))[0]
            async with ldn.open_ldn_station(found, NodeConfig(version="5.29", seed=4), GAME_KEY) as one:
                await trio.sleep(0.3)
                before = one.macs()
                forged = _forged_table(host.state.advertisement())
                for _ in range(5):
                    await _send(AdvertFrame(found.pia_port, found.control[1], forged), cfg.discovery)
                    await trio.sleep(0.05)
                await trio.sleep(0.3)
                assert one.macs() == before
                assert one.ignored["other_source"] == 5
                assert one.advertisement.participants == host.state.advertisement().participants


async def test_a_scan_keeps_the_network_at_the_host_it_first_heard(autojump_clock: trio.testing.MockClock) -> None:
    """A forger repeating the host's advert (same SSID) from its own address: before, the scan kept the newest
    advert, so the forger's address became the network's control and Pia address (a fake host took the listing);
    now the network stays at the address first heard, and the others are counted."""
    async with SimulatedNetwork() as net:
        net.install()
        cfg = ldn.LdnHostConfig(node=NodeConfig(version="5.29", network="ldn", seed=3), game_key=GAME_KEY)
        async with ldn.open_ldn_host(cfg) as host, trio.open_nursery() as nursery:

            async def forge() -> None:
                await trio.sleep(0.15)
                for _ in range(40):  # past the scan's end, so the last advert it hears is the forger's
                    adv = host.state.advertisement()
                    await _send(AdvertFrame(host.node.address[1], 40000, adv), cfg.discovery)
                    await trio.sleep(0.015)

            nursery.start_soon(forge)
            ignored: collections.Counter[str] = collections.Counter()
            (found,) = await ldn.scan(0.6, ignored=ignored)
            assert found.control == host.control_address
            assert found.host_address == host.node.address
            assert ignored["other_source"] >= 5


def test_host_state_frees_an_address_only_for_its_own_station() -> None:
    state = ldn.LdnHostState(profile_for("5.18"), GAME_KEY, rng=random.Random(5), subnet=42)
    a = state.connect(ldn.ConnectRequest(b"a" * 8, "a"), 0.0)
    assert not state.leave(a.ip, source=FORGER)
    assert state.leave(a.ip, source=ldn.ldn_to_loopback(a.ip))


async def test_a_flood_of_adverts_of_new_networks_keeps_a_scan_bounded(autojump_clock: trio.testing.MockClock) -> None:
    """Adverts of ever new SSIDs: before, a scan kept one per SSID until its timeout, without bound; now it keeps
    MAX_SCAN_NETWORKS and counts the rest (too_many_networks)."""
    async with SimulatedNetwork() as net:
        net.install()
        state = ldn.LdnHostState(profile_for("5.29"), GAME_KEY, rng=random.Random(5), subnet=42)
        async with trio.open_nursery() as nursery:

            async def flood() -> None:
                await trio.sleep(0.05)
                for i in range(ldn.MAX_SCAN_NETWORKS + 30):
                    adv = attrs.evolve(state.advertisement(), ssid=i.to_bytes(16, "big"))
                    await _send(AdvertFrame(50000, 50001, adv), (ldn.DEFAULT_BROADCAST, ldn.DISCOVERY_PORT))

            nursery.start_soon(flood)
            ignored: collections.Counter[str] = collections.Counter()
            found = await ldn.scan(0.5, ignored=ignored)
        assert len(found) == ldn.MAX_SCAN_NETWORKS
        assert ignored["too_many_networks"] == 30
