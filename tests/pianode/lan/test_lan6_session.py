"""LAN sessions of Pia 6.16-6.30 on loopback: a node publishes a LanNetworkProperty, joiners browse with the
LanSearchNetworkSetting and the version-3 challenge, take the key from the published param and join.

Each test uses its own 127.x.y.0/24 block and browse port (the default 6.x port 35000 is only checked in the
test that asks where the responder listens by default).
"""

from __future__ import annotations

import pytest
import trio

from pianode.lan import property6
from pianode.lan.discovery import DEFAULT_BROADCAST, browse
from pianode.lan.session import form_lan_mesh, start_lan_host, start_lan_join
from pianode.mesh.config import NodeConfig
from protocols.pia.keys import lan6_network_id
from protocols.pia.lan import BROWSE_PORT_6, BrowseRequest, LanNetworkProperty, browse_port, lan_session_key
from protocols.pia.lan_criteria import LanSearchNetworkSetting
from protocols.pia.versions import profile_for

from loopback_addresses import free_port, loopback_block

KEY = bytes.fromhex("667c18475889faab61f93ef1da180971")  # Super Mario Maker 2 (spec §3.6)


def _config(ip: str, version: str = "6.20") -> NodeConfig:
    return NodeConfig(version=version, bind=(ip, 0), station_timeout=3.0)


@pytest.mark.parametrize(("version", "opened", "vacant"), [("6.20", 0x4, 0x8), ("6.26", 0x4, 0x8), ("6.29", 0x8, 0x10)])
def test_search_setting_asks_for_opened_sessions_with_a_free_slot(version: str, opened: int, vacant: int) -> None:
    profile = profile_for(version)
    setting = property6.search_setting(profile)
    assert setting.flags == opened | vacant  # spec §6.2, bits shifted in 6.29-6.30
    assert (setting.title_id is None) == (profile.version < (6, 23))
    prop = property6.host_property(profile, ip="127.0.0.2", port=49152, max_stations=2, name="h",
                                   session_key_param=bytes(32), random32=7)  # fmt: skip
    assert setting.matches(prop, profile)
    assert not setting.matches(property6.with_stations(prop, [1, 2]), profile)  # full
    assert LanSearchNetworkSetting(flags=0).matches(property6.with_stations(prop, [1, 2]), profile)


def test_host_property_publishes_the_param_and_the_6x_network_id() -> None:
    profile = profile_for("6.30")
    param = bytes(range(32))
    prop = property6.host_property(profile, ip="192.168.1.5", port=49153, max_stations=8, name="lead",
                                   session_key_param=param, random32=0xDEADBEEF, application_version=0x1234)  # fmt: skip
    again = LanNetworkProperty.decode(prop.encode(profile), profile)
    assert again == prop
    assert prop.network_id == lan6_network_id("192.168.1.5", 0xDEADBEEF) == 0xDEADBEEF_C0A80105  # (random32 << 32) | IPv4
    assert prop.session_key_param == param and prop.session_key(KEY) == lan_session_key(KEY, param)
    assert (prop.system_communication_version, prop.application_communication_version) == (10, 0x1234)
    assert (prop.host_ip, prop.host_port, prop.current_stations, prop.max_stations) == ("192.168.1.5", 49153, 1, 8)
    three = property6.with_stations(prop, range(3))
    assert (three.current_stations, three.current_players, three.property_data[0x16]) == (3, 3, 3)


def test_6x_browse_listens_on_35000() -> None:
    assert browse_port(profile_for("6.20")) == BROWSE_PORT_6 == 35000


@pytest.mark.parametrize("version", ["6.16", "6.23", "6.30"])
async def test_joiners_find_the_6x_host_by_browsing_join_and_are_published(version: str) -> None:
    port, net = free_port(), loopback_block()
    broadcast = (DEFAULT_BROADCAST, port)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            host = await start_lan_host(nursery, _config(net + "2", version), KEY, browse_bind=("0.0.0.0", port),
                                        refresh_interval=0.05, name="lead")  # fmt: skip
            info = host.info
            assert isinstance(info, LanNetworkProperty)
            assert info.network_id & 0xFFFFFFFF == int.from_bytes(bytes(map(int, (net + "2").split("."))), "big")
            assert (info.host_ip, info.host_port) == host.node.address
            joins = [await start_lan_join(nursery, _config(net + str(3 + i), version), KEY, broadcast=broadcast)
                     for i in range(2)]  # fmt: skip
            nodes = [host.node, *(j.node for j in joins)]
            for node in nodes:
                assert await node.wait_connected(2, timeout=10)
            for j in joins:
                assert j.found.network_id == host.network_id
                assert j.found.session_key == host.session_key == lan_session_key(KEY, host.session_key_param)
                assert isinstance(j.info, LanNetworkProperty) and j.info.host_name == "lead"
            await trio.sleep(0.2)
            published = host.info
            assert isinstance(published, LanNetworkProperty)
            assert (published.current_stations, published.current_players) == (3, 3)
            # A browser now sees three stations (max 4 by default: one slot left).
            found = await browse(profile_for(version), KEY, broadcast=broadcast, bind=(net + "9", 0), timeout=0.5)
            assert [f.info.current_stations for f in found] == [3]  # type: ignore[union-attr]
            await nodes[1].send(0, b"to the host", reliable=True)
            nursery.cancel_scope.cancel()


async def test_form_lan_mesh_6x_browses_with_the_6x_request_and_a_wrong_game_key_finds_nothing() -> None:
    port, net = free_port(), loopback_block()
    seen: list[bytes] = []

    def tap(data: bytes, src: tuple[str, int], dst: tuple[str, int], now: float) -> None:
        if dst[1] == port:
            seen.append(data)

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            configs = [_config(net + str(2 + i)) for i in range(3)]
            mesh = await form_lan_mesh(nursery, configs, KEY, browse_port_number=port, tap=tap)
            assert len(mesh.nodes) == 3 and not mesh.failures
            request = BrowseRequest.decode(seen[0], profile_for("6.20"))
            assert isinstance(request.search, LanSearchNetworkSetting)
            assert request.challenge is not None and request.challenge.version == 3
            other = await start_lan_host(nursery, _config(net + "20"), bytes(16), browse_bind=("0.0.0.0", port))
            with pytest.raises(Exception, match="no answer"):
                await start_lan_join(nursery, _config(net + "21"), bytes(range(16)), broadcast=(DEFAULT_BROADCAST, port),
                                     network_id=other.network_id, browse_timeout=1.0)  # fmt: skip
            nursery.cancel_scope.cancel()
