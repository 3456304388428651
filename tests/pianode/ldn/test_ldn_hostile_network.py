"""The simulated LDN link against a hostile network or a forged source: what an advert or a connect reply says,
and where a connect request claims to come from, is checked before it is used.

Host and stations run on pianode.sim.netsim under the autojump MockClock.
"""

from __future__ import annotations

import collections
import random

import attrs
import pytest
import trio
import trio.testing

from pianode.ldn import network as ldn
from pianode.mesh.config import NodeConfig
from pianode.sim.netsim import SimulatedNetwork
from protocols.ldn_link import (
    AdvertFrame,
    ConnectReply,
    ConnectRequest,
    decode_frame,
    encode_frame,
)
from protocols.errors import ConfigError
from protocols.pia.keys import parse_game_key
from protocols.pia.versions import profile_for

GAME_KEY = parse_game_key("667c18475889faab61f93ef1da180971")
FORGER = "127.0.0.66"


async def test_a_connect_request_whose_reply_cannot_be_sent_does_not_end_the_host(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A connect request forged from source port 0 (a raw socket can write one): the reply cannot be sent (EINVAL).
    Before, that error ended the host's control task and with it the whole network; now it is counted
    (``reply_not_sent``) and the host goes on advertising and answering."""
    async with SimulatedNetwork() as net:
        net.install()
        cfg = ldn.LdnHostConfig(node=NodeConfig(version="5.18", network="ldn", seed=3), game_key=GAME_KEY)
        async with ldn.open_ldn_host(cfg) as host:
            request = encode_frame(ConnectRequest(b"x" * 8, "forged"))
            host._control._enqueue(request, (FORGER, 0))
            await trio.sleep(0.3)
            sent = host.adverts_sent
            await trio.sleep(0.3)
            assert host.adverts_sent > sent
            assert host.drops["reply_not_sent"] == 1
            found = (await ldn.scan(0.5, first=True))[0]
            async with ldn.open_ldn_station(found, NodeConfig(version="5.18", seed=4), GAME_KEY, name="one") as one:
                assert one.ip in [p.ip for p in host.state.participants]


@pytest.mark.parametrize("ports", [(0, 40000), (49152, 0)])
async def test_an_advert_naming_port_zero_is_not_kept(ports: tuple[int, int], autojump_clock: trio.testing.MockClock) -> None:
    """An advert whose Pia or control port is 0 names no socket (nothing can be sent there: a join would fail with
    EINVAL, read by the command line as a bad flag of the user's).  A scan counts it (``bad_port``) and keeps none."""
    async with SimulatedNetwork() as net:
        net.install()
        state = ldn.LdnHostState(profile_for("5.29"), GAME_KEY, rng=random.Random(5), subnet=42)
        async with trio.open_nursery() as nursery:

            async def advertise() -> None:
                with trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM) as sock:
                    sock.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_BROADCAST, 1)
                    await sock.bind((FORGER, 0))
                    for _ in range(5):
                        await trio.sleep(0.05)
                        frame = AdvertFrame(ports[0], ports[1], state.advertisement())
                        await sock.sendto(encode_frame(frame), (ldn.DEFAULT_BROADCAST, ldn.DISCOVERY_PORT))

            nursery.start_soon(advertise)
            ignored: collections.Counter[str] = collections.Counter()
            found = await ldn.scan(0.5, ignored=ignored)
        assert found == []
        assert ignored["bad_port"] == 5


@pytest.mark.parametrize("assigned", ["169.254.43.7", "169.254.42.1", "169.254.42.0", "169.254.42.255", "10.1.2.3"])
async def test_an_address_outside_the_network_from_its_host_is_refused(
    assigned: str, autojump_clock: trio.testing.MockClock
) -> None:
    """A hostile host answers the connect request with an address that is not a station's of its network (another
    network's, its own, the subnet's or broadcast address, not LDN at all).  Before, the station bound whatever it
    was given (an address of another network's station, the host's own) or failed with an error of another kind;
    now the join is refused at once (spec §7.1: the host is .1, stations .2 and up, in its 169.254.X.0/24)."""
    async with SimulatedNetwork() as net:
        net.install()
        state = ldn.LdnHostState(profile_for("5.29"), GAME_KEY, rng=random.Random(5), subnet=42)
        with trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM) as control:
            await control.bind((FORGER, 0))
            found = ldn.FoundNetwork(state.advertisement(), ldn.PIA_PORT, control.getsockname(), 0.0)

            async def answer() -> None:
                while True:
                    data, addr = await control.recvfrom(2048)
                    frame = decode_frame(data)
                    if isinstance(frame, ConnectRequest):
                        await control.sendto(encode_frame(ConnectReply(frame.token, 0, assigned, bytes(6))), addr)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(answer)
                start = trio.current_time()
                with pytest.raises(ldn.JoinRefused, match="not a station address of"):
                    async with ldn.open_ldn_station(found, NodeConfig(version="5.29", seed=4), GAME_KEY):
                        pass
                assert trio.current_time() - start < 1
                nursery.cancel_scope.cancel()


@pytest.mark.parametrize("application_data", [b"", b"\x01\x02\x03\x04\x00\x00\x00\x00\x08\x63", bytes(384)])
async def test_an_advert_whose_application_data_does_not_decode_is_a_network_that_does_not_fit(
    application_data: bytes, autojump_clock: trio.testing.MockClock
) -> None:
    """A network advertising application data that Pia's header rule cannot read for the station's version (spec
    §7.2: too short, a header size no version uses): before, the join ended in a DecodeError (a ValueError, read by
    the command line as a bad flag of the user's); now it is the ConfigError of a network that does not fit these
    settings, raised before any connect request is sent."""
    async with SimulatedNetwork() as net:
        net.install()
        state = ldn.LdnHostState(profile_for("5.29"), GAME_KEY, rng=random.Random(5), subnet=42)
        with trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM) as control:
            await control.bind((FORGER, 0))
            adv = attrs.evolve(state.advertisement(), application_data=application_data)
            found = ldn.FoundNetwork(adv, ldn.PIA_PORT, control.getsockname(), 0.0)
            with pytest.raises(ConfigError, match="application data"):
                async with ldn.open_ldn_station(found, NodeConfig(version="5.29", seed=4), GAME_KEY):
                    pass
            assert control.statistics().queued == 0


async def test_what_a_joined_station_hears_and_does_not_learn_from_is_counted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A joined station keeps listening to the discovery channel (spec §7.1).  Frames that are no advertisement,
    and adverts of another network, went by without a trace; now each is counted by why (``not_an_advertisement``,
    ``other_network``), as its host's adverts from elsewhere already were (``other_source``)."""
    async with SimulatedNetwork() as net:
        net.install()
        cfg = ldn.LdnHostConfig(node=NodeConfig(version="5.29", network="ldn", seed=3), game_key=GAME_KEY)
        async with ldn.open_ldn_host(cfg) as host:
            found = (await ldn.scan(0.5, first=True))[0]
            async with ldn.open_ldn_station(found, NodeConfig(version="5.29", seed=4), GAME_KEY) as one:
                await trio.sleep(0.3)  # (its listening task is started, not yet running, when the join returns)
                other = attrs.evolve(host.state.advertisement(), ssid=bytes(16))
                with trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM) as sock:
                    sock.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_BROADCAST, 1)
                    await sock.bind((FORGER, 0))
                    for _ in range(3):
                        await sock.sendto(encode_frame(ConnectRequest(b"y" * 8, "lost")), cfg.discovery)
                        await sock.sendto(encode_frame(AdvertFrame(49152, 40000, other)), cfg.discovery)
                await trio.sleep(0.3)
                assert one.ignored["not_an_advertisement"] == 3
                assert one.ignored["other_network"] == 3
